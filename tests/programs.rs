//! Programs that must run: every example program runs on the CPU context on small random
//! inputs (f64 and f32 with fusion, f64 without) and matches hand-written loops in f64
//! (1e-9 relative in f64, 1e-4 in f32). Sizes include n = 1, k = 1, odd sizes and empty
//! clusters.

mod common;

use common::*;
use popcorn_dsl::{ContractionPolicy, DType, PlannerConfig, Program};
use popcorn_runtime::{Args, Context};
use std::collections::BTreeMap;

/// (dtype, fusion) pairs every program runs under.
const CONFIGS: [(DType, bool); 3] = [(DType::F64, true), (DType::F32, true), (DType::F64, false)];

/// A CPU context for one configuration, and its label for messages.
fn context(dtype: DType, fusion: bool) -> (Context, String) {
    let config = PlannerConfig {
        dtype,
        fusion,
        ..PlannerConfig::default()
    };
    let label = format!("{dtype}, {}", if fusion { "fused" } else { "unfused" });
    (cpu_with(config), label)
}

/// (n, d) pairs for kernel matrices and Lloyd steps.
const POINT_SIZES: [(usize, usize); 9] = [
    (1, 1),
    (1, 4),
    (2, 1),
    (3, 2),
    (5, 3),
    (7, 7),
    (16, 5),
    (33, 4),
    (17, 40),
];

fn programs() -> BTreeMap<String, Program> {
    example_programs()
}

fn program<'a>(all: &'a BTreeMap<String, Program>, name: &str) -> &'a Program {
    all.get(name).unwrap_or_else(|| {
        panic!(
            "no example program `{name}`; found {:?}",
            all.keys().collect::<Vec<_>>()
        )
    })
}

/// `x_i . x_j` for rows of the row-major `n x d` matrix `x`.
fn dot(x: &[f64], d: usize, i: usize, j: usize) -> f64 {
    (0..d).map(|l| x[i * d + l] * x[j * d + l]).sum()
}

/// `||x_i - x_j||^2`.
fn sq_dist(x: &[f64], d: usize, i: usize, j: usize) -> f64 {
    (0..d).map(|l| (x[i * d + l] - x[j * d + l]).powi(2)).sum()
}

/// The kernels of the example file, by hand.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Linear,
    Polynomial { gamma: f64, coef0: f64, degree: f64 },
    Gaussian { gamma: f64 },
    Sigmoid { gamma: f64, coef0: f64 },
}

impl Kernel {
    fn program(&self) -> &'static str {
        match self {
            Kernel::Linear => "kernel_linear",
            Kernel::Polynomial { .. } => "kernel_polynomial",
            Kernel::Gaussian { .. } => "kernel_gaussian",
            Kernel::Sigmoid { .. } => "kernel_sigmoid",
        }
    }

    /// K by loops over pairs of points.
    fn by_hand(&self, x: &[f64], n: usize, d: usize) -> Vec<f64> {
        let mut k = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                k[i * n + j] = match *self {
                    Kernel::Linear => dot(x, d, i, j),
                    Kernel::Polynomial {
                        gamma,
                        coef0,
                        degree,
                    } => (gamma * dot(x, d, i, j) + coef0).powf(degree),
                    Kernel::Gaussian { gamma } => (-gamma * sq_dist(x, d, i, j)).exp(),
                    Kernel::Sigmoid { gamma, coef0 } => (gamma * dot(x, d, i, j) + coef0).tanh(),
                };
            }
        }
        k
    }

    /// The name of the recompute iteration for this kernel.
    fn recompute_program(&self) -> String {
        self.program().replacen("kernel_", "kkmeans_recompute_", 1)
    }

    /// `args` with this kernel's scalar parameters.
    fn scalars<'a>(&self, args: Args<'a>) -> Args<'a> {
        match *self {
            Kernel::Linear => args,
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } => args
                .scalar("gamma", gamma)
                .scalar("coef0", coef0)
                .scalar("degree", degree),
            Kernel::Gaussian { gamma } => args.scalar("gamma", gamma),
            Kernel::Sigmoid { gamma, coef0 } => args.scalar("gamma", gamma).scalar("coef0", coef0),
        }
    }

    fn run(&self, ctx: &Context, p: &Program, x: &[f64], n: usize, d: usize) -> Vec<f64> {
        let xt = ctx.dense(n, d, x).expect("X uploads");
        let args = self.scalars(Args::new().tensor("X", &xt));
        let out = ctx
            .run(p, &args)
            .unwrap_or_else(|e| panic!("{} ({n} x {d}) fails: {e}", p.name));
        let kt = out.tensor("K").expect("output K");
        ctx.to_f64(kt).expect("K downloads")
    }
}

