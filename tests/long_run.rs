//! The long run: 1,000 fits of mixed shapes, kernels, initialisations and algorithms in one
//! process leave no memory behind: the device's free memory is back to its starting value and
//! the process's resident host memory is flat. Minutes on a GPU, so it runs on demand:
//!
//! ```sh
//! cargo test --release --test long_run -- --ignored --nocapture
//! ```
//!
//! `POPCORN_LONG_RUN_FITS` sets another number of fits.
//!
//! On the CPU it runs the same fits (no device memory to check).

mod common;

use popcorn::kkmeans::{Algorithm, Init, KernelKMeans, Points};
use popcorn::{Context, DType, DeviceSpec};
use popcorn_test_support::{random_values, SplitMix64};

/// Resident host memory of this process, bytes (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Free device memory, from a context made for the purpose.
fn device_free(device: DeviceSpec) -> Option<usize> {
    Context::new(device)
        .ok()?
        .memory_info()
        .map(|(free, _)| free)
}

/// Fit number `i`: its shape, kernel, initialisation, algorithm and element type.
fn fit(device: DeviceSpec, i: usize) {
    let kernels = common::every_kernel();
    let mut rng = SplitMix64::new(i as u64);
    let n = 20 + rng.below(480);
    let d = 1 + rng.below(20);
    let k = 1 + rng.below(12.min(n));
    let x = random_values(&mut rng, n * d);
    let init = match i % 3 {
        0 => Init::Mod,
        1 => Init::Random { seed: i as u64 },
        _ => Init::KMeansPlusPlus { seed: i as u64 },
    };
    let algorithm = [Algorithm::Auto, Algorithm::Stored, Algorithm::Recompute][i % 3];
    let dtype = if i.is_multiple_of(5) {
        DType::F64
    } else {
        DType::F32
    };
    let result = KernelKMeans::new(k)
        .kernel(kernels[i % 4])
        .init(init)
        .algorithm(algorithm)
        .dtype(dtype)
        .max_iter(30)
        .device(device)
        .fit(Points::new(n, d, &x).expect("points"))
        .unwrap_or_else(|e| panic!("fit {i} ({n} x {d}, k = {k}): {e}"));
    let predicted = result
        .predict(Points::new(n.min(50), d, &x[..n.min(50) * d]).expect("points"))
        .expect("predict");
    assert_eq!(predicted.len(), n.min(50));
}

#[test]
#[ignore = "minutes on a GPU: run with --ignored (see the file's documentation)"]
fn a_thousand_fits_leave_no_memory_behind() {
    let device = if common::gpu_or_skip(DType::F32).is_some() {
        DeviceSpec::Cuda(0)
    } else {
        DeviceSpec::Cpu
    };
    // Warm-up: kernels compiled and loaded, allocator pools sized.
    for i in 0..20 {
        fit(device, 1000 + i);
    }
    let fits: usize = std::env::var("POPCORN_LONG_RUN_FITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (rss0, free0) = (resident_bytes(), device_free(device));
    let start = std::time::Instant::now();
    for i in 0..fits {
        fit(device, i);
    }
    let (rss1, free1) = (resident_bytes(), device_free(device));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "{device:?}: {fits} fits in {:.1} s; resident host memory {:.1} -> {:.1} MiB; free device memory {:?} -> {:?} MiB",
        start.elapsed().as_secs_f64(),
        mib(rss0),
        mib(rss1),
        free0.map(|f| f >> 20),
        free1.map(|f| f >> 20),
    );
    assert!(
        rss1 <= rss0 + (64 << 20),
        "host memory grew by {:.1} MiB",
        mib(rss1.saturating_sub(rss0))
    );
    if let (Some(a), Some(b)) = (free0, free1) {
        assert!(
            b + (64 << 20) >= a,
            "device memory not back: {} MiB free before, {} MiB after",
            a >> 20,
            b >> 20
        );
    }
}
