//! # popcorn
//!
//! A code-generating embedded DSL for matrix-centric GPU algorithms, with Kernel K-means as
//! its flagship. Write linear algebra as it appears on paper; popcorn checks it at compile time,
//! plans it into library calls (cuBLAS, cuSPARSE) and generated fused kernels, and runs the
//! plan on a GPU or on the CPU.
//!
//! ```
//! use popcorn::{Args, Context, DeviceSpec};
//!
//! popcorn::program! {
//!     // Distances of every point to every centroid, and the nearest one.
//!     fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (labels: Index[n]) {
//!         D = -2 * X * C^T + rownorms(X) + rownorms(C)^T;
//!         labels = argmin_rows(D);
//!     }
//! }
//!
//! let ctx = Context::new(DeviceSpec::Cpu).unwrap();
//! let x = ctx.dense(3, 1, &[0.0, 1.0, 10.0]).unwrap();
//! let c = ctx.dense(2, 1, &[0.5, 9.0]).unwrap();
//! let out = nearest::run(&ctx, &x, &c).unwrap();
//! assert_eq!(ctx.to_u32(&out.labels).unwrap(), vec![0, 0, 1]);
//! ```
//!
//! The crates behind the facade: [`dsl`] (the language and its planner: grammar, IR, passes,
//! target description, plans), [`kernel_ir`] (target-neutral descriptions of generated
//! kernels), [`kernels`] (the CUDA emitter), [`runtime`] (backends, executor, contexts) and
//! [`io`] (dataset readers and writers).
#![warn(missing_docs)]

pub use kernel_ir;
pub use kernels_gen as kernels;
pub use popcorn_dsl as dsl;
pub use popcorn_macros::program;
pub use popcorn_runtime as runtime;

pub use popcorn_dsl::{DType, Plan, PlannerConfig, Program};
pub use popcorn_io as io;
pub use popcorn_runtime::{Args, Context, DeviceSpec, Outputs, RuntimeError, Tensor, TensorShape};

mod fit_checks;
pub mod kkmeans;
pub mod metrics;
pub mod ncut;

#[doc(hidden)]
pub mod __private {
    //! Items the `program!` macro expands to; not part of the public API.
    pub use std::sync::OnceLock;
}