const KERNELS: [Kernel; 6] = [
    Kernel::Linear,
    Kernel::Polynomial {
        gamma: 0.5,
        coef0: 1.0,
        degree: 2.0,
    },
    Kernel::Polynomial {
        gamma: 0.75,
        coef0: 0.25,
        degree: 3.0,
    },
    Kernel::Gaussian { gamma: 0.5 },
    Kernel::Gaussian { gamma: 2.0 },
    Kernel::Sigmoid {
        gamma: 0.5,
        coef0: 0.25,
    },
];

#[test]
fn every_example_program_parses() {
    let all = programs();
    for name in [
        "kernel_linear",
        "kernel_polynomial",
        "kernel_gaussian",
        "kernel_sigmoid",
        "kkmeans_iteration",
        "lloyd_step",
        "pagerank_step",
    ] {
        program(&all, name);
    }
}

#[test]
fn kernel_matrices_match_loops_over_pairs() {
    let all = programs();
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for (s, &(n, d)) in POINT_SIZES.iter().enumerate() {
            let mut rng = SplitMix64::new(100 + s as u64);
            let x = random_values(&mut rng, n * d);
            for kernel in KERNELS {
                let p = program(&all, kernel.program());
                let got = kernel.run(&ctx, p, &x, n, d);
                let want = kernel.by_hand(&x, n, d);
                assert_close(
                    &format!("{kernel:?} {n} x {d} in {label}"),
                    &got,
                    &want,
                    rtol(dtype),
                );
            }
        }
    }
}

#[test]
fn gaussian_kernel_has_an_exact_unit_diagonal_and_no_negative_distances() {
    // Duplicate points: rounding in b + b^T - 2B must be clamped, so K stays <= 1.
    let all = programs();
    let p = program(&all, "kernel_gaussian");
    let x = vec![0.3, -0.7, 0.3, -0.7, 0.1, 0.9];
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        let got = Kernel::Gaussian { gamma: 1.0 }.run(&ctx, p, &x, 3, 2);
        for i in 0..3 {
            assert_eq!(got[i * 3 + i], 1.0, "K[{i}, {i}] in {label}");
        }
        assert!(got.iter().all(|v| *v <= 1.0), "{got:?}");
        assert_eq!(got[1], 1.0, "duplicate points have kernel 1 in {label}");
    }
}

/// Kernel k-means distances from the definition:
/// `D_ic = K_ii - 2/|c| sum_{j in c} K_ij + 1/|c|^2 sum_{j,l in c} K_jl`, `+inf` when c is empty.
fn kkmeans_distances(kmat: &[f64], labels: &[u32], k: usize) -> Vec<f64> {
    weighted_distances(kmat, labels, &vec![1.0; labels.len()], k)
}

/// Weighted Kernel K-means distances from the definition (Dhillon, Guan and Kulis):
/// `D_ic = K_ii - 2/W_c sum_{j in c} w_j K_ij + 1/W_c^2 sum_{j,l in c} w_j w_l K_jl` with
/// `W_c = sum_{j in c} w_j`, `+inf` when `W_c` is 0.
fn weighted_distances(kmat: &[f64], labels: &[u32], w: &[f64], k: usize) -> Vec<f64> {
    let n = labels.len();
    let mut d = vec![0.0; n * k];
    for c in 0..k {
        let members: Vec<usize> = (0..n).filter(|&j| labels[j] as usize == c).collect();
        let total: f64 = members.iter().map(|&j| w[j]).sum();
        let mut within = 0.0;
        for &j in &members {
            for &l in &members {
                within += w[j] * w[l] * kmat[j * n + l];
            }
        }
        for i in 0..n {
            d[i * k + c] = if total == 0.0 {
                f64::INFINITY
            } else {
                let to_members: f64 = members.iter().map(|&j| w[j] * kmat[i * n + j]).sum();
                kmat[i * n + i] - 2.0 * to_members / total + within / (total * total)
            };
        }
    }
    d
}

/// `sum_i w_i D[i, labels_i]` over the points of positive weight.
fn weighted_objective(d: &[f64], labels: &[u32], w: &[f64], k: usize) -> f64 {
    (0..labels.len())
        .filter(|&i| w[i] > 0.0)
        .map(|i| w[i] * d[i * k + labels[i] as usize])
        .sum()
}

