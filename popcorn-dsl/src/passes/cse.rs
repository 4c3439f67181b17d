//! Common subexpression elimination: two nodes with the same operation on the same operands
//! compute the same value, so the later one is replaced by the earlier.

use super::{GraphPass, PassContext, PlanError};
use crate::ir::Graph;
use std::collections::HashMap;

/// The CSE pass.
pub struct Cse;

impl GraphPass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph, _cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut seen: HashMap<String, crate::ir::NodeId> = HashMap::new();
        let mut changed = false;
        for n in g.topo_order() {
            let node = g.node(n);
            let operands: Vec<usize> = g.operands(n).iter().map(|o| o.index()).collect();
            // The operation's full description (with its attributes) and its operands identify
            // the value; the debug form of `Op` includes every attribute.
            let key = format!("{:?}|{:?}|{operands:?}", node.op, node.ty);
            match seen.get(&key) {
                Some(&earlier) => {
                    if g.node(earlier).name.is_none() {
                        g.node_mut(earlier).name = g.node(n).name.clone();
                    }
                    g.replace_uses(n, earlier);
                    changed = true;
                }
                None => {
                    seen.insert(key, n);
                }
            }
        }
        if changed {
            g.remove_dead();
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Op;
    use crate::passes::PlannerConfig;

    #[test]
    fn repeated_subexpressions_are_computed_once() {
        let p = crate::Program::parse(
            "fn f(Y: Dense[m, d]) -> (a: Col[m], b: Col[m]) { a = rownorms(Y) + 1; b = exp(rownorms(Y)); }",
        )
        .unwrap();
        let mut g = p.graph.clone();
        let cfg = PlannerConfig::default();
        let dims = Default::default();
        assert!(Cse
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
        let reductions = g
            .topo_order()
            .into_iter()
            .filter(|n| matches!(g.node(*n).op, Op::RowReduce(_)))
            .count();
        assert_eq!(reductions, 1);
    }
}
