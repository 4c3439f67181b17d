//! The CUDA backend: one device, one context, two lanes (streams).
//!
//! [`CudaBackend`] implements [`crate::backend::Backend`] on an NVIDIA GPU through cudarc's
//! dynamically loaded bindings. It offers the planner its [target](popcorn_dsl::Target) (the
//! device's name, multiprocessors and memory, with its kernels' tile and leaf sizes) and runs
//! each plan step through the step's unit (`ops`: one per operation):
//! - dense products through cuBLAS (`blas`, mapped onto column-major conventions by
//!   [`col_major`]): GEMM, GEMV, and SYRK, either one library call or GEMMs over block rows
//!   ([`syrk_blocks`]) that also run band by band, the producer of a pipeline;
//! - sparse products through a small safe cuSPARSE layer ([`sparse`]): CSR SpMM with the sparse
//!   operand on either side, and SpMV, with work buffers sized once per step shape;
//! - fused kernels, emitted by kernels-gen from their specs on first use, and the builtin
//!   kernels (diagonal, fill, symmetrize, counts, label sums, selection matrix, cluster sums),
//!   compiled by NVRTC for the device's architecture and cached in memory and on disk
//!   ([`nvrtc`]).
//!
//! One module calls the driver directly (`driver`); every function there takes raw device
//! addresses and is `unsafe`, and the step units reach it only after checking their arguments
//! against typed views (`args`). [`raw`] is an explicitly unsafe door for benchmarks and
//! baselines that run kernels of their own. Settings come from [`popcorn_dsl::settings`]
//! (`POPCORN_CACHE_DIR`, `POPCORN_DUMP_DIR`, `POPCORN_LOG=cache`).
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
mod graphs;
mod memory;
pub mod nccl;
pub mod nvrtc;
mod ops;
mod probe;
pub mod raw;
mod recording;
pub mod sparse;
pub mod syrk_blocks;

#[cfg(test)]
mod tests;

pub use backend::{CudaBackend, CudaConfig, CudaMark};
pub use errors::driver_message;
pub use graphs::CudaRecording;
pub use memory::CudaBuffer;
pub use nccl::NcclRanks;
pub use nvrtc::KernelCacheStats;
pub use probe::cuda_available;
