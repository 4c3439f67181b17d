//! The per-row template ([`Form::Rows`](kernel_ir::Form::Rows)).
//!
//! One warp per row: a block of several warps handles several rows and the grid strides over
//! rows. Lane `l` visits columns `l, l + 32, ...` in ascending order, writing the element-wise
//! stores and folding each reduction into its own partial; the 32 partials are then combined by
//! a shuffle tree (`__shfl_down_sync`, offsets 16, 8, 4, 2, 1) and lane 0 writes the results.
//! The combining order depends only on `cols`, never on the launch, so results are
//! deterministic.
//!
//! A `Pick` reduction needs no pass over the columns: lane 0 evaluates the expression once at
//! `(i, idx[i])`, or writes NaN where `idx[i] >= cols` (the GPU cannot report the error the CPU
//! backend raises).

use super::expr::{inf_macro, nan_macro, narrowed, ElementScope};
use super::launch::{LaunchShape, ROW_WARPS_PER_BLOCK};
use crate::params::CType;
use kernel_ir::{Expr, KernelSpec, ReduceKind, Reduction};

/// The launch shape of row kernels.
pub(crate) const LAUNCH: LaunchShape = LaunchShape::WarpPerRow {
    warps_per_block: ROW_WARPS_PER_BLOCK,
};

