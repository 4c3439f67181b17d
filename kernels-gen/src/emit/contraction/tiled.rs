//! The tiled contraction template: the general one (any operand orientation, `float` or
//! `double`, sums by label).
//!
//! # Work division
//! A block of 128 threads owns 64 rows of the space at a time (grid-stride over blocks of rows)
//! and walks all of its columns in tiles of 64. For each tile it accumulates `P = op(A) op(B)`
//! over the depth in slices of `BK` (16 for `float`, 8 for `double`), staging a 64 x BK slice
//! of A and a BK x 64 slice of B in shared memory, depth-major (`[p][m]`, rows padded to 72
//! elements so the tensor-core fragments load without bank conflicts); out-of-range elements
//! are staged as zeros. Each thread then holds 32 elements of the tile:
//! - strict (`float` or `double` fused multiply-adds): thread `(tx, ty) = (t % 16, t / 16)`
//!   holds rows `4 ty + r` and `32 + 4 ty + r` (`r < 4`) by columns `4 tx + c` (`c < 4`);
//! - TF32 (`mma.sync.m16n8k8` on tensor cores, operands rounded to TF32, or to bf16 or fp16
//!   for 16-bit operands, when staged, fp32
//!   accumulation): the four warps form a 2 x 2 grid of 32 x 32 warp tiles, each two 16-row by
//!   four 8-column fragments in the PTX accumulator layout.
//!
//! # Epilogue and reductions
//! Each held element `(i, j)` inside the space evaluates the epilogue expressions with
//! [`Expr::Product`] as its accumulator, writes the stores, and folds each row reduction into
//! the thread's partial for that row, visiting its columns in ascending order (so `ArgMin`'s
//! strict `<` keeps the lowest column among a thread's ties). After the last tile the partials
//! of the threads sharing a row (16 for strict, 8 for TF32) meet in shared memory and thread
//! `m < 64` combines those of row `m` in a fixed order: sums in that order, `ArgMin` by
//! (value, column), so the result is the sequential scan's. `Dot` is a sum of
//! `value * w[j]`; `Pick` keeps the one element at `j == idx[i]` (NaN where `idx[i] >= cols`);
//! `ByLabel` adds each element into a shared-memory bin `(row, labels[j])` with a shared
//! atomic add (labels at or beyond `width` are skipped) and the block writes its rows' bins
//! at the end, so sums by label come in no fixed order.

use super::super::expr::{from_half_fn, narrowed, to_half_fn, ElementScope, HALF_CONVERSIONS};
use super::super::launch::{
    LaunchShape, CONTRACTION_BLOCK_COLS, CONTRACTION_BLOCK_ROWS, CONTRACTION_THREADS,
};
use super::{combine, fold, identity, Parts};
use crate::params::CType;
use kernel_ir::{Access, Expr, KernelSpec, Precision, ReduceKind, Reduction, ScalarType};

/// Padded row length of the staged slices (elements): 72 puts the rows of a tensor-core
/// fragment 8 banks apart.
const STAGE_STRIDE: u32 = CONTRACTION_BLOCK_ROWS + 8;
/// Elements of the tile each thread holds.
const HELD: u32 = CONTRACTION_BLOCK_ROWS * CONTRACTION_BLOCK_COLS / CONTRACTION_THREADS;

/// The launch shape of a contraction kernel.
pub(crate) fn launch(spec: &KernelSpec) -> LaunchShape {
    let by_label = match &spec.form {
        kernel_ir::Form::Contraction { reductions, .. } => reductions
            .iter()
            .filter(|r| matches!(r.kind, ReduceKind::ByLabel { .. }))
            .count(),
        _ => 0,
    };
    LaunchShape::RowBlocks {
        block_rows: CONTRACTION_BLOCK_ROWS,
        threads: CONTRACTION_THREADS,
        bin_bytes: (spec.dtype.size_bytes() * by_label) as u32,
    }
}

