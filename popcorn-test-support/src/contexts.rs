//! Contexts for tests: the CPU with a chosen configuration, and the GPU where there is one.

use popcorn_dsl::{DType, PlannerConfig};
use popcorn_runtime::{Context, DeviceSpec};

/// Whether a missing GPU fails the tests (`POPCORN_REQUIRE_GPU` set, as the GPU bundle does)
/// instead of skipping them.
pub fn gpu_required() -> bool {
    popcorn_dsl::settings::settings().require_gpu
}

/// A CPU context computing in `dtype`, fusion on (whatever the environment says).
pub fn cpu(dtype: DType) -> Context {
    cpu_with(PlannerConfig {
        dtype,
        ..PlannerConfig::default()
    })
}

/// A CPU context with a planner configuration.
pub fn cpu_with(config: PlannerConfig) -> Context {
    Context::new(DeviceSpec::Cpu)
        .expect("the CPU context always opens")
        .with_config(config)
}

/// A context on the first GPU, or `None` when there is none and tests may skip; with
/// `POPCORN_REQUIRE_GPU` set (the GPU bundle sets it), a missing GPU panics instead.
pub fn gpu_or_skip(dtype: DType) -> Option<Context> {
    match popcorn_runtime::cuda::cuda_available() {
        Ok(n) if n > 0 => Some(
            Context::new(DeviceSpec::Cuda(0))
                .expect("GPU context")
                .with_dtype(dtype),
        ),
        other => {
            let why = match other {
                Ok(_) => "no CUDA device".to_string(),
                Err(e) => e,
            };
            if gpu_required() {
                panic!("POPCORN_REQUIRE_GPU is set but no GPU is usable: {why}");
            }
            eprintln!("skipping GPU test: {why}");
            None
        }
    }
}
