//! Device memory: an RAII allocation whose address can be read from `&self`, the backend's
//! buffer type, and a growable scratch buffer.

use crate::backend::{BufferInfo, ElemType};
use crate::cuda::driver;
use crate::cuda::errors::{driver_error, is_out_of_memory};
use crate::error::RuntimeError;
use cudarc::driver::{sys::CUdeviceptr, CudaStream};
use std::sync::{Arc, Mutex, MutexGuard};

/// The scratch epoch: advanced by every reallocation of scratch memory ([`GrowBuffer`]), whose
/// old memory CUDA graphs recorded before may use.
static SCRATCH_EPOCH: Mutex<u64> = Mutex::new(0);

/// Locks the scratch epoch: no scratch memory is reallocated (nor its old memory freed) while
/// the guard lives.
pub(crate) fn lock_scratch_epoch() -> MutexGuard<'static, u64> {
    // The epoch is a plain counter: a panic elsewhere cannot leave it inconsistent.
    SCRATCH_EPOCH.lock().unwrap_or_else(|p| p.into_inner())
}

/// The current scratch epoch.
pub(crate) fn scratch_epoch() -> u64 {
    *lock_scratch_epoch()
}

/// One device allocation, freed (stream-ordered) when dropped. Zero bytes allocate nothing and
/// have the null address.
pub(crate) struct DeviceMemory {
    ptr: CUdeviceptr,
    bytes: usize,
    stream: Arc<CudaStream>,
    stream_ordered: bool,
}

/// Allocations of at least this many bytes bypass the device's stream-ordered pool. A pool
/// maps new memory as it grows, and unmaps it when trimmed, at about a millisecond per GiB
/// either way, while a plain allocation of the same size takes a fraction of that (measured on
/// an H100, BENCHMARKS.md run 40): a kernel matrix of 12 GiB spent 17 ms being allocated from
/// the pool in a fresh process. Buffers this large are few (kernel matrices, products, their
/// workspaces) and their work dwarfs the device-wide wait of a plain free; smaller ones keep
/// the pool's cheap reuse between runs.
pub(crate) const PLAIN_ALLOCATION_BYTES: usize = 256 << 20;

impl DeviceMemory {
    /// Allocates `bytes` on `stream`'s device (from the stream-ordered pool below
    /// [`PLAIN_ALLOCATION_BYTES`], plainly from there on); `what` names the allocation in an
    /// out-of-memory error.
    pub(crate) fn alloc(
        stream: &Arc<CudaStream>,
        bytes: usize,
        what: &str,
    ) -> Result<Self, RuntimeError> {
        if crate::cuda::recording::recording() {
            return Err(crate::cuda::recording::no_allocation_while_recording(what));
        }
        let ctx = stream.context();
        ctx.bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        let stream_ordered = ctx.has_async_alloc() && bytes < PLAIN_ALLOCATION_BYTES;
        if bytes == 0 {
            return Ok(DeviceMemory {
                ptr: 0,
                bytes,
                stream: stream.clone(),
                stream_ordered,
            });
        }
        // SAFETY: the stream's context was made current above; the memory is freed once, in
        // `Drop`, with the same mode. Other lanes use it only between events that order them
        // after the allocating stream's work and before its free.
        let mut result = unsafe { driver::alloc(stream, bytes, stream_ordered) };
        if matches!(result, Err(e) if is_out_of_memory(e)) && ctx.has_async_alloc() {
            // Memory freed on the stream may still sit in the device's pool: wait for the
            // stream, hand the pool's free memory back, and try once more.
            if stream.synchronize().is_ok() {
                // SAFETY: as above; trimming frees only pool memory no allocation holds.
                unsafe {
                    driver::trim_default_pool(ctx.cu_device());
                    result = driver::alloc(stream, bytes, stream_ordered);
                }
            }
        }
        match result {
            Ok(ptr) => Ok(DeviceMemory {
                ptr,
                bytes,
                stream: stream.clone(),
                stream_ordered,
            }),
            Err(e) if is_out_of_memory(e) => {
                let (free, total) = ctx.mem_get_info().unwrap_or((0, 0));
                let mib = |b: usize| b.div_ceil(1 << 20);
                Err(RuntimeError::OutOfMemory {
                    memory: "GPU memory",
                    needed_mib: mib(bytes),
                    what: what.to_string(),
                    free_mib: free >> 20,
                    total_mib: total >> 20,
                    hint: "use smaller inputs, f32 instead of f64, or stop other programs using the GPU"
                        .to_string(),
                })
            }
            Err(e) => Err(RuntimeError::Driver {
                call: format!(
                    "{} ({bytes} bytes for {what})",
                    if stream_ordered {
                        "cuMemAllocAsync"
                    } else {
                        "cuMemAlloc"
                    }
                ),
                source: e,
            }),
        }
    }

