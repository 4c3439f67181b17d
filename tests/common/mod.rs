//! The helpers shared by the integration tests: those of `popcorn-test-support`.
#![allow(unused_imports)]

pub use popcorn_test_support::reference;
pub use popcorn_test_support::*;

/// The four kernels with a default each (linear, polynomial (1, 1, 2), Gaussian with `gamma =
/// 1 / d`, sigmoid with `coef0 = 0`), for tests that run every kernel.
#[allow(dead_code)] // not every test binary runs every kernel
pub fn every_kernel() -> [popcorn::kkmeans::Kernel; 4] {
    use popcorn::kkmeans::Kernel;
    [
        Kernel::Linear,
        Kernel::POLYNOMIAL_DEFAULT,
        Kernel::Gaussian { gamma: None },
        Kernel::Sigmoid {
            gamma: None,
            coef0: 0.0,
        },
    ]
}
