//! Popcorn's language: grammar, typed IR, shape inference, planner passes and plans.
#![warn(missing_docs)]

pub mod ast;
pub mod diag;
pub mod parse;
pub mod types;

pub use diag::{Diagnostic, LocatedError};
pub use types::{DType, Dim, DimBindings, Shape, Storage, Type};
