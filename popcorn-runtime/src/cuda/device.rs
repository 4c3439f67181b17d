//! The state of one CUDA device that a backend holds: its context, its lanes (streams), the
//! library handles bound to the main lane, the kernel cache and scratch memory. The step units
//! ([`crate::cuda::ops`]) and the raw API ([`crate::cuda::raw`]) work on it; the backend
//! ([`crate::cuda::CudaBackend`]) owns it.

use crate::cuda::blas::BlasHandle;
use crate::cuda::builtin_ops::{Builtins, CountScratch};
use crate::cuda::errors::driver_error;
use crate::cuda::memory::GrowBuffer;
use crate::cuda::nvrtc::KernelCache;
use crate::cuda::sparse::SparseOps;
use crate::error::RuntimeError;
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use kernels_gen::cluster_sums::DeviceLimits;
use kernels_gen::LaunchShape;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Lanes of a device: the main stream (every ordinary step, and every library call) and a
/// second stream of the highest priority for the consumer of a pipeline.
pub(crate) const LANES: usize = 2;

/// A device's state.
pub(crate) struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    /// The lanes: `streams[0]` is the main stream.
    pub(crate) streams: [Arc<CudaStream>; LANES],
    /// The lanes of a thread recording a graph ([`crate::cuda::recording`]).
    pub(crate) capture_streams: [Arc<CudaStream>; LANES],
    /// Held while a graph is recorded.
    pub(crate) recorder: Mutex<()>,
    /// Page-locked host memory that scalar results are copied into (grown as needed).
    pub(crate) scalar_staging: Mutex<Option<cudarc::driver::PinnedHostSlice<u64>>>,
    pub(crate) kernels: KernelCache,
    /// cuBLAS, bound to the main stream.
    pub(crate) blas: Mutex<BlasHandle>,
    /// cuSPARSE, bound to the main stream.
    pub(crate) sparse: Mutex<SparseOps>,
    pub(crate) scratch: Mutex<CountScratch>,
    /// Per lane: the partials and tickets of column reductions split over blocks of rows.
    pub(crate) column_scratch: [Mutex<GrowBuffer>; LANES],
    /// Launch shapes of fused kernels, by name (checked against their specs once).
    pub(crate) launch_shapes: Mutex<HashMap<String, LaunchShape>>,
    /// Let cuBLAS use TF32 for every f32 product, whatever the plan says.
    pub(crate) allow_tf32: bool,
    /// Round TF32 contractions' operands once in memory ([`super::CudaConfig::round_tf32_operands`]).
    pub(crate) round_tf32_operands: bool,
    /// Warp-specialised TF32 contractions ([`super::CudaConfig::warp_specialised_contractions`],
    /// on a device of compute capability 9.0).
    pub(crate) warp_specialised_contractions: bool,
    /// Cluster sums over a matrix held in 16 bits on tensor cores
    /// ([`super::CudaConfig::tensor_core_sums`], on a device of compute capability 8.0 and up).
    pub(crate) tensor_core_sums: bool,
    /// Those sums in teams of warps ([`super::CudaConfig::sums_teams`]).
    pub(crate) sums_teams: bool,
    /// Kernels compile for `sm_90a` (compute capability 9.0): TF32 contractions run on the
    /// `wgmma` body, the only one that writes a kernel matrix's mirror images.
    pub(crate) wgmma: bool,
    pub(crate) limits: DeviceLimits,
}

impl Device {
    /// The main stream (of this thread: a capture stream while it records a graph).
    pub(crate) fn main(&self) -> &Arc<CudaStream> {
        &self.lanes()[0]
    }

    /// The device's identity for [`crate::cuda::recording`] (its address: a device does not
    /// move while a thread records for it, which borrows it throughout).
    pub(crate) fn identity(&self) -> usize {
        self as *const Device as usize
    }

    /// This thread's lanes: the capture streams while it records a graph for this device.
    fn lanes(&self) -> &[Arc<CudaStream>; LANES] {
        if crate::cuda::recording::recording_for(self.identity()) {
            &self.capture_streams
        } else {
            &self.streams
        }
    }

    /// The stream of lane `lane` (of this thread, as [`Device::main`]).
    pub(crate) fn lane(&self, lane: usize) -> Result<&Arc<CudaStream>, RuntimeError> {
        self.lanes().get(lane).ok_or_else(|| {
            RuntimeError::InvalidData(format!(
                "lane {lane} does not exist: the device has {LANES}"
            ))
        })
    }

    /// Builtin kernels on `stream`.
    pub(crate) fn builtins<'a>(&'a self, stream: &'a Arc<CudaStream>) -> Builtins<'a> {
        Builtins {
            kernels: &self.kernels,
            stream,
        }
    }

    /// Lets `function` launch with as much dynamic shared memory as the device allows it (its
    /// largest opt-in less the kernel's static shared memory), after checking that this
    /// launch's `needed` bytes fit (`what` names the launch in the error). The attribute
    /// belongs to the kernel, which threads sharing the device launch at other sizes: set to
    /// the largest value, not to this launch's, it never drops below what another thread's
    /// launch needs between that thread's setting and its launch.
    pub(crate) fn allow_opt_in_shared(
        &self,
        function: &CudaFunction,
        needed: u64,
        what: &dyn Fn() -> String,
    ) -> Result<(), RuntimeError> {
        let fixed = function
            .get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            .map_err(|e| {
                driver_error(
                    &format!("cuFuncGetAttribute(SHARED_SIZE_BYTES) for {}", what()),
                    e,
                )
            })?;
        let most = self
            .limits
            .shared_bytes_per_block_optin
            .saturating_sub(u32::try_from(fixed).unwrap_or(0));
        if needed > u64::from(most) {
            return Err(RuntimeError::InvalidData(format!(
                "{} needs {needed} bytes of dynamic shared memory per block and this device \
                 allows it {most}",
                what()
            )));
        }
        function
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                i32::try_from(most).unwrap_or(i32::MAX),
            )
            .map_err(|e| {
                driver_error(
                    &format!(
                        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = {most}) for {}",
                        what()
                    ),
                    e,
                )
            })
    }

    /// Makes the device's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<(), RuntimeError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))
    }
}

/// Reads the device's multiprocessor and shared-memory limits.
pub(crate) fn device_limits(ctx: &CudaContext) -> Result<DeviceLimits, RuntimeError> {
    let get = |attr: CUdevice_attribute| -> Result<u32, RuntimeError> {
        let v = ctx
            .attribute(attr)
            .map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
        Ok(u32::try_from(v).unwrap_or(0))
    };
    Ok(DeviceLimits {
        multiprocessors: get(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        shared_bytes_per_sm: get(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        )?,
        shared_bytes_per_block_optin: get(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?,
        reserved_shared_bytes_per_block: get(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
        )?,
        max_blocks_per_sm: get(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
        )?,
    })
}