    /// The device address (0 for an empty allocation).
    pub(crate) fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: `ptr` came from `driver::alloc` on this stream with this mode and is freed
        // once; work queued on the stream that still uses it runs before the free.
        let freed = unsafe { driver::free(&self.stream, self.ptr, self.stream_ordered) };
        ctx.record_err(freed);
    }
}

/// A buffer in device memory: element type, length and the allocation. Steps receive buffers
/// by shared reference and write through their device address.
pub struct CudaBuffer {
    mem: DeviceMemory,
    elem: ElemType,
    len: usize,
}

impl CudaBuffer {
    /// Allocates an uninitialised buffer of `len` elements.
    pub(crate) fn alloc(
        stream: &Arc<CudaStream>,
        elem: ElemType,
        len: usize,
    ) -> Result<Self, RuntimeError> {
        let bytes = len.checked_mul(elem.size_bytes()).ok_or_else(|| {
            RuntimeError::InvalidData(format!(
                "a buffer of {len} {elem:?} elements is larger than memory"
            ))
        })?;
        let what = format!("a buffer of {len} {elem:?} elements");
        Ok(CudaBuffer {
            mem: DeviceMemory::alloc(stream, bytes, &what)?,
            elem,
            len,
        })
    }

    /// The device address of the first element (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.mem.ptr()
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.mem.bytes()
    }
}

impl BufferInfo for CudaBuffer {
    fn elem(&self) -> ElemType {
        self.elem
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({:?} x {} at {:#x})",
            self.elem,
            self.len,
            self.device_ptr()
        )
    }
}

/// Scratch memory that grows to the largest size asked for and is reused (never shrinks), so
/// that steady-state steps allocate nothing.
#[derive(Default)]
pub(crate) struct GrowBuffer {
    mem: Option<DeviceMemory>,
}

impl GrowBuffer {
    /// The address of at least `bytes` bytes (reallocated only when larger than before).
    /// Earlier work that used the old allocation stays valid: the free is stream-ordered.
    pub(crate) fn ensure(
        &mut self,
        stream: &Arc<CudaStream>,
        bytes: usize,
        what: &str,
    ) -> Result<CudaDevicePtr, RuntimeError> {
        let big_enough = self.mem.as_ref().is_some_and(|m| m.bytes() >= bytes);
        if !big_enough {
            if crate::cuda::recording::recording() {
                // Refused before the old memory is freed: the recording fails, nothing changes.
                return Err(crate::cuda::recording::no_allocation_while_recording(what));
            }
            // A new epoch, under whose lock the old memory is freed: no graph recorded with
            // it launches after the free is queued.
            let mut epoch = lock_scratch_epoch();
            *epoch += 1;
            // Free first so the old and new blocks need not coexist.
            self.mem = None;
            self.mem = Some(DeviceMemory::alloc(stream, bytes, what)?);
        }
        Ok(self.mem.as_ref().map_or(0, DeviceMemory::ptr))
    }

    /// Current capacity in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.mem.as_ref().map_or(0, DeviceMemory::bytes)
    }
}

/// A raw device address.
pub(crate) type CudaDevicePtr = u64;

/// A buffer whose device address can be read (the backend's buffers; test doubles in host
/// tests).
pub(crate) trait DeviceAddress {
    /// The device address of the first element.
    fn address(&self) -> u64;
}

impl DeviceAddress for CudaBuffer {
    fn address(&self) -> u64 {
        self.device_ptr()
    }
}
