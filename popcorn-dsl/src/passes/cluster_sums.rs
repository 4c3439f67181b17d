//! Products with a selection matrix. `V = selection(labels, k)` has one nonzero per column,
//! `1/|c|` in row `c = labels_j`, so
//!
//! ```text
//! (alpha * M * V^T)[i, c] = alpha / |c| * sum_{j: labels_j = c} M[i, j]
//! ```
//!
//! which is one streaming pass over `M` accumulating by label ([`ClusterSums`]) followed by a
//! scaling of its small `rows x k` result: `S .* (alpha / max(counts, 1))^T` (an empty
//! cluster's column is 0, as the sparse product gives). This reads `M` once with no sparse
//! indexing, where a general SpMM reads the CSR structure as well ([`ClusterSumsPattern`], for
//! `k` up to the target's [`cluster_sums_max_k`](crate::target::Target::cluster_sums_max_k)).
//!
//! Likewise `alpha * V * x` for a column vector `x` is `(alpha / |c|) * sum_{i: labels_i = c}
//! x[i]`: [`LabelSums`] and the same scaling ([`LabelSumsPattern`], where `n k` is at most the
//! target's [`label_sums_max_work`](crate::target::Target::label_sums_max_work): its kernel
//! reads the labels once per cluster). Kernel K-means' centroid norms are such a product, and
//! then nothing needs the selection matrix itself (building it is a histogram, a scan and a
//! scatter). The same holds row by row for `alpha * V * X` with `X` an `n x d` matrix (Lloyd's
//! centroids): [`LabelSums`] of the rows, one pass over `X` whatever `k`, scaled per cluster,
//! where `k` is at most the target's
//! [`label_row_sums_max_k`](crate::target::Target::label_row_sums_max_k) (its kernel keeps `k`
//! partial rows per warp in shared memory).

use super::pattern::{any, op, Pattern};
use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op};
use crate::ops::{Builtin, ClusterSums, Counts, LabelSums, Selection};
use crate::scalar::ScalarExpr;
use crate::types::{Dim, Type};
use kernel_ir::BinaryOp;

/// `M * selection(labels, k)^T` becomes cluster sums and a scaling.
pub struct ClusterSumsPattern;

/// `selection(labels, k) * x` (a vector) or `selection(labels, k) * X` (a matrix) becomes label
/// sums and a scaling.
pub struct LabelSumsPattern;

/// `selection(labels, k)`, binding `V` and `labels`.
fn selection() -> Pattern {
    op(|o| matches!(o, Op::Builtin(Builtin::Selection(_))))
        .bind("V")
        .args([any().bind("labels")])
}

/// The number of clusters of the selection node `v`.
fn clusters_of(g: &Graph, v: NodeId) -> Option<Dim> {
    match &g.node(v).op {
        Op::Builtin(Builtin::Selection(Selection { k })) => Some(k.clone()),
        _ => None,
    }
}

/// The scalar factor of library node `n`.
fn alpha_of(g: &Graph, n: NodeId) -> Option<ScalarExpr> {
    match &g.node(n).op {
        Op::Library(LibOp::SpMM { alpha, .. } | LibOp::SpMV { alpha, .. }) => Some(alpha.clone()),
        _ => None,
    }
}

/// `alpha / max(counts(labels, k), 1)`, a `k`-vector: the selection matrix's values times
/// `alpha` (an empty cluster's entries are multiplied by nothing, so any finite value works).
fn selection_scale(g: &mut Graph, labels: NodeId, k: &Dim, alpha: ScalarExpr) -> NodeId {
    let counts = g.add(
        Op::Builtin(Builtin::Counts(Counts { k: k.clone() })),
        Type::col(k.clone()),
        &[labels],
    );
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

/// Makes `new` stand for `old`: its name, its users and its place among the outputs. A
/// library product keeps the type of the product it replaced, and a product computed as a
/// column may stand for a row (`(V x)^T` is the SpMV `V x`): where `new` is the vector the
/// other way round, a transpose of it (a view) takes its place.
fn replace(g: &mut Graph, old: NodeId, new: NodeId) {
    let want = g.node(old).ty.clone();
    let new = if g.node(new).ty.shape == want.shape.transposed()
        && want.shape != want.shape.transposed()
    {
        g.add(Op::Transpose, want, &[new])
    } else {
        new
    };
    g.node_mut(new).name = g.node(old).name.clone();
    g.replace_uses(old, new);
}

impl GraphPass for ClusterSumsPattern {
    fn name(&self) -> &'static str {
        "cluster-sums"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let pattern = op(|o| {
            matches!(
                o,
                Op::Library(LibOp::SpMM {
                    sparse_left: false,
                    trans_sparse: true,
                    trans_dense: false,
                    ..
                })
            )
        })
        .args([any().bind("M"), selection()]);
        let mut changed = false;
        for n in g.topo_order() {
            let Some(m) = pattern.matches(g, n) else {
                continue;
            };
            let (Some(k), Some(alpha)) = (clusters_of(g, m["V"]), alpha_of(g, n)) else {
                continue;
            };
            if k.resolve(cx.dims)
                .is_none_or(|k| k > cx.cluster_sums_max_k())
            {
                continue;
            }
            // One label per column of M, as the types say (sizes may agree only at these
            // dimensions: `Index[1]` labels of an `n x 1` M at n = 1).
            if g.node(m["labels"]).ty.shape.rows != g.node(m["M"]).ty.shape.cols {
                continue;
            }
            let rows = g.node(m["M"]).ty.shape.rows.clone();
            // S = cluster_sums(M, labels)
            let sums = g.add(
                Op::Builtin(Builtin::ClusterSums(ClusterSums { k: k.clone() })),
                Type::dense(rows.clone(), k.clone()),
                &[m["M"], m["labels"]],
            );
            // E = S .* (alpha / max(counts(labels, k), 1))^T
            let scale = selection_scale(g, m["labels"], &k, alpha);
            let scale_t = g.add(Op::Transpose, Type::row(k.clone()), &[scale]);
            let e = g.add(
                Op::Binary(BinaryOp::Mul),
                Type::dense(rows, k),
                &[sums, scale_t],
            );
            replace(g, n, e);
            changed = true;
        }
        if changed {
            g.remove_dead();
        }
        Ok(changed)
    }
}

