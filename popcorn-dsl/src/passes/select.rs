//! Library selection: every canonical product becomes a library operation chosen from the
//! storage and shape of its operands: dense x dense → GEMM (or SYRK for `X * X^T` below the
//! configured `n/d` ratio), matrix x vector → GEMV, sparse x dense → SpMM, sparse x vector →
//! SpMV.

use super::library_choice::choose;
use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op};
use crate::ops::Builtin;
use crate::types::Storage;

/// The selection pass.
pub struct Select;

/// Whether node `n`'s only use, besides `diag` (which reads the diagonal alone), is one
/// element-wise operation over the same shape, which the fuse pass will put in a map kernel
/// (fusion on, `n` not an output).
fn feeds_map(g: &Graph, n: NodeId, cx: &PassContext<'_>) -> bool {
    if !cx.config.fusion || g.is_output(n) {
        return false;
    }
    let users: Vec<NodeId> = g
        .users(n)
        .into_iter()
        .filter(|u| !matches!(g.node(*u).op, Op::Builtin(Builtin::Diag(_))))
        .collect();
    let [user] = users[..] else {
        return false;
    };
    let node = g.node(user);
    node.op.is_elementwise() && node.ty.shape == g.node(n).ty.shape
}

impl GraphPass for Select {
    fn name(&self) -> &'static str {
        "select"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut changed = false;
        for n in g.topo_order() {
            let Op::Product(p) = g.node(n).op.clone() else {
                continue;
            };
            let ops = g.operands(n);
            for o in &ops {
                if g.node(*o).ty.storage == Storage::Scalar {
                    return Err(PlanError::Internal {
                        pass: "select",
                        message: "a scalar reached a product".into(),
                    });
                }
                if matches!(g.node(*o).op, Op::Binary(_)) && g.node(*o).ty.storage == Storage::Csr {
                    return Err(PlanError::Unsupported(
                        "a scaled sparse matrix used by more than one product is not supported; write the scale factor next to each product".into(),
                    ));
                }
            }
            if ops.iter().all(|o| g.node(*o).ty.storage == Storage::Csr) {
                let to_map = feeds_map(g, n, cx);
                super::sparse_products::plan_sparse_product(g, n, &p, to_map, cx)?;
                changed = true;
                continue;
            }
            let ty = g.node(n).ty.clone();
            let (lib, operands) = choose(g, ops[0], ops[1], &p, &ty, feeds_map(g, n, cx), cx);
            let is_syrk = matches!(lib, LibOp::Syrk { .. });
            g.node_mut(n).op = Op::Library(lib);
            if is_syrk {
                g.set_operands(n, &operands[..1]);
            } else {
                g.set_operands(n, &operands);
            }
            changed = true;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{canonicalize::Canonicalize, PlannerConfig};
    use crate::types::DimBindings;

    fn libs(src: &str, dims: &[(&str, usize)]) -> Vec<LibOp> {
        let p = crate::Program::parse(src).unwrap();
        let mut g = p.graph.clone();
        let cfg = PlannerConfig::default();
        let dims: DimBindings = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let cx = PassContext {
            dims: &dims,
            config: &cfg,
            target: &crate::target::Target::reference_gpu(),
            nnz: &std::collections::BTreeMap::new(),
        };
        Canonicalize.run(&mut g, &cx).unwrap();
        Select.run(&mut g, &cx).unwrap();
        g.topo_order()
            .into_iter()
            .filter_map(|n| match &g.node(n).op {
                Op::Library(l) => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn gram_matrix_uses_syrk_or_gemm_by_ratio() {
        let src = "fn f(X: Dense[n, d]) -> (B: Dense[n, n]) { B = X * X^T; }";
        assert!(matches!(
            libs(src, &[("n", 1000), ("d", 100)])[0],
            LibOp::Syrk { trans: false, .. }
        ));
        assert!(matches!(
            libs(src, &[("n", 60000), ("d", 50)])[0],
            LibOp::Gemm(_)
        ));
    }

    #[test]
    fn kernel_kmeans_products() {
        let src = "fn f(K: Dense[n, n], V: Csr[k, n], z: Col[n]) -> (E: Dense[n, k], c: Col[k]) { E = -2 * K * V^T; c = -0.5 * V * z; }";
        let l = libs(src, &[("n", 100), ("k", 5)]);
        assert!(matches!(
            &l[0],
            LibOp::SpMM {
                sparse_left: false,
                trans_sparse: true,
                trans_dense: false,
                ..
            }
        ));
        assert!(matches!(&l[1], LibOp::SpMV { trans: false, .. }));
    }

    #[test]
    fn vectors_select_gemv_and_spmv() {
        let src = "fn f(A: Dense[m, n], x: Col[n], y: Row[m], S: Csr[m, n], r: Row[m]) -> (u: Col[m], v: Row[n], w: Row[n]) { u = A * x; v = y * A; w = r * S; }";
        let l = libs(src, &[("m", 7), ("n", 5)]);
        assert!(matches!(&l[0], LibOp::Gemv { trans: false, .. }));
        assert!(matches!(&l[1], LibOp::Gemv { trans: true, .. }));
        assert!(matches!(&l[2], LibOp::SpMV { trans: true, .. }));
    }
}
