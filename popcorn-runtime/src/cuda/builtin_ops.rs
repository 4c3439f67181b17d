//! The non-library, non-fused steps and helpers, on kernels-gen's builtin kernels: fill,
//! symmetrize, diagonal, cluster counts and the CSR selection matrix (plain or weighted). One small kernel of our
//! own converts `u32` counts to floats (kernels-gen has none).

use crate::cuda::driver::{self, KernelArg};
use crate::cuda::memory::GrowBuffer;
use crate::cuda::nvrtc::KernelCache;
use crate::error::RuntimeError;
use cudarc::driver::CudaStream;
use kernel_ir::ScalarType;
use kernels_gen::builtins;
use std::sync::Arc;

/// The backend's own kernel: `out[i] = (T)in[i]` for `u32` input.
const U32_TO_FLOAT: &str = r#"// popcorn runtime kernel {NAME}: out[i] = ({T})in[i] for 0 <= i < len.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long len,
    const unsigned int* __restrict__ in,
    {T}* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         i < len; i += stride) {
        out[i] = ({T})in[i];
    }
}
"#;

/// Entry-point name of the conversion kernel for `dtype`.
fn u32_to_float_name(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "pk_rt_u32_to_f32",
        ScalarType::F64 => "pk_rt_u32_to_f64",
    }
}

/// The conversion kernel's source.
fn u32_to_float_source(dtype: ScalarType) -> String {
    U32_TO_FLOAT
        .replace("{T}", kernels_gen::CType::c_name(dtype))
        .replace("{NAME}", u32_to_float_name(dtype))
}

/// The builtin kernels the backend launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fill,
    Symmetrize,
    Diag,
    Histogram,
    SelectionScan,
    SelectionChunkCounts,
    SelectionChunkOffsets,
    SelectionScatter,
    SelectionOneBlock,
    SelectionWeigh,
    LabelSums,
    SmallCounts,
    PermuteRows,
    ClampLabels,
    CsrScatter,
    CsrRowNorms,
    RoundTf32,
    Monomials,
    SplitTf32,
    PackBf16,
    PackF16,
}

impl Kind {
    #[cfg(test)]
    const ALL: [Kind; 21] = [
        Kind::Fill,
        Kind::Symmetrize,
        Kind::Diag,
        Kind::Histogram,
        Kind::SelectionScan,
        Kind::SelectionChunkCounts,
        Kind::SelectionChunkOffsets,
        Kind::SelectionScatter,
        Kind::SelectionOneBlock,
        Kind::SelectionWeigh,
        Kind::LabelSums,
        Kind::SmallCounts,
        Kind::PermuteRows,
        Kind::ClampLabels,
        Kind::CsrScatter,
        Kind::CsrRowNorms,
        Kind::RoundTf32,
        Kind::Monomials,
        Kind::SplitTf32,
        Kind::PackBf16,
        Kind::PackF16,
    ];

