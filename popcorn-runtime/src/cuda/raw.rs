//! An explicitly unsafe door into the CUDA backend, for benchmarks and baselines that run
//! hand-written kernels beside popcorn's plans (the naive Kernel K-means baseline and the
//! cluster-sums micro-benchmark of the `popcorn-bench` crate). Popcorn's own path never uses
//! it: plans reach the device through typed, checked steps.
//!
//! Compiling a kernel is safe; launching one, or running the cluster-sums kernel on raw
//! addresses, is `unsafe`: the caller vouches for every address and argument.

use crate::cuda::backend::CudaBackend;
use crate::cuda::driver;
use crate::cuda::ops;
use crate::error::RuntimeError;
use cudarc::driver::CudaFunction;
use kernels_gen::LaunchDims;

pub use crate::cuda::driver::KernelArg;
pub use crate::cuda::ops::{ClusterSumsArgs, ClusterSumsReport, ClusterSumsTuning};

/// The raw API of one backend.
#[derive(Clone, Copy)]
pub struct RawCuda<'a> {
    backend: &'a CudaBackend,
}

/// A compiled kernel (from the backend's kernel cache).
pub struct RawKernel {
    name: String,
    function: CudaFunction,
}

impl RawKernel {
    /// The entry point's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl CudaBackend {
    /// The raw API of this backend (see [`crate::cuda::raw`]).
    pub fn raw(&self) -> RawCuda<'_> {
        RawCuda { backend: self }
    }
}

impl RawCuda<'_> {
    /// The kernel `name`, compiled from `source()` on first use (then from the kernel cache).
    /// Fails with [`RuntimeError::Compile`] if NVRTC rejects the source.
    pub fn kernel(
        &self,
        name: &str,
        source: impl FnOnce() -> String,
    ) -> Result<RawKernel, RuntimeError> {
        let device = self.backend.device();
        device.bind()?;
        Ok(RawKernel {
            name: name.to_string(),
            function: device.kernels.function(name, source)?,
        })
    }

    /// Launches `kernel` with `args` on the backend's main stream, after the work queued there.
    ///
    /// # Safety
    /// `args` match the kernel's parameters in number, order and type, and every pointer among
    /// them refers to device memory of this backend large enough for what the kernel touches.
    pub unsafe fn launch(
        &self,
        kernel: &RawKernel,
        dims: LaunchDims,
        args: &mut [KernelArg],
    ) -> Result<(), RuntimeError> {
        let device = self.backend.device();
        device.bind()?;
        // SAFETY: as this function's contract says.
        unsafe { driver::launch(device.main(), &kernel.function, &kernel.name, dims, args) }
    }

    /// Runs popcorn's cluster-sums kernel on `args` on the main stream, with the launch's
    /// choices forced where `tuning` gives them (for benchmarks). `None` when there was nothing
    /// to launch.
    ///
    /// # Safety
    /// `args.m` holds `rows` rows of `ld` elements (the last `cols` long), `args.labels` `cols`
    /// `u32` labels and `args.s` `rows x k` elements, of `args.dtype`, on this backend.
    pub unsafe fn cluster_sums(
        &self,
        args: &ClusterSumsArgs,
        tuning: ClusterSumsTuning,
    ) -> Result<Option<ClusterSumsReport>, RuntimeError> {
        let device = self.backend.device();
        device.bind()?;
        // SAFETY: as this function's contract says.
        unsafe { ops::launch_cluster_sums(device, device.main(), args, tuning) }
    }

    /// Copies `bytes` from `src` to `dst` on the main stream (device to device).
    ///
    /// # Safety
    /// Both ranges are device memory of this backend of at least `bytes` bytes.
    pub unsafe fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<(), RuntimeError> {
        let device = self.backend.device();
        device.bind()?;
        // SAFETY: as this function's contract says.
        unsafe { driver::copy_dtod(device.main(), dst, src, bytes) }
    }

    /// The device's multiprocessors.
    pub fn multiprocessors(&self) -> u32 {
        self.backend.device().limits.multiprocessors
    }
}
