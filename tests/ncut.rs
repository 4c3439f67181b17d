//! Normalized cut as weighted Kernel K-means: the planted partition of a stochastic block model
//! recovered, the cut never increasing, the fit's cut equal to one computed here from the
//! adjacency, the DSL iteration against a dense f64 weighted Kernel K-means with
//! `K = sigma D^-1 + D^-1 A D^-1`, plans without an `n x n` dense value, and the errors.

mod common;

use common::{stochastic_block_model, SplitMix64};
use popcorn::dsl::plan::ValueKind;
use popcorn::dsl::Target;
use popcorn::io::CsrMatrix;
use popcorn::kkmeans::FitError;
use popcorn::metrics::adjusted_rand_index;
use popcorn::ncut::{self, Init, NormalizedCut, Sigma};
use popcorn::{DType, DeviceSpec, PlannerConfig};
use std::collections::BTreeMap;

/// The dense row-major adjacency.
fn dense(a: &CsrMatrix) -> Vec<f64> {
    a.to_dense().expect("a small graph")
}

/// The normalized cut from the dense adjacency: `sum_c (W_c - L_c) / W_c`, written out.
fn ncut_dense(a: &[f64], n: usize, labels: &[u32], k: usize) -> f64 {
    let mut total = 0.0;
    for c in 0..k as u32 {
        let (mut volume, mut links) = (0.0, 0.0);
        for i in 0..n {
            if labels[i] != c {
                continue;
            }
            for j in 0..n {
                volume += a[i * n + j];
                if labels[j] == c {
                    links += a[i * n + j];
                }
            }
        }
        if volume > 0.0 {
            total += (volume - links) / volume;
        }
    }
    total
}

fn as_i64(labels: &[u32]) -> Vec<i64> {
    labels.iter().map(|&l| l as i64).collect()
}

#[test]
fn planted_blocks_are_recovered_and_the_cut_never_increases() {
    for (n, p_in, p_out, seed, dtype) in [
        (400, 0.15, 0.01, 1, DType::F32),
        (1200, 0.06, 0.005, 2, DType::F32),
        (800, 0.08, 0.01, 3, DType::F64),
    ] {
        let (a, truth) = stochastic_block_model(n, 4, p_in, p_out, seed);
        let fit = NormalizedCut::new(4)
            .init(Init::Random { seed: 11 })
            .n_init(4)
            .dtype(dtype)
            .device(DeviceSpec::Cpu)
            .fit(&a)
            .unwrap();
        let ari = adjusted_rand_index(&truth, &as_i64(&fit.labels));
        eprintln!(
            "n {n}: ARI {ari:.4}, ncut {:.5}, {} iterations, {} taken back, sigma {}",
            fit.ncut, fit.iterations, fit.rejected_steps, fit.sigma
        );
        assert!(ari >= 0.95, "n = {n}: ARI {ari}");
        assert!(fit.converged);
        assert!(fit.ncut_history.len() >= 2, "the labels moved");
        for w in fit.ncut_history.windows(2) {
            assert!(w[1] <= w[0], "the cut rose: {:?}", fit.ncut_history);
        }
        // The cut of the fit against the one of the planted partition, both from A here.
        let a_dense = dense(&a);
        let planted: Vec<u32> = truth.iter().map(|&t| t as u32).collect();
        let mine = ncut_dense(&a_dense, n, &fit.labels, 4);
        assert!(
            (fit.ncut - mine).abs() <= 1e-12 * (1.0 + mine),
            "{} against {mine}",
            fit.ncut
        );
        assert!(mine <= ncut_dense(&a_dense, n, &planted, 4) + 1e-9);
        // The program's value of the final labels (f32 or f64) agrees with the host's.
        let tol = if dtype == DType::F32 { 1e-4 } else { 1e-10 };
        let last = *fit.ncut_history.last().unwrap();
        assert!(
            (last - fit.ncut).abs() <= tol,
            "{last} against {}",
            fit.ncut
        );
        assert_eq!(fit.empty_clusters, 0);
    }
}

#[test]
fn steps_that_raise_the_cut_are_taken_back() {
    // A harder graph (p_in / p_out = 5, n = 1000), where batch steps at sigma = 0 do raise the
    // cut: those steps are taken back and sigma raised; the accepted cuts never increase.
    let (a, _) = stochastic_block_model(1000, 4, 0.05, 0.01, 4);
    let mut rejected = 0;
    for seed in 0..3 {
        let fit = NormalizedCut::new(4)
            .init(Init::Random { seed })
            .device(DeviceSpec::Cpu)
            .fit(&a)
            .unwrap();
        rejected += fit.rejected_steps;
        assert!(fit.sigma <= fit.sigma_bound);
        assert!(fit.rejected_steps == 0 || fit.sigma > 0.0);
        for h in fit.ncut_history.windows(2) {
            assert!(h[1] <= h[0], "the cut rose: {:?}", fit.ncut_history);
        }
    }
    assert!(
        rejected > 0,
        "no step raised the cut: the graph no longer tests it"
    );
}

