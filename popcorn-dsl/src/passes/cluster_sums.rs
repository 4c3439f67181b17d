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
//! A weighted selection `V = selection(labels, k, w)` (`w_j / W_c` in row `c = labels_j`) gives
//!
//! ```text
//! (alpha * M * V^T)[i, c] = alpha / W_c * sum_{j: labels_j = c} w_j M[i, j]
//! ```
//!
//! the cluster sums of `M .* w^T` (a column broadcast in the epilogue of the contraction that
//! computes `M`, permuted with the columns by [`super::label_order`]) scaled by
//! `where(W != 0, alpha / W, 0)`, `W = counts(labels, k, w)` (a cluster whose weights sum to 0
//! gives 0, as the weighted matrix's zero row does). Only where `M` is computed in the program
//! and nothing else reads it whole (a `diag` may): an input or a stored `M` would be copied
//! into a weighted `n x n` temporary, so such a product stays an SpMM by the weighted
//! selection matrix (`POPCORN_LOG=fusion` says so).
//!
//! Likewise `alpha * V * x` for a column vector `x` is `(alpha / |c|) * sum_{i: labels_i = c}
//! x[i]`: [`LabelSums`] and the same scaling ([`LabelSumsPattern`], where `n k` is at most the
//! target's [`label_sums_max_work`](crate::target::Target::label_sums_max_work): its kernel
//! reads the labels once per cluster); weighted, the label sums of `w .* x` and the weighted
//! scaling. Kernel K-means' centroid norms are such a product, and
//! then nothing needs the selection matrix itself (building it is a histogram, a scan and a
//! scatter). The same holds row by row for `alpha * V * X` with `X` an `n x d` matrix (Lloyd's
//! centroids): [`LabelSums`] of the rows, one pass over `X` whatever `k`, scaled per cluster,
//! where `k` is at most the target's
//! [`label_row_sums_max_k`](crate::target::Target::label_row_sums_max_k) (its kernel keeps `k`
//! partial rows per warp in shared memory).

use super::pattern::{any, op, Pattern};
use super::{GraphPass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op};
use crate::ops::{Builtin, ClusterSums, Counts, LabelSums, Selection, LABEL_ROW_SUMS_MAX_COLS};
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
    op(|o| matches!(o, Op::Builtin(Builtin::Selection(s)) if !s.weighted))
        .bind("V")
        .args([any().bind("labels")])
}

/// `selection(labels, k, w)`, binding `V`, `labels` and `w`.
fn weighted_selection() -> Pattern {
    op(|o| matches!(o, Op::Builtin(Builtin::Selection(s)) if s.weighted))
        .bind("V")
        .args([any().bind("labels"), any().bind("w")])
}

/// The number of clusters of the selection node `v`.
fn clusters_of(g: &Graph, v: NodeId) -> Option<Dim> {
    match &g.node(v).op {
        Op::Builtin(Builtin::Selection(Selection { k, .. })) => Some(k.clone()),
        _ => None,
    }
}

/// The scaling of a weighted selection's sums: `where(W != 0, alpha / W, 0)` with
/// `W = counts(labels, k, w)`, a `k`-vector.
fn weighted_scale(g: &mut Graph, labels: NodeId, w: NodeId, k: &Dim, alpha: ScalarExpr) -> NodeId {
    let col = Type::col(k.clone());
    let totals = g.add(
        Op::Builtin(Builtin::LabelSums(LabelSums { k: k.clone() })),
        col.clone(),
        &[w, labels],
    );
    let zero = g.add(Op::Scalar(ScalarExpr::Lit(0.0)), Type::scalar(), &[]);
    let some = g.add(Op::Binary(BinaryOp::Ne), col.clone(), &[totals, zero]);
    let a = g.add(Op::Scalar(alpha), Type::scalar(), &[]);
    let scaled = g.add(Op::Binary(BinaryOp::Div), col.clone(), &[a, totals]);
    g.add(Op::Select, col, &[some, scaled, zero])
}

/// Whether the columns of `m` may be weighted inside the kernel that computes it: `m` is a
/// product or an element-wise map of the program, no output, and read only by `product` (and
/// `diag`s, which a contraction derives from its operands). Otherwise the weighted copy would
/// be a second matrix of `m`'s size; the reason is returned.
fn weights_fold_into(g: &Graph, m: NodeId, product: NodeId) -> Result<(), &'static str> {
    let node = g.node(m);
    if !(node.op.is_elementwise()
        || matches!(node.op, Op::Library(LibOp::Gemm(_) | LibOp::Syrk { .. })))
    {
        return Err("the matrix is not computed by the program (an input or a builtin's result)");
    }
    if g.is_output(m) {
        return Err("the matrix is an output");
    }
    if g.users(m)
        .iter()
        .any(|&u| u != product && !matches!(g.node(u).op, Op::Builtin(Builtin::Diag(_))))
    {
        return Err("the matrix is read by other steps too");
    }
    Ok(())
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

/// The SpMM `M * V^T` with `V` a selection, as select leaves it.
fn is_spmm_by_selection(o: &Op) -> bool {
    matches!(
        o,
        Op::Library(LibOp::SpMM {
            sparse_left: false,
            trans_sparse: true,
            trans_dense: false,
            ..
        })
    )
}