/// How the threads of a block hold the tile: C expressions of the held element number `e`
/// (a compile-time constant after unrolling) and of the row slot `s`.
struct Layout {
    /// Per-thread constants, declared once.
    setup: &'static str,
    /// Row of element `e` within the block's 64 rows.
    row: &'static str,
    /// Column of element `e` within the tile.
    col: &'static str,
    /// Row slot of element `e` (which of the thread's rows it is in).
    slot: &'static str,
    /// Row, within the block, of row slot `s`.
    slot_row: &'static str,
    /// Number of row slots per thread.
    slots: u32,
    /// Which of the threads sharing a row this one is (`0..groups`).
    group: &'static str,
    /// Threads sharing each row.
    groups: u32,
}

const STRICT: Layout = Layout {
    setup: "const int pk_tx = (int)(threadIdx.x & 15u);\n    \
            const int pk_ty = (int)(threadIdx.x >> 4);\n",
    row: "(((e) >> 2) < 4 ? 4 * pk_ty + ((e) >> 2) : 28 + 4 * pk_ty + ((e) >> 2))",
    col: "(4 * pk_tx + ((e) & 3))",
    slot: "((e) >> 2)",
    slot_row: "((s) < 4 ? 4 * pk_ty + (s) : 28 + 4 * pk_ty + (s))",
    slots: 8,
    group: "pk_tx",
    groups: 16,
};

const TENSOR: Layout = Layout {
    setup: "const int pk_lane = (int)(threadIdx.x & 31u);\n    \
            const int pk_warp = (int)(threadIdx.x >> 5);\n    \
            const int pk_g = pk_lane >> 2;\n    \
            const int pk_t = pk_lane & 3;\n    \
            const int pk_wm = pk_warp >> 1;\n    \
            const int pk_wn = pk_warp & 1;\n",
    row: "(32 * pk_wm + 16 * ((e) >> 4) + pk_g + 8 * (((e) >> 1) & 1))",
    col: "(32 * pk_wn + 8 * (((e) >> 2) & 3) + 2 * pk_t + ((e) & 1))",
    slot: "(2 * ((e) >> 4) + (((e) >> 1) & 1))",
    slot_row: "(32 * pk_wm + 16 * ((s) >> 1) + pk_g + 8 * ((s) & 1))",
    slots: 4,
    group: "(4 * pk_wn + pk_t)",
    groups: 8,
};

/// The template text: the rounding helpers for tensor cores, and the statements. With 16-bit
/// operands ([`Precision::Half`]) the template rounds each staged value to the 16-bit format
/// and multiplies on the TF32 tensor cores, which hold every bf16 and fp16 value exactly: the
/// products are those of the 16-bit operands.
pub(crate) fn parts(
    spec: &KernelSpec,
    operands: (usize, usize),
    precision: Precision,
    stores: &[Expr],
    reductions: &[Reduction],
) -> Parts {
    let (preamble, round) = match precision {
        // No split operands on this template: the accurate product is the strict one.
        Precision::Strict | Precision::Tf32x3 => (String::new(), None),
        Precision::Tf32 => (TF32_HELPER.to_string(), Some("pk_tf32(pk_v)".to_string())),
        Precision::Half(half) => (
            HALF_CONVERSIONS.to_string(),
            Some(format!(
                "{}({}(pk_v))",
                from_half_fn(half),
                to_half_fn(half)
            )),
        ),
    };
    Parts {
        preamble,
        statements: body(spec, operands, round.as_deref(), stores, reductions),
    }
}

