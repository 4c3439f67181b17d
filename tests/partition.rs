//! Plans partitioned along the points over in-process CPU ranks: every output equals the
//! unpartitioned plan's bit for bit (labels, values and scalars), for P = 1, 2, 3, uneven
//! blocks, fewer points than ranks and clusters empty on a rank (and the kernel matrices, each
//! rank its rows of K); the printout shows the
//! collectives with their bytes; programs that cannot be split fail to plan, naming the step.

use popcorn::dsl::plan::collective::{CollectiveKind, PartitionSpec, StepMode};
use popcorn::dsl::{DType, PlannerConfig, Program, Target};
use popcorn::{Args, Context, DeviceSpec, Outputs, Tensor};
use std::collections::BTreeMap;

mod common;

const KKM: &str = include_str!("../examples/programs/kernel_kmeans.pop");
const LLOYD: &str = include_str!("../examples/programs/lloyd_kmeans.pop");
const SMOOTHING: &str = include_str!("../examples/programs/kernel_smoothing.pop");

fn program(source: &str, name: &str) -> Program {
    Program::parse_all(source)
        .expect("the example programs parse")
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no program `{name}`"))
}

/// Reproducible values in [-1, 1).
fn values(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// The Gaussian kernel matrix of `n` points in `d` dimensions.
fn gaussian_kernel(x: &[f64], n: usize, d: usize) -> Vec<f64> {
    let mut k = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let dist: f64 = (0..d).map(|c| (x[i * d + c] - x[j * d + c]).powi(2)).sum();
            k[i * n + j] = (-0.5 * dist).exp();
        }
    }
    k
}

/// A context on the CPU in `dtype`, partitioned over `ranks` (or not).
fn context(dtype: DType, ranks: Option<usize>) -> Context {
    let config = PlannerConfig {
        partition: ranks.map(PartitionSpec::points),
        ..PlannerConfig::default().with_dtype(dtype)
    };
    Context::new(DeviceSpec::Cpu)
        .expect("a CPU context")
        .with_config(config)
}

/// Every output of a run: tensors as bits (f64 values, or indices), scalars as bits.
fn results(ctx: &Context, out: &Outputs, names: &[&str]) -> BTreeMap<String, Vec<u64>> {
    names
        .iter()
        .map(|name| {
            let bits = match out.scalar(name) {
                Ok(x) => vec![x.to_bits()],
                Err(_) => {
                    let t = out.tensor(name).expect("the output");
                    match ctx.to_u32(t) {
                        Ok(ix) => ix.into_iter().map(u64::from).collect(),
                        Err(_) => ctx
                            .to_f64(t)
                            .expect("values")
                            .into_iter()
                            .map(f64::to_bits)
                            .collect(),
                    }
                }
            };
            (name.to_string(), bits)
        })
        .collect()
}

