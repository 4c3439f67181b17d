//! The naive GPU baseline of Kernel K-means: the hand-written CUDA implementation that the
//! Popcorn paper compares its sparse formulation against, with no sparse matrices and no
//! library calls in the loop.
//!
//! The kernel matrix `K` (`n x n`, row-major) is computed beforehand (by GEMM, through the
//! runtime). Each iteration then runs three plain CUDA C kernels, compiled by NVRTC through the
//! backend's kernel cache and launched on its stream:
//!
//! 1. **row sums** (one block per row `i` of `K`): `E[i, c] = sum_{j in c} K[i, j]`, each
//!    warp adding the row's entries into its own copy of the `k` bins in shared memory by the
//!    cluster of the column; the copies are added in a fixed order at the end;
//! 2. **centroid norms** (one block per cluster `c`): `|c|`, and
//!    `||c||^2 = (1/|c|^2) sum_{i in c} E[i, c]` (`+inf` for an empty cluster), accumulated in
//!    `f64`, with the partial sums the objective needs;
//! 3. **assign** (one thread per point `i`): `D_ic = K_ii - 2 E[i, c] / |c| + ||c||^2` for every
//!    cluster and the argmin (empty clusters skipped, ties to the lowest `c`), written as the
//!    new labels.
//!
//! The objective of the input labels, `J = sum_i D[i, label_i] = sum_c (sum_{i in c} K_ii -
//! S_c / |c|)` with `S_c = sum_{i in c} E[i, c]`, comes from kernel 2's per-cluster partials
//! (read back by [`NaiveKkmeans::objective`]).
//!
//! Reach it through [`naive_kkmeans`] on a GPU [`Context`] (tensors) or [`NaiveKkmeans::new`]
//! on a [`CudaBackend`] (buffers). It launches its kernels through the backend's explicitly
//! unsafe raw API ([`popcorn_runtime::cuda::raw`]).

use kernel_ir::ScalarType;
use kernels_gen::LaunchDims;
use popcorn_dsl::DType;
use popcorn_runtime::backend::{Backend, BufferInfo, ElemType, HostSlice, HostVec};
use popcorn_runtime::cuda::raw::KernelArg;
use popcorn_runtime::cuda::{CudaBackend, CudaBuffer};
use popcorn_runtime::{Context, RuntimeError, Tensor, TensorShape};
use std::time::Instant;

/// Threads per block of the row-sums kernel (8 warps).
const ROW_SUMS_THREADS: u32 = 256;
/// Threads per block of the centroid-norms kernel (a power of two: tree reduction).
const NORMS_THREADS: u32 = 512;
/// Threads per block of the assign kernel.
const ASSIGN_THREADS: u32 = 256;
/// Shared memory a block may use without raising its limit.
const SHARED_LIMIT_BYTES: usize = 48 * 1024;
/// Largest grid the launches use (the kernels grid-stride over the rest).
const MAX_BLOCKS: usize = (1 << 31) - 1;

const ROW_SUMS: &str = r#"// popcorn naive baseline, kernel 1 of 3 ({NAME}): sums[i, c] = sum of K[i, j] over the
// columns j with labels[j] == c. One block per row; warp w adds into bin copy w % copies in
// shared memory; the copies are added in a fixed order at the end. Labels >= k are skipped.
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const long long k,
    const long long copies,
    const {T}* __restrict__ K,
    const unsigned int* __restrict__ labels,
    {T}* __restrict__ sums)
{
    extern __shared__ unsigned char pk_naive_shared[];
    {T}* bins = reinterpret_cast<{T}*>(pk_naive_shared);
    const long long all_bins = copies * k;
    for (long long t = threadIdx.x; t < all_bins; t += blockDim.x) {
        bins[t] = ({T})0;
    }
    __syncthreads();
    {T}* mine = bins + ((long long)(threadIdx.x >> 5) % copies) * k;
    for (long long row = blockIdx.x; row < n; row += gridDim.x) {
        const {T}* r = K + row * n;
        for (long long j = threadIdx.x; j < n; j += blockDim.x) {
            const unsigned int c = labels[j];
            if ((long long)c < k) {
                atomicAdd(&mine[c], r[j]);
            }
        }
        __syncthreads();
        for (long long c = threadIdx.x; c < k; c += blockDim.x) {
            {T} s = ({T})0;
            for (long long w = 0; w < copies; ++w) {
                s += bins[w * k + c];
                bins[w * k + c] = ({T})0;
            }
            sums[row * k + c] = s;
        }
        __syncthreads();
    }
}
"#;

const CENTROID_NORMS: &str = r#"// popcorn naive baseline, kernel 2 of 3 ({NAME}): for each cluster c (one block per
// cluster), counts[c] = |c|, norms[c] = (1/|c|^2) sum_{i in c} sums[i, c] (+inf when empty),
// partials[c] = sum_{i in c} sums[i, c], partials[k + c] = sum_{i in c} K[i, i],
// partials[2k + c] = |c|. Accumulated in double; blockDim.x is a power of two.
extern "C" __global__ void __launch_bounds__(512) {NAME}(
    const long long n,
    const long long k,
    const {T}* __restrict__ K,
    const unsigned int* __restrict__ labels,
    const {T}* __restrict__ sums,
    unsigned int* __restrict__ counts,
    {T}* __restrict__ norms,
    double* __restrict__ partials)
{
    __shared__ double s_sum[512];
    __shared__ double s_diag[512];
    __shared__ unsigned long long s_count[512];
    const int t = threadIdx.x;
    for (long long c = blockIdx.x; c < k; c += gridDim.x) {
        double sum = 0.0;
        double diag = 0.0;
        unsigned long long count = 0;
        for (long long i = t; i < n; i += blockDim.x) {
            if ((long long)labels[i] == c) {
                count += 1;
                sum += (double)sums[i * k + c];
                diag += (double)K[i * n + i];
            }
        }
        s_sum[t] = sum;
        s_diag[t] = diag;
        s_count[t] = count;
        __syncthreads();
        for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
            if (t < stride) {
                s_sum[t] += s_sum[t + stride];
                s_diag[t] += s_diag[t + stride];
                s_count[t] += s_count[t + stride];
            }
            __syncthreads();
        }
        if (t == 0) {
            const unsigned long long size = s_count[0];
            const double sizef = (double)size;
            counts[c] = (unsigned int)size;
            norms[c] = size > 0 ? ({T})(s_sum[0] / (sizef * sizef))
                                : ({T})__longlong_as_double(0x7ff0000000000000LL);
            partials[c] = s_sum[0];
            partials[k + c] = s_diag[0];
            partials[2 * k + c] = sizef;
        }
        __syncthreads();
    }
}
"#;

