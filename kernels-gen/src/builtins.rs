//! Fixed (non-fused) CUDA kernels the runtime needs beside the generated ones.
//!
//! Each function returns a [`BuiltinKernel`]: the `extern "C"` entry-point name and a complete
//! source that NVRTC compiles without any `#include`. Kernels over values are instantiated for
//! a [`ScalarType`] by substituting the C type into the template; their names end in `_f32` or
//! `_f64`. Each function's documentation gives the exact parameter list (the launch ABI) and
//! names the helper that computes its launch dimensions.
//!
//! All size parameters are `long long`; all loops are grid-stride with 64-bit indices, so the
//! launch helpers cap grids at [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS) without limiting problem sizes. None of these
//! kernels uses floating-point atomics: every result is deterministic.

use crate::emit::{blocks_for, LaunchDims};
use kernel_ir::ScalarType;

pub use crate::builtin_kernel::BuiltinKernel;
use crate::builtin_kernel::{typed, untyped};

/// Threads per block of the element-wise builtins (see [`linear_grid_block`]).
pub const BUILTIN_BLOCK_THREADS: u32 = 256;
/// The selection builder's chunks are made large enough that its workspace stays within this
/// many `int`s (64 MiB) where possible (see [`selection_layout`]).
pub const SELECTION_WORKSPACE_CAP_INTS: u64 = 1 << 24;
/// Smallest number of points per chunk of the selection builder.
pub const SELECTION_MIN_CHUNK: u64 = 1024;
/// Warps per block of the selection builder's chunk kernels.
const SELECTION_WARPS_PER_BLOCK: u32 = 8;

/// Launch dimensions of the element-wise builtins over `len` items: 1-D blocks of
/// [`BUILTIN_BLOCK_THREADS`], at least one and at most [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS) blocks, no dynamic
/// shared memory. For [`diag`] (`len = n`), [`fill`] and [`fill_u32`] (`len`) and
/// [`histogram`] (`len = n`).
pub fn linear_grid_block(len: u64) -> LaunchDims {
    let grid = blocks_for(len, u64::from(BUILTIN_BLOCK_THREADS));
    ((grid, 1, 1), (BUILTIN_BLOCK_THREADS, 1, 1), 0)
}

/// Rows of `X` one block of [`monomials`] writes (its threads' feature columns, each row).
pub const MONOMIALS_ROWS_PER_BLOCK: u64 = 16;

/// Launch dimensions of [`monomials`] on `n` rows and `f` columns of the result: blocks of
/// [`BUILTIN_BLOCK_THREADS`] columns (grid x) by [`MONOMIALS_ROWS_PER_BLOCK`] rows (grid y,
/// capped; the kernel loops over the rest), no dynamic shared memory.
pub fn monomials_grid_block(n: u64, f: u64) -> LaunchDims {
    let cols = f.div_ceil(u64::from(BUILTIN_BLOCK_THREADS)).max(1);
    let cols = u32::try_from(cols).unwrap_or(u32::MAX);
    let rows = blocks_for(n, MONOMIALS_ROWS_PER_BLOCK);
    ((cols, rows, 1), (BUILTIN_BLOCK_THREADS, 1, 1), 0)
}

const MONOMIALS: &str = r#"// popcorn builtin kernel {NAME}: out[i * f + j] = c[j] * xe(i, a[j]) * xe(i, b[j]) with
// xe(i, col) = x[i * ldx + col] for col < d and 1 for col >= d (the column of ones; larger
// indices, which the planner's producers never give, read it too). Each thread keeps one
// column's terms and writes it for the block's rows: the stores are coalesced along j.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const long long d,
    const {T}* __restrict__ x,
    const long long ldx,
    const unsigned int* __restrict__ a,
    const unsigned int* __restrict__ b,
    const {T}* __restrict__ c,
    const long long f,
    {T}* __restrict__ out)
{
    const long long j = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (j >= f) {
        return;
    }
    const long long aj = (long long)a[j];
    const long long bj = (long long)b[j];
    const {T} cj = c[j];
    const long long rows = ROWS_PER_BLOCK;
    for (long long r0 = (long long)blockIdx.y * rows; r0 < n; r0 += (long long)gridDim.y * rows) {
        const long long end = r0 + rows < n ? r0 + rows : n;
        for (long long i = r0; i < end; ++i) {
            const {T}* xi = x + i * ldx;
            const {T} u = aj < d ? xi[aj] : ({T})1;
            const {T} v = bj < d ? xi[bj] : ({T})1;
            out[i * f + j] = cj * u * v;
        }
    }
}
"#;

/// Scaled products of two columns of `[X, 1]`: `out[i * f + j] = c[j] xe(i, a[j]) xe(i, b[j])`
/// for the `n x d` row-major `x` (leading dimension `ldx`), `xe = [x, 1]` (a column index of
/// `d` or more reads the ones), `out` `n x f` row-major.
///
/// Parameters: `(const long long n, const long long d, const T* x, const long long ldx,
/// const unsigned int* a, const unsigned int* b, const T* c, const long long f, T* out)`.
/// Launch: [`monomials_grid_block`]`(n, f)`.
pub fn monomials(dtype: ScalarType) -> BuiltinKernel {
    let template = MONOMIALS.replace("ROWS_PER_BLOCK", &MONOMIALS_ROWS_PER_BLOCK.to_string());
    typed("monomials", dtype, &template)
}

const DIAG: &str = r#"// popcorn builtin kernel {NAME}: out[i] = a[i * lda + i] for 0 <= i < n.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const {T}* __restrict__ a,
    const long long lda,
    {T}* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         i < n; i += stride) {
        out[i] = a[i * lda + i];
    }
}
"#;

/// The diagonal of a row-major matrix: `out[i] = a[i * lda + i]` for `0 <= i < n`.
///
/// Parameters: `(const long long n, const T* a, const long long lda, T* out)`.
/// Launch: [`linear_grid_block`]`(n)`.
pub fn diag(dtype: ScalarType) -> BuiltinKernel {
    typed("diag", dtype, DIAG)
}

const DIAG_HALF: &str = r#"// popcorn builtin kernel {NAME}: out[i] = a[i * lda + i] for 0 <= i < n, a held in
// 16 bits and widened to float.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const unsigned short* __restrict__ a,
    const long long lda,
    float* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         i < n; i += stride) {
        out[i] = {CONVERT}(a[i * lda + i]);
    }
}
"#;

/// The diagonal, widened to `float`, of a row-major matrix held in 16 bits: `out[i] =
/// a[i * lda + i]` for `0 <= i < n`; entry point `pk_diag_from_bf16` or `pk_diag_from_fp16`.
///
/// Parameters: `(const long long n, const unsigned short* a, const long long lda, float* out)`.
/// Launch: [`linear_grid_block`]`(n)`.
pub fn diag_half(half: kernel_ir::Half) -> BuiltinKernel {
    half_builtin(
        diag_half_name(half),
        DIAG_HALF,
        crate::emit::from_half_fn(half),
    )
}

/// A builtin over 16-bit values: `template` with `{NAME}` as `name` and `{CONVERT}` as the
/// prelude's conversion `convert`, after the conversions.
fn half_builtin(name: &str, template: &str, convert: &str) -> BuiltinKernel {
    let source = template
        .replace("{NAME}", name)
        .replace("{CONVERT}", convert);
    BuiltinKernel {
        name: name.to_string(),
        source: format!("{}{source}", crate::emit::HALF_CONVERSIONS),
    }
}

/// The entry point of [`diag_half`].
pub fn diag_half_name(half: kernel_ir::Half) -> &'static str {
    match half {
        kernel_ir::Half::Bf16 => "pk_diag_from_bf16",
        kernel_ir::Half::F16 => "pk_diag_from_fp16",
    }
}

const CSR_SCATTER: &str = r#"// popcorn builtin kernel {NAME}: a CSR matrix written into a zeroed dense one.
// Row r's entries (c, v) add v at out[r * ld + c], or at out[c * ld + r] (transposed). One
// thread per row: every address is written by one thread only (duplicates by the same one).
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long rows,
    const int* __restrict__ row_ptr,
    const int* __restrict__ col_idx,
    const {T}* __restrict__ values,
    const unsigned int transpose,
    {T}* __restrict__ out,
    const long long ld)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long r = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         r < rows; r += stride) {
        for (int p = row_ptr[r]; p < row_ptr[r + 1]; ++p) {
            const long long c = (long long)col_idx[p];
            const long long at = transpose ? c * ld + r : r * ld + c;
            out[at] += values[p];
        }
    }
}
"#;

/// A CSR matrix (`rows` rows) scattered into a zeroed dense row-major matrix of leading
/// dimension `ld`, or into its transpose (`transpose != 0`); duplicates add up.
///
/// Parameters: `(const long long rows, const int* row_ptr, const int* col_idx, const T*
/// values, const unsigned int transpose, T* out, const long long ld)`.
/// Launch: [`linear_grid_block`]`(rows)`.
pub fn csr_scatter(dtype: ScalarType) -> BuiltinKernel {
    typed("csr_scatter", dtype, CSR_SCATTER)
}

