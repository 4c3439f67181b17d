//! Several threads at once: one `Context` shared by four threads, and four fits on their own
//! contexts, give the results of the same work done one at a time (bit for bit on the CPU, whose
//! results never depend on the schedule; on a GPU the labels, and sums within rounding, since
//! sums by label add in no fixed order there).

mod common;

use popcorn::kkmeans::{Algorithm, Init, Kernel, KernelKMeans, Points};
use popcorn::{Args, Context, DType, DeviceSpec};
use popcorn_test_support::{example_programs, random_labels, random_values, SplitMix64};

/// The contexts to test: the CPU, and the GPU where there is one.
fn devices() -> Vec<DeviceSpec> {
    let mut d = vec![DeviceSpec::Cpu];
    if common::gpu_or_skip(DType::F32).is_some() {
        d.push(DeviceSpec::Cuda(0));
    }
    d
}

/// One job: a Lloyd step (centroids, then the nearest centroid) on its own points and
/// labels; returns the new labels and the centroids.
fn lloyd_job(ctx: &Context, seed: u64) -> (Vec<u32>, Vec<f64>) {
    let programs = example_programs();
    let p = &programs["lloyd_step"];
    let mut rng = SplitMix64::new(seed);
    let (n, d, k) = (
        500 + seed as usize * 37,
        3 + seed as usize,
        4 + seed as usize,
    );
    let x = ctx.dense(n, d, &random_values(&mut rng, n * d)).expect("X");
    let labels = ctx.index(&random_labels(&mut rng, n, k)).expect("labels");
    let out = ctx
        .run(
            p,
            &Args::new()
                .tensor("X", &x)
                .tensor("labels", &labels)
                .dim("k", k),
        )
        .expect("lloyd_step runs");
    let new_labels = ctx
        .to_u32(out.tensor("new_labels").expect("new_labels"))
        .expect("download");
    let centroids = ctx.to_f64(out.tensor("C").expect("C")).expect("download");
    (new_labels, centroids)
}

/// `job(0)` to `job(3)`, each on its own thread, all at once; their results in job order.
fn in_four_threads<T: Send>(job: impl Fn(usize) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let job = &job;
        let running: Vec<_> = (0..4).map(|s| scope.spawn(move || job(s))).collect();
        running
            .into_iter()
            .map(|j| j.join().expect("no panic"))
            .collect()
    })
}

#[test]
fn four_threads_on_one_context_match_one_at_a_time() {
    for device in devices() {
        let ctx = Context::new(device).expect("context");
        let sequential: Vec<_> = (0..4).map(|s| lloyd_job(&ctx, s)).collect();
        for _round in 0..3 {
            let parallel = in_four_threads(|s| lloyd_job(&ctx, s as u64));
            for (s, (got, want)) in parallel.iter().zip(&sequential).enumerate() {
                assert_eq!(got.0, want.0, "{device:?}: labels of job {s}");
                if device == DeviceSpec::Cpu {
                    assert_eq!(got.1, want.1, "{device:?}: values of job {s}");
                } else {
                    for (a, b) in got.1.iter().zip(&want.1) {
                        assert!(
                            (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                            "{device:?}: job {s}"
                        );
                    }
                }
            }
        }
    }
}

/// A fit per thread, each on its own context, mixed kernels and algorithms.
fn fit_job(device: DeviceSpec, s: usize) -> (Vec<u32>, f64, usize) {
    let kernels = [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: Some(0.5) },
        Kernel::Sigmoid {
            gamma: Some(0.2),
            coef0: 0.0,
        },
    ];
    let mut rng = SplitMix64::new(900 + s as u64);
    let (n, d) = (300 + 41 * s, 2 + s);
    let x = random_values(&mut rng, n * d);
    let init = Init::Labels(random_labels(&mut rng, n, 5));
    let algorithm = if s.is_multiple_of(2) {
        Algorithm::Stored
    } else {
        Algorithm::Recompute
    };
    let fit = KernelKMeans::new(5)
        .kernel(kernels[s % 4])
        .init(init)
        .algorithm(algorithm)
        .max_iter(20)
        .dtype(DType::F64)
        .device(device)
        .fit(Points::new(n, d, &x).expect("points"))
        .expect("fit");
    (fit.labels, fit.objective, fit.iterations)
}

#[test]
fn four_fits_at_once_match_one_at_a_time() {
    for device in devices() {
        let sequential: Vec<_> = (0..4).map(|s| fit_job(device, s)).collect();
        let parallel = in_four_threads(|s| fit_job(device, s));
        for (s, (got, want)) in parallel.iter().zip(&sequential).enumerate() {
            assert_eq!(got.0, want.0, "{device:?}: labels of fit {s}");
            assert_eq!(got.2, want.2, "{device:?}: iterations of fit {s}");
            if device == DeviceSpec::Cpu {
                assert_eq!(got.1, want.1, "{device:?}: objective of fit {s}");
            } else {
                assert!((got.1 - want.1).abs() <= 1e-9 * want.1.abs().max(1.0));
            }
        }
    }
}