    /// The entry-point name (known without building the source, so launches allocate no
    /// source text once the kernel is loaded; a test checks it against kernels-gen).
    fn name(self, dtype: ScalarType) -> &'static str {
        let f32 = dtype == ScalarType::F32;
        match self {
            Kind::Fill => {
                if f32 {
                    "pk_fill_f32"
                } else {
                    "pk_fill_f64"
                }
            }
            Kind::Symmetrize => {
                if f32 {
                    "pk_symmetrize_lower_to_upper_f32"
                } else {
                    "pk_symmetrize_lower_to_upper_f64"
                }
            }
            Kind::Diag => {
                if f32 {
                    "pk_diag_f32"
                } else {
                    "pk_diag_f64"
                }
            }
            Kind::Histogram => "pk_histogram",
            Kind::PermuteRows => "pk_permute_rows",
            Kind::ClampLabels => "pk_clamp_labels",
            Kind::RoundTf32 => "pk_round_tf32",
            Kind::SplitTf32 => "pk_split_tf32",
            Kind::PackBf16 => builtins::pack_half_name(kernel_ir::Half::Bf16),
            Kind::PackF16 => builtins::pack_half_name(kernel_ir::Half::F16),
            Kind::SelectionScan => "pk_selection_scan",
            Kind::SelectionChunkCounts => "pk_selection_chunk_counts",
            Kind::SelectionChunkOffsets => "pk_selection_chunk_offsets",
            Kind::SelectionScatter => {
                if f32 {
                    "pk_selection_scatter_f32"
                } else {
                    "pk_selection_scatter_f64"
                }
            }
            Kind::SelectionOneBlock => {
                if f32 {
                    "pk_selection_one_block_f32"
                } else {
                    "pk_selection_one_block_f64"
                }
            }
            Kind::SelectionWeigh => {
                if f32 {
                    "pk_selection_weigh_f32"
                } else {
                    "pk_selection_weigh_f64"
                }
            }
            Kind::LabelSums => {
                if f32 {
                    "pk_label_sums_f32"
                } else {
                    "pk_label_sums_f64"
                }
            }
            Kind::SmallCounts => {
                if f32 {
                    "pk_small_counts_f32"
                } else {
                    "pk_small_counts_f64"
                }
            }
            Kind::CsrScatter => {
                if f32 {
                    "pk_csr_scatter_f32"
                } else {
                    "pk_csr_scatter_f64"
                }
            }
            Kind::CsrRowNorms => {
                if f32 {
                    "pk_csr_row_norms_f32"
                } else {
                    "pk_csr_row_norms_f64"
                }
            }
            Kind::Monomials => {
                if f32 {
                    "pk_monomials_f32"
                } else {
                    "pk_monomials_f64"
                }
            }
        }
    }

    /// The kernel from kernels-gen.
    fn kernel(self, dtype: ScalarType) -> builtins::BuiltinKernel {
        match self {
            Kind::Fill => builtins::fill(dtype),
            Kind::Symmetrize => builtins::symmetrize_lower_to_upper(dtype),
            Kind::Diag => builtins::diag(dtype),
            Kind::Histogram => builtins::histogram(),
            Kind::PermuteRows => builtins::permute_rows(),
            Kind::ClampLabels => builtins::clamp_labels(),
            Kind::RoundTf32 => builtins::round_tf32(),
            Kind::SplitTf32 => builtins::split_tf32(),
            Kind::PackBf16 => builtins::pack_half(kernel_ir::Half::Bf16),
            Kind::PackF16 => builtins::pack_half(kernel_ir::Half::F16),
            Kind::SelectionScan => builtins::selection_scan(),
            Kind::SelectionChunkCounts => builtins::selection_chunk_counts(),
            Kind::SelectionChunkOffsets => builtins::selection_chunk_offsets(),
            Kind::SelectionScatter => builtins::selection_scatter(dtype),
            Kind::SelectionOneBlock => builtins::selection_one_block(dtype),
            Kind::SelectionWeigh => builtins::selection_weigh(dtype),
            Kind::LabelSums => builtins::label_sums(dtype),
            Kind::SmallCounts => builtins::small_counts(dtype),
            Kind::CsrScatter => builtins::csr_scatter(dtype),
            Kind::CsrRowNorms => builtins::csr_row_norms(dtype),
            Kind::Monomials => builtins::monomials(dtype),
        }
    }
}

/// Launches builtin kernels on one stream.
pub(crate) struct Builtins<'a> {
    pub(crate) kernels: &'a KernelCache,
    pub(crate) stream: &'a Arc<CudaStream>,
}

/// Scratch buffers of the counting and selection steps, reused across calls.
#[derive(Default)]
pub(crate) struct CountScratch {
    counts: GrowBuffer,
    workspace: GrowBuffer,
    /// The selection's clamped labels (`n` words).
    labels: GrowBuffer,
}

