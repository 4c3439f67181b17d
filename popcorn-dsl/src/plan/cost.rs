//! The work of each step, for plans and the cost model: floating-point operations and the
//! bytes each step moves in memory (every operand read once, every result written once). A
//! builtin states its own cost ([`OpFacts::cost`]); library products and fused kernels are
//! counted here.

use super::{StepOp, Value, ValueId, ValueKind};
use crate::ops::{products, Cost, Extent, OpFacts};
use crate::types::DType;
use kernel_ir::{Access, Form, OutputShape};

/// `(flops, bytes)` of step `op` reading `inputs` and writing `outputs` (ids into `values`),
/// in a plan of element type `dtype`.
pub fn step_cost(
    op: &StepOp,
    values: &[Value],
    inputs: &[ValueId],
    outputs: &[ValueId],
    dtype: DType,
) -> (f64, f64) {
    let s = dtype.size_bytes() as f64;
    let val = |id: &ValueId| &values[id.0];
    let elems = |id: &ValueId| val(id).len();
    let nnz = |id: &ValueId| match val(id).kind {
        ValueKind::Csr { nnz } => nnz.unwrap_or(0),
        _ => 0,
    };
    let cost = |c: Cost| (c.flops, c.bytes);
    match op {
        StepOp::Gemm(g) => cost(products::gemm_cost(g.m, g.n, g.k, s)),
        StepOp::Syrk {
            n, k, lower_only, ..
        } => cost(products::syrk_cost(*n, *k, *lower_only, s)),
        StepOp::Gemv { m, n, .. } => cost(products::gemv_cost(*m, *n, s)),
        StepOp::SpMM {
            sparse_left, m, n, ..
        } => {
            let (sp, dn) = if *sparse_left {
                (&inputs[0], &inputs[1])
            } else {
                (&inputs[1], &inputs[0])
            };
            let width = if *sparse_left { *n } else { *m };
            cost(products::sparse_product_cost(
                nnz(sp),
                val(sp).rows,
                width,
                elems(dn),
                elems(&outputs[0]),
                s,
            ))
        }
        StepOp::SpGemm { m, n, k, .. } => cost(products::sparse_gram_cost(
            nnz(&inputs[0]),
            nnz(&inputs[1]),
            *k,
            *m,
            *n,
            s,
        )),
        StepOp::SpMV { .. } => cost(products::sparse_product_cost(
            nnz(&inputs[0]),
            val(&inputs[0]).rows,
            1,
            elems(&inputs[1]),
            elems(&outputs[0]),
            s,
        )),
        StepOp::Fused(f) => {
            let (r, c) = (f.rows as f64, f.cols as f64);
            let nodes: usize = match &f.spec.form {
                Form::Map { outputs } => outputs.iter().map(|e| e.node_count()).sum(),
                Form::Rows { stores, reductions }
                | Form::Contraction {
                    stores, reductions, ..
                } => {
                    stores.iter().map(|e| e.node_count()).sum::<usize>()
                        + reductions
                            .iter()
                            .map(|x| x.expr.node_count())
                            .sum::<usize>()
                }
                Form::Cols { reductions } => reductions.iter().map(|x| x.expr.node_count()).sum(),
            };
            let depth = f.depth as f64;
            let product_flops = match f.spec.form {
                Form::Contraction { .. } => 2.0 * r * c * depth,
                _ => 0.0,
            };
            let read: f64 = f
                .spec
                .inputs
                .iter()
                .map(|i| match i.access {
                    Access::Matrix { .. } => r * c * s,
                    Access::LowerSymmetric => r * (r + 1.0) / 2.0 * s,
                    Access::Col => r * s,
                    Access::Row => c * s,
                    Access::IndexCol => r * 4.0,
                    Access::IndexRow => c * 4.0,
                    Access::Left { .. } => r * depth * s,
                    Access::Right { .. } => c * depth * s,
                    Access::Scalar | Access::Broadcast => 0.0,
                })
                .sum();
            let written: f64 = f
                .spec
                .outputs()
                .iter()
                .map(|o| match o {
                    OutputShape::Full => r * c * s,
                    OutputShape::PerRow => r * s,
                    OutputShape::PerRowIndex => r * 4.0,
                    OutputShape::PerCol => c * s,
                    OutputShape::PerRowWide => r * f.width as f64 * s,
                })
                .sum();
            (product_flops + r * c * nodes as f64, read + written)
        }
        StepOp::Builtin(b) => {
            let extent = |id: &ValueId| {
                let v = val(id);
                let nnz = match v.kind {
                    ValueKind::Csr { nnz } => nnz,
                    _ => None,
                };
                Extent {
                    rows: v.rows,
                    cols: v.cols,
                    nnz,
                }
            };
            let ins: Vec<Extent> = inputs.iter().map(extent).collect();
            let outs: Vec<Extent> = outputs.iter().map(extent).collect();
            let c = b.cost(&ins, &outs, s);
            (c.flops, c.bytes)
        }
        StepOp::Copy => (0.0, 2.0 * s * elems(&inputs[0]) as f64),
    }
}