/// The statements of a contraction kernel's body.
fn body(
    spec: &KernelSpec,
    (a, b): (usize, usize),
    round: Option<&str>,
    stores: &[Expr],
    reductions: &[Reduction],
) -> String {
    let tensor = round.is_some();
    let t = spec.dtype.c_name();
    let layout = if tensor { &TENSOR } else { &STRICT };
    let bk = match spec.dtype {
        ScalarType::F32 => 16,
        ScalarType::F64 => 8,
    };
    let bm = CONTRACTION_BLOCK_ROWS;
    let bn = CONTRACTION_BLOCK_COLS;
    let threads = CONTRACTION_THREADS;
    let stride = STAGE_STRIDE;
    let partials: Vec<(usize, &Reduction)> = reductions
        .iter()
        .enumerate()
        .filter(|(_, r)| !matches!(r.kind, ReduceKind::ByLabel { .. }))
        .collect();
    let bins: Vec<usize> = reductions
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r.kind, ReduceKind::ByLabel { .. }))
        .map(|(k, _)| k)
        .collect();
    let needs_at = partials
        .iter()
        .any(|(_, r)| matches!(r.kind, ReduceKind::ArgMin));

    let mut s = String::new();
    s.push_str(&format!(
        "    __shared__ __align__(16) {t} pk_as[{bk}][{stride}];\n\
         \x20   __shared__ __align__(16) {t} pk_bs[{bk}][{stride}];\n"
    ));
    let groups = layout.groups;
    if !partials.is_empty() {
        s.push_str(&format!("    __shared__ {t} pk_red[{}];\n", bm * groups));
    }
    if needs_at {
        s.push_str(&format!(
            "    __shared__ unsigned int pk_red_at[{}];\n",
            bm * groups
        ));
    }
    if !bins.is_empty() {
        s.push_str("    extern __shared__ __align__(16) unsigned char pk_dynamic[];\n");
        s.push_str(&format!("    {t}* const pk_bins = ({t}*)pk_dynamic;\n"));
        s.push_str(&format!(
            "    const long long pk_bin_count = {bm}LL * width * {}LL;\n",
            bins.len()
        ));
    }
    s.push_str("    const int pk_tid = (int)threadIdx.x;\n    ");
    s.push_str(layout.setup);
    s.push_str(&format!(
        "    for (long long pk_i0 = (long long)blockIdx.x * {bm}; pk_i0 < rows; \
         pk_i0 += (long long)gridDim.x * {bm}) {{\n"
    ));
    s.push_str(&partial_init(spec, &partials, layout.slots));
    if !bins.is_empty() {
        s.push_str(&format!(
            "        for (long long q = pk_tid; q < pk_bin_count; q += {threads}) {{\n\
             \x20           pk_bins[q] = ({t})0;\n        }}\n        __syncthreads();\n"
        ));
    }
    s.push_str(&format!(
        "        for (long long pk_j0 = 0; pk_j0 < cols; pk_j0 += {bn}) {{\n"
    ));
    s.push_str(&format!("            {t} pk_acc[{HELD}];\n"));
    s.push_str(&format!(
        "#pragma unroll\n            for (int e = 0; e < {HELD}; ++e) {{\n\
         \x20               pk_acc[e] = ({t})0;\n            }}\n"
    ));
    s.push_str(&format!(
        "            for (long long pk_p0 = 0; pk_p0 < depth; pk_p0 += {bk}) {{\n"
    ));
    s.push_str("                __syncthreads();\n");
    s.push_str(&stage(spec, a, true, bk, round));
    s.push_str(&stage(spec, b, false, bk, round));
    s.push_str("                __syncthreads();\n");
    if tensor {
        s.push_str(&tensor_steps(bk));
    } else {
        s.push_str(&strict_steps(spec.dtype, bk));
    }
    s.push_str("            }\n");
    s.push_str(&epilogue(spec, layout, stores, reductions));
    s.push_str("        }\n");
    s.push_str(&finish(spec, layout, stores.len(), reductions));
    s.push_str("    }\n");
    s
}

/// Declarations of the per-row partials of the non-by-label reductions.
fn partial_init(spec: &KernelSpec, partials: &[(usize, &Reduction)], slots: u32) -> String {
    let t = spec.dtype.c_name();
    let mut s = String::new();
    for &(k, r) in partials {
        let Some(init) = identity(r.kind, spec.dtype) else {
            continue;
        };
        s.push_str(&format!("        {t} r{k}[{slots}];\n"));
        if matches!(r.kind, ReduceKind::ArgMin) {
            s.push_str(&format!("        unsigned int r{k}_at[{slots}];\n"));
        }
        s.push_str(&format!(
            "#pragma unroll\n        for (int s = 0; s < {slots}; ++s) {{\n            r{k}[s] = {init};\n"
        ));
        if matches!(r.kind, ReduceKind::ArgMin) {
            s.push_str(&format!("            r{k}_at[s] = 0u;\n"));
        }
        s.push_str("        }\n");
    }
    s
}

