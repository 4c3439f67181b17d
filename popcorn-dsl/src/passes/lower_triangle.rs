//! Lower-triangle SYRK (on the lowered plan): a SYRK step whose result is read by exactly one
//! element-wise map, and otherwise only by diagonal extractions, writes only its lower
//! triangle, and the map reads the matrix as [`Access::LowerSymmetric`]: the map writes both
//! halves of its own output from the lower half of its input.
//!
//! This is Kernel K-means' `K = pow(gamma * X * X^T + c, r)`: without it the product writes the
//! lower triangle, mirrors it (reading and writing half of K again) and then the map reads and
//! writes all of K; with it, the product writes half of K and the map reads that half and
//! writes K once, 1.5 passes over `n^2` elements instead of 3. Such a map can then also run
//! band by band beside the product ([`super::pipelines`]).

use super::{PassContext, PlanError, PlanPass};
use crate::ops::Builtin;
use crate::plan::{Home, Plan, StepOp, ValueId};
use kernel_ir::{Access, Form};

/// The lower-triangle pass.
pub struct LowerTriangle;

impl PlanPass for LowerTriangle {
    fn name(&self) -> &'static str {
        "lower-triangle"
    }

    /// Rewrites every SYRK step whose result is read only by one map kernel over the same
    /// square space into a lower-triangle SYRK, and that map's reads of it into
    /// [`Access::LowerSymmetric`]. Needs fusion (a map kernel to do the mirroring).
    fn run(&self, plan: &mut Plan, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        if !cx.config.fusion {
            return Ok(false);
        }
        let mut changed = false;
        for s in 0..plan.steps.len() {
            let StepOp::Syrk { n, lower_only, .. } = plan.steps[s].op else {
                continue;
            };
            let [out] = plan.steps[s].outputs[..] else {
                continue;
            };
            if lower_only || !matches!(plan.value(out).home, Home::Temp(_)) {
                continue;
            }
            if plan.outputs.iter().any(|(_, v)| *v == out) {
                continue;
            }
            let Some(reader) = only_map_reader(plan, s, out, n) else {
                continue;
            };
            let step = &mut plan.steps[reader];
            let StepOp::Fused(f) = &mut step.op else {
                continue;
            };
            for (k, input) in step.inputs.iter().enumerate() {
                if *input == out {
                    f.spec.inputs[k].access = Access::LowerSymmetric;
                }
            }
            f.name = f.spec.name();
            let elem = plan.dtype.size_bytes() as f64;
            let unread = (n as f64) * (n as f64 - 1.0) / 2.0 * elem;
            plan.steps[reader].bytes -= unread;
            if let StepOp::Syrk { lower_only, .. } = &mut plan.steps[s].op {
                *lower_only = true;
            }
            plan.steps[s].bytes -= unread;
            changed = true;
        }
        Ok(changed)
    }
}

/// The one step after `s` that reads `v`, besides diagonal extractions (which read only the
/// diagonal), if it is a map kernel over an `n x n` space that reads `v` as an untransposed or
/// transposed matrix (the same thing for a symmetric one).
fn only_map_reader(plan: &Plan, s: usize, v: ValueId, n: usize) -> Option<usize> {
    let mut readers = plan.steps.iter().enumerate().filter(|(_, step)| {
        step.inputs.contains(&v) && !matches!(step.op, StepOp::Builtin(Builtin::Diag(_)))
    });
    let (r, step) = readers.next()?;
    if readers.next().is_some() || r <= s {
        return None;
    }
    let StepOp::Fused(f) = &step.op else {
        return None;
    };
    if !matches!(f.spec.form, Form::Map { .. }) || f.rows != n || f.cols != n {
        return None;
    }
    let all_matrix_reads = step
        .inputs
        .iter()
        .zip(&f.spec.inputs)
        .filter(|(input, _)| **input == v)
        .all(|(_, spec_input)| matches!(spec_input.access, Access::Matrix { .. }));
    all_matrix_reads.then_some(r)
}
