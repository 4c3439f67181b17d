//! The one place that calls the CUDA driver directly: memory, copies, fills and kernel
//! launches. Every function takes raw device addresses and is `unsafe`: the caller guarantees
//! that each address refers to live device memory of the current context, large enough for
//! what the call touches, and that the stream belongs to the context. The rest of the backend
//! reaches the driver through these functions (and cudarc's safe context, stream and event
//! types) after checking its arguments against typed views ([`crate::cuda::args`]).

use crate::cuda::errors::driver_error;
use crate::error::RuntimeError;
use cudarc::driver::sys::{self, CUmemorytype, CUDA_MEMCPY2D};
use cudarc::driver::{result as drv, CudaFunction, CudaStream};
use kernels_gen::LaunchDims;
use std::ffi::c_void;

/// One kernel argument, by value, exactly as the kernel declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// `long long`
    I64(i64),
    /// `float`
    F32(f32),
    /// `double`
    F64(f64),
    /// Any device pointer.
    Ptr(u64),
    /// `unsigned int`
    U32(u32),
    /// A `__grid_constant__` tensor map (`CUtensorMap`, 128 bytes).
    TensorMap(sys::CUtensorMap),
}

impl KernelArg {
    /// A size as `long long`.
    pub fn size(value: usize) -> Result<KernelArg, RuntimeError> {
        i64::try_from(value).map(KernelArg::I64).map_err(|_| {
            RuntimeError::InvalidData(format!(
                "size {value} does not fit in a kernel's 64-bit size"
            ))
        })
    }

    /// A float scalar in the kernel's type (`float` or `double`).
    pub fn float(value: f64, dtype: kernel_ir::ScalarType) -> KernelArg {
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
            KernelArg::U32(v) => v as *mut u32 as *mut c_void,
            KernelArg::TensorMap(v) => v as *mut sys::CUtensorMap as *mut c_void,
        }
    }
}

/// Launches `function` (entry point `name`) on `stream` with `args` and the given geometry.
///
/// # Safety
/// `args` match the kernel's parameter list in number, order and type, and every pointer among
/// them refers to device memory large enough for what the kernel touches at these sizes.
pub(crate) unsafe fn launch(
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
    // launch); the device pointers are valid for the kernel, as the caller guarantees; the
    // stream belongs to the current context.
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
    launched.map_err(|e| RuntimeError::Driver {
        call: format!("cuLaunchKernel({name}, grid {grid:?}, block {block:?})"),
        source: e,
    })
}

/// Sets `words` 32-bit words at `ptr` to `bits`, on `stream`.
///
/// # Safety
/// `ptr` holds at least `words` 32-bit words of device memory usable on `stream`.
pub(crate) unsafe fn memset32(
    stream: &CudaStream,
    ptr: u64,
    bits: u32,
    words: usize,
) -> Result<(), RuntimeError> {
    if words == 0 {
        return Ok(());
    }
    // SAFETY: the caller guarantees the range; the stream belongs to the current context.
    unsafe { sys::cuMemsetD32Async(ptr, bits, words, stream.cu_stream()) }
        .result()
        .map_err(|e| driver_error("cuMemsetD32Async", e))
}

/// Sets `halves` 16-bit words at `ptr` to `bits`, on `stream`.
///
/// # Safety
/// `ptr` holds at least `halves` 16-bit words of device memory usable on `stream`.
pub(crate) unsafe fn memset16(
    stream: &CudaStream,
    ptr: u64,
    bits: u16,
    halves: usize,
) -> Result<(), RuntimeError> {
    if halves == 0 {
        return Ok(());
    }
    // SAFETY: the caller guarantees the range; the stream belongs to the current context.
    unsafe { sys::cuMemsetD16Async(ptr, bits, halves, stream.cu_stream()) }
        .result()
        .map_err(|e| driver_error("cuMemsetD16Async", e))
}