/// Code staging one depth slice of operand `input` (A when `left`) in shared memory, zeros
/// outside the matrix, rounded by `round` (an expression of `pk_v`) for tensor cores.
/// Consecutive threads read consecutive addresses of the stored matrix.
fn stage(spec: &KernelSpec, input: usize, left: bool, bk: u32, round: Option<&str>) -> String {
    let t = spec.dtype.c_name();
    let transposed = match spec.inputs.get(input).map(|i| i.access) {
        Some(Access::Left { transposed } | Access::Right { transposed }) => transposed,
        _ => false,
    };
    let side = CONTRACTION_BLOCK_ROWS; // = CONTRACTION_BLOCK_COLS: both slices are 64 x bk.
    let threads = CONTRACTION_THREADS;
    let p = format!("in{input}");
    // Element (m, q) of the slice: m along the rows (A) or columns (B) of the space, q along
    // the depth. The stored matrix is contiguous along the depth for A not transposed and B
    // transposed.
    let depth_contiguous = left != transposed;
    let (m, q) = if depth_contiguous {
        (format!("(pk_x / {bk})"), format!("(pk_x % {bk})"))
    } else {
        (format!("(pk_x % {side})"), format!("(pk_x / {side})"))
    };
    let (origin, limit) = if left {
        ("pk_i0", "rows")
    } else {
        ("pk_j0", "cols")
    };
    let address = if depth_contiguous {
        format!("{p}[pk_m * {p}_ld + pk_q]")
    } else {
        format!("{p}[pk_q * {p}_ld + pk_m]")
    };
    let round = match round {
        Some(rounded) => format!("                    pk_v = {rounded};\n"),
        None => String::new(),
    };
    let target = if left { "pk_as" } else { "pk_bs" };
    format!(
        "#pragma unroll\n\
         \x20               for (int pk_x = pk_tid; pk_x < {side} * {bk}; pk_x += {threads}) {{\n\
         \x20                   const int pk_sm = {m};\n\
         \x20                   const int pk_sq = {q};\n\
         \x20                   const long long pk_m = {origin} + pk_sm;\n\
         \x20                   const long long pk_q = pk_p0 + pk_sq;\n\
         \x20                   {t} pk_v = ({t})0;\n\
         \x20                   if (pk_m < {limit} && pk_q < depth) {{\n\
         \x20                       pk_v = {address};\n\
         \x20                   }}\n\
         {round}\
         \x20                   {target}[pk_sq][pk_sm] = pk_v;\n\
         \x20               }}\n"
    )
}

/// The strict inner loop: per depth step, 8 values of A and 4 of B from shared memory, 32
/// fused multiply-adds.
fn strict_steps(dtype: ScalarType, bk: u32) -> String {
    let t = dtype.c_name();
    let mut s = String::new();
    s.push_str(&format!(
        "#pragma unroll\n                for (int pk_k = 0; pk_k < {bk}; ++pk_k) {{\n"
    ));
    s.push_str(&format!(
        "                    {t} pk_a[8];\n                    {t} pk_b[4];\n"
    ));
    s.push_str(
        "#pragma unroll\n                    for (int r = 0; r < 4; ++r) {\n\
         \x20                       pk_a[r] = pk_as[pk_k][4 * pk_ty + r];\n\
         \x20                       pk_a[4 + r] = pk_as[pk_k][32 + 4 * pk_ty + r];\n\
         \x20                       pk_b[r] = pk_bs[pk_k][4 * pk_tx + r];\n\
         \x20                   }\n",
    );
    s.push_str(
        "#pragma unroll\n                    for (int r = 0; r < 8; ++r) {\n\
         #pragma unroll\n                        for (int c = 0; c < 4; ++c) {\n\
         \x20                           pk_acc[4 * r + c] = fma(pk_a[r], pk_b[c], pk_acc[4 * r + c]);\n\
         \x20                       }\n                    }\n                }\n",
    );
    if dtype == ScalarType::F32 {
        // `fma` on floats: the float overload exists in CUDA's device library.
        s = s.replace("fma(", "fmaf(");
    }
    s
}