const CSR_ROW_NORMS: &str = r#"// popcorn builtin kernel {NAME}: out[r] = the squared norm of CSR row r.
// Rows with strictly increasing columns sum v * v; others add each column's duplicates first.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long rows,
    const int* __restrict__ row_ptr,
    const int* __restrict__ col_idx,
    const {T}* __restrict__ values,
    {T}* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long r = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         r < rows; r += stride) {
        const int lo = row_ptr[r];
        const int hi = row_ptr[r + 1];
        bool sorted = true;
        for (int p = lo + 1; p < hi; ++p) {
            sorted = sorted && col_idx[p - 1] < col_idx[p];
        }
        {T} total = ({T})0;
        for (int p = lo; p < hi; ++p) {
            if (sorted) {
                total += values[p] * values[p];
                continue;
            }
            bool first = true;
            for (int q = lo; q < p; ++q) {
                first = first && col_idx[q] != col_idx[p];
            }
            if (!first) {
                continue;
            }
            {T} v = ({T})0;
            for (int q = p; q < hi; ++q) {
                if (col_idx[q] == col_idx[p]) {
                    v += values[q];
                }
            }
            total += v * v;
        }
        out[r] = total;
    }
}
"#;

/// The squared norm of each row of a CSR matrix (`rows` rows): `out[r] = sum of v * v` over
/// the row's columns, duplicates of a column added first.
///
/// Parameters: `(const long long rows, const int* row_ptr, const int* col_idx, const T*
/// values, T* out)`.
/// Launch: [`linear_grid_block`]`(rows)`.
pub fn csr_row_norms(dtype: ScalarType) -> BuiltinKernel {
    typed("csr_row_norms", dtype, CSR_ROW_NORMS)
}

const FILL: &str = r#"// popcorn builtin kernel {NAME}: out[i] = value for 0 <= i < len.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long len,
    const {T} value,
    {T}* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         i < len; i += stride) {
        out[i] = value;
    }
}
"#;

/// Fills a buffer with one value (tests poison outputs with NaN this way).
///
/// Parameters: `(const long long len, const T value, T* out)`.
/// Launch: [`linear_grid_block`]`(len)`.
pub fn fill(dtype: ScalarType) -> BuiltinKernel {
    typed("fill", dtype, FILL)
}

/// Fills an `unsigned int` buffer with one value (e.g. zeroes histogram counts).
///
/// Parameters: `(const long long len, const unsigned int value, unsigned int* out)`; entry
/// point `pk_fill_u32`. Launch: [`linear_grid_block`]`(len)`.
pub fn fill_u32() -> BuiltinKernel {
    untyped("pk_fill_u32", &FILL.replace("{T}", "unsigned int"))
}

const SYMMETRIZE: &str = r#"// popcorn builtin kernel {NAME}: a[i * lda + j] = a[j * lda + i] for j > i.
// Blocks of (32, 8) threads move 32 x 32 tiles through shared memory: the block for the upper
// tile (bi, bj), bj >= bi, reads the mirrored lower tile (bj, bi) row by row (coalesced) and
// writes the transpose row by row (coalesced). Reads touch only entries with j <= i, writes only
// entries with j > i, so blocks never race; a diagonal tile is read whole before it is written.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    {T}* __restrict__ a,
    const long long lda)
{
    __shared__ {T} tile[32][33];
    const int tx = (int)threadIdx.x;
    const int ty = (int)threadIdx.y;
    const long long tiles = (n + 31) / 32;
    for (long long bi = blockIdx.y; bi < tiles; bi += gridDim.y) {
        for (long long bj = blockIdx.x; bj < tiles; bj += gridDim.x) {
            if (bj < bi) {
                continue;
            }
            for (int m = 0; m < 32; m += 8) {
                const long long r = bj * 32 + ty + m;
                const long long c = bi * 32 + tx;
                if (r < n && c < n) {
                    tile[ty + m][tx] = a[r * lda + c];
                }
            }
            __syncthreads();
            for (int m = 0; m < 32; m += 8) {
                const long long i = bi * 32 + ty + m;
                const long long j = bj * 32 + tx;
                if (i < n && j < n && j > i) {
                    a[i * lda + j] = tile[tx][ty + m];
                }
            }
            __syncthreads();
        }
    }
}
"#;

/// Copies the lower triangle of a row-major `n x n` matrix into its upper triangle:
/// `a[i * lda + j] = a[j * lda + i]` for `j > i`, in place.
///
/// This completes the output of cuBLAS SYRK/GEMMT called with `CUBLAS_FILL_MODE_UPPER` on the
/// column-major view of a row-major buffer: cuBLAS writes the column-major entries `C(r, c)`
/// with `r <= c`, stored at `c * lda + r`. Read row-major, that offset is element
/// `(i, j) = (c, r)`, so the valid entries are those with `j <= i`, the lower triangle of the
/// row-major matrix. The result is symmetric, so the upper triangle is its mirror.
///
/// Parameters: `(const long long n, T* a, const long long lda)`.
/// Launch: [`symmetrize_grid_block`]`(n)`.
pub fn symmetrize_lower_to_upper(dtype: ScalarType) -> BuiltinKernel {
    typed("symmetrize_lower_to_upper", dtype, SYMMETRIZE)
}

/// Launch dimensions of [`symmetrize_lower_to_upper`] for an `n x n` matrix: blocks of
/// `(32, 8)` threads, a 2-D grid of 32 x 32 tiles (capped at [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS) per dimension;
/// the kernel grid-strides over the rest).
pub fn symmetrize_grid_block(n: u64) -> LaunchDims {
    let tiles = blocks_for(n, 32);
    ((tiles, tiles, 1), (32, 8, 1), 0)
}

/// Clusters [`histogram`] counts per pass over the labels (its shared-memory bins).
pub const HISTOGRAM_BINS: u32 = 4096;
/// Most blocks of [`histogram`]: each adds its bins to the counts once per pass, so more
/// blocks than keep the device busy only add global atomics.
const HISTOGRAM_MAX_BLOCKS: u64 = 512;

const HISTOGRAM: &str = r#"// popcorn builtin kernel {NAME}: counts[labels[p]] += 1 for 0 <= p < n.
// Labels >= k are ignored. counts must be zeroed first (pk_fill_u32). Each block counts its
// points (a grid-stride loop) in shared-memory bins, {BINS} clusters per pass (equal labels of
// a warp merged first), then adds each nonzero bin to counts: one global atomic per block and
// cluster instead of one per point. Integer counts: the result does not depend on the order.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const unsigned int* __restrict__ labels,
    const long long k,
    unsigned int* __restrict__ counts)
{
    __shared__ unsigned int bins[{BINS}];
{BIN_COUNTS}}
"#;

/// Labels each thread of [`histogram`] and [`small_counts`] loads before counting any of them,
/// so that that many loads are in flight at once.
pub const COUNTS_LABELS_IN_FLIGHT: u32 = 8;

/// The body shared by [`histogram`] and [`small_counts`] (each declares `bins`, `{BINS}`
/// words of shared memory): the block's points (a grid-stride loop over chunks of `{UNROLL}`
/// labels a thread, loaded before any is counted; one block sees them all) counted into
/// `{BINS}` shared-memory bins per pass over the clusters, a warp's equal labels merged by
/// `__match_any_sync`, then each bin's count `v` of cluster `c0 + c` handed to `{FLUSH}`.
const BIN_COUNTS: &str = r#"    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const long long threads = (long long)blockDim.x;
    const long long chunk = threads * {UNROLL};
    const long long stride = (long long)gridDim.x * chunk;
    for (long long c0 = 0; c0 < k; c0 += {BINS}) {
        const long long width = (k - c0 < {BINS}) ? (k - c0) : {BINS};
        for (int c = tid; c < width; c += (int)blockDim.x) bins[c] = 0u;
        __syncthreads();
        for (long long base = (long long)blockIdx.x * chunk; base < n; base += stride) {
            unsigned int held[{UNROLL}];
#pragma unroll
            for (int u = 0; u < {UNROLL}; ++u) {
                const long long p = base + u * threads + tid;
                held[u] = p < n ? labels[p] : 0xffffffffu;
            }
#pragma unroll
            for (int u = 0; u < {UNROLL}; ++u) {
                const long long label = (long long)held[u];
                const bool mine = label >= c0 && label < c0 + width;
                const unsigned int key = mine ? (unsigned int)(label - c0) : 0xffffffffu;
                const unsigned int peers = __match_any_sync(0xffffffffu, key);
                if (mine && lane == __ffs(peers) - 1) {
                    atomicAdd(&bins[key], (unsigned int)__popc(peers));
                }
            }
        }
        __syncthreads();
        for (int c = tid; c < width; c += (int)blockDim.x) {
            const unsigned int v = bins[c];
            {FLUSH}
        }
        __syncthreads();
    }
"#;

/// `template` with [`BIN_COUNTS`] in place of `{BIN_COUNTS}`, flushing each bin by `flush`,
/// with `bins` bins.
fn with_bin_counts(template: &str, flush: &str, bins: u32) -> String {
    template
        .replace("{BIN_COUNTS}", &BIN_COUNTS.replace("{FLUSH}", flush))
        .replace("{BINS}", &bins.to_string())
        .replace("{UNROLL}", &COUNTS_LABELS_IN_FLIGHT.to_string())
}

/// Cluster sizes: `counts[c]` = number of `p < n` with `labels[p] == c`, for `c < k`. Labels
/// `>= k` are ignored. `counts` (`k` entries) must be zeroed first with [`fill_u32`].
///
/// Parameters: `(const long long n, const unsigned int* labels, const long long k,
/// unsigned int* counts)`; entry point `pk_histogram`. Launch: [`histogram_grid_block`]`(n)`.
pub fn histogram() -> BuiltinKernel {
    untyped(
        "pk_histogram",
        &with_bin_counts(
            HISTOGRAM,
            "if (v != 0u) atomicAdd(&counts[c0 + c], v);",
            HISTOGRAM_BINS,
        ),
    )
}