const ASSIGN: &str = r#"// popcorn naive baseline, kernel 3 of 3 ({NAME}): for each point i (one thread each),
// D[i, c] = K[i, i] - 2 sums[i, c] / |c| + norms[c] over the non-empty clusters, and
// new_labels[i] = the first c with the smallest D[i, c].
extern "C" __global__ void __launch_bounds__(256) {NAME}(
    const long long n,
    const long long k,
    const {T}* __restrict__ K,
    const {T}* __restrict__ sums,
    const unsigned int* __restrict__ counts,
    const {T}* __restrict__ norms,
    unsigned int* __restrict__ new_labels)
{
    const long long stride = (long long)gridDim.x * (long long)blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const {T} kii = K[i * n + i];
        {T} best = ({T})0;
        unsigned int arg = 0;
        bool found = false;
        for (long long c = 0; c < k; ++c) {
            const unsigned int size = counts[c];
            if (size == 0) {
                continue;
            }
            const {T} d = kii - ({T})2 * sums[i * k + c] / ({T})size + norms[c];
            if (!found || d < best) {
                best = d;
                arg = (unsigned int)c;
                found = true;
            }
        }
        new_labels[i] = arg;
    }
}
"#;

/// The three kernels of an iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    RowSums,
    CentroidNorms,
    Assign,
}

impl Kernel {
    /// The entry-point name for element type `dtype`.
    fn name(self, dtype: ScalarType) -> &'static str {
        let f32 = dtype == ScalarType::F32;
        match (self, f32) {
            (Kernel::RowSums, true) => "pk_naive_row_sums_f32",
            (Kernel::RowSums, false) => "pk_naive_row_sums_f64",
            (Kernel::CentroidNorms, true) => "pk_naive_centroid_norms_f32",
            (Kernel::CentroidNorms, false) => "pk_naive_centroid_norms_f64",
            (Kernel::Assign, true) => "pk_naive_assign_f32",
            (Kernel::Assign, false) => "pk_naive_assign_f64",
        }
    }

    /// The CUDA C source for element type `dtype`.
    fn source(self, dtype: ScalarType) -> String {
        let template = match self {
            Kernel::RowSums => ROW_SUMS,
            Kernel::CentroidNorms => CENTROID_NORMS,
            Kernel::Assign => ASSIGN,
        };
        template
            .replace("{T}", kernels_gen::CType::c_name(dtype))
            .replace("{NAME}", self.name(dtype))
    }
}

/// Something holding one device buffer that the baseline can read or write: a
/// [`CudaBuffer`], or a dense or index [`Tensor`] on the GPU.
pub trait DeviceOperand {
    /// The buffer, or an error naming `what` when this is not a single GPU buffer.
    fn cuda_buffer(&self, what: &str) -> Result<&CudaBuffer, RuntimeError>;
}

impl DeviceOperand for CudaBuffer {
    fn cuda_buffer(&self, _what: &str) -> Result<&CudaBuffer, RuntimeError> {
        Ok(self)
    }
}

impl DeviceOperand for Tensor {
    fn cuda_buffer(&self, what: &str) -> Result<&CudaBuffer, RuntimeError> {
        match (self.cuda_buffers(), self.shape()) {
            (Some(bufs), TensorShape::Dense { .. } | TensorShape::Index { .. }) => {
                bufs.first().ok_or_else(|| invalid(format!("{what}: the tensor has no buffer")))
            }
            (Some(_), shape) => Err(invalid(format!(
                "{what}: the naive baseline takes dense matrices and index vectors, not a {shape}"
            ))),
            (None, _) => Err(RuntimeError::Device(format!(
                "{what} lives on the CPU; the naive baseline is a GPU implementation and needs tensors of a CUDA context"
            ))),
        }
    }
}

/// A malformed call, as the runtime reports one.
fn invalid(what: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidData(what.into())
}

/// The naive baseline for `n` points and `k` clusters on `ctx`'s GPU, computing in the
/// context's dtype; it iterates on a kernel matrix and label vectors made by this context. On
/// the CPU this is an error: the baseline exists to be compared with popcorn on a GPU.
pub fn naive_kkmeans(ctx: &Context, n: usize, k: usize) -> Result<NaiveKkmeans<'_>, RuntimeError> {
    match ctx.cuda_backend() {
        Some(backend) => NaiveKkmeans::new(backend, n, k, ctx.dtype()),
        None => Err(RuntimeError::Device(
            "the naive baseline is a GPU implementation; run it on a CUDA device (--device cuda or POPCORN_DEVICE=cuda), or use popcorn's own path on the CPU".into(),
        )),
    }
}