/// The statements of a row kernel's body.
pub(crate) fn body(spec: &KernelSpec, stores: &[Expr], reductions: &[Reduction]) -> String {
    let t = spec.dtype.c_name();
    let inf = inf_macro(spec.dtype);
    let scanned: Vec<(usize, &Reduction)> = reductions
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            matches!(
                r.kind,
                ReduceKind::Sum | ReduceKind::Min | ReduceKind::Max | ReduceKind::ArgMin
            )
        })
        .collect();

    let mut s = String::new();
    s.push_str("    const int pk_lane = (int)(threadIdx.x & 31u);\n");
    s.push_str("    const long long pk_warps = (long long)(blockDim.x >> 5);\n");
    s.push_str(
        "    const long long pk_first = (long long)blockIdx.x * pk_warps + \
         (long long)(threadIdx.x >> 5);\n",
    );
    s.push_str("    const long long pk_step = (long long)gridDim.x * pk_warps;\n");
    s.push_str("    for (long long i = pk_first; i < rows; i += pk_step) {\n");

    // Per-lane partials.
    for &(k, r) in &scanned {
        match r.kind {
            ReduceKind::Sum => s.push_str(&format!("        {t} r{k} = ({t})0;\n")),
            ReduceKind::Min => s.push_str(&format!("        {t} r{k} = {inf};\n")),
            ReduceKind::Max => s.push_str(&format!("        {t} r{k} = -{inf};\n")),
            ReduceKind::ArgMin => s.push_str(&format!(
                "        {t} r{k} = {inf};\n        unsigned int r{k}_at = 0u;\n"
            )),
            // Pick is computed once at the end; Dot and ByLabel exist only in contractions
            // (validation reports them here).
            ReduceKind::Pick { .. } | ReduceKind::Dot { .. } | ReduceKind::ByLabel { .. } => {}
        }
    }

    // The pass over the columns.
    if !stores.is_empty() || !scanned.is_empty() {
        let mut scope = ElementScope::new(spec, "i", "j", "t");
        let stored: Vec<String> = stores.iter().map(|e| scope.value(e)).collect();
        let reduced: Vec<String> = scanned.iter().map(|(_, r)| scope.value(&r.expr)).collect();
        s.push_str("        for (long long j = pk_lane; j < cols; j += 32) {\n");
        scope.write_to(&mut s, "            ");
        for (k, value) in stored.iter().enumerate() {
            let value = narrowed(spec, k, value);
            s.push_str(&format!("            out{k}[i * cols + j] = {value};\n"));
        }
        for (&(k, r), v) in scanned.iter().zip(&reduced) {
            let line = match r.kind {
                ReduceKind::Sum => format!("r{k} += {v};"),
                ReduceKind::Min => format!("r{k} = ({v} < r{k}) ? {v} : r{k};"),
                ReduceKind::Max => format!("r{k} = ({v} > r{k}) ? {v} : r{k};"),
                // Strict `<` in ascending j: ties keep the lowest column, NaN never wins.
                ReduceKind::ArgMin => {
                    format!("if ({v} < r{k}) {{ r{k} = {v}; r{k}_at = (unsigned int)j; }}")
                }
                ReduceKind::Pick { .. } | ReduceKind::Dot { .. } | ReduceKind::ByLabel { .. } => {
                    continue
                }
            };
            s.push_str(&format!("            {line}\n"));
        }
        s.push_str("        }\n");
    }

    // Combine the 32 lanes' partials.
    if !scanned.is_empty() {
        s.push_str("        for (int pk_off = 16; pk_off > 0; pk_off >>= 1) {\n");
        for &(k, r) in &scanned {
            s.push_str(&format!(
                "            const {t} o{k} = __shfl_down_sync(0xffffffffu, r{k}, pk_off);\n"
            ));
            let line = match r.kind {
                ReduceKind::Sum => format!("r{k} += o{k};"),
                ReduceKind::Min => format!("r{k} = (o{k} < r{k}) ? o{k} : r{k};"),
                ReduceKind::Max => format!("r{k} = (o{k} > r{k}) ? o{k} : r{k};"),
                // Compare (value, index): the smaller value wins, equal values go to the lower
                // index, so the combined result is the sequential scan's.
                ReduceKind::ArgMin => format!(
                    "const unsigned int o{k}_at = __shfl_down_sync(0xffffffffu, r{k}_at, pk_off);\n            \
                     if (o{k} < r{k} || (o{k} == r{k} && o{k}_at < r{k}_at)) {{ r{k} = o{k}; r{k}_at = o{k}_at; }}"
                ),
                ReduceKind::Pick { .. } | ReduceKind::Dot { .. } | ReduceKind::ByLabel { .. } => {
                    continue
                }
            };
            s.push_str(&format!("            {line}\n"));
        }
        s.push_str("        }\n");
    }

    // Lane 0 writes the results.
    if !reductions.is_empty() {
        s.push_str("        if (pk_lane == 0) {\n");
        for (k, r) in reductions.iter().enumerate() {
            let out = stores.len() + k;
            match r.kind {
                ReduceKind::ArgMin => {
                    s.push_str(&format!("            out{out}[i] = r{k}_at;\n"));
                }
                ReduceKind::Pick { index_input } => {
                    s.push_str(&pick(spec, k, out, index_input, &r.expr));
                }
                _ => s.push_str(&format!("            out{out}[i] = r{k};\n")),
            }
        }
        s.push_str("        }\n");
    }
    s.push_str("    }\n");
    s
}

/// Lane 0's code for pick reduction `k` writing output `out`.
fn pick(spec: &KernelSpec, k: usize, out: usize, index_input: usize, expr: &Expr) -> String {
    let t = spec.dtype.c_name();
    let nan = nan_macro(spec.dtype);
    let col = format!("pk_pick{k}");
    let mut scope = ElementScope::new(spec, "i", &col, "p");
    let value = scope.value(expr);
    let mut s = String::new();
    s.push_str("            {\n");
    s.push_str(&format!(
        "                const long long {col} = (long long)in{index_input}[i];\n"
    ));
    s.push_str(&format!("                {t} v{k} = {nan};\n"));
    s.push_str(&format!("                if ({col} < cols) {{\n"));
    scope.write_to(&mut s, "                    ");
    s.push_str(&format!("                    v{k} = {value};\n"));
    s.push_str("                }\n");
    s.push_str(&format!("                out{out}[i] = v{k};\n"));
    s.push_str("            }\n");
    s
}