/// Launch dimensions of [`histogram`] over `n` labels: blocks of [`BUILTIN_BLOCK_THREADS`], one
/// per chunk of points ([`COUNTS_LABELS_IN_FLIGHT`] a thread) up to `HISTOGRAM_MAX_BLOCKS`.
pub fn histogram_grid_block(n: u64) -> LaunchDims {
    let chunk = u64::from(BUILTIN_BLOCK_THREADS) * u64::from(COUNTS_LABELS_IN_FLIGHT);
    let grid = blocks_for(n, chunk).min(HISTOGRAM_MAX_BLOCKS as u32);
    ((grid, 1, 1), (BUILTIN_BLOCK_THREADS, 1, 1), 0)
}

const PERMUTE_ROWS: &str = r#"// popcorn builtin kernel {NAME}: the rows of a matrix of 32-bit words permuted by a
// selection matrix's full order: col_idx[0..rows] lists every row once (the points of the
// clusters below k, cluster by cluster, then the points with labels >= k, ascending).
// Forward (inverse == 0): out row p = in row col_idx[p] (a gather); inverse (inverse != 0):
// out row col_idx[p] = in row p (a scatter; every out row is written once).
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long rows,
    const long long words,
    const int* __restrict__ col_idx,
    const unsigned int* __restrict__ in,
    const long long in_ld,
    unsigned int* __restrict__ out,
    const long long out_ld,
    const unsigned int inverse)
{
    const long long total = rows * words;
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long e = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         e < total; e += stride) {
        const long long p = e / words;
        const long long w = e - p * words;
        const long long q = (long long)col_idx[p];
        const long long from = inverse ? p : q;
        const long long to = inverse ? q : p;
        out[to * out_ld + w] = in[from * in_ld + w];
    }
}
"#;

/// `pk_permute_rows`: rows of 32-bit words permuted by a selection matrix's full order
/// `col_idx[0..rows]` (a permutation of `0..rows`: the points by cluster, then those with
/// labels `>= k` ascending, as the runtime's selection step writes them). Forward
/// (`inverse == 0`): `out` row `p` = `in` row `col_idx[p]`; inverse (`inverse != 0`): `out` row
/// `col_idx[p]` = `in` row `p`. `in` and `out` must not overlap.
///
/// Parameters: `(const long long rows, const long long words, const int* col_idx,
/// const unsigned int* in, const long long in_ld, unsigned int* out, const long long out_ld,
/// const unsigned int inverse)` (leading dimensions in words). Launch:
/// [`linear_grid_block`]`(rows * words)`.
pub fn permute_rows() -> BuiltinKernel {
    untyped("pk_permute_rows", PERMUTE_ROWS)
}

const CLAMP_LABELS: &str = r#"// popcorn builtin kernel {NAME}: out[p] = min(labels[p], k) for 0 <= p < n.
// Labels >= k become k: one extra cluster gathers the points outside the k clusters.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const unsigned int* __restrict__ labels,
    const long long k,
    unsigned int* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long p = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
         p < n; p += stride) {
        const unsigned int label = labels[p];
        out[p] = ((long long)label < k) ? label : (unsigned int)k;
    }
}
"#;

/// Clamped labels: `out[p] = min(labels[p], k)` for `p < n`, so the points outside the `k`
/// clusters form an extra cluster `k` (how the selection builder lists them after the
/// clusters; see [`selection_scatter`]).
///
/// Parameters: `(const long long n, const unsigned int* labels, const long long k,
/// unsigned int* out)`; entry point `pk_clamp_labels`. Launch: [`linear_grid_block`]`(n)`.
pub fn clamp_labels() -> BuiltinKernel {
    untyped("pk_clamp_labels", CLAMP_LABELS)
}

/// Threads of the one block of [`small_counts`].
pub const SMALL_COUNTS_THREADS: u32 = 1024;
/// Clusters [`small_counts`] counts per pass over the labels (its shared-memory bins).
pub const SMALL_COUNTS_BINS: u32 = 8192;
/// Up to this many labels the counts are one [`small_counts`] block; beyond, a histogram over
/// the whole grid.
pub const SMALL_COUNTS_MAX_N: u64 = 1 << 16;

/// Labels each thread of [`small_counts`] reads in a row where `k` is at most
/// [`SMALL_COUNTS_WARP_BINS_MAX_K`] (its loads in flight at once).
pub const SMALL_COUNTS_RUN: u32 = 16;
/// Up to this many clusters [`small_counts`] gives each warp its own bins (the block's
/// [`SMALL_COUNTS_BINS`] words split over its 32 warps) and no warp merges labels with
/// `__match_any_sync`, whose cost grows with the distinct labels of a warp (BENCHMARKS.md,
/// run 32).
pub const SMALL_COUNTS_WARP_BINS_MAX_K: u32 = SMALL_COUNTS_BINS / (SMALL_COUNTS_THREADS / 32);

const SMALL_COUNTS: &str = r#"// popcorn builtin kernel {NAME}: out[c] = (T) the number of p < n with labels[p] == c,
// for 0 <= c < k; labels >= k are ignored. One block of {THREADS} threads, written as floats; no
// global atomics, no zeroing launch; integer counts, so the result does not depend on the order.
// Up to {WARP_K} clusters every warp has its own bins: each thread reads {RUN} consecutive labels
// at once and adds each run of equal ones to its warp's bin of their cluster (one shared atomic
// per run), then the warps' bins are added. Beyond, the counts of up to {BINS} clusters at a time
// gather in the block's bins (equal labels of a warp merged first).
extern "C" __global__ void __launch_bounds__({THREADS}) {NAME}(
    const long long n,
    const unsigned int* __restrict__ labels,
    const long long k,
    {T}* __restrict__ out)
{
    __shared__ unsigned int bins[{BINS}];
    if (k <= {WARP_K}) {
        const int warps = (int)blockDim.x / 32;
        for (int i = (int)threadIdx.x; i < warps * (int)k; i += (int)blockDim.x) bins[i] = 0u;
        __syncthreads();
        unsigned int* const mine = bins + ((int)threadIdx.x / 32) * (int)k;
        const long long step = (long long)blockDim.x * {RUN};
        for (long long base = (long long)threadIdx.x * {RUN}; base < n; base += step) {
            unsigned int held[{RUN}];
#pragma unroll
            for (int u = 0; u < {RUN}; ++u) {
                held[u] = base + u < n ? labels[base + u] : 0xffffffffu;
            }
            unsigned int label = held[0];
            unsigned int run = 1u;
#pragma unroll
            for (int u = 1; u < {RUN}; ++u) {
                if (held[u] == label) {
                    ++run;
                } else {
                    if ((long long)label < k) atomicAdd(&mine[label], run);
                    label = held[u];
                    run = 1u;
                }
            }
            if ((long long)label < k) atomicAdd(&mine[label], run);
        }
        __syncthreads();
        for (int c = (int)threadIdx.x; c < (int)k; c += (int)blockDim.x) {
            unsigned int v = 0u;
            for (int w = 0; w < warps; ++w) v += bins[w * (int)k + c];
            out[c] = ({T})v;
        }
        return;
    }
{BIN_COUNTS}}
"#;

/// Cluster sizes as floats for up to [`SMALL_COUNTS_MAX_N`] labels in one launch:
/// `out[c]` = the number of `p < n` with `labels[p] == c`, for `c < k` (labels `>= k`
/// ignored). Writes every `out[c]`; needs no zeroed buffer.
///
/// Parameters: `(const long long n, const unsigned int* labels, const long long k, T* out)`;
/// entry point `pk_small_counts_{f32|f64}`. Launch: one block of [`SMALL_COUNTS_THREADS`].
pub fn small_counts(dtype: ScalarType) -> BuiltinKernel {
    let template = with_bin_counts(SMALL_COUNTS, "out[c0 + c] = ({T})v;", SMALL_COUNTS_BINS)
        .replace("{THREADS}", &SMALL_COUNTS_THREADS.to_string())
        .replace("{WARP_K}", &SMALL_COUNTS_WARP_BINS_MAX_K.to_string())
        .replace("{RUN}", &SMALL_COUNTS_RUN.to_string());
    typed("small_counts", dtype, &template)
}

/// Threads per block of [`label_sums`].
pub const LABEL_SUMS_THREADS: u32 = 1024;

