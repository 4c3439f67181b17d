//! Behaviour of the Kernel K-means library, checked against independent f64 references written
//! as plain loops here: the objective never increases (PSD kernels), converged labels are their
//! own argmin, edge cases (k = 1, k = n, duplicates, constant features, identical points), the
//! rings that only a gaussian kernel separates, input errors, initialisations, stopping rules,
//! predict, and f32 against f64. A GPU variant runs when a GPU is present.

use popcorn::kkmeans::{FitError, FitResult, Init, Kernel, KernelKMeans, Points};
use popcorn::metrics::adjusted_rand_index;
use popcorn::{DType, DeviceSpec};

mod common;

use common::SplitMix64;

// ---------------------------------------------------------------------------------------------
// Independent references (f64 loops).
// ---------------------------------------------------------------------------------------------

/// kappa(a, b) for the explicit kernels (a gaussian or sigmoid without gamma uses 1/d).
fn kappa(kernel: &Kernel, a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let default_gamma = 1.0 / a.len() as f64;
    match *kernel {
        Kernel::Linear => dot,
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } => (gamma * dot + coef0).powf(degree),
        Kernel::Gaussian { gamma } => {
            let sq: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
            (-gamma.unwrap_or(default_gamma) * sq).exp()
        }
        Kernel::Sigmoid { gamma, coef0 } => (gamma.unwrap_or(default_gamma) * dot + coef0).tanh(),
        Kernel::Precomputed => panic!("no kappa for a precomputed kernel"),
    }
}

/// The `n x n` kernel matrix of row-major points `x` (`d` features).
fn kernel_matrix(kernel: &Kernel, x: &[f64], d: usize) -> Vec<f64> {
    let n = x.len() / d;
    let mut k = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            k[i * n + j] = kappa(kernel, &x[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
        }
    }
    k
}

/// The `m x n` kernel values of new points `y` against training points `x`.
fn cross_matrix(kernel: &Kernel, y: &[f64], x: &[f64], d: usize) -> Vec<f64> {
    let (m, n) = (y.len() / d, x.len() / d);
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = kappa(kernel, &y[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
        }
    }
    c
}

/// Feature-space squared distances `D` (`n x k`, row-major) of every point to every centroid
/// of `labels`: `K_ii - 2/|c| sum_{j in c} K_ij + 1/|c|^2 sum_{j,l in c} K_jl`, `+inf` for
/// empty clusters.
fn hand_distances(kmat: &[f64], labels: &[u32], k: usize) -> Vec<f64> {
    let n = labels.len();
    let members: Vec<Vec<usize>> = (0..k)
        .map(|c| (0..n).filter(|&i| labels[i] as usize == c).collect())
        .collect();
    let centroid_norm: Vec<f64> = members
        .iter()
        .map(|m| {
            if m.is_empty() {
                return f64::INFINITY;
            }
            let mut s = 0.0;
            for &j in m {
                for &l in m {
                    s += kmat[j * n + l];
                }
            }
            s / (m.len() * m.len()) as f64
        })
        .collect();
    let mut d = vec![0.0; n * k];
    for i in 0..n {
        for c in 0..k {
            if members[c].is_empty() {
                d[i * k + c] = f64::INFINITY;
                continue;
            }
            let s: f64 = members[c].iter().map(|&j| kmat[i * n + j]).sum();
            d[i * k + c] = kmat[i * n + i] - 2.0 * s / members[c].len() as f64 + centroid_norm[c];
        }
    }
    d
}

/// The objective `sum_i D[i, label_i]` of `labels`.
fn hand_objective(kmat: &[f64], labels: &[u32], k: usize) -> f64 {
    let d = hand_distances(kmat, labels, k);
    labels
        .iter()
        .enumerate()
        .map(|(i, &l)| d[i * k + l as usize])
        .sum()
}

/// A tolerance scale for quantities built from `kmat`: the sum of its absolute values over n
/// (at least 1), the size of one point's terms.
fn kernel_scale(kmat: &[f64], n: usize) -> f64 {
    (kmat.iter().map(|v| v.abs()).sum::<f64>() / n as f64).max(1.0)
}

/// Panics unless every point's label attains the minimum of its row of `d` within `tol`.
#[track_caller]
fn assert_labels_are_argmin(what: &str, d: &[f64], labels: &[u32], k: usize, tol: f64) {
    for (i, &l) in labels.iter().enumerate() {
        let row = &d[i * k..(i + 1) * k];
        let min = row.iter().cloned().fold(f64::INFINITY, f64::min);
        let own = row[l as usize];
        assert!(
            own.is_finite(),
            "{what}: point {i} is in empty or infinite cluster {l}: {row:?}"
        );
        assert!(own <= min + tol, "{what}: point {i} has label {l} at distance {own:e}, but the minimum is {min:e} (row {row:?})");
    }
}

/// The number of clusters in `0..k` that no label names.
fn count_empty(labels: &[u32], k: usize) -> usize {
    (0..k as u32).filter(|c| !labels.contains(c)).count()
}

fn ari(truth: &[i64], labels: &[u32]) -> f64 {
    let pred: Vec<i64> = labels.iter().map(|&l| l as i64).collect();
    adjusted_rand_index(truth, &pred)
}

#[track_caller]
fn assert_rel_close(what: &str, got: f64, want: f64, rtol: f64, scale: f64) {
    let tol = rtol * scale.max(want.abs());
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got:e}, expected {want:e} (diff {:e} > {tol:e})",
        (got - want).abs()
    );
}

// ---------------------------------------------------------------------------------------------
// Data.
// ---------------------------------------------------------------------------------------------

/// `n x d` values uniform in [-1, 1).
fn uniform_points(seed: u64, n: usize, d: usize) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    common::random_values(&mut rng, n * d)
}

/// Shuffles rows of `x` (`d` features) together with `truth`, Fisher-Yates.
fn shuffle_rows(rng: &mut SplitMix64, x: &mut [f64], truth: &mut [i64], d: usize) {
    for i in (1..truth.len()).rev() {
        let j = rng.below(i + 1);
        truth.swap(i, j);
        for f in 0..d {
            x.swap(i * d + f, j * d + f);
        }
    }
}

/// `per` points around each of `centers` (uniform in a box of half-width `spread`), shuffled;
/// returns the points and the index of each point's center.
fn blobs(seed: u64, centers: &[&[f64]], per: usize, spread: f64) -> (Vec<f64>, Vec<i64>) {
    let d = centers[0].len();
    let mut rng = SplitMix64::new(seed);
    let mut x = Vec::new();
    let mut truth = Vec::new();
    for (c, center) in centers.iter().enumerate() {
        for _ in 0..per {
            for v in center.iter() {
                x.push(v + rng.uniform(-spread, spread));
            }
            truth.push(c as i64);
        }
    }
    shuffle_rows(&mut rng, &mut x, &mut truth, d);
    (x, truth)
}

/// Three well separated blobs in the plane.
const BLOB_CENTERS: [&[f64]; 3] = [&[0.0, 0.0], &[6.0, 0.0], &[0.0, 6.0]];

/// A standard normal value (Box-Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u = 1.0 - rng.unit();
    let v = rng.unit();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// `n` points on two concentric rings (radii 0.25 and 1, normal radial noise 0.05), half on
/// each, shuffled; the true label is the ring.
fn rings(seed: u64, n: usize) -> (Vec<f64>, Vec<i64>) {
    let mut rng = SplitMix64::new(seed);
    let mut x = Vec::with_capacity(2 * n);
    let mut truth = Vec::with_capacity(n);
    for i in 0..n {
        let ring = i % 2;
        let radius = [0.25, 1.0][ring] + 0.05 * normal(&mut rng);
        let angle = rng.unit() * std::f64::consts::TAU;
        x.push(radius * angle.cos());
        x.push(radius * angle.sin());
        truth.push(ring as i64);
    }
    shuffle_rows(&mut rng, &mut x, &mut truth, 2);
    (x, truth)
}

/// The PSD kernels with explicit parameters.
fn psd_kernels() -> [Kernel; 3] {
    [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: Some(1.5) },
    ]
}

/// All explicit kernels.
fn all_kernels() -> [Kernel; 4] {
    [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: Some(1.5) },
        Kernel::Sigmoid {
            gamma: Some(0.5),
            coef0: 0.0,
        },
    ]
}

/// A CPU f64 builder.
fn cpu64(k: usize) -> KernelKMeans {
    KernelKMeans::new(k)
        .device(DeviceSpec::Cpu)
        .dtype(DType::F64)
}

#[track_caller]
fn fit(builder: &KernelKMeans, x: &[f64], d: usize) -> FitResult {
    let points = Points::new(x.len() / d, d, x).expect("valid points");
    builder
        .fit(points)
        .unwrap_or_else(|e| panic!("fit failed ({builder:?}): {e}"))
}

#[track_caller]
fn assert_no_nan(what: &str, f: &FitResult) {
    assert!(f.objective.is_finite(), "{what}: objective {}", f.objective);
    assert!(
        f.objective_history.iter().all(|v| v.is_finite()),
        "{what}: history {:?}",
        f.objective_history
    );
    let k = f.params.k;
    assert!(
        f.labels.iter().all(|&l| (l as usize) < k),
        "{what}: a label is not below k = {k}: {:?}",
        f.labels
    );
}

// ---------------------------------------------------------------------------------------------
// The objective and the fixed point.
// ---------------------------------------------------------------------------------------------

#[test]
fn objective_never_increases_for_psd_kernels() {
    let d = 3;
    let x = uniform_points(11, 57, d);
    for kernel in psd_kernels() {
        for seed in [1u64, 2, 3] {
            for init in [Init::Random { seed }, Init::KMeansPlusPlus { seed }] {
                let what = format!("{} {init:?}", kernel.name());
                let f = fit(
                    &cpu64(5).kernel(kernel).init(init.clone()).max_iter(200),
                    &x,
                    d,
                );
                assert!(!f.objective_history.is_empty(), "{what}: no history");
                for (i, w) in f.objective_history.windows(2).enumerate() {
                    assert!(
                        w[1] <= w[0] + 1e-12 * w[0].abs(),
                        "{what}: objective rose at iteration {}: {} -> {}",
                        i + 2,
                        w[0],
                        w[1]
                    );
                }
                let last = *f.objective_history.last().unwrap();
                assert!(
                    f.objective <= last + 1e-12 * last.abs(),
                    "{what}: final {} above last {last}",
                    f.objective
                );
                assert!(f.converged, "{what}: did not converge in 200 iterations");
                assert_eq!(f.iterations, f.objective_history.len(), "{what}");
            }
        }
    }
}