#[test]
fn the_gershgorin_shift_never_increases_the_cut_without_taking_steps_back() {
    // A weighted graph with self-loops: the bound max_i (1 - 2 A_ii / d_i) is below 1, and
    // plain weighted Kernel K-means at that shift is monotone.
    let (n, k) = (150, 3);
    let (a, _) = stochastic_block_model(n, k, 0.2, 0.05, 5);
    let mut rng = SplitMix64::new(9);
    let mut w = dense(&a);
    for i in 0..n {
        for j in 0..i {
            if w[i * n + j] != 0.0 {
                let v = 0.5 + rng.unit();
                w[i * n + j] = v;
                w[j * n + i] = v;
            }
        }
        w[i * n + i] = 3.0 * rng.unit();
    }
    let a = CsrMatrix::from_dense(n, n, &w).unwrap();
    let bound = ncut::gershgorin_sigma(&a).unwrap();
    let want = (0..n)
        .map(|i| {
            let d: f64 = w[i * n..(i + 1) * n].iter().sum();
            1.0 - 2.0 * w[i * n + i] / d
        })
        .fold(f64::MIN, f64::max);
    assert!(
        (bound - want).abs() < 1e-12 && bound < 1.0,
        "{bound} against {want}"
    );
    for seed in 0..4 {
        let fit = NormalizedCut::new(k)
            .sigma(Sigma::Fixed(bound))
            .init(Init::Random { seed })
            .dtype(DType::F64)
            .device(DeviceSpec::Cpu)
            .fit(&a)
            .unwrap();
        assert_eq!(fit.rejected_steps, 0);
        for h in fit.ncut_history.windows(2) {
            assert!(h[1] <= h[0] + 1e-12, "the cut rose: {:?}", fit.ncut_history);
        }
    }
}

/// Dense f64 weighted Kernel K-means with weights d and K = sigma D^-1 + D^-1 A D^-1 from
/// `labels` to a fixed point: (labels, iterations, objective of the final labels, cut of the
/// labels at the start of each iteration).
fn dense_reference(
    a: &[f64],
    n: usize,
    k: usize,
    sigma: f64,
    mut labels: Vec<u32>,
    max_iter: usize,
) -> (Vec<u32>, usize, f64, Vec<f64>) {
    let d: Vec<f64> = (0..n).map(|i| a[i * n..(i + 1) * n].iter().sum()).collect();
    let kern = |i: usize, j: usize| {
        (if i == j { sigma / d[i] } else { 0.0 }) + a[i * n + j] / (d[i] * d[j])
    };
    let mut history = Vec::new();
    let distances = |labels: &[u32]| {
        let mut w = vec![0.0; k];
        for i in 0..n {
            w[labels[i] as usize] += d[i];
        }
        let mut norms = vec![0.0; k];
        for i in 0..n {
            for j in 0..n {
                if labels[i] == labels[j] {
                    let c = labels[i] as usize;
                    norms[c] += d[i] * d[j] * kern(i, j) / (w[c] * w[c]);
                }
            }
        }
        let mut dist = vec![f64::INFINITY; n * k];
        for i in 0..n {
            for c in 0..k {
                if w[c] == 0.0 {
                    continue;
                }
                let cross: f64 = (0..n)
                    .filter(|&j| labels[j] as usize == c)
                    .map(|j| d[j] * kern(i, j))
                    .sum();
                dist[i * k + c] = kern(i, i) - 2.0 * cross / w[c] + norms[c];
            }
        }
        dist
    };
    let objective = |labels: &[u32], dist: &[f64]| -> f64 {
        (0..n)
            .map(|i| d[i] * dist[i * k + labels[i] as usize])
            .sum()
    };
    let mut iterations = 0;
    loop {
        let dist = distances(&labels);
        iterations += 1;
        history.push(ncut_dense(a, n, &labels, k));
        let next: Vec<u32> = (0..n)
            .map(|i| {
                let row = &dist[i * k..(i + 1) * k];
                let mut best = 0;
                for c in 1..k {
                    if row[c] < row[best] {
                        best = c;
                    }
                }
                best as u32
            })
            .collect();
        if next == labels {
            let value = objective(&labels, &dist);
            return (labels, iterations, value, history);
        }
        labels = next;
        if iterations == max_iter {
            let dist = distances(&labels);
            return (
                labels.clone(),
                iterations,
                objective(&labels, &dist),
                history,
            );
        }
    }
}