/// Weights for `n` points from `rng`: integers 0 to 3 (zeros included), or positive reals.
fn random_weights(rng: &mut SplitMix64, n: usize, integers: bool) -> Vec<f64> {
    (0..n)
        .map(|_| {
            if integers {
                rng.below(4) as f64
            } else {
                rng.uniform(0.25, 2.0)
            }
        })
        .collect()
}

struct KkmeansCase {
    what: String,
    kmat: Vec<f64>,
    labels: Vec<u32>,
    k: usize,
}

fn run_kkmeans(ctx: &Context, p: &Program, case: &KkmeansCase) -> (Vec<u32>, f64) {
    run_kkmeans_weighted(ctx, p, case, None)
}

/// One iteration of `p` on the case, with the weights `w` where given (the weighted program).
fn run_kkmeans_weighted(
    ctx: &Context,
    p: &Program,
    case: &KkmeansCase,
    w: Option<&[f64]>,
) -> (Vec<u32>, f64) {
    let n = case.labels.len();
    let kt = ctx.dense(n, n, &case.kmat).expect("K uploads");
    let lt = ctx.index(&case.labels).expect("labels upload");
    let wt = w.map(|w| ctx.col(w).expect("weights upload"));
    let mut args = Args::new()
        .tensor("K", &kt)
        .tensor("labels", &lt)
        .dim("k", case.k);
    if let Some(wt) = &wt {
        args = args.tensor("w", wt);
    }
    let out = ctx
        .run(p, &args)
        .unwrap_or_else(|e| panic!("{} ({}) fails: {e}", p.name, case.what));
    let labels = ctx
        .to_u32(out.tensor("new_labels").expect("output new_labels"))
        .expect("labels download");
    let objective = out.scalar("objective").expect("output objective");
    (labels, objective)
}

/// A positive semi-definite K (gaussian kernel of random points), f32-representable.
fn psd_kernel(rng: &mut SplitMix64, n: usize, d: usize) -> Vec<f64> {
    let x = random_values(rng, n * d);
    let g = Kernel::Gaussian {
        gamma: 1.0 / d as f64,
    };
    g.by_hand(&x, n, d)
        .into_iter()
        .map(|v| v as f32 as f64)
        .collect()
}

fn kkmeans_cases() -> Vec<KkmeansCase> {
    let mut cases = Vec::new();
    // (n, d, k, labels): None draws labels in 0..k; Some(list) fixes them.
    let specs: Vec<(usize, usize, usize, Option<Vec<u32>>)> = vec![
        (1, 1, 1, None),
        (1, 3, 3, Some(vec![1])), // n = 1, two empty clusters
        (2, 2, 1, None),          // k = 1
        (5, 3, 2, None),
        (7, 2, 3, None),
        (9, 4, 4, Some(vec![0, 1, 3, 0, 1, 3, 3, 0, 1])), // cluster 2 is empty
        (16, 3, 5, None),
        (33, 5, 7, None),
        (33, 8, 4, None),
    ];
    for (s, (n, d, k, labels)) in specs.into_iter().enumerate() {
        let mut rng = SplitMix64::new(1000 + s as u64);
        let kmat = psd_kernel(&mut rng, n, d);
        for round in 0..2 {
            // Two label sets at the same size: the second call reuses the cached plan.
            let labels = match &labels {
                Some(l) if round == 0 => l.clone(),
                _ => random_labels(&mut rng, n, k),
            };
            cases.push(KkmeansCase {
                what: format!("n={n} d={d} k={k} labels={labels:?}"),
                kmat: kmat.clone(),
                labels,
                k,
            });
        }
    }
    cases
}

#[test]
fn kkmeans_iteration_matches_the_definition() {
    let all = programs();
    let p = program(&all, "kkmeans_iteration");
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for case in kkmeans_cases() {
            let n = case.labels.len();
            let d = kkmeans_distances(&case.kmat, &case.labels, case.k);
            let want_labels = argmin_rows(&d, case.k);
            let want_objective: f64 = (0..n)
                .map(|i| d[i * case.k + case.labels[i] as usize])
                .sum();
            let (labels, objective) = run_kkmeans(&ctx, p, &case);
            // Every D entry is a sum of terms bounded by 4 max|K|.
            let tol = rtol(dtype) * 4.0 * scale_of(&case.kmat);
            let what = format!("{} in {label}", case.what);
            check_labels(
                &format!("new_labels, {what}"),
                &labels,
                &want_labels,
                &d,
                case.k,
                tol,
            )
            .unwrap();
            for (i, &l) in labels.iter().enumerate() {
                assert!(
                    d[i * case.k + l as usize].is_finite(),
                    "{what}: point {i} chose the empty cluster {l}"
                );
            }
            check_close_scaled(
                &format!("objective, {what}"),
                &[objective],
                &[want_objective],
                tol * n as f64,
            )
            .unwrap();
        }
    }
}

