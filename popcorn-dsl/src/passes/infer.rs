//! Shape and kind inference: re-derives every node's type from its operands (the same rules as
//! the checker) and checks that every dimension has a size.

use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, Op};
use crate::ops::{Builtin, ClusterSums, Counts, LabelSums, OpFacts, Selection};
use crate::types::{Dim, Type};
use crate::typing::result_type;

/// The inference pass.
pub struct Infer;

fn check_bound(ty: &Type, cx: &PassContext<'_>) -> Result<(), PlanError> {
    for d in [&ty.shape.rows, &ty.shape.cols] {
        if let Dim::Sym(s) = d {
            match cx.dims.get(s) {
                None => return Err(PlanError::UnboundDim(s.clone())),
                Some(0) => return Err(PlanError::ZeroDim(s.clone())),
                Some(_) => {}
            }
        }
    }
    Ok(())
}

impl GraphPass for Infer {
    fn name(&self) -> &'static str {
        "infer"
    }

    fn run(&self, graph: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut changed = false;
        for n in graph.topo_order() {
            let node = graph.node(n);
            if let Op::Builtin(b) = &node.op {
                b.resolved(cx.dims).map_err(|_| match b {
                    Builtin::Counts(Counts { k })
                    | Builtin::Selection(Selection { k, .. })
                    | Builtin::ClusterSums(ClusterSums { k })
                    | Builtin::LabelSums(LabelSums { k }) => PlanError::UnboundDim(k.to_string()),
                    _ => PlanError::Internal {
                        pass: "infer",
                        message: format!("{} has an unbound dimension", b.label()),
                    },
                })?;
            }
            // Inputs are typed by the signature; library nodes keep the type of the product
            // they replaced (a row-vector result computed as a column vector has the same data).
            if matches!(node.op, Op::Input { .. } | Op::Library(_)) {
                check_bound(&node.ty, cx)?;
                continue;
            }
            let operand_types: Vec<Type> = graph
                .operands(n)
                .iter()
                .map(|o| graph.node(*o).ty.clone())
                .collect();
            let refs: Vec<&Type> = operand_types.iter().collect();
            let ty = result_type(&node.op, &refs).map_err(|e| PlanError::Internal {
                pass: "infer",
                message: format!("{}: {}", graph.describe(n), e.message),
            })?;
            check_bound(&ty, cx)?;
            if graph.node(n).ty != ty {
                graph.node_mut(n).ty = ty;
                changed = true;
            }
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::PlannerConfig;
    use crate::types::DimBindings;

    #[test]
    fn reports_unbound_and_zero_dimensions() {
        let p = crate::Program::parse("fn f(X: Dense[n, d]) -> (Y: Dense[n, d]) { Y = 2 * X; }")
            .unwrap();
        let mut g = p.graph.clone();
        let cfg = PlannerConfig::default();
        let dims: DimBindings = [("n".to_string(), 3)].into_iter().collect();
        let err = Infer
            .run(
                &mut g,
                &PassContext {
                    dims: &dims,
                    config: &cfg,
                    target: &crate::target::Target::reference_gpu(),
                    nnz: &std::collections::BTreeMap::new(),
                },
            )
            .unwrap_err();
        assert_eq!(err, PlanError::UnboundDim("d".into()));
        let dims: DimBindings = [("n".to_string(), 3), ("d".to_string(), 0)]
            .into_iter()
            .collect();
        let err = Infer
            .run(
                &mut g,
                &PassContext {
                    dims: &dims,
                    config: &cfg,
                    target: &crate::target::Target::reference_gpu(),
                    nnz: &std::collections::BTreeMap::new(),
                },
            )
            .unwrap_err();
        assert_eq!(err, PlanError::ZeroDim("d".into()));
        let dims: DimBindings = [("n".to_string(), 3), ("d".to_string(), 2)]
            .into_iter()
            .collect();
        assert!(!Infer
            .run(
                &mut g,
                &PassContext {
                    dims: &dims,
                    config: &cfg,
                    target: &crate::target::Target::reference_gpu(),
                    nnz: &std::collections::BTreeMap::new(),
                }
            )
            .unwrap());
    }
}
