//! The CUDA backend: one device, one context, one stream.
//!
//! [`CudaBackend`] implements [`crate::backend::Backend`] on an NVIDIA GPU through cudarc's
//! driver bindings:
//! - dense products go to cuBLAS ([`blas`]): GEMM, SYRK (completed to the full symmetric
//!   matrix on the device) and GEMV, with row-major operands mapped onto cuBLAS's column-major
//!   conventions;
//! - sparse products go to cuSPARSE through a small safe layer ([`sparse`]): CSR SpMM with the
//!   sparse operand on either side, and SpMV, with work buffers sized once per step shape;
//! - fused kernels (from kernels-gen) and the builtin kernels (diagonal, fill, symmetrize,
//!   histogram, selection matrix) are compiled by NVRTC for the device's architecture and
//!   cached in memory and on disk ([`nvrtc`]);
//! - [`naive`] is the hand-written naive GPU baseline of Kernel K-means (three plain CUDA C
//!   kernels per iteration), which benchmarks compare popcorn's plans against.
//!
//! Environment:
//! - `POPCORN_CACHE_DIR`: the on-disk kernel cache (default `$XDG_CACHE_HOME/popcorn/kernels`,
//!   else `~/.cache/popcorn/kernels`);
//! - `POPCORN_DUMP_DIR`: where the `.cu` and `.ptx` of every kernel compiled go;
//! - `POPCORN_LOG=cache`: kernel-cache hits, misses and compiles on stderr;
//! - `POPCORN_SYNC=1`: synchronise and check for errors after every step.
//!
//! The CUDA libraries are loaded at run time. [`cuda_available`] probes for them first, so a
//! machine without a GPU or without the libraries gets an error message rather than a panic.

mod args;
mod backend;
mod blas;
mod builtin_ops;
pub mod col_major;
mod device;
mod driver;
mod errors;
mod memory;
pub mod nvrtc;
mod ops;
mod probe;
pub mod raw;
pub mod sparse;
pub mod syrk_blocks;

#[cfg(test)]
mod tests;

pub use backend::{CudaBackend, CudaConfig, CudaMark};
pub use errors::driver_message;
pub use memory::CudaBuffer;
pub use nvrtc::KernelCacheStats;
pub use probe::cuda_available;
