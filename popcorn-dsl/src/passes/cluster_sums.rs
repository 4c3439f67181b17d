//! Products with a selection matrix. `V = selection(labels, k)` has one nonzero per column,
//! `1/|c|` in row `c = labels_j`, so
//!
//! ```text
//! (alpha * M * V^T)[i, c] = alpha / |c| * sum_{j: labels_j = c} M[i, j]
//! ```
//!
//! which is one streaming pass over `M` accumulating by label ([`Op::ClusterSums`]) followed by
//! a scaling of its small `rows x k` result: `S .* (alpha / max(counts, 1))^T` (an empty
//! cluster's column is 0, as the sparse product gives). This reads `M` once with no sparse
//! indexing, where a general SpMM reads the CSR structure as well. The rewrite applies to
//! `Library(SpMM)` nodes whose sparse operand is a `selection` node, used transposed on the
//! right of an untransposed dense operand, when `k <= cluster_sums_max_k`.
//!
//! Likewise `alpha * V * x` for a column vector `x` is `(alpha / |c|) * sum_{i: labels_i = c}
//! x[i]`: [`Op::LabelSums`] and the same scaling, when `n k <= LABEL_SUMS_MAX_WORK` (its kernel
//! reads the labels once per cluster). Kernel K-means' centroid norms are such a product, and
//! then nothing needs the selection matrix itself: building it (a histogram, a scan and a
//! scatter, about 0.05-0.09 ms on an H100) was most of the small kernels of an iteration.

use super::{Pass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op};
use crate::scalar::ScalarExpr;
use crate::types::{Dim, Type};
use kernel_ir::BinaryOp;

/// Largest `n k` for which `V * x` becomes [`Op::LabelSums`] (2^25: n = 60000 up to k = 559).
pub const LABEL_SUMS_MAX_WORK: usize = 1 << 25;

/// The cluster-sums pattern pass.
pub struct ClusterSumsPattern;

/// `alpha / max(counts(labels, k), 1)`, a `k`-vector: the selection matrix's values times
/// `alpha` (an empty cluster's entries are multiplied by nothing, so any finite value works).
fn selection_scale(g: &mut Graph, labels: NodeId, k: &Dim, alpha: ScalarExpr) -> NodeId {
    let counts = g.add(Op::Counts { k: k.clone() }, Type::col(k.clone()), &[labels]);
    let one = g.add(Op::Scalar(ScalarExpr::Lit(1.0)), Type::scalar(), &[]);
    let at_least_one = g.add(
        Op::Binary(BinaryOp::Max),
        Type::col(k.clone()),
        &[counts, one],
    );
    let a = g.add(Op::Scalar(alpha), Type::scalar(), &[]);
    g.add(
        Op::Binary(BinaryOp::Div),
        Type::col(k.clone()),
        &[a, at_least_one],
    )
}

/// Rewrites `alpha * V * x` (V a selection matrix, x a column vector) into label sums and a
/// scaling where `n k` is small. Returns whether it did.
fn label_sums(g: &mut Graph, n: NodeId, cx: &PassContext<'_>) -> bool {
    let Op::Library(LibOp::SpMV {
        trans: false,
        alpha,
    }) = g.node(n).op.clone()
    else {
        return false;
    };
    let ops = g.operands(n);
    let (v, x) = (ops[0], ops[1]);
    let Op::Selection { k } = g.node(v).op.clone() else {
        return false;
    };
    let labels = g.operands(v)[0];
    let points = g.node(labels).ty.shape.rows.resolve(cx.dims);
    let fits = match (k.resolve(cx.dims), points) {
        (Some(kk), Some(nn)) => {
            kk <= cx.config.cluster_sums_max_k && nn.saturating_mul(kk) <= LABEL_SUMS_MAX_WORK
        }
        _ => false,
    };
    if !fits || !g.node(x).ty.shape.cols.is_one() {
        return false;
    }
    let sums = g.add(
        Op::LabelSums { k: k.clone() },
        Type::col(k.clone()),
        &[x, labels],
    );
    let scale = selection_scale(g, labels, &k, alpha);
    let y = g.add(Op::Binary(BinaryOp::Mul), Type::col(k), &[sums, scale]);
    g.node_mut(y).name = g.node(n).name.clone();
    g.replace_uses(n, y);
    true
}

impl Pass for ClusterSumsPattern {
    fn name(&self) -> &'static str {
        "cluster-sums"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut changed = false;
        for n in g.topo_order() {
            if label_sums(g, n, cx) {
                changed = true;
                continue;
            }
            let Op::Library(LibOp::SpMM {
                sparse_left: false,
                trans_sparse: true,
                trans_dense: false,
                alpha,
            }) = g.node(n).op.clone()
            else {
                continue;
            };
            let ops = g.operands(n);
            let (m, v) = (ops[0], ops[1]);
            let Op::Selection { k } = g.node(v).op.clone() else {
                continue;
            };
            let fits = k
                .resolve(cx.dims)
                .is_some_and(|k| k <= cx.config.cluster_sums_max_k);
            if !fits {
                continue;
            }
            let labels = g.operands(v)[0];
            let rows = g.node(m).ty.shape.rows.clone();
            // S = cluster_sums(M, labels)
            let sums = g.add(
                Op::ClusterSums { k: k.clone() },
                Type::dense(rows.clone(), k.clone()),
                &[m, labels],
            );
            // scale = alpha / max(counts(labels, k), 1), a k-vector
            let scale = selection_scale(g, labels, &k, alpha);
            let scale_t = g.add(Op::Transpose, Type::row(k.clone()), &[scale]);
            // E = S .* scale^T
            let ty = Type::dense(rows, k);
            let e = g.add(Op::Binary(BinaryOp::Mul), ty, &[sums, scale_t]);
            g.node_mut(e).name = g.node(n).name.clone();
            g.replace_uses(n, e);
            changed = true;
        }
        if changed {
            g.remove_dead();
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::StepOp;
    use crate::{plan, PlannerConfig, Program};
    use std::collections::BTreeMap;

    #[test]
    fn selection_products_become_cluster_sums_up_to_the_configured_k() {
        let p = Program::parse(
            "fn f(K: Dense[n, n], labels: Index[n]) -> (E: Dense[n, k]) { E = -2 * K * selection(labels, k)^T; }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 100), ("k".to_string(), 7)]
            .into_iter()
            .collect();
        let on = PlannerConfig {
            cluster_sums_max_k: 1024,
            ..PlannerConfig::default()
        };
        let with = plan(&p, &dims, &on, &BTreeMap::new()).unwrap();
        let names: Vec<String> = with.steps.iter().map(|s| s.op_name()).collect();
        assert!(names.contains(&"cluster sums".to_string()), "{with}");
        assert!(
            !names.contains(&"spmm".to_string()) && !names.contains(&"selection".to_string()),
            "{with}"
        );
        assert!(with
            .steps
            .iter()
            .any(|s| matches!(s.op, StepOp::Counts { k: 7 })));
        let off = PlannerConfig {
            cluster_sums_max_k: 6,
            ..PlannerConfig::default()
        };
        let without = plan(&p, &dims, &off, &BTreeMap::new()).unwrap();
        assert!(
            without.steps.iter().any(|s| s.op_name() == "spmm"),
            "{without}"
        );
    }
}
