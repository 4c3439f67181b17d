//! Launching a compiled kernel with a typed argument list.

use crate::cuda::errors::driver_message;
use crate::error::RuntimeError;
use cudarc::driver::{result as drv, CudaFunction, CudaStream};
use kernels_gen::LaunchDims;
use std::ffi::c_void;

/// One kernel argument, by value, exactly as the kernel declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KernelArg {
    /// `long long`
    I64(i64),
    /// `float`
    F32(f32),
    /// `double`
    F64(f64),
    /// Any device pointer.
    Ptr(u64),
}

impl KernelArg {
    /// A size as `long long`.
    pub(crate) fn size(value: usize) -> Result<KernelArg, RuntimeError> {
        i64::try_from(value).map(KernelArg::I64).map_err(|_| {
            RuntimeError::InvalidData(format!(
                "size {value} does not fit in a kernel's 64-bit size"
            ))
        })
    }

    /// A float scalar in the kernel's type (`float` or `double`).
    pub(crate) fn float(value: f64, dtype: kernel_ir::ScalarType) -> KernelArg {
        match dtype {
            kernel_ir::ScalarType::F32 => KernelArg::F32(value as f32),
            kernel_ir::ScalarType::F64 => KernelArg::F64(value),
        }
    }

    /// The address of the value, as `cuLaunchKernel` takes parameters.
    fn as_param(&mut self) -> *mut c_void {
        match self {
            KernelArg::I64(v) => v as *mut i64 as *mut c_void,
            KernelArg::F32(v) => v as *mut f32 as *mut c_void,
            KernelArg::F64(v) => v as *mut f64 as *mut c_void,
            KernelArg::Ptr(v) => v as *mut u64 as *mut c_void,
        }
    }
}

/// Launches `function` (entry point `name`) on `stream` with `args` and the given geometry.
///
/// The caller guarantees that `args` match the kernel's parameter list in number, order and
/// type, and that every pointer refers to device memory large enough for what the kernel
/// touches at these sizes (the step modules validate sizes before calling).
pub(crate) fn launch(
    stream: &CudaStream,
    function: &CudaFunction,
    name: &str,
    dims: LaunchDims,
    args: &mut [KernelArg],
) -> Result<(), RuntimeError> {
    let (grid, block, shared_bytes) = dims;
    let mut params: Vec<*mut c_void> = args.iter_mut().map(KernelArg::as_param).collect();
    // SAFETY: `function` is a live handle of a loaded module (the `CudaFunction` keeps the
    // module alive); `params` holds one pointer per kernel parameter, each to a value of the
    // declared type that lives until this call returns (the driver copies parameters at
    // launch); device pointers are valid for the sizes the kernel reads and writes, as the
    // caller validated; the stream belongs to the current context.
    let launched = unsafe {
        drv::launch_kernel(
            function.cu_function(),
            grid,
            block,
            shared_bytes,
            stream.cu_stream(),
            &mut params,
        )
    };
    launched.map_err(|e| RuntimeError::Cuda {
        call: format!("cuLaunchKernel({name}, grid {grid:?}, block {block:?})"),
        message: driver_message(e),
    })
}
