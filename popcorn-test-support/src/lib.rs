//! Popcorn's shared test helpers, for the tests of every crate of the workspace (a
//! dev-dependency only):
//! - [`reference`](mod@reference): the independent `f64` reference evaluator every backend is held to;
//! - [`rng`]: a seeded generator and the random inputs drawn from it;
//! - [`check`]: tolerances and comparisons;
//! - [`contexts`]: CPU contexts with a given configuration, and a GPU context where there is a
//!   GPU (tests skip without one, unless `POPCORN_REQUIRE_GPU` makes that a failure);
//! - [`programs`]: the DSL programs of `examples/programs/`;
//! - [`fuzz`]: what the fuzz targets do with an input (shared with the corpus replay test);
//! - [`graphs`]: graphs with planted communities (the normalized cut's tests);
//! - [`digits`](mod@digits): scikit-learn's digits and the agreement of two labelings.
#![warn(missing_docs)]

pub mod check;
pub mod contexts;
pub mod digits;
pub mod fuzz;
pub mod graphs;
pub mod programs;
pub mod reference;
pub mod rng;

pub use check::*;
pub use contexts::*;
pub use digits::*;
pub use graphs::*;
pub use programs::*;
pub use rng::*;