const LABEL_SUMS: &str = r#"// popcorn builtin kernel {NAME}: out[c] = the sum of x[i] over the i < n with
// labels[i] == c, for 0 <= c < k. One block per cluster (grid-stride over clusters): thread t
// adds x[t], x[t + 1024], ... of its cluster in index order, then the block adds the 1024
// partial sums in a fixed tree, so the result is the same from run to run. Reads the labels
// and x once per cluster: meant for small n k (the planner's limit).
extern "C" __global__ void __launch_bounds__(1024) {NAME}(
    const long long n,
    const long long k,
    const {T}* __restrict__ x,
    const unsigned int* __restrict__ labels,
    {T}* __restrict__ out)
{
    __shared__ {T} warp_sums[32];
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    for (long long c = (long long)blockIdx.x; c < k; c += (long long)gridDim.x) {
        {T} acc = ({T})0;
        for (long long i = tid; i < n; i += 1024) {
            if ((long long)labels[i] == c) {
                acc += x[i];
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            acc += __shfl_down_sync(0xffffffffu, acc, off);
        }
        if (lane == 0) {
            warp_sums[warp] = acc;
        }
        __syncthreads();
        if (warp == 0) {
            {T} s = warp_sums[lane];
            for (int off = 16; off > 0; off >>= 1) {
                s += __shfl_down_sync(0xffffffffu, s, off);
            }
            if (lane == 0) {
                out[c] = s;
            }
        }
        // warp_sums is rewritten for the next cluster only after warp 0 has read it.
        __syncthreads();
    }
}
"#;

/// Sums by label: `out[c]` = the sum of `x[i]` over the `i < n` with `labels[i] == c`, for
/// `c < k` (labels `>= k` are ignored; an empty cluster's sum is 0). Deterministic: a fixed
/// order of additions per cluster, no atomics. Each block reads all `n` labels for its
/// cluster, so the work is `n k`: it replaces building a selection matrix for `V x` where that
/// is small.
///
/// Parameters: `(const long long n, const long long k, const T* x, const unsigned int* labels,
/// T* out)`; entry point `pk_label_sums_{f32|f64}`. Launch: [`label_sums_grid_block`]`(k)`.
pub fn label_sums(dtype: ScalarType) -> BuiltinKernel {
    typed("label_sums", dtype, LABEL_SUMS)
}

/// Launch dimensions of [`label_sums`] for `k` clusters: one block of [`LABEL_SUMS_THREADS`]
/// per cluster (at least one block, at most [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS)).
pub fn label_sums_grid_block(k: u64) -> LaunchDims {
    ((blocks_for(k, 1), 1, 1), (LABEL_SUMS_THREADS, 1, 1), 0)
}

/// How the selection builder splits the points: each warp owns one chunk of `chunk`
/// consecutive points and one row of `k` workspace counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectionLayout {
    /// Points per chunk (a multiple of 32, at least [`SELECTION_MIN_CHUNK`]); the kernels'
    /// `chunk` argument.
    pub chunk: u64,
    /// Number of chunks, `ceil(n / chunk)`; the `chunks` argument of
    /// [`selection_chunk_offsets`].
    pub chunks: u64,
    /// `int`s of workspace the kernels need: `chunks * k`.
    pub workspace_ints: u64,
}

/// The chunking of the selection builder for `n` points and `k` clusters. Chunks are
/// [`SELECTION_MIN_CHUNK`] points, made larger where needed to keep the workspace within
/// [`SELECTION_WORKSPACE_CAP_INTS`] (or `k` ints where `k` alone exceeds that).
pub fn selection_layout(n: u64, k: u64) -> SelectionLayout {
    let max_chunks = (SELECTION_WORKSPACE_CAP_INTS / k.max(1)).max(1);
    let chunk = n
        .div_ceil(max_chunks)
        .max(SELECTION_MIN_CHUNK)
        .div_ceil(32)
        .saturating_mul(32);
    let chunks = n.div_ceil(chunk);
    SelectionLayout {
        chunk,
        chunks,
        workspace_ints: chunks.saturating_mul(k),
    }
}

/// Shared device code of the scan kernels: an exclusive scan of one `int` per thread across a
/// block of `WARPS` warps (warp scans by shuffles, then across the warps), offset by a running
/// `carry` in shared memory that the block's last thread then advances past the block's total.
/// Every thread of the block calls it. Guarded, so sources may be concatenated into one module.
const BLOCK_SCAN_FN: &str = r#"#ifndef PK_BLOCK_SCAN
#define PK_BLOCK_SCAN
template <int WARPS>
static __device__ __forceinline__ int pk_block_exclusive_scan(const int v, int* warp_sums, int* carry)
{
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    int x = v;
    for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) {
            x += y;
        }
    }
    if (lane == 31) {
        warp_sums[warp] = x;
    }
    __syncthreads();
    if (warp == 0) {
        int s = (lane < WARPS) ? warp_sums[lane] : 0;
        for (int off = 1; off < WARPS; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, s, off);
            if (lane >= off) {
                s += y;
            }
        }
        if (lane < WARPS) {
            warp_sums[lane] = s;
        }
    }
    __syncthreads();
    const int exclusive = *carry + ((warp == 0) ? 0 : warp_sums[warp - 1]) + x - v;
    __syncthreads();
    if (tid == 32 * WARPS - 1) {
        *carry = exclusive + v;
    }
    __syncthreads();
    return exclusive;
}
#endif
"#;

const SELECTION_SCAN: &str = r#"// popcorn builtin kernel {NAME}: row_ptr[c] = counts[0] + ... + counts[c - 1] for
// 0 <= c <= k (an exclusive scan). One block of exactly 1024 threads walks counts in pieces of
// 1024, carrying the running total.
extern "C" __global__ void __launch_bounds__(1024) {NAME}(
    const long long k,
    const unsigned int* __restrict__ counts,
    int* __restrict__ row_ptr)
{
    __shared__ int warp_sums[32];
    __shared__ int carry;
    const int tid = (int)threadIdx.x;
    if (tid == 0) {
        carry = 0;
    }
    __syncthreads();
    for (long long base = 0; base < k; base += 1024) {
        const long long c = base + tid;
        const int exclusive = pk_block_exclusive_scan<32>((c < k) ? (int)counts[c] : 0, warp_sums, &carry);
        if (c < k) {
            row_ptr[c] = exclusive;
        }
    }
    if (tid == 0) {
        row_ptr[k] = carry;
    }
}
"#;

/// Selection step 3: CSR row offsets from cluster sizes, `row_ptr[c] = sum(counts[..c])` for
/// `0 <= c <= k` (so `row_ptr[k]` is the number of entries).
///
/// Parameters: `(const long long k, const unsigned int* counts, int* row_ptr)` with `row_ptr`
/// of `k + 1` entries; entry point `pk_selection_scan`. Launch: [`selection_scan_grid_block`]
/// (one block of exactly 1024 threads).
pub fn selection_scan() -> BuiltinKernel {
    let template = format!("{BLOCK_SCAN_FN}{SELECTION_SCAN}");
    untyped("pk_selection_scan", &template)
}

/// Launch dimensions of [`selection_scan`]: one block of 1024 threads.
pub fn selection_scan_grid_block() -> LaunchDims {
    ((1, 1, 1), (1024, 1, 1), 0)
}

/// Shared device code of the selection kernels: `group` = the lanes of this warp holding the
/// same key, for keys below `2^bits` (`0xffffffff`: no key; such lanes are in no other lane's
/// group). One ballot per bit of the key, each lane keeping the lanes that agree with it on
/// every bit: `bits` + 1 ballots whatever the labels, where `__match_any_sync` takes about one
/// step per distinct key among the 32 (nearly 32 for the unsorted labels of an iteration).
/// Guarded, so sources may be concatenated into one module.
const SELECTION_GROUP_FN: &str = r#"#ifndef PK_SELECTION_SAME_KEY
#define PK_SELECTION_SAME_KEY
static __device__ __forceinline__ unsigned int pk_selection_same_key(const unsigned int key, const int bits)
{
    const bool valid = key != 0xffffffffu;
    const unsigned int valid_lanes = __ballot_sync(0xffffffffu, valid);
    unsigned int group = valid ? valid_lanes : ~valid_lanes;
    for (int b = 0; b < bits; ++b) {
        const bool set = ((key >> b) & 1u) != 0u;
        const unsigned int ones = __ballot_sync(0xffffffffu, set);
        group &= set ? ones : ~ones;
    }
    return group;
}
// The bits that tell apart keys below k: those of k - 1 (at most the key's 32).
static __device__ __forceinline__ int pk_selection_key_bits(const long long k)
{
    const int bits = (k > 1) ? 64 - __clzll((unsigned long long)(k - 1)) : 0;
    return (bits < 32) ? bits : 32;
}
#endif
"#;

const SELECTION_CHUNK_COUNTS: &str = r#"// popcorn builtin kernel {NAME}: per-chunk cluster counts.
// Warp w owns points [w * chunk, min((w + 1) * chunk, n)) and workspace row w (k ints): it
// zeroes the row, then walks its points 32 at a time; for each label present among the 32, the
// highest lane holding it adds the number of lanes holding it. Labels >= k are skipped. With
// dynamic shared memory for 8 rows of k (k small enough), the row is counted there and
// copied out once.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const long long k,
    const long long chunk,
    const unsigned int* __restrict__ labels,
    int* __restrict__ workspace)
{
    extern __shared__ int pk_rows[];
    unsigned int dyn_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
    const bool in_shared = (unsigned long long)dyn_bytes >= 8ull * 4ull * (unsigned long long)k;
    const int lane = (int)(threadIdx.x & 31u);
    const long long warps = (long long)(blockDim.x >> 5);
    const long long chunks = (n + chunk - 1) / chunk;
    const int key_bits = pk_selection_key_bits(k);
    for (long long w = (long long)blockIdx.x * warps + (long long)(threadIdx.x >> 5); w < chunks;
         w += (long long)gridDim.x * warps) {
        int* const out = workspace + w * k;
        int* const row = in_shared ? pk_rows + (long long)(threadIdx.x >> 5) * k : out;
        for (long long c = lane; c < k; c += 32) {
            row[c] = 0;
        }
        __syncwarp();
        const long long start = w * chunk;
        const long long end = (start + chunk < n) ? start + chunk : n;
        for (long long base = start; base < end; base += 32) {
            const long long p = base + lane;
            const unsigned int label = (p < end) ? labels[p] : 0xffffffffu;
            const bool valid = p < end && (long long)label < k;
            const unsigned int key = valid ? label : 0xffffffffu;
            const unsigned int group = pk_selection_same_key(key, key_bits);
            if (valid && (group >> lane) == 1u) {
                row[label] += __popc(group);
            }
            __syncwarp();
        }
        if (in_shared) {
            for (long long c = lane; c < k; c += 32) {
                out[c] = row[c];
            }
            __syncwarp();
        }
    }
}
"#;