/// How [`NaiveKkmeans::run`] iterates.
#[derive(Clone, Debug, PartialEq)]
pub struct NaiveRunOptions {
    /// Most iterations.
    pub max_iter: usize,
    /// Also stop when the objective improves by less than this fraction (relative); `None`
    /// runs until no label changes or `max_iter`.
    pub tol: Option<f64>,
}

/// The result of [`NaiveKkmeans::run`].
#[derive(Clone, Debug, PartialEq)]
pub struct NaiveRun {
    /// Cluster of each point.
    pub labels: Vec<u32>,
    /// Objective of the final labels (`tr(K)` included).
    pub objective: f64,
    /// Objective of the labels at the start of each iteration.
    pub objective_history: Vec<f64>,
    /// Iterations run.
    pub iterations: usize,
    /// Whether the run stopped at a fixed point (or under the tolerance), not at `max_iter`.
    pub converged: bool,
    /// Wall-clock seconds of each iteration (kernels, objective and labels read back).
    pub per_iteration_s: Vec<f64>,
}

/// The naive baseline for `n` points and `k` clusters on one backend, with its scratch
/// buffers (allocated once): the `n x k` row sums, counts, centroid norms and the objective's
/// partial sums.
pub struct NaiveKkmeans<'a> {
    backend: &'a CudaBackend,
    n: usize,
    k: usize,
    dtype: DType,
    copies: usize,
    sums: CudaBuffer,
    counts: CudaBuffer,
    norms: CudaBuffer,
    partials: CudaBuffer,
}

impl std::fmt::Debug for NaiveKkmeans<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaiveKkmeans")
            .field("n", &self.n)
            .field("k", &self.k)
            .field("dtype", &self.dtype)
            .field("bin_copies", &self.copies)
            .finish()
    }
}

impl<'a> NaiveKkmeans<'a> {
    /// The baseline for `n` points and `k` clusters computing in `dtype`, its kernels
    /// compiled (or loaded from the cache) now so that the first iteration does not pay for
    /// them. Fails when `k` is 0 or larger than `n`, or when `k` bins do not fit in shared
    /// memory (`k` above 12288 in f32, 6144 in f64).
    pub fn new(
        backend: &'a CudaBackend,
        n: usize,
        k: usize,
        dtype: DType,
    ) -> Result<Self, RuntimeError> {
        if n == 0 {
            return Err(invalid(
                "the naive baseline needs at least one point (n = 0)",
            ));
        }
        if k == 0 || k > n {
            return Err(invalid(format!(
                "k = {k} clusters for n = {n} points; use 1 <= k <= n"
            )));
        }
        let size = dtype.size_bytes();
        let fit = SHARED_LIMIT_BYTES / (k * size);
        if fit == 0 {
            return Err(invalid(format!(
                "k = {k}: the naive baseline keeps k bins per block in shared memory and at most {} fit in {dtype}; use fewer clusters",
                SHARED_LIMIT_BYTES / size
            )));
        }
        let copies = fit.min((ROW_SUMS_THREADS / 32) as usize);
        let scalar = dtype.scalar_type();
        for kernel in [Kernel::RowSums, Kernel::CentroidNorms, Kernel::Assign] {
            backend
                .raw()
                .kernel(kernel.name(scalar), || kernel.source(scalar))?;
        }
        let float = ElemType::float(dtype);
        let sums_len = n
            .checked_mul(k)
            .ok_or_else(|| invalid(format!("n x k = {n} x {k} row sums do not fit in memory")))?;
        Ok(NaiveKkmeans {
            backend,
            n,
            k,
            dtype,
            copies,
            sums: backend.alloc(float, sums_len)?,
            counts: backend.alloc(ElemType::U32, k)?,
            norms: backend.alloc(float, k)?,
            partials: backend.alloc(ElemType::F64, 3 * k)?,
        })
    }

