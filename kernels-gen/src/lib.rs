//! CUDA C source generation for popcorn's fused kernels.
//!
//! The planner describes each fused group of element-wise maps, broadcasts and reductions as a
//! typed [`KernelSpec`]; [`emit()`] turns a spec into deterministic CUDA C that NVRTC compiles
//! without any `#include`, together with a [`LaunchShape`] that gives the launch dimensions for
//! concrete sizes. The [`builtins`] module holds the fixed kernels the runtime needs beside the
//! fused ones (diagonal, fill, symmetrize, histogram, CSR selection matrix). The crate is pure
//! Rust and needs no GPU: plans and their kernels can be read on any machine.
//!
//! ```
//! use kernels_gen::{emit, Access, BinaryOp, Expr, Form, Input, KernelSpec, ScalarType};
//!
//! // out0[i, j] = x[i, j] * 2 + b[j]
//! let spec = KernelSpec {
//!     dtype: ScalarType::F32,
//!     inputs: vec![
//!         Input { name: "x".into(), access: Access::Matrix { transposed: false } },
//!         Input { name: "b".into(), access: Access::Row },
//!     ],
//!     form: Form::Map {
//!         outputs: vec![Expr::binary(
//!             BinaryOp::Add,
//!             Expr::binary(BinaryOp::Mul, Expr::Input(0), Expr::Const(2.0)),
//!             Expr::Input(1),
//!         )],
//!     },
//!     provenance: vec!["scale_and_shift".into()],
//! };
//! let kernel = emit(&spec);
//! assert!(kernel.name.starts_with("pk_") && kernel.name.len() == 19);
//! assert!(kernel.source.contains(&format!("void __launch_bounds__(256) {}(", kernel.name)));
//! assert!(kernel.source.contains("in0[i * in0_ld + j]"));
//! // The same spec always gives the same kernel.
//! assert_eq!(emit(&spec), kernel);
//! // Launch for 1000 x 3 elements: 1-D blocks of 256 threads.
//! let (grid, block, shared_bytes) = kernel.launch.grid_block(1000, 3);
//! assert_eq!((grid, block, shared_bytes), ((12, 1, 1), (256, 1, 1), 0));
//! ```
#![warn(missing_docs)]

pub mod builtins;
pub mod cluster_sums;
pub mod emit;
mod hash;
pub mod spec;
mod validate;

pub use emit::{emit, try_emit, GeneratedKernel, LaunchDims, LaunchShape};
pub use hash::fnv1a64;
pub use spec::{
    Access, BinaryOp, Expr, Form, Input, KernelSpec, OutputShape, Param, ReduceKind, Reduction,
    ScalarType, UnaryOp,
};
pub use validate::SpecError;
