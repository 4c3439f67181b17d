//! Popcorn's runtime: the CPU and CUDA backends, tensors, the executor that runs plans, and
//! the [`Context`] users call.
//!
//! A [`Context`] picks a device ([`DeviceSpec`]: `POPCORN_DEVICE=cpu|cuda|cuda:N|cuda:0,1|cuda:all`, default the
//! first usable GPU), plans each program for its backend's [target](popcorn_dsl::Target) once
//! per shape signature (cached with its workspace) and runs it through the [`executor`] (on a
//! GPU, from its third run with the same tensors, by replaying a CUDA graph recorded at the
//! second), or, for a plan partitioned over several ranks, through [`ranks`]: several GPUs
//! of one process exchange through NCCL ([`cuda::NcclRanks`]), and a run over several
//! processes (started by `mpirun`, `srun` or `torchrun`, found by [`ranks::world`]) through
//! NCCL or a host channel; the tensors a partitioned run leaves stay on its ranks. Plans are
//! portable: the same plan runs on both backends, and the CPU backend is the reference every
//! GPU result is tested against.
#![warn(missing_docs)]

pub mod args;
pub mod backend;
pub mod context;
pub mod cpu;
pub mod cpu_backend;
pub mod cuda;
pub mod device;
pub mod dump;
pub mod error;
pub mod executor;
pub mod host_memory;
pub mod ranks;
mod recorded;
mod recording_keys;
mod side_lane;
pub mod tensor;
#[cfg(test)]
mod test_steps;

pub use args::{Args, Outputs};
pub use backend::{ElemType, HostVec};
pub use context::Context;
pub use device::DeviceSpec;
pub use error::RuntimeError;
pub use tensor::{Tensor, TensorShape};