    /// Number of points.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of clusters.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Element type of the computation.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    fn check_k_matrix<'b>(
        &self,
        kmat: &'b impl DeviceOperand,
    ) -> Result<&'b CudaBuffer, RuntimeError> {
        let buf = kmat.cuda_buffer("the kernel matrix")?;
        let elem = ElemType::float(self.dtype);
        if buf.elem() != elem || buf.len() != self.n * self.n {
            return Err(invalid(format!(
                "the kernel matrix must hold n x n = {} x {} {elem:?} values; it holds {} {:?}",
                self.n,
                self.n,
                buf.len(),
                buf.elem()
            )));
        }
        Ok(buf)
    }

    fn check_labels<'b>(
        &self,
        labels: &'b impl DeviceOperand,
        what: &str,
    ) -> Result<&'b CudaBuffer, RuntimeError> {
        let buf = labels.cuda_buffer(what)?;
        if buf.elem() != ElemType::U32 || buf.len() != self.n {
            return Err(invalid(format!(
                "{what} must hold n = {} u32 labels; it holds {} {:?}",
                self.n,
                buf.len(),
                buf.elem()
            )));
        }
        Ok(buf)
    }

    fn launch(
        &self,
        kernel: Kernel,
        dims: LaunchDims,
        args: &mut [KernelArg],
    ) -> Result<(), RuntimeError> {
        let scalar = self.dtype.scalar_type();
        let name = kernel.name(scalar);
        let raw = self.backend.raw();
        let function = raw.kernel(name, || kernel.source(scalar))?;
        // SAFETY: each caller builds `args` in the kernel's parameter order, from buffers it
        // checked to hold the n x n K, n labels and the n x k, k and 3 k scratch arrays.
        unsafe { raw.launch(&function, dims, args) }
    }

    /// Kernel 1: the row sums `E[i, c] = sum_{j in c} K[i, j]` of `labels` (queued, not
    /// waited for). Labels outside `0..k` are skipped.
    pub fn row_sums(
        &mut self,
        kmat: &impl DeviceOperand,
        labels: &impl DeviceOperand,
    ) -> Result<(), RuntimeError> {
        let k_buf = self.check_k_matrix(kmat)?;
        let l_buf = self.check_labels(labels, "the labels")?;
        let shared = u32::try_from(self.copies * self.k * self.dtype.size_bytes())
            .map_err(|_| invalid("shared memory size overflow"))?;
        let blocks = blocks(self.n);
        let mut args = [
            KernelArg::size(self.n)?,
            KernelArg::size(self.k)?,
            KernelArg::size(self.copies)?,
            KernelArg::Ptr(k_buf.device_ptr()),
            KernelArg::Ptr(l_buf.device_ptr()),
            KernelArg::Ptr(self.sums.device_ptr()),
        ];
        self.launch(
            Kernel::RowSums,
            ((blocks, 1, 1), (ROW_SUMS_THREADS, 1, 1), shared),
            &mut args,
        )
    }

    /// Kernels 2 and 3: centroid norms and counts of `labels` from the row sums of the last
    /// [`row_sums`](Self::row_sums) call on the same labels, then the nearest centroid of
    /// every point into `new_labels` (queued, not waited for). `new_labels` may be the same
    /// buffer as `labels`.
    pub fn assign(
        &mut self,
        kmat: &impl DeviceOperand,
        labels: &impl DeviceOperand,
        new_labels: &impl DeviceOperand,
    ) -> Result<(), RuntimeError> {
        let k_buf = self.check_k_matrix(kmat)?;
        let l_buf = self.check_labels(labels, "the labels")?;
        let out = self.check_labels(new_labels, "the new labels")?;
        let mut args = [
            KernelArg::size(self.n)?,
            KernelArg::size(self.k)?,
            KernelArg::Ptr(k_buf.device_ptr()),
            KernelArg::Ptr(l_buf.device_ptr()),
            KernelArg::Ptr(self.sums.device_ptr()),
            KernelArg::Ptr(self.counts.device_ptr()),
            KernelArg::Ptr(self.norms.device_ptr()),
            KernelArg::Ptr(self.partials.device_ptr()),
        ];
        self.launch(
            Kernel::CentroidNorms,
            ((blocks(self.k), 1, 1), (NORMS_THREADS, 1, 1), 0),
            &mut args,
        )?;
        let mut args = [
            KernelArg::size(self.n)?,
            KernelArg::size(self.k)?,
            KernelArg::Ptr(k_buf.device_ptr()),
            KernelArg::Ptr(self.sums.device_ptr()),
            KernelArg::Ptr(self.counts.device_ptr()),
            KernelArg::Ptr(self.norms.device_ptr()),
            KernelArg::Ptr(out.device_ptr()),
        ];
        let assign_blocks = blocks(self.n.div_ceil(ASSIGN_THREADS as usize));
        self.launch(
            Kernel::Assign,
            ((assign_blocks, 1, 1), (ASSIGN_THREADS, 1, 1), 0),
            &mut args,
        )
    }

    /// One iteration: [`row_sums`](Self::row_sums) then [`assign`](Self::assign) (queued, not
    /// waited for).
    pub fn iterate(
        &mut self,
        kmat: &impl DeviceOperand,
        labels: &impl DeviceOperand,
        new_labels: &impl DeviceOperand,
    ) -> Result<(), RuntimeError> {
        self.row_sums(kmat, labels)?;
        self.assign(kmat, labels, new_labels)
    }

    /// The objective `sum_i D[i, label_i]` (`tr(K)` included) of the labels of the last
    /// [`assign`](Self::assign), in f64 from kernel 2's per-cluster partial sums. Waits for
    /// the queued work.
    pub fn objective(&self) -> Result<f64, RuntimeError> {
        let partials = match self.backend.download(&self.partials)? {
            HostVec::F64(v) => v,
            other => other.to_f64(),
        };
        let k = self.k;
        Ok((0..k)
            .filter(|c| partials[2 * k + c] > 0.0)
            .map(|c| partials[k + c] - partials[c] / partials[2 * k + c])
            .sum())
    }

    /// Cluster sizes of the labels of the last [`assign`](Self::assign). Waits for the queued
    /// work.
    pub fn counts(&self) -> Result<Vec<u32>, RuntimeError> {
        match self.backend.download(&self.counts)? {
            HostVec::U32(v) => Ok(v),
            other => Err(invalid(format!(
                "cluster counts came back as {:?}",
                other.as_slice().elem()
            ))),
        }
    }

    /// Centroid norms `||c||^2` of the labels of the last [`assign`](Self::assign) (`+inf`
    /// for empty clusters). Waits for the queued work.
    pub fn centroid_norms(&self) -> Result<Vec<f64>, RuntimeError> {
        Ok(self.backend.download(&self.norms)?.to_f64())
    }

    /// The row sums `E` (`n x k`, row-major) of the last [`row_sums`](Self::row_sums). Waits
    /// for the queued work.
    pub fn sums(&self) -> Result<Vec<f64>, RuntimeError> {
        Ok(self.backend.download(&self.sums)?.to_f64())
    }

    /// Runs from `labels0` (each below `k`) until no label changes, the objective stalls
    /// (with `options.tol`) or `options.max_iter`, reading the objective and the labels back
    /// after every iteration, as the library's loop does.
    pub fn run(
        &mut self,
        kmat: &impl DeviceOperand,
        labels0: &[u32],
        options: &NaiveRunOptions,
    ) -> Result<NaiveRun, RuntimeError> {
        if labels0.len() != self.n {
            return Err(invalid(format!(
                "{} initial labels for n = {} points",
                labels0.len(),
                self.n
            )));
        }
        if let Some(p) = labels0.iter().position(|l| *l as usize >= self.k) {
            return Err(invalid(format!(
                "initial label {} of point {p} is not below k = {}",
                labels0[p], self.k
            )));
        }
        if options.max_iter == 0 {
            return Err(invalid("max_iter = 0; allow at least one iteration"));
        }
        self.check_k_matrix(kmat)?;
        let mut current = self.backend.upload(HostSlice::U32(labels0))?;
        let mut next = self.backend.alloc(ElemType::U32, self.n)?;
        let mut host_labels = labels0.to_vec();
        let mut history = Vec::new();
        let mut per_iteration_s = Vec::new();
        let mut converged = false;
        for _ in 0..options.max_iter {
            let t = Instant::now();
            self.iterate(kmat, &current, &next)?;
            let objective = self.objective()?;
            let new_labels = download_u32(self.backend, &next)?;
            per_iteration_s.push(t.elapsed().as_secs_f64());
            let changed = new_labels
                .iter()
                .zip(&host_labels)
                .filter(|(a, b)| a != b)
                .count();
            history.push(objective);
            if changed == 0 {
                converged = true;
                break;
            }
            if let (Some(tol), [.., prev, last]) = (options.tol, history.as_slice()) {
                if (prev - last).abs() <= tol * prev.abs().max(f64::MIN_POSITIVE) {
                    converged = true;
                    break;
                }
            }
            std::mem::swap(&mut current, &mut next);
            host_labels = new_labels;
        }
        let mut objective = history.last().copied().unwrap_or(f64::NAN);
        if !converged {
            // Stopped by max_iter: `current` holds the labels of the last iteration's output,
            // whose objective was not measured yet.
            self.iterate(kmat, &current, &next)?;
            objective = self.objective()?;
        }
        Ok(NaiveRun {
            iterations: history.len(),
            labels: host_labels,
            objective,
            objective_history: history,
            converged,
            per_iteration_s,
        })
    }
}