/// Weights for a case of `n` points: integers 0 to 3 (at least one positive) or positive reals.
fn case_weights(rng: &mut SplitMix64, n: usize, integers: bool) -> Vec<f64> {
    let mut w = random_weights(rng, n, integers);
    if w.iter().all(|v| *v == 0.0) {
        w[0] = 1.0;
    }
    w
}

/// The weighted iteration on a stored K agrees with the weighted definition: labels (up to
/// near-ties; zero-weight points too), no point in a cluster of weight 0, and the weighted
/// objective (zero-weight points left out).
#[test]
fn kkmeans_weighted_iteration_matches_the_definition() {
    let all = programs();
    let p = program(&all, "kkmeans_iteration_weighted");
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for (c, case) in kkmeans_cases().into_iter().enumerate() {
            let n = case.labels.len();
            let mut rng = SplitMix64::new(4000 + c as u64);
            for integers in [true, false] {
                let w = case_weights(&mut rng, n, integers);
                let d = weighted_distances(&case.kmat, &case.labels, &w, case.k);
                let want_labels = argmin_rows(&d, case.k);
                let want_objective = weighted_objective(&d, &case.labels, &w, case.k);
                let (labels, objective) = run_kkmeans_weighted(&ctx, p, &case, Some(&w));
                let tol = rtol(dtype) * 4.0 * scale_of(&case.kmat);
                let what = format!("{} w={w:?} in {label}", case.what);
                check_labels(
                    &format!("new_labels, {what}"),
                    &labels,
                    &want_labels,
                    &d,
                    case.k,
                    tol,
                )
                .unwrap();
                for (i, &l) in labels.iter().enumerate() {
                    assert!(
                        d[i * case.k + l as usize].is_finite(),
                        "{what}: point {i} chose the weightless cluster {l}"
                    );
                }
                check_close_scaled(
                    &format!("objective, {what}"),
                    &[objective],
                    &[want_objective],
                    tol * w.iter().sum::<f64>(),
                )
                .unwrap();
            }
        }
    }
}

/// The iteration from the points (K recomputed inside the contraction, never stored) agrees
/// with the definition on K by hand, for every kernel: new labels (up to near-ties), the
/// objective, and the centroid norms of the input labels (`+inf` for empty clusters).
#[test]
fn kkmeans_recompute_iteration_matches_the_definition() {
    check_recompute_iterations(false);
}

/// The same for the weighted recompute programs (the weights a column broadcast inside the
/// contraction), with integer weights (zeros included) and positive real ones.
#[test]
fn kkmeans_weighted_recompute_iteration_matches_the_definition() {
    check_recompute_iterations(true);
}