impl GraphPass for LabelSumsPattern {
    fn name(&self) -> &'static str {
        "label-sums"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        // `V * x`, x a column vector: an SpMV.
        let vector = op(|o| matches!(o, Op::Library(LibOp::SpMV { trans: false, .. }))).args([
            selection(),
            any()
                .bind("x")
                .when(|g, x| g.node(x).ty.shape.cols.is_one()),
        ]);
        // `V * X`, X a matrix: an SpMM with the selection on the left, neither transposed
        // (Lloyd's centroids).
        let matrix = op(|o| {
            matches!(
                o,
                Op::Library(LibOp::SpMM {
                    sparse_left: true,
                    trans_sparse: false,
                    trans_dense: false,
                    ..
                })
            )
        })
        .args([selection(), any().bind("x")]);
        let mut changed = false;
        for n in g.topo_order() {
            let (m, is_vector) = match vector.matches(g, n) {
                Some(m) => (m, true),
                None => match matrix.matches(g, n) {
                    Some(m) => (m, false),
                    None => continue,
                },
            };
            let (Some(k), Some(alpha)) = (clusters_of(g, m["V"]), alpha_of(g, n)) else {
                continue;
            };
            // One label per row of x, as the types say.
            if g.node(m["labels"]).ty.shape.rows != g.node(m["x"]).ty.shape.rows {
                continue;
            }
            let points = g.node(m["labels"]).ty.shape.rows.resolve(cx.dims);
            let fits = match (k.resolve(cx.dims), points) {
                (Some(kk), Some(nn)) if is_vector => {
                    kk <= cx.cluster_sums_max_k()
                        && nn.saturating_mul(kk) <= cx.target.label_sums_max_work
                }
                (Some(kk), Some(_)) => {
                    kk <= cx.cluster_sums_max_k() && kk <= cx.target.label_row_sums_max_k
                }
                _ => false,
            };
            if !fits {
                continue;
            }
            let ty = if is_vector {
                Type::col(k.clone())
            } else {
                Type::dense(k.clone(), g.node(m["x"]).ty.shape.cols.clone())
            };
            let sums = g.add(
                Op::Builtin(Builtin::LabelSums(LabelSums { k: k.clone() })),
                ty.clone(),
                &[m["x"], m["labels"]],
            );
            // Each row c scaled by alpha / |c|: a column broadcast over the matrix's columns.
            let scale = selection_scale(g, m["labels"], &k, alpha);
            let y = g.add(Op::Binary(BinaryOp::Mul), ty, &[sums, scale]);
            replace(g, n, y);
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
    use crate::ops::{Builtin, Counts};
    use crate::plan::StepOp;
    use crate::target::Target;
    use crate::types::Dim;
    use crate::{plan, PlannerConfig, Program};
    use std::collections::BTreeMap;

    fn step_names(p: &crate::Plan) -> Vec<String> {
        p.steps.iter().map(|s| s.op_name()).collect()
    }

    #[test]
    fn selection_products_become_cluster_sums_up_to_the_configured_k() {
        let p = Program::parse(
            "fn f(K: Dense[n, n], labels: Index[n]) -> (E: Dense[n, k]) { E = -2 * K * selection(labels, k)^T; }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 100), ("k".to_string(), 7)]
            .into_iter()
            .collect();
        let target = Target::reference_gpu();
        let with = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &target,
            &BTreeMap::new(),
        )
        .unwrap();
        let names = step_names(&with);
        assert!(names.contains(&"cluster sums".to_string()), "{with}");
        assert!(
            !names.contains(&"spmm".to_string()) && !names.contains(&"selection".to_string()),
            "{with}"
        );
        assert!(with
            .steps
            .iter()
            .any(|s| s.op == StepOp::Builtin(Builtin::Counts(Counts { k: Dim::Fixed(7) }))));
        let off = PlannerConfig {
            cluster_sums_max_k: Some(6),
            ..PlannerConfig::default()
        };
        let without = plan(&p, &dims, &off, &target, &BTreeMap::new()).unwrap();
        assert!(
            step_names(&without).contains(&"spmm".to_string()),
            "{without}"
        );
        // The target's limit applies where the configuration gives none.
        let small = Target {
            cluster_sums_max_k: 6,
            ..Target::reference_gpu()
        };
        let by_target = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &small,
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            step_names(&by_target).contains(&"spmm".to_string()),
            "{by_target}"
        );
    }

