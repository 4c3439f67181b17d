//! Kernel K-means of sparse points (CSR) against the same points dense: the same labels,
//! iterations and objectives in f64 for every kernel, weighted or not, the same predictions,
//! libsvm files end to end, and the errors of what sparse points cannot do. An ignored test
//! clusters a 20,000 x 100,000 libsvm file at 0.1% density and checks the process's peak
//! memory stays far below the 8 GB its points take dense in f32 (16 GB in f64).

use popcorn::io::{load_libsvm, load_libsvm_sparse, CsrMatrix};
use popcorn::kkmeans::{Algorithm, FitError, Kernel, KernelKMeans, Model, ModelParts, Points};
use popcorn::{Context, DType, DeviceSpec};

mod common;

use common::SplitMix64;

/// `n x d` points with about `percent`% of entries set, every 5th row empty, and the last row
/// fully dense; row-major.
fn sparse_points(seed: u64, n: usize, d: usize, percent: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    let mut x = vec![0.0; n * d];
    for i in 0..n {
        for j in 0..d {
            let set = i + 1 == n || (i % 5 != 4 && rng.next_u64() % 100 < percent);
            if set {
                x[i * d + j] = (rng.next_u64() % 1000) as f64 / 250.0 - 1.0;
            }
        }
    }
    x
}

fn kernels() -> [Kernel; 4] {
    [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: Some(0.3) },
        Kernel::Sigmoid {
            gamma: Some(0.1),
            coef0: 0.0,
        },
    ]
}

fn cpu64(k: usize) -> KernelKMeans {
    KernelKMeans::new(k)
        .device(DeviceSpec::Cpu)
        .dtype(DType::F64)
        .algorithm(Algorithm::Stored)
}

#[test]
fn sparse_and_dense_fits_agree_in_f64_for_every_kernel() {
    let (n, d, k) = (57, 31, 4);
    let x = sparse_points(11, n, d, 12);
    let csr = CsrMatrix::from_dense(n, d, &x).unwrap();
    assert!(csr.density() < 0.25, "density {}", csr.density());
    let y = sparse_points(12, 9, d, 12);
    let y_csr = CsrMatrix::from_dense(9, d, &y).unwrap();
    let weights: Vec<f64> = (0..n).map(|i| (i % 3) as f64 * 0.5 + 0.25).collect();
    for kernel in kernels() {
        for weighted in [false, true] {
            let mut builder = cpu64(k).kernel(kernel).max_iter(50);
            if weighted {
                builder = builder.sample_weight(&weights);
            }
            let what = format!("{kernel:?} weighted={weighted}");
            let dense = builder.fit(Points::new(n, d, &x).unwrap()).unwrap();
            let sparse = builder.fit_sparse(&csr).unwrap();
            assert_eq!(sparse.labels, dense.labels, "{what}: labels");
            assert_eq!(sparse.iterations, dense.iterations, "{what}: iterations");
            let scale = 1.0 + dense.objective.abs();
            assert!(
                (sparse.objective - dense.objective).abs() <= 1e-9 * scale,
                "{what}: objective {} against {}",
                sparse.objective,
                dense.objective
            );
            for (s, t) in sparse
                .objective_history
                .iter()
                .zip(&dense.objective_history)
            {
                assert!((s - t).abs() <= 1e-9 * (1.0 + t.abs()), "{what}: history");
            }
            assert!(sparse.algorithm.summary.contains("sparse"), "{what}");
            // Predictions: sparse new points on the sparse model, dense ones on both.
            let want = dense.predict(Points::new(9, d, &y).unwrap()).unwrap();
            let model = sparse.model.as_ref().unwrap();
            assert!(model.is_sparse());
            assert_eq!(
                model.predict_sparse(&y_csr).unwrap(),
                want,
                "{what}: predict"
            );
            assert_eq!(
                sparse.predict(Points::new(9, d, &y).unwrap()).unwrap(),
                want,
                "{what}: predict dense points"
            );
            let dense_model = dense.model.as_ref().unwrap();
            assert_eq!(dense_model.predict_sparse(&y_csr).unwrap(), want, "{what}");
        }
    }
}

#[test]
fn sparse_fits_in_f32_match_f64_on_separated_groups() {
    // Two groups of points on disjoint features.
    let (n, d) = (40, 24);
    let mut x = vec![0.0; n * d];
    for i in 0..n {
        let base = if i < n / 2 { 0 } else { d / 2 };
        for j in 0..3 {
            x[i * d + base + (i + j * 5) % (d / 2)] = 1.0 + (i % 7) as f64 * 0.1;
        }
    }
    let csr = CsrMatrix::from_dense(n, d, &x).unwrap();
    let f64_fit = cpu64(2).fit_sparse(&csr).unwrap();
    let f32_fit = cpu64(2).dtype(DType::F32).fit_sparse(&csr).unwrap();
    assert_eq!(f32_fit.labels, f64_fit.labels);
    assert_eq!(f32_fit.iterations, f64_fit.iterations);
    assert!((f32_fit.objective - f64_fit.objective).abs() <= 1e-5 * f64_fit.objective.abs());
}

