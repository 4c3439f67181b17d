//! [`CudaBackend`]: device setup, buffers and transfers, the target it offers the planner, and
//! the dispatch of plan steps to their units ([`crate::cuda::ops`]) on its lanes.

use crate::backend::{
    from_half_bits, to_half_bits, Arg, Backend, BufferInfo, ElemType, HostSlice, HostVec,
};
use crate::cuda::blas::BlasHandle;
use crate::cuda::builtin_ops::CountScratch;
use crate::cuda::device::{device_limits, Device, LANES};
use crate::cuda::driver;
use crate::cuda::errors::{driver_error, invalid};
use crate::cuda::graphs::{self, CudaRecording};
use crate::cuda::memory::CudaBuffer;
use crate::cuda::nvrtc::{CacheSettings, KernelCache, KernelCacheStats};
use crate::cuda::ops::{self, StepCx};
use crate::cuda::probe::check_libraries;
use crate::cuda::sparse::SparseOps;
use crate::error::RuntimeError;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{result as drv, CudaContext, CudaEvent};
use popcorn_dsl::plan::{Step, StepPart};
use popcorn_dsl::{DType, Target};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// Settings of a [`CudaBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// Let cuBLAS use TF32 tensor cores for every f32 product (faster, about 10 bits of
    /// mantissa), whatever the plan says. Off by default: a plan asks for TF32 per step.
    pub allow_tf32: bool,
    /// The on-disk kernel cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
    /// Where the `.cu` and `.ptx` of every compiled kernel are written (`POPCORN_DUMP_DIR`).
    pub dump_dir: Option<PathBuf>,
    /// Log kernel-cache hits, misses and compiles to stderr (`POPCORN_LOG=cache`).
    pub log_cache: bool,
    /// Round a TF32 contraction's operands to TF32 once in memory before its launch, where its
    /// kernel would stage them many times, instead of rounding every staged chunk (off with
    /// `POPCORN_TF32_ROUND_IN_KERNEL=1`). The results are the same bit for bit.
    pub round_tf32_operands: bool,
    /// Run TF32 contractions whose operands are rounded in memory on the warp-specialised
    /// body where the device has one (compute capability 9.0) and the product is shallow
    /// enough (off with `POPCORN_NO_WARP_SPECIALISATION=1`): the same products and element
    /// values; the mirror images' sums by label add in another order.
    pub warp_specialised_contractions: bool,
    /// Sum a matrix held in 16 bits by label on tensor cores (products with the labels'
    /// one-hot selection) where the device has them (compute capability 8.0 and up) and `k` is
    /// at most 128 (off with `POPCORN_NO_TENSOR_CORE_SUMS=1`): the same sums, added in another
    /// order.
    pub tensor_core_sums: bool,
    /// Run those tensor-core sums in teams of four warps per block sharing each row group's
    /// tiles (off with `POPCORN_NO_SUMS_TEAMS=1`: one warp per block, and the bins kernel
    /// above 64 clusters): the same sums, added in another order.
    pub sums_teams: bool,
}

impl CudaConfig {
    /// Settings from [`popcorn_dsl::settings`]: `POPCORN_CACHE_DIR` (with its defaults),
    /// `POPCORN_DUMP_DIR`, `POPCORN_LOG=cache`; TF32 off.
    pub fn from_env() -> CudaConfig {
        let s = popcorn_dsl::settings::settings();
        CudaConfig {
            allow_tf32: false,
            cache_dir: s.cache_dir.clone(),
            dump_dir: s.dump_dir.clone(),
            log_cache: s.log.cache,
            round_tf32_operands: !s.tf32_round_in_kernel,
            warp_specialised_contractions: !s.no_warp_specialisation,
            tensor_core_sums: !s.no_tensor_core_sums,
            sums_teams: !s.no_sums_teams,
        }
    }
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig::from_env()
    }
}

/// A backend on one CUDA device: one context, two lanes (streams), and the library handles,
/// kernel cache and scratch memory bound to them.
pub struct CudaBackend {
    config: CudaConfig,
    description: String,
    name: String,
    capability: (i32, i32),
    total_memory: usize,
    device: Device,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.description)
            .field("config", &self.config)
            .finish()
    }
}

