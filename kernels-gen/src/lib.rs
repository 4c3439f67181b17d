//! CUDA C source generation for popcorn's fused kernels.
//!
//! The planner describes each fused group of element-wise maps, broadcasts and reductions as a
//! typed [`KernelSpec`]; this crate turns a spec into deterministic CUDA C (see [`emit`]). It is
//! pure Rust and needs no GPU: plans and their kernels can be read on any machine.
#![warn(missing_docs)]

pub mod spec;

pub use spec::{
    Access, BinaryOp, Expr, Form, Input, KernelSpec, OutputShape, Param, ReduceKind, Reduction,
    ScalarType, UnaryOp,
};