/// Copies `bytes` from `src` to `dst` (device to device), on `stream`.
///
/// # Safety
/// Both ranges are device memory of at least `bytes` bytes usable on `stream`.
pub(crate) unsafe fn copy_dtod(
    stream: &CudaStream,
    dst: u64,
    src: u64,
    bytes: usize,
) -> Result<(), RuntimeError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the caller guarantees both ranges; the copy is ordered on the stream.
    unsafe { drv::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }
        .map_err(|e| driver_error("cuMemcpyDtoDAsync", e))
}

/// Copies `rows` rows of `row_bytes` bytes from `src` (rows `src_pitch` bytes apart) to `dst`
/// (rows `dst_pitch` bytes apart), device to device, on `stream`.
///
/// # Safety
/// Both are device memory of at least `rows` rows at their pitches (the last row only
/// `row_bytes` long), usable on `stream`; `row_bytes` is at most either pitch.
pub(crate) unsafe fn copy_rows(
    stream: &CudaStream,
    dst: u64,
    dst_pitch: usize,
    src: u64,
    src_pitch: usize,
    row_bytes: usize,
    rows: usize,
) -> Result<(), RuntimeError> {
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    let copy = CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst_pitch,
        WidthInBytes: row_bytes,
        Height: rows,
    };
    // SAFETY: the caller guarantees both ranges; the descriptor lives across the call (the
    // driver reads it before returning); the copy is ordered on the stream.
    unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }
        .result()
        .map_err(|e| driver_error("cuMemcpy2DAsync", e))
}

/// Sets the 32-bit words `[col0, col0 + words)` of each of `rows` rows (rows `pitch` bytes
/// apart) at `ptr` to `bits`, on `stream`.
///
/// # Safety
/// `ptr` holds `rows` rows at that pitch, each at least `(col0 + words) * 4` bytes long,
/// usable on `stream`.
pub(crate) unsafe fn memset32_rows(
    stream: &CudaStream,
    ptr: u64,
    pitch: usize,
    col0: usize,
    bits: u32,
    words: usize,
    rows: usize,
) -> Result<(), RuntimeError> {
    if rows == 0 || words == 0 {
        return Ok(());
    }
    // SAFETY: the caller guarantees the rows; the memset is ordered on the stream.
    unsafe {
        sys::cuMemsetD2D32Async(
            ptr + (col0 * 4) as u64,
            pitch,
            bits,
            words,
            rows,
            stream.cu_stream(),
        )
    }
    .result()
    .map_err(|e| driver_error("cuMemsetD2D32Async", e))
}

/// Copies `src` from the host into device memory at `dst`, on `stream`.
///
/// # Safety
/// `dst` holds at least `src.len()` elements of `T` usable on `stream`.
pub(crate) unsafe fn copy_htod<T: Copy>(
    stream: &CudaStream,
    dst: u64,
    src: &[T],
) -> Result<(), RuntimeError> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: the caller guarantees `dst`. The host data is pageable memory: the driver copies
    // it to a staging buffer before `cuMemcpyHtoDAsync` returns, so the borrow may end then.
    unsafe { drv::memcpy_htod_async(dst, src, stream.cu_stream()) }
        .map_err(|e| driver_error("cuMemcpyHtoDAsync", e))
}

/// Copies device memory at `src` into `dst` on the host, synchronously.
///
/// # Safety
/// `src` holds at least `dst.len()` elements of `T`, and no queued work writes it.
pub(crate) unsafe fn copy_dtoh<T: Copy>(dst: &mut [T], src: u64) -> Result<(), RuntimeError> {
    if dst.is_empty() {
        return Ok(());
    }
    // SAFETY: the caller guarantees `src`; the copy is synchronous, so `dst` is complete
    // when it returns.
    unsafe { drv::memcpy_dtoh_sync(dst, src) }.map_err(|e| driver_error("cuMemcpyDtoH", e))
}

/// Hands the free memory of `device`'s default memory pool back to the driver (errors are
/// ignored: the pool keeps its memory).
///
/// # Safety
/// A context of `device` is current and no stream-ordered allocation of the pool is in
/// flight that the caller relies on being kept.
pub(crate) unsafe fn trim_default_pool(device: cudarc::driver::sys::CUdevice) {
    // SAFETY: as the function's contract says.
    unsafe {
        if let Some(pool) = default_pool(device) {
            let _ = cudarc::driver::sys::cuMemPoolTrimTo(pool, 0);
        }
    }
}