#[test]
fn a_libsvm_file_clusters_sparse_as_it_does_dense() {
    let dir = std::env::temp_dir().join(format!("popcorn-sparse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("points.libsvm");
    let (n, d) = (30, 50);
    let x = sparse_points(5, n, d, 8);
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!("{}", i % 2));
        for j in 0..d {
            if x[i * d + j] != 0.0 {
                text.push_str(&format!(" {}:{}", j + 1, x[i * d + j]));
            }
        }
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let sparse = load_libsvm_sparse(&path, None).unwrap();
    let dense = load_libsvm(&path, None).unwrap();
    let builder = cpu64(3).kernel(Kernel::Gaussian { gamma: None });
    let a = builder.fit_sparse(&sparse.x).unwrap();
    let b = builder.fit(&dense).unwrap();
    assert_eq!(a.labels, b.labels);
    assert!((a.objective - b.objective).abs() <= 1e-9 * (1.0 + b.objective.abs()));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_sparse_points_cannot_do_is_a_clear_error() {
    let x = sparse_points(3, 10, 6, 30);
    let csr = CsrMatrix::from_dense(10, 6, &x).unwrap();
    fn message<T>(r: Result<T, FitError>) -> String {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }
    let e = message(cpu64(2).zscore(true).fit_sparse(&csr));
    assert!(e.contains("zscore would make sparse points dense"), "{e}");
    let e = message(cpu64(2).algorithm(Algorithm::Recompute).fit_sparse(&csr));
    assert!(
        e.contains("the recompute algorithm needs dense points"),
        "{e}"
    );
    let e = message(cpu64(2).kernel(Kernel::Precomputed).fit_sparse(&csr));
    assert!(e.contains("precomputed"), "{e}");
    let e = message(cpu64(11).fit_sparse(&csr));
    assert!(e.contains("k = 11"), "{e}");
    // Auto takes the stored kernel matrix.
    let fit = KernelKMeans::new(2)
        .device(DeviceSpec::Cpu)
        .fit_sparse(&csr)
        .unwrap();
    assert_eq!(fit.algorithm.algorithm, Algorithm::Stored);
    let model = fit.model.as_ref().unwrap();
    let other = CsrMatrix::from_dense(1, 5, &[1.0, 0.0, 0.0, 0.0, 2.0]).unwrap();
    let e = message(model.predict_sparse(&other));
    assert!(
        e.contains("fitted on 6 features, the new points have 5"),
        "{e}"
    );
    // The model's parts keep the points sparse.
    assert!(model.parts().x.is_empty());
    assert_eq!(model.parts().x_sparse.as_ref(), Some(&csr));
}

#[test]
fn a_sparse_model_round_trips_through_its_parts_kept_sparse() {
    let (n, m, d) = (40, 9, 7);
    let x = sparse_points(21, n, d, 25);
    let y = sparse_points(22, m, d, 25);
    let (csr, ycsr) = (
        CsrMatrix::from_dense(n, d, &x).unwrap(),
        CsrMatrix::from_dense(m, d, &y).unwrap(),
    );
    let w: Vec<f64> = (0..n).map(|i| 0.5 + (i % 4) as f64).collect();
    let fit = cpu64(3)
        .kernel(Kernel::Gaussian { gamma: Some(0.4) })
        .sample_weight(&w)
        .fit_sparse(&csr)
        .unwrap();
    let model = fit.model.as_ref().unwrap();
    let parts = model.parts();
    // Nothing made dense: the CSR arrays as fitted, no dense values.
    assert!(parts.x.is_empty());
    assert_eq!(parts.x_sparse.as_ref(), Some(&csr));
    let ctx = || {
        Context::new(DeviceSpec::Cpu)
            .unwrap()
            .with_dtype(DType::F64)
    };
    let again = Model::from_parts(ctx(), parts.clone()).unwrap();
    assert!(again.is_sparse());
    assert_eq!(again.parts(), parts);
    let expected = model.predict_sparse(&ycsr).unwrap();
    assert_eq!(again.predict_sparse(&ycsr).unwrap(), expected);
    assert_eq!(
        again.predict(Points::new(m, d, &y).unwrap()).unwrap(),
        expected
    );
    // The dense fit of the same points predicts the same (an independent reference).
    let dense = cpu64(3)
        .kernel(Kernel::Gaussian { gamma: Some(0.4) })
        .sample_weight(&w)
        .fit(Points::new(n, d, &x).unwrap())
        .unwrap();
    assert_eq!(dense.labels, fit.labels);
    assert_eq!(
        dense.predict(Points::new(m, d, &y).unwrap()).unwrap(),
        expected
    );
    // Sparse parts that disagree with the rest are refused.
    let other = CsrMatrix::from_dense(n - 1, d, &x[..(n - 1) * d]).unwrap();
    let spoiled: [ModelParts; 3] = [
        ModelParts {
            x_sparse: Some(other),
            ..parts.clone()
        },
        ModelParts {
            x: x.clone(),
            ..parts.clone()
        },
        ModelParts {
            kernel: Kernel::Precomputed,
            d: n,
            ..parts.clone()
        },
    ];
    for p in spoiled {
        let e = Model::from_parts(ctx(), p).expect_err("accepted");
        assert!(matches!(e, FitError::Input(_)), "{e:?}");
    }
}

#[test]
fn sparse_points_too_large_to_make_dense_are_an_error_on_a_dense_model() {
    // A dense model of 10^6 features; 10^6 new sparse points would be 8 TB dense.
    let d = 1_000_000;
    let mut x = vec![0.0; 2 * d];
    x[0] = 1.0;
    x[d + 1] = 2.0;
    let fit = cpu64(2)
        .kernel(Kernel::Linear)
        .fit(Points::new(2, d, &x).unwrap())
        .unwrap();
    let model = fit.model.as_ref().unwrap();
    let rows = 1_000_000;
    let mut row_ptr = vec![1; rows + 1];
    row_ptr[0] = 0;
    let y = CsrMatrix::new(rows, d, row_ptr, vec![0], vec![1.0]).unwrap();
    let e = model.predict_sparse(&y).expect_err("made dense");
    assert!(matches!(e, FitError::Input(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("1000000 x 1000000 sparse values is too large"),
        "{e}"
    );
    // A small one is made dense and predicted as the same points dense.
    let small = CsrMatrix::new(2, d, vec![0, 1, 2], vec![0, 1], vec![1.0, 2.0]).unwrap();
    assert_eq!(model.predict_sparse(&small).unwrap(), fit.labels);
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// 20,000 x 100,000 at 0.1% density (2 million entries): dense, the points alone are 8 GB in
/// f32. Run with `cargo test --release --test kkmeans_sparse -- --ignored --nocapture`.
#[test]
#[ignore = "about 10 s in release on 2 cores; reports the peak memory"]
fn a_large_sparse_libsvm_file_clusters_in_little_memory() {
    let (n, d, per_row) = (20_000usize, 100_000usize, 100usize);
    let dir = std::env::temp_dir().join(format!("popcorn-sparse-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.libsvm");
    let mut rng = SplitMix64::new(9);
    let mut text = String::with_capacity(n * per_row * 12);
    for i in 0..n {
        // Ten topics of 10,000 features, in runs of 7 points (not the `i mod k` start); a
        // point draws most features from its topic.
        let topic = (i / 7) % 10;
        let mut cols: Vec<usize> = (0..per_row)
            .map(|t| {
                let r = rng.next_u64() as usize;
                if t % 4 == 0 {
                    r % d
                } else {
                    topic * (d / 10) + r % (d / 10)
                }
            })
            .collect();
        cols.sort_unstable();
        cols.dedup();
        text.push_str(&topic.to_string());
        for c in cols {
            text.push_str(&format!(
                " {}:{:.3}",
                c + 1,
                0.1 + (rng.next_u64() % 900) as f64 / 1000.0
            ));
        }
        text.push('\n');
    }
    std::fs::write(&path, &text).unwrap();
    drop(text);
    let start = std::time::Instant::now();
    let data = load_libsvm_sparse(&path, Some(d)).unwrap();
    let load_s = start.elapsed().as_secs_f64();
    assert!(
        (data.x.density() - 0.001).abs() < 0.0002,
        "{}",
        data.x.density()
    );
    let fit = KernelKMeans::new(10)
        .device(DeviceSpec::Cpu)
        .kernel(Kernel::Linear)
        .max_iter(10)
        .fit_sparse(&data.x)
        .unwrap();
    let peak = peak_rss().unwrap_or(0);
    let truth = data.labels.clone().unwrap();
    let labels: Vec<i64> = fit.labels.iter().map(|&l| i64::from(l)).collect();
    let ari = popcorn::metrics::adjusted_rand_index(&truth, &labels);
    println!(
        "20000 x 100000 at {:.3}% ({} entries): load {load_s:.2} s, kernel matrix {:.2} s, \
         {} iterations {:.2} s, ARI {ari:.3}, peak RSS {:.2} GB (dense points: 8 GB f32, 16 GB f64)",
        data.x.density() * 100.0,
        data.x.nnz(),
        fit.timings.kernel_matrix_s,
        fit.iterations,
        fit.timings.iterations_s,
        peak as f64 / 1e9
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // K is 1.6 GB in f32; the points about 32 MB. Far below the dense 8 GB.
    assert!(peak < 3_000_000_000, "peak RSS {peak} bytes");
    assert!(fit.objective.is_finite());
}
