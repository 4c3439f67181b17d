//! Canonicalisation: matrix products absorb the transposes of their operands (as flags) and
//! the scalar factors around them (as alpha); double transposes cancel; a transposed product
//! becomes the product of transposes in the other order.

use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, NodeId, Op, ProductAttrs, Reduce};
use crate::scalar::ScalarExpr;
use crate::types::Storage;
use kernel_ir::BinaryOp;

/// The canonicalisation pass.
pub struct Canonicalize;

/// The scalar held by a node, if it is a host scalar.
fn scalar_of(g: &Graph, n: NodeId) -> Option<ScalarExpr> {
    match &g.node(n).op {
        Op::Scalar(s) => Some(s.clone()),
        _ => None,
    }
}

/// Whether `n` has exactly one user and is not an output, so it may be absorbed into its user.
fn single_use(g: &Graph, n: NodeId) -> bool {
    !g.is_output(n)
        && g.users(n).len() == 1
        && g.operands(g.users(n)[0])
            .iter()
            .filter(|o| **o == n)
            .count()
            == 1
}

/// Peels scalar factors, negations and transposes off a product operand: returns the core
/// node, whether it is transposed, and the factor. The peeled nodes may have other users:
/// the product then reads the core directly and the others still see the scaled value (a
/// scaled sparse matrix is never materialised, so every product using it must absorb it).
fn peel(g: &Graph, mut n: NodeId) -> (NodeId, bool, ScalarExpr) {
    let mut trans = false;
    let mut alpha = ScalarExpr::Lit(1.0);
    loop {
        let ops = g.operands(n);
        match &g.node(n).op {
            Op::Transpose if g.node(ops[0]).ty.storage != Storage::Scalar => {
                trans = !trans;
                n = ops[0];
            }
            Op::Unary(kernel_ir::UnaryOp::Neg) => {
                alpha = -alpha;
                n = ops[0];
            }
            Op::Binary(BinaryOp::Mul) => {
                if let Some(s) = scalar_of(g, ops[0]) {
                    alpha = ScalarExpr::binary(BinaryOp::Mul, alpha, s);
                    n = ops[1];
                } else if let Some(s) = scalar_of(g, ops[1]) {
                    alpha = ScalarExpr::binary(BinaryOp::Mul, alpha, s);
                    n = ops[0];
                } else {
                    return (n, trans, alpha);
                }
            }
            Op::Binary(BinaryOp::Div) => match scalar_of(g, ops[1]) {
                Some(s) => {
                    alpha = ScalarExpr::binary(BinaryOp::Div, alpha, s);
                    n = ops[0];
                }
                None => return (n, trans, alpha),
            },
            _ => return (n, trans, alpha),
        }
    }
}

impl GraphPass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&self, g: &mut Graph, _cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut changed = false;
        loop {
            let mut round = false;
            for n in g.topo_order() {
                if !g.g.contains_node(n) {
                    continue;
                }
                round |= rewrite(g, n);
            }
            g.remove_dead();
            if !round {
                break;
            }
            changed = true;
        }
        Ok(changed)
    }
}

/// Applies the first matching rule at `n`; returns whether the graph changed.
fn rewrite(g: &mut Graph, n: NodeId) -> bool {
    let ops = g.operands(n);
    match g.node(n).op.clone() {
        // (x^T)^T = x
        Op::Transpose => {
            let inner = ops[0];
            if let Op::Transpose = g.node(inner).op {
                let x = g.operands(inner)[0];
                g.replace_uses(n, x);
                return true;
            }
            // (A*B)^T = B^T * A^T
            if let Op::Product(p) = g.node(inner).op.clone() {
                if single_use(g, inner) {
                    let pops = g.operands(inner);
                    let swapped = ProductAttrs {
                        trans_a: !p.trans_b,
                        trans_b: !p.trans_a,
                        alpha: p.alpha,
                        symmetric: false,
                    };
                    let ty = g.node(n).ty.clone();
                    let new = g.add(Op::Product(swapped), ty, &[pops[1], pops[0]]);
                    g.node_mut(new).name = g.node(n).name.clone();
                    g.replace_uses(n, new);
                    return true;
                }
            }
            false
        }
        // a * b  ->  product with flags and alpha
        Op::MatMul => {
            let (a, ta, fa) = peel(g, ops[0]);
            let (b, tb, fb) = peel(g, ops[1]);
            let alpha = ScalarExpr::binary(BinaryOp::Mul, fa, fb);
            let ty = g.node(n).ty.clone();
            let new = g.add(
                Op::Product(ProductAttrs {
                    trans_a: ta,
                    trans_b: tb,
                    alpha,
                    symmetric: false,
                }),
                ty,
                &[a, b],
            );
            g.node_mut(new).name = g.node(n).name.clone();
            g.replace_uses(n, new);
            true
        }
        // s * (A*B), (A*B) * s, (A*B) / s, -(A*B)  ->  the product with alpha scaled
        Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Div)) => {
            let (prod, factor) = match (scalar_of(g, ops[0]), scalar_of(g, ops[1])) {
                (Some(s), None) if op == BinaryOp::Mul => (ops[1], s),
                (None, Some(s)) => (
                    ops[0],
                    if op == BinaryOp::Div {
                        ScalarExpr::binary(BinaryOp::Div, ScalarExpr::Lit(1.0), s)
                    } else {
                        s
                    },
                ),
                _ => return false,
            };
            absorb_factor(g, n, prod, factor)
        }
        Op::Unary(kernel_ir::UnaryOp::Neg) => absorb_factor(g, n, ops[0], ScalarExpr::Lit(-1.0)),
        // Summing, or taking the min or max of, a single column (row) is the identity.
        Op::RowReduce(Reduce::Sum | Reduce::Min | Reduce::Max)
            if g.node(ops[0]).ty.shape.cols.is_one() =>
        {
            g.replace_uses(n, ops[0]);
            true
        }
        Op::ColReduce(Reduce::Sum | Reduce::Min | Reduce::Max)
            if g.node(ops[0]).ty.shape.rows.is_one() =>
        {
            g.replace_uses(n, ops[0]);
            true
        }
        _ => false,
    }
}

