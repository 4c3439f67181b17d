//! The per-column template ([`Form::Cols`](kernel_ir::Form::Cols)).
//!
//! A block of `(W, R)` threads (`W * R` = [`COLUMN_BLOCK_THREADS`], `R` a power of two, both
//! chosen at launch by [`LaunchShape::grid_block`] from the number of columns) handles `W`
//! consecutive columns at a time, grid-striding over column groups. Thread `(tx, ty)` folds rows
//! `ty, ty + R, ...` of column `j = c0 + tx` in ascending order into a partial; the `R`
//! partials of a column are then combined through dynamic shared memory by a fixed tree
//! (`ty` with `ty + R/2`, then `ty + R/4`, ...). No atomics: for given `rows` and `cols` the
//! result depends only on the data, so it is deterministic. Reads of a non-transposed matrix
//! touch `W` consecutive elements per row.
//!
//! Few columns give few column groups, so `W` shrinks (see
//! [`column_group_width`](crate::emit::column_group_width)) to spread a tall matrix over more
//! blocks, and the rows are split into `gridDim.y` slices of consecutive rows
//! ([`column_row_slices`](crate::emit::column_row_slices)). Each block of a split launch
//! writes its partials to the `scratch` parameter (`[slice][column][reduction]`), then takes a
//! ticket for its column group (an atomic increment; the tickets follow the partials at the
//! next 16-byte boundary and are zero at launch); the block that takes the last ticket folds
//! the slices' partials in slice order and writes the result. The order of every fold is
//! fixed by the sizes alone, so split launches are deterministic too.

use super::expr::{inf_macro, ElementScope};
use super::launch::{LaunchShape, COLUMN_BLOCK_THREADS};
use crate::params::CType;
use kernel_ir::{KernelSpec, ReduceKind, Reduction};

/// Block depths (`blockDim.y`) with a row loop of constant stride: those of 32- and 4-column
/// groups, the shapes of wide and of tall matrices.
const SPECIALISED_DEPTHS: [u32; 2] = [COLUMN_BLOCK_THREADS / 32, COLUMN_BLOCK_THREADS / 4];

/// The launch shape of column kernels of `spec`.
pub(crate) fn launch(spec: &KernelSpec) -> LaunchShape {
    LaunchShape::ColumnGroups {
        block_threads: COLUMN_BLOCK_THREADS,
        // Both element sizes are 4 or 8 bytes.
        elem_bytes: u32::try_from(spec.dtype.size_bytes()).unwrap_or(8),
    }
}

