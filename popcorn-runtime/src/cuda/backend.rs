//! [`CudaBackend`]: device setup, buffers and transfers, and the dispatch of plan steps.

use crate::backend::{Arg, Backend, BufferInfo, ElemType, HostSlice, HostVec, StepIo};
use crate::cuda::args::{self, count, csr, dense, index, shape};
use crate::cuda::blas::BlasHandle;
use crate::cuda::builtin_ops::{Builtins, CountScratch};
use crate::cuda::errors::{driver, driver_message, invalid};
use crate::cuda::fused;
use crate::cuda::launch::launch;
use crate::cuda::memory::CudaBuffer;
use crate::cuda::nvrtc::{poisoned, CacheSettings, KernelCache, KernelCacheStats};
use crate::cuda::probe::check_libraries;
use crate::cuda::sparse::safe::ValueType;
use crate::cuda::sparse::{DenseOperand, SparseOps, SpmmRequest};
use crate::error::RuntimeError;
use cudarc::driver::sys::{CUevent_flags, CUmemorytype, CUDA_MEMCPY2D};
use cudarc::driver::{result as drv, CudaContext, CudaEvent, CudaFunction, CudaStream};
use kernels_gen::LaunchShape;
use popcorn_dsl::plan::{FusedStep, Step, StepOp};
use popcorn_dsl::DType;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Settings of a [`CudaBackend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaConfig {
    /// Let cuBLAS use TF32 tensor cores for f32 products (faster, about 10 bits of mantissa).
    /// Off by default: f32 products are computed in strict fp32.
    pub allow_tf32: bool,
    /// Synchronise and check for errors after every step (`POPCORN_SYNC=1`), so an
    /// asynchronous failure is reported by the step that caused it.
    pub sync_after_step: bool,
    /// The on-disk kernel cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
    /// Where the `.cu` and `.ptx` of every compiled kernel are written (`POPCORN_DUMP_DIR`).
    pub dump_dir: Option<PathBuf>,
    /// Log kernel-cache hits, misses and compiles to stderr (`POPCORN_LOG=cache`).
    pub log_cache: bool,
}

impl CudaConfig {
    /// Settings from the environment: `POPCORN_SYNC`, `POPCORN_CACHE_DIR` (else
    /// `$XDG_CACHE_HOME/popcorn/kernels` or `~/.cache/popcorn/kernels`), `POPCORN_DUMP_DIR`,
    /// `POPCORN_LOG`; TF32 off.
    pub fn from_env() -> CudaConfig {
        let cache = CacheSettings::from_env();
        let sync = std::env::var("POPCORN_SYNC")
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false);
        CudaConfig {
            allow_tf32: false,
            sync_after_step: sync,
            cache_dir: cache.dir,
            dump_dir: cache.dump_dir,
            log_cache: cache.log,
        }
    }
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig::from_env()
    }
}

/// A backend on one CUDA device: one context, one stream, and the library handles, kernel
/// cache and scratch buffers bound to them.
pub struct CudaBackend {
    config: CudaConfig,
    description: String,
    capability: (i32, i32),
    kernels: KernelCache,
    blas: Mutex<BlasHandle>,
    sparse: Mutex<SparseOps>,
    scratch: Mutex<CountScratch>,
    launch_shapes: Mutex<HashMap<String, LaunchShape>>,
    stream: Arc<CudaStream>,
    /// A second stream, of the highest priority, for maps that run beside the main stream's
    /// GEMMs (`StepOp::Syrk` with `overlap_map`).
    side_stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.description)
            .field("config", &self.config)
            .finish()
    }
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

    fn setup(ordinal: usize, config: CudaConfig) -> Result<CudaBackend, RuntimeError> {
        let ctx = CudaContext::new(ordinal).map_err(|e| driver("cuDevicePrimaryCtxRetain", e))?;
        let stream = ctx.new_stream().map_err(|e| driver("cuStreamCreate", e))?;
        let (_, greatest) = drv::stream::get_priority_range()
            .map_err(|e| driver("cuCtxGetStreamPriorityRange", e))?;
        let side_stream = ctx
            .new_stream_with_priority(greatest)
            .map_err(|e| driver("cuStreamCreateWithPriority", e))?;
        let name = ctx.name().map_err(|e| driver("cuDeviceGetName", e))?;
        let capability = ctx
            .compute_capability()
            .map_err(|e| driver("cuDeviceGetAttribute", e))?;
        let total = ctx.total_mem().map_err(|e| driver("cuDeviceTotalMem", e))?;
        let description = format!(
            "cuda:{ordinal} {name} (sm_{}{}, {} MiB)",
            capability.0,
            capability.1,
            total >> 20
        );
        let settings = CacheSettings {
            dir: config.cache_dir.clone(),
            dump_dir: config.dump_dir.clone(),
            log: config.log_cache,
        };
        Ok(CudaBackend {
            kernels: KernelCache::new(ctx.clone(), capability, settings)?,
            blas: Mutex::new(BlasHandle::new(&stream, config.allow_tf32)?),
            sparse: Mutex::new(SparseOps::new(&stream)?),
            scratch: Mutex::new(CountScratch::default()),
            launch_shapes: Mutex::new(HashMap::new()),
            config,
            description,
            capability,
            stream,
            side_stream,
            ctx,
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
        self.kernels.stats()
    }

    /// Bytes of the cuSPARSE work buffer (grown to the largest step shape seen).
    pub fn sparse_workspace_bytes(&self) -> usize {
        self.sparse.lock().map(|s| s.workspace_bytes()).unwrap_or(0)
    }

    /// Compiles (or loads from the caches) the kernel `name` from `source`, e.g. to warm the
    /// cache before timing. Fails with [`RuntimeError::Compile`] if NVRTC rejects the source.
    pub fn compile_kernel(&self, name: &str, source: &str) -> Result<(), RuntimeError> {
        self.bind()?;
        self.kernels
            .function(name, || source.to_string())
            .map(|_| ())
    }

    /// The kernel `name` from the kernel cache, compiled from `source()` on first use (for the
    /// backend's own hand-written kernels, such as the naive baseline's).
    pub(crate) fn kernel(
        &self,
        name: &str,
        source: impl FnOnce() -> String,
    ) -> Result<CudaFunction, RuntimeError> {
        self.bind()?;
        self.kernels.function(name, source)
    }

    /// The stream every operation of this backend is queued on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Makes the backend's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<(), RuntimeError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver("cuCtxSetCurrent", e))
    }

    fn builtins(&self) -> Builtins<'_> {
        Builtins {
            kernels: &self.kernels,
            stream: &self.stream,
        }
    }

    /// For a TF32 SYRK of row-major `A` (`n x k`, not transposed, `k >= TF32_PAD_MIN_K`) whose
    /// rows are not a multiple of [`TF32_ROW_MULTIPLE`] elements: a copy of A with zero columns
    /// appended up to that multiple, and its row length. `A A^T` is unchanged exactly (the added
    /// products are zeros), and cuBLAS's tensor-core GEMMs run faster on such rows: on an H100
    /// the whole kernel matrix took 17.7 -> 16.8 ms for n = 60000, d = 780 and 46.9 -> 26.7 ms
    /// for n = 6400, d = 126405. Strict fp32 GEMMs got slower padded (108.4 -> 114.3 ms for the
    /// latter), and below `TF32_PAD_MIN_K` the product is bound by writing `C`, so those keep
    /// A as it is; so does a copy that does not fit in memory.
    fn tf32_padded_rows(
        &self,
        tf32: bool,
        dtype: DType,
        trans: bool,
        n: usize,
        k: usize,
        a: u64,
    ) -> Result<Option<(CudaBuffer, usize)>, RuntimeError> {
        if !tf32
            || dtype != DType::F32
            || trans
            || k < TF32_PAD_MIN_K
            || k.is_multiple_of(TF32_ROW_MULTIPLE)
        {
            return Ok(None);
        }
        let padded_k = k.next_multiple_of(TF32_ROW_MULTIPLE);
        let padded = match CudaBuffer::alloc(&self.stream, ElemType::F32, n * padded_k) {
            Ok(padded) => padded,
            Err(RuntimeError::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let esz = ElemType::F32.size_bytes();
        // SAFETY: `padded` holds `n` rows of `padded_k` f32 elements; the zeroed block is the
        // last `padded_k - k` elements (32-bit words) of each row, within the allocation; the
        // memset is ordered on the backend's stream before the GEMMs that read it.
        unsafe {
            cudarc::driver::sys::cuMemsetD2D32Async(
                padded.device_ptr() + (k * esz) as u64,
                padded_k * esz,
                0,
                padded_k - k,
                n,
                self.stream.cu_stream(),
            )
        }
        .result()
        .map_err(|e| driver("cuMemsetD2D32Async", e))?;
        let copy = CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: a,
            srcArray: std::ptr::null_mut(),
            srcPitch: k * esz,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: padded.device_ptr(),
            dstArray: std::ptr::null_mut(),
            dstPitch: padded_k * esz,
            WidthInBytes: k * esz,
            Height: n,
        };
        // SAFETY: `a` holds the `n x k` f32 rows the SYRK step checked; `padded` holds
        // `n x padded_k` f32 elements, `padded_k >= k`; the descriptor lives across the call
        // (the driver reads it before returning); the copy is ordered on the backend's stream,
        // before the GEMMs that read `padded` and before its stream-ordered free.
        unsafe { cudarc::driver::sys::cuMemcpy2DAsync_v2(&copy, self.stream.cu_stream()) }
            .result()
            .map_err(|e| driver("cuMemcpy2DAsync", e))?;
        Ok(Some((padded, padded_k)))
    }

    /// Sets `elems` elements of type `elem` at `ptr` to zero.
    fn zero(&self, ptr: u64, elems: usize, elem: ElemType) -> Result<(), RuntimeError> {
        self.builtins()
            .memset32(ptr, 0, elems * elem.size_bytes() / 4)
    }

    fn run_op(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        let elem = ElemType::float(dtype);
        let scalar = dtype.scalar_type();
        match &step.op {
            StepOp::Gemm(g) => {
                count("gemm", inputs, outputs, 2, 1)?;
                let a = dense(&inputs[0], elem, "gemm input A")?;
                let b = dense(&inputs[1], elem, "gemm input B")?;
                let c = dense(&outputs[0], elem, "gemm output C")?;
                shape(
                    "gemm input A",
                    (a.rows, a.cols),
                    if g.trans_a { (g.k, g.m) } else { (g.m, g.k) },
                )?;
                shape(
                    "gemm input B",
                    (b.rows, b.cols),
                    if g.trans_b { (g.n, g.k) } else { (g.k, g.n) },
                )?;
                shape("gemm output C", (c.rows, c.cols), (g.m, g.n))?;
                if g.m == 0 || g.n == 0 {
                    return Ok(());
                }
                if g.k == 0 {
                    return self.zero(c.ptr, c.len(), elem);
                }
                let mut blas = self.blas.lock().map_err(|_| poisoned())?;
                blas.set_tf32(g.tf32 || self.config.allow_tf32)?;
                blas.gemm(
                    dtype, g.trans_a, g.trans_b, g.m, g.n, g.k, alpha, a.ptr, b.ptr, c.ptr,
                )
            }
            StepOp::Syrk {
                trans,
                n,
                k,
                tf32,
                lower_only,
                block_rows,
                ..
            } => {
                let (a, c) = syrk_operands(step, inputs, outputs, elem)?;
                if *n == 0 {
                    return Ok(());
                }
                if *k == 0 {
                    return self.zero(c, n * n, elem);
                }
                let tf32 = *tf32 || self.config.allow_tf32;
                let padded = self.tf32_padded_rows(tf32, dtype, *trans, *n, *k, a)?;
                let (a, k) = padded
                    .as_ref()
                    .map_or((a, *k), |(p, kp)| (p.device_ptr(), *kp));
                {
                    let mut blas = self.blas.lock().map_err(|_| poisoned())?;
                    blas.set_tf32(tf32)?;
                    if *block_rows == 0 {
                        blas.syrk_lower(dtype, *trans, *n, k, alpha, a, c)?;
                    } else {
                        blas.syrk_lower_blocked(dtype, *trans, *n, k, alpha, a, c, *block_rows)?;
                    }
                }
                if *lower_only {
                    return Ok(());
                }
                self.builtins().symmetrize(scalar, c, *n)
            }
            StepOp::Gemv { trans, m, n, .. } => {
                count("gemv", inputs, outputs, 2, 1)?;
                let a = dense(&inputs[0], elem, "gemv input A")?;
                let x = dense(&inputs[1], elem, "gemv input x")?;
                let y = dense(&outputs[0], elem, "gemv output y")?;
                shape("gemv input A", (a.rows, a.cols), (*m, *n))?;
                let (x_len, y_len) = if *trans { (*m, *n) } else { (*n, *m) };
                vector_len("gemv input x", x.len(), x_len)?;
                vector_len("gemv output y", y.len(), y_len)?;
                if y_len == 0 {
                    return Ok(());
                }
                if x_len == 0 {
                    return self.zero(y.ptr, y_len, elem);
                }
                let mut blas = self.blas.lock().map_err(|_| poisoned())?;
                blas.gemv(dtype, *trans, *m, *n, alpha, a.ptr, x.ptr, y.ptr)
            }
            StepOp::SpMM {
                sparse_left,
                trans_sparse,
                trans_dense,
                m,
                n,
                k,
                ..
            } => {
                count("spmm", inputs, outputs, 2, 1)?;
                let (si, di) = if *sparse_left { (0, 1) } else { (1, 0) };
                let s = csr(&inputs[si], elem, "spmm sparse input")?;
                let d = dense(&inputs[di], elem, "spmm dense input")?;
                let c = dense(&outputs[0], elem, "spmm output C")?;
                let (s_shape, d_shape) = if *sparse_left {
                    (
                        if *trans_sparse { (*k, *m) } else { (*m, *k) },
                        if *trans_dense { (*n, *k) } else { (*k, *n) },
                    )
                } else {
                    (
                        if *trans_sparse { (*n, *k) } else { (*k, *n) },
                        if *trans_dense { (*k, *m) } else { (*m, *k) },
                    )
                };
                shape("spmm sparse input", (s.rows, s.cols), s_shape)?;
                shape("spmm dense input", (d.rows, d.cols), d_shape)?;
                shape("spmm output C", (c.rows, c.cols), (*m, *n))?;
                if *m == 0 || *n == 0 {
                    return Ok(());
                }
                if *k == 0 || s.nnz == 0 {
                    return self.zero(c.ptr, c.len(), elem);
                }
                let req = SpmmRequest {
                    ty: value_type(dtype),
                    sparse_left: *sparse_left,
                    trans_sparse: *trans_sparse,
                    trans_dense: *trans_dense,
                    m: *m,
                    n: *n,
                    alpha,
                };
                let operand = DenseOperand {
                    ptr: d.ptr,
                    rows: d.rows,
                    cols: d.cols,
                };
                let mut sparse = self.sparse.lock().map_err(|_| poisoned())?;
                // SAFETY: every address comes from a buffer of this backend's stream whose
                // element type and size were checked above against the shapes described;
                // the buffers are borrowed for the step and freed stream-ordered.
                unsafe { sparse.spmm(req, &s, operand, c.ptr) }
            }
            StepOp::SpMV { trans, .. } => {
                count("spmv", inputs, outputs, 2, 1)?;
                let s = csr(&inputs[0], elem, "spmv sparse input")?;
                let x = dense(&inputs[1], elem, "spmv input x")?;
                let y = dense(&outputs[0], elem, "spmv output y")?;
                let (x_len, y_len) = if *trans {
                    (s.rows, s.cols)
                } else {
                    (s.cols, s.rows)
                };
                vector_len("spmv input x", x.len(), x_len)?;
                vector_len("spmv output y", y.len(), y_len)?;
                if y_len == 0 {
                    return Ok(());
                }
                if x_len == 0 || s.nnz == 0 {
                    return self.zero(y.ptr, y_len, elem);
                }
                let mut sparse = self.sparse.lock().map_err(|_| poisoned())?;
                // SAFETY: as for SpMM: checked buffers of this backend's stream.
                unsafe { sparse.spmv(value_type(dtype), *trans, alpha, &s, x.ptr, y.ptr) }
            }
            StepOp::Fused(f) => self.run_fused(f, inputs, outputs),
            StepOp::Diag => {
                count("diag", inputs, outputs, 1, 1)?;
                let m = dense(&inputs[0], elem, "diag input")?;
                let out = dense(&outputs[0], elem, "diag output")?;
                if m.rows != m.cols {
                    return Err(invalid(format!(
                        "diag input is {} x {}, not square",
                        m.rows, m.cols
                    )));
                }
                vector_len("diag output", out.len(), m.rows)?;
                self.builtins().diag(scalar, m.ptr, m.rows, m.cols, out.ptr)
            }
            StepOp::Counts { k } => {
                count("counts", inputs, outputs, 1, 1)?;
                let (labels, n) = index(&inputs[0], "counts labels")?;
                let out = dense(&outputs[0], elem, "counts output")?;
                vector_len("counts output", out.len(), *k)?;
                let mut scratch = self.scratch.lock().map_err(|_| poisoned())?;
                self.builtins()
                    .counts(scalar, &mut scratch, labels, n, *k, out.ptr)
            }
            StepOp::LabelSums { k } => {
                count("label sums", inputs, outputs, 2, 1)?;
                let x = dense(&inputs[0], elem, "label sums input x")?;
                let (labels, n) = index(&inputs[1], "label sums labels")?;
                let out = dense(&outputs[0], elem, "label sums output")?;
                vector_len("label sums input x", x.len(), n)?;
                vector_len("label sums output", out.len(), *k)?;
                self.builtins()
                    .label_sums(scalar, x.ptr, labels, n, *k, out.ptr)
            }
            StepOp::Selection { k } => {
                count("selection", inputs, outputs, 1, 1)?;
                let (labels, n) = index(&inputs[0], "selection labels")?;
                let v = csr(&outputs[0], elem, "selection output")?;
                shape("selection output", (v.rows, v.cols), (*k, n))?;
                if v.nnz < n {
                    return Err(invalid(format!(
                        "selection output holds {} entries but {n} labels may need {n}",
                        v.nnz
                    )));
                }
                let mut scratch = self.scratch.lock().map_err(|_| poisoned())?;
                self.builtins().selection(
                    scalar,
                    &mut scratch,
                    labels,
                    n,
                    *k,
                    v.row_ptr,
                    v.col_idx,
                    v.values,
                )
            }
            StepOp::ClusterSums { k } => crate::cuda::cluster_sums::run_step(
                &self.kernels,
                &self.stream,
                inputs,
                outputs,
                dtype,
                *k,
            ),
            StepOp::Copy => {
                count("copy", inputs, outputs, 1, 1)?;
                let (src, src_len, src_elem) = flat(&inputs[0], "copy input")?;
                let (dst, dst_len, dst_elem) = flat(&outputs[0], "copy output")?;
                if src_elem != dst_elem {
                    return Err(invalid(format!(
                        "copy from {src_elem:?} to {dst_elem:?} elements"
                    )));
                }
                if src_len < dst_len {
                    return Err(invalid(format!(
                        "copy of {dst_len} elements from a value of {src_len}"
                    )));
                }
                if src == dst || dst_len == 0 {
                    return Ok(());
                }
                // SAFETY: both addresses are buffers of this stream holding at least
                // `dst_len` elements of the same type (checked above).
                unsafe {
                    drv::memcpy_dtod_async(
                        dst,
                        src,
                        dst_len * dst_elem.size_bytes(),
                        self.stream.cu_stream(),
                    )
                }
                .map_err(|e| driver("cuMemcpyDtoDAsync", e))
            }
        }
    }

    fn run_fused(
        &self,
        f: &FusedStep,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
    ) -> Result<(), RuntimeError> {
        let mut args = fused::kernel_args(f, inputs, outputs, None)?;
        let shape = self.launch_shape(f)?;
        let function = self.fused_function(f)?;
        let dims = shape.grid_block(f.rows as u64, f.cols as u64);
        launch(&self.stream, &function, &f.name, dims, &mut args)
    }

    /// The launch shape of a fused kernel, from kernels-gen (cached by kernel name; a name
    /// that is not its spec's is an error, checked once).
    fn launch_shape(&self, f: &FusedStep) -> Result<LaunchShape, RuntimeError> {
        let mut shapes = self.launch_shapes.lock().map_err(|_| poisoned())?;
        if let Some(s) = shapes.get(&f.name) {
            return Ok(*s);
        }
        if f.spec.name() != f.name {
            return Err(invalid(format!(
                "the plan's kernel {} does not match its spec (named {}); the plan was made by \
                 another version of popcorn: plan the program again",
                f.name,
                f.spec.name()
            )));
        }
        let shape = kernels_gen::launch_shape(&f.spec);
        shapes.insert(f.name.clone(), shape);
        Ok(shape)
    }

    /// The compiled kernel of a fused step: from the kernel cache, or emitted and compiled on
    /// first use.
    fn fused_function(&self, f: &FusedStep) -> Result<CudaFunction, RuntimeError> {
        self.kernels
            .function(&f.name, || kernels_gen::emit(&f.spec).source)
    }
}

/// Row length (elements) that TF32 SYRKs pad `A`'s rows to (see
/// [`CudaBackend::tf32_padded_rows`]).
const TF32_ROW_MULTIPLE: usize = 16;
/// The shortest rows that TF32 SYRKs pad.
const TF32_PAD_MIN_K: usize = 128;

/// The device addresses of a SYRK step's `A` and `C`, checked against the step's shapes.
fn syrk_operands(
    step: &Step,
    inputs: &[Arg<'_, CudaBuffer>],
    outputs: &[Arg<'_, CudaBuffer>],
    elem: ElemType,
) -> Result<(u64, u64), RuntimeError> {
    let StepOp::Syrk { trans, n, k, .. } = &step.op else {
        return Err(invalid(format!("{} step given as a SYRK", step.op_name())));
    };
    count("syrk", inputs, outputs, 1, 1)?;
    let a = dense(&inputs[0], elem, "syrk input A")?;
    let c = dense(&outputs[0], elem, "syrk output C")?;
    shape(
        "syrk input A",
        (a.rows, a.cols),
        if *trans { (*k, *n) } else { (*n, *k) },
    )?;
    shape("syrk output C", (c.rows, c.cols), (*n, *n))?;
    Ok((a.ptr, c.ptr))
}

/// cuSPARSE's value type of a plan dtype.
fn value_type(dtype: DType) -> ValueType {
    match dtype {
        DType::F32 => ValueType::F32,
        DType::F64 => ValueType::F64,
    }
}

/// Checks a vector's length.
fn vector_len(what: &str, got: usize, want: usize) -> Result<(), RuntimeError> {
    if got != want {
        return Err(invalid(format!(
            "{what} has {got} elements but the step needs {want}"
        )));
    }
    Ok(())
}

/// A dense or index value as address, element count and element type.
fn flat(arg: &Arg<'_, CudaBuffer>, what: &str) -> Result<(u64, usize, ElemType), RuntimeError> {
    let (buf, len) = match arg {
        Arg::Dense { buf, rows, cols } => (*buf, rows * cols),
        Arg::Index { buf, len } => (*buf, *len),
        other => {
            return Err(invalid(format!(
                "{what}: expected a dense or index value, got {}",
                args::kind(other)
            )))
        }
    };
    args::check_buffer(buf, buf.elem(), len, what)?;
    Ok((buf.device_ptr(), len, buf.elem()))
}

impl Backend for CudaBackend {
    type Buf = CudaBuffer;
    type Mark = CudaMark;

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn alloc(&self, elem: ElemType, len: usize) -> Result<CudaBuffer, RuntimeError> {
        CudaBuffer::alloc(&self.stream, elem, len)
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
        if data.is_empty() {
            return Ok(());
        }
        self.bind()?;
        let dst = buf.device_ptr();
        let stream = self.stream.cu_stream();
        // SAFETY: `dst` holds exactly `data.len()` elements of the same type (checked above)
        // and belongs to this stream. The host data is pageable memory: the driver copies it
        // to a staging buffer before `cuMemcpyHtoDAsync` returns, so the borrow may end then.
        let copied = unsafe {
            match data {
                HostSlice::F32(s) => drv::memcpy_htod_async(dst, s, stream),
                HostSlice::F64(s) => drv::memcpy_htod_async(dst, s, stream),
                HostSlice::U32(s) => drv::memcpy_htod_async(dst, s, stream),
                HostSlice::I32(s) => drv::memcpy_htod_async(dst, s, stream),
            }
        };
        copied.map_err(|e| driver("cuMemcpyHtoDAsync", e))
    }

    fn download(&self, buf: &CudaBuffer) -> Result<HostVec, RuntimeError> {
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| driver("cuStreamSynchronize", e))?;
        let src = buf.device_ptr();
        let n = buf.len();
        fn read<T: Default + Clone>(src: u64, n: usize) -> Result<Vec<T>, RuntimeError> {
            let mut v = vec![T::default(); n];
            if n > 0 {
                // SAFETY: `src` holds `n` elements of `T` (the buffer's element type); the
                // stream was synchronised, so no queued work writes it; the copy is
                // synchronous, so `v` is complete when it returns.
                unsafe { drv::memcpy_dtoh_sync(&mut v, src) }
                    .map_err(|e| driver("cuMemcpyDtoH", e))?;
            }
            Ok(v)
        }
        Ok(match buf.elem() {
            ElemType::F32 => HostVec::F32(read(src, n)?),
            ElemType::F64 => HostVec::F64(read(src, n)?),
            ElemType::U32 => HostVec::U32(read(src, n)?),
            ElemType::I32 => HostVec::I32(read(src, n)?),
        })
    }

    fn fill(&self, buf: &CudaBuffer, value: f64) -> Result<(), RuntimeError> {
        self.bind()?;
        let b = self.builtins();
        let (ptr, len) = (buf.device_ptr(), buf.len());
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
        }
    }

    fn memory_info(&self) -> Option<(usize, usize)> {
        self.ctx.mem_get_info().ok()
    }

    fn run_step(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CudaBuffer>],
        outputs: &[Arg<'_, CudaBuffer>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        self.bind()?;
        self.run_op(step, inputs, outputs, dtype, alpha)?;
        if self.config.sync_after_step {
            self.stream.synchronize().map_err(|e| RuntimeError::Cuda {
                call: "cuStreamSynchronize (POPCORN_SYNC)".to_string(),
                message: driver_message(e),
            })?;
        }
        Ok(())
    }

    /// The SYRK's split diagonal blocks come first; then block row `b`'s GEMM runs on the main
    /// stream, and an event after it lets the side stream map band `b` (the tile pairs of those rows: tile `(I, J)` and its mirror
    /// `(J, I)`, which lies above the diagonal in earlier rows, where no GEMM writes) while the
    /// main stream goes on with block row `b + 1`, which writes only its own rows. The main
    /// stream then waits for the side stream, so later steps see the whole map.
    fn run_syrk_with_map(
        &self,
        syrk: &Step,
        map: &Step,
        syrk_io: StepIo<'_, CudaBuffer>,
        map_io: StepIo<'_, CudaBuffer>,
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        let sequential = || -> Result<(), RuntimeError> {
            self.run_step(syrk, syrk_io.0, syrk_io.1, dtype, alpha)?;
            self.run_step(map, map_io.0, map_io.1, dtype, 1.0)
        };
        let (
            StepOp::Syrk {
                trans,
                n,
                k,
                tf32,
                lower_only: true,
                block_rows,
                ..
            },
            StepOp::Fused(f),
        ) = (&syrk.op, &map.op)
        else {
            return sequential();
        };
        // A plan may come from elsewhere (JSON): anything but bands of whole tiles over the
        // SYRK's own square runs one step after the other.
        let bands_fit = *block_rows > 0
            && block_rows.is_multiple_of(kernels_gen::emit::PAIR_TILE as usize)
            && f.rows == *n
            && f.cols == *n;
        if !bands_fit || *n == 0 || *k == 0 || !f.spec.runs_in_bands() {
            return sequential();
        }
        self.bind()?;
        let elem = ElemType::float(dtype);
        let (a, c) = syrk_operands(syrk, syrk_io.0, syrk_io.1, elem)?;
        // The map's buffers are checked before anything is queued (every band checks its own
        // arguments again, which cannot fail once these pass).
        fused::kernel_args(f, map_io.0, map_io.1, None)?;
        let shape = self.launch_shape(f)?;
        let function = self.fused_function(f)?;
        let tf32 = *tf32 || self.config.allow_tf32;
        let padded = self.tf32_padded_rows(tf32, dtype, *trans, *n, *k, a)?;
        let (a, k) = &padded
            .as_ref()
            .map_or((a, *k), |(p, kp)| (p.device_ptr(), *kp));
        let mut blas = self.blas.lock().map_err(|_| poisoned())?;
        blas.set_tf32(tf32)?;
        let no_timing = Some(CUevent_flags::CU_EVENT_DISABLE_TIMING);
        let mut queue = || -> Result<(), RuntimeError> {
            blas.syrk_diagonal_blocks(dtype, *trans, *n, *k, alpha, *a, c, *block_rows)?;
            for (r0, r1) in crate::cuda::syrk_blocks::block_row_ranges(*n, *block_rows) {
                blas.syrk_block_row(dtype, *trans, *n, *k, alpha, *a, c, (r0, r1), *block_rows)?;
                let written = self
                    .stream
                    .record_event(no_timing)
                    .map_err(|e| driver("cuEventRecord", e))?;
                self.side_stream
                    .wait(&written)
                    .map_err(|e| driver("cuStreamWaitEvent", e))?;
                let mut args = fused::kernel_args(f, map_io.0, map_io.1, Some((r0, r1)))?;
                let dims = shape.band_grid_block(*n as u64, r0 as u64, r1 as u64);
                launch(&self.side_stream, &function, &f.name, dims, &mut args)?;
            }
            Ok(())
        };
        let queued = queue();
        // The main stream waits for every band queued, also when queuing stopped part way; if
        // even that cannot be queued, the host waits for the side stream, so no band outlives
        // the buffers it writes.
        let mapped = self
            .side_stream
            .record_event(no_timing)
            .and_then(|done| self.stream.wait(&done))
            .inspect_err(|_| {
                // The error to report is the one above; this wait only keeps buffers safe.
                let _ = self.side_stream.synchronize();
            })
            .map_err(|e| driver("cuStreamWaitEvent", e));
        queued.and(mapped)
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| driver("cuStreamSynchronize", e))
    }

    fn mark(&self) -> Result<CudaMark, RuntimeError> {
        self.bind()?;
        self.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map(CudaMark)
            .map_err(|e| driver("cuEventRecord", e))
    }

    fn elapsed_ms(&self, a: &CudaMark, b: &CudaMark) -> Result<f64, RuntimeError> {
        self.bind()?;
        // Waits for both events, then reads the time between them.
        a.0.elapsed_ms(&b.0)
            .map(f64::from)
            .map_err(|e| driver("cuEventElapsedTime", e))
    }
}

/// A CUDA event recorded on the backend's stream ([`Backend::mark`]): it completes when the
/// work queued before it has finished.
#[derive(Debug)]
pub struct CudaMark(CudaEvent);