/// Replaces `n = factor * prod` by a product with `alpha * factor`, if `prod` is a product
/// used only here.
fn absorb_factor(g: &mut Graph, n: NodeId, prod: NodeId, factor: ScalarExpr) -> bool {
    let Op::Product(p) = g.node(prod).op.clone() else {
        return false;
    };
    if !single_use(g, prod) {
        return false;
    }
    let pops = g.operands(prod);
    let alpha = ScalarExpr::binary(BinaryOp::Mul, p.alpha, factor);
    let ty = g.node(n).ty.clone();
    let new = g.add(Op::Product(ProductAttrs { alpha, ..p }), ty, &pops);
    g.node_mut(new).name = g.node(n).name.clone().or_else(|| g.node(prod).name.clone());
    g.replace_uses(n, new);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::PlannerConfig;

    fn canon(src: &str) -> Graph {
        let p = crate::Program::parse(src).unwrap();
        let mut g = p.graph.clone();
        let cfg = PlannerConfig::default();
        let dims = Default::default();
        Canonicalize
            .run(
                &mut g,
                &PassContext {
                    dims: &dims,
                    config: &cfg,
                    target: &crate::target::Target::reference_gpu(),
                    nnz: &std::collections::BTreeMap::new(),
                },
            )
            .unwrap();
        g
    }

    fn products(g: &Graph) -> Vec<ProductAttrs> {
        g.topo_order()
            .into_iter()
            .filter_map(|n| match &g.node(n).op {
                Op::Product(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn transposes_and_factors_fold_into_the_product() {
        let g =
            canon("fn f(K: Dense[n, n], V: Csr[k, n]) -> (E: Dense[n, k]) { E = -2 * K * V^T; }");
        let p = products(&g);
        assert_eq!(p.len(), 1);
        assert!(!p[0].trans_a && p[0].trans_b);
        assert_eq!(p[0].alpha, ScalarExpr::Lit(-2.0));
        assert!(!g
            .topo_order()
            .iter()
            .any(|n| matches!(g.node(*n).op, Op::Transpose | Op::Binary(_))));
    }

    #[test]
    fn trailing_factor_division_and_negation_fold() {
        let g = canon(
            "fn f(A: Dense[n, d], a: Scalar) -> (Y: Dense[n, n]) { Y = -(A * A^T) * a / 4; }",
        );
        let p = products(&g);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].alpha.to_string(), "(-a * 0.25)");
    }

    #[test]
    fn transposed_product_swaps_operands() {
        let g =
            canon("fn f(A: Dense[n, d], B: Dense[d, m]) -> (Y: Dense[m, n]) { Y = (A * B)^T; }");
        let p = products(&g);
        assert_eq!(p.len(), 1);
        assert!(p[0].trans_a && p[0].trans_b);
    }

    #[test]
    fn shared_scaled_operands_are_absorbed_by_every_product() {
        let g = canon("fn f(A: Dense[n, n]) -> (Y: Dense[n, n], Z: Dense[n, n]) { S = 2 * A; Y = S * A; Z = S + A; }");
        let p = products(&g);
        assert_eq!(p[0].alpha, ScalarExpr::Lit(2.0));
        // The element-wise user still sees 2 * A.
        assert!(g
            .topo_order()
            .iter()
            .any(|n| matches!(g.node(*n).op, Op::Binary(BinaryOp::Mul))));
        // A scaled sparse matrix used by two products (as CSE makes of `2 * X1` written twice).
        let g = canon(
            "fn f(X1: Csr[n, m], X2: Dense[n, n]) -> (a: Dense[n, m], b: Dense[n, m]) { S = 2 * X1; a = X2 * S; b = X2^T * S; }",
        );
        assert!(products(&g).iter().all(|p| p.alpha == ScalarExpr::Lit(2.0)));
    }
}