/// Blocks for `units` units of work, at least one, capped at [`MAX_BLOCKS`].
fn blocks(units: usize) -> u32 {
    units.clamp(1, MAX_BLOCKS) as u32
}

fn download_u32(backend: &CudaBackend, buf: &CudaBuffer) -> Result<Vec<u32>, RuntimeError> {
    match backend.download(buf)? {
        HostVec::U32(v) => Ok(v),
        other => Err(invalid(format!(
            "labels came back as {:?}",
            other.as_slice().elem()
        ))),
    }
}

#[cfg(test)]
mod tests {
    //! Host tests of the sources and the CPU error; GPU tests against naive f64 loops and
    //! against the DSL's iteration program. Without a GPU the GPU tests print a notice and
    //! return, unless `POPCORN_REQUIRE_GPU` is set.

    use super::*;
    use popcorn_runtime::cuda::{cuda_available, CudaConfig};
    use popcorn_runtime::{Args, DeviceSpec, Outputs};
    use std::sync::OnceLock;

    /// The DSL's Kernel K-means iteration, as in `examples/programs/kernel_kmeans.pop`.
    const DSL_ITERATION: &str = "
fn kkmeans_iteration(K: Dense[n, n], labels: Index[n]) -> (new_labels: Index[n], objective: Scalar) {
    V  = selection(labels, k);
    E  = -2 * K * V^T;
    z  = gather(E, labels);
    cn = where(counts(labels, k) > 0, -0.5 * V * z, inf);
    D  = E + diag(K) + cn^T;
    new_labels = argmin_rows(D);
    objective  = sum(gather(D, labels));
}";

    const DSL_KERNEL: &str = "
fn kernel_polynomial(X: Dense[n, d], gamma: Scalar, coef0: Scalar, degree: Scalar) -> (K: Dense[n, n]) {
    K = pow(gamma * X * X^T + coef0, degree);
}";

    fn gpu_required() -> bool {
        popcorn_dsl::settings::settings().require_gpu
    }

    fn skip(why: &str) {
        assert!(
            !gpu_required(),
            "POPCORN_REQUIRE_GPU is set but the GPU is unusable: {why}"
        );
        eprintln!("skipping GPU test: {why}");
    }

