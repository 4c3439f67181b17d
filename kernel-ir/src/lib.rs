//! Popcorn's kernel IR: what a generated kernel computes, independent of any target.
//!
//! The planner (popcorn-dsl) groups element-wise maps, broadcasts and reductions into
//! [`KernelSpec`]s; the CPU backend interprets them; the CUDA emitter (kernels-gen) turns them
//! into CUDA C. A spec holds typed expression trees over its inputs ([`Expr`]), how each input
//! is read ([`Access`]) and what the kernel produces ([`Form`]); [`KernelSpec::validate`]
//! checks its structure and [`KernelSpec::name`] gives its deterministic identity. The
//! element-wise operators ([`UnaryOp`], [`BinaryOp`]) are defined once, in [`ops`], with their
//! names in the language and their `f64` values.
//!
//! ```
//! use kernel_ir::{Access, BinaryOp, Expr, Form, Input, KernelSpec, ScalarType};
//!
//! // out0[i, j] = x[i, j] * 2 + b[j]
//! let spec = KernelSpec {
//!     narrow: Default::default(),
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
//! assert!(spec.validate().is_ok());
//! assert_eq!(spec.outputs().len(), 1);
//! assert!(spec.name().starts_with("pk_"));
//! ```
#![warn(missing_docs)]

mod hash;
mod identity;
pub mod ops;
#[cfg(any(test, feature = "samples"))]
pub mod samples;
pub mod spec;
mod validate;

pub use hash::fnv1a64;
pub use ops::{BinaryOp, UnaryOp};
pub use spec::{
    Access, Expr, Form, Half, Input, KernelSpec, Narrow, OutputShape, Precision, ReduceKind,
    Reduction, ScalarType,
};
pub use validate::SpecError;
