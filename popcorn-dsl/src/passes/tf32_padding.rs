//! TF32 row padding: where the target pads ([`Target::tf32_row_padding`]), a TF32 SYRK
//! `A * A^T` whose rows are not a whole multiple of the tensor cores' preferred length reads a
//! copy of `A` with zero columns appended instead. `A A^T` is unchanged exactly (the added
//! products are zeros) and the GEMMs run faster (BENCHMARKS.md, run 4). Strict fp32 products
//! keep their operand as it is (measured slower padded), and so do rows shorter than the
//! target's minimum, where the product is bound by writing its result.
//!
//! [`Target::tf32_row_padding`]: crate::target::Target::tf32_row_padding

use super::pattern::{any, op};
use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, Op};
use crate::ops::{Builtin, PadCols};
use crate::types::{Dim, Storage, Type};

/// The padding pass.
pub struct Tf32Padding;

impl GraphPass for Tf32Padding {
    fn name(&self) -> &'static str {
        "tf32-padding"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let Some(padding) = cx.target.tf32_row_padding else {
            return Ok(false);
        };
        if !cx.config.library_tf32() || padding.multiple == 0 {
            return Ok(false);
        }
        let pattern =
            op(|o| matches!(o, Op::Library(LibOp::Syrk { trans: false, .. }))).args([any()
                .bind("A")
                .when(|g, a| g.node(a).ty.storage == Storage::Dense)]);
        let mut changed = false;
        for n in g.topo_order() {
            let Some(m) = pattern.matches(g, n) else {
                continue;
            };
            let a = m["A"];
            let Some((_, cols)) = g.node(a).ty.shape.resolve(cx.dims) else {
                continue;
            };
            if cols < padding.min_cols || cols.is_multiple_of(padding.multiple) {
                continue;
            }
            let padded = cols.next_multiple_of(padding.multiple);
            let rows = g.node(a).ty.shape.rows.clone();
            let p = g.add(
                Op::Builtin(Builtin::PadCols(PadCols { cols: padded })),
                Type::dense(rows, Dim::Fixed(padded)),
                &[a],
            );
            g.set_operands(n, &[p]);
            changed = true;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::{Builtin, PadCols};
    use crate::plan::StepOp;
    use crate::target::Target;
    use crate::{plan, PlannerConfig, Program};
    use std::collections::BTreeMap;

    fn kernel_plan(d: usize, tf32: bool, target: &Target) -> crate::Plan {
        let p =
            Program::parse("fn k(X: Dense[n, d]) -> (K: Dense[n, n]) { K = exp(-0.5 * X * X^T); }")
                .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 1000), ("d".to_string(), d)]
            .into_iter()
            .collect();
        let config = PlannerConfig {
            tf32,
            ..PlannerConfig::default()
        };
        plan(&p, &dims, &config, target, &BTreeMap::new()).unwrap()
    }

    fn pads(p: &crate::Plan) -> Vec<usize> {
        p.steps
            .iter()
            .filter_map(|s| match &s.op {
                StepOp::Builtin(Builtin::PadCols(PadCols { cols })) => Some(*cols),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn tf32_syrks_read_padded_rows_where_the_target_pads() {
        let gpu = Target::reference_gpu();
        let p = kernel_plan(780, true, &gpu);
        assert_eq!(pads(&p), vec![784], "{p}");
        let syrk_k = p.steps.iter().find_map(|s| match &s.op {
            StepOp::Syrk { k, .. } => Some(*k),
            _ => None,
        });
        assert_eq!(syrk_k, Some(784), "{p}");
        // Not for strict fp32, whole rows, short rows, or a target that does not pad.
        assert!(pads(&kernel_plan(780, false, &gpu)).is_empty());
        assert!(pads(&kernel_plan(784, true, &gpu)).is_empty());
        assert!(pads(&kernel_plan(50, true, &gpu)).is_empty());
        assert!(pads(&kernel_plan(780, true, &Target::cpu(2))).is_empty());
    }
}