/// The SpMV `V * x` with `V` a selection.
fn is_spmv_by_selection(o: &Op) -> bool {
    matches!(o, Op::Library(LibOp::SpMV { trans: false, .. }))
}

/// An SpMM `V * X` of a selection matrix on the left, neither operand transposed.
fn is_selection_times_dense(o: &Op) -> bool {
    matches!(
        o,
        Op::Library(LibOp::SpMM {
            sparse_left: true,
            trans_sparse: false,
            trans_dense: false,
            ..
        })
    )
}

impl GraphPass for ClusterSumsPattern {
    fn name(&self) -> &'static str {
        "cluster-sums"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let plain = op(is_spmm_by_selection).args([any().bind("M"), selection()]);
        let weighted = op(is_spmm_by_selection).args([any().bind("M"), weighted_selection()]);
        let log = crate::log::enabled("fusion");
        let mut changed = false;
        for n in g.topo_order() {
            let Some(m) = plain.matches(g, n).or_else(|| weighted.matches(g, n)) else {
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
            let summed = match m.get("w") {
                None => m["M"],
                Some(w) => {
                    if let Err(why) = weights_fold_into(g, m["M"], n) {
                        if log {
                            eprintln!(
                                "[popcorn fusion] {} stays an SpMM by the weighted selection matrix ({}): {why}",
                                g.describe(n),
                                g.describe(m["M"])
                            );
                        }
                        continue;
                    }
                    // M .* w^T: each column weighted by its point's weight.
                    let w_t = g.add(
                        Op::Transpose,
                        Type::row(g.node(w).ty.shape.rows.clone()),
                        &[w],
                    );
                    let ty = g.node(m["M"]).ty.clone();
                    g.add(Op::Binary(BinaryOp::Mul), ty, &[m["M"], w_t])
                }
            };
            // S = cluster_sums(M, labels)
            let sums = g.add(
                Op::Builtin(Builtin::ClusterSums(ClusterSums { k: k.clone() })),
                Type::dense(rows.clone(), k.clone()),
                &[summed, m["labels"]],
            );
            // E = S .* scale^T: alpha / max(counts(labels, k), 1), or the weighted scale.
            let scale = match m.get("w") {
                None => selection_scale(g, m["labels"], &k, alpha),
                Some(w) => weighted_scale(g, m["labels"], w, &k, alpha),
            };
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
        let column = || {
            any()
                .bind("x")
                .when(|g, x| g.node(x).ty.shape.cols.is_one())
        };
        // `V * x`, x a column vector: an SpMV.
        let plain = op(is_spmv_by_selection).args([selection(), column()]);
        let weighted = op(is_spmv_by_selection).args([weighted_selection(), column()]);
        // `V * X`, X a matrix: an SpMM with the selection on the left, neither transposed
        // (Lloyd's centroids).
        let plain_rows = op(is_selection_times_dense).args([selection(), any().bind("x")]);
        let weighted_rows =
            op(is_selection_times_dense).args([weighted_selection(), any().bind("x")]);
        let mut changed = false;
        for n in g.topo_order() {
            let (m, is_vector) = match plain.matches(g, n).or_else(|| weighted.matches(g, n)) {
                Some(m) => (m, true),
                None => match plain_rows
                    .matches(g, n)
                    .or_else(|| weighted_rows.matches(g, n))
                {
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
                    let cols = g.node(m["x"]).ty.shape.cols.resolve(cx.dims);
                    kk <= cx.cluster_sums_max_k()
                        && kk <= cx.target.label_row_sums_max_k
                        && cols.is_some_and(|d| d <= LABEL_ROW_SUMS_MAX_COLS)
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
            // Weighted: the sums of w .* x (a column broadcast over a matrix's columns).
            let summed = match m.get("w") {
                None => m["x"],
                Some(w) => {
                    let ty = g.node(m["x"]).ty.clone();
                    g.add(Op::Binary(BinaryOp::Mul), ty, &[m["x"], w])
                }
            };
            let sums = g.add(
                Op::Builtin(Builtin::LabelSums(LabelSums { k: k.clone() })),
                ty.clone(),
                &[summed, m["labels"]],
            );
            // Each row c scaled by alpha / |c| (alpha / W_c weighted): a column broadcast over
            // a matrix's columns.
            let scale = match m.get("w") {
                None => selection_scale(g, m["labels"], &k, alpha),
                Some(w) => weighted_scale(g, m["labels"], w, &k, alpha),
            };
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
        // Weighted: the label sums of w .* X, no weighted selection matrix.
        let pw = Program::parse(
            "fn f(X: Dense[n, d], l: Index[n], w: Col[n]) -> (C: Dense[k, d]) { C = selection(l, k, w) * X; }",
        )
        .unwrap();
        let weighted = plan(
            &pw,
            &dims(100),
            &PlannerConfig::default(),
            &target,
            &BTreeMap::new(),
        )
        .unwrap();
        let names = step_names(&weighted);
        assert!(names.contains(&"label sums".to_string()), "{weighted}");
        assert!(
            !names.iter().any(|s| s == "spmm" || s.contains("selection")),
            "{weighted}"
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
