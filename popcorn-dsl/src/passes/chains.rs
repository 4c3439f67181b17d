//! Matrix chains: a product of a Gram-shaped product, `alpha2 * (alpha1 * A * B^T) * op(C)`,
//! computed as `alpha1 * alpha2 * A * (B^T * op(C))` where that costs fewer flops. With `A`
//! and `B` of `n x d` and `op(C)` of `n x k`, the left-to-right order costs `n n d + n n k`
//! multiply-adds and an `n x n` value; the other `n d k + n d k` and a `d x k` value. Kernel
//! K-means with the linear kernel (`K = X * X^T`, `E = -2 * K * V^T`) becomes Lloyd's
//! algorithm this way: `E = -2 * X * (V * X)^T`, cluster sums of the points, then a thin
//! product.
//!
//! The inner product may have no other use than `diag`s, which are derived from its operands
//! ([`super::diagonals`]): `diag(A * B^T)` is `sum_rows(A .* B)`. `POPCORN_LOG=fusion` says
//! which chains were reassociated and what it saves.

use super::diagonals::{Diagonals, GramProduct};
use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, NodeId, Op, ProductAttrs};
use crate::ops::Builtin;
use crate::scalar::ScalarExpr;
use crate::types::{Storage, Type};
use kernel_ir::BinaryOp;
use std::collections::BTreeSet;

/// The matrix-chain pass.
pub struct Chains;

/// A chain `outer = alpha2 * inner * op(c)` with `inner = alpha1 * a * b^T`, and the `diag`s
/// of `inner`.
struct Chain {
    outer: NodeId,
    outer_attrs: ProductAttrs,
    inner: NodeId,
    inner_alpha: ScalarExpr,
    a: NodeId,
    b: NodeId,
    c: NodeId,
    diagonals: Vec<NodeId>,
}

/// The chain whose outer product is `n`, if `n` is one that may be reassociated.
fn chain_at(g: &Graph, n: NodeId) -> Option<Chain> {
    let Op::Product(outer_attrs) = &g.node(n).op else {
        return None;
    };
    let [inner, c] = g.operands(n)[..] else {
        return None;
    };
    let Op::Product(inner_attrs) = &g.node(inner).op else {
        return None;
    };
    if outer_attrs.trans_a || inner_attrs.trans_a || !inner_attrs.trans_b || c == inner {
        return None;
    }
    let [a, b] = g.operands(inner)[..] else {
        return None;
    };
    let dense = |x: NodeId| g.node(x).ty.storage == Storage::Dense;
    if !dense(a) || !dense(b) || g.is_output(inner) {
        return None;
    }
    let others: Vec<NodeId> = g.users(inner).into_iter().filter(|u| *u != n).collect();
    let only_diagonals = others
        .iter()
        .all(|u| matches!(g.node(*u).op, Op::Builtin(Builtin::Diag(_))));
    if !only_diagonals {
        return None;
    }
    Some(Chain {
        outer: n,
        outer_attrs: outer_attrs.clone(),
        inner,
        inner_alpha: inner_attrs.alpha.clone(),
        a,
        b,
        c,
        diagonals: others,
    })
}

/// Multiply-adds of the chain left to right and reassociated, where every size is bound.
fn costs(g: &Graph, ch: &Chain, cx: &PassContext<'_>) -> Option<(f64, f64)> {
    let (m, d) = g.node(ch.a).ty.shape.resolve(cx.dims)?;
    let (n, _) = g.node(ch.b).ty.shape.resolve(cx.dims)?;
    let (_, k) = g.node(ch.outer).ty.shape.resolve(cx.dims)?;
    let (m, n, d, k) = (m as f64, n as f64, d as f64, k as f64);
    Some((m * n * d + m * n * k, n * d * k + m * d * k))
}

impl GraphPass for Chains {
    fn name(&self) -> &'static str {
        "chains"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let log = crate::log::enabled("fusion");
        let mut changed = false;
        for n in g.topo_order() {
            if !g.g.contains_node(n) {
                continue;
            }
            let Some(ch) = chain_at(g, n) else {
                continue;
            };
            let Some((left_to_right, reassociated)) = costs(g, &ch, cx) else {
                continue;
            };
            if reassociated >= left_to_right {
                continue;
            }
            if log {
                eprintln!(
                    "popcorn: {} computed as A * (B^T * op(C)): {:.3e} multiply-adds instead of \
                     {:.3e}, and no {} value",
                    g.describe(ch.outer),
                    reassociated,
                    left_to_right,
                    g.node(ch.inner).ty
                );
            }
            reassociate(g, &ch);
            changed = true;
        }
        if changed {
            g.remove_dead();
        }
        Ok(changed)
    }
}

/// Rewrites the chain: the thin product `T` of `B` and `C`, then `alpha * A * op(T)`; the
/// `diag`s of the inner product from its operands.
fn reassociate(g: &mut Graph, ch: &Chain) {
    let one = || ScalarExpr::Lit(1.0);
    let b_cols = g.node(ch.b).ty.shape.cols.clone();
    let c_shape = g.node(ch.c).ty.shape.clone();
    let (thin, trans_b) = if ch.outer_attrs.trans_b {
        // A B^T C^T = A (C B)^T, with C B of (rows of C) x d.
        let attrs = ProductAttrs {
            trans_a: false,
            trans_b: false,
            alpha: one(),
            symmetric: false,
        };
        let ty = Type::dense(c_shape.rows, b_cols);
        (g.add(Op::Product(attrs), ty, &[ch.c, ch.b]), true)
    } else {
        // A B^T C = A (B^T C), with B^T C of d x (columns of C).
        let attrs = ProductAttrs {
            trans_a: true,
            trans_b: false,
            alpha: one(),
            symmetric: false,
        };
        let ty = Type::dense(b_cols, c_shape.cols);
        (g.add(Op::Product(attrs), ty, &[ch.b, ch.c]), false)
    };
    let attrs = ProductAttrs {
        trans_a: false,
        trans_b,
        alpha: ScalarExpr::binary(
            BinaryOp::Mul,
            ch.inner_alpha.clone(),
            ch.outer_attrs.alpha.clone(),
        ),
        symmetric: false,
    };
    let ty = g.node(ch.outer).ty.clone();
    let product = g.add(Op::Product(attrs), ty, &[ch.a, thin]);
    g.replace_uses(ch.outer, product);
    g.node_mut(product).name = g.node_mut(ch.outer).name.take();
    if !ch.diagonals.is_empty() {
        let rows = g.node(ch.inner).ty.shape.rows.clone();
        let no_maps = BTreeSet::new();
        let gram = GramProduct {
            node: ch.inner,
            a: ch.a,
            b: ch.b,
            alpha: ch.inner_alpha.clone(),
        };
        let mut diagonals = Diagonals::new(gram, &no_maps, rows);
        for &d in &ch.diagonals {
            diagonals.replace(g, d);
        }
    }
}