/// Bytes of freed memory the device's pool keeps for the next allocations: a run's buffers
/// allocated afresh every run (a partitioned plan's ranks) then reuse mapped memory. At most
/// 2 GiB or 1/32 of the device, so that other users of the device in this process (PyTorch
/// beside the Python package) lose little; the planner's memory checks count it as free,
/// and an allocation that fails trims the pool and tries again.
fn pool_keeps(total_memory: usize) -> u64 {
    (2u64 << 30).min(total_memory as u64 / 32)
}

impl CudaBackend {
    /// A backend on device `ordinal` with settings from the environment.
    pub fn new(ordinal: usize) -> Result<CudaBackend, RuntimeError> {
        CudaBackend::with_config(ordinal, CudaConfig::from_env())
    }

    /// A backend on device `ordinal` with the given settings. Fails with
    /// [`RuntimeError::Device`] when the driver or a library is missing or the device does not
    /// exist (never panics).
    pub fn with_config(ordinal: usize, config: CudaConfig) -> Result<CudaBackend, RuntimeError> {
        check_libraries().map_err(RuntimeError::Device)?;
        let count = crate::cuda::cuda_available().map_err(RuntimeError::Device)?;
        if ordinal >= count {
            return Err(RuntimeError::Device(format!(
                "cuda:{ordinal} does not exist: this machine has {count} CUDA device(s)"
            )));
        }
        let setup = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            CudaBackend::setup(ordinal, config)
        }));
        setup.unwrap_or_else(|_| {
            Err(RuntimeError::Device(
                "a CUDA library lacks a function popcorn needs (CUDA 12 or later is required)"
                    .to_string(),
            ))
        })
    }

    /// The device's ordinal (`cuda:N`).
    pub fn ordinal(&self) -> usize {
        self.device.ctx.ordinal()
    }

    /// Whether the work queued on the main stream has finished (`Ok(false)`: still running),
    /// or why it failed.
    pub(crate) fn stream_state(&self) -> Result<bool, String> {
        let stream = &self.device.streams[0];
        stream
            .context()
            .bind_to_thread()
            .map_err(crate::cuda::driver_message)?;
        // SAFETY: the stream is live for as long as the backend; querying changes nothing.
        let state = unsafe { cudarc::driver::sys::cuStreamQuery(stream.cu_stream()) };
        match state {
            cudarc::driver::sys::CUresult::CUDA_SUCCESS => Ok(true),
            cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(crate::cuda::driver_message(cudarc::driver::DriverError(e))),
        }
    }

    /// The stream this thread queues lane 0's work on, which collectives join: the device's
    /// main stream, or its capture stream while the thread records a graph for this device (so
    /// that a partitioned run's recording holds its collectives).
    pub(crate) fn main_stream(&self) -> &std::sync::Arc<cudarc::driver::CudaStream> {
        self.device.main()
    }

    fn setup(ordinal: usize, config: CudaConfig) -> Result<CudaBackend, RuntimeError> {
        let ctx =
            CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: cudarc's event tracking guards only its own `CudaSlice`s, and popcorn makes
        // none: its buffers are raw allocations ordered by its own lanes' joins. Left on, the
        // context's first stream would synchronize the whole (primary) context, which fails
        // while another thread of this process records a graph on the same device.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        let (_, greatest) = drv::stream::get_priority_range()
            .map_err(|e| driver_error("cuCtxGetStreamPriorityRange", e))?;
        let side_stream = ctx
            .new_stream_with_priority(greatest)
            .map_err(|e| driver_error("cuStreamCreateWithPriority", e))?;
        let name = ctx.name().map_err(|e| driver_error("cuDeviceGetName", e))?;
        let capability = ctx
            .compute_capability()
            .map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
        // Kernels compile for sm_90a there: the wgmma and warp-specialised TF32 bodies.
        let wgmma = capability == (9, 0);
        let total_memory = ctx
            .total_mem()
            .map_err(|e| driver_error("cuDeviceTotalMem", e))?;
        if ctx.has_async_alloc() {
            ctx.bind_to_thread()
                .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
            // SAFETY: the context was made current above.
            unsafe { driver::keep_pool_memory(ctx.cu_device(), pool_keeps(total_memory)) };
        }
        let description = format!(
            "cuda:{ordinal} {name} (sm_{}{}, {} MiB)",
            capability.0,
            capability.1,
            total_memory >> 20
        );
        let settings = CacheSettings {
            dir: config.cache_dir.clone(),
            dump_dir: config.dump_dir.clone(),
            log: config.log_cache,
        };
        let device = Device {
            kernels: KernelCache::new(ctx.clone(), capability, settings)?,
            blas: Mutex::new(BlasHandle::new(&stream, config.allow_tf32)?),
            sparse: Mutex::new(SparseOps::new(&stream)?),
            scratch: Mutex::new(CountScratch::default()),
            column_scratch: Default::default(),
            launch_shapes: Mutex::new(HashMap::new()),
            allow_tf32: config.allow_tf32,
            round_tf32_operands: config.round_tf32_operands,
            warp_specialised_contractions: config.warp_specialised_contractions && wgmma,
            tensor_core_sums: config.tensor_core_sums && capability >= (8, 0),
            sums_teams: config.sums_teams,
            wgmma,
            limits: device_limits(&ctx)?,
            capture_streams: [
                ctx.new_stream()
                    .map_err(|e| driver_error("cuStreamCreate", e))?,
                ctx.new_stream_with_priority(greatest)
                    .map_err(|e| driver_error("cuStreamCreateWithPriority", e))?,
            ],
            recorder: Mutex::new(()),
            scalar_staging: Mutex::new(None),
            streams: [stream, side_stream],
            ctx,
        };
        Ok(CudaBackend {
            config,
            description,
            name,
            capability,
            total_memory,
            device,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &CudaConfig {
        &self.config
    }

    /// The device's compute capability, `(major, minor)`.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.capability
    }

    /// How kernels were obtained so far (memory hits, disk hits, compiles).
    pub fn kernel_cache_stats(&self) -> KernelCacheStats {
        self.device.kernels.stats()
    }

    /// Bytes of the cuSPARSE work buffer (grown to the largest step shape seen).
    pub fn sparse_workspace_bytes(&self) -> usize {
        self.device
            .sparse
            .lock()
            .map(|s| s.workspace_bytes())
            .unwrap_or(0)
    }

    /// Compiles (or loads from the caches) the kernel `name` from `source`, e.g. to warm the
    /// cache before timing. Fails with [`RuntimeError::Compile`] if NVRTC rejects the source.
    pub fn compile_kernel(&self, name: &str, source: &str) -> Result<(), RuntimeError> {
        self.device.bind()?;
        self.device
            .kernels
            .function(name, || source.to_string())
            .map(|_| ())
    }

    /// The device's state (for the step units, the raw API and tests).
    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// Runs part `part` of `step` on lane `lane`.
    #[allow(clippy::too_many_arguments)]
    fn run_on_lane(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
        dtype: DType,
        alpha: f64,
        part: StepPart,
        lane: usize,
    ) -> Result<(), RuntimeError> {
        self.device.bind()?;
        let cx = StepCx {
            device: &self.device,
            lane,
            stream: self.device.lane(lane)?,
            dtype,
            alpha,
        };
        ops::run(&cx, step, (inputs, outputs), part)
    }
}

/// The planner's target for this device: the reference GPU's figures, with this device's name,
/// multiprocessors and memory, and the tile and leaf sizes of this backend's kernels.
fn device_target(name: &str, capability: (i32, i32), sms: u32, memory: usize) -> Target {
    let mut t = Target::reference_gpu();
    t.device = format!("{name} (sm_{}{})", capability.0, capability.1);
    t.parallelism = sms as usize;
    t.memory_bytes = Some(memory as u64);
    t.band_rows_multiple = Some(kernels_gen::emit::PAIR_TILE as usize);
    if let Some(b) = t.syrk_blocking.as_mut() {
        b.leaf_rows = crate::cuda::syrk_blocks::SYRK_LEAF_ROWS;
    }
    if let Some(c) = t.contractions.as_mut() {
        // Only the `wgmma` body (sm_90a) mirrors.
        c.mirror_min_depth =
            (capability == (9, 0)).then_some(kernels_gen::emit::PIPELINE_MIRROR_MIN_DEPTH as usize);
    }
    t
}

impl Backend for CudaBackend {
    type Buf = CudaBuffer;
    type Mark = CudaMark;
    type Recording = CudaRecording;

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn target(&self) -> Target {
        device_target(
            &self.name,
            self.capability,
            self.device.limits.multiprocessors,
            self.total_memory,
        )
    }

    fn alloc(&self, elem: ElemType, len: usize) -> Result<CudaBuffer, RuntimeError> {
        CudaBuffer::alloc(self.device.main(), elem, len)
    }

    fn upload(&self, data: HostSlice<'_>) -> Result<CudaBuffer, RuntimeError> {
        let buf = self.alloc(data.elem(), data.len())?;
        self.write(&buf, data)?;
        Ok(buf)
    }

    fn write(&self, buf: &CudaBuffer, data: HostSlice<'_>) -> Result<(), RuntimeError> {
        if buf.elem() != data.elem() || buf.len() != data.len() {
            return Err(invalid(format!(
                "cannot write {} {:?} values into a buffer of {} {:?}",
                data.len(),
                data.elem(),
                buf.len(),
                buf.elem()
            )));
        }
        self.device.bind()?;
        let (dst, stream) = (buf.device_ptr(), self.device.main());
        // SAFETY: `dst` holds exactly `data.len()` elements of the same type (checked above)
        // and belongs to this device.
        unsafe {
            match data {
                HostSlice::F32(s) => driver::copy_htod(stream, dst, s),
                HostSlice::F64(s) => driver::copy_htod(stream, dst, s),
                HostSlice::U32(s) => driver::copy_htod(stream, dst, s),
                HostSlice::I32(s) => driver::copy_htod(stream, dst, s),
                HostSlice::Half(_, s) => driver::copy_htod(stream, dst, s),
            }
        }
    }

    fn download(&self, buf: &CudaBuffer) -> Result<HostVec, RuntimeError> {
        self.synchronize()?;
        let src = buf.device_ptr();
        let n = buf.len();
        fn read<T: Default + Copy>(src: u64, n: usize) -> Result<Vec<T>, RuntimeError> {
            // A host copy as large as the device's memory may not fit in the host's: checked
            // (under POPCORN_MEMORY_LIMIT too) and allocated without aborting.
            let limit = popcorn_dsl::settings::settings().memory_limit;
            let mut v = crate::host_memory::try_vec(
                n,
                T::default(),
                "a host copy of a GPU result",
                (limit, 0),
            )?;
            // SAFETY: `src` holds `n` elements of `T` (the buffer's element type); the lanes
            // were synchronised, so no queued work writes it.
            unsafe { driver::copy_dtoh(&mut v, src)? };
            Ok(v)
        }
        Ok(match buf.elem() {
            ElemType::F32 => HostVec::F32(read(src, n)?),
            ElemType::F64 => HostVec::F64(read(src, n)?),
            ElemType::U32 => HostVec::U32(read(src, n)?),
            ElemType::I32 => HostVec::I32(read(src, n)?),
            ElemType::Half(h) => HostVec::Half(h, read(src, n)?),
        })
    }

    fn read_scalars(&self, bufs: &[&CudaBuffer]) -> Result<Vec<f64>, RuntimeError> {
        if bufs.is_empty() {
            return Ok(Vec::new());
        }
        self.device.bind()?;
        let mut staging = self
            .device
            .scalar_staging
            .lock()
            .map_err(|_| RuntimeError::Device("the scalar staging lock is poisoned".into()))?;
        if staging.as_ref().is_none_or(|s| s.len() < bufs.len()) {
            // Cached (not write-combined) page-locked memory: the host reads it.
            // SAFETY: the memory is written by the copies below before it is read.
            let fresh = unsafe {
                self.device
                    .ctx
                    .alloc_pinned_with_flags::<u64>(bufs.len().max(8), 0)
            }
            .map_err(|e| driver_error("cuMemHostAlloc", e))?;
            *staging = Some(fresh);
        }
        let slots = staging
            .as_mut()
            .ok_or_else(|| invalid("the scalar staging memory is missing"))?;
        let host = slots
            .as_mut_ptr()
            .map_err(|e| driver_error("cuEventSynchronize", e))?;
        let main = self.device.main();
        for (i, b) in bufs.iter().enumerate() {
            if b.is_empty() {
                continue;
            }
            // SAFETY: slot `i` (8 bytes) exists (the staging holds at least bufs.len() slots)
            // and receives at most 8 bytes, the buffer's first element; the copy is ordered on
            // the main lane after the work that wrote the buffer, and read only after the
            // synchronisation below.
            unsafe {
                cudarc::driver::sys::cuMemcpyDtoHAsync_v2(
                    host.add(i).cast(),
                    b.device_ptr(),
                    b.elem().size_bytes(),
                    main.cu_stream(),
                )
            }
            .result()
            .map_err(|e| driver_error("cuMemcpyDtoHAsync", e))?;
        }
        // Both lanes, as download does, so that an asynchronous failure is reported here.
        self.synchronize()?;
        Ok(bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if b.is_empty() {
                    return f64::NAN;
                }
                // SAFETY: slot i was written by the copy above, which has completed.
                let bits = unsafe { *host.add(i) };
                match b.elem() {
                    ElemType::F32 => f64::from(f32::from_bits(bits as u32)),
                    ElemType::F64 => f64::from_bits(bits),
                    ElemType::U32 => f64::from(bits as u32),
                    ElemType::I32 => f64::from(bits as u32 as i32),
                    ElemType::Half(h) => f64::from(from_half_bits(h, bits as u16)),
                }
            })
            .collect())
    }

    fn copy_block(
        &self,
        src: &CudaBuffer,
        from: usize,
        dst: &CudaBuffer,
        len: usize,
    ) -> Result<(), RuntimeError> {
        if src.elem() != dst.elem() || from + len > src.len() || len > dst.len() {
            return Err(RuntimeError::Internal(format!(
                "a copy of {len} elements from {from} of a buffer of {} into one of {}",
                src.len(),
                dst.len()
            )));
        }
        let size = src.elem().size_bytes();
        self.device.bind()?;
        // SAFETY: both ranges lie inside buffers of this device (checked above); the copy is
        // ordered on the main stream after the work that wrote `src`.
        unsafe {
            crate::cuda::driver::copy_dtod(
                self.device.main(),
                dst.device_ptr(),
                src.device_ptr() + (from * size) as u64,
                len * size,
            )
        }
    }

    fn fill(&self, buf: &CudaBuffer, value: f64) -> Result<(), RuntimeError> {
        self.device.bind()?;
        let b = self.device.builtins(self.device.main());
        let (ptr, len) = (buf.device_ptr(), buf.len());
        // SAFETY: `ptr` is this buffer's memory, `len` elements of its own type.
        unsafe {
            match buf.elem() {
                ElemType::F32 => b.memset32(ptr, (value as f32).to_bits(), len),
                ElemType::U32 => b.memset32(
                    ptr,
                    if value.is_nan() {
                        u32::MAX
                    } else {
                        value as u32
                    },
                    len,
                ),
                ElemType::I32 => b.memset32(
                    ptr,
                    (if value.is_nan() { -1 } else { value as i32 }) as u32,
                    len,
                ),
                ElemType::F64 => b.fill_f64(ptr, len, value),
                ElemType::Half(h) => b.memset16(ptr, to_half_bits(h, value as f32), len),
            }
        }
    }

    fn memory_info(&self) -> Option<(usize, usize)> {
        let (free, total) = self.device.ctx.mem_get_info().ok()?;
        if !self.device.ctx.has_async_alloc() {
            return Some((free, total));
        }
        // Memory the pool keeps for reuse is free to this process's next allocations.
        // SAFETY: mem_get_info made the context current.
        let spare = unsafe { driver::pool_spare_bytes(self.device.ctx.cu_device()) };
        Some((
            (free as u64).saturating_add(spare).min(total as u64) as usize,
            total,
        ))
    }

    fn release_memory(&self) -> Result<(), RuntimeError> {
        // Stream-ordered frees return memory to the device's default pool; once the streams
        // are idle, trimming the pool hands it back to the driver.
        self.synchronize()?;
        if !self.device.ctx.has_async_alloc() {
            return Ok(());
        }
        // SAFETY: the context is current (synchronize bound it) and the streams are idle.
        unsafe { driver::trim_default_pool(self.device.ctx.cu_device()) };
        Ok(())
    }

    fn run_step(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        self.run_on_lane(step, inputs, outputs, dtype, alpha, StepPart::Whole, 0)
    }

    fn lanes(&self) -> usize {
        LANES
    }

    fn run_part(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
        dtype: DType,
        alpha: f64,
        part: StepPart,
        lane: usize,
    ) -> Result<(), RuntimeError> {
        self.run_on_lane(step, inputs, outputs, dtype, alpha, part, lane)
    }

    fn order_lanes(&self, from: usize, to: usize) -> Result<(), RuntimeError> {
        self.device.bind()?;
        let (from, to) = (self.device.lane(from)?, self.device.lane(to)?);
        let written = from
            .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(|e| driver_error("cuEventRecord", e))?;
        to.wait(&written)
            .map_err(|e| driver_error("cuStreamWaitEvent", e))
    }

    fn join_lanes(&self) -> Result<(), RuntimeError> {
        self.device.bind()?;
        let main = self.device.main();
        for lane in 1..LANES {
            let side = self.device.lane(lane)?;
            let joined = side
                .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .and_then(|done| main.wait(&done))
                .map_err(|e| driver_error("cuStreamWaitEvent", e));
            if let Err(e) = joined {
                // The error to report is this one; the wait only keeps buffers safe.
                let _ = side.synchronize();
                return Err(e);
            }
        }
        Ok(())
    }

    fn prepare_products(&self) -> Result<(), RuntimeError> {
        self.device.bind()?;
        self.device
            .blas
            .lock()
            .map_err(|_| crate::cuda::nvrtc::poisoned())?
            .prepare()
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        self.device.bind()?;
        for s in &self.device.streams {
            s.synchronize()
                .map_err(|e| driver_error("cuStreamSynchronize", e))?;
        }
        Ok(())
    }

    fn mark(&self) -> Result<CudaMark, RuntimeError> {
        self.device.bind()?;
        self.device
            .main()
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map(CudaMark)
            .map_err(|e| driver_error("cuEventRecord", e))
    }

    fn elapsed_ms(&self, a: &CudaMark, b: &CudaMark) -> Result<f64, RuntimeError> {
        self.device.bind()?;
        // Waits for both events, then reads the time between them.
        a.0.elapsed_ms(&b.0)
            .map(f64::from)
            .map_err(|e| driver_error("cuEventElapsedTime", e))
    }

    fn can_record(&self) -> bool {
        true
    }

    fn record(
        &self,
        queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Option<CudaRecording>, RuntimeError> {
        graphs::record(&self.device, queue).map(Some)
    }

    fn replay(&self, recording: &CudaRecording) -> Result<bool, RuntimeError> {
        graphs::replay(&self.device, recording)
    }

    fn recording_epoch(&self) -> u64 {
        crate::cuda::memory::scratch_epoch()
    }

    fn record_together(
        backends: &[&Self],
        queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Option<Vec<CudaRecording>>, RuntimeError> {
        let devices: Vec<&Device> = backends.iter().map(|b| &b.device).collect();
        graphs::record_together(&devices, queue).map(Some)
    }

    fn replay_together(runs: &[(&Self, &CudaRecording)]) -> Result<bool, RuntimeError> {
        let runs: Vec<_> = runs.iter().map(|(b, r)| (&b.device, *r)).collect();
        graphs::replay_together(&runs)
    }

    fn address(&self, buf: &CudaBuffer) -> u64 {
        buf.device_ptr()
    }
}

/// A CUDA event recorded on the backend's main stream ([`Backend::mark`]): it completes when the
/// work queued before it has finished.
#[derive(Debug)]
pub struct CudaMark(CudaEvent);

#[cfg(test)]
mod tests {
    use super::device_target;

    #[test]
    fn a_device_target_is_the_reference_with_this_devices_facts() {
        let t = device_target("NVIDIA H100 80GB HBM3", (9, 0), 132, 85_017_755_648);
        let reference = popcorn_dsl::Target::reference_gpu();
        assert_eq!(
            t, reference,
            "the reference describes this backend on an H100"
        );
        let other = device_target("Other GPU", (8, 6), 84, 1 << 34);
        assert_eq!(other.parallelism, 84);
        assert_eq!(other.device, "Other GPU (sm_86)");
        assert_eq!(other.band_rows_multiple, reference.band_rows_multiple);
        assert_eq!(
            other.contractions.and_then(|c| c.mirror_min_depth),
            None,
            "no wgmma body, no mirrored stores"
        );
    }
}