fn check_recompute_iterations(weighted: bool) {
    let all = programs();
    // (n, d, k, labels): None draws labels in 0..k.
    let specs: Vec<(usize, usize, usize, Option<Vec<u32>>)> = vec![
        (1, 1, 1, None),
        (1, 3, 3, Some(vec![1])),
        (2, 2, 1, None),
        (7, 2, 3, None),
        (9, 4, 4, Some(vec![0, 1, 3, 0, 1, 3, 3, 0, 1])),
        (33, 5, 7, None),
        (67, 3, 10, None),
    ];
    // The configurations, and the contraction (K never stored, the weights a column
    // broadcast of its epilogue) forced on, as a fit's recompute plans have it.
    let mut contexts: Vec<(Context, String)> =
        CONFIGS.iter().map(|&(t, f)| context(t, f)).collect();
    for dtype in [DType::F64, DType::F32] {
        let config = PlannerConfig {
            dtype,
            contractions: ContractionPolicy::Always,
            ..PlannerConfig::default()
        };
        contexts.push((cpu_with(config), format!("{dtype}, contractions always")));
    }
    for (ctx, label) in contexts {
        let dtype = ctx.dtype();
        for kernel in KERNELS {
            let name = kernel.recompute_program();
            let p = if weighted {
                program(&all, &format!("{name}_weighted"))
            } else {
                program(&all, &name)
            };
            for (s, (n, d, k, labels)) in specs.iter().enumerate() {
                let (n, d, k) = (*n, *d, *k);
                let mut rng = SplitMix64::new(7000 + s as u64);
                let x = random_values(&mut rng, n * d);
                let labels = labels
                    .clone()
                    .unwrap_or_else(|| random_labels(&mut rng, n, k));
                let w = if weighted {
                    case_weights(&mut rng, n, s % 2 == 0)
                } else {
                    vec![1.0; n]
                };
                let kmat = kernel.by_hand(&x, n, d);
                let dist = weighted_distances(&kmat, &labels, &w, k);
                let want_labels = argmin_rows(&dist, k);
                let want_objective = weighted_objective(&dist, &labels, &w, k);
                let want_norms: Vec<f64> = (0..k)
                    .map(|c| {
                        let members: Vec<usize> =
                            (0..n).filter(|&j| labels[j] as usize == c).collect();
                        let total: f64 = members.iter().map(|&j| w[j]).sum();
                        if total == 0.0 {
                            return f64::INFINITY;
                        }
                        let within: f64 = members
                            .iter()
                            .flat_map(|&j| members.iter().map(move |&l| (j, l)))
                            .map(|(j, l)| w[j] * w[l] * kmat[j * n + l])
                            .sum();
                        within / (total * total)
                    })
                    .collect();

                let xt = ctx.dense(n, d, &x).expect("X uploads");
                let lt = ctx.index(&labels).expect("labels upload");
                let wt = ctx.col(&w).expect("weights upload");
                let mut args = Args::new()
                    .tensor("X", &xt)
                    .tensor("labels", &lt)
                    .dim("k", k);
                if weighted {
                    args = args.tensor("w", &wt);
                }
                let args = kernel.scalars(args);
                let what = format!("{kernel:?} n={n} d={d} k={k} w={w:?} in {label}");
                let out = ctx.run(p, &args).unwrap_or_else(|e| panic!("{what}: {e}"));
                let got_labels = ctx
                    .to_u32(out.tensor("new_labels").expect("new_labels"))
                    .expect("download");
                let tol = rtol(dtype) * 4.0 * scale_of(&kmat);
                check_labels(
                    &format!("new_labels, {what}"),
                    &got_labels,
                    &want_labels,
                    &dist,
                    k,
                    tol,
                )
                .unwrap();
                let objective = out.scalar("objective").expect("objective");
                check_close_scaled(
                    &format!("objective, {what}"),
                    &[objective],
                    &[want_objective],
                    tol * w.iter().sum::<f64>(),
                )
                .unwrap();
                let norms = ctx.to_f64(out.tensor("cn").expect("cn")).expect("download");
                for (c, (got, want)) in norms.iter().zip(&want_norms).enumerate() {
                    if want.is_infinite() {
                        assert_eq!(got, want, "{what}: cluster {c} is empty");
                    } else {
                        check_close_scaled(&format!("cn[{c}], {what}"), &[*got], &[*want], tol)
                            .unwrap();
                    }
                }
            }
        }
    }
}

#[test]
fn kkmeans_iteration_breaks_exact_ties_to_the_lowest_cluster() {
    // Linear kernel of the 1-d points [-1, -1, 1, 1, 0, 0] with labels [0, 0, 1, 1, 0, 1]:
    // the centroids are -2/3 and 2/3 and the points at 0 are exactly as far from both.
    let all = programs();
    let p = program(&all, "kkmeans_iteration");
    let x = [-1.0, -1.0, 1.0, 1.0, 0.0, 0.0];
    let kmat = Kernel::Linear.by_hand(&x, 6, 1);
    let labels = vec![0, 0, 1, 1, 0, 1];
    let d = kkmeans_distances(&kmat, &labels, 2);
    assert_eq!(d[4 * 2], d[4 * 2 + 1], "the hand computation has the tie");
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        let case = KkmeansCase {
            what: "tie".into(),
            kmat: kmat.clone(),
            labels: labels.clone(),
            k: 2,
        };
        let (got, objective) = run_kkmeans(&ctx, p, &case);
        assert_eq!(
            got,
            vec![0, 0, 1, 1, 0, 0],
            "ties go to the lowest cluster in {label}"
        );
        // J = tr(K) - sum_c (1/|c|) sum_{i,j in c} K_ij = 4 - 4/3 - 4/3.
        assert_close("objective", &[objective], &[4.0 - 8.0 / 3.0], rtol(dtype));
    }
}

