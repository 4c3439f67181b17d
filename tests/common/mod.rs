//! The helpers shared by the integration tests: those of `popcorn-test-support`.
#![allow(unused_imports)]

pub use popcorn_test_support::reference;
pub use popcorn_test_support::*;