    #[test]
    fn centroids_become_label_sums_of_rows_up_to_the_targets_k() {
        // Lloyd's centroids V * X: no selection matrix, no SpMM, the rows scaled by 1/|c|.
        let p = Program::parse(
            "fn f(X: Dense[n, d], l: Index[n]) -> (C: Dense[k, d]) { C = selection(l, k) * X; }",
        )
        .unwrap();
        let dims = |k: usize| -> BTreeMap<String, usize> {
            [("n", 1000), ("d", 32), ("k", k)]
                .into_iter()
                .map(|(s, v)| (s.to_string(), v))
                .collect()
        };
        let target = Target::reference_gpu();
        let planned = |k: usize, config: &PlannerConfig| {
            plan(&p, &dims(k), config, &target, &BTreeMap::new()).unwrap()
        };
        let small = planned(100, &PlannerConfig::default());
        let names = step_names(&small);
        assert!(names.contains(&"label sums".to_string()), "{small}");
        assert!(
            !names.contains(&"spmm".to_string()) && !names.contains(&"selection".to_string()),
            "{small}"
        );
        assert!(small
            .steps
            .iter()
            .any(|s| s.op == StepOp::Builtin(Builtin::Counts(Counts { k: Dim::Fixed(100) }))));
        // Past the target's limit, and with cluster sums turned off, the SpMM stays.
        let large = planned(target.label_row_sums_max_k + 1, &PlannerConfig::default());
        assert!(step_names(&large).contains(&"spmm".to_string()), "{large}");
        let off = PlannerConfig {
            cluster_sums_max_k: Some(0),
            ..PlannerConfig::default()
        };
        let forced = planned(100, &off);
        assert!(
            step_names(&forced).contains(&"spmm".to_string()),
            "{forced}"
        );
    }

    #[test]
    fn a_row_computed_as_label_sums_stays_a_row() {
        // (V t0)^T is planned as the SpMV V t0 typed as a row; its label sums are a column,
        // read transposed where the row was used.
        let p = Program::parse(
            "fn f(X: Dense[n, n], l: Index[n]) -> (Y: Dense[n, n]) { t = selection(l, n) * sum_rows(X); Y = t^T + X; }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 3)].into_iter().collect();
        let plan = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &Target::reference_gpu(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            step_names(&plan).contains(&"label sums".to_string()),
            "{plan}"
        );
        let last = plan.steps.last().unwrap();
        let StepOp::Fused(f) = &last.op else {
            panic!("{plan}")
        };
        assert!(
            f.spec
                .inputs
                .iter()
                .any(|i| i.access == kernel_ir::Access::Row),
            "the sums are read along the rows: {plan}"
        );
    }

    #[test]
    fn sizes_that_agree_only_at_these_dimensions_keep_the_sparse_product() {
        // One label (argmin of a row) and a column of n entries: equal sizes at n = 1 only,
        // so the product stays an SpMV (found by the random-program survey).
        let p = Program::parse(
            "fn f(X0: Row[m], X3: Dense[n, n]) -> (t3: Dense[n, m]) { t1 = rownorms(X3^T); t2 = argmin_rows(X0); t3 = -0.5 * t1 * selection(t2, m)^T; }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 1), ("m".to_string(), 7)]
            .into_iter()
            .collect();
        let plan = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &Target::reference_gpu(),
            &BTreeMap::new(),
        );
        assert!(plan.is_ok(), "{plan:?}");
    }

    #[test]
    fn selection_times_a_vector_becomes_label_sums_within_the_work_limit() {
        let p = Program::parse(
            "fn f(z: Col[n], labels: Index[n]) -> (c: Col[k]) { c = -0.5 * selection(labels, k) * z; }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n".to_string(), 1000), ("k".to_string(), 10)]
            .into_iter()
            .collect();
        let target = Target::reference_gpu();
        let with = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &target,
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            step_names(&with).contains(&"label sums".to_string()),
            "{with}"
        );
        assert!(
            !step_names(&with).contains(&"selection".to_string()),
            "{with}"
        );
        let tight = Target {
            label_sums_max_work: 9999,
            ..Target::reference_gpu()
        };
        let without = plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &tight,
            &BTreeMap::new(),
        )
        .unwrap();
        assert!(
            step_names(&without).contains(&"spmv".to_string()),
            "{without}"
        );
    }
}