#[test]
fn lloyd_step_matches_centroids_and_distances_by_hand() {
    let all = programs();
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for (s, &(n, d)) in POINT_SIZES.iter().enumerate() {
            for (k, weighted) in [1usize, 2, 3, 5]
                .into_iter()
                .flat_map(|k| [(k, false), (k, true)])
            {
                let p = program(
                    &all,
                    if weighted {
                        "lloyd_step_weighted"
                    } else {
                        "lloyd_step"
                    },
                );
                let mut rng = SplitMix64::new(2000 + 10 * s as u64 + k as u64);
                let x = random_values(&mut rng, n * d);
                let labels = random_labels(&mut rng, n, k);
                // Weights in [0, 2), about one in four 0; all 1 unweighted.
                let w: Vec<f64> = (0..n)
                    .map(|_| match (weighted, rng.below(4)) {
                        (false, _) => 1.0,
                        (true, 0) => 0.0,
                        (true, _) => rng.uniform(0.0, 2.0),
                    })
                    .collect();
                // Centroids: weighted means of the members, 0 for a cluster of weight 0.
                let mut c = vec![0.0; k * d];
                for cl in 0..k {
                    let members: Vec<usize> =
                        (0..n).filter(|&i| labels[i] as usize == cl).collect();
                    let total: f64 = members.iter().map(|&i| w[i]).sum();
                    if total == 0.0 {
                        continue;
                    }
                    for &i in &members {
                        for l in 0..d {
                            c[cl * d + l] += w[i] * x[i * d + l] / total;
                        }
                    }
                }
                let mut dist = vec![0.0; n * k];
                for i in 0..n {
                    for cl in 0..k {
                        dist[i * k + cl] =
                            (0..d).map(|l| (x[i * d + l] - c[cl * d + l]).powi(2)).sum();
                    }
                }
                let want_labels = argmin_rows(&dist, k);
                let xt = ctx.dense(n, d, &x).expect("X uploads");
                let lt = ctx.index(&labels).expect("labels upload");
                let wt = ctx.col(&w).expect("weights upload");
                let mut args = Args::new()
                    .tensor("X", &xt)
                    .tensor("labels", &lt)
                    .dim("k", k);
                if weighted {
                    args = args.tensor("w", &wt);
                }
                let what = format!("n={n} d={d} k={k} weighted={weighted} in {label}");
                let out = ctx
                    .run(p, &args)
                    .unwrap_or_else(|e| panic!("lloyd_step {what} fails: {e}"));
                let got_c = ctx
                    .to_f64(out.tensor("C").expect("output C"))
                    .expect("C downloads");
                assert_close(&format!("C, {what}"), &got_c, &c, rtol(dtype));
                let got_labels = ctx
                    .to_u32(out.tensor("new_labels").expect("output new_labels"))
                    .expect("download");
                // Distances are sums of terms bounded by 4 max(||x||^2, ||c||^2) <= 4 d.
                let tol = rtol(dtype) * 4.0 * d as f64;
                check_labels(
                    &format!("new_labels, {what}"),
                    &got_labels,
                    &want_labels,
                    &dist,
                    k,
                    tol,
                )
                .unwrap();
            }
        }
    }
}

#[test]
fn pagerank_step_matches_a_sparse_loop() {
    let all = programs();
    let p = program(&all, "pagerank_step");
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for (s, n) in [1usize, 2, 3, 7, 16, 33, 100].into_iter().enumerate() {
            for density in [0.0, 0.2, 0.9] {
                let mut rng = SplitMix64::new(3000 + 10 * s as u64 + (density * 10.0) as u64);
                let mut a = random_csr(&mut rng, n, n, density);
                // Column-stochastic: positive entries scaled by their column's sum.
                let mut colsum = vec![0.0; n];
                for (v, &j) in a.values.iter_mut().zip(&a.col_idx) {
                    *v = v.abs() + 0.125;
                    colsum[j as usize] += *v;
                }
                for (v, &j) in a.values.iter_mut().zip(&a.col_idx) {
                    *v = (*v / colsum[j as usize]) as f32 as f64;
                }
                let r: Vec<f64> = (0..n).map(|_| rng.uniform(0.0, 2.0 / n as f64)).collect();
                let alpha = 0.85;
                let mut want = vec![0.0; n];
                for (i, w) in want.iter_mut().enumerate() {
                    let mut s = 0.0;
                    for q in a.row_ptr[i] as usize..a.row_ptr[i + 1] as usize {
                        s += a.values[q] * r[a.col_idx[q] as usize];
                    }
                    *w = alpha * s + (1.0 - alpha) / n as f64;
                }
                let at = ctx
                    .csr(n, n, &a.row_ptr, &a.col_idx, &a.values)
                    .expect("A uploads");
                let rt = ctx.col(&r).expect("r uploads");
                let out = ctx
                    .run(
                        p,
                        &Args::new()
                            .tensor("A", &at)
                            .tensor("r", &rt)
                            .scalar("a", alpha),
                    )
                    .unwrap_or_else(|e| panic!("pagerank_step n={n} density={density} fails: {e}"));
                let got = ctx
                    .to_f64(out.tensor("r_next").expect("output r_next"))
                    .expect("download");
                assert_close(
                    &format!("r_next n={n} density={density} in {label}"),
                    &got,
                    &want,
                    rtol(dtype),
                );
            }
        }
    }
}