/// The default memory pool of `device`, or `None` where the driver has none.
///
/// # Safety
/// A context of `device` is current.
unsafe fn default_pool(
    device: cudarc::driver::sys::CUdevice,
) -> Option<cudarc::driver::sys::CUmemoryPool> {
    let mut pool: cudarc::driver::sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: as the function's contract says; `pool` is written by the call.
    let got = unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&mut pool, device) };
    (got == cudarc::driver::sys::CUresult::CUDA_SUCCESS && !pool.is_null()).then_some(pool)
}

/// Lets `device`'s default memory pool keep up to `bytes` of freed memory across
/// synchronisations (the driver's default, 0, unmaps every free block at each one, so a run
/// whose buffers are allocated afresh maps its memory again every time). Errors are ignored:
/// the pool then keeps the driver's default.
///
/// # Safety
/// A context of `device` is current.
pub(crate) unsafe fn keep_pool_memory(device: cudarc::driver::sys::CUdevice, bytes: u64) {
    // SAFETY: the contract above; the attribute takes a cuuint64_t.
    unsafe {
        if let Some(pool) = default_pool(device) {
            let mut value = bytes;
            let _ = cudarc::driver::sys::cuMemPoolSetAttribute(
                pool,
                cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut value as *mut u64).cast(),
            );
        }
    }
}

/// Bytes `device`'s default memory pool holds but no allocation uses (0 where unknown).
///
/// # Safety
/// A context of `device` is current.
pub(crate) unsafe fn pool_spare_bytes(device: cudarc::driver::sys::CUdevice) -> u64 {
    use cudarc::driver::sys::CUmemPool_attribute as A;
    // SAFETY: the contract above; each attribute writes a cuuint64_t.
    unsafe {
        let Some(pool) = default_pool(device) else {
            return 0;
        };
        let (mut reserved, mut used) = (0u64, 0u64);
        let r = cudarc::driver::sys::cuMemPoolGetAttribute(
            pool,
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            (&mut reserved as *mut u64).cast(),
        );
        let u = cudarc::driver::sys::cuMemPoolGetAttribute(
            pool,
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            (&mut used as *mut u64).cast(),
        );
        if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS
            && u == cudarc::driver::sys::CUresult::CUDA_SUCCESS
        {
            reserved.saturating_sub(used)
        } else {
            0
        }
    }
}

/// Allocates `bytes` of device memory, stream-ordered on `stream` where the device supports
/// it (`stream_ordered`), else plainly.
///
/// # Safety
/// The stream's context is current; the memory is freed once, by [`free`] with the same
/// `stream_ordered`.
pub(crate) unsafe fn alloc(
    stream: &CudaStream,
    bytes: usize,
    stream_ordered: bool,
) -> Result<u64, cudarc::driver::DriverError> {
    if stream_ordered {
        // SAFETY: the stream belongs to the current context, as the caller guarantees.
        unsafe { drv::malloc_async(stream.cu_stream(), bytes) }
    } else {
        // SAFETY: a plain allocation in the current context.
        unsafe { drv::malloc_sync(bytes) }
    }
}

/// Frees memory from [`alloc`].
///
/// # Safety
/// `ptr` came from [`alloc`] on `stream` with the same `stream_ordered` and is freed once;
/// work queued on the stream that uses it runs before the free (stream order), and a plain
/// free waits for work using it.
pub(crate) unsafe fn free(
    stream: &CudaStream,
    ptr: u64,
    stream_ordered: bool,
) -> Result<(), cudarc::driver::DriverError> {
    if stream_ordered {
        // SAFETY: as the caller guarantees.
        unsafe { drv::free_async(ptr, stream.cu_stream()) }
    } else {
        // SAFETY: as the caller guarantees.
        unsafe { drv::free_sync(ptr) }
    }
}