    /// One backend for the tests of this module, its kernel cache in a temporary directory.
    fn gpu() -> Option<&'static CudaBackend> {
        static SHARED: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
        let shared = SHARED.get_or_init(|| {
            cuda_available()?;
            let config = CudaConfig {
                allow_tf32: false,
                cache_dir: Some(
                    std::env::temp_dir()
                        .join(format!("popcorn-naive-tests-{}", std::process::id())),
                ),
                dump_dir: None,
                log_cache: false,
                round_tf32_operands: true,
                warp_specialised_contractions: true,
                tensor_core_sums: true,
                sums_teams: true,
            };
            CudaBackend::with_config(0, config).map_err(|e| e.to_string())
        });
        match shared {
            Ok(b) => Some(b),
            Err(why) => {
                skip(why);
                None
            }
        }
    }

    /// A CUDA context, or `None` (after a notice) without a GPU.
    fn gpu_context(dtype: DType) -> Option<Context> {
        match cuda_available() {
            Ok(n) if n > 0 => Some(
                Context::new(DeviceSpec::Cuda(0))
                    .expect("CUDA context")
                    .with_dtype(dtype),
            ),
            Ok(_) => {
                skip("no CUDA device");
                None
            }
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    /// Deterministic values in [0, 1).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() * n as f64) as usize % n
        }
    }

    /// A polynomial kernel matrix (1, 1, 2) of `n` random points in `d` dimensions, rounded
    /// to `dtype` so the host sees exactly what the device sees.
    fn kernel_matrix(n: usize, d: usize, dtype: DType, rng: &mut Rng) -> Vec<f64> {
        let x: Vec<f64> = (0..n * d).map(|_| rng.next() - 0.5).collect();
        let mut k = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..d).map(|t| x[i * d + t] * x[j * d + t]).sum();
                let v = (dot + 1.0).powi(2);
                k[i * n + j] = if dtype == DType::F32 {
                    v as f32 as f64
                } else {
                    v
                };
            }
        }
        k
    }

    fn upload(b: &CudaBackend, dtype: DType, v: &[f64]) -> CudaBuffer {
        match dtype {
            DType::F32 => b.upload(HostSlice::F32(
                &v.iter().map(|x| *x as f32).collect::<Vec<_>>(),
            )),
            DType::F64 => b.upload(HostSlice::F64(v)),
        }
        .expect("upload")
    }

    /// Everything one iteration computes, in f64 on the host.
    struct Reference {
        sums: Vec<f64>,
        counts: Vec<u32>,
        norms: Vec<f64>,
        labels: Vec<u32>,
        /// Gap between the best and the second-best distance of each point.
        margins: Vec<f64>,
        objective: f64,
    }

    fn reference(kmat: &[f64], labels: &[u32], n: usize, k: usize) -> Reference {
        let mut sums = vec![0.0; n * k];
        let mut counts = vec![0u32; k];
        for i in 0..n {
            for j in 0..n {
                sums[i * k + labels[j] as usize] += kmat[i * n + j];
            }
        }
        for l in labels {
            counts[*l as usize] += 1;
        }
        let mut norms = vec![f64::INFINITY; k];
        for c in 0..k {
            if counts[c] > 0 {
                let s: f64 = (0..n)
                    .filter(|i| labels[*i] as usize == c)
                    .map(|i| sums[i * k + c])
                    .sum();
                norms[c] = s / (counts[c] as f64 * counts[c] as f64);
            }
        }
        let mut new_labels = vec![0u32; n];
        let mut margins = vec![f64::INFINITY; n];
        let mut objective = 0.0;
        for i in 0..n {
            let d: Vec<f64> = (0..k)
                .map(|c| {
                    if counts[c] == 0 {
                        f64::INFINITY
                    } else {
                        kmat[i * n + i] - 2.0 * sums[i * k + c] / counts[c] as f64 + norms[c]
                    }
                })
                .collect();
            let best = (0..k).fold(0, |b, c| if d[c] < d[b] { c } else { b });
            let second = (0..k)
                .filter(|c| *c != best)
                .map(|c| d[c])
                .fold(f64::INFINITY, f64::min);
            new_labels[i] = best as u32;
            margins[i] = second - d[best];
            objective += d[labels[i] as usize];
        }
        Reference {
            sums,
            counts,
            norms,
            labels: new_labels,
            margins,
            objective,
        }
    }

    fn close(got: f64, want: f64, tol: f64) -> bool {
        (got - want).abs() <= tol * (1.0 + want.abs())
    }

    #[test]
    fn sources_are_instantiated_for_both_types() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            for kernel in [Kernel::RowSums, Kernel::CentroidNorms, Kernel::Assign] {
                let src = kernel.source(dtype);
                assert!(
                    !src.contains("{T}") && !src.contains("{NAME}"),
                    "{kernel:?}"
                );
                assert!(src.contains("void __launch_bounds__"), "{kernel:?}");
                assert!(
                    src.contains(&format!(" {}(", kernel.name(dtype))),
                    "{kernel:?} {dtype:?}"
                );
                assert!(
                    src.contains(&format!(
                        "const {}* __restrict__ K",
                        kernels_gen::CType::c_name(dtype)
                    )),
                    "{kernel:?}"
                );
            }
        }
        assert_eq!(
            NORMS_THREADS.count_ones(),
            1,
            "the norms kernel reduces by halving"
        );
    }

    #[test]
    fn the_baseline_is_refused_on_the_cpu() {
        let ctx = Context::new(DeviceSpec::Cpu).expect("CPU context");
        let err = naive_kkmeans(&ctx, 10, 2).expect_err("no naive baseline on the CPU");
        assert!(err.to_string().contains("GPU implementation"), "{err}");
    }

    #[test]
    fn context_time_passes_the_value_through_on_the_cpu() {
        let ctx = Context::new(DeviceSpec::Cpu).expect("CPU context");
        let (v, ms) = ctx.time(|| Ok(41 + 1)).expect("time");
        assert_eq!(v, 42);
        assert!(ms.is_finite() && ms >= 0.0, "{ms}");
        let failed =
            ctx.time(|| -> Result<(), RuntimeError> { Err(RuntimeError::Internal("boom".into())) });
        assert!(failed.is_err());
    }

    #[test]
    fn gpu_iteration_matches_host_loops() {
        let Some(b) = gpu() else { return };
        let mut rng = Rng(7);
        // Sizes 1, odd, and not multiples of the block sizes; k = 40 at n = 513 leaves no
        // warp without conflicts; the last cluster is kept empty whenever k > 1.
        for dtype in [DType::F32, DType::F64] {
            for (n, k, d) in [
                (1, 1, 1),
                (2, 2, 1),
                (7, 3, 2),
                (37, 5, 3),
                (300, 17, 4),
                (513, 40, 3),
                (1030, 7, 5),
            ] {
                let kmat = kernel_matrix(n, d, dtype, &mut rng);
                let used = if k > 1 { k - 1 } else { 1 };
                let labels: Vec<u32> = (0..n)
                    .map(|i| {
                        if i < used {
                            i as u32
                        } else {
                            rng.below(used) as u32
                        }
                    })
                    .collect();
                let want = reference(&kmat, &labels, n, k);

                let mut naive = NaiveKkmeans::new(b, n, k, dtype).expect("naive");
                let k_buf = upload(b, dtype, &kmat);
                let l_buf = b.upload(HostSlice::U32(&labels)).expect("labels");
                let out = b.alloc(ElemType::U32, n).expect("alloc");
                b.fill(&out, f64::NAN).expect("poison labels");
                b.fill(&naive.sums, f64::NAN).expect("poison sums");
                b.fill(&naive.norms, f64::NAN).expect("poison norms");
                naive.iterate(&k_buf, &l_buf, &out).expect("iterate");
                let what = format!("{dtype} n={n} k={k}");

                let tol = if dtype == DType::F32 { 2e-5 } else { 1e-11 };
                let sums = naive.sums().expect("sums");
                for (i, (g, w)) in sums.iter().zip(&want.sums).enumerate() {
                    assert!(
                        close(*g, *w, tol),
                        "{what}: E[{}, {}] = {g}, expected {w}",
                        i / k,
                        i % k
                    );
                }
                assert_eq!(
                    naive.counts().expect("counts"),
                    want.counts,
                    "{what}: counts"
                );
                let norms = naive.centroid_norms().expect("norms");
                for (c, (g, w)) in norms.iter().zip(&want.norms).enumerate() {
                    let ok = if w.is_infinite() {
                        *g == f64::INFINITY
                    } else {
                        close(*g, *w, tol)
                    };
                    assert!(ok, "{what}: norm of cluster {c} is {g}, expected {w}");
                }
                let got = download_u32(b, &out).expect("labels");
                for i in 0..n {
                    // f32 rounding may flip a near tie; the gap must then be tiny.
                    let tie = want.margins[i] <= 1e-3 * (1.0 + kmat[i * n + i].abs());
                    assert!(
                        got[i] == want.labels[i] || (dtype == DType::F32 && tie),
                        "{what}: point {i} got cluster {}, expected {} (gap {})",
                        got[i],
                        want.labels[i],
                        want.margins[i]
                    );
                }
                if k > 1 {
                    assert!(
                        got.iter().all(|l| (*l as usize) < k - 1),
                        "{what}: a point chose the empty cluster"
                    );
                }
                let objective = naive.objective().expect("objective");
                assert!(
                    close(objective, want.objective, tol * 10.0),
                    "{what}: objective {objective}, expected {}",
                    want.objective
                );

                // In place: the new labels may overwrite the labels read.
                naive
                    .iterate(&k_buf, &l_buf, &l_buf)
                    .expect("iterate in place");
                assert_eq!(
                    download_u32(b, &l_buf).expect("labels"),
                    got,
                    "{what}: in place"
                );
            }
        }
    }

    #[test]
    fn gpu_rejects_bad_arguments_without_panicking() {
        let Some(b) = gpu() else { return };
        assert!(NaiveKkmeans::new(b, 0, 1, DType::F32).is_err());
        assert!(NaiveKkmeans::new(b, 5, 0, DType::F32).is_err());
        assert!(NaiveKkmeans::new(b, 5, 6, DType::F32).is_err());
        assert!(
            NaiveKkmeans::new(b, 20_000, 13_000, DType::F32).is_err(),
            "bins beyond shared memory"
        );
        let mut naive = NaiveKkmeans::new(b, 4, 2, DType::F32).expect("naive");
        let k_small = upload(b, DType::F32, &[1.0; 9]);
        let k_f64 = upload(b, DType::F64, &[1.0; 16]);
        let k_ok = upload(b, DType::F32, &[1.0; 16]);
        let labels = b.upload(HostSlice::U32(&[0, 1, 0, 1])).expect("labels");
        let short = b.upload(HostSlice::U32(&[0, 1, 0])).expect("labels");
        assert!(naive.iterate(&k_small, &labels, &labels).is_err());
        assert!(naive.iterate(&k_f64, &labels, &labels).is_err());
        assert!(naive.iterate(&k_ok, &short, &labels).is_err());
        assert!(naive.iterate(&k_ok, &labels, &k_ok).is_err());
        let options = NaiveRunOptions {
            max_iter: 3,
            tol: None,
        };
        assert!(
            naive.run(&k_ok, &[0, 1, 2, 0], &options).is_err(),
            "label 2 with k = 2"
        );
        assert!(
            naive.run(&k_ok, &[0, 1], &options).is_err(),
            "too few labels"
        );
        assert!(naive
            .run(
                &k_ok,
                &[0, 1, 0, 1],
                &NaiveRunOptions {
                    max_iter: 0,
                    tol: None
                }
            )
            .is_err());
        // Labels beyond k on the device are skipped, never written out of bounds.
        let wild = b
            .upload(HostSlice::U32(&[0, 1, 7, u32::MAX]))
            .expect("labels");
        naive.row_sums(&k_ok, &wild).expect("row sums");
        let sums = naive.sums().expect("sums");
        assert_eq!(sums, vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn gpu_marks_time_the_kernels() {
        let Some(b) = gpu() else { return };
        let n = 3000;
        let mut rng = Rng(3);
        let kmat: Vec<f64> = (0..n * n).map(|_| rng.next()).collect();
        let k_buf = upload(b, DType::F32, &kmat);
        let labels: Vec<u32> = (0..n).map(|i| (i % 10) as u32).collect();
        let l_buf = b.upload(HostSlice::U32(&labels)).expect("labels");
        let mut naive = NaiveKkmeans::new(b, n, 10, DType::F32).expect("naive");
        b.synchronize().expect("sync");
        let start = b.mark().expect("mark");
        naive.row_sums(&k_buf, &l_buf).expect("row sums");
        let end = b.mark().expect("mark");
        let ms = b.elapsed_ms(&start, &end).expect("elapsed");
        assert!(ms.is_finite() && ms > 0.0 && ms < 10_000.0, "{ms} ms");
        let again = b.elapsed_ms(&start, &start).expect("elapsed");
        assert_eq!(again, 0.0);
    }

    /// Runs the DSL iteration like the library's loop (labels read back, stop when none
    /// changes) and returns the labels and the objective history.
    fn dsl_run(
        ctx: &Context,
        kmat: &Tensor,
        labels0: &[u32],
        k: usize,
        max_iter: usize,
    ) -> (Vec<u32>, Vec<f64>) {
        let program = popcorn_dsl::Program::parse(DSL_ITERATION).expect("iteration program");
        let mut host = labels0.to_vec();
        let mut labels = ctx.index(&host).expect("labels");
        let mut out = Outputs::default();
        let mut history = Vec::new();
        for _ in 0..max_iter {
            let args = Args::new()
                .tensor("K", kmat)
                .tensor("labels", &labels)
                .dim("k", k);
            ctx.run_into(&program, &args, &mut out).expect("iteration");
            history.push(out.scalar("objective").expect("objective"));
            let new = ctx
                .to_u32(out.tensor("new_labels").expect("labels"))
                .expect("labels");
            if new == host {
                break;
            }
            let next = out.take("new_labels").expect("labels");
            out.insert("new_labels", std::mem::replace(&mut labels, next));
            host = new;
        }
        (host, history)
    }

    #[test]
    fn gpu_run_matches_the_dsl_iteration() {
        for dtype in [DType::F32, DType::F64] {
            let Some(ctx) = gpu_context(dtype) else {
                return;
            };
            // Five well separated blobs, so that rounding cannot flip a label.
            let (n, d, k) = (503, 3, 5);
            let mut rng = Rng(11);
            let x: Vec<f64> = (0..n)
                .flat_map(|i| {
                    let blob = (i * 7 % k) as f64;
                    (0..d)
                        .map(|t| blob * if t == 0 { 1.0 } else { 0.3 } + 0.05 * (rng.next() - 0.5))
                        .collect::<Vec<_>>()
                })
                .collect();
            let kernel = popcorn_dsl::Program::parse(DSL_KERNEL).expect("kernel program");
            let xt = ctx.dense(n, d, &x).expect("points");
            let args = Args::new()
                .tensor("X", &xt)
                .scalar("gamma", 1.0)
                .scalar("coef0", 1.0)
                .scalar("degree", 2.0);
            let kmat = ctx.run(&kernel, &args).expect("K").take("K").expect("K");
            let labels0: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();

            let (dsl_labels, dsl_history) = dsl_run(&ctx, &kmat, &labels0, k, 30);
            let mut naive = naive_kkmeans(&ctx, n, k).expect("naive");
            let run = naive
                .run(
                    &kmat,
                    &labels0,
                    &NaiveRunOptions {
                        max_iter: 30,
                        tol: None,
                    },
                )
                .expect("naive run");
            assert_eq!(run.labels, dsl_labels, "{dtype}: labels");
            assert_eq!(
                run.objective_history.len(),
                dsl_history.len(),
                "{dtype}: iterations"
            );
            // J = tr(K) - sum_c S_c / |c| cancels: the DSL sums D in the working precision,
            // so the error scales with tr(K), not with J.
            let k_host = ctx.to_f64(&kmat).expect("K");
            let trace: f64 = (0..n).map(|i| k_host[i * n + i].abs()).sum();
            let eps = if dtype == DType::F32 { 1e-6 } else { 1e-13 };
            for (it, (g, w)) in run.objective_history.iter().zip(&dsl_history).enumerate() {
                assert!(
                    (g - w).abs() <= eps * trace + 1e-4 * w.abs(),
                    "{dtype}: objective of iteration {it}: {g} vs {w} (tr K = {trace})"
                );
            }
            assert_eq!(run.per_iteration_s.len(), run.iterations);

            // Random data, one iteration: the labels agree but for rounding near ties.
            let (n, k) = (1000, 10);
            let xr: Vec<f64> = (0..n * 8).map(|_| rng.next()).collect();
            let xt = ctx.dense(n, 8, &xr).expect("points");
            let args = Args::new()
                .tensor("X", &xt)
                .scalar("gamma", 1.0)
                .scalar("coef0", 1.0)
                .scalar("degree", 2.0);
            let kmat = ctx.run(&kernel, &args).expect("K").take("K").expect("K");
            let labels0: Vec<u32> = (0..n).map(|i| (i % k) as u32).collect();
            let (dsl_labels, _) = dsl_run(&ctx, &kmat, &labels0, k, 1);
            let mut naive = naive_kkmeans(&ctx, n, k).expect("naive");
            let l0 = ctx.index(&labels0).expect("labels");
            let l1 = ctx.index(&vec![u32::MAX; n]).expect("labels");
            naive.iterate(&kmat, &l0, &l1).expect("iterate");
            let got = ctx.to_u32(&l1).expect("labels");
            let same = got.iter().zip(&dsl_labels).filter(|(a, b)| a == b).count();
            assert!(
                same >= n - 5,
                "{dtype}: {same} of {n} labels agree with the DSL"
            );
        }
    }
}
