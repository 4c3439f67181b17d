//! Products `A * B^T` of two CSR matrices with a dense result: a Gram matrix `X * X^T` or a
//! cross kernel `Y * X^T` of sparse points. The select pass hands them here; the target's cost
//! model picks one of three ways and the plan says which and why:
//!
//! - **spgemm**: the backend's sparse x sparse^T product, row by row (each entry `A[i, c]`
//!   against the entries of column `c` of `B`, summed into a dense row of the result), where the
//!   target has one ([`SparseTarget::gram_flops_per_s`]): `2 nnz(A) nnz(B) / k` flops;
//! - **spmm against dense B^T**: `B^T` written dense (`k x n`), then an SpMM `A * dense(B^T)`:
//!   `2 nnz(A) n` flops, `k n` dense values of memory;
//! - **densify**: both operands written dense, then the dense product (SYRK or GEMM, chosen as
//!   for dense operands): `2 m n k` flops (half for a SYRK), `(m + n) k` values of memory.
//!
//! Each estimate is its flops at the target's rate plus its bytes at the copy rate; a way whose
//! dense copies would take more than half the target's memory is left out.

use super::library_choice::choose;
use super::{PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op, ProductAttrs};
use crate::ops::products::{gemm_cost, sparse_gram_cost, sparse_product_cost, syrk_cost};
use crate::ops::{Builtin, Cost, Densify};
use crate::target::SparseTarget;
use crate::types::Type;

/// One way to compute the product, with its estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    SpGemm,
    SpmmDenseT,
    Densify,
}

impl Way {
    fn name(self, same: bool) -> &'static str {
        match (self, same) {
            (Way::SpGemm, _) => "spgemm",
            (Way::SpmmDenseT, _) => "spmm against dense B^T",
            (Way::Densify, true) => "densify + syrk",
            (Way::Densify, false) => "densify + gemm",
        }
    }
}

/// The stored entries of CSR node `x` (`rows * cols` where unknown: as if dense).
fn nnz_of(g: &Graph, x: NodeId, rows: usize, cols: usize, cx: &PassContext<'_>) -> usize {
    match &g.node(x).op {
        Op::Input { param } => cx.nnz.get(param).copied(),
        _ => None,
    }
    .unwrap_or(rows.saturating_mul(cols))
}

/// Seconds of `cost` at `flops_per_s` and the target's copy rate.
fn seconds(cost: Cost, flops_per_s: f64, cx: &PassContext<'_>) -> f64 {
    cost.flops / flops_per_s + cost.bytes / cx.target.ceilings.copy_bytes_per_s
}

/// The estimates of every way available on the target, cheapest first.
fn estimates(
    (m, n, k): (usize, usize, usize),
    (za, zb): (usize, usize),
    same: bool,
    cx: &PassContext<'_>,
) -> Vec<(Way, f64)> {
    let elem = cx.config.dtype.size_bytes() as f64;
    let copy = |values: usize, nnz: usize, rows: usize| Cost {
        flops: 0.0,
        bytes: elem * values as f64 + nnz as f64 * (elem + 4.0) + 4.0 * (rows + 1) as f64,
    };
    let fits = |values: usize| {
        cx.target
            .memory_bytes
            .is_none_or(|mem| (values as f64) * elem <= mem as f64 / 2.0)
    };
    let product_rate = cx
        .target
        .ceilings
        .product_flops_per_s(cx.config.dtype, cx.config.library_tf32());
    let mut ways = Vec::new();
    if let Some(SparseTarget {
        gram_flops_per_s,
        spmm_flops_per_s,
    }) = cx.target.sparse
    {
        if let Some(rate) = gram_flops_per_s {
            ways.push((
                Way::SpGemm,
                seconds(sparse_gram_cost(za, zb, k, m, n, elem), rate, cx),
            ));
        }
        if fits(k * n) {
            let t = seconds(copy(k * n, zb, n), product_rate, cx)
                + seconds(
                    sparse_product_cost(za, m, n, k * n, m * n, elem),
                    spmm_flops_per_s,
                    cx,
                );
            ways.push((Way::SpmmDenseT, t));
        }
    }
    let dense_values = if same { n * k } else { (m + n) * k };
    if fits(dense_values) || ways.is_empty() {
        let densify = if same {
            seconds(copy(n * k, za, n), product_rate, cx)
        } else {
            seconds(copy(m * k, za, m), product_rate, cx)
                + seconds(copy(n * k, zb, n), product_rate, cx)
        };
        let product = if same {
            syrk_cost(n, k, false, elem)
        } else {
            gemm_cost(m, n, k, elem)
        };
        ways.push((Way::Densify, densify + seconds(product, product_rate, cx)));
    }
    ways.sort_by(|x, y| x.1.total_cmp(&y.1));
    ways
}