/// Selection step 1: per-chunk cluster counts into the workspace, `workspace[w * k + c]` = the
/// number of points of chunk `w` with label `c`.
///
/// Parameters: `(const long long n, const long long k, const long long chunk,
/// const unsigned int* labels, int* workspace)` with `chunk` and the workspace size from
/// [`selection_layout`]; entry point `pk_selection_chunk_counts`.
/// Launch: [`selection_chunks_grid_block`]`(chunks, k)`.
pub fn selection_chunk_counts() -> BuiltinKernel {
    let template = format!("{SELECTION_GROUP_FN}{SELECTION_CHUNK_COUNTS}");
    untyped("pk_selection_chunk_counts", &template)
}

/// Most clusters whose per-warp rows the chunk kernels keep in shared memory (8 rows of `k`
/// ints within the 48 KiB a block gets without opting in); beyond, they work in the
/// workspace.
pub const SELECTION_SHARED_MAX_K: u64 = 1536;

/// Launch dimensions of the warp-per-chunk kernels [`selection_chunk_counts`] and
/// [`selection_scatter`] for `k` clusters: blocks of 8 warps, one warp per chunk, with
/// dynamic shared memory for the warps' rows where `k <= SELECTION_SHARED_MAX_K`.
pub fn selection_chunks_grid_block(chunks: u64, k: u64) -> LaunchDims {
    let grid = blocks_for(chunks, u64::from(SELECTION_WARPS_PER_BLOCK));
    let shared = if k <= SELECTION_SHARED_MAX_K {
        // At most 8 * 1536 * 4 bytes: fits in u32.
        u32::try_from(u64::from(SELECTION_WARPS_PER_BLOCK) * k * 4).unwrap_or(0)
    } else {
        0
    };
    ((grid, 1, 1), (SELECTION_WARPS_PER_BLOCK * 32, 1, 1), shared)
}

const SELECTION_CHUNK_OFFSETS: &str = r#"// popcorn builtin kernel {NAME}: per-chunk start positions.
// Block b takes clusters b, b + gridDim.x, ...; for cluster c its 256 threads scan the
// chunks' counts 256 at a time, carrying the running position from one piece to the next;
// the total is cluster c's size.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long k,
    const long long chunks,
    unsigned int* __restrict__ counts,
    int* __restrict__ workspace)
{
    __shared__ int warp_sums[8];
    __shared__ int carry;
    const int tid = (int)threadIdx.x;
    for (long long c = blockIdx.x; c < k; c += gridDim.x) {
        if (tid == 0) {
            carry = 0;
        }
        __syncthreads();
        for (long long base = 0; base < chunks; base += 256) {
            const long long w = base + tid;
            const int v = (w < chunks) ? workspace[w * k + c] : 0;
            const int exclusive = pk_block_exclusive_scan<8>(v, warp_sums, &carry);
            if (w < chunks) {
                workspace[w * k + c] = exclusive;
            }
        }
        if (tid == 0) {
            counts[c] = (unsigned int)carry;
        }
        __syncthreads();
    }
}
"#;

/// Selection step 2: turns the per-chunk counts into positions within each cluster,
/// `workspace[w * k + c]` = the number of points with label `c` in chunks before `w`, and
/// writes each cluster's size to `counts[c]`.
///
/// Parameters: `(const long long k, const long long chunks, unsigned int* counts,
/// int* workspace)`; entry point `pk_selection_chunk_offsets`.
/// Launch: [`selection_chunk_offsets_grid_block`]`(k)`.
pub fn selection_chunk_offsets() -> BuiltinKernel {
    let template = format!("{BLOCK_SCAN_FN}{SELECTION_CHUNK_OFFSETS}");
    untyped("pk_selection_chunk_offsets", &template)
}

/// Launch dimensions of [`selection_chunk_offsets`] for `k` clusters: one block of 256
/// threads per cluster (grid-stride beyond [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS)).
pub fn selection_chunk_offsets_grid_block(k: u64) -> LaunchDims {
    ((blocks_for(k, 1), 1, 1), (256, 1, 1), 0)
}

const SELECTION_SCATTER: &str = r#"// popcorn builtin kernel {NAME}: CSR columns and values.
// Warp w walks its chunk 32 points at a time. A point's position is its cluster's row start
// plus its running position for this chunk (workspace row w) plus the number of lower lanes
// with the same label; the highest such lane then advances the running position. Points land
// in ascending order within each cluster. Labels >= k are skipped. With dynamic shared memory
// for 8 rows of k, the warp's running positions are copied there first.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const long long k,
    const long long chunk,
    const unsigned int* __restrict__ labels,
    const unsigned int* __restrict__ counts,
    const int* __restrict__ row_ptr,
    int* __restrict__ workspace,
    int* __restrict__ col_idx,
    {T}* __restrict__ values)
{
    extern __shared__ int pk_rows[];
    unsigned int dyn_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
    const bool in_shared = (unsigned long long)dyn_bytes >= 8ull * 4ull * (unsigned long long)k;
    const int lane = (int)(threadIdx.x & 31u);
    const unsigned int lower_lanes = (1u << lane) - 1u;
    const long long warps = (long long)(blockDim.x >> 5);
    const long long chunks = (n + chunk - 1) / chunk;
    const int key_bits = pk_selection_key_bits(k);
    for (long long w = (long long)blockIdx.x * warps + (long long)(threadIdx.x >> 5); w < chunks;
         w += (long long)gridDim.x * warps) {
        int* row = workspace + w * k;
        if (in_shared) {
            int* const copy = pk_rows + (long long)(threadIdx.x >> 5) * k;
            for (long long c = lane; c < k; c += 32) {
                copy[c] = row[c];
            }
            __syncwarp();
            row = copy;
        }
        const long long start = w * chunk;
        const long long end = (start + chunk < n) ? start + chunk : n;
        for (long long base = start; base < end; base += 32) {
            const long long p = base + lane;
            const unsigned int label = (p < end) ? labels[p] : 0xffffffffu;
            const bool valid = p < end && (long long)label < k;
            const unsigned int key = valid ? label : 0xffffffffu;
            const unsigned int group = pk_selection_same_key(key, key_bits);
            const int first = valid ? row[label] : 0;
            __syncwarp();
            if (valid) {
                const int pos = row_ptr[label] + first + __popc(group & lower_lanes);
                col_idx[pos] = (int)p;
                values[pos] = ({T})1 / ({T})counts[label];
                if ((group >> lane) == 1u) {
                    row[label] = first + __popc(group);
                }
            }
            __syncwarp();
        }
    }
}
"#;

/// Selection step 4: the CSR matrix `V` (`k x n`) with `V[c, p] = 1 / counts[c]` where
/// `labels[p] == c`: writes `col_idx` and `values` (`row_ptr[k]` entries, at most `n`), each
/// cluster's points in ascending order. An empty cluster has an empty row. Consumes the
/// workspace left by [`selection_chunk_offsets`]. Deterministic (no atomics).
///
/// The four steps, in order, for `n` points and `k` clusters (labels `>= k` are skipped
/// everywhere, leaving `row_ptr[k] < n`):
/// 1. per-chunk counts into the workspace by [`selection_chunk_counts`]
///    ([`selection_layout`] gives `chunk`, `chunks` and the workspace size);
/// 2. per-chunk positions within each cluster, and the clusters' sizes (`counts`), by
///    [`selection_chunk_offsets`];
/// 3. `row_ptr` by [`selection_scan`];
/// 4. `col_idx` and `values` by this kernel.
///
/// To also list the points with labels `>= k` after the clusters (`col_idx[row_ptr[k]..n]`,
/// ascending), as the runtime does: clamp the labels with [`clamp_labels`], run steps 1, 2
/// and 4 on the clamped labels with `k + 1` clusters (workspace and `counts` for `k + 1`) and
/// step 3 with `k` clusters. `row_ptr` then has `k + 1` entries and `row_ptr[k]` counts the
/// labels below `k` and starts the extra cluster `k`; its values are `1 / counts[k]` (finite;
/// outside the matrix).
///
/// Parameters: `(const long long n, const long long k, const long long chunk,
/// const unsigned int* labels, const unsigned int* counts, const int* row_ptr,
/// int* workspace, int* col_idx, T* values)`. Launch:
/// [`selection_chunks_grid_block`]`(chunks, k)`.
pub fn selection_scatter(dtype: ScalarType) -> BuiltinKernel {
    let template = format!("{SELECTION_GROUP_FN}{SELECTION_SCATTER}");
    typed("selection_scatter", dtype, &template)
}