/// The inputs of one case, made in `ctx`.
type Inputs = Vec<(&'static str, Tensor)>;

/// Runs `program` unpartitioned and over P = 1, 2, 3 ranks with the inputs `make` gives, and
/// checks that every output is the same bit for bit; `dims` names the sizes not implied by the
/// tensors. Returns the unpartitioned outputs.
fn same_on_every_rank_count(
    p: &Program,
    dtype: DType,
    make: &dyn Fn(&Context) -> Inputs,
    scalars: &[(&'static str, f64)],
    dims: &[(&'static str, usize)],
    outputs: &[&str],
) -> BTreeMap<String, Vec<u64>> {
    let run = |ranks: Option<usize>| {
        let ctx = context(dtype, ranks);
        let inputs = make(&ctx);
        let mut args = Args::new();
        for (name, t) in &inputs {
            args = args.tensor(name, t);
        }
        for (name, v) in scalars {
            args = args.scalar(name, *v);
        }
        for (name, v) in dims {
            args = args.dim(name, *v);
        }
        let out = ctx
            .run(p, &args)
            .unwrap_or_else(|e| panic!("`{}` over {ranks:?} ranks: {e}", p.name));
        results(&ctx, &out, outputs)
    };
    let whole = run(None);
    for ranks in [1, 2, 3] {
        assert_eq!(
            run(Some(ranks)),
            whole,
            "`{}` over {ranks} rank(s) differs from the unpartitioned plan",
            p.name
        );
    }
    whole
}

/// Labels of `n` points in `k` clusters: cluster `k - 1` empty everywhere, cluster 0 only in
/// the first rows (so empty on the last ranks), the rest cycling.
fn labels(n: usize, k: usize) -> Vec<u32> {
    (0..n)
        .map(|i| {
            if i < n.div_ceil(3) {
                0
            } else {
                1 + (i % (k - 2).max(1)) as u32
            }
        })
        .collect()
}

/// Shapes `(n, k)`: blocks of 4, 3, 3 rows over 3 ranks; fewer points than ranks; blocks of
/// 3, 2, 2 with a cluster on one rank only.
const SHAPES: &[(usize, usize)] = &[(10, 3), (2, 3), (7, 4), (33, 5), (301, 4), (700, 9)];

#[test]
fn kernel_kmeans_iterations_equal_the_unpartitioned_plan() {
    let p = program(KKM, "kkmeans_iteration");
    for &(n, k) in SHAPES {
        let x = values(n * 2, n as u64);
        let kernel = gaussian_kernel(&x, n, 2);
        let l = labels(n, k);
        let make = |ctx: &Context| -> Inputs {
            vec![
                ("K", ctx.dense(n, n, &kernel).unwrap()),
                ("labels", ctx.index(&l).unwrap()),
            ]
        };
        let out = same_on_every_rank_count(
            &p,
            DType::F64,
            &make,
            &[],
            &[("k", k)],
            &["new_labels", "objective", "changed"],
        );
        assert_eq!(out["new_labels"].len(), n);
        let objective = f64::from_bits(out["objective"][0]);
        assert!(objective.is_finite(), "n={n} k={k}: {objective}");
    }
}

#[test]
fn centroid_norms_and_f32_runs_equal_the_unpartitioned_plan() {
    let p = program(KKM, "kkmeans_centroid_norms");
    let (n, k) = (7, 4);
    let kernel = gaussian_kernel(&values(n * 3, 5), n, 3);
    let l = labels(n, k);
    let make = |ctx: &Context| -> Inputs {
        vec![
            ("K", ctx.dense(n, n, &kernel).unwrap()),
            ("labels", ctx.index(&l).unwrap()),
        ]
    };
    let out = same_on_every_rank_count(&p, DType::F64, &make, &[], &[("k", k)], &["cn"]);
    // The empty cluster's norm is +inf.
    assert_eq!(f64::from_bits(out["cn"][k - 1]), f64::INFINITY);
    let p = program(KKM, "kkmeans_iteration");
    same_on_every_rank_count(
        &p,
        DType::F32,
        &make,
        &[],
        &[("k", k)],
        &["new_labels", "objective", "changed"],
    );
}

/// The weighted stored iteration and its centroid norms: the sparse product `K * V^T` (each
/// rank its rows of K against the whole weighted selection), k = 1 among the shapes.
#[test]
fn weighted_kernel_kmeans_iterations_equal_the_unpartitioned_plan() {
    let iteration = program(KKM, "kkmeans_iteration_weighted");
    let norms = program(KKM, "kkmeans_centroid_norms_weighted");
    for &(n, k) in SHAPES.iter().chain(&[(9, 1)]) {
        let x = values(n * 2, 11 + n as u64);
        let kernel = gaussian_kernel(&x, n, 2);
        let w: Vec<f64> = values(n, 5 + n as u64)
            .iter()
            .map(|v| v.abs() + 0.1)
            .collect();
        let l = if k == 1 { vec![0; n] } else { labels(n, k) };
        let make = |ctx: &Context| -> Inputs {
            vec![
                ("K", ctx.dense(n, n, &kernel).unwrap()),
                ("labels", ctx.index(&l).unwrap()),
                ("w", ctx.col(&w).unwrap()),
            ]
        };
        let out = same_on_every_rank_count(
            &iteration,
            DType::F64,
            &make,
            &[],
            &[("k", k)],
            &["new_labels", "objective", "changed"],
        );
        assert!(
            f64::from_bits(out["objective"][0]).is_finite(),
            "n={n} k={k}"
        );
        same_on_every_rank_count(&norms, DType::F64, &make, &[], &[("k", k)], &["cn"]);
    }
}

#[test]
fn lloyd_steps_equal_the_unpartitioned_plan() {
    for name in ["lloyd_step", "lloyd_step_weighted"] {
        let p = program(LLOYD, name);
        for &(n, k) in SHAPES {
            let d = 3;
            let x = values(n * d, 7 + n as u64);
            let w: Vec<f64> = values(n, 3).iter().map(|v| v.abs() + 0.1).collect();
            let l = labels(n, k);
            let make = |ctx: &Context| -> Inputs {
                let mut inputs = vec![
                    ("X", ctx.dense(n, d, &x).unwrap()),
                    ("labels", ctx.index(&l).unwrap()),
                ];
                if name.ends_with("weighted") {
                    inputs.push(("w", ctx.col(&w).unwrap()));
                }
                inputs
            };
            same_on_every_rank_count(
                &p,
                DType::F64,
                &make,
                &[],
                &[("k", k)],
                &["C", "new_labels"],
            );
        }
    }
}

#[test]
fn recomputed_linear_kernel_kmeans_equals_the_unpartitioned_plan() {
    // Where the planner chains the products (X (X^T V^T): label sums of the points, then a
    // contraction over the rows); at n = 2 it keeps K's tiles.
    let p = program(KKM, "kkmeans_recompute_linear");
    for &(n, k) in SHAPES {
        let x = values(n * 2, 11 + n as u64);
        let l = labels(n, k);
        let make = |ctx: &Context| -> Inputs {
            vec![
                ("X", ctx.dense(n, 2, &x).unwrap()),
                ("labels", ctx.index(&l).unwrap()),
            ]
        };
        same_on_every_rank_count(
            &p,
            DType::F64,
            &make,
            &[],
            &[("k", k)],
            &["new_labels", "objective", "changed", "cn"],
        );
    }
}

#[test]
fn recomputed_kernel_kmeans_of_every_kernel_equals_the_unpartitioned_plan() {
    // The kernel's tiles recomputed inside the contraction that sums them by cluster: the points
    // sorted by cluster on every rank, the contraction shared (each CPU rank its block of whole
    // rows, zeros elsewhere) and its partial sums all-reduced, which adds only zeros.
    for (name, scalars) in [
        (
            "kkmeans_recompute_polynomial",
            &[("gamma", 0.5), ("coef0", 1.0), ("degree", 2.0)][..],
        ),
        ("kkmeans_recompute_gaussian", &[("gamma", 0.7)][..]),
        (
            "kkmeans_recompute_sigmoid",
            &[("gamma", 0.3), ("coef0", 0.1)][..],
        ),
    ] {
        let p = program(KKM, name);
        for &(n, k) in SHAPES {
            let x = values(n * 3, 17 + n as u64);
            let l = labels(n, k);
            let make = |ctx: &Context| -> Inputs {
                vec![
                    ("X", ctx.dense(n, 3, &x).unwrap()),
                    ("labels", ctx.index(&l).unwrap()),
                ]
            };
            same_on_every_rank_count(
                &p,
                DType::F64,
                &make,
                scalars,
                &[("k", k)],
                &["new_labels", "objective", "changed", "cn"],
            );
        }
    }
}

#[test]
fn predictions_equal_the_unpartitioned_plan() {
    // New points against the training points `X` (n of them, split over the ranks).
    let p = program(KKM, "kkmeans_predict_polynomial");
    for &(n, k) in SHAPES {
        let m = 5;
        let x = values(n * 3, 23 + n as u64);
        let y = values(m * 3, 29 + n as u64);
        let l = labels(n, k);
        let cn: Vec<f64> = (0..k).map(|c| 1.0 + c as f64).collect();
        let make = |ctx: &Context| -> Inputs {
            vec![
                ("X", ctx.dense(n, 3, &x).unwrap()),
                ("Y", ctx.dense(m, 3, &y).unwrap()),
                ("labels", ctx.index(&l).unwrap()),
                ("cn", ctx.col(&cn).unwrap()),
            ]
        };
        same_on_every_rank_count(
            &p,
            DType::F64,
            &make,
            &[("gamma", 0.5), ("coef0", 1.0), ("degree", 2.0)],
            &[("k", k)],
            &["predicted"],
        );
    }
}

#[test]
fn kernel_matrices_equal_the_unpartitioned_plan() {
    // Each rank its rows of K = f(X X^T), X replicated: blocks of 4, 3, 3 rows; fewer points
    // than ranks; n = 300 spans two of the CPU SYRK's panels of 256 rows (and d = 17, 33 takes
    // the GEMM paths whose summation order depends on the shape).
    let scalars: &[(&str, f64)] = &[("gamma", 0.35), ("coef0", 0.5), ("degree", 3.0)];
    for name in [
        "kernel_linear",
        "kernel_polynomial",
        "kernel_gaussian",
        "kernel_sigmoid",
    ] {
        let p = program(KKM, name);
        let used: Vec<(&'static str, f64)> = scalars
            .iter()
            .filter(|(s, _)| p.params.iter().any(|q| q.name == *s))
            .copied()
            .collect();
        for (n, d) in [(10, 2), (2, 3), (7, 5), (33, 3), (40, 17), (300, 33)] {
            let x = values(n * d, 41 + n as u64);
            let make = |ctx: &Context| -> Inputs { vec![("X", ctx.dense(n, d, &x).unwrap())] };
            for dtype in [DType::F64, DType::F32] {
                let out = same_on_every_rank_count(&p, dtype, &make, &used, &[], &["K"]);
                let k: Vec<f64> = out["K"].iter().map(|b| f64::from_bits(*b)).collect();
                assert_eq!(k.len(), n * n, "{name} n={n}");
                assert!(k.iter().all(|v| v.is_finite()), "{name} n={n} {dtype:?}");
                // K is the symmetric matrix of the whole SYRK, on every rank count.
                for i in 0..n {
                    for j in 0..i {
                        assert_eq!(k[i * n + j].to_bits(), k[j * n + i].to_bits(), "{name}");
                    }
                }
            }
        }
    }
}

/// Kernel matrices and cross kernels of sparse points: each rank its block of rows of the CSR
/// points (offsets rebased), the right operand of `X X^T` whole; dense enough to be densified
/// and sparse enough to stay sparse (the sparse-sparse and sparse-dense products), blocks
/// with empty rows and ranks without points.
#[test]
fn sparse_kernel_matrices_equal_the_unpartitioned_plan() {
    let scalars: &[(&str, f64)] = &[("gamma", 0.35), ("coef0", 0.5), ("degree", 3.0)];
    for kernel in ["linear", "polynomial", "gaussian", "sigmoid"] {
        for name in [
            format!("kernel_{kernel}_sparse"),
            format!("cross_{kernel}_sparse"),
        ] {
            let p = program(KKM, &name);
            let used: Vec<(&'static str, f64)> = scalars
                .iter()
                .filter(|(s, _)| p.params.iter().any(|q| q.name == *s))
                .copied()
                .collect();
            let outputs: &[&str] = if name.starts_with("cross") {
                &["Kc", "s"]
            } else {
                &["K"]
            };
            for (n, d, density) in [(10, 6, 1.0), (2, 3, 0.5), (33, 40, 0.05), (40, 300, 0.02)] {
                let mut rng = common::SplitMix64::new(61 + n as u64);
                let x = common::random_csr(&mut rng, n, d, density);
                let y = common::random_csr(&mut rng, 5, d, density);
                let csr = |ctx: &Context, m: &common::CsrData| {
                    ctx.csr(m.rows, m.cols, &m.row_ptr, &m.col_idx, &m.values)
                        .unwrap()
                };
                let make = |ctx: &Context| -> Inputs {
                    let mut inputs = vec![("X", csr(ctx, &x))];
                    if name.starts_with("cross") {
                        inputs.push(("Y", csr(ctx, &y)));
                    }
                    inputs
                };
                for dtype in [DType::F64, DType::F32] {
                    let out = same_on_every_rank_count(&p, dtype, &make, &used, &[], outputs);
                    let first = &out[outputs[0]];
                    assert!(
                        first.iter().all(|b| f64::from_bits(*b).is_finite()),
                        "{name} n={n} density {density} {dtype:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn kernel_smoothing_equals_the_unpartitioned_plan() {
    let p = program(SMOOTHING, "kernel_smoothing");
    for &(n, m) in &[(10, 4), (2, 5), (7, 7)] {
        let d = 2;
        let x = values(n * d, 21 + n as u64);
        let y_points = values(m * d, 22);
        let y = values(m, 23);
        let make = |ctx: &Context| -> Inputs {
            vec![
                ("X", ctx.dense(n, d, &x).unwrap()),
                ("Y", ctx.dense(m, d, &y_points).unwrap()),
                ("y", ctx.col(&y).unwrap()),
            ]
        };
        same_on_every_rank_count(&p, DType::F64, &make, &[("gamma", 0.7)], &[], &["s"]);
    }
}

#[test]
fn counts_of_computed_labels_are_all_reduced() {
    let p = Program::parse(
        "fn nearest(D: Dense[n, k]) -> (l: Index[n], c: Col[k], t: Scalar) {
             l = argmin_rows(D);
             c = counts(l, k);
             t = sum(rownorms(D));
         }",
    )
    .unwrap();
    for &(n, k) in &[(10usize, 3usize), (2, 4), (7, 4)] {
        let dist = values(n * k, 31 + n as u64);
        let make = |ctx: &Context| -> Inputs { vec![("D", ctx.dense(n, k, &dist).unwrap())] };
        let out = same_on_every_rank_count(&p, DType::F64, &make, &[], &[], &["l", "c", "t"]);
        let total: f64 = out["c"].iter().map(|b| f64::from_bits(*b)).sum();
        assert_eq!(total, n as f64);
    }
    let plan = planned(&p, &[("n", 10), ("k", 3)], 3).expect("it partitions");
    let part = plan.partition.as_ref().unwrap();
    let kinds: Vec<CollectiveKind> = part.collectives().map(|c| c.kind).collect();
    // The counts of the rank's labels summed over the ranks; the real sum over gathered terms.
    assert_eq!(
        kinds,
        vec![CollectiveKind::AllReduceSum, CollectiveKind::AllGather]
    );
}

fn planned(
    p: &Program,
    dims: &[(&str, usize)],
    ranks: usize,
) -> Result<popcorn::Plan, popcorn::dsl::PlanError> {
    let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let config = PlannerConfig {
        partition: Some(PartitionSpec::points(ranks)),
        ..PlannerConfig::default().with_dtype(DType::F64)
    };
    popcorn::dsl::plan(p, &dims, &config, &Target::cpu(2), &BTreeMap::new())
}

#[test]
fn the_printout_shows_ranks_and_collectives_with_their_bytes() {
    let p = program(KKM, "kkmeans_iteration");
    let plan = planned(&p, &[("n", 10), ("k", 3)], 3).unwrap();
    let text = plan.to_string();
    for line in [
        "partitioned along `n` over 3 rank(s), rows 0: [0, 4) 1: [4, 7) 2: [7, 10)",
        "each rank its rows of: K, %16, %25, %17, z, new_labels, %21",
        "all-gather        z (Col[10] f64): 80 B",
        "all-gather        %21 (Col[10] f64): 80 B",
        "all-reduce(sum)   changed (Dense[1, 1] f64): 8 B",
        "collectives: 3 per run, 168 B to each rank",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    let part = plan.partition.as_ref().unwrap();
    assert_eq!(part.collective_bytes(DType::F64), 168);
    // The steps over K's rows run locally.
    let local: Vec<String> = part
        .schedule
        .iter()
        .filter_map(|s| match s {
            popcorn::dsl::plan::collective::RankStep::Run {
                step,
                mode: StepMode::Local,
                ..
            } => Some(plan.steps[*step].op_name()),
            _ => None,
        })
        .collect();
    assert!(local.contains(&"diag".to_string()) && local.contains(&"cluster sums".to_string()));
    // Unpartitioned plans print as before.
    let plain = popcorn::dsl::plan(
        &p,
        &plan.dims,
        &PlannerConfig::default().with_dtype(DType::F64),
        &Target::cpu(2),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(plain.partition.is_none());
    assert!(!plain.to_string().contains("partitioned"));
    // The same steps, but for the objective and the changed labels: one kernel unpartitioned,
    // two partitioned (the count of changed labels is then added over the ranks, 8 bytes,
    // instead of gathering the new labels to every rank).
    let names = |p: &popcorn::Plan| p.steps.iter().map(|s| s.op_name()).collect::<Vec<_>>();
    let mut apart = names(&plan);
    assert_eq!(apart.pop().as_deref(), Some("fused cols"), "{text}");
    assert_eq!(names(&plain), apart, "{plain}\n{text}");
}

#[test]
fn the_kernel_matrix_printout_shows_the_local_syrk() {
    let p = program(KKM, "kernel_gaussian");
    let plan = planned(&p, &[("n", 10), ("d", 2)], 3).expect("the kernel matrix partitions");
    let text = plan.to_string();
    for line in [
        "partitioned along `n` over 3 rank(s), rows 0: [0, 4) 1: [4, 7) 2: [7, 10)",
        "each rank its rows of: B, b, K",
        "replicated: X",
        "step 0   syrk          local rows",
        "step 1   diag          local rows",
        "all-gather        b (Col[10] f64): 80 B",
        "step 2   fused map     local rows",
        "collectives: 1 per run, 80 B to each rank",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    // The plan's steps are the unpartitioned plan's; a rank's SYRK is its block of rows.
    let plain = popcorn::dsl::plan(
        &p,
        &plan.dims,
        &PlannerConfig::default().with_dtype(DType::F64),
        &Target::cpu(2),
        &BTreeMap::new(),
    )
    .unwrap();
    assert!(text.starts_with(&plain.to_string()));
    let part = plan.partition.as_ref().unwrap();
    let local = part.local_step(&plan, 0, 1).unwrap();
    assert!(matches!(
        local.op,
        popcorn::dsl::plan::StepOp::Syrk {
            row_block: Some((4, 7)),
            ..
        }
    ));
    // Once a block of rows, a SYRK is not split again.
    let mut blocked = plain.clone();
    blocked.steps[0] = local;
    let err = popcorn::dsl::passes::partition::partition(&blocked, &PartitionSpec::points(2))
        .unwrap_err()
        .to_string();
    assert!(err.contains("already a block of rows"), "{err}");
    // The linear kernel needs no collective at all.
    let p = program(KKM, "kernel_linear");
    let plan = planned(&p, &[("n", 10), ("d", 2)], 2).unwrap();
    assert_eq!(plan.partition.as_ref().unwrap().collectives().count(), 0);
}

#[test]
fn programs_that_cannot_be_split_fail_to_plan_naming_the_step() {
    // A map over the points reading a matrix transposed along them: its rows are other
    // ranks' columns.
    let p = Program::parse("fn t(A: Dense[m, n]) -> (B: Dense[n, m]) { B = 2 * A^T; }").unwrap();
    let err = planned(&p, &[("m", 3), ("n", 10)], 2)
        .expect_err("transposed")
        .to_string();
    assert!(
        err.contains("`t`") && err.contains("transposed along the points"),
        "{err}"
    );
    let p = Program::parse("fn f(x: Col[m]) -> (y: Col[m]) { y = 2 * x; }").unwrap();
    let err = planned(&p, &[("m", 4)], 2).unwrap_err().to_string();
    assert!(err.contains("no dimension `n`"), "{err}");
}

/// A rank whose work fails stops the run at once with an error naming the step, the rank and
/// the cause: a label past `k` in the last rank's rows (the labels are read whole, so the
/// first rank to run the step reports it).
#[test]
fn a_failing_rank_stops_the_run_naming_itself_and_the_cause() {
    let p = program(KKM, "kkmeans_iteration");
    let (n, k) = (9, 3);
    let kernel = gaussian_kernel(&values(n * 2, 3), n, 2);
    let mut l = labels(n, k);
    l[n - 1] = 7;
    let ctx = context(DType::F64, Some(3));
    let (kt, lt) = (ctx.dense(n, n, &kernel).unwrap(), ctx.index(&l).unwrap());
    let args = Args::new()
        .tensor("K", &kt)
        .tensor("labels", &lt)
        .dim("k", k);
    let err = ctx.run(&p, &args).expect_err("a label past k").to_string();
    assert!(
        err.contains("counts on rank 0") && err.contains("label 7 at position 8"),
        "{err}"
    );
}

/// A kernel matrix built and read by ranks on CPU backends of their own stays in rows: each
/// rank may hold less memory than K alone, and the kernel matrix and five iterations (labels
/// fed back, K passed from run to run as the ranks hold it) give the unpartitioned run's bits
/// on two and three ranks, where one rank under the same limit is refused for memory.
#[test]
fn a_kernel_matrix_held_in_rows_is_never_whole_on_any_rank() {
    let build = program(KKM, "kernel_gaussian");
    let iteration = program(KKM, "kkmeans_iteration");
    let (n, d, k) = (1100, 3, 5);
    let x = values(n * d, 77);
    let limit = 7 << 20; // K in f64: 9.7 MB
    let run = |ctx: &Context| -> Result<(Vec<u32>, Vec<u64>), popcorn::RuntimeError> {
        let xt = ctx.dense(n, d, &x)?;
        let kmat = ctx
            .run(&build, &Args::new().tensor("X", &xt).scalar("gamma", 0.5))?
            .take("K")?;
        let mut labels = ctx.index(&labels(n, k))?;
        let mut objectives = Vec::new();
        for _ in 0..5 {
            let args = Args::new()
                .tensor("K", &kmat)
                .tensor("labels", &labels)
                .dim("k", k);
            let mut out = ctx.run(&iteration, &args)?;
            objectives.push(out.scalar("objective")?.to_bits());
            labels = out.take("new_labels")?;
        }
        Ok((ctx.to_u32(&labels)?, objectives))
    };
    let whole = run(&context(DType::F64, None)).expect("no limit");
    let refused = run(&Context::cpu_ranks(1, Some(limit)).with_dtype(DType::F64));
    let err = refused
        .expect_err("K alone is over one rank's limit")
        .to_string();
    assert!(err.contains("host memory"), "{err}");
    for ranks in [2, 3] {
        let ctx = Context::cpu_ranks(ranks, Some(limit)).with_dtype(DType::F64);
        let got = run(&ctx).unwrap_or_else(|e| panic!("{ranks} ranks: {e}"));
        assert_eq!(got, whole, "{ranks} ranks");
    }
}

/// On ranks with backends of their own, a tensor's copies on the other ranks are kept from run
/// to run and forgotten when the tensor is written: a second run after `write_f64` and `fill`
/// sees the new values (a stale copy would give the first run's kernel matrix).
#[test]
fn tensors_written_between_runs_reach_every_rank() {
    let p = program(KKM, "kernel_linear");
    let (n, d) = (9, 2);
    let ctx = Context::cpu_ranks(3, None).with_dtype(DType::F64);
    let whole = context(DType::F64, None);
    let first = values(n * d, 5);
    let second = values(n * d, 6);
    let x = ctx.dense(n, d, &first).unwrap();
    let kernel = |ctx: &Context, x: &Tensor| {
        let out = ctx.run(&p, &Args::new().tensor("X", x)).unwrap();
        ctx.to_f64(out.tensor("K").unwrap()).unwrap()
    };
    let want = |v: &[f64]| kernel(&whole, &whole.dense(n, d, v).unwrap());
    assert_eq!(kernel(&ctx, &x), want(&first));
    assert_eq!(kernel(&ctx, &x), want(&first), "the kept copies");
    ctx.write_f64(&x, &second).unwrap();
    assert_eq!(kernel(&ctx, &x), want(&second), "after write_f64");
    ctx.fill(&x, 0.5).unwrap();
    assert_eq!(kernel(&ctx, &x), want(&[0.5; 18]), "after fill");
}

/// A matrix read block by block (`Context::dense_rows`): on ranks each rank reads only its
/// block of rows (the plan's blocks), and a Kernel K-means iteration on it gives the
/// unpartitioned run's bits; without ranks the whole matrix is read at once.
#[test]
fn a_matrix_read_by_rows_is_read_once_per_rank_block() {
    let p = program(KKM, "kkmeans_iteration");
    let (n, k) = (10, 3);
    let kernel = gaussian_kernel(&values(n * 2, 9), n, 2);
    let l = labels(n, k);
    let run = |ctx: &Context| -> (Vec<std::ops::Range<usize>>, BTreeMap<String, Vec<u64>>) {
        let mut asked = Vec::new();
        let kt = ctx
            .dense_rows(n, n, &mut |rows| {
                asked.push(rows.clone());
                Ok(kernel[rows.start * n..rows.end * n].to_vec())
            })
            .unwrap();
        let lt = ctx.index(&l).unwrap();
        let args = Args::new()
            .tensor("K", &kt)
            .tensor("labels", &lt)
            .dim("k", k);
        let out = ctx.run(&p, &args).unwrap();
        (
            asked,
            results(ctx, &out, &["new_labels", "objective", "changed"]),
        )
    };
    let (asked, whole) = run(&context(DType::F64, None));
    assert_eq!(asked, vec![0..n]);
    for ranks in [2, 3] {
        let (asked, got) = run(&Context::cpu_ranks(ranks, None).with_dtype(DType::F64));
        let blocks: Vec<_> = (0..ranks)
            .map(|r| PartitionSpec::points(ranks).rows(n, r))
            .collect();
        assert_eq!(asked, blocks, "{ranks} ranks");
        assert_eq!(got, whole, "{ranks} ranks");
    }
}

/// `fit_precomputed_rows` on a context without ranks reads the whole matrix once and gives
/// `fit_precomputed`'s fit; a non-finite entry is named by its row and column of the whole
/// matrix, a reader's error comes through as it is, and 16-bit storage is refused.
#[test]
fn a_precomputed_fit_read_by_rows_equals_the_whole_fit() {
    use popcorn::kkmeans::{FitError, KernelKMeans};
    let n = 12;
    let kernel = gaussian_kernel(&values(n * 2, 4), n, 2);
    let km = KernelKMeans::new(3)
        .dtype(DType::F64)
        .device(DeviceSpec::Cpu);
    let whole = km.fit_precomputed(&kernel, n).expect("whole");
    let mut asked = Vec::new();
    let rows = km
        .fit_precomputed_rows(n, &mut |r| {
            asked.push(r.clone());
            Ok(kernel[r.start * n..r.end * n].to_vec())
        })
        .expect("by rows");
    assert_eq!(asked, vec![0..n]);
    assert_eq!(rows.labels, whole.labels);
    assert_eq!(rows.objective.to_bits(), whole.objective.to_bits());
    let mut bad = kernel.clone();
    bad[5 * n + 7] = f64::NAN;
    let e = km
        .fit_precomputed_rows(n, &mut |r| Ok(bad[r.start * n..r.end * n].to_vec()))
        .expect_err("a NaN");
    assert!(e.to_string().contains("kernel entry (5, 7) is NaN"), "{e}");
    let e = km
        .fit_precomputed_rows(n, &mut |_| Err(FitError::Input("the disk is gone".into())))
        .expect_err("a failing reader");
    assert!(e.to_string().contains("the disk is gone"), "{e}");
    let e = KernelKMeans::new(3)
        .kernel_storage(Some(popcorn::kernel_ir::Half::Bf16))
        .device(DeviceSpec::Cpu)
        .fit_precomputed_rows(n, &mut |r| Ok(kernel[r.start * n..r.end * n].to_vec()))
        .expect_err("bf16");
    assert!(e.to_string().contains("use fit_precomputed"), "{e}");
}

#[test]
fn a_context_of_several_ranks_names_its_devices_and_their_count() {
    let one = Context::cpu_ranks(1, None).describe();
    assert!(one.starts_with("cpu"), "{one}");
    assert_eq!(
        Context::cpu_ranks(3, None).describe(),
        format!("{one} x 3 ranks")
    );
}