#[test]
fn the_iteration_matches_dense_weighted_kernel_kmeans() {
    for (n, k, seed) in [(40, 3, 21), (90, 4, 22), (61, 5, 23)] {
        let (a, _) = stochastic_block_model(n, k, 0.3, 0.08, seed);
        // Random weights and a few self-loops.
        let mut rng = SplitMix64::new(seed);
        let mut w = dense(&a);
        for i in 0..n {
            for j in 0..i {
                if w[i * n + j] != 0.0 {
                    let v = rng.uniform(0.25, 2.0);
                    w[i * n + j] = v;
                    w[j * n + i] = v;
                }
            }
            if i % 7 == 0 {
                w[i * n + i] = 1.5;
            }
        }
        let a = CsrMatrix::from_dense(n, n, &w).unwrap();
        let labels0: Vec<u32> = (0..n).map(|_| rng.below(k) as u32).collect();
        for sigma in [0.0, 0.05, 0.3, ncut::gershgorin_sigma(&a).unwrap()] {
            let (labels, iterations, objective, history) =
                dense_reference(&w, n, k, sigma, labels0.clone(), 50);
            let fit = NormalizedCut::new(k)
                .sigma(Sigma::Fixed(sigma))
                .init_labels(labels0.clone())
                .max_iter(50)
                .dtype(DType::F64)
                .device(DeviceSpec::Cpu)
                .fit(&a)
                .unwrap();
            let what = format!("n {n}, k {k}, sigma {sigma}");
            assert_eq!(fit.labels, labels, "{what}: labels");
            assert_eq!(fit.iterations, iterations, "{what}: iterations");
            assert!(
                (fit.objective - objective).abs() <= 1e-9 * (1.0 + objective.abs()),
                "{what}: objective {} against {objective}",
                fit.objective
            );
            assert_eq!(fit.ncut_history.len(), history.len(), "{what}");
            for (got, want) in fit.ncut_history.iter().zip(&history) {
                assert!(
                    (got - want).abs() <= 1e-10,
                    "{what}: cut {got} against {want}"
                );
            }
            let final_cut = ncut_dense(&w, n, &labels, k);
            assert!((fit.ncut - final_cut).abs() <= 1e-12, "{what}");
            eprintln!("{what}: {iterations} iterations");
        }
    }
}

#[test]
fn no_plan_has_a_dense_n_by_n_value_for_a_sparse_graph() {
    let program = ncut::program();
    for target in [Target::cpu(2), Target::reference_gpu()] {
        for dtype in [DType::F32, DType::F64] {
            for n in [1000, 20_000, 1_000_000] {
                for density in [1e-5, 1e-3, 1e-2, 0.1] {
                    let nnz = ((n * n) as f64 * density) as usize + n;
                    let dims = [("n".to_string(), n), ("k".to_string(), 8)].into();
                    let config = PlannerConfig {
                        dtype,
                        ..PlannerConfig::default()
                    };
                    let nnz_map = BTreeMap::from([("As".to_string(), nnz)]);
                    let plan =
                        popcorn::dsl::plan(program, &dims, &config, &target, &nnz_map).unwrap();
                    for v in &plan.values {
                        let square = v.rows == n && v.cols == n;
                        assert!(
                            !(square && matches!(v.kind, ValueKind::Dense)),
                            "{}, n {n}, density {density}: {} is a dense n x n value\n{plan}",
                            target.device,
                            v.name
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_graphs_and_parameters_are_clear_errors() {
    let cpu = |k| NormalizedCut::new(k).device(DeviceSpec::Cpu);
    let msg = |r: Result<ncut::NcutResult, FitError>| r.unwrap_err().to_string();
    let from = |n, v: &[f64]| CsrMatrix::from_dense(n, n, v).unwrap();
    let path = from(3, &[0.0, 1.0, 0.0, 1.0, 0.0, 2.0, 0.0, 2.0, 0.0]);
    let rect = CsrMatrix::from_dense(2, 3, &[0.0, 1.0, 0.0, 1.0, 0.0, 0.0]).unwrap();
    assert!(msg(cpu(2).fit(&rect)).contains("is 2 x 3; it must be square"));
    let asym = from(3, &[0.0, 1.0, 0.0, 1.0, 0.0, 2.0, 0.0, 2.5, 0.0]);
    assert!(msg(cpu(2).fit(&asym)).contains("entry (1, 2) is 2 but (2, 1) is 2.5"));
    let negative = from(2, &[0.0, -1.0, -1.0, 0.0]);
    assert!(msg(cpu(1).fit(&negative)).contains("entry (0, 1) is -1; edge weights must be >= 0"));
    let isolated = from(3, &[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert!(msg(cpu(2).fit(&isolated)).contains("node 2 is isolated"));
    assert!(msg(cpu(4).fit(&path)).contains("k = 4 is larger than the number of nodes n = 3"));
    assert!(msg(cpu(0).fit(&path)).contains("k = 0"));
    assert!(msg(cpu(2).init_labels(vec![0, 1]).fit(&path))
        .contains("2 initial labels given for 3 nodes"));
    assert!(msg(cpu(2).init_labels(vec![0, 2, 1]).fit(&path)).contains("initial label 2 of node 1"));
    assert!(msg(cpu(2).sigma(Sigma::Fixed(f64::NAN)).fit(&path)).contains("sigma = NaN"));
    assert!(msg(cpu(2).max_iter(0).fit(&path)).contains("max_iter = 0"));
    // The cut of given labels: the path 0 -1- 1 -2- 2 split after node 0: cut 1, volumes 1
    // and 5.
    let cut = ncut::normalized_cut(&path, &[0, 1, 1], 2).unwrap();
    assert!((cut - (1.0 + 1.0 / 5.0)).abs() < 1e-15);
    assert!(ncut::normalized_cut(&path, &[0, 1], 2).is_err());
    assert!(ncut::normalized_cut(&path, &[0, 1, 3], 2).is_err());
}
