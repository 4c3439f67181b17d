//! Plans of the flagship programs: which library calls are selected, what fuses, where
//! buffers go. These pin the planner's decisions; the runtime tests pin its numbers.

use kernel_ir::{Form, ReduceKind};
use popcorn_dsl::plan::{Home, Plan, StepOp};
use popcorn_dsl::{plan, PlannerConfig, Program, Target};
use std::collections::BTreeMap;

fn programs() -> Vec<Program> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/programs/kernel_kmeans.pop"
    );
    let src = std::fs::read_to_string(path).expect("kernel_kmeans.pop");
    Program::parse_all(&src).unwrap_or_else(|e| panic!("{e}"))
}

fn plan_of(name: &str, dims: &[(&str, usize)], config: &PlannerConfig) -> Plan {
    plan_from("kernel_kmeans.pop", name, dims, config)
}

fn ops(plan: &Plan) -> Vec<String> {
    plan.steps.iter().map(|s| s.op_name()).collect()
}

const ITER_DIMS: &[(&str, usize)] = &[("n", 60000), ("k", 10)];

/// The general path: products with the selection matrix through cuSPARSE.
fn spmm_config() -> PlannerConfig {
    PlannerConfig {
        cluster_sums_max_k: Some(0),
        ..PlannerConfig::default()
    }
}

#[test]
fn iteration_is_spmm_spmv_and_fused_kernels() {
    let p = plan_of("kkmeans_iteration", ITER_DIMS, &spmm_config());
    let names = ops(&p);
    for want in [
        "selection",
        "counts",
        "diag",
        "spmm",
        "spmv",
        "fused rows",
        "fused map",
        "fused cols",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "no {want} in {names:?}\n{p}"
        );
    }
    // No transpose is ever materialised: V^T is an SpMM flag, cn^T a row-broadcast read.
    assert!(
        !p.steps
            .iter()
            .any(|s| s.provenance.iter().any(|x| x.contains("transpose"))),
        "{p}"
    );
    // D = E + diag(K) + cn^T, argmin_rows(D) and gather(D, labels) are ONE kernel.
    let argmin = p
        .steps
        .iter()
        .find_map(|s| match &s.op {
            StepOp::Fused(f) => match &f.spec.form {
                Form::Rows { reductions, .. }
                    if reductions.iter().any(|r| r.kind == ReduceKind::ArgMin) =>
                {
                    Some(f)
                }
                _ => None,
            },
            _ => None,
        })
        .expect("an argmin kernel");
    let Form::Rows { stores, reductions } = &argmin.spec.form else {
        unreachable!()
    };
    assert!(stores.is_empty(), "D is never written to memory");
    assert_eq!(reductions.len(), 2);
    assert!(reductions
        .iter()
        .any(|r| matches!(r.kind, ReduceKind::Pick { .. })));
    assert_eq!((argmin.rows, argmin.cols), (60000, 10));
    // The SpMM streams K once: its cost is one read of K plus small terms.
    let spmm = step_named(&p, "spmm");
    assert!(spmm.bytes >= 4.0 * 60000.0 * 60000.0 && spmm.bytes < 1.01 * 4.0 * 60000.0 * 60000.0);
}

#[test]
fn iteration_by_default_uses_cluster_sums_reading_k_once_without_sparse_indexing() {
    let cfg = PlannerConfig {
        cluster_sums_max_k: Some(1024),
        ..PlannerConfig::default()
    };
    let p = plan_of("kkmeans_iteration", ITER_DIMS, &cfg);
    let names = ops(&p);
    assert!(
        names.iter().any(|n| n == "cluster sums") && !names.iter().any(|n| n == "spmm"),
        "{p}"
    );
    let sums = step_named(&p, "cluster sums");
    let k_bytes = 4.0 * 60000.0 * 60000.0;
    assert!(sums.bytes >= k_bytes && sums.bytes < 1.001 * k_bytes, "{p}");
    // Everything else together moves well under 1% of K.
    let rest: f64 = p
        .steps
        .iter()
        .filter(|s| s.op_name() != "cluster sums")
        .map(|s| s.bytes)
        .sum();
    assert!(rest < 0.01 * k_bytes, "{p}");
}

#[test]
fn kernel_matrix_epilogue_runs_in_place_in_the_output() {
    let dims = [("n", 1000), ("d", 50)];
    for name in ["kernel_polynomial", "kernel_sigmoid", "kernel_gaussian"] {
        let p = plan_of(name, &dims, &PlannerConfig::default());
        assert_eq!(ops(&p)[0], "syrk", "{p}");
        assert_eq!(ops(&p).last().unwrap(), "fused map", "{p}");
        // The product lives in K's own storage: no n x n workspace.
        let b = p.steps[0].outputs[0];
        assert_eq!(p.value(b).home, Home::InOutput("K".into()), "{p}");
        assert!(p.workspace_bytes() < 1000 * 8 + 64, "{p}");
    }
}