/// The tensor-core inner loop: per 8-deep step, two A fragments and four B fragments from
/// shared memory, eight `mma.sync.m16n8k8` with TF32 operands and fp32 accumulators.
fn tensor_steps(bk: u32) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "#pragma unroll\n                for (int pk_k = 0; pk_k < {bk}; pk_k += 8) {{\n"
    ));
    s.push_str(
        "                    unsigned int pk_fa[2][4];\n\
         \x20                   unsigned int pk_fb[4][2];\n\
         #pragma unroll\n                    for (int mi = 0; mi < 2; ++mi) {\n\
         \x20                       const int m = 32 * pk_wm + 16 * mi + pk_g;\n\
         \x20                       pk_fa[mi][0] = __float_as_uint(pk_as[pk_k + pk_t][m]);\n\
         \x20                       pk_fa[mi][1] = __float_as_uint(pk_as[pk_k + pk_t][m + 8]);\n\
         \x20                       pk_fa[mi][2] = __float_as_uint(pk_as[pk_k + pk_t + 4][m]);\n\
         \x20                       pk_fa[mi][3] = __float_as_uint(pk_as[pk_k + pk_t + 4][m + 8]);\n\
         \x20                   }\n\
         #pragma unroll\n                    for (int ni = 0; ni < 4; ++ni) {\n\
         \x20                       const int n = 32 * pk_wn + 8 * ni + pk_g;\n\
         \x20                       pk_fb[ni][0] = __float_as_uint(pk_bs[pk_k + pk_t][n]);\n\
         \x20                       pk_fb[ni][1] = __float_as_uint(pk_bs[pk_k + pk_t + 4][n]);\n\
         \x20                   }\n\
         #pragma unroll\n                    for (int mi = 0; mi < 2; ++mi) {\n\
         #pragma unroll\n                        for (int ni = 0; ni < 4; ++ni) {\n\
         \x20                           float* const c = &pk_acc[16 * mi + 4 * ni];\n\
         \x20                           asm volatile(\n\
         \x20                               \"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 \"\n\
         \x20                               \"{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n\"\n\
         \x20                               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n\
         \x20                               : \"r\"(pk_fa[mi][0]), \"r\"(pk_fa[mi][1]), \"r\"(pk_fa[mi][2]), \"r\"(pk_fa[mi][3]),\n\
         \x20                                 \"r\"(pk_fb[ni][0]), \"r\"(pk_fb[ni][1]));\n\
         \x20                       }\n                    }\n                }\n",
    );
    s
}

/// The epilogue of one tile: each held element inside the space evaluates the expressions,
/// writes the stores and feeds the reductions.
fn epilogue(
    spec: &KernelSpec,
    layout: &Layout,
    stores: &[Expr],
    reductions: &[Reduction],
) -> String {
    let mut scope = ElementScope::new(spec, "i", "j", "t").with_product("pk_acc[e]");
    let stored: Vec<String> = stores.iter().map(|e| scope.value(e)).collect();
    let reduced: Vec<String> = reductions.iter().map(|r| scope.value(&r.expr)).collect();
    let mut s = String::new();
    s.push_str(&format!(
        "#pragma unroll\n            for (int e = 0; e < {HELD}; ++e) {{\n"
    ));
    s.push_str(&format!(
        "                const int pk_slot = {};\n",
        layout.slot
    ));
    s.push_str(&format!(
        "                const long long i = pk_i0 + {};\n",
        layout.row
    ));
    s.push_str(&format!(
        "                const long long j = pk_j0 + {};\n",
        layout.col
    ));
    s.push_str("                if (i < rows && j < cols) {\n");
    scope.write_to(&mut s, "                    ");
    for (k, v) in stored.iter().enumerate() {
        let v = narrowed(spec, k, v);
        s.push_str(&format!(
            "                    out{k}[i * cols + j] = {v};\n"
        ));
    }
    let mut bin = 0usize;
    for (k, (r, v)) in reductions.iter().zip(&reduced).enumerate() {
        let partial = format!("r{k}[pk_slot]");
        let at = format!("r{k}_at[pk_slot]");
        let line = match fold(r.kind, v, &partial, &at) {
            Some(line) => line,
            None => {
                let ReduceKind::ByLabel { labels } = r.kind else {
                    continue;
                };
                let line = format!(
                    "{{ const unsigned int pk_c = in{labels}[j]; if ((long long)pk_c < width) \
                     {{ atomicAdd(&pk_bins[{bin}LL * {bm}LL * width + (long long)({row}) * width + \
                     (long long)pk_c], {v}); }} }}",
                    bm = CONTRACTION_BLOCK_ROWS,
                    row = layout.row,
                );
                bin += 1;
                line
            }
        };
        s.push_str(&format!("                    {line}\n"));
    }
    s.push_str("                }\n            }\n");
    s
}