const SELECTION_ONE_BLOCK: &str = r#"// popcorn builtin kernel {NAME}: the whole selection matrix in one block, for few points.
// The chunked builder's steps (clamp, chunk counts, chunk offsets, scan, scatter) in one launch
// of 32 warps. Warp w owns points [w * chunk, min((w + 1) * chunk, n)), chunk = ceil(n / 32)
// rounded up to 32, and row w of 32 rows of k1 = k + 1 counters in shared memory (labels >= k
// count as cluster k, the points outside, listed after the clusters). 1. Each warp counts its
// points' labels (for each label among 32 points, the highest lane holding it adds their
// number). 2. A warp per cluster c scans column c of the rows (lane w holds warp w's count)
// into each warp's start within cluster c, in warp order, and cluster c's size and its
// reciprocal; a block scan of the sizes of clusters 0..k-1 gives row_ptr, whose entry k (the
// points in clusters) is where cluster k starts. 3. Each warp writes its points 32 at a time
// at its cluster's start + its running position + the lower lanes with the same label.
// Ascending within each cluster, as the chunked builder; no atomics. Indices are 32-bit (the
// launcher's limit on n keeps them far below 2^31).
// Each lane loads its labels of PK_BATCH rounds of 32 points at once, so that a warp waits for
// memory once per batch rather than once per 32 points.
#ifndef PK_SELECTION_LOAD_BATCH
#define PK_SELECTION_LOAD_BATCH
#define PK_BATCH 4
static __device__ __forceinline__ void pk_selection_load_batch(
    const unsigned int* __restrict__ labels, const int base, const int end,
    const int lane, unsigned int (&raw)[PK_BATCH])
{
#pragma unroll
    for (int b = 0; b < PK_BATCH; ++b) {
        const int p = base + 32 * b + lane;
        raw[b] = (p < end) ? labels[p] : 0u;
    }
}
#endif
extern "C" __global__ void __launch_bounds__(1024) {NAME}(
    const long long n,
    const long long k,
    const unsigned int* __restrict__ labels,
    int* __restrict__ row_ptr,
    int* __restrict__ col_idx,
    {T}* __restrict__ values)
{
    extern __shared__ __align__(8) int pk_rows[];
    __shared__ int warp_sums[32];
    __shared__ int carry;
    const int k1 = (int)k + 1;
    const int key_bits = pk_selection_key_bits(k1);
    int* const starts = pk_rows + 32 * k1;
    int* const sizes = starts + k1;
    // 34 k1 ints are 136 k1 bytes, a multiple of 8.
    {T}* const inverse = ({T}*)(pk_rows + 34 * k1);
    const int tid = (int)threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const unsigned int lower_lanes = (1u << lane) - 1u;
    for (int i = tid; i < 32 * k1; i += 1024) {
        pk_rows[i] = 0;
    }
    if (tid == 0) {
        carry = 0;
    }
    __syncthreads();
    const int points = (int)n;
    const int chunk = ((points + 31) / 32 + 31) / 32 * 32;
    const int start = warp * chunk;
    const int end = (start + chunk < points) ? start + chunk : points;
    int* const row = pk_rows + warp * k1;
    for (int base = start; base < end; base += 32 * PK_BATCH) {
        unsigned int raw[PK_BATCH];
        pk_selection_load_batch(labels, base, end, lane, raw);
#pragma unroll
        for (int b = 0; b < PK_BATCH; ++b) {
            const bool valid = base + 32 * b + lane < end;
            const unsigned int label = (raw[b] < (unsigned int)k) ? raw[b] : (unsigned int)k;
            const unsigned int group = pk_selection_same_key(valid ? label : 0xffffffffu, key_bits);
            if (valid && (group >> lane) == 1u) {
                row[label] += __popc(group);
            }
            __syncwarp();
        }
    }
    __syncthreads();
    for (int c = warp; c < k1; c += 32) {
        const int v = pk_rows[lane * k1 + c];
        int x = v;
        for (int off = 1; off < 32; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, x, off);
            if (lane >= off) {
                x += y;
            }
        }
        pk_rows[lane * k1 + c] = x - v;
        if (lane == 31) {
            sizes[c] = x;
            inverse[c] = ({T})1 / ({T})x;
        }
    }
    __syncthreads();
    for (int base = 0; base < k1; base += 1024) {
        const int c = base + tid;
        const int before = pk_block_exclusive_scan<32>((c < k) ? sizes[c] : 0, warp_sums, &carry);
        if (c < k1) {
            starts[c] = before;
            row_ptr[c] = before;
        }
    }
    __syncthreads();
    for (int base = start; base < end; base += 32 * PK_BATCH) {
        unsigned int raw[PK_BATCH];
        pk_selection_load_batch(labels, base, end, lane, raw);
#pragma unroll
        for (int b = 0; b < PK_BATCH; ++b) {
            const int p = base + 32 * b + lane;
            const bool valid = p < end;
            const unsigned int label = (raw[b] < (unsigned int)k) ? raw[b] : (unsigned int)k;
            const unsigned int group = pk_selection_same_key(valid ? label : 0xffffffffu, key_bits);
            const int first = valid ? row[label] : 0;
            __syncwarp();
            if (valid) {
                const int pos = starts[label] + first + __popc(group & lower_lanes);
                col_idx[pos] = p;
                values[pos] = inverse[label];
                if ((group >> lane) == 1u) {
                    row[label] = first + __popc(group);
                }
            }
            __syncwarp();
        }
    }
}
"#;

/// Most points the one-block selection builder takes: 32 warps of one
/// [`SELECTION_MIN_CHUNK`] each, where the chunked builder would launch its four kernels over
/// at most 32 chunks (and a kernel to clamp the labels) for the same work.
pub const SELECTION_ONE_BLOCK_MAX_POINTS: u64 = 32 * SELECTION_MIN_CHUNK;

/// Most clusters (the points outside them included, `k + 1`) the one-block builder takes: its
/// 34 rows of counters and a row of reciprocals within the 48 KiB a block gets without opting
/// in.
pub const SELECTION_ONE_BLOCK_MAX_CLUSTERS: u64 = 320;

/// Whether [`selection_one_block`] builds the selection of `n` points with labels below `k`
/// (and the points outside, `k + 1` clusters in all).
pub fn selection_in_one_block(n: u64, k: u64) -> bool {
    n <= SELECTION_ONE_BLOCK_MAX_POINTS && k.saturating_add(1) <= SELECTION_ONE_BLOCK_MAX_CLUSTERS
}

/// The whole selection matrix in one launch, for few points ([`selection_in_one_block`]): the
/// output of the chunked builder run the runtime's way (labels clamped to `k`, `k + 1`
/// clusters, `row_ptr` over the first `k`; see [`selection_scatter`]), bit for bit: `row_ptr`
/// (`k + 1` entries), `col_idx` (`n`: the clusters' points ascending, then those with labels
/// `>= k`, ascending) and `values` (`1 /` the size of the point's cluster, or of the points
/// outside). Deterministic (no atomics); needs no workspace.
///
/// Parameters: `(const long long n, const long long k, const unsigned int* labels,
/// int* row_ptr, int* col_idx, T* values)`; entry point `pk_selection_one_block_{f32|f64}`.
/// Launch: [`selection_one_block_grid_block`]`(k)`.
pub fn selection_one_block(dtype: ScalarType) -> BuiltinKernel {
    let template = format!("{BLOCK_SCAN_FN}{SELECTION_GROUP_FN}{SELECTION_ONE_BLOCK}");
    typed("selection_one_block", dtype, &template)
}

/// Launch dimensions of [`selection_one_block`] for labels below `k`: one block of 1024
/// threads with dynamic shared memory for `34 (k + 1)` ints and `k + 1` reciprocals (8 bytes
/// each, whatever the type).
pub fn selection_one_block_grid_block(k: u64) -> LaunchDims {
    let shared = u32::try_from(k.saturating_add(1).saturating_mul(34 * 4 + 8)).unwrap_or(u32::MAX);
    ((1, 1, 1), (1024, 1, 1), shared)
}

const SELECTION_WEIGH: &str = r#"// popcorn builtin kernel {NAME}: weighted selection values.
// Warp w takes rows w, w + warps, ... of the k rows: its lanes add the weights of the row's
// points (lane l the entries l, l + 32, ... in double), the warp adds the 32 partial sums in a
// fixed butterfly (the same total every run, on every lane), then each entry becomes
// weight / total, or 0 where the total is 0.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long k,
    const int* __restrict__ row_ptr,
    const int* __restrict__ col_idx,
    const {T}* __restrict__ weights,
    {T}* __restrict__ values)
{
    const int lane = (int)(threadIdx.x & 31u);
    const long long warps = (long long)gridDim.x * (long long)(blockDim.x >> 5);
    for (long long c = (long long)blockIdx.x * (long long)(blockDim.x >> 5) + (long long)(threadIdx.x >> 5);
         c < k; c += warps) {
        const long long start = (long long)row_ptr[c];
        const long long end = (long long)row_ptr[c + 1];
        double total = 0.0;
        for (long long p = start + lane; p < end; p += 32) {
            total += (double)weights[col_idx[p]];
        }
        for (int off = 16; off > 0; off >>= 1) {
            total += __shfl_xor_sync(0xffffffffu, total, off);
        }
        for (long long p = start + lane; p < end; p += 32) {
            values[p] = (total != 0.0) ? ({T})((double)weights[col_idx[p]] / total) : ({T})0;
        }
    }
}
"#;

/// Selection step 5, for `selection(labels, k, w)`: rewrites the values of a selection matrix
/// the four steps of [`selection_scatter`] built, `values[p] = weights[col_idx[p]] / W_c` for
/// the entries `p` of row `c < k`, `W_c` the sum of the row's weights (in double; 0 where `W_c`
/// is 0). Deterministic: one warp per row, a fixed order of additions.
///
/// Parameters: `(const long long k, const int* row_ptr, const int* col_idx, const T* weights,
/// T* values)`; entry point `pk_selection_weigh_{f32|f64}`. Launch:
/// [`selection_weigh_grid_block`]`(k)`.
pub fn selection_weigh(dtype: ScalarType) -> BuiltinKernel {
    typed("selection_weigh", dtype, SELECTION_WEIGH)
}

/// Launch dimensions of [`selection_weigh`] for `k` rows: blocks of 8 warps, one warp per row
/// (grid-stride beyond [`MAX_GRID_BLOCKS`](crate::emit::MAX_GRID_BLOCKS)).
pub fn selection_weigh_grid_block(k: u64) -> LaunchDims {
    (
        (blocks_for(k, u64::from(SELECTION_WARPS_PER_BLOCK)), 1, 1),
        (SELECTION_WARPS_PER_BLOCK * 32, 1, 1),
        0,
    )
}

