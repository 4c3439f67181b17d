//! Popcorn's language: grammar, typed IR, shape inference, planner passes and plans.
//!
//! The pipeline: source tokens → [`ast`] (the [`parse`] module) → typed [`ir::Graph`] (the
//! [`check`] module, errors on the offending tokens) → planner passes ([`passes`]) → a
//! [`Plan`]: an ordered list of library calls and generated kernels over named buffers.
#![warn(missing_docs)]

pub mod ast;
pub mod check;
pub mod contraction_policy;
pub mod diag;
mod front;
pub mod ir;
pub mod ops;
pub mod parse;
pub mod program;
pub mod scalar;
pub mod settings;
pub mod target;
pub mod types;
pub mod typing;
pub mod value;

pub use diag::{Diagnostic, LocatedError};
/// The kernel IR that plans carry (the `kernel-ir` crate).
pub use kernel_ir as kernel;
pub use program::{ParamSig, Program};
pub use scalar::{ScalarBindings, ScalarExpr};
pub use types::{DType, Dim, DimBindings, Shape, Storage, Type};
pub mod log;
pub mod lower;
pub mod passes;
pub mod plan;
mod plan_error;
pub mod planner;

pub use passes::{ContractionPolicy, PlanError, PlannerConfig};
pub use plan::Plan;
pub use planner::plan;
pub use target::Target;