/// The plan's note on the choice: every estimate, the chosen one first.
fn explain(ways: &[(Way, f64)], same: bool, density: f64) -> String {
    let listed: Vec<String> = ways
        .iter()
        .map(|(w, t)| format!("{} {:.3} ms", w.name(same), t * 1e3))
        .collect();
    format!(
        "density {:.3}%, estimated {}",
        density * 100.0,
        listed.join(" < ")
    )
}

/// Turns product node `n` (`alpha * A * B^T`, both operands CSR) into the cheapest way on the
/// target: a library step, with densify steps where that way needs them.
pub fn plan_sparse_product(
    g: &mut Graph,
    n: NodeId,
    p: &ProductAttrs,
    feeds_map: bool,
    cx: &PassContext<'_>,
) -> Result<(), PlanError> {
    let ops = g.operands(n);
    let (a, b) = (ops[0], ops[1]);
    if p.trans_a || !p.trans_b {
        return Err(PlanError::Unsupported(format!(
            "`{}`: of the products of two sparse matrices only A * B^T (a Gram or cross kernel \
             matrix, dense result) is supported",
            g.describe(n)
        )));
    }
    let (ta, tb) = (g.node(a).ty.clone(), g.node(b).ty.clone());
    let unsized_ = || PlanError::Internal {
        pass: "select",
        message: "a sparse product's operands have unsized dimensions".into(),
    };
    let (m, k) = ta.shape.resolve(cx.dims).ok_or_else(unsized_)?;
    let (nn, _) = tb.shape.resolve(cx.dims).ok_or_else(unsized_)?;
    let same = a == b;
    let za = nnz_of(g, a, m, k, cx);
    let zb = if same { za } else { nnz_of(g, b, nn, k, cx) };
    let ways = estimates((m, nn, k), (za, zb), same, cx);
    let density = (za + zb) as f64 / ((m + nn) as f64 * k as f64).max(1.0);
    let why = explain(&ways, same, density);
    let densify = |g: &mut Graph, x: NodeId, t: &Type, transpose: bool, why: &str| {
        let shape = if transpose {
            t.shape.transposed()
        } else {
            t.shape.clone()
        };
        g.add(
            Op::Builtin(Builtin::Densify(Densify {
                transpose,
                why: why.to_string(),
            })),
            Type::dense(shape.rows, shape.cols),
            &[x],
        )
    };
    match ways.first().map(|w| w.0) {
        Some(Way::SpGemm) => {
            g.node_mut(n).op = Op::Library(LibOp::SpGemm {
                alpha: p.alpha.clone(),
                why,
            });
        }
        Some(Way::SpmmDenseT) => {
            let bt = densify(g, b, &tb, true, &why);
            g.node_mut(n).op = Op::Library(LibOp::SpMM {
                sparse_left: true,
                trans_sparse: false,
                trans_dense: false,
                alpha: p.alpha.clone(),
            });
            g.set_operands(n, &[a, bt]);
        }
        Some(Way::Densify) | None => {
            let da = densify(g, a, &ta, false, &why);
            let db = if same {
                da
            } else {
                densify(g, b, &tb, false, &why)
            };
            let ty = g.node(n).ty.clone();
            let (lib, operands) = choose(g, da, db, p, &ty, feeds_map, cx);
            let is_syrk = matches!(lib, LibOp::Syrk { .. });
            g.node_mut(n).op = Op::Library(lib);
            g.set_operands(n, if is_syrk { &operands[..1] } else { &operands });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::Builtin;
    use crate::plan::StepOp;
    use crate::{PlanError, PlannerConfig, Program, Target};
    use std::collections::BTreeMap;

    const GRAM: &str = "fn g(X: Csr[n, d], gamma: Scalar) -> (K: Dense[n, n]) { B = X * X^T; b = diag(B); K = exp(-gamma * max(b + b^T - 2 * B, 0)); }";
    const CROSS: &str = "fn c(Y: Csr[m, d], X: Csr[n, d]) -> (Kc: Dense[m, n], s: Col[m]) { Kc = Y * X^T; s = rownorms(Y); }";

    fn plan_of(
        src: &str,
        dims: &[(&str, usize)],
        nnz: &[(&str, usize)],
        target: &Target,
    ) -> Result<crate::Plan, PlanError> {
        let p = Program::parse(src).unwrap();
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let nnz: BTreeMap<String, usize> = nnz.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        crate::plan(&p, &dims, &PlannerConfig::default(), target, &nnz)
    }

    fn ops(plan: &crate::Plan) -> Vec<String> {
        plan.steps.iter().map(|s| s.op_name()).collect()
    }

    #[test]
    fn sparse_gram_on_the_cpu_is_a_sparse_product_and_says_why() {
        let dims = [("n", 20_000), ("d", 100_000)];
        let plan = plan_of(GRAM, &dims, &[("X", 2_000_000)], &Target::cpu(2)).unwrap();
        assert_eq!(ops(&plan)[0], "spgemm");
        let StepOp::SpGemm { why, m, n, k, .. } = &plan.steps[0].op else {
            panic!("{plan}")
        };
        assert_eq!((*m, *n, *k), (20_000, 20_000, 100_000));
        assert!(why.starts_with("density 0.100%, estimated spgemm"), "{why}");
        assert!(why.contains("< densify + syrk"), "{why}");
        assert!(plan.to_string().contains("spgemm"), "{plan}");
        // A dense-enough matrix with few columns: densified, then SYRK (feeding the map).
        let plan = plan_of(
            GRAM,
            &[("n", 2000), ("d", 20)],
            &[("X", 20_000)],
            &Target::cpu(2),
        )
        .unwrap();
        assert_eq!(ops(&plan)[..2], ["densify", "syrk"]);
        assert!(
            plan.to_string().contains("estimated densify + syrk"),
            "{plan}"
        );
    }

    #[test]
    fn sparse_gram_on_the_gpu_is_an_spmm_against_the_dense_transpose() {
        // SCOTUS-shaped: 6400 x 126405 at 0.5%.
        let dims = [("n", 6400), ("d", 126_405)];
        let nnz = 6400 * 126_405 / 200;
        let plan = plan_of(GRAM, &dims, &[("X", nnz)], &Target::reference_gpu()).unwrap();
        assert_eq!(ops(&plan)[..2], ["densify", "spmm"]);
        let StepOp::Builtin(Builtin::Densify(d)) = &plan.steps[0].op else {
            panic!("{plan}")
        };
        assert!(d.transpose);
        assert!(d.why.contains("spmm against dense B^T"), "{}", d.why);
        // Without a known nnz the matrix counts as dense: densified, then SYRK.
        let plan = plan_of(GRAM, &dims, &[], &Target::reference_gpu()).unwrap();
        assert_eq!(ops(&plan)[..2], ["densify", "syrk"]);
    }

    #[test]
    fn cross_kernel_and_row_norms_of_sparse_points() {
        let dims = [("m", 10), ("n", 500), ("d", 10_000)];
        let plan = plan_of(CROSS, &dims, &[("Y", 100), ("X", 5000)], &Target::cpu(2)).unwrap();
        let names = ops(&plan);
        assert!(names.contains(&"spgemm".to_string()), "{plan}");
        assert!(names.contains(&"csr rownorms".to_string()), "{plan}");
    }

    #[test]
    fn other_sparse_products_are_unsupported() {
        let src = "fn f(X: Csr[n, d]) -> (G: Dense[d, d]) { G = X^T * X; }";
        let err = plan_of(src, &[("n", 5), ("d", 3)], &[], &Target::cpu(2)).unwrap_err();
        assert!(err.to_string().contains("only A * B^T"), "{err}");
    }
}