/// The frame every row-copy builtin (TF32 rounding, 16-bit packing, 3xTF32 splitting) shares:
/// `in` (`rows x cols` floats, leading dimension `ld_in`) read one warp per row at a time, its
/// lanes along the row, into `out` (`{OUT}` elements, leading dimension `ld_out`); `{EXTRA}`
/// parameters come before the pointers and `{BODY}` writes the row `dst` from `src`.
const ROW_COPY: &str = r#"extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long rows,
    const long long cols,
    const long long ld_in,
    const long long ld_out,
{EXTRA}    const float* __restrict__ in,
    {OUT}* __restrict__ out)
{
    const long long warps = ((long long)gridDim.x * (long long)blockDim.x) >> 5;
    const int lane = threadIdx.x & 31;
    for (long long r = ((long long)blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
         r < rows; r += warps) {
        const float* src = in + r * ld_in;
        {OUT}* dst = out + r * ld_out;
{BODY}    }
}
"#;

/// A row-copy builtin's source: its `preamble` (comment and helpers), then [`ROW_COPY`] with
/// `extra` parameters, `out` elements and the row's `body`.
fn row_copy(preamble: &str, extra: &str, out: &str, body: &str) -> String {
    format!(
        "{preamble}{}",
        ROW_COPY
            .replace("{EXTRA}", extra)
            .replace("{OUT}", out)
            .replace("{BODY}", body)
    )
}

const ROUND_TF32: &str = r#"// popcorn builtin kernel {NAME}: the rows x cols matrix `in` (leading dimension ld_in)
// rounded to TF32 (cvt.rna.tf32.f32, as the contraction kernels round the operands they
// stage) into `out` with leading dimension ld_out >= cols, whose columns past cols get 0: one
// warp per row at a time, its lanes along the row.
"#;

const ROUND_TF32_ROW: &str = r#"        for (long long c = lane; c < ld_out; c += 32) {
            float v = 0.0f;
            if (c < cols) {
                unsigned int t;
                asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(t) : "f"(src[c]));
                v = __uint_as_float(t);
            }
            dst[c] = v;
        }
"#;

/// TF32 rounding of a row-major matrix into another buffer, whose leading dimension may be
/// larger (the columns past the matrix's get 0): the operands of a TF32 contraction rounded
/// once in memory ([`crate::emit_variant`]), with rows padded to a multiple of 16 bytes so
/// that the kernel stages them with 16-byte copies.
///
/// Parameters: `(const long long rows, const long long cols, const long long ld_in, const long
/// long ld_out, const float* in, float* out)`; entry point `pk_round_tf32`. Launch:
/// [`linear_grid_block`]`(32 * rows)` (a warp per row).
pub fn round_tf32() -> BuiltinKernel {
    untyped(
        "pk_round_tf32",
        &row_copy(ROUND_TF32, "", "float", ROUND_TF32_ROW),
    )
}

const PACK_HALF: &str = r#"// popcorn builtin kernel {NAME}: the rows x cols float matrix `in` (leading dimension
// ld_in) rounded to 16 bits ({CONVERT}, to nearest even) and packed in pairs, one 32-bit word a
// pair (the even column in the low half), into `out` with ld_out >= (cols + 1) / 2 words a
// row, whose halves past cols get 0: the operands of a contraction on 16-bit tensor cores.
// One warp per row at a time, its lanes along the row.
"#;

const PACK_HALF_ROW: &str = r#"        for (long long w = lane; w < ld_out; w += 32) {
            const long long c = 2 * w;
            const unsigned int lo = c < cols ? (unsigned int){CONVERT}(src[c]) : 0u;
            const unsigned int hi = c + 1 < cols ? (unsigned int){CONVERT}(src[c + 1]) : 0u;
            dst[w] = lo | (hi << 16);
        }
"#;

/// A row-major `float` matrix rounded to `half` (to nearest even, as the kernels that hold a
/// matrix in 16 bits round) and packed in pairs into another buffer, one 32-bit word a pair (the
/// even column in the low half), rows `ld_out` words apart, the halves past the matrix's
/// columns 0: the operands of a contraction on 16-bit tensor cores
/// ([`crate::packs_half_operands`]). Entry point `pk_pack_bf16` or `pk_pack_fp16`.
///
/// Parameters: `(const long long rows, const long long cols, const long long ld_in, const long
/// long ld_out, const float* in, unsigned int* out)`, `ld_out >= (cols + 1) / 2`. Launch:
/// [`linear_grid_block`]`(32 * rows)` (a warp per row).
pub fn pack_half(half: kernel_ir::Half) -> BuiltinKernel {
    half_builtin(
        pack_half_name(half),
        &row_copy(PACK_HALF, "", "unsigned int", PACK_HALF_ROW),
        crate::emit::to_half_fn(half),
    )
}

/// The entry point of [`pack_half`].
pub fn pack_half_name(half: kernel_ir::Half) -> &'static str {
    match half {
        kernel_ir::Half::Bf16 => "pk_pack_bf16",
        kernel_ir::Half::F16 => "pk_pack_fp16",
    }
}

const SPLIT_TF32: &str = r#"// popcorn builtin kernel {NAME}: each value x of the rows x cols float matrix `in`
// (leading dimension ld_in) split into h = tf32(x) and l = tf32(x - h) (cvt.rna.tf32.f32, as
// the contraction kernels round), each row written as three segments of cols values, [h, h, l]
// (order 0: a 3xTF32 product's left operand) or [h, l, h] (order 1: its right one), into `out`
// with leading dimension ld_out >= 3 cols, whose values past 3 cols get 0. One warp per row at a
// time, its lanes along the row.
__device__ __forceinline__ float pk_split_round(float x)
{
    unsigned int t;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(t) : "f"(x));
    return __uint_as_float(t);
}
"#;

const SPLIT_TF32_ROW: &str = r#"        for (long long c = lane; c < ld_out; c += 32) {
            float v = 0.0f;
            if (c < 3 * cols) {
                const long long seg = c / cols;
                const float x = src[c - seg * cols];
                const float h = pk_split_round(x);
                // The rest's segment: the third of the left operand, the second of the right.
                const bool rest = seg == (order == 0 ? 2 : 1);
                v = rest ? pk_split_round(x - h) : h;
            }
            dst[c] = v;
        }
"#;

/// The split pairs of a 3xTF32 product ([`crate::splits_tf32_operands`]): each value `x` of a
/// row-major `float` matrix split into `h = tf32(x)` and `l = tf32(x - h)`, each row written as
/// `[h, h, l]` (`order` 0, the left operand) or `[h, l, h]` (`order` 1, the right operand) into
/// another buffer whose leading dimension is at least three times the columns (the values past
/// them 0).
///
/// Parameters: `(const long long rows, const long long cols, const long long ld_in, const long
/// long ld_out, const unsigned int order, const float* in, float* out)`; entry point
/// `pk_split_tf32`.
/// Launch: [`linear_grid_block`]`(32 * rows)` (a warp per row).
pub fn split_tf32() -> BuiltinKernel {
    let order = "    const unsigned int order,\n";
    untyped(
        "pk_split_tf32",
        &row_copy(SPLIT_TF32, order, "float", SPLIT_TF32_ROW),
    )
}