impl Builtins<'_> {
    /// Launches a builtin kernel (compiled on first use).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    unsafe fn run(
        &self,
        kind: Kind,
        dtype: ScalarType,
        dims: kernels_gen::LaunchDims,
        args: &mut [KernelArg],
    ) -> Result<(), RuntimeError> {
        let name = kind.name(dtype);
        let f = self.kernels.function(name, || kind.kernel(dtype).source)?;
        // SAFETY: `args` match the builtin kernel's parameters (each caller builds them in the
        // kernel's order), and the addresses hold what it touches, as the contract says.
        unsafe { driver::launch(self.stream, &f, name, dims, args) }
    }

    /// Sets `len` 32-bit words at `ptr` to `bits`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn memset32(
        &self,
        ptr: u64,
        bits: u32,
        len: usize,
    ) -> Result<(), RuntimeError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: as this function's contract says.
        unsafe { driver::memset32(self.stream, ptr, bits, len) }
    }

    /// Sets `len` 16-bit words at `ptr` to `bits`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// at least `len` 16-bit words.
    pub(crate) unsafe fn memset16(
        &self,
        ptr: u64,
        bits: u16,
        len: usize,
    ) -> Result<(), RuntimeError> {
        // SAFETY: as this function's contract says.
        unsafe { driver::memset16(self.stream, ptr, bits, len) }
    }

    /// Fills `len` doubles at `ptr` with `value`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn fill_f64(
        &self,
        ptr: u64,
        len: usize,
        value: f64,
    ) -> Result<(), RuntimeError> {
        if len == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(len)?,
            KernelArg::F64(value),
            KernelArg::Ptr(ptr),
        ];
        self.run(
            Kind::Fill,
            ScalarType::F64,
            builtins::linear_grid_block(len as u64),
            &mut args,
        )
    }

    /// Mirrors the lower triangle of the row-major `n x n` matrix at `ptr` into its upper one.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn symmetrize(
        &self,
        dtype: ScalarType,
        ptr: u64,
        n: usize,
    ) -> Result<(), RuntimeError> {
        if n < 2 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::Ptr(ptr),
            KernelArg::size(n)?,
        ];
        self.run(
            Kind::Symmetrize,
            dtype,
            builtins::symmetrize_grid_block(n as u64),
            &mut args,
        )
    }

    /// Rows permuted by a selection's full order `col_idx[0..rows]` (a permutation of
    /// `0..rows`): forward, row `p` of `dst` = row `col_idx[p]` of `src`; inverse, row
    /// `col_idx[p]` of `dst` = row `p` of `src`. Rows of `words` 32-bit words, `ld` words apart
    /// (`src_ld` and `dst_ld`).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes; `col_idx` holds `rows` entries, each
    /// row index below `rows` once; `src` and `dst` do not overlap.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn permute_rows(
        &self,
        rows: usize,
        words: usize,
        col_idx: u64,
        src: u64,
        src_ld: usize,
        dst: u64,
        dst_ld: usize,
        inverse: bool,
    ) -> Result<(), RuntimeError> {
        let total = rows.saturating_mul(words);
        if total == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(rows)?,
            KernelArg::size(words)?,
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(src),
            KernelArg::size(src_ld)?,
            KernelArg::Ptr(dst),
            KernelArg::size(dst_ld)?,
            KernelArg::U32(u32::from(inverse)),
        ];
        self.run(
            Kind::PermuteRows,
            ScalarType::F32,
            builtins::linear_grid_block(total as u64),
            &mut args,
        )
    }

    /// `out[c]` = the sum of `x[i]` over the `i < n` with `labels[i] == c`, for `c < k`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn label_sums(
        &self,
        dtype: ScalarType,
        x: u64,
        labels: u64,
        n: usize,
        k: usize,
        out: u64,
    ) -> Result<(), RuntimeError> {
        if k == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::size(k)?,
            KernelArg::Ptr(x),
            KernelArg::Ptr(labels),
            KernelArg::Ptr(out),
        ];
        self.run(
            Kind::LabelSums,
            dtype,
            builtins::label_sums_grid_block(k as u64),
            &mut args,
        )
    }

    /// Weighs the first `k` rows of a selection matrix [`Builtins::selection`] built:
    /// `values[p] = weights[col_idx[p]] / W_c` for the entries of row `c`, `W_c` their weights'
    /// sum (0 where it is 0).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream:
    /// `row_ptr` `k + 1` offsets of a selection matrix, `col_idx` and `values` its entries,
    /// `weights` one weight per column.
    pub(crate) unsafe fn selection_weigh(
        &self,
        dtype: ScalarType,
        k: usize,
        row_ptr: u64,
        col_idx: u64,
        weights: u64,
        values: u64,
    ) -> Result<(), RuntimeError> {
        if k == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(k)?,
            KernelArg::Ptr(row_ptr),
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(weights),
            KernelArg::Ptr(values),
        ];
        self.run(
            Kind::SelectionWeigh,
            dtype,
            builtins::selection_weigh_grid_block(k as u64),
            &mut args,
        )
    }

    /// The `rows x cols` matrix at `input.0` (leading dimension `input.1`) rounded to TF32 into
    /// `out.0` (leading dimension `out.1 >= cols`, its columns past `cols` set to 0).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn round_tf32(
        &self,
        input: (u64, usize),
        (rows, cols): (usize, usize),
        out: (u64, usize),
    ) -> Result<(), RuntimeError> {
        // SAFETY: as this function's contract says.
        unsafe { self.run_rows(Kind::RoundTf32, input, (rows, cols), out, None) }
    }

    /// Launches one of the kernels that copy an f32 matrix row by row, a warp per row (TF32
    /// rounding, 16-bit packing, 3xTF32 splitting), whose parameters are `(rows, cols, ld_in,
    /// ld_out, [extra,] in, out)`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    unsafe fn run_rows(
        &self,
        kind: Kind,
        input: (u64, usize),
        (rows, cols): (usize, usize),
        out: (u64, usize),
        extra: Option<KernelArg>,
    ) -> Result<(), RuntimeError> {
        if rows == 0 {
            return Ok(());
        }
        let mut args = vec![
            KernelArg::size(rows)?,
            KernelArg::size(cols)?,
            KernelArg::size(input.1)?,
            KernelArg::size(out.1)?,
        ];
        args.extend(extra);
        args.extend([KernelArg::Ptr(input.0), KernelArg::Ptr(out.0)]);
        // SAFETY: `args` follow the kernel's parameters; the addresses hold what it touches,
        // as this function's contract says.
        unsafe {
            self.run(
                kind,
                ScalarType::F32,
                builtins::linear_grid_block(32 * rows as u64),
                &mut args,
            )
        }
    }

    /// The `rows x cols` f32 matrix at `input.0` (leading dimension `input.1`) rounded to
    /// `half` and packed in pairs into `out.0`: one 32-bit word a pair (the even column in the
    /// low half), rows `out.1 >= cols.div_ceil(2)` words apart, the halves past `cols` set to 0
    /// ([`kernels_gen::builtins::pack_half`]).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn pack_half(
        &self,
        half: kernel_ir::Half,
        input: (u64, usize),
        (rows, cols): (usize, usize),
        out: (u64, usize),
    ) -> Result<(), RuntimeError> {
        if input.1 < cols || out.1 < cols.div_ceil(2) {
            return Err(crate::cuda::errors::invalid(format!(
                "rows of {} values read or {} packed words written cannot hold {cols} values",
                input.1, out.1
            )));
        }
        let kind = match half {
            kernel_ir::Half::Bf16 => Kind::PackBf16,
            kernel_ir::Half::F16 => Kind::PackF16,
        };
        // SAFETY: as this function's contract says.
        unsafe { self.run_rows(kind, input, (rows, cols), out, None) }
    }

    /// The `rows x cols` f32 matrix at `input.0` (leading dimension `input.1`) split for a
    /// 3xTF32 product into `out.0` (leading dimension `out.1 >= 3 cols`): each value `x` as `h =
    /// tf32(x)` and `l = tf32(x - h)`, a row as `[h, h, l]` (`right` false) or `[h, l, h]`
    /// (`right` true), the values past `3 cols` set to 0 ([`kernels_gen::builtins::split_tf32`]).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn split_tf32(
        &self,
        input: (u64, usize),
        (rows, cols): (usize, usize),
        out: (u64, usize),
        right: bool,
    ) -> Result<(), RuntimeError> {
        if input.1 < cols || out.1 < 3 * cols {
            return Err(crate::cuda::errors::invalid(format!(
                "rows of {} values read or {} written cannot hold {cols} values (three times)",
                input.1, out.1
            )));
        }
        let order = Some(KernelArg::U32(u32::from(right)));
        // SAFETY: as this function's contract says.
        unsafe { self.run_rows(Kind::SplitTf32, input, (rows, cols), out, order) }
    }

    /// `out[i] = a[i * lda + i]` for `i < n`: `a` of `dtype`, or held in 16 bits (`held`, then
    /// widened to `f32`).
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn diag(
        &self,
        dtype: ScalarType,
        held: Option<kernel_ir::Half>,
        a: u64,
        n: usize,
        lda: usize,
        out: u64,
    ) -> Result<(), RuntimeError> {
        if n == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::Ptr(a),
            KernelArg::size(lda)?,
            KernelArg::Ptr(out),
        ];
        let dims = builtins::linear_grid_block(n as u64);
        let Some(half) = held else {
            return self.run(Kind::Diag, dtype, dims, &mut args);
        };
        let name = builtins::diag_half_name(half);
        let f = self
            .kernels
            .function(name, || builtins::diag_half(half).source)?;
        // SAFETY: `args` follow the kernel's parameters; the addresses hold what it touches,
        // as this function's contract says.
        unsafe { driver::launch(self.stream, &f, name, dims, &mut args) }
    }

    /// `out = monomials(x, a, b, c)`: `x` of `n x d` values (leading dimension `d`), the
    /// `f` column indices `a` and `b` and coefficients `c`, `out` of `n x f` values.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn monomials(
        &self,
        dtype: ScalarType,
        (n, d, x): (usize, usize, u64),
        (a, b, c, f): (u64, u64, u64, usize),
        out: u64,
    ) -> Result<(), RuntimeError> {
        if n == 0 || f == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::size(d)?,
            KernelArg::Ptr(x),
            KernelArg::size(d)?,
            KernelArg::Ptr(a),
            KernelArg::Ptr(b),
            KernelArg::Ptr(c),
            KernelArg::size(f)?,
            KernelArg::Ptr(out),
        ];
        let dims = builtins::monomials_grid_block(n as u64, f as u64);
        // SAFETY: `args` follow the kernel's parameters; the addresses hold what it touches,
        // as this function's contract says.
        unsafe { self.run(Kind::Monomials, dtype, dims, &mut args) }
    }

    /// Scatters a CSR matrix of `rows` rows into the zeroed dense `out` (leading dimension
    /// `ld`), transposed with `transpose`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes: a valid CSR matrix of `rows` rows whose
    /// column indices, and `out` holding every entry they address.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn csr_scatter(
        &self,
        dtype: ScalarType,
        rows: usize,
        (row_ptr, col_idx, values): (u64, u64, u64),
        transpose: bool,
        out: u64,
        ld: usize,
    ) -> Result<(), RuntimeError> {
        if rows == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(rows)?,
            KernelArg::Ptr(row_ptr),
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(values),
            KernelArg::U32(u32::from(transpose)),
            KernelArg::Ptr(out),
            KernelArg::size(ld)?,
        ];
        // SAFETY: the arguments follow `csr_scatter`'s parameters; the addresses hold what it
        // touches, as this function's contract says.
        unsafe {
            self.run(
                Kind::CsrScatter,
                dtype,
                builtins::linear_grid_block(rows as u64),
                &mut args,
            )
        }
    }

    /// The squared norm of each of the `rows` rows of a CSR matrix into `out`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream: a valid
    /// CSR matrix of `rows` rows, and `out` holding `rows` values.
    pub(crate) unsafe fn csr_row_norms(
        &self,
        dtype: ScalarType,
        rows: usize,
        (row_ptr, col_idx, values): (u64, u64, u64),
        out: u64,
    ) -> Result<(), RuntimeError> {
        if rows == 0 {
            return Ok(());
        }
        let mut args = [
            KernelArg::size(rows)?,
            KernelArg::Ptr(row_ptr),
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(values),
            KernelArg::Ptr(out),
        ];
        // SAFETY: the arguments follow `csr_row_norms`'s parameters; the addresses hold what
        // it touches, as this function's contract says.
        unsafe {
            self.run(
                Kind::CsrRowNorms,
                dtype,
                builtins::linear_grid_block(rows as u64),
                &mut args,
            )
        }
    }

    /// Cluster sizes of `n` labels into the `u32` scratch (`k` entries); returns its address.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    unsafe fn histogram(
        &self,
        scratch: &mut CountScratch,
        labels: u64,
        n: usize,
        k: usize,
    ) -> Result<u64, RuntimeError> {
        let counts = scratch
            .counts
            .ensure(self.stream, k * 4, "cluster counts")?;
        self.memset32(counts, 0, k)?;
        if n > 0 && k > 0 {
            let mut args = [
                KernelArg::size(n)?,
                KernelArg::Ptr(labels),
                KernelArg::size(k)?,
                KernelArg::Ptr(counts),
            ];
            self.run(
                Kind::Histogram,
                ScalarType::F32,
                builtins::histogram_grid_block(n as u64),
                &mut args,
            )?;
        }
        Ok(counts)
    }

    /// Cluster sizes as floats: `out[c]` = number of labels equal to `c`, for `c < k`.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes.
    pub(crate) unsafe fn counts(
        &self,
        dtype: ScalarType,
        scratch: &mut CountScratch,
        labels: u64,
        n: usize,
        k: usize,
        out: u64,
    ) -> Result<(), RuntimeError> {
        if k == 0 {
            return Ok(());
        }
        if n as u64 <= builtins::SMALL_COUNTS_MAX_N {
            // One block: no zeroing launch, no global atomics on few addresses (BENCHMARKS.md,
            // run 5).
            let mut args = [
                KernelArg::size(n)?,
                KernelArg::Ptr(labels),
                KernelArg::size(k)?,
                KernelArg::Ptr(out),
            ];
            let dims = ((1, 1, 1), (builtins::SMALL_COUNTS_THREADS, 1, 1), 0);
            return self.run(Kind::SmallCounts, dtype, dims, &mut args);
        }
        let counts = self.histogram(scratch, labels, n, k)?;
        let name = u32_to_float_name(dtype);
        let f = self.kernels.function(name, || u32_to_float_source(dtype))?;
        let mut args = [
            KernelArg::size(k)?,
            KernelArg::Ptr(counts),
            KernelArg::Ptr(out),
        ];
        // SAFETY: the arguments match the conversion kernel's parameters; `counts` holds `k`
        // words of scratch and `out` `k` values, as this function's contract says.
        unsafe {
            driver::launch(
                self.stream,
                &f,
                name,
                builtins::linear_grid_block(k as u64),
                &mut args,
            )
        }
    }

    /// The selection matrix `V` (`k x n` CSR, `V[c, p] = 1/|c|` where `labels[p] == c`):
    /// row offsets, column indices in ascending order per row, values. Empty clusters have
    /// empty rows. Labels `>= k` are in no row (`row_ptr[k]` counts the others); those points
    /// follow in `col_idx[row_ptr[k]..n]`, ascending (values there `1 /` their number), so
    /// `col_idx[..n]` is a permutation of `0..n`.
    ///
    /// Few points ([`builtins::selection_in_one_block`]) take one launch,
    /// [`builtins::selection_one_block`]. Otherwise the labels are clamped to `min(label, k)`
    /// into scratch, and the four steps of [`builtins::selection_scatter`] run with `k + 1`
    /// clusters (the last one the points outside), except the scan of row offsets, which runs
    /// over the first `k` sizes: it writes `row_ptr`'s `k + 1` entries, the last being both
    /// `nnz` and where the extra cluster starts. Both give the same matrix, bit for bit.
    ///
    /// # Safety
    /// Every address is device memory of the current context usable on this stream, holding
    /// what the kernel reads and writes at these sizes: `labels` `n` labels, `row_ptr` `k + 1`
    /// entries, `col_idx` and `values` `n` each.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn selection(
        &self,
        dtype: ScalarType,
        scratch: &mut CountScratch,
        labels: u64,
        n: usize,
        k: usize,
        row_ptr: u64,
        col_idx: u64,
        values: u64,
    ) -> Result<(), RuntimeError> {
        if n > 0 && builtins::selection_in_one_block(n as u64, k as u64) {
            // SAFETY: this function's contract.
            unsafe { self.selection_one_block(dtype, labels, n, k, row_ptr, col_idx, values) }
        } else {
            // SAFETY: this function's contract.
            unsafe {
                self.selection_chunked(dtype, scratch, labels, n, k, row_ptr, col_idx, values)
            }
        }
    }

    /// [`Self::selection`] by [`builtins::selection_one_block`], whatever `n` and `k` (the
    /// caller checks [`builtins::selection_in_one_block`]).
    ///
    /// # Safety
    /// As [`Self::selection`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn selection_one_block(
        &self,
        dtype: ScalarType,
        labels: u64,
        n: usize,
        k: usize,
        row_ptr: u64,
        col_idx: u64,
        values: u64,
    ) -> Result<(), RuntimeError> {
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::size(k)?,
            KernelArg::Ptr(labels),
            KernelArg::Ptr(row_ptr),
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(values),
        ];
        // SAFETY: `labels` holds `n` labels, `row_ptr` `k + 1` entries, `col_idx` and `values`
        // `n` each (this function's contract); the kernel writes within those.
        unsafe {
            self.run(
                Kind::SelectionOneBlock,
                dtype,
                builtins::selection_one_block_grid_block(k as u64),
                &mut args,
            )
        }
    }

    /// [`Self::selection`] by the chunked kernels, whatever `n` and `k`.
    ///
    /// # Safety
    /// As [`Self::selection`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn selection_chunked(
        &self,
        dtype: ScalarType,
        scratch: &mut CountScratch,
        labels: u64,
        n: usize,
        k: usize,
        row_ptr: u64,
        col_idx: u64,
        values: u64,
    ) -> Result<(), RuntimeError> {
        let too_many = || RuntimeError::InvalidData(format!("{k} clusters are too many"));
        // Clusters of the builder: the k clusters and the points outside them.
        let k1 = k.checked_add(1).ok_or_else(too_many)?;
        let count_bytes = k1.checked_mul(4).ok_or_else(too_many)?;
        let counts = scratch
            .counts
            .ensure(self.stream, count_bytes, "cluster counts")?;
        let scan = |counts: u64| -> Result<(), RuntimeError> {
            let mut args = [
                KernelArg::size(k)?,
                KernelArg::Ptr(counts),
                KernelArg::Ptr(row_ptr),
            ];
            // SAFETY: `counts` holds at least `k` sizes and `row_ptr` `k + 1` offsets, as this
            // function's contract says.
            unsafe {
                self.run(
                    Kind::SelectionScan,
                    dtype,
                    builtins::selection_scan_grid_block(),
                    &mut args,
                )
            }
        };
        if n == 0 {
            // SAFETY: `counts` holds `k + 1` words.
            unsafe { self.memset32(counts, 0, k)? };
            return scan(counts);
        }
        let label_bytes = n
            .checked_mul(4)
            .ok_or_else(|| RuntimeError::InvalidData(format!("{n} labels are too many")))?;
        let clamped = scratch
            .labels
            .ensure(self.stream, label_bytes, "clamped labels")?;
        let layout = builtins::selection_layout(n as u64, k1 as u64);
        let ws_ints = usize::try_from(layout.workspace_ints).map_err(|_| {
            RuntimeError::InvalidData("the selection workspace does not fit in memory".into())
        })?;
        let ws_bytes = ws_ints.checked_mul(4).ok_or_else(|| {
            RuntimeError::InvalidData("the selection workspace does not fit in memory".into())
        })?;
        let ws = scratch
            .workspace
            .ensure(self.stream, ws_bytes, "selection workspace")?;
        let chunk = i64::try_from(layout.chunk)
            .map_err(|_| RuntimeError::InvalidData("selection chunk too large".into()))?;
        let chunks = i64::try_from(layout.chunks)
            .map_err(|_| RuntimeError::InvalidData("too many selection chunks".into()))?;
        let chunk_dims = builtins::selection_chunks_grid_block(layout.chunks, k1 as u64);

        // 0. Clamped labels; 1. per-chunk counts; 2. positions within each cluster and the
        // clusters' sizes; 3. row offsets (of the k clusters); 4. columns and values.
        let mut args = [
            KernelArg::size(n)?,
            KernelArg::Ptr(labels),
            KernelArg::size(k)?,
            KernelArg::Ptr(clamped),
        ];
        self.run(
            Kind::ClampLabels,
            dtype,
            builtins::linear_grid_block(n as u64),
            &mut args,
        )?;

        let mut args = [
            KernelArg::size(n)?,
            KernelArg::size(k1)?,
            KernelArg::I64(chunk),
            KernelArg::Ptr(clamped),
            KernelArg::Ptr(ws),
        ];
        self.run(Kind::SelectionChunkCounts, dtype, chunk_dims, &mut args)?;

        let mut args = [
            KernelArg::size(k1)?,
            KernelArg::I64(chunks),
            KernelArg::Ptr(counts),
            KernelArg::Ptr(ws),
        ];
        self.run(
            Kind::SelectionChunkOffsets,
            dtype,
            builtins::selection_chunk_offsets_grid_block(k1 as u64),
            &mut args,
        )?;
        scan(counts)?;

        let mut args = [
            KernelArg::size(n)?,
            KernelArg::size(k1)?,
            KernelArg::I64(chunk),
            KernelArg::Ptr(clamped),
            KernelArg::Ptr(counts),
            KernelArg::Ptr(row_ptr),
            KernelArg::Ptr(ws),
            KernelArg::Ptr(col_idx),
            KernelArg::Ptr(values),
        ];
        self.run(Kind::SelectionScatter, dtype, chunk_dims, &mut args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_match_kernels_gen() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            for kind in Kind::ALL {
                assert_eq!(
                    kind.name(dtype),
                    kind.kernel(dtype).name,
                    "{kind:?} {dtype:?}"
                );
            }
        }
    }

    #[test]
    fn conversion_kernel_is_instantiated_for_both_types() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let src = u32_to_float_source(dtype);
            assert!(!src.contains("{T}") && !src.contains("{NAME}"));
            assert!(src.contains(&format!(" {}(", u32_to_float_name(dtype))));
            assert!(src.contains(&format!(
                "{}* __restrict__ out",
                kernels_gen::CType::c_name(dtype)
            )));
        }
    }
}