/// The SYRK step of a plan: (lower_only, block_rows).
fn syrk_of(p: &Plan) -> (bool, usize) {
    p.steps
        .iter()
        .find_map(|s| match s.op {
            StepOp::Syrk {
                lower_only,
                block_rows,
                ..
            } => Some((lower_only, block_rows)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no syrk in {p}"))
}

#[test]
fn kernel_matrix_syrk_leaves_the_mirror_to_its_epilogue() {
    // Any n/d: with the mirror in the map, SYRK does half the flops and writes half of K.
    for dims in [[("n", 1000), ("d", 50)], [("n", 60000), ("d", 50)]] {
        for name in ["kernel_polynomial", "kernel_sigmoid", "kernel_gaussian"] {
            let p = plan_of(name, &dims, &PlannerConfig::default());
            assert!(syrk_of(&p).0, "{p}");
            let StepOp::Fused(f) = &p.steps.last().unwrap().op else {
                panic!("{p}")
            };
            let symmetric: Vec<_> = f
                .spec
                .inputs
                .iter()
                .filter(|i| i.access == kernel_ir::Access::LowerSymmetric)
                .collect();
            assert_eq!(symmetric.len(), 1, "{p}");
            assert!(f.spec.runs_in_bands(), "{p}");
            // Still in place in K's storage.
            let b = p.steps[0].outputs[0];
            assert_eq!(p.value(b).home, Home::InOutput("K".into()), "{p}");
            assert!(p.to_string().contains("lower"), "{p}");
        }
    }
    // A Gram matrix that is itself the output is written whole.
    let p = plan_of(
        "kernel_linear",
        &[("n", 1000), ("d", 50)],
        &PlannerConfig::default(),
    );
    assert!(!syrk_of(&p).0, "{p}");
    // Without fusion there is no map to mirror into.
    let p = plan_of(
        "kernel_polynomial",
        &[("n", 1000), ("d", 50)],
        &PlannerConfig {
            fusion: false,
            ..PlannerConfig::default()
        },
    );
    assert!(!syrk_of(&p).0, "{p}");
}

#[test]
fn syrk_block_rows_follow_the_rule_or_the_config() {
    let p = plan_of(
        "kernel_polynomial",
        &[("n", 60000), ("d", 784)],
        &PlannerConfig::default(),
    );
    // 4096 rows leave 14.6 block rows (8192 would leave fewer than 12): 15 block rows, the map
    // overlapped band by band.
    assert_eq!(syrk_of(&p).1, 4096);
    assert!(
        p.to_string()
            .contains("(15 gemm block rows), next map overlapped"),
        "{p}"
    );
    assert_eq!(
        p.pipeline_from(0).map(|pipe| pipe.bands.len()),
        Some(15),
        "{p}"
    );
    // TF32: at least 24 block rows (2048 rows each).
    let tf32 = PlannerConfig {
        tf32: true,
        ..PlannerConfig::default()
    };
    let p = plan_of("kernel_polynomial", &[("n", 60000), ("d", 784)], &tf32);
    assert_eq!(syrk_of(&p).1, 2048);
    // Overlap off, or blocks that do not start on the map's 64-row tiles: the map runs after.
    for cfg in [
        PlannerConfig {
            overlap: false,
            ..PlannerConfig::default()
        },
        PlannerConfig {
            syrk_block_rows: Some(1000),
            ..PlannerConfig::default()
        },
    ] {
        let p = plan_of("kernel_polynomial", &[("n", 60000), ("d", 784)], &cfg);
        assert!(matches!(
            p.steps[0].op,
            StepOp::Syrk {
                lower_only: true,
                ..
            }
        ));
        assert!(p.pipelines.is_empty(), "{p}");
        assert!(!p.to_string().contains("overlapped"), "{p}");
    }
    let p = plan_of(
        "kernel_polynomial",
        &[("n", 100), ("d", 784)],
        &PlannerConfig::default(),
    );
    assert_eq!(syrk_of(&p).1, 512);
    let cublas = PlannerConfig {
        syrk_block_rows: Some(0),
        ..PlannerConfig::default()
    };
    let p = plan_of("kernel_polynomial", &[("n", 60000), ("d", 784)], &cublas);
    assert_eq!(syrk_of(&p).1, 0);
    assert!(p.to_string().contains("cublas syrk"), "{p}");
}

#[test]
fn gram_matrix_uses_gemm_above_the_ratio_and_syrk_below() {
    let cfg = PlannerConfig::default();
    let tall = plan_of("kernel_linear", &[("n", 60000), ("d", 50)], &cfg);
    assert_eq!(ops(&tall), ["gemm"]);
    let wide = plan_of("kernel_linear", &[("n", 60000), ("d", 784)], &cfg);
    assert_eq!(ops(&wide), ["syrk"]);
    let cfg = PlannerConfig {
        syrk_gemm_ratio: Some(1e9),
        ..PlannerConfig::default()
    };
    assert_eq!(
        ops(&plan_of("kernel_linear", &[("n", 60000), ("d", 50)], &cfg)),
        ["syrk"]
    );
}

#[test]
fn without_fusion_every_elementwise_operation_is_its_own_kernel() {
    let fused = plan_of("kkmeans_iteration", ITER_DIMS, &PlannerConfig::default());
    let unfused = plan_of(
        "kkmeans_iteration",
        ITER_DIMS,
        &PlannerConfig {
            fusion: false,
            ..PlannerConfig::default()
        },
    );
    assert!(unfused.steps.len() > fused.steps.len() + 2, "{unfused}");
}

#[test]
fn readable_three_ways() {
    let p = plan_of("kkmeans_iteration", ITER_DIMS, &PlannerConfig::default());
    let table = p.to_string();
    for want in [
        "plan for fn kkmeans_iteration",
        "cluster sums",
        "label sums",
        "flops",
        "bytes",
        "Index[60000]",
    ] {
        assert!(table.contains(want), "{table}");
    }
    let dot = p.to_dot();
    assert!(
        dot.starts_with("digraph") && dot.contains("subgraph cluster_"),
        "{dot}"
    );
    let kernels: Vec<_> = p.kernels().cloned().collect();
    assert!(!kernels.is_empty());
    for k in &kernels {
        assert_eq!(k.name, k.spec.name());
        assert!(k.spec.validate().is_ok(), "{:?}", k.spec);
    }
    // Each kernel records the IR nodes it came from.
    for step in &p.steps {
        if let StepOp::Fused(f) = &step.op {
            assert_eq!(f.spec.provenance, step.provenance);
        }
    }
    // Deterministic: the same program and sizes give the same kernels and text.
    let again = plan_of("kkmeans_iteration", ITER_DIMS, &PlannerConfig::default());
    assert_eq!(again.kernels().cloned().collect::<Vec<_>>(), kernels);
    assert_eq!(again.to_string(), table);
}

#[test]
fn buffers_are_reused_once_values_die() {
    let p = plan_of("kkmeans_iteration", ITER_DIMS, &PlannerConfig::default());
    let temps = p
        .values
        .iter()
        .filter(|v| matches!(v.home, Home::Temp(_)))
        .count();
    let buffers_used: usize = p
        .values
        .iter()
        .map(|v| {
            if let Home::Temp(b) = &v.home {
                b.len()
            } else {
                0
            }
        })
        .sum();
    assert!(
        p.buffers.len() < buffers_used,
        "{} buffers for {temps} temporaries",
        p.buffers.len()
    );
}

/// The storage a value lives in: an output's name or plan buffer ids.
fn storage_of(p: &Plan, v: popcorn_dsl::plan::ValueId) -> Vec<String> {
    match &p.value(v).home {
        Home::Output(n) | Home::InOutput(n) => vec![format!("output {n}")],
        Home::Temp(ids) => ids.iter().map(|b| format!("buffer {}", b.0)).collect(),
        other => vec![format!("{other:?}")],
    }
}

#[test]
fn an_overlapped_map_never_writes_where_its_syrk_reads() {
    // The map runs while later block rows of the SYRK still read A: A must not share storage
    // with anything the map writes (here A = exp(X) would otherwise live in K's storage, or
    // in the buffer the map's output takes).
    let programs = [
        "fn f(X: Dense[n, d]) -> (K: Dense[n, n]) { Y = exp(X); K = pow(Y * Y^T + 1, 2); }",
        "fn g(X: Dense[n, d]) -> (s: Col[n], b: Col[n]) { Y = exp(X); B = Y * Y^T; \
         K = tanh(B + 1); s = K * rownorms(X); b = diag(B); }",
    ];
    for src in programs {
        let p = Program::parse(src).unwrap_or_else(|e| panic!("{e}"));
        for (n, d) in [(60000, 784), (6400, 8000)] {
            let dims = [("n".to_string(), n), ("d".to_string(), d)]
                .into_iter()
                .collect();
            let plan = plan(
                &p,
                &dims,
                &PlannerConfig::default(),
                &Target::reference_gpu(),
                &BTreeMap::new(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let Some(s) = plan.pipelines.first().map(|pipe| pipe.producer) else {
                panic!("no overlapped SYRK in\n{plan}");
            };
            let read = storage_of(&plan, plan.steps[s].inputs[0]);
            for o in &plan.steps[s + 1].outputs {
                let written = storage_of(&plan, *o);
                assert!(
                    read.iter().all(|r| !written.contains(r)),
                    "the map writes {written:?} where the SYRK reads {read:?}\n{plan}"
                );
            }
        }
    }
}

#[test]
fn centroid_norms_sum_by_label_without_a_selection_matrix() {
    // -0.5 * V * z with V = selection(labels, k): sums of z by label, scaled by the counts;
    // nothing else reads V, so it is never built.
    let p = plan_of("kkmeans_iteration", ITER_DIMS, &PlannerConfig::default());
    let names = ops(&p);
    assert!(names.iter().any(|n| n == "label sums"), "{p}");
    assert!(
        !names.iter().any(|n| n == "selection" || n == "spmv"),
        "{p}"
    );
    // Where n k is large (60000 x 1000 > 2^25), or the pattern is off, the sparse product stays.
    for (k, config) in [(1000, PlannerConfig::default()), (10, spmm_config())] {
        let p = plan_of("kkmeans_iteration", &[("n", 60000), ("k", k)], &config);
        let names = ops(&p);
        assert!(names.iter().any(|n| n == "selection"), "{p}");
        assert!(names.iter().any(|n| n == "spmv"), "{p}");
        assert!(!names.iter().any(|n| n == "label sums"), "{p}");
    }
}

#[test]
fn cpu_plans_use_one_library_syrk_and_run_steps_in_order() {
    let p = programs()
        .into_iter()
        .find(|p| p.name == "kernel_polynomial")
        .expect("program");
    let dims = [("n".to_string(), 60000), ("d".to_string(), 784)]
        .into_iter()
        .collect();
    let cpu = plan(
        &p,
        &dims,
        &PlannerConfig::default(),
        &Target::cpu(2),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(syrk_of(&cpu), (true, 0), "{cpu}");
    assert!(cpu.pipelines.is_empty(), "{cpu}");
    assert!(cpu.to_string().contains("target: cpu (2 threads)"), "{cpu}");
    assert_eq!(cpu.target, Target::cpu(2));
    assert_eq!(cpu.validate(), Ok(()));
}

/// Plans `name` from `file` (in `examples/programs/`) for the reference GPU.
fn plan_from(file: &str, name: &str, dims: &[(&str, usize)], config: &PlannerConfig) -> Plan {
    let path = format!("{}/../examples/programs/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).expect("program file");
    let p = Program::parse_all(&src)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .find(|p| p.name == name)
        .expect("program");
    let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    plan(
        &p,
        &dims,
        config,
        &Target::reference_gpu(),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn contractions(policy: popcorn_dsl::ContractionPolicy) -> PlannerConfig {
    PlannerConfig {
        contractions: policy,
        ..PlannerConfig::default()
    }
}

/// The plan of the program `src` at `dims` on the reference GPU, contractions forced.
fn plan_fused(src: &str, dims: &[(&str, usize)]) -> Plan {
    let p = Program::parse(src).unwrap_or_else(|e| panic!("{e}"));
    let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    plan(
        &p,
        &dims,
        &contractions(popcorn_dsl::ContractionPolicy::Always),
        &Target::reference_gpu(),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn lloyd_distances_become_one_contraction_in_place_of_a_gemm_and_a_row_kernel() {
    use popcorn_dsl::ContractionPolicy::{Always, Never};
    let dims = [("n", 100_000), ("k", 1024), ("d", 128)];
    let stored = plan_from(
        "lloyd_kmeans.pop",
        "lloyd_step",
        &dims,
        &contractions(Never),
    );
    let names = ops(&stored);
    assert!(names.contains(&"gemm".to_string()), "{stored}");
    assert!(!names.contains(&"contraction".to_string()), "{stored}");
    let fused = plan_from(
        "lloyd_kmeans.pop",
        "lloyd_step",
        &dims,
        &contractions(Always),
    );
    let names = ops(&fused);
    assert!(!names.contains(&"gemm".to_string()), "{fused}");
    assert_eq!(
        names.iter().filter(|n| *n == "contraction").count(),
        1,
        "{fused}"
    );
    let step = step_named(&fused, "contraction");
    let StepOp::Fused(f) = &step.op else {
        panic!("not a generated kernel")
    };
    let Form::Contraction { reductions, .. } = &f.spec.form else {
        panic!("not a contraction")
    };
    assert_eq!((f.rows, f.cols, f.depth), (100_000, 1024, 128));
    assert!(reductions.iter().any(|r| r.kind == ReduceKind::ArgMin));
    // The n x k distances are never a buffer: the workspace shrinks by at least 4 n k bytes.
    assert!(
        stored.workspace_bytes() >= fused.workspace_bytes() + 4 * 100_000 * 1024,
        "{stored}\n{fused}"
    );
}

#[test]
fn kernel_smoothing_never_stores_its_kernel_matrix() {
    let n = 200_000;
    let p = plan_from(
        "kernel_smoothing.pop",
        "kernel_smoothing",
        &[("n", n), ("m", n), ("d", 16)],
        &PlannerConfig::default(),
    );
    let contraction = p
        .steps
        .iter()
        .find_map(|s| match &s.op {
            StepOp::Fused(f) => match &f.spec.form {
                Form::Contraction { reductions, .. } => Some(reductions.clone()),
                _ => None,
            },
            _ => None,
        })
        .unwrap_or_else(|| panic!("no contraction:\n{p}"));
    let kinds: Vec<_> = contraction.iter().map(|r| r.kind).collect();
    assert!(kinds.contains(&ReduceKind::Sum), "{kinds:?}");
    assert!(
        kinds.iter().any(|k| matches!(k, ReduceKind::Dot { .. })),
        "{kinds:?}"
    );
    // Nothing of n x m size: a few vectors of n.
    assert!(p.workspace_bytes() < 64 * n, "{p}");
}

#[test]
fn fused_prediction_sums_the_cross_kernel_by_label() {
    let p = plan_from(
        "kernel_kmeans.pop",
        "kkmeans_predict_gaussian",
        &[("n", 50_000), ("m", 10_000), ("d", 32), ("k", 100)],
        &contractions(popcorn_dsl::ContractionPolicy::Always),
    );
    assert_eq!(by_label_contractions(&p), 1, "{p}");
    assert!(p.workspace_bytes() < 4 * 10_000 * 50_000, "{p}");
}

/// The plan's first step named `name` (its `op_name`); panics, printing the plan, where none is.
fn step_named<'p>(p: &'p Plan, name: &str) -> &'p popcorn_dsl::plan::Step {
    p.steps
        .iter()
        .find(|s| s.op_name() == name)
        .unwrap_or_else(|| panic!("no {name} step in\n{p}"))
}

/// How many of the plan's contraction steps sum by label.
fn by_label_contractions(p: &Plan) -> usize {
    p.steps
        .iter()
        .filter(|s| match &s.op {
            StepOp::Fused(f) => match &f.spec.form {
                Form::Contraction { reductions, .. } => reductions
                    .iter()
                    .any(|r| matches!(r.kind, ReduceKind::ByLabel { .. })),
                _ => false,
            },
            _ => false,
        })
        .count()
}

#[test]
fn kernel_kmeans_from_the_points_never_holds_an_n_by_n_value() {
    let n = 1_000_000;
    for kernel in ["linear", "polynomial", "gaussian", "sigmoid"] {
        let name = format!("kkmeans_recompute_{kernel}");
        let p = plan_from(
            "kernel_kmeans.pop",
            &name,
            &[("n", n), ("d", 50), ("k", 100)],
            &PlannerConfig::default(),
        );
        // The linear kernel's chain is reassociated (see the next test).
        let expected = usize::from(kernel != "linear");
        assert_eq!(by_label_contractions(&p), expected, "{p}");
        // diag(K) comes from the points, not from a stored K: no step reads a diagonal.
        assert!(!ops(&p).contains(&"diag".to_string()), "{p}");
        let largest = p.values.iter().map(|v| v.len()).max().unwrap_or(0);
        assert!(
            largest <= n * 100,
            "{name}: a value of {largest} elements\n{p}"
        );
        assert_eq!(p.validate(), Ok(()));
    }
}

/// Kernel K-means from the points with more clusters than the tiled kernel's on-chip bins
/// hold (the reference GPU's `max_labels`, 256), up to its `cluster_sums_max_k` (1024): in f32
/// the pipelined kernel adds running sums to the output, so the product still fuses (no n x n
/// value); in f64 the tiled kernel would need the bins, so K is stored.
#[test]
fn kernel_kmeans_from_the_points_takes_any_k_in_f32() {
    let n = 100_000;
    for k in [257, 1024] {
        let dims = [("n", n), ("d", 50), ("k", k)];
        let f32_plan = plan_from(
            "kernel_kmeans.pop",
            "kkmeans_recompute_polynomial",
            &dims,
            &contractions(popcorn_dsl::ContractionPolicy::Always),
        );
        assert_eq!(by_label_contractions(&f32_plan), 1, "k = {k}\n{f32_plan}");
        let largest = f32_plan.values.iter().map(|v| v.len()).max().unwrap_or(0);
        assert!(
            largest <= n * k.max(50),
            "k = {k}: {largest} elements\n{f32_plan}"
        );
        let f64_plan = plan_from(
            "kernel_kmeans.pop",
            "kkmeans_recompute_polynomial",
            &dims,
            &PlannerConfig {
                dtype: popcorn_dsl::DType::F64,
                ..contractions(popcorn_dsl::ContractionPolicy::Always)
            },
        );
        assert_eq!(by_label_contractions(&f64_plan), 0, "k = {k}\n{f64_plan}");
    }
}

/// With the linear kernel, `E = -2 * (X * X^T) * V^T` is computed as `-2 * X * (V * X)^T` (the
/// chains pass): the iteration is Lloyd's, `n d k` multiply-adds, where the left-to-right order
/// costs `n^2 (d + k)`; `diag(K)` still comes from the points.
#[test]
fn the_linear_kernel_iteration_is_reassociated_into_lloyds() {
    let (n, d, k) = (1_000_000usize, 50usize, 100usize);
    for config in [
        PlannerConfig::default(),
        PlannerConfig::default().with_dtype(popcorn_dsl::DType::F64),
    ] {
        let p = plan_from(
            "kernel_kmeans.pop",
            "kkmeans_recompute_linear",
            &[("n", n), ("d", d), ("k", k)],
            &config,
        );
        let bound = 10.0 * (n * d * k) as f64;
        assert!(p.total_flops() < bound, "{} flops\n{p}", p.total_flops());
        assert!(!ops(&p).contains(&"diag".to_string()), "{p}");
        // The thin product of the selection matrix with the points: k x d.
        let thin = p.values.iter().any(|v| v.len() == k * d);
        assert!(thin, "{p}");
        assert_eq!(p.validate(), Ok(()));
    }
    // Where the chain costs less left to right (more clusters than points), it stays.
    let p = plan_from(
        "kernel_kmeans.pop",
        "kkmeans_recompute_linear",
        &[("n", 50), ("d", 4000), ("k", 40)],
        &PlannerConfig::default(),
    );
    assert!(p.total_flops() >= (50 * 50 * 4000) as f64, "{p}");
}

/// `diag` of an element-wise map of a fused product is the same map of the operands' row dot
/// products, broadcasts included: the diagonal of `exp(-g * (b + b^T - 2 X X^T))` is
/// `exp(-g * (b + b - 2 sum_rows(X .* X)))`; no step reads a diagonal and nothing of `n x n`
/// is stored (the values: `tests/programs.rs` runs the Kernel K-means programs both ways).
#[test]
fn a_diagonal_of_a_fused_product_comes_from_its_operands() {
    let src = "fn f(X: Dense[n, d], Y: Dense[n, d], g: Scalar, labels: Index[n]) -> (s: Dense[n, k], t: Col[n]) {
        B = 3 * X * Y^T;
        b = rownorms(X);
        K = exp(-g * (b + b^T - B));
        s = K * selection(labels, k)^T;
        t = diag(K) + diag(B);
    }";
    let fused = plan_fused(src, &[("n", 300), ("d", 7), ("k", 4)]);
    assert_eq!(by_label_contractions(&fused), 1, "{fused}");
    assert!(!ops(&fused).contains(&"diag".to_string()), "{fused}");
    assert!(fused.workspace_bytes() < 4 * 300 * 300, "{fused}");
}

/// The recompute iteration's contraction reads its columns in cluster order, and since its
/// product is `X X^T` and its epilogue symmetric (`exp(-g (b + b^T - 2 B))`), its rows too: the
/// points, the labels and rownorms(X) go through a rows-by-cluster step, the contraction is
/// marked symmetric (one triangle of tiles), and its n x k sums come back to the points' order.
#[test]
fn symmetric_sums_by_label_read_rows_and_columns_in_cluster_order() {
    for kernel in ["gaussian", "polynomial", "sigmoid"] {
        let p = plan_from(
            "kernel_kmeans.pop",
            &format!("kkmeans_recompute_{kernel}"),
            &[("n", 5000), ("d", 8), ("k", 20)],
            &PlannerConfig::default(),
        );
        let contraction = step_named(&p, "contraction");
        let symmetric = matches!(
            contraction.op,
            StepOp::Fused(ref f) if matches!(f.spec.form, Form::Contraction { symmetric: true, .. })
        );
        assert!(symmetric, "{kernel}: {p}");
        let sorted: Vec<_> = p
            .steps
            .iter()
            .filter(|s| s.op_name() == "rows by cluster")
            .flat_map(|s| s.outputs.clone())
            .collect();
        // X and the labels (and, for the gaussian kernel, rownorms(X)), each permuted once.
        assert_eq!(
            sorted.len(),
            if kernel == "gaussian" { 3 } else { 2 },
            "{kernel}: {p}"
        );
        assert!(
            sorted.iter().all(|v| contraction.inputs.contains(v)),
            "{kernel}: {p}"
        );
        // Neither operand is X in the points' order any more ...
        let x = p.inputs.iter().find(|(n, _)| n == "X").map(|(_, v)| *v);
        assert!(
            x.is_some_and(|x| !contraction.inputs.contains(&x)),
            "{kernel}: {p}"
        );
        // ... and the sums come back to that order before anything reads them.
        let back = step_named(&p, "rows back from cluster order");
        assert_eq!(back.inputs[0], contraction.outputs[0], "{kernel}: {p}");
    }
}

/// An epilogue that is not symmetric (a column broadcast with no row broadcast to mirror it)
/// has only its columns sorted: the rows, and so every n x k result, stay in the user's order.
#[test]
fn asymmetric_sums_by_label_sort_only_their_columns() {
    let src = "fn f(X: Dense[n, d], g: Scalar, labels: Index[n]) -> (s: Dense[n, k]) {
        b = rownorms(X);
        K = exp(-g * (b^T - 2 * X * X^T));
        s = K * selection(labels, k)^T;
    }";
    let fused = plan_fused(src, &[("n", 300), ("d", 7), ("k", 4)]);
    let contraction = step_named(&fused, "contraction");
    assert!(
        matches!(contraction.op, StepOp::Fused(ref f) if matches!(f.spec.form, Form::Contraction { symmetric: false, .. })),
        "{fused}"
    );
    let x = fused.inputs.iter().find(|(n, _)| n == "X").map(|(_, v)| *v);
    assert!(
        x.is_some_and(|x| contraction.inputs.contains(&x)),
        "{fused}"
    );
    assert!(
        !fused
            .steps
            .iter()
            .any(|s| s.op_name() == "rows back from cluster order"),
        "{fused}"
    );
}

/// The weighted iteration from the points: the weights are a column broadcast of the
/// contraction's epilogue (`K .* w^T`, permuted into cluster order with the columns), so K is
/// still never stored and no weighted selection matrix is built; the epilogue is no longer
/// symmetric in the row and the column, so the contraction computes every tile.
#[test]
fn weighted_recompute_weighs_the_columns_inside_the_contraction() {
    let n = 5000;
    for kernel in ["gaussian", "polynomial", "sigmoid"] {
        let p = plan_from(
            "kernel_kmeans.pop",
            &format!("kkmeans_recompute_{kernel}_weighted"),
            &[("n", n), ("d", 8), ("k", 20)],
            &PlannerConfig::default(),
        );
        assert_eq!(by_label_contractions(&p), 1, "{kernel}: {p}");
        let names = ops(&p);
        for absent in ["weighted selection", "spmm", "gemm", "syrk", "diag"] {
            assert!(
                !names.iter().any(|s| s == absent),
                "{kernel}: {absent}\n{p}"
            );
        }
        let largest = p.values.iter().map(|v| v.len()).max().unwrap_or(0);
        assert!(largest <= n * 20, "{kernel}: {largest} elements\n{p}");
        let contraction = step_named(&p, "contraction");
        assert!(
            matches!(contraction.op, StepOp::Fused(ref f) if matches!(f.spec.form, Form::Contraction { symmetric: false, .. })),
            "{kernel}: {p}"
        );
        // The weights reach the contraction in cluster order.
        let w = p.inputs.iter().find(|(n, _)| n == "w").map(|(_, v)| *v);
        let sorted_w = p
            .steps
            .iter()
            .find(|s| s.op_name() == "rows by cluster" && Some(s.inputs[0]) == w)
            .unwrap_or_else(|| panic!("{kernel}: w is not sorted\n{p}"));
        assert!(
            contraction.inputs.contains(&sorted_w.outputs[0]),
            "{kernel}: {p}"
        );
        assert_eq!(p.validate(), Ok(()));
    }
}

/// The weighted iteration on a stored K: K is an input, and weighting its columns would copy
/// it, so the product is an SpMM by the weighted selection matrix (the plain iteration's sums
/// by label need no matrix); the centroid norms still sum by label (`w .* z`).
#[test]
fn weighted_stored_iteration_multiplies_k_by_the_weighted_selection() {
    let p = plan_of(
        "kkmeans_iteration_weighted",
        ITER_DIMS,
        &PlannerConfig::default(),
    );
    let names = ops(&p);
    for want in ["weighted selection", "spmm", "label sums", "diag"] {
        assert!(
            names.iter().any(|n| n == want),
            "no {want} in {names:?}\n{p}"
        );
    }
    assert!(!names.iter().any(|n| n == "cluster sums"), "{p}");
    let selection = step_named(&p, "weighted selection");
    let w = p.inputs.iter().find(|(n, _)| n == "w").map(|(_, v)| *v);
    assert_eq!(selection.inputs.get(1).copied(), w, "{p}");
    assert_eq!(p.validate(), Ok(()));
    // Forced to the general path, the SpMV of the centroid norms reads the same matrix.
    let general = plan_of("kkmeans_iteration_weighted", ITER_DIMS, &spmm_config());
    let names = ops(&general);
    assert!(names.iter().any(|n| n == "spmv"), "{general}");
    assert_eq!(
        names.iter().filter(|n| *n == "weighted selection").count(),
        1,
        "{general}"
    );
}

/// A weighted selection times a computed matrix that is also an output cannot weigh its
/// columns in place: it stays an SpMM, and the plain program's plan is unchanged.
#[test]
fn a_weighted_product_with_an_output_keeps_the_sparse_product() {
    let src = "fn f(X: Dense[n, d], l: Index[n], w: Col[n]) -> (K: Dense[n, n], E: Dense[n, k]) {
        K = X * X^T;
        E = K * selection(l, k, w)^T;
    }";
    let p = plan_fused(src, &[("n", 300), ("d", 7), ("k", 4)]);
    let names = ops(&p);
    assert!(names.iter().any(|n| n == "spmm"), "{p}");
    assert!(names.iter().any(|n| n == "weighted selection"), "{p}");
    assert_eq!(by_label_contractions(&p), 0, "{p}");
}

/// The fused column-reduction steps of `p`, each with its reductions' count.
fn column_kernels(p: &Plan) -> Vec<(usize, usize)> {
    p.steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match &s.op {
            StepOp::Fused(f) => match &f.spec.form {
                Form::Cols { reductions } => Some((i, reductions.len())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn an_iterations_objective_and_changed_labels_are_summed_by_one_kernel() {
    for (name, dims) in [
        ("kkmeans_iteration", ITER_DIMS),
        (
            "kkmeans_recompute_linear",
            &[("n", 60000), ("k", 10), ("d", 16)][..],
        ),
    ] {
        let p = plan_of(name, dims, &PlannerConfig::default());
        let cols = column_kernels(&p);
        assert_eq!(cols.len(), 1, "{name}: {cols:?}\n{p}");
        assert_eq!(cols[0].1, 2, "{name}\n{p}");
        let outputs = &p.steps[cols[0].0].outputs;
        assert_eq!(outputs.len(), 2, "{p}");
    }
}

#[test]
fn only_reductions_nothing_else_reads_share_a_kernel() {
    // t and u are the program's last reductions over the same points: one kernel. s feeds t,
    // so it runs first, alone; w sums over another space.
    let src = "fn f(x: Col[n], y: Col[n], z: Col[m]) -> (t: Scalar, u: Scalar, w: Scalar) {
        s = sum(x);
        t = sum(y * s);
        u = sum(x .* y);
        w = sum(z);
    }";
    let p = plan_fused(src, &[("n", 1000), ("m", 700)]);
    let mut counts: Vec<usize> = column_kernels(&p).iter().map(|c| c.1).collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![1, 1, 2], "{p}");
    let joined = column_kernels(&p)
        .into_iter()
        .find(|c| c.1 == 2)
        .map(|c| &p.steps[c.0])
        .unwrap_or_else(|| panic!("{p}"));
    let mut names: Vec<&str> = p
        .outputs
        .iter()
        .filter(|(_, v)| joined.outputs.contains(v))
        .map(|(name, _)| name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["t", "u"], "{p}");
    // Without fusion every reduction is its own kernel.
    let prog = Program::parse(src).unwrap_or_else(|e| panic!("{e}"));
    let dims = [("n", 1000), ("m", 700)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let config = PlannerConfig {
        fusion: false,
        ..PlannerConfig::default()
    };
    let apart = plan(
        &prog,
        &dims,
        &config,
        &Target::reference_gpu(),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(column_kernels(&apart).len(), 4, "{apart}");
}