/// After the last tile: the partials of each row meet in shared memory and are combined in a
/// fixed order by thread `m` for row `m`; the by-label bins are written out.
fn finish(spec: &KernelSpec, layout: &Layout, n_stores: usize, reductions: &[Reduction]) -> String {
    let t = spec.dtype.c_name();
    let bm = CONTRACTION_BLOCK_ROWS;
    let threads = CONTRACTION_THREADS;
    let groups = layout.groups;
    let slots = layout.slots;
    let mut s = String::new();
    let mut bin = 0usize;
    for (k, r) in reductions.iter().enumerate() {
        let out = n_stores + k;
        if let ReduceKind::ByLabel { .. } = r.kind {
            s.push_str(&format!(
                "        __syncthreads();\n\
                 \x20       for (long long q = pk_tid; q < {bm}LL * width; q += {threads}) {{\n\
                 \x20           const long long i = pk_i0 + q / width;\n\
                 \x20           if (i < rows) {{\n\
                 \x20               out{out}[i * width + q % width] = pk_bins[{bin}LL * {bm}LL * width + q];\n\
                 \x20           }}\n        }}\n"
            ));
            bin += 1;
            continue;
        }
        let argmin = matches!(r.kind, ReduceKind::ArgMin);
        s.push_str("        __syncthreads();\n");
        s.push_str(&format!(
            "#pragma unroll\n        for (int s = 0; s < {slots}; ++s) {{\n\
             \x20           pk_red[({}) * {groups} + {}] = r{k}[s];\n",
            layout.slot_row, layout.group
        ));
        if argmin {
            s.push_str(&format!(
                "            pk_red_at[({}) * {groups} + {}] = r{k}_at[s];\n",
                layout.slot_row, layout.group
            ));
        }
        s.push_str("        }\n        __syncthreads();\n");
        s.push_str(&format!(
            "        if (pk_tid < {bm} && pk_i0 + pk_tid < rows) {{\n\
             \x20           const long long i = pk_i0 + pk_tid;\n\
             \x20           {t} v = pk_red[pk_tid * {groups}];\n"
        ));
        if argmin {
            s.push_str(&format!(
                "            unsigned int at = pk_red_at[pk_tid * {groups}];\n"
            ));
        }
        s.push_str(&format!(
            "            for (int g = 1; g < {groups}; ++g) {{\n\
             \x20               const {t} o = pk_red[pk_tid * {groups} + g];\n"
        ));
        let o_at = format!("pk_red_at[pk_tid * {groups} + g]");
        let fold = combine(r.kind, "v", "o", "at", &o_at).unwrap_or_default();
        s.push_str(&format!("                {fold}\n            }}\n"));
        if argmin {
            s.push_str(&format!("            out{out}[i] = at;\n"));
        } else {
            s.push_str(&format!("            out{out}[i] = v;\n"));
        }
        s.push_str("        }\n");
    }
    s.push_str("        __syncthreads();\n");
    s
}

/// The TF32 rounding helper the tensor-core template calls while staging.
pub(crate) const TF32_HELPER: &str = "#ifndef PK_TF32\n#define PK_TF32\n\
__device__ __forceinline__ float pk_tf32(float x) {\n\
\x20   unsigned int r;\n\
\x20   asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : \"f\"(x));\n\
\x20   return __uint_as_float(r);\n\
}\n#endif\n";