#[test]
fn converged_labels_are_their_own_argmin_for_every_kernel() {
    let d = 3;
    let x = uniform_points(21, 41, d);
    let k = 4;
    for kernel in all_kernels() {
        for init in [
            Init::Mod,
            Init::KMeansPlusPlus { seed: 7 },
            Init::Random { seed: 8 },
        ] {
            let what = format!("{} {init:?}", kernel.name());
            let f = fit(
                &cpu64(k).kernel(kernel).init(init.clone()).max_iter(300),
                &x,
                d,
            );
            let kmat = kernel_matrix(&kernel, &x, d);
            let scale = kernel_scale(&kmat, x.len() / d);
            if !kernel.is_psd() && !f.converged {
                // A non-PSD kernel may cycle; then there is no fixed point to check.
                continue;
            }
            assert!(f.converged, "{what}: did not converge");
            let dist = hand_distances(&kmat, &f.labels, k);
            assert_labels_are_argmin(&what, &dist, &f.labels, k, 1e-9 * scale);
            assert_rel_close(
                &format!("{what}: objective"),
                f.objective,
                hand_objective(&kmat, &f.labels, k),
                1e-9,
                scale,
            );
            assert_eq!(
                f.empty_clusters,
                count_empty(&f.labels, k),
                "{what}: empty clusters"
            );
        }
    }
}