/// A CPU context under a memory limit refuses a plan that needs more before allocating
/// anything, names the bytes, and runs the next, smaller plan.
#[test]
fn a_memory_limit_refuses_large_plans_and_keeps_the_context_usable() {
    let ctx = Context::cpu_with_memory_limit(8 << 20);
    let p = Program::parse("fn outer(a: Col[n], b: Col[m]) -> (M: Dense[n, m]) { M = a * b^T; }")
        .expect("parses");
    let run = |n: usize| {
        let a = ctx.dense_f32(n, 1, &vec![1.0; n]).expect("a fits");
        let b = ctx.dense_f32(n, 1, &vec![2.0; n]).expect("b fits");
        ctx.run(&p, &Args::new().tensor("a", &a).tensor("b", &b))
    };
    // 3000 x 3000 floats: 34 MiB over an 8 MiB limit, of which the inputs hold 23 KiB.
    let err = run(3000).expect_err("over the limit");
    let text = err.to_string();
    assert!(text.contains("not enough host memory"), "{text}");
    assert!(text.contains("34 MiB are needed"), "{text}");
    assert!(text.contains("7 MiB of 8 MiB are available"), "{text}");
    let out = run(100).expect("100 x 100 fits");
    let m = ctx.to_f64(out.tensor("M").expect("M")).expect("download");
    assert_eq!(m.len(), 100 * 100);
    assert!(m.iter().all(|&v| v == 2.0));
}

/// The plan cache keys on the CSR inputs' entry counts: the same program at the same sizes
/// gets the sparse product its density calls for (spgemm for a nearly empty matrix, densify +
/// syrk for a full one), whichever ran first, and `Context::plan` (no counts) poisons neither.
/// Both runs give the Gram matrix of loops.
#[test]
fn plans_follow_the_density_of_csr_inputs_at_one_shape() {
    let p = Program::parse("fn gram(X: Csr[n, d]) -> (K: Dense[n, n]) { K = X * X^T; }")
        .expect("parses");
    let (n, d) = (2000, 20);
    let ctx = cpu_with(PlannerConfig {
        dtype: DType::F64,
        ..PlannerConfig::default()
    });
    let step_names = |plan: &popcorn_dsl::Plan| -> Vec<String> {
        plan.steps.iter().map(|s| s.op_name()).collect()
    };
    // Dense-shaped plan first (no entry counts), under the same program and sizes.
    let dims: BTreeMap<String, usize> = [("n".to_string(), n), ("d".to_string(), d)].into();
    let blind = ctx.plan(&p, &dims).expect("plan");
    assert!(
        !step_names(&blind).contains(&"spgemm".to_string()),
        "{blind}"
    );
    // A full matrix and one with an entry in every 100th row.
    let full: Vec<(usize, usize, f64)> = (0..n)
        .flat_map(|i| (0..d).map(move |j| (i, j, ((i * 7 + j * 3) % 11) as f64 - 5.0)))
        .collect();
    let sparse: Vec<(usize, usize, f64)> = (0..n)
        .filter(|i| i % 100 == 0)
        .map(|i| (i, i % d, 1.0 + (i / 100) as f64))
        .collect();
    let mut seen = Vec::new();
    for (entries, want) in [(&sparse, "spgemm"), (&full, "syrk"), (&sparse, "spgemm")] {
        let mut row_ptr = vec![0i32; n + 1];
        for &(i, _, _) in entries.iter() {
            row_ptr[i + 1] += 1;
        }
        for i in 0..n {
            row_ptr[i + 1] += row_ptr[i];
        }
        let col_idx: Vec<i32> = entries.iter().map(|e| e.1 as i32).collect();
        let values: Vec<f64> = entries.iter().map(|e| e.2).collect();
        let x = ctx.csr(n, d, &row_ptr, &col_idx, &values).expect("csr");
        let args = Args::new().tensor("X", &x);
        let plan = ctx.plan_for(&p, &args).expect("plan");
        let names = step_names(&plan);
        assert!(
            names.contains(&want.to_string()),
            "nnz {}: {names:?}\n{plan}",
            values.len()
        );
        seen.push(names);
        let got = ctx
            .to_f64(ctx.run(&p, &args).expect("runs").tensor("K").expect("K"))
            .expect("download");
        let mut dense = vec![0.0; n * d];
        for &(i, j, v) in entries.iter() {
            dense[i * d + j] = v;
        }
        for (i, j) in [(0, 0), (0, 100), (100, 100), (1999, 1900), (7, 1234)] {
            let want: f64 = (0..d).map(|c| dense[i * d + c] * dense[j * d + c]).sum();
            assert_eq!(got[i * n + j], want, "K[{i}, {j}] at nnz {}", values.len());
        }
    }
    assert_ne!(seen[0], seen[1]);
    assert_eq!(seen[0], seen[2]);
}