/// Every builtin kernel for `dtype` (and the untyped ones), e.g. to compile them all up front.
pub fn all(dtype: ScalarType) -> Vec<BuiltinKernel> {
    vec![
        diag(dtype),
        fill(dtype),
        fill_u32(),
        symmetrize_lower_to_upper(dtype),
        histogram(),
        permute_rows(),
        clamp_labels(),
        selection_scan(),
        selection_chunk_counts(),
        selection_chunk_offsets(),
        selection_scatter(dtype),
        selection_one_block(dtype),
        selection_weigh(dtype),
        csr_scatter(dtype),
        csr_row_norms(dtype),
        label_sums(dtype),
        small_counts(dtype),
        crate::label_row_sums::partial_kernel(dtype),
        crate::label_row_sums::reduce_kernel(dtype),
        round_tf32(),
        monomials(dtype),
        pack_half(kernel_ir::Half::Bf16),
        pack_half(kernel_ir::Half::F16),
        split_tf32(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::MAX_GRID_BLOCKS;

    #[test]
    fn the_one_block_selection_takes_what_one_block_of_chunks_holds() {
        assert!(selection_in_one_block(0, 0));
        assert!(selection_in_one_block(10_500, 26));
        assert!(selection_in_one_block(32 * 1024, 319));
        assert!(!selection_in_one_block(32 * 1024 + 1, 26));
        assert!(!selection_in_one_block(1000, 320));
        assert!(!selection_in_one_block(1000, u64::MAX));
        // Its rows, with the kernel's static shared memory (33 ints, padded), fit the 48 KiB a
        // block gets without opting in.
        let (_, block, shared) = selection_one_block_grid_block(319);
        assert_eq!(block, (1024, 1, 1));
        assert!(shared + 256 <= 48 * 1024, "{shared}");
        assert_eq!(selection_one_block_grid_block(u64::MAX).2, u32::MAX);
        let src = selection_one_block(ScalarType::F64).source;
        assert!(src.contains("pk_selection_one_block_f64("));
        assert!(src.contains("double* __restrict__ values"));
        assert!(src.contains("pk_block_exclusive_scan<32>"));
    }

    #[test]
    fn typed_names_carry_the_dtype_suffix() {
        assert_eq!(diag(ScalarType::F32).name, "pk_diag_f32");
        assert_eq!(diag(ScalarType::F64).name, "pk_diag_f64");
        assert_eq!(fill(ScalarType::F64).name, "pk_fill_f64");
        assert_eq!(fill_u32().name, "pk_fill_u32");
        assert_eq!(
            symmetrize_lower_to_upper(ScalarType::F32).name,
            "pk_symmetrize_lower_to_upper_f32"
        );
        assert_eq!(
            selection_scatter(ScalarType::F64).name,
            "pk_selection_scatter_f64"
        );
    }

    #[test]
    fn sources_are_fully_instantiated() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            for kernel in all(dtype) {
                assert!(!kernel.source.contains("{T}"), "{}", kernel.name);
                assert!(!kernel.source.contains("{NAME}"), "{}", kernel.name);
                assert!(!kernel.source.contains("#include"), "{}", kernel.name);
                let entry = format!(" {}(", kernel.name);
                assert_eq!(kernel.source.matches(&entry).count(), 1, "{}", kernel.name);
                assert!(kernel.source.contains("extern \"C\" __global__"));
            }
        }
    }

    #[test]
    fn diagonals_of_sixteen_bit_matrices_widen_each_entry() {
        for (half, widen) in [
            (kernel_ir::Half::Bf16, "pk_from_bf16"),
            (kernel_ir::Half::F16, "pk_from_f16"),
        ] {
            let k = diag_half(half);
            assert_eq!(k.name, diag_half_name(half));
            assert!(k.source.contains("const unsigned short* __restrict__ a"));
            assert!(k
                .source
                .contains(&format!("out[i] = {widen}(a[i * lda + i]);")));
            assert_eq!(k.source.matches(&format!(" {}(", k.name)).count(), 1);
        }
    }

    #[test]
    fn packed_operands_round_each_value_and_pair_them_low_first() {
        for (half, round) in [
            (kernel_ir::Half::Bf16, "pk_to_bf16"),
            (kernel_ir::Half::F16, "pk_to_f16"),
        ] {
            let k = pack_half(half);
            assert_eq!(k.name, pack_half_name(half));
            assert!(k.source.contains("#define PK_HALF_CONVERSIONS"));
            assert!(k
                .source
                .contains(&format!("(unsigned int){round}(src[c + 1])")));
            assert!(k.source.contains("dst[w] = lo | (hi << 16);"));
            assert_eq!(k.source.matches(&format!(" {}(", k.name)).count(), 1);
        }
    }

    #[test]
    fn typed_sources_use_the_c_type() {
        let f = fill(ScalarType::F64).source;
        assert!(f.contains("const double value"));
        assert!(f.contains("double* __restrict__ out"));
        assert!(!f.contains("float"));
        let u = fill_u32().source;
        assert!(u.contains("const unsigned int value"));
        assert!(u.contains("unsigned int* __restrict__ out"));
        let s = selection_scatter(ScalarType::F32).source;
        assert!(s.contains("float* __restrict__ values"));
        assert!(s.contains("(float)1 / (float)counts[label]"));
    }

    #[test]
    fn parameter_lists_follow_the_documented_abi() {
        let d = diag(ScalarType::F32).source;
        let order = [
            "const long long n",
            "const float* __restrict__ a",
            "const long long lda",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|p| d.find(p).unwrap_or(usize::MAX))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        let h = histogram().source;
        let order = [
            "const long long n",
            "const unsigned int* __restrict__ labels",
            "const long long k",
            "unsigned int* __restrict__ counts",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|p| h.find(p).unwrap_or(usize::MAX))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    }

    /// Whether `params` appear in `source` in this order.
    fn in_order(source: &str, params: &[&str]) -> bool {
        let positions: Vec<usize> = params
            .iter()
            .map(|p| source.find(p).unwrap_or(usize::MAX))
            .collect();
        positions.iter().all(|p| *p != usize::MAX) && positions.windows(2).all(|w| w[0] < w[1])
    }

    #[test]
    fn permute_rows_gathers_forward_and_scatters_back_over_every_row() {
        let k = permute_rows();
        assert_eq!(k.name, "pk_permute_rows");
        let src = &k.source;
        assert!(in_order(
            src,
            &[
                "const long long rows",
                "const long long words",
                "const int* __restrict__ col_idx",
                "const unsigned int* __restrict__ in",
                "const long long in_ld",
                "unsigned int* __restrict__ out",
                "const long long out_ld",
                "const unsigned int inverse)",
            ]
        ));
        // The full order: every row p < rows reads col_idx[p]; no fill, no row_ptr.
        assert!(src.contains("const long long total = rows * words;"));
        assert!(src.contains("const long long q = (long long)col_idx[p];"));
        assert!(src.contains("const long long from = inverse ? p : q;"));
        assert!(src.contains("const long long to = inverse ? q : p;"));
        assert!(src.contains("out[to * out_ld + w] = in[from * in_ld + w];"));
        assert!(!src.contains("fill") && !src.contains("row_ptr"));
    }

    #[test]
    fn clamp_labels_maps_labels_past_k_to_k() {
        let k = clamp_labels();
        assert_eq!(k.name, "pk_clamp_labels");
        assert!(in_order(
            &k.source,
            &[
                "const long long n",
                "const unsigned int* __restrict__ labels",
                "const long long k",
                "unsigned int* __restrict__ out)",
            ]
        ));
        assert!(k
            .source
            .contains("out[p] = ((long long)label < k) ? label : (unsigned int)k;"));
        assert!(all(ScalarType::F32).iter().any(|b| b.name == k.name));
    }

    #[test]
    fn linear_launch_covers_the_length() {
        assert_eq!(linear_grid_block(1), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(linear_grid_block(257), ((2, 1, 1), (256, 1, 1), 0));
        assert_eq!(linear_grid_block(0).0, (1, 1, 1));
        assert_eq!(linear_grid_block(10_000_000_000).0, (65_535, 1, 1));
    }

    #[test]
    fn symmetrize_launch_tiles_the_matrix() {
        assert_eq!(symmetrize_grid_block(1), ((1, 1, 1), (32, 8, 1), 0));
        assert_eq!(symmetrize_grid_block(33), ((2, 2, 1), (32, 8, 1), 0));
        assert_eq!(symmetrize_grid_block(64), ((2, 2, 1), (32, 8, 1), 0));
    }

    #[test]
    fn selection_weigh_divides_each_weight_by_its_rows_total() {
        let k = selection_weigh(ScalarType::F32);
        assert_eq!(k.name, "pk_selection_weigh_f32");
        assert!(in_order(
            &k.source,
            &[
                "const long long k",
                "const int* __restrict__ row_ptr",
                "const int* __restrict__ col_idx",
                "const float* __restrict__ weights",
                "float* __restrict__ values)",
            ]
        ));
        // Rows below k only (a runtime's extra row of labels >= k is left alone), the total
        // in double over the row's entries, a fixed butterfly, 0 for a zero total.
        assert!(k.source.contains("c < k; c += warps"));
        assert!(k.source.contains("total += (double)weights[col_idx[p]];"));
        assert!(k
            .source
            .contains("total += __shfl_xor_sync(0xffffffffu, total, off);"));
        assert!(k.source.contains(
            "values[p] = (total != 0.0) ? (float)((double)weights[col_idx[p]] / total) : (float)0;"
        ));
        assert!(!k.source.contains("atomic"));
        let d = selection_weigh(ScalarType::F64);
        assert!(d.source.contains("const double* __restrict__ weights"));
        assert!(all(ScalarType::F64).iter().any(|b| b.name == d.name));
        assert_eq!(selection_weigh_grid_block(1), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(selection_weigh_grid_block(17), ((3, 1, 1), (256, 1, 1), 0));
    }

    #[test]
    fn selection_layout_uses_small_chunks_when_the_workspace_is_small() {
        let layout = selection_layout(1_000_000, 100);
        assert_eq!(layout.chunk, 1024);
        assert_eq!(layout.chunks, 977);
        assert_eq!(layout.workspace_ints, 97_700);
        let tiny = selection_layout(1, 1);
        assert_eq!((tiny.chunk, tiny.chunks, tiny.workspace_ints), (1024, 1, 1));
        let empty = selection_layout(0, 5);
        assert_eq!((empty.chunks, empty.workspace_ints), (0, 0));
    }

    #[test]
    fn selection_layout_caps_the_workspace_for_many_clusters() {
        let layout = selection_layout(1_000_000, 100_000);
        assert_eq!(layout.chunk % 32, 0);
        assert!(layout.chunk > 1024);
        assert_eq!(layout.chunks, 1_000_000_u64.div_ceil(layout.chunk));
        assert!(layout.workspace_ints <= SELECTION_WORKSPACE_CAP_INTS);
        assert_eq!(layout.workspace_ints, layout.chunks * 100_000);
    }

    #[test]
    fn grid_limits_hold() {
        assert!(MAX_GRID_BLOCKS <= u64::from(u16::MAX));
        assert_eq!(
            selection_chunks_grid_block(977, 10),
            ((123, 1, 1), (256, 1, 1), 320)
        );
        assert_eq!(
            selection_chunks_grid_block(977, SELECTION_SHARED_MAX_K),
            ((123, 1, 1), (256, 1, 1), 49_152)
        );
        assert_eq!(
            selection_chunks_grid_block(977, SELECTION_SHARED_MAX_K + 1).2,
            0
        );
        assert_eq!(selection_scan_grid_block(), ((1, 1, 1), (1024, 1, 1), 0));
    }
}