#[test]
fn history_starts_with_the_objective_of_the_initial_labels() {
    let d = 2;
    let x = uniform_points(5, 23, d);
    let k = 3;
    let mut rng = SplitMix64::new(99);
    let init = common::random_labels(&mut rng, 23, k);
    for kernel in all_kernels() {
        let kmat = kernel_matrix(&kernel, &x, d);
        let scale = kernel_scale(&kmat, 23);
        let f = fit(
            &cpu64(k).kernel(kernel).init(Init::Labels(init.clone())),
            &x,
            d,
        );
        assert_rel_close(
            kernel.name(),
            f.objective_history[0],
            hand_objective(&kmat, &init, k),
            1e-9,
            scale,
        );
        let modk: Vec<u32> = (0..23).map(|i| (i % k) as u32).collect();
        let f = fit(&cpu64(k).kernel(kernel), &x, d);
        assert_rel_close(
            kernel.name(),
            f.objective_history[0],
            hand_objective(&kmat, &modk, k),
            1e-9,
            scale,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Edge cases.
// ---------------------------------------------------------------------------------------------

#[test]
fn one_cluster_takes_every_point_in_one_iteration() {
    let d = 3;
    let n = 13;
    let x = uniform_points(31, n, d);
    for kernel in all_kernels() {
        for init in [
            Init::Mod,
            Init::Random { seed: 4 },
            Init::KMeansPlusPlus { seed: 4 },
        ] {
            let what = format!("{} {init:?}", kernel.name());
            // A single point: its own cluster, objective 0, predicted back to cluster 0.
            let one = &x[..d];
            let f = fit(&cpu64(1).kernel(kernel).init(init.clone()), one, d);
            assert_eq!(
                (f.labels.clone(), f.iterations, f.converged),
                (vec![0], 1, true),
                "{what}: n = 1"
            );
            assert!(
                f.objective.abs() <= 1e-12,
                "{what}: n = 1 objective {}",
                f.objective
            );
            assert_eq!(
                f.predict(Points::new(1, d, one).unwrap()).expect("predict"),
                vec![0]
            );
            let f = fit(&cpu64(1).kernel(kernel).init(init), &x, d);
            let kmat = kernel_matrix(&kernel, &x, d);
            let trace: f64 = (0..n).map(|i| kmat[i * n + i]).sum();
            let total: f64 = kmat.iter().sum();
            assert_eq!(f.labels, vec![0; n], "{what}");
            assert_eq!(f.iterations, 1, "{what}");
            assert!(f.converged, "{what}");
            assert_eq!(f.empty_clusters, 0, "{what}");
            assert_rel_close(
                &what,
                f.objective,
                trace - total / n as f64,
                1e-10,
                kernel_scale(&kmat, n),
            );
        }
    }
}

#[test]
fn as_many_clusters_as_points_puts_every_point_alone() {
    let d = 2;
    let n = 9;
    let x = uniform_points(41, n, d);
    for kernel in psd_kernels() {
        let kmat = kernel_matrix(&kernel, &x, d);
        let trace: f64 = (0..n).map(|i| kmat[i * n + i]).sum();
        // i mod n puts every point alone from the start; a permutation too.
        let perm: Vec<u32> = (0..n as u32).map(|i| (i * 4 + 3) % n as u32).collect();
        for init in [Init::Mod, Init::Labels(perm.clone())] {
            let what = format!("{} {init:?}", kernel.name());
            let f = fit(&cpu64(n).kernel(kernel).init(init.clone()), &x, d);
            let mut sorted = f.labels.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..n as u32).collect::<Vec<_>>(),
                "{what}: not one point per cluster"
            );
            assert!(f.converged, "{what}");
            assert_eq!(f.iterations, 1, "{what}");
            assert_eq!(f.empty_clusters, 0, "{what}");
            assert!(
                f.objective.abs() <= 1e-12 * trace,
                "{what}: objective {} is not 0",
                f.objective
            );
        }
    }
}

#[test]
fn duplicate_points_share_a_label_and_give_no_nan() {
    let d = 3;
    let distinct = 10;
    let base = uniform_points(51, distinct, d);
    // Point i appears at rows i, i + 10 and i + 20.
    let x: Vec<f64> = (0..3).flat_map(|_| base.iter().cloned()).collect();
    let n = 3 * distinct;
    // k = 4, and k = 12, more clusters than distinct points (some must stay empty).
    for (kernel, k) in [
        (Kernel::Linear, 4),
        (Kernel::Gaussian { gamma: Some(1.0) }, 4),
        (Kernel::Gaussian { gamma: Some(1.0) }, 12),
    ] {
        for init in [
            Init::Mod,
            Init::Random { seed: 3 },
            Init::KMeansPlusPlus { seed: 3 },
        ] {
            let what = format!("{} k = {k} {init:?}", kernel.name());
            let f = fit(&cpu64(k).kernel(kernel).init(init), &x, d);
            assert_no_nan(&what, &f);
            for i in 0..distinct {
                assert_eq!(
                    f.labels[i],
                    f.labels[i + distinct],
                    "{what}: copies of point {i}"
                );
                assert_eq!(
                    f.labels[i],
                    f.labels[i + 2 * distinct],
                    "{what}: copies of point {i}"
                );
            }
            let kmat = kernel_matrix(&kernel, &x, d);
            assert_rel_close(
                &what,
                f.objective,
                hand_objective(&kmat, &f.labels, k),
                1e-9,
                kernel_scale(&kmat, n),
            );
            assert_eq!(f.empty_clusters, count_empty(&f.labels, k), "{what}");
            if k > distinct {
                assert!(
                    f.empty_clusters >= k - distinct,
                    "{what}: {} empty",
                    f.empty_clusters
                );
            }
        }
    }
}

#[test]
fn gaussian_and_sigmoid_gamma_default_to_one_over_d() {
    let d = 4;
    let x = uniform_points(55, 21, d);
    let init = Init::KMeansPlusPlus { seed: 6 };
    for (default, explicit) in [
        (
            Kernel::Gaussian { gamma: None },
            Kernel::Gaussian { gamma: Some(0.25) },
        ),
        (
            Kernel::Sigmoid {
                gamma: None,
                coef0: 0.5,
            },
            Kernel::Sigmoid {
                gamma: Some(0.25),
                coef0: 0.5,
            },
        ),
    ] {
        let a = fit(&cpu64(3).kernel(default).init(init.clone()), &x, d);
        let b = fit(&cpu64(3).kernel(explicit).init(init.clone()), &x, d);
        assert_eq!(a.labels, b.labels, "{}", default.name());
        assert_eq!(
            a.objective_history,
            b.objective_history,
            "{}",
            default.name()
        );
        let kmat = kernel_matrix(&explicit, &x, d);
        assert_rel_close(
            default.name(),
            a.objective,
            hand_objective(&kmat, &a.labels, 3),
            1e-9,
            kernel_scale(&kmat, 21),
        );
    }
}

#[test]
fn a_constant_feature_gives_no_nan_with_or_without_zscore() {
    let (xy, truth) = blobs(61, &BLOB_CENTERS, 15, 0.5);
    let n = truth.len();
    // Features: x, the constant 7.5, y.
    let x: Vec<f64> = xy.chunks(2).flat_map(|p| [p[0], 7.5, p[1]]).collect();
    let d = 3;
    for kernel in [Kernel::Linear, Kernel::Gaussian { gamma: Some(0.5) }] {
        for zscore in [false, true] {
            let what = format!("{} zscore {zscore}", kernel.name());
            let f = fit(
                &cpu64(3)
                    .kernel(kernel)
                    .zscore(zscore)
                    .init(Init::KMeansPlusPlus { seed: 2 })
                    .n_init(5),
                &x,
                d,
            );
            assert_no_nan(&what, &f);
            assert_eq!(ari(&truth, &f.labels), 1.0, "{what}: blobs not found");
            // New points whose constant feature differs from the training value still predict.
            let new = [0.1, 8.0, -0.1, 6.1, 7.0, 0.2, 0.0, 7.5, 5.9];
            let p = f
                .predict(Points::new(3, d, &new).unwrap())
                .expect("predict");
            let blob_label = |b: i64| f.labels[truth.iter().position(|t| *t == b).unwrap()];
            assert_eq!(
                p,
                vec![blob_label(0), blob_label(1), blob_label(2)],
                "{what}: predictions"
            );
        }
    }
    // A data set whose only feature is constant: every point is the same after z-scoring.
    let flat = vec![3.0; n];
    let f = fit(
        &cpu64(2)
            .kernel(Kernel::Gaussian { gamma: Some(1.0) })
            .zscore(true),
        &flat,
        1,
    );
    assert_no_nan("constant only feature", &f);
    assert!(f.objective.abs() <= 1e-12, "objective {}", f.objective);
}

#[test]
fn identical_points_give_objective_zero_and_report_empty_clusters() {
    let n = 9;
    let x: Vec<f64> = (0..n).flat_map(|_| [1.5, -2.0]).collect();
    let k = 3;
    for kernel in psd_kernels() {
        for init in [
            Init::Mod,
            Init::Random { seed: 1 },
            Init::KMeansPlusPlus { seed: 1 },
        ] {
            for zscore in [false, true] {
                let what = format!("{} {init:?} zscore {zscore}", kernel.name());
                let f = fit(
                    &cpu64(k).kernel(kernel).init(init.clone()).zscore(zscore),
                    &x,
                    2,
                );
                assert_no_nan(&what, &f);
                assert!(
                    f.objective.abs() <= 1e-12 * kappa(&kernel, &x[..2], &x[..2]).abs().max(1.0),
                    "{what}: objective {}",
                    f.objective
                );
                assert!(
                    f.labels.iter().all(|&l| l == f.labels[0]),
                    "{what}: identical points split: {:?}",
                    f.labels
                );
                assert_eq!(f.empty_clusters, k - 1, "{what}: empty clusters");
                assert!(f.converged, "{what}");
                // Predicting never picks an empty cluster.
                let p = f
                    .predict(Points::new(2, 2, &[1.5, -2.0, 0.0, 0.0]).unwrap())
                    .expect("predict");
                assert_eq!(p, vec![f.labels[0]; 2], "{what}: predictions");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What kernels buy: the rings.
// ---------------------------------------------------------------------------------------------

#[test]
fn gaussian_kernel_separates_the_rings_and_linear_does_not() {
    let (x, truth) = rings(2024, 700);
    let gaussian = fit(
        &cpu64(2).kernel(Kernel::Gaussian { gamma: Some(4.0) }),
        &x,
        2,
    );
    let a = ari(&truth, &gaussian.labels);
    assert!(a >= 0.99, "gaussian: ARI {a}");
    assert!(gaussian.converged);
    let linear = fit(&cpu64(2).kernel(Kernel::Linear), &x, 2);
    let a = ari(&truth, &linear.labels);
    assert!(a < 0.5, "linear: ARI {a}");
    // The ring clustering has the lower gaussian objective than the linear kernel's halves.
    let kmat = kernel_matrix(&Kernel::Gaussian { gamma: Some(4.0) }, &x, 2);
    let halves = hand_objective(&kmat, &linear.labels, 2);
    assert!(
        gaussian.objective < halves,
        "gaussian objective {} vs halves {halves}",
        gaussian.objective
    );
}

// ---------------------------------------------------------------------------------------------
// Errors, not panics.
// ---------------------------------------------------------------------------------------------

#[track_caller]
fn expect_err(what: &str, r: Result<FitResult, FitError>) -> FitError {
    match r {
        Ok(f) => panic!("{what}: expected an error, got labels {:?}", f.labels),
        Err(e) => e,
    }
}

#[test]
fn bad_k_is_an_error() {
    let x = uniform_points(1, 10, 2);
    let p = Points::new(10, 2, &x).unwrap();
    let e = expect_err("k = 0", cpu64(0).fit(p));
    assert!(
        matches!(e, FitError::K(_)) && e.to_string().contains("k = 0"),
        "{e}"
    );
    let e = expect_err("k > n", cpu64(11).fit(p));
    assert!(
        matches!(e, FitError::K(_))
            && e.to_string().contains("11")
            && e.to_string().contains("n = 10"),
        "{e}"
    );
    let e = expect_err(
        "precomputed k > n",
        cpu64(4)
            .kernel(Kernel::Precomputed)
            .fit_precomputed(&[1.0; 9], 3),
    );
    assert!(matches!(e, FitError::K(_)), "{e}");
}

#[test]
fn non_finite_values_are_errors_naming_point_and_feature() {
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut x = uniform_points(2, 6, 3);
        x[4 * 3 + 2] = bad;
        let e = match Points::new(6, 3, &x) {
            Ok(_) => panic!("{bad}: accepted"),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert!(matches!(e, FitError::Input(_)), "{msg}");
        assert!(
            msg.contains("point 4") && msg.contains("feature 2"),
            "{bad}: {msg}"
        );
        // The same through a data set.
        let ds = popcorn::io::Dataset {
            n: 6,
            d: 3,
            x: x.clone(),
            labels: None,
            source: "test".into(),
        };
        let e = expect_err("dataset", cpu64(2).fit(&ds));
        assert!(
            e.to_string().contains("point 4") && e.to_string().contains("feature 2"),
            "{e}"
        );
    }
    assert!(matches!(
        Points::new(3, 2, &[0.0; 5]),
        Err(FitError::Input(_))
    ));
    assert!(matches!(Points::new(0, 2, &[]), Err(FitError::Input(_))));
    assert!(matches!(Points::new(2, 0, &[]), Err(FitError::Input(_))));
}

#[test]
fn bad_initial_labels_are_errors() {
    let x = uniform_points(3, 10, 2);
    let p = Points::new(10, 2, &x).unwrap();
    let e = expect_err(
        "short labels",
        cpu64(3).init(Init::Labels(vec![0, 1, 2])).fit(p),
    );
    assert!(
        matches!(e, FitError::InitLabels(_)) && e.to_string().contains("10 points"),
        "{e}"
    );
    let mut labels = vec![0u32; 10];
    labels[6] = 3;
    let e = expect_err("label >= k", cpu64(3).init(Init::Labels(labels)).fit(p));
    assert!(
        matches!(e, FitError::InitLabels(_)) && e.to_string().contains("point 6"),
        "{e}"
    );
}

#[test]
fn bad_parameters_are_errors() {
    let x = uniform_points(4, 10, 2);
    let p = Points::new(10, 2, &x).unwrap();
    let cases: Vec<(&str, KernelKMeans, &str)> = vec![
        ("max_iter = 0", cpu64(2).max_iter(0), "max_iter"),
        (
            "n_init = 0",
            cpu64(2).n_init(0).init(Init::Random { seed: 1 }),
            "n_init",
        ),
        ("negative tol", cpu64(2).tol(-1.0), "tol"),
        ("NaN tol", cpu64(2).tol(f64::NAN), "tol"),
        (
            "NaN gaussian gamma",
            cpu64(2).kernel(Kernel::Gaussian {
                gamma: Some(f64::NAN),
            }),
            "gamma",
        ),
        (
            "infinite gaussian gamma",
            cpu64(2).kernel(Kernel::Gaussian {
                gamma: Some(f64::INFINITY),
            }),
            "gamma",
        ),
        (
            "infinite sigmoid gamma",
            cpu64(2).kernel(Kernel::Sigmoid {
                gamma: Some(f64::NEG_INFINITY),
                coef0: 0.0,
            }),
            "gamma",
        ),
        (
            "NaN polynomial gamma",
            cpu64(2).kernel(Kernel::Polynomial {
                gamma: f64::NAN,
                coef0: 1.0,
                degree: 2.0,
            }),
            "gamma",
        ),
        (
            "infinite polynomial degree",
            cpu64(2).kernel(Kernel::Polynomial {
                gamma: 1.0,
                coef0: 1.0,
                degree: f64::INFINITY,
            }),
            "degree",
        ),
        (
            "precomputed through fit",
            cpu64(2).kernel(Kernel::Precomputed),
            "fit_precomputed",
        ),
    ];
    for (what, builder, word) in cases {
        let e = expect_err(what, builder.fit(p));
        assert!(matches!(e, FitError::Parameter(_)), "{what}: {e:?}");
        assert!(e.to_string().contains(word), "{what}: {e}");
    }
}

#[test]
fn bad_precomputed_kernels_and_predictions_are_errors() {
    let b = cpu64(2).kernel(Kernel::Precomputed);
    let e = expect_err("wrong size", b.fit_precomputed(&[1.0; 8], 3));
    assert!(
        matches!(e, FitError::Input(_))
            && e.to_string().contains('9')
            && e.to_string().contains('8'),
        "{e}"
    );
    let mut kmat = vec![1.0; 9];
    kmat[5] = f64::NAN;
    let e = expect_err("NaN entry", b.fit_precomputed(&kmat, 3));
    assert!(
        matches!(e, FitError::Input(_)) && e.to_string().contains("(1, 2)"),
        "{e}"
    );

    // A precomputed fit's model predicts from kernel values, not from points.
    let x = uniform_points(6, 5, 2);
    let kmat = kernel_matrix(&Kernel::Linear, &x, 2);
    let f = b.fit_precomputed(&kmat, 5).expect("precomputed fit");
    assert!(f.model.is_some());
    assert!(matches!(
        f.predict(Points::new(1, 2, &[0.0, 0.0]).unwrap()),
        Err(FitError::Parameter(_))
    ));

    // Predicting with the wrong number of features or cross-kernel values.
    let f = fit(&cpu64(2), &x, 2);
    assert!(matches!(
        f.predict(Points::new(1, 3, &[0.0; 3]).unwrap()),
        Err(FitError::Input(_))
    ));
    let model = f.model.as_ref().expect("model");
    assert!(matches!(
        model.predict_precomputed(&[0.0; 9], &[0.0, 0.0]),
        Err(FitError::Input(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// Initialisations.
// ---------------------------------------------------------------------------------------------

#[test]
fn seeded_inits_are_deterministic_and_depend_on_the_seed() {
    let d = 2;
    let x = uniform_points(71, 40, d);
    let kernel = Kernel::Gaussian { gamma: Some(2.0) };
    let makers: [fn(u64) -> Init; 2] = [
        |s| Init::Random { seed: s },
        |s| Init::KMeansPlusPlus { seed: s },
    ];
    for make in makers {
        let a = fit(&cpu64(4).kernel(kernel).init(make(5)), &x, d);
        let b = fit(&cpu64(4).kernel(kernel).init(make(5)), &x, d);
        let what = format!("{:?}", make(5));
        assert_eq!(a.labels, b.labels, "{what}: same seed, different labels");
        assert_eq!(
            a.objective_history, b.objective_history,
            "{what}: same seed, different history"
        );
        // Different seeds start from different labels: different initial objectives.
        let starts: Vec<f64> = (5..9)
            .map(|s| {
                fit(&cpu64(4).kernel(kernel).init(make(s)).max_iter(1), &x, d).objective_history[0]
            })
            .collect();
        for i in 0..starts.len() {
            for j in i + 1..starts.len() {
                assert_ne!(
                    starts[i],
                    starts[j],
                    "{what}: seeds {} and {} start alike",
                    5 + i,
                    5 + j
                );
            }
        }
    }
}

#[test]
fn n_init_keeps_the_best_of_its_runs() {
    let d = 2;
    let x = uniform_points(81, 45, d);
    let kernel = Kernel::Gaussian { gamma: Some(3.0) };
    let k = 5;
    let makers: [fn(u64) -> Init; 2] = [
        |s| Init::Random { seed: s },
        |s| Init::KMeansPlusPlus { seed: s },
    ];
    for make in makers {
        let what = format!("{:?}", make(10));
        let singles: Vec<FitResult> = (10..14)
            .map(|s| fit(&cpu64(k).kernel(kernel).init(make(s)), &x, d))
            .collect();
        let best = fit(&cpu64(k).kernel(kernel).init(make(10)).n_init(4), &x, d);
        let min = singles
            .iter()
            .map(|f| f.objective)
            .fold(f64::INFINITY, f64::min);
        assert_rel_close(&what, best.objective, min, 1e-12, 1.0);
        let winner = &singles[best.best_run];
        assert_eq!(
            best.labels, winner.labels,
            "{what}: labels of run {}",
            best.best_run
        );
        assert_eq!(best.objective, winner.objective, "{what}");
        assert_eq!(
            best.objective_history, winner.objective_history,
            "{what}: history of the best run"
        );
        assert_eq!(best.iterations, winner.iterations, "{what}");
        // Not vacuous: the runs end at different objectives.
        assert!(
            singles.iter().any(|f| f.objective > min * (1.0 + 1e-9)),
            "{what}: all runs ended alike"
        );
    }
    // Deterministic inits run once whatever n_init says.
    let once = fit(&cpu64(k).kernel(kernel).n_init(3), &x, d);
    assert_eq!(once.best_run, 0);
}

#[test]
fn true_labels_of_separated_blobs_converge_in_one_iteration() {
    let (x, truth) = blobs(91, &BLOB_CENTERS, 12, 0.5);
    let labels: Vec<u32> = truth.iter().map(|&t| t as u32).collect();
    for kernel in [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: Some(0.5) },
    ] {
        let f = fit(
            &cpu64(3).kernel(kernel).init(Init::Labels(labels.clone())),
            &x,
            2,
        );
        assert_eq!(f.labels, labels, "{}", kernel.name());
        assert_eq!(f.iterations, 1, "{}", kernel.name());
        assert!(f.converged, "{}", kernel.name());
    }
}

// ---------------------------------------------------------------------------------------------
// Stopping rules.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_large_tolerance_stops_early() {
    let d = 2;
    let n = 150;
    let x = uniform_points(101, n, d);
    let k = 8;
    let kmat = kernel_matrix(&Kernel::Linear, &x, d);
    let base = cpu64(k).init(Init::Random { seed: 12 });
    let plain = fit(&base, &x, d);
    assert!(plain.converged);
    assert!(
        plain.iterations > 3,
        "too easy: {} iterations",
        plain.iterations
    );
    let early = fit(&base.clone().tol(0.5), &x, d);
    assert!(early.converged);
    assert!(
        early.iterations < plain.iterations,
        "{} vs {}",
        early.iterations,
        plain.iterations
    );
    // It stopped at the first iteration whose relative improvement is within the tolerance.
    let h = &early.objective_history;
    assert_eq!(
        h[..],
        plain.objective_history[..h.len()],
        "same path until the stop"
    );
    let within = |w: &[f64]| (w[0] - w[1]).abs() <= 0.5 * w[0].abs();
    let stops: Vec<bool> = h.windows(2).map(within).collect();
    assert_eq!(
        stops.last(),
        Some(&true),
        "stopped without meeting the tolerance: {h:?}"
    );
    assert!(
        stops[..stops.len() - 1].iter().all(|s| !s),
        "should have stopped earlier: {h:?}"
    );
    // The result is the labels the last objective was measured for.
    assert_rel_close(
        "tol objective",
        early.objective,
        hand_objective(&kmat, &early.labels, k),
        1e-9,
        kernel_scale(&kmat, n),
    );
    assert_eq!(early.objective, *early.objective_history.last().unwrap());
    // tol without the check changes nothing.
    let off = fit(&base.clone().tol(0.5).check_convergence(false), &x, d);
    assert_eq!(off.labels, plain.labels);
    assert_eq!(off.iterations, plain.iterations);
}

#[test]
fn reaching_max_iter_reports_not_converged_and_the_returned_labels_objective() {
    let d = 2;
    let n = 150;
    let x = uniform_points(101, n, d);
    let k = 8;
    for kernel in [Kernel::Linear, Kernel::Gaussian { gamma: Some(2.0) }] {
        let kmat = kernel_matrix(&kernel, &x, d);
        let base = cpu64(k).kernel(kernel).init(Init::Random { seed: 12 });
        let full = fit(&base, &x, d);
        assert!(full.iterations > 3, "{}: too easy", kernel.name());
        for m in [1, 2, 3] {
            let what = format!("{} max_iter {m}", kernel.name());
            let f = fit(&base.clone().max_iter(m), &x, d);
            assert!(!f.converged, "{what}");
            assert_eq!(f.iterations, m, "{what}");
            assert_eq!(
                f.objective_history[..],
                full.objective_history[..m],
                "{what}: history"
            );
            assert_rel_close(
                &what,
                f.objective,
                hand_objective(&kmat, &f.labels, k),
                1e-9,
                kernel_scale(&kmat, n),
            );
            // The returned labels are the ones the next iteration of the full run starts from.
            assert_rel_close(&what, f.objective, full.objective_history[m], 1e-12, 1.0);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Predict.
// ---------------------------------------------------------------------------------------------

#[test]
fn predicting_training_points_gives_their_labels() {
    let d = 3;
    let x = uniform_points(111, 37, d);
    let k = 4;
    for kernel in psd_kernels() {
        let f = fit(
            &cpu64(k)
                .kernel(kernel)
                .init(Init::KMeansPlusPlus { seed: 9 }),
            &x,
            d,
        );
        assert!(f.converged);
        let p = f.predict(Points::new(37, d, &x).unwrap()).expect("predict");
        // Equal labels, or a near-tie of the hand distances.
        let kmat = kernel_matrix(&kernel, &x, d);
        let dist = hand_distances(&kmat, &f.labels, k);
        let tol = 1e-9 * kernel_scale(&kmat, 37);
        common::check_labels(kernel.name(), &p, &f.labels, &dist, k, tol)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn new_points_near_a_blob_get_its_cluster() {
    let (x, truth) = blobs(121, &BLOB_CENTERS, 20, 0.6);
    let new = [0.3, -0.2, 6.4, 0.3, -0.4, 5.7, 5.5, -0.5, 0.0, 0.0];
    let new_truth = [0usize, 1, 2, 1, 0];
    for kernel in psd_kernels() {
        let f = fit(
            &cpu64(3)
                .kernel(kernel)
                .init(Init::KMeansPlusPlus { seed: 3 })
                .n_init(4),
            &x,
            2,
        );
        assert_eq!(ari(&truth, &f.labels), 1.0, "{}", kernel.name());
        let blob_label = |b: usize| f.labels[truth.iter().position(|t| *t == b as i64).unwrap()];
        let p = f
            .predict(Points::new(5, 2, &new).unwrap())
            .expect("predict");
        let want: Vec<u32> = new_truth.iter().map(|&b| blob_label(b)).collect();
        assert_eq!(p, want, "{}", kernel.name());
    }
}

#[test]
fn predict_applies_the_training_scaling() {
    // Blobs on wildly different feature scales; z-scoring makes them round.
    let (raw, truth) = blobs(131, &BLOB_CENTERS, 20, 0.6);
    let n = truth.len();
    let x: Vec<f64> = raw
        .chunks(2)
        .flat_map(|p| [1000.0 * p[0] + 50.0, 0.01 * p[1] - 3.0])
        .collect();
    let new_raw = [0.2, 0.1, 5.8, 0.4, 0.1, 6.3, 3.3, 2.9];
    let new: Vec<f64> = new_raw
        .chunks(2)
        .flat_map(|p| [1000.0 * p[0] + 50.0, 0.01 * p[1] - 3.0])
        .collect();
    // Standardise by hand with the training mean and population deviation.
    let stats: Vec<(f64, f64)> = (0..2)
        .map(|f| {
            let mean = (0..n).map(|i| x[i * 2 + f]).sum::<f64>() / n as f64;
            let var = (0..n).map(|i| (x[i * 2 + f] - mean).powi(2)).sum::<f64>() / n as f64;
            (mean, var.sqrt())
        })
        .collect();
    let standardise = |v: &[f64]| -> Vec<f64> {
        v.chunks(2)
            .flat_map(|p| {
                [
                    (p[0] - stats[0].0) / stats[0].1,
                    (p[1] - stats[1].0) / stats[1].1,
                ]
            })
            .collect()
    };
    let kernel = Kernel::Gaussian { gamma: Some(1.0) };
    let init = Init::KMeansPlusPlus { seed: 5 };
    let scaled = fit(
        &cpu64(3).kernel(kernel).init(init.clone()).zscore(true),
        &x,
        2,
    );
    let by_hand = fit(&cpu64(3).kernel(kernel).init(init), &standardise(&x), 2);
    assert_eq!(scaled.labels, by_hand.labels);
    assert_rel_close("objective", scaled.objective, by_hand.objective, 1e-9, 1.0);
    let p = scaled
        .predict(Points::new(4, 2, &new).unwrap())
        .expect("predict");
    let q = by_hand
        .predict(Points::new(4, 2, &standardise(&new)).unwrap())
        .expect("predict");
    assert_eq!(p, q);
    let blob_label = |b: i64| scaled.labels[truth.iter().position(|t| *t == b).unwrap()];
    assert_eq!(ari(&truth, &scaled.labels), 1.0);
    assert_eq!(&p[..3], &[blob_label(0), blob_label(1), blob_label(2)]);
    // The training points themselves predict to their labels.
    assert_eq!(
        scaled
            .predict(Points::new(n, 2, &x).unwrap())
            .expect("predict"),
        scaled.labels
    );
}

#[test]
fn predict_precomputed_agrees_with_predict() {
    let d = 3;
    let x = uniform_points(141, 30, d);
    let y = uniform_points(142, 11, d);
    for kernel in [Kernel::Linear, Kernel::Gaussian { gamma: Some(1.0) }] {
        let f = fit(
            &cpu64(3)
                .kernel(kernel)
                .init(Init::KMeansPlusPlus { seed: 1 }),
            &x,
            d,
        );
        let model = f.model.as_ref().expect("model");
        let cross = cross_matrix(&kernel, &y, &x, d);
        let selfsim: Vec<f64> = y.chunks(d).map(|p| kappa(&kernel, p, p)).collect();
        let a = model
            .predict_precomputed(&cross, &selfsim)
            .expect("predict_precomputed");
        let b = f.predict(Points::new(11, d, &y).unwrap()).expect("predict");
        assert_eq!(a, b, "{}", kernel.name());
        // And both are the nearest centroid by hand.
        let kmat = kernel_matrix(&kernel, &x, d);
        for (i, &label) in a.iter().enumerate() {
            let dists: Vec<f64> = (0..3u32)
                .map(|c| {
                    let members: Vec<usize> = (0..30).filter(|&j| f.labels[j] == c).collect();
                    if members.is_empty() {
                        return f64::INFINITY;
                    }
                    let m = members.len() as f64;
                    let cross_sum: f64 = members.iter().map(|&j| cross[i * 30 + j]).sum();
                    let norm: f64 = members
                        .iter()
                        .flat_map(|&j| members.iter().map(move |&l| (j, l)))
                        .map(|(j, l)| kmat[j * 30 + l])
                        .sum();
                    selfsim[i] - 2.0 * cross_sum / m + norm / (m * m)
                })
                .collect();
            let min = dists.iter().cloned().fold(f64::INFINITY, f64::min);
            assert!(
                dists[label as usize] <= min + 1e-9,
                "{}: new point {i}: {dists:?} label {label}",
                kernel.name()
            );
        }
    }
    // A precomputed fit predicts the same way from the same kernel values.
    let kernel = Kernel::Linear;
    let kmat = kernel_matrix(&kernel, &x, d);
    let pre = cpu64(3)
        .kernel(Kernel::Precomputed)
        .init(Init::KMeansPlusPlus { seed: 1 })
        .fit_precomputed(&kmat, 30)
        .expect("fit");
    let f = fit(
        &cpu64(3)
            .kernel(kernel)
            .init(Init::KMeansPlusPlus { seed: 1 }),
        &x,
        d,
    );
    assert_eq!(pre.labels, f.labels);
    assert_rel_close(
        "precomputed objective",
        pre.objective,
        f.objective,
        1e-9,
        1.0,
    );
}

// ---------------------------------------------------------------------------------------------
// Precision and devices.
// ---------------------------------------------------------------------------------------------

/// The blob truth with every fifth label moved to the next cluster: a start that is wrong but
/// close.
fn perturbed(truth: &[i64], k: usize) -> Vec<u32> {
    truth
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            if i % 5 == 0 {
                ((t as usize + 1) % k) as u32
            } else {
                t as u32
            }
        })
        .collect()
}

#[test]
fn f32_and_f64_agree_on_separated_data() {
    let (x, truth) = blobs(151, &BLOB_CENTERS, 25, 0.8);
    let start = perturbed(&truth, 3);
    for kernel in all_kernels() {
        for init in [
            Init::Labels(start.clone()),
            Init::KMeansPlusPlus { seed: 4 },
        ] {
            let what = format!("{} {init:?}", kernel.name());
            let b = KernelKMeans::new(3)
                .kernel(kernel)
                .init(init)
                .device(DeviceSpec::Cpu);
            let f64_fit = fit(&b.clone().dtype(DType::F64), &x, 2);
            let f32_fit = fit(&b.clone().dtype(DType::F32), &x, 2);
            assert_eq!(f32_fit.dtype, DType::F32);
            assert_eq!(f32_fit.labels, f64_fit.labels, "{what}");
            assert_rel_close(&what, f32_fit.objective, f64_fit.objective, 1e-4, 1.0);
            if kernel.is_psd() {
                // Separated enough that the PSD kernels find the blobs (the saturated
                // sigmoid does not).
                assert_eq!(ari(&truth, &f64_fit.labels), 1.0, "{what}");
            }
        }
    }
}

#[test]
fn gpu_matches_cpu_on_rings_blobs_and_monotonicity() {
    if common::gpu_or_skip(DType::F32).is_none() {
        return;
    }
    let gpu = |k: usize, dtype: DType| {
        KernelKMeans::new(k)
            .device(DeviceSpec::Cuda(0))
            .dtype(dtype)
    };
    // Rings, f32 and f64.
    let (x, truth) = rings(2024, 700);
    for dtype in [DType::F32, DType::F64] {
        let f = fit(
            &gpu(2, dtype).kernel(Kernel::Gaussian { gamma: Some(4.0) }),
            &x,
            2,
        );
        let a = ari(&truth, &f.labels);
        assert!(a >= 0.99, "GPU {dtype:?} gaussian rings: ARI {a}");
    }
    // Monotone objective and the fixed point, f64.
    let d = 3;
    let x = uniform_points(11, 57, d);
    for kernel in psd_kernels() {
        let f = fit(
            &gpu(5, DType::F64)
                .kernel(kernel)
                .init(Init::KMeansPlusPlus { seed: 2 }),
            &x,
            d,
        );
        for w in f.objective_history.windows(2) {
            assert!(
                w[1] <= w[0] + 1e-12 * w[0].abs(),
                "GPU {}: objective rose {} -> {}",
                kernel.name(),
                w[0],
                w[1]
            );
        }
        let kmat = kernel_matrix(&kernel, &x, d);
        let scale = kernel_scale(&kmat, 57);
        assert_labels_are_argmin(
            kernel.name(),
            &hand_distances(&kmat, &f.labels, 5),
            &f.labels,
            5,
            1e-9 * scale,
        );
        let cpu = fit(
            &cpu64(5)
                .kernel(kernel)
                .init(Init::KMeansPlusPlus { seed: 2 }),
            &x,
            d,
        );
        assert_eq!(f.labels, cpu.labels, "GPU vs CPU {}", kernel.name());
        assert_rel_close(kernel.name(), f.objective, cpu.objective, 1e-9, scale);
        // predict on the GPU model gives the training labels back.
        let p = f
            .predict(Points::new(57, d, &x).unwrap())
            .expect("GPU predict");
        common::check_labels(
            kernel.name(),
            &p,
            &f.labels,
            &hand_distances(&kmat, &f.labels, 5),
            5,
            1e-9 * scale,
        )
        .unwrap_or_else(|e| panic!("GPU {e}"));
    }
    // f32 against f64 on the GPU, separated blobs.
    let (x, truth) = blobs(151, &BLOB_CENTERS, 25, 0.8);
    let start = perturbed(&truth, 3);
    for kernel in all_kernels() {
        let a = fit(
            &gpu(3, DType::F32)
                .kernel(kernel)
                .init(Init::Labels(start.clone())),
            &x,
            2,
        );
        let b = fit(
            &gpu(3, DType::F64)
                .kernel(kernel)
                .init(Init::Labels(start.clone())),
            &x,
            2,
        );
        let c = fit(
            &cpu64(3).kernel(kernel).init(Init::Labels(start.clone())),
            &x,
            2,
        );
        assert_eq!(a.labels, b.labels, "GPU f32 vs f64 {}", kernel.name());
        assert_eq!(b.labels, c.labels, "GPU vs CPU {}", kernel.name());
        if kernel.is_psd() {
            assert_eq!(ari(&truth, &a.labels), 1.0, "GPU {}", kernel.name());
        }
    }
}

/// Finite points whose kernel values overflow (here x . x = 1e40 > f32::MAX) are an error that
/// says to scale the data, not a NaN objective after max_iter useless iterations.
#[test]
fn overflowing_kernel_values_are_an_error_not_nan() {
    let x = [1e20, 1.0, -1e20, 2.0, 3.0, 1e20, 0.5, 0.5];
    for (dtype, scale) in [(DType::F32, 1.0), (DType::F64, 1e180)] {
        let x: Vec<f64> = x.iter().map(|v| v * scale).collect();
        let r = KernelKMeans::new(2)
            .device(DeviceSpec::Cpu)
            .dtype(dtype)
            .fit(Points::new(4, 2, &x).unwrap());
        match r {
            Ok(f) => panic!(
                "{dtype:?}: Ok with objective {} after {} iterations (converged {})",
                f.objective, f.iterations, f.converged
            ),
            Err(e) => assert!(matches!(e, FitError::Input(_)), "{dtype:?}: {e}"),
        }
    }
}

/// Recomputing K every iteration (never stored) and storing it give the same fit in f64: labels,
/// iterations, objectives, and predictions (which never store the cross kernel either), for
/// every kernel and every initialisation, k-means++ taking its columns from the points; on the
/// CPU and, where there is one, on the GPU.
#[test]
fn recomputed_and_stored_kernel_matrices_give_the_same_fit() {
    use popcorn::kkmeans::Algorithm;
    let (x, _) = blobs(31, &[&[0.0, 0.0], &[3.0, 0.5], &[1.0, 4.0]], 23, 0.9);
    let d = 2;
    let new_points = uniform_points(5, 17, d);
    let mut devices = vec![DeviceSpec::Cpu];
    if common::gpu_or_skip(DType::F64).is_some() {
        devices.push(DeviceSpec::Cuda(0));
    }
    for (device, kernel) in devices
        .into_iter()
        .flat_map(|dev| all_kernels().map(|k| (dev, k)))
    {
        for init in [
            Init::Mod,
            Init::Random { seed: 3 },
            Init::KMeansPlusPlus { seed: 11 },
        ] {
            let builder = cpu64(4)
                .device(device)
                .kernel(kernel)
                .init(init.clone())
                .n_init(2);
            let stored = fit(&builder.clone().algorithm(Algorithm::Stored), &x, d);
            let recomputed = fit(&builder.clone().algorithm(Algorithm::Recompute), &x, d);
            let what = format!("{device:?}, {kernel:?}, {init:?}");
            assert_eq!(stored.algorithm.algorithm, Algorithm::Stored);
            assert_eq!(recomputed.algorithm.algorithm, Algorithm::Recompute);
            assert_eq!(recomputed.timings.kernel_matrix_s, 0.0, "{what}");
            assert_eq!(recomputed.labels, stored.labels, "{what}");
            assert_eq!(recomputed.iterations, stored.iterations, "{what}");
            assert_eq!(recomputed.best_run, stored.best_run, "{what}");
            let scale = stored.objective.abs().max(1.0);
            assert_rel_close(&what, recomputed.objective, stored.objective, 1e-9, scale);
            let points = Points::new(17, d, &new_points).unwrap();
            assert_eq!(
                recomputed.predict(points).expect("predict"),
                stored.predict(points).expect("predict"),
                "{what}"
            );
            // At convergence the training points predict their own labels.
            if stored.converged {
                let train = Points::new(x.len() / d, d, &x).unwrap();
                assert_eq!(
                    recomputed.predict(train).expect("predict"),
                    recomputed.labels,
                    "{what}"
                );
            }
        }
    }
}

/// `Auto` recomputes a kernel matrix that cannot fit in memory, and says why; a small one is
/// chosen by the estimated time.
#[test]
fn auto_recomputes_what_cannot_be_stored() {
    use popcorn::kkmeans::Algorithm;
    let km = cpu64(2);
    let huge = km.choose_algorithm(3_000_000, 2).expect("a choice");
    assert_eq!(huge.algorithm, Algorithm::Recompute, "{}", huge.reason);
    assert!(huge.reason.contains("K would take"), "{}", huge.reason);
    assert_eq!(huge.kernel_matrix_bytes, 8 * 3_000_000u64 * 3_000_000);
    let small = km.choose_algorithm(500, 2).expect("a choice");
    assert!(
        small.reason.contains("estimated faster"),
        "{}",
        small.reason
    );
    assert!(small.stored_s > 0.0 && small.recompute_s > 0.0);
    let forced = km
        .algorithm(Algorithm::Stored)
        .choose_algorithm(3_000_000, 2)
        .expect("a choice");
    assert_eq!(forced.algorithm, Algorithm::Stored);
    assert_eq!(forced.reason, "asked for");
}

/// A forced recompute holds at any depth: its kernel products are fused whatever the cost
/// model says of one product alone (at d = 780 a library product and a pass over its result
/// are estimated faster), and the fit matches the stored one.
#[test]
fn forced_recompute_holds_at_a_large_depth() {
    use popcorn::kkmeans::Algorithm;
    let km = cpu64(10).algorithm(Algorithm::Recompute);
    let choice = km.choose_algorithm(60_000, 780).expect("a choice");
    assert_eq!(choice.algorithm, Algorithm::Recompute, "{}", choice.reason);
    let d = 300;
    let x = uniform_points(7, 40, d);
    let builder = cpu64(3).kernel(Kernel::Polynomial {
        gamma: 1.0 / d as f64,
        coef0: 1.0,
        degree: 2.0,
    });
    let stored = fit(&builder.clone().algorithm(Algorithm::Stored), &x, d);
    let recomputed = fit(&builder.algorithm(Algorithm::Recompute), &x, d);
    assert_eq!(recomputed.algorithm.algorithm, Algorithm::Recompute);
    assert_eq!(recomputed.timings.kernel_matrix_s, 0.0);
    assert_eq!(recomputed.labels, stored.labels);
    let scale = stored.objective.abs().max(1.0);
    assert_rel_close(
        "d = 300",
        recomputed.objective,
        stored.objective,
        1e-9,
        scale,
    );
}

/// Recompute mode at n = 100,000 on the CPU, where K alone would take 37 GiB (more than the
/// CI machine has): one iteration from the `i mod k` start, memory linear in n. The sums it
/// computes are checked against direct f64 sums for a few points.
#[test]
fn cpu_recompute_clusters_a_hundred_thousand_points() {
    use popcorn::kkmeans::Algorithm;
    let (n, d, k) = (100_000, 2, 3);
    let x = uniform_points(5, n, d);
    let kernel = Kernel::Polynomial {
        gamma: 1.0,
        coef0: 1.0,
        degree: 2.0,
    };
    let km = KernelKMeans::new(k)
        .device(DeviceSpec::Cpu)
        .dtype(DType::F32)
        .kernel(kernel)
        .max_iter(1)
        .algorithm(Algorithm::Recompute);
    let result = fit(&km, &x, d);
    assert_eq!(result.algorithm.algorithm, Algorithm::Recompute);
    assert_eq!(
        result.algorithm.kernel_matrix_bytes,
        4 * 100_000u64 * 100_000
    );
    assert_eq!(result.iterations, 1);
    assert_eq!(result.labels.len(), n);
    assert!(result.labels.iter().all(|&l| (l as usize) < k));
    // The first iteration from labels i mod k: point i goes to the cluster c minimising
    // -2 mean_j K(i, j in c) + mean_{j, l in c} K(j, l); check the first points against f64.
    let kf = |a: &[f64], b: &[f64]| (a[0] * b[0] + a[1] * b[1] + 1.0).powi(2);
    let point = |i: usize| &x[i * d..(i + 1) * d];
    let sizes: Vec<f64> = (0..k).map(|c| ((n - c).div_ceil(k)) as f64).collect();
    // Centroid norms: sum over pairs in a cluster, by the sums of the points' powers
    // (K(a, b) = (1 + a.b)^2 = 1 + 2 a.b + (a.b)^2 has closed-form cluster sums).
    let mut s1 = vec![[0.0f64; 2]; k];
    let mut s2 = vec![[0.0f64; 3]; k];
    for i in 0..n {
        let c = i % k;
        let p = point(i);
        s1[c][0] += p[0];
        s1[c][1] += p[1];
        s2[c][0] += p[0] * p[0];
        s2[c][1] += p[0] * p[1];
        s2[c][2] += p[1] * p[1];
    }
    let pair_sum = |c: usize| {
        let (a, b) = (s1[c][0], s1[c][1]);
        let (xx, xy, yy) = (s2[c][0], s2[c][1], s2[c][2]);
        sizes[c] * sizes[c] + 2.0 * (a * a + b * b) + (xx * xx + 2.0 * xy * xy + yy * yy)
    };
    let norms: Vec<f64> = (0..k)
        .map(|c| pair_sum(c) / (sizes[c] * sizes[c]))
        .collect();
    let mut checked = 0;
    for i in (0..n).step_by(9973).take(8) {
        let p = point(i);
        let dist: Vec<f64> = (0..k)
            .map(|c| {
                let row: f64 = (c..n).step_by(k).map(|j| kf(p, point(j))).sum();
                -2.0 * row / sizes[c] + norms[c]
            })
            .collect();
        let mut order: Vec<usize> = (0..k).collect();
        order.sort_by(|a, b| dist[*a].total_cmp(&dist[*b]));
        // Skip near ties, which f32 may break either way.
        let gap = dist[order[1]] - dist[order[0]];
        if gap > 1e-4 * dist[order[0]].abs().max(1.0) {
            assert_eq!(result.labels[i] as usize, order[0], "point {i}: {dist:?}");
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} points away from ties");
}

// ---------------------------------------------------------------------------------------------
// Point weights (weighted Kernel K-means).
// ---------------------------------------------------------------------------------------------

/// The weighted objective `sum_i w_i D[i, label_i]` of `labels` from the weighted definition
/// (`V[c, i] = w_i / W_c`), zero-weight points left out.
fn hand_weighted_objective(kmat: &[f64], labels: &[u32], w: &[f64], k: usize) -> f64 {
    let n = labels.len();
    let mut total = 0.0;
    for c in 0..k {
        let members: Vec<usize> = (0..n).filter(|&i| labels[i] as usize == c).collect();
        let wc: f64 = members.iter().map(|&j| w[j]).sum();
        if wc == 0.0 {
            continue;
        }
        let within: f64 = members
            .iter()
            .flat_map(|&j| members.iter().map(move |&l| w[j] * w[l] * kmat[j * n + l]))
            .sum::<f64>()
            / (wc * wc);
        for &i in members.iter().filter(|&&i| w[i] > 0.0) {
            let s: f64 = members.iter().map(|&j| w[j] * kmat[i * n + j]).sum();
            total += w[i] * (kmat[i * n + i] - 2.0 * s / wc + within);
        }
    }
    total
}

/// Every row of `x` (`d` features) and entry of `labels` repeated `times[i]` times.
fn repeat_points(x: &[f64], labels: &[u32], times: &[usize], d: usize) -> (Vec<f64>, Vec<u32>) {
    let mut rx = Vec::new();
    let mut rl = Vec::new();
    for (i, &t) in times.iter().enumerate() {
        for _ in 0..t {
            rx.extend_from_slice(&x[i * d..(i + 1) * d]);
            rl.push(labels[i]);
        }
    }
    (rx, rl)
}

/// The repetition property: integer weights give the labels and the objective of repeating
/// each point that many times, from corresponding starts, for every kernel, with K stored
/// and recomputed, and with a precomputed K.
#[test]
fn integer_weights_equal_repeating_each_point() {
    use popcorn::kkmeans::Algorithm;
    let (x, _) = blobs(41, &[&[0.0, 0.0], &[2.5, 0.5], &[0.5, 3.0]], 9, 1.1);
    let d = 2;
    let n = x.len() / d;
    let k = 3;
    let mut rng = SplitMix64::new(9);
    let times: Vec<usize> = (0..n).map(|_| 1 + rng.below(3)).collect();
    let w: Vec<f64> = times.iter().map(|&t| t as f64).collect();
    let labels0: Vec<u32> = (0..n).map(|_| rng.below(k) as u32).collect();
    let (rx, rlabels0) = repeat_points(&x, &labels0, &times, d);
    // The first copy of each point in the repeated data.
    let first: Vec<usize> = times
        .iter()
        .scan(0, |at, &t| {
            let i = *at;
            *at += t;
            Some(i)
        })
        .collect();
    for kernel in all_kernels() {
        for algorithm in [Algorithm::Stored, Algorithm::Recompute] {
            let what = format!("{kernel:?}, {algorithm:?}");
            let builder = cpu64(k).kernel(kernel).algorithm(algorithm).max_iter(50);
            let weighted = fit(
                &builder
                    .clone()
                    .init(Init::Labels(labels0.clone()))
                    .sample_weight(&w),
                &x,
                d,
            );
            let repeated = fit(&builder.init(Init::Labels(rlabels0.clone())), &rx, d);
            let rlabels: Vec<u32> = first.iter().map(|&i| repeated.labels[i]).collect();
            assert_eq!(weighted.labels, rlabels, "{what}");
            assert_eq!(weighted.iterations, repeated.iterations, "{what}");
            let scale = repeated.objective.abs().max(1.0);
            assert_rel_close(&what, weighted.objective, repeated.objective, 1e-10, scale);
            for (a, b) in weighted
                .objective_history
                .iter()
                .zip(&repeated.objective_history)
            {
                assert_rel_close(&what, *a, *b, 1e-10, scale);
            }
            // And the weighted objective is the weighted definition's.
            let kmat = kernel_matrix(&kernel, &x, d);
            let want = hand_weighted_objective(&kmat, &weighted.labels, &w, k);
            assert_rel_close(&what, weighted.objective, want, 1e-10, scale);
            let summary = weighted.weights.as_ref().expect("a weighted fit says so");
            assert_eq!(summary.total, w.iter().sum::<f64>(), "{what}");
            assert!(repeated.weights.is_none(), "{what}");
        }
        if kernel == Kernel::Linear {
            continue;
        }
        // A precomputed K: the same with K's rows and columns repeated.
        let kmat = kernel_matrix(&kernel, &x, d);
        let rkmat = kernel_matrix(&kernel, &rx, d);
        let builder = cpu64(k).kernel(Kernel::Precomputed).max_iter(50);
        let weighted = builder
            .clone()
            .init(Init::Labels(labels0.clone()))
            .sample_weight(&w)
            .fit_precomputed(&kmat, n)
            .expect("weighted precomputed fit");
        let repeated = builder
            .init(Init::Labels(rlabels0.clone()))
            .fit_precomputed(&rkmat, rx.len() / d)
            .expect("repeated precomputed fit");
        let rlabels: Vec<u32> = first.iter().map(|&i| repeated.labels[i]).collect();
        assert_eq!(weighted.labels, rlabels, "precomputed {kernel:?}");
        let scale = repeated.objective.abs().max(1.0);
        assert_rel_close(
            "precomputed",
            weighted.objective,
            repeated.objective,
            1e-10,
            scale,
        );
    }
}

/// A point of weight 0 moves no centroid and adds nothing to the objective: the other points'
/// labels and the objective are those of the fit without it, and it takes the nearest
/// centroid of that fit (by the plain definition on the other points).
#[test]
fn zero_weights_leave_points_out_of_the_centroids() {
    use popcorn::kkmeans::Algorithm;
    let (x, _) = blobs(43, &[&[0.0, 0.0], &[3.0, 0.0], &[0.0, 3.0]], 8, 0.8);
    let d = 2;
    let n = x.len() / d;
    let k = 3;
    let zero = [2usize, 7, 11, 20];
    let w: Vec<f64> = (0..n)
        .map(|i| if zero.contains(&i) { 0.0 } else { 1.0 })
        .collect();
    let kept: Vec<usize> = (0..n).filter(|i| !zero.contains(i)).collect();
    let labels0: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
    let kx: Vec<f64> = kept
        .iter()
        .flat_map(|&i| x[i * d..(i + 1) * d].to_vec())
        .collect();
    let klabels0: Vec<u32> = kept.iter().map(|&i| labels0[i]).collect();
    for kernel in psd_kernels() {
        for algorithm in [Algorithm::Stored, Algorithm::Recompute] {
            let what = format!("{kernel:?}, {algorithm:?}");
            let builder = cpu64(k).kernel(kernel).algorithm(algorithm);
            let weighted = fit(
                &builder
                    .clone()
                    .init(Init::Labels(labels0.clone()))
                    .sample_weight(&w),
                &x,
                d,
            );
            let without = fit(&builder.init(Init::Labels(klabels0.clone())), &kx, d);
            assert!(weighted.converged && without.converged, "{what}");
            let kept_labels: Vec<u32> = kept.iter().map(|&i| weighted.labels[i]).collect();
            assert_eq!(kept_labels, without.labels, "{what}");
            let scale = without.objective.abs().max(1.0);
            assert_rel_close(&what, weighted.objective, without.objective, 1e-10, scale);
            assert_eq!(weighted.weights.as_ref().map(|s| s.zero), Some(zero.len()));
            // Each zero-weight point sits in the nearest centroid of the other points.
            let kmat = kernel_matrix(&kernel, &x, d);
            let kmat = &kmat;
            for &z in &zero {
                let dist: Vec<f64> = (0..k)
                    .map(|c| {
                        let m: Vec<usize> = kept
                            .iter()
                            .copied()
                            .filter(|&j| weighted.labels[j] as usize == c)
                            .collect();
                        if m.is_empty() {
                            return f64::INFINITY;
                        }
                        let s: f64 = m.iter().map(|&j| kmat[z * n + j]).sum();
                        let within: f64 = m
                            .iter()
                            .flat_map(|&j| m.iter().map(move |&l| kmat[j * n + l]))
                            .sum();
                        let size = m.len() as f64;
                        kmat[z * n + z] - 2.0 * s / size + within / (size * size)
                    })
                    .collect();
                assert_labels_are_argmin(
                    &format!("{what}, point {z}"),
                    &dist,
                    &[weighted.labels[z]],
                    k,
                    1e-9,
                );
            }
            // Prediction uses the weighted centroids: the training points of positive
            // weight predict their own labels at convergence, the others their nearest.
            let points = Points::new(n, d, &x).unwrap();
            assert_eq!(weighted.predict(points).unwrap(), weighted.labels, "{what}");
        }
    }
}

/// Equal weights c give the unweighted labels and c times the objective.
#[test]
fn equal_weights_scale_the_objective() {
    let (x, _) = blobs(47, &[&[0.0, 0.0], &[2.0, 1.0]], 13, 1.0);
    let d = 2;
    let n = x.len() / d;
    for kernel in all_kernels() {
        let builder = cpu64(2).kernel(kernel).init(Init::Random { seed: 4 });
        let plain = fit(&builder, &x, d);
        let c = 2.5;
        let weighted = fit(&builder.sample_weight(&vec![c; n]), &x, d);
        let what = format!("{kernel:?}");
        assert_eq!(weighted.labels, plain.labels, "{what}");
        assert_eq!(weighted.iterations, plain.iterations, "{what}");
        let scale = c * plain.objective.abs().max(1.0);
        assert_rel_close(&what, weighted.objective, c * plain.objective, 1e-12, scale);
    }
}

/// Weights far outside f32's range fit in f32 as their ratios say (the device's weights are
/// divided by a power of two near the largest, the objective multiplied back): tiny equal
/// weights give the unweighted labels and 1e-46 times the objective (not all labels 0 and an
/// objective of 0), huge ones 1e39 times it (not an overflow), and `[1e39, 1]` keeps both
/// points as their own clusters. A ratio too small for f32 (1e-50) is an error naming the
/// point.
#[test]
fn weights_beyond_f32s_range_fit_in_f32_as_their_ratios_say() {
    let cpu32 = |k| {
        KernelKMeans::new(k)
            .device(DeviceSpec::Cpu)
            .dtype(DType::F32)
    };
    // The reviewer's two examples, as given: two points, two clusters.
    let two = [0.0, 1.0];
    for w in [[1e-46, 1e-46], [1e39, 1.0]] {
        let f = fit(&cpu32(2).sample_weight(&w), &two, 1);
        assert_eq!(f.labels, vec![0, 1], "{w:?}: {f:?}");
        assert_eq!(f.objective, 0.0, "{w:?}");
        let model = f.model.as_ref().unwrap();
        assert!(
            model.centroid_norms().iter().all(|c| c.is_finite()),
            "{w:?}: {:?}",
            model.centroid_norms()
        );
        let new = Points::new(2, 1, &[0.1, 0.9]).unwrap();
        assert_eq!(model.predict(new).unwrap(), vec![0, 1], "{w:?}");
    }
    // Blobs: equal weights of any size give the unweighted labels, the objective times c.
    let (x, _) = blobs(61, &[&[0.0, 0.0], &[3.0, 1.0]], 12, 1.0);
    let n = x.len() / 2;
    let builder = cpu32(2).init(Init::Random { seed: 2 });
    let plain = fit(&builder, &x, 2);
    for c in [1e-46, 1e39] {
        let weighted = fit(&builder.clone().sample_weight(&vec![c; n]), &x, 2);
        assert_eq!(weighted.labels, plain.labels, "{c}");
        assert_eq!(weighted.iterations, plain.iterations, "{c}");
        let want = c * plain.objective;
        assert!(
            (weighted.objective - want).abs() <= 1e-5 * want.abs(),
            "{c}: {} against {want}",
            weighted.objective
        );
    }
    // A ratio too small for f32: an error in f32, a fit in f64.
    let w = [1e50, 1.0];
    let err = expect_err(
        "1e-50 ratio",
        cpu32(2)
            .sample_weight(&w)
            .fit(Points::new(2, 1, &two).unwrap()),
    );
    assert!(matches!(err, FitError::Input(_)), "{err:?}");
    assert!(
        err.to_string().contains(
            "sample weight 1 is 1, 1.0e-50 times the largest (1e50): too small a ratio for f32"
        ),
        "{err}"
    );
    let f = fit(&cpu64(2).sample_weight(&w), &two, 1);
    assert_eq!(f.labels, vec![0, 1]);
}

/// Negative, NaN, infinite, missing and all-zero weights are input errors naming the first
/// bad position, before any work; a model's parts with bad weights too.
#[test]
fn invalid_weights_are_errors() {
    let x = uniform_points(3, 6, 2);
    let points = Points::new(6, 2, &x).unwrap();
    let cases: [(Vec<f64>, &str); 5] = [
        (
            vec![1.0, 1.0, -2.0, 1.0, f64::NAN, 1.0],
            "sample weight 2 is -2; weights must be finite and >= 0",
        ),
        (
            vec![1.0, f64::NAN, 1.0, 1.0, 1.0, 1.0],
            "sample weight 1 is NaN",
        ),
        (
            vec![1.0, 1.0, 1.0, 1.0, 1.0, f64::INFINITY],
            "sample weight 5 is inf",
        ),
        (
            vec![1.0; 5],
            "5 sample weights for 6 points; give one weight per point",
        ),
        (vec![0.0; 6], "every sample weight is 0"),
    ];
    for (w, want) in cases {
        let builder = cpu64(2).sample_weight(&w);
        let err = expect_err(want, builder.fit(points));
        assert!(matches!(err, FitError::Input(_)), "{err:?}");
        assert!(err.to_string().contains(want), "{err} lacks `{want}`");
        let kmat = kernel_matrix(&Kernel::Linear, &x, 2);
        let err = builder
            .kernel(Kernel::Precomputed)
            .fit_precomputed(&kmat, 6)
            .unwrap_err();
        assert!(err.to_string().contains(want), "precomputed: {err}");
    }
    // Model parts carrying bad weights.
    let fit = fit(&cpu64(2).sample_weight(&[1.0; 6]), &x, 2);
    let mut parts = fit.model.as_ref().unwrap().parts();
    assert_eq!(parts.weights.as_deref(), Some(&[1.0; 6][..]));
    parts.weights = Some(vec![1.0, -1.0, 1.0, 1.0, 1.0, 1.0]);
    let ctx = popcorn::Context::new(DeviceSpec::Cpu).unwrap();
    let err = popcorn::kkmeans::Model::from_parts(ctx, parts).unwrap_err();
    assert!(err.to_string().contains("sample weight 1 is -1"), "{err}");
}

/// k-means++ draws by weight: with as many clusters as points of positive weight, far apart,
/// every center is one of them (a zero-weight point never is), so each is alone in its cluster
/// and the weighted objective is 0, whatever the seed.
#[test]
fn weighted_kmeans_plus_plus_never_centers_a_zero_weight_point() {
    let (x, _) = blobs(53, &[&[0.0, 0.0], &[10.0, 0.0], &[0.0, 10.0]], 6, 2.0);
    let d = 2;
    let n = x.len() / d;
    let heavy = [0usize, 7, 14];
    let w: Vec<f64> = (0..n)
        .map(|i| if heavy.contains(&i) { 1.0 } else { 0.0 })
        .collect();
    for seed in 0..5 {
        let f = fit(
            &cpu64(3)
                .kernel(Kernel::Gaussian { gamma: Some(0.1) })
                .init(Init::KMeansPlusPlus { seed })
                .max_iter(1)
                .sample_weight(&w),
            &x,
            d,
        );
        let mut own: Vec<u32> = heavy.iter().map(|&i| f.labels[i]).collect();
        own.sort_unstable();
        own.dedup();
        assert_eq!(own.len(), 3, "seed {seed}: {:?}", f.labels);
        assert!(f.objective_history[0].abs() < 1e-12, "seed {seed}: {f:?}");
    }
}

/// Weighted fits on the GPU (f64) agree with the CPU's: labels, the objective and the
/// predictions, with K stored and recomputed (a GPU run; skipped without one).
#[test]
fn weighted_fits_on_the_gpu_match_the_cpu() {
    use popcorn::kkmeans::Algorithm;
    if common::gpu_or_skip(DType::F64).is_none() {
        return;
    }
    let (x, _) = blobs(59, &[&[0.0, 0.0], &[3.0, 0.5], &[1.0, 4.0]], 40, 0.9);
    let d = 2;
    let n = x.len() / d;
    let mut rng = SplitMix64::new(2);
    let w: Vec<f64> = (0..n).map(|_| rng.below(4) as f64 * 0.5).collect();
    let new_points = uniform_points(6, 31, d);
    for kernel in all_kernels() {
        for algorithm in [Algorithm::Stored, Algorithm::Recompute] {
            let builder = cpu64(3)
                .kernel(kernel)
                .algorithm(algorithm)
                .init(Init::KMeansPlusPlus { seed: 5 })
                .sample_weight(&w);
            let cpu = fit(&builder, &x, d);
            let gpu = fit(&builder.device(DeviceSpec::Cuda(0)), &x, d);
            let what = format!("{kernel:?}, {algorithm:?}");
            assert_eq!(gpu.labels, cpu.labels, "{what}");
            let scale = cpu.objective.abs().max(1.0);
            assert_rel_close(&what, gpu.objective, cpu.objective, 1e-9, scale);
            let points = Points::new(31, d, &new_points).unwrap();
            assert_eq!(
                gpu.predict(points).unwrap(),
                cpu.predict(points).unwrap(),
                "{what}"
            );
        }
    }
}

/// A memory limit under which the features algorithm builds its features in blocks of rows
/// (at least two), found by asking the chooser under ever smaller limits; `None` where blocks
/// never fit in less than the features whole (a few points, whose selections and sums
/// outweigh their features).
fn limit_for_blocks(km: &KernelKMeans, n: usize, d: usize) -> Option<u64> {
    let mut limit: u64 = 1 << 30;
    loop {
        let choice = km
            .clone()
            .memory_limit(Some(limit))
            .choose_algorithm(n, d)
            .ok()?;
        if (1..n).contains(&choice.feature_block_rows) {
            return Some(limit);
        }
        limit = limit * 7 / 8;
    }
}

/// The features algorithm (polynomial kernels of degree 1 or 2 as the linear kernel on their
/// explicit features) gives the stored kernel matrix's fit in f64: labels, iterations, best run,
/// objective and predictions, for every initialisation, several runs, weighted points and
/// standardised ones, shapes with one cluster, odd sizes and more features than points; on the
/// CPU and, where there is one, on the GPU. So do the features built in blocks of rows every
/// iteration, under a memory limit that leaves no room for them whole.
#[test]
fn features_give_the_fit_of_the_stored_kernel_matrix() {
    use popcorn::kkmeans::Algorithm;
    let (blob_x, _) = blobs(37, &[&[0.0, 0.0], &[3.0, 0.5], &[1.0, 4.0]], 21, 0.9);
    let wide = uniform_points(9, 13, 7);
    // More features (231) than points too, but enough points for blocks of rows to fit in
    // less memory than the features whole.
    let wider = uniform_points(4, 150, 20);
    let mut devices = vec![DeviceSpec::Cpu];
    if common::gpu_or_skip(DType::F64).is_some() {
        devices.push(DeviceSpec::Cuda(0));
    }
    let kernels = [
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Polynomial {
            gamma: 0.5,
            coef0: 0.0,
            degree: 2.0,
        },
        Kernel::Polynomial {
            gamma: -0.8,
            coef0: -0.3,
            degree: 2.0,
        },
        Kernel::Polynomial {
            gamma: 0.3,
            coef0: 2.0,
            degree: 1.0,
        },
    ];
    let cases: [(&[f64], usize, usize); 4] = [
        (&blob_x, 2, 4),
        (&wide, 7, 3),
        (&wider, 20, 5),
        (&blob_x, 2, 1),
    ];
    let mut blocks_tested = 0;
    for device in devices {
        for kernel in kernels {
            for (x, d, k) in cases {
                let n = x.len() / d;
                let weights: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64 * 0.25).collect();
                for (init, weighted, zscore) in [
                    (Init::Mod, false, false),
                    (Init::Random { seed: 3 }, true, false),
                    (Init::KMeansPlusPlus { seed: 11 }, false, true),
                ] {
                    let mut builder = cpu64(k)
                        .device(device)
                        .kernel(kernel)
                        .init(init.clone())
                        .zscore(zscore)
                        .n_init(2);
                    if weighted {
                        builder = builder.sample_weight(&weights);
                    }
                    let what = format!("{device:?}, {kernel:?}, n = {n}, d = {d}, k = {k}, {init:?}, weighted {weighted}, zscore {zscore}");
                    let stored = fit(&builder.clone().algorithm(Algorithm::Stored), x, d);
                    let features = fit(&builder.clone().algorithm(Algorithm::Features), x, d);
                    assert_eq!(features.algorithm.algorithm, Algorithm::Features, "{what}");
                    assert!(features.algorithm.feature_dim > 0, "{what}");
                    assert_eq!(features.labels, stored.labels, "{what}");
                    assert_eq!(features.iterations, stored.iterations, "{what}");
                    assert_eq!(features.best_run, stored.best_run, "{what}");
                    let scale = stored.objective.abs().max(1.0);
                    assert_rel_close(&what, features.objective, stored.objective, 1e-9, scale);
                    let new_points = uniform_points(5, 11, d);
                    let points = Points::new(11, d, &new_points).unwrap();
                    assert_eq!(
                        features.predict(points).expect("predict"),
                        stored.predict(points).expect("predict"),
                        "{what}"
                    );
                    let asked = builder.clone().algorithm(Algorithm::Features);
                    let Some(limit) = limit_for_blocks(&asked, n, d) else {
                        assert!(n < 20, "{what}: no memory limit gives blocks");
                        continue;
                    };
                    blocks_tested += 1;
                    let blocks = fit(&asked.memory_limit(Some(limit)), x, d);
                    let rows = blocks.algorithm.feature_block_rows;
                    let what = format!("{what}, blocks of {rows} rows");
                    assert!((1..n).contains(&rows), "{what}");
                    assert_eq!(blocks.labels, stored.labels, "{what}");
                    assert_eq!(blocks.iterations, stored.iterations, "{what}");
                    assert_eq!(blocks.best_run, stored.best_run, "{what}");
                    assert_rel_close(&what, blocks.objective, stored.objective, 1e-9, scale);
                    assert_eq!(
                        blocks.predict(points).expect("predict"),
                        stored.predict(points).expect("predict"),
                        "{what}"
                    );
                }
            }
        }
    }
    // Every case but the 13 points ran in blocks too.
    assert!(
        blocks_tested >= 3 * 3 * 4,
        "{blocks_tested} cases in blocks"
    );
}

/// The features in blocks of rows against the stored kernel matrix in f64, where clusters
/// are many (k up to 200 of 257 points) or empty from the start (initial labels that use
/// every other cluster), at odd sizes and k = 1: labels, objectives, empty clusters and
/// centroid norms (through predictions) equal.
#[test]
fn features_in_blocks_keep_empty_and_many_clusters() {
    use popcorn::kkmeans::Algorithm;
    let (n, d) = (257, 3);
    let x = uniform_points(21, n, d);
    let kernel = Kernel::POLYNOMIAL_DEFAULT;
    let every_other = |k: usize| (0..n).map(|i| ((2 * i) % k) as u32).collect::<Vec<_>>();
    for (k, init) in [
        (1, Init::Mod),
        (7, Init::Labels(every_other(7))),
        (64, Init::Labels(every_other(64))),
        (200, Init::Mod),
    ] {
        let builder = cpu64(k).kernel(kernel).init(init).max_iter(6);
        let what = format!("k = {k}");
        let stored = fit(&builder.clone().algorithm(Algorithm::Stored), &x, d);
        let asked = builder.algorithm(Algorithm::Features);
        let limit = limit_for_blocks(&asked, n, d).expect("blocks fit some limit");
        let blocks = fit(&asked.memory_limit(Some(limit)), &x, d);
        assert!(blocks.algorithm.feature_block_rows < n, "{what}");
        assert_eq!(blocks.labels, stored.labels, "{what}");
        assert_eq!(blocks.empty_clusters, stored.empty_clusters, "{what}");
        if k == 64 {
            // The odd clusters start empty and stay so (their norms are +inf).
            assert!(
                stored.empty_clusters >= 32,
                "{what}: {}",
                stored.empty_clusters
            );
        }
        let scale = stored.objective.abs().max(1.0);
        assert_rel_close(&what, blocks.objective, stored.objective, 1e-9, scale);
        let y = uniform_points(22, 17, d);
        let y = Points::new(17, d, &y).unwrap();
        assert_eq!(
            blocks.predict(y).unwrap(),
            stored.predict(y).unwrap(),
            "{what}"
        );
    }
}

/// `Auto` takes the features where the cost model finds them faster (many points, few
/// features, a polynomial kernel of degree 2) and says why; never for a kernel without them.
/// Asking for them where the kernel has none is an error naming the kernel and what to use.
#[test]
fn auto_takes_the_features_where_they_pay_and_others_are_refused() {
    use popcorn::kkmeans::Algorithm;
    let poly = cpu64(10).kernel(Kernel::POLYNOMIAL_DEFAULT);
    let choice = poly.choose_algorithm(200_000, 10).expect("a choice");
    assert_eq!(choice.algorithm, Algorithm::Features, "{}", choice.reason);
    assert_eq!(choice.feature_dim, 66);
    assert!(choice.reason.contains("features"), "{}", choice.reason);
    assert!(choice.features_s < choice.stored_s.min(choice.recompute_s));
    assert_eq!(choice.feature_block_rows, 0, "{}", choice.reason);
    // Under a memory limit without room for them whole (105 MB in f64), the features are
    // built in blocks of rows every iteration, still the fastest here; a limit without room
    // for one row is refused, naming the memory and what to use instead.
    let limited = poly.clone().memory_limit(Some(64 << 20));
    let choice = limited.choose_algorithm(200_000, 10).expect("a choice");
    assert_eq!(choice.algorithm, Algorithm::Features, "{}", choice.reason);
    assert!(
        (1..200_000).contains(&choice.feature_block_rows),
        "{}",
        choice.reason
    );
    assert!(choice.reason.contains("in blocks of"), "{}", choice.reason);
    let err = poly
        .clone()
        .algorithm(Algorithm::Features)
        .memory_limit(Some(1000))
        .choose_algorithm(200_000, 10)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("in blocks of rows the features need at least")
            && err.contains("--algorithm recompute"),
        "{err}"
    );
    let x = uniform_points(3, 40, 2);
    let err = poly
        .clone()
        .memory_limit(Some(0))
        .fit(Points::new(40, 2, &x).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory_limit = 0"), "{err}");
    // Few points and many features: the features cost more than K.
    let wide = poly.choose_algorithm(300, 500).expect("a choice");
    assert_ne!(wide.algorithm, Algorithm::Features, "{}", wide.reason);
    let gaussian = cpu64(10).kernel(Kernel::Gaussian { gamma: None });
    let choice = gaussian.choose_algorithm(200_000, 10).expect("a choice");
    assert_ne!(choice.algorithm, Algorithm::Features);
    assert_eq!(choice.feature_dim, 0);
    let err = gaussian
        .algorithm(Algorithm::Features)
        .choose_algorithm(1000, 3)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gaussian") && err.contains("--algorithm stored or"),
        "{err}"
    );
    let poly = |gamma, coef0, degree| Kernel::Polynomial {
        gamma,
        coef0,
        degree,
    };
    let cubic = cpu64(3)
        .kernel(poly(1.0, 1.0, 3.0))
        .algorithm(Algorithm::Features);
    let err = cubic.choose_algorithm(1000, 3).unwrap_err().to_string();
    assert!(err.contains("degree 1 or 2"), "{err}");
    let x = uniform_points(1, 30, 3);
    let err = cubic
        .fit(Points::new(30, 3, &x).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("degree 1 or 2"), "{err}");
    assert_eq!("features".parse::<Algorithm>(), Ok(Algorithm::Features));
    // A kernel that is 0 everywhere has no features; sparse points take the stored K.
    let zero = cpu64(2)
        .kernel(poly(0.0, 0.0, 2.0))
        .algorithm(Algorithm::Features);
    let err = zero.choose_algorithm(100, 3).unwrap_err().to_string();
    assert!(err.contains("0 everywhere"), "{err}");
    let sparse = popcorn::io::CsrMatrix::from_dense(30, 3, &x).unwrap();
    let err = cpu64(2)
        .kernel(Kernel::POLYNOMIAL_DEFAULT)
        .algorithm(Algorithm::Features)
        .fit_sparse(&sparse)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("features algorithm needs dense points"),
        "{err}"
    );
}