/// The statements of a column kernel's body.
pub(crate) fn body(spec: &KernelSpec, reductions: &[Reduction]) -> String {
    let t = spec.dtype.c_name();
    let inf = inf_macro(spec.dtype);

    let mut s = String::new();
    if reductions.is_empty() {
        return s;
    }
    s.push_str("    extern __shared__ __align__(8) unsigned char pk_smem[];\n");
    s.push_str(&format!("    {t}* const pk_part = ({t}*)pk_smem;\n"));
    s.push_str("    const int pk_tx = (int)threadIdx.x;\n");
    s.push_str("    const int pk_ty = (int)threadIdx.y;\n");
    s.push_str("    const int pk_width = (int)blockDim.x;\n");
    s.push_str("    const int pk_depth = (int)blockDim.y;\n");
    s.push_str("    const int pk_slot = pk_ty * pk_width + pk_tx;\n");
    // This block's slice of rows.
    s.push_str(
        "    const long long pk_slice = (rows + (long long)gridDim.y - 1) / (long long)gridDim.y;\n\
         \x20   const long long pk_r0 = (long long)blockIdx.y * pk_slice;\n\
         \x20   const long long pk_r1 = (pk_r0 + pk_slice < rows) ? pk_r0 + pk_slice : rows;\n",
    );
    let nred = reductions.len();
    s.push_str(&format!(
        "    {t}* const pk_partials = ({t}*)scratch;\n\
         \x20   unsigned int* const pk_tickets = (unsigned int*)(scratch + \
         ((long long)gridDim.y * cols * {nred}LL * (long long)sizeof({t}) + 15LL) / 16LL * 16LL);\n\
         \x20   __shared__ bool pk_last;\n"
    ));
    s.push_str(
        "    for (long long pk_c0 = (long long)blockIdx.x * pk_width; pk_c0 < cols; \
         pk_c0 += (long long)gridDim.x * pk_width) {\n",
    );
    s.push_str("        const long long j = pk_c0 + pk_tx;\n");
    for (k, r) in reductions.iter().enumerate() {
        let init = match r.kind {
            ReduceKind::Min => inf.to_string(),
            ReduceKind::Max => format!("-{inf}"),
            // Sum; unsupported kinds (reported by validation) are treated as sums.
            _ => format!("({t})0"),
        };
        s.push_str(&format!("        {t} r{k} = {init};\n"));
    }

    let mut scope = ElementScope::new(spec, "i", "j", "t");
    let values: Vec<String> = reductions.iter().map(|r| scope.value(&r.expr)).collect();
    // The row loop, specialised for the common depths: a constant stride lets the compiler
    // unroll and keep more loads in flight (about 1.4x on wide f32 matrices). Every variant
    // folds the same rows in the same order, and for given sizes the same variant runs, so
    // results stay deterministic (variants may differ in FMA contraction, not in order).
    let row_loop = |s: &mut String, stride: &str, indent: &str| {
        s.push_str(&format!(
            "{indent}for (long long i = pk_r0 + pk_ty; i < pk_r1; i += {stride}) {{\n"
        ));
        scope.write_to(s, &format!("{indent}    "));
        for (k, (r, v)) in reductions.iter().zip(&values).enumerate() {
            s.push_str(&format!(
                "{indent}    {}\n",
                fold(r.kind, &format!("r{k}"), v)
            ));
        }
        s.push_str(&format!("{indent}}}\n"));
    };
    s.push_str("        if (j < cols) {\n");
    let mut first = true;
    for depth in SPECIALISED_DEPTHS {
        let keyword = if first { "if" } else { "} else if" };
        first = false;
        s.push_str(&format!("            {keyword} (pk_depth == {depth}) {{\n"));
        row_loop(&mut s, &depth.to_string(), "                ");
    }
    s.push_str("            } else {\n");
    row_loop(&mut s, "pk_depth", "                ");
    s.push_str("            }\n");
    s.push_str("        }\n");

    for (k, r) in reductions.iter().enumerate() {
        s.push_str(&format!("        pk_part[pk_slot] = r{k};\n"));
        s.push_str("        __syncthreads();\n");
        s.push_str("        for (int pk_half = pk_depth >> 1; pk_half > 0; pk_half >>= 1) {\n");
        s.push_str("            if (pk_ty < pk_half) {\n");
        s.push_str(&format!("                {t} pk_acc = pk_part[pk_slot];\n"));
        s.push_str(&format!(
            "                const {t} pk_v = pk_part[pk_slot + pk_half * pk_width];\n"
        ));
        s.push_str(&format!(
            "                {}\n",
            fold(r.kind, "pk_acc", "pk_v")
        ));
        s.push_str("                pk_part[pk_slot] = pk_acc;\n");
        s.push_str("            }\n");
        s.push_str("            __syncthreads();\n");
        s.push_str("        }\n");
        s.push_str(&format!(
            "        if (pk_ty == 0 && j < cols) {{\n\
             \x20           if (gridDim.y == 1) {{\n\
             \x20               out{k}[j] = pk_part[pk_tx];\n\
             \x20           }} else {{\n\
             \x20               pk_partials[((long long)blockIdx.y * cols + j) * {nred}LL + {k}LL] = pk_part[pk_tx];\n\
             \x20           }}\n\
             \x20       }}\n"
        ));
        s.push_str("        __syncthreads();\n");
    }
    // Split rows: the last block of the column group folds the slices' partials in order.
    s.push_str(
        "        if (gridDim.y > 1) {\n\
         \x20           __threadfence();\n\
         \x20           __syncthreads();\n\
         \x20           if (pk_tx == 0 && pk_ty == 0) {\n\
         \x20               pk_last = atomicAdd(&pk_tickets[pk_c0 / pk_width], 1u) == gridDim.y - 1u;\n\
         \x20           }\n\
         \x20           __syncthreads();\n\
         \x20           if (pk_last && pk_ty == 0 && j < cols) {\n\
         \x20               __threadfence();\n",
    );
    s.push_str(&format!(
        "                const volatile {t}* const pk_seen = pk_partials;\n"
    ));
    for (k, r) in reductions.iter().enumerate() {
        s.push_str(&format!(
            "                {{\n\
             \x20                   {t} pk_acc = pk_seen[j * {nred}LL + {k}LL];\n\
             \x20                   for (unsigned int pk_s = 1; pk_s < gridDim.y; ++pk_s) {{\n\
             \x20                       const {t} pk_v = pk_seen[((long long)pk_s * cols + j) * {nred}LL + {k}LL];\n\
             \x20                       {}\n\
             \x20                   }}\n\
             \x20                   out{k}[j] = pk_acc;\n\
             \x20               }}\n",
            fold(r.kind, "pk_acc", "pk_v")
        ));
    }
    s.push_str("            }\n            __syncthreads();\n        }\n");
    s.push_str("    }\n");
    s
}

/// The statement folding `value` into accumulator `acc` for a column reduction of `kind`.
fn fold(kind: ReduceKind, acc: &str, value: &str) -> String {
    match kind {
        ReduceKind::Min => format!("{acc} = ({value} < {acc}) ? {value} : {acc};"),
        ReduceKind::Max => format!("{acc} = ({value} > {acc}) ? {value} : {acc};"),
        _ => format!("{acc} += {value};"),
    }
}