/// `poly_features` (`monomials`): every feature the product of its coefficient and two columns
/// of `[X, 1]`, exactly (each value one or two roundings of the same products by hand), for
/// sizes of 1, odd sizes and more features than the kernels' (columns picked twice, the ones
/// column, a zero coefficient).
#[test]
fn monomials_are_products_of_two_columns_of_x_and_ones() {
    let all = programs();
    let p = program(&all, "poly_features");
    for (dtype, fusion) in CONFIGS {
        let (ctx, label) = context(dtype, fusion);
        for (s, &(n, d)) in POINT_SIZES.iter().enumerate() {
            let mut rng = SplitMix64::new(700 + s as u64);
            let x = random_values(&mut rng, n * d);
            // Every pair of [X, 1]'s columns, then a few again with other coefficients.
            let mut a = Vec::new();
            let mut b = Vec::new();
            for i in 0..=d {
                for j in i..=d {
                    a.push(i as u32);
                    b.push(j as u32);
                }
            }
            a.extend([d as u32, 0, 0]);
            b.extend([0, d as u32, 0]);
            let f = a.len();
            let c: Vec<f64> = (0..f)
                .map(|j| if j == 1 { 0.0 } else { 0.5 + j as f64 * 0.25 })
                .collect();
            let xt = ctx.dense(n, d, &x).unwrap();
            let (at, bt, ct) = (
                ctx.index(&a).unwrap(),
                ctx.index(&b).unwrap(),
                ctx.col(&c).unwrap(),
            );
            let args = Args::new()
                .tensor("X", &xt)
                .tensor("a", &at)
                .tensor("b", &bt)
                .tensor("c", &ct);
            let out = ctx.run(p, &args).unwrap_or_else(|e| panic!("{label}: {e}"));
            let got = ctx.to_f64(out.tensor("Phi").unwrap()).unwrap();
            let xe = |i: usize, col: u32| {
                if (col as usize) < d {
                    x[i * d + col as usize]
                } else {
                    1.0
                }
            };
            let want: Vec<f64> = (0..n)
                .flat_map(|i| (0..f).map(move |j| (i, j)))
                .map(|(i, j)| c[j] * xe(i, a[j]) * xe(i, b[j]))
                .collect();
            assert_close(
                &format!("monomials {n} x {d} in {label}"),
                &got,
                &want,
                rtol(dtype),
            );
        }
    }
    // A column past [X, 1] is an error naming it, on the CPU.
    let (ctx, _) = context(DType::F64, true);
    let x = ctx.dense(2, 2, &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let (a, b, c) = (
        ctx.index(&[3]).unwrap(),
        ctx.index(&[0]).unwrap(),
        ctx.col(&[1.0]).unwrap(),
    );
    let args = Args::new()
        .tensor("X", &x)
        .tensor("a", &a)
        .tensor("b", &b)
        .tensor("c", &c);
    let err = ctx.run(p, &args).unwrap_err().to_string();
    assert!(err.contains("column 3 of a matrix of 2 columns"), "{err}");
}

/// `monomials` is typed: four operands, index vectors and coefficients of one length.
#[test]
fn monomials_are_type_checked() {
    let bad = [
        ("fn f(X: Dense[n, d], a: Index[f], b: Index[f]) -> (Y: Dense[n, f]) { Y = monomials(X, a, b); }", "takes 4"),
        ("fn f(X: Dense[n, d], a: Index[f], b: Index[g], c: Col[f]) -> (Y: Dense[n, f]) { Y = monomials(X, a, b, c); }", "one length"),
        ("fn f(X: Dense[n, d], a: Col[f], b: Index[f], c: Col[f]) -> (Y: Dense[n, f]) { Y = monomials(X, a, b, c); }", "index vector"),
    ];
    for (src, want) in bad {
        let err = Program::parse(src).unwrap_err().to_string();
        assert!(err.contains(want), "{src}: {err}");
    }
}
