//! The CUDA emitter: CUDA C for popcorn's kernels, from the target-neutral kernel IR.
//!
//! The planner describes each fused group of element-wise maps, broadcasts and reductions, and
//! each contraction (a matrix product computed tile by tile with its epilogue and row
//! reductions: a pipelined template of `cp.async`, `wgmma` or `mma.sync` and a generated fold
//! for `float` products `A * B^T`, a simpler tiled one for the rest, see `emit::contraction`),
//! as a [`kernel_ir::KernelSpec`]; the CUDA backend calls [`emit()`] to turn a spec into
//! deterministic CUDA C that NVRTC compiles without any `#include`, together with its
//! [`LaunchShape`] (as data: [`launch_shape`] gives it without generating the text) and the
//! order of its parameters ([`params()`]). The [`builtins`] module holds the fixed kernels the
//! backend needs beside the fused ones (diagonal, fill, symmetrize, counts, label sums, CSR
//! selection matrix), and [`cluster_sums`] the streaming kernel for sums by label. The crate is
//! pure Rust and needs no GPU: generated kernels can be read on any machine.
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
//! let kernel = kernels_gen::emit(&spec);
//! assert_eq!(kernel.name, spec.name());
//! assert!(kernel.source.contains(&format!("void __launch_bounds__(256) {}(", kernel.name)));
//! assert!(kernel.source.contains("in0[i * in0_ld + j]"));
//! // The same spec always gives the same kernel.
//! assert_eq!(kernels_gen::emit(&spec), kernel);
//! // Launch for 1000 x 3 elements: 1-D blocks of 256 threads.
//! let (grid, block, shared_bytes) = kernel.launch.grid_block(1000, 3);
//! assert_eq!((grid, block, shared_bytes), ((12, 1, 1), (256, 1, 1), 0));
//! ```
#![warn(missing_docs)]

mod builtin_kernel;
pub mod builtins;
pub mod cluster_sums;
pub mod emit;
pub mod label_row_sums;
mod params;

pub use emit::{
    emit, emit_variant, launch_shape, packs_half_operands, splits_tf32_operands,
    takes_rounded_operands, try_emit, variant_entry, variant_name, zeroed_outputs,
    ContractionVariant, GeneratedKernel, LaunchDims, LaunchShape, RoundedOperands,
};
pub use params::{params, CType, Param};
