//! The cluster-sums step on the GPU: `S[i, c] = sum over j with labels[j] == c of M[i, j]`,
//! one streaming pass over `M` with kernels-gen's [`kernels_gen::cluster_sums`] kernel.
//!
//! This module checks the step's arguments, reads the device's shared-memory limits, picks the
//! kernel variant and its passes ([`plan_cluster_sums`]), sizes the persistent grid from the
//! driver's occupancy calculator, zeroes `S` when a row group is split between two workers, and
//! launches one kernel per pass on the backend's stream. Labels `>= k` are skipped (they never
//! touch memory outside `S`'s rows); the CPU backend reports them as an error instead. The
//! result is deterministic on a given device (see the kernel's documentation for the order of
//! summation).

use crate::backend::{Arg, ElemType};
use crate::cuda::args::{count, dense, index, shape};
use crate::cuda::backend::CudaBackend;
use crate::cuda::errors::{driver, invalid};
use crate::cuda::launch::{launch, KernelArg};
use crate::cuda::memory::CudaBuffer;
use crate::cuda::nvrtc::KernelCache;
use crate::error::RuntimeError;
use cudarc::driver::sys::{self, CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, CudaStream};
use kernel_ir::ScalarType;
use kernels_gen::cluster_sums::{
    cluster_sums, plan_cluster_sums, ClusterSumsLaunch, ClusterSumsVariant, DeviceLimits,
    CLUSTER_SUMS_THREADS,
};
use popcorn_dsl::DType;
use std::sync::Arc;

/// Where compiled kernels come from: the backend's NVRTC cache.
pub(crate) trait KernelSource {
    /// The kernel `name`, compiled from `source()` on first use.
    fn kernel_function(
        &self,
        name: &str,
        source: &dyn Fn() -> String,
    ) -> Result<CudaFunction, RuntimeError>;
}

impl KernelSource for KernelCache {
    fn kernel_function(
        &self,
        name: &str,
        source: &dyn Fn() -> String,
    ) -> Result<CudaFunction, RuntimeError> {
        self.function(name, source)
    }
}

impl KernelSource for CudaBackend {
    fn kernel_function(
        &self,
        name: &str,
        source: &dyn Fn() -> String,
    ) -> Result<CudaFunction, RuntimeError> {
        self.kernel(name, source)
    }
}

/// One cluster-sums problem in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClusterSumsArgs {
    /// Element type of `M` and `S`.
    pub(crate) dtype: ScalarType,
    /// Address of `M` (row-major).
    pub(crate) m: u64,
    /// Rows of `M` and `S`.
    pub(crate) rows: usize,
    /// Columns of `M` (and labels).
    pub(crate) cols: usize,
    /// Leading dimension of `M`, elements (`>= cols`).
    pub(crate) ld: usize,
    /// Address of `cols` `u32` labels.
    pub(crate) labels: u64,
    /// Number of clusters: columns of `S`.
    pub(crate) k: usize,
    /// Address of `S` (row-major `rows x k`).
    pub(crate) s: u64,
}

/// What a launch did (for benchmarks and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClusterSumsReport {
    /// Kernel, clusters per pass and shared memory.
    pub(crate) launch: ClusterSumsLaunch,
    /// Warps (one-warp blocks) launched per pass.
    pub(crate) workers: u64,
    /// Resident blocks per multiprocessor the occupancy calculator allowed.
    pub(crate) blocks_per_sm: u32,
    /// Whether `S` was zeroed first.
    pub(crate) zeroed: bool,
}

/// The `ClusterSums { k }` plan step: inputs `(M, labels)`, output `S` (`rows(M) x k`).
pub(crate) fn run_step(
    kernels: &dyn KernelSource,
    stream: &Arc<CudaStream>,
    inputs: &[Arg<'_, CudaBuffer>],
    outputs: &[Arg<'_, CudaBuffer>],
    dtype: DType,
    k: usize,
) -> Result<(), RuntimeError> {
    count("cluster sums", inputs, outputs, 2, 1)?;
    let elem = ElemType::float(dtype);
    let m = dense(&inputs[0], elem, "cluster sums input M")?;
    let (labels, n) = index(&inputs[1], "cluster sums labels")?;
    let s = dense(&outputs[0], elem, "cluster sums output S")?;
    if n != m.cols {
        return Err(invalid(format!(
            "cluster sums: {n} labels for a matrix of {} columns; give one label per column",
            m.cols
        )));
    }
    shape("cluster sums output S", (s.rows, s.cols), (m.rows, k))?;
    let args = ClusterSumsArgs {
        dtype: dtype.scalar_type(),
        m: m.ptr,
        rows: m.rows,
        cols: m.cols,
        ld: m.cols,
        labels,
        k,
        s: s.ptr,
    };
    launch_cluster_sums(kernels, stream, &args, None).map(|_| ())
}

/// Reads the device's shared-memory limits.
pub(crate) fn device_limits(stream: &CudaStream) -> Result<DeviceLimits, RuntimeError> {
    let ctx = stream.context();
    let get = |attr: CUdevice_attribute| -> Result<u32, RuntimeError> {
        let v = ctx
            .attribute(attr)
            .map_err(|e| driver("cuDeviceGetAttribute", e))?;
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

/// Computes `S` for `args` on `stream`. `tile` forces a tile width and pipeline depth
/// (`(tile_cols, stages)`, for benchmarks); `None` lets [`plan_cluster_sums`] choose.
pub(crate) fn launch_cluster_sums(
    kernels: &dyn KernelSource,
    stream: &Arc<CudaStream>,
    args: &ClusterSumsArgs,
    tile: Option<(u32, u32)>,
) -> Result<Option<ClusterSumsReport>, RuntimeError> {
    launch_cluster_sums_with(kernels, stream, args, tile, None, None)
}

/// [`launch_cluster_sums`] with at most `max_workers` workers when given (tests use it to split
/// row groups between workers on small problems), and strided rows `row_period` apart instead
/// of the leading dimension's period (benchmarks compare them; it must be a multiple of that
/// period).
fn launch_cluster_sums_with(
    kernels: &dyn KernelSource,
    stream: &Arc<CudaStream>,
    args: &ClusterSumsArgs,
    tile: Option<(u32, u32)>,
    max_workers: Option<u64>,
    row_period: Option<u32>,
) -> Result<Option<ClusterSumsReport>, RuntimeError> {
    let esz = args.dtype.size_bytes();
    if args.ld < args.cols {
        return Err(invalid(format!(
            "cluster sums: leading dimension {} is below the {} columns",
            args.ld, args.cols
        )));
    }
    if u32::try_from(args.k).is_err() {
        return Err(invalid(format!(
            "cluster sums: {} clusters, but labels are u32: use fewer than 2^32 clusters",
            args.k
        )));
    }
    if args.rows == 0 || args.k == 0 {
        return Ok(None);
    }
    if args.cols == 0 {
        // No columns: every sum is empty.
        zero(stream, args.s, args.rows * args.k * esz)?;
        return Ok(None);
    }
    if !args.m.is_multiple_of(esz as u64) {
        return Err(invalid(format!(
            "cluster sums: the matrix address {:#x} is not aligned to its {esz}-byte elements",
            args.m
        )));
    }
    let aligned = ClusterSumsVariant::prefers_aligned(args.dtype, args.m, args.ld as u64);
    let forced = match tile {
        Some((tile_cols, stages)) => Some(
            ClusterSumsVariant::new(args.dtype, tile_cols, stages, aligned)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        None => None,
    };
    let limits = device_limits(stream)?;
    let mut plan = plan_cluster_sums(args.k as u64, args.dtype, aligned, forced, &limits)
        .map_err(|e| RuntimeError::Device(e.to_string()))?;
    plan.variant = plan.variant.with_leading_dimension(args.ld as u64);
    if let (Some(p), false) = (row_period, plan.variant.aligned) {
        if !p.is_multiple_of(plan.variant.row_period) || p > plan.variant.row_alignment() {
            return Err(invalid(format!(
                "cluster sums: rows {p} apart do not share their shifts (period {})",
                plan.variant.row_period
            )));
        }
        plan.variant.row_period = p;
    }
    let variant = plan.variant;
    let name = variant.name();
    let function = kernels.kernel_function(&name, &|| cluster_sums(&variant).source)?;
    let shared = plan.shared_bytes;
    function
        .set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )
        .map_err(|e| driver("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", e))?;
    // All of the unified L1/shared storage as shared memory: the kernel reads M through
    // cp.async into shared memory and needs L1 for nothing else.
    function
        .set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            100,
        )
        .map_err(|e| driver("cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)", e))?;
    let occupancy = function
        .occupancy_max_active_blocks_per_multiprocessor(CLUSTER_SUMS_THREADS, shared as usize, None)
        .map_err(|e| driver("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
    let blocks_per_sm = occupancy.min(limits.blocks_per_sm(u64::from(shared)));
    if blocks_per_sm == 0 {
        return Err(RuntimeError::Device(format!(
            "cluster sums: kernel {name} with {shared} bytes of shared memory cannot run on this device"
        )));
    }
    let resident = u64::from(limits.multiprocessors.max(1)) * u64::from(blocks_per_sm);
    let resident = max_workers.map_or(resident, |cap| resident.min(cap));
    let workers = plan.workers(
        args.rows as u64,
        args.cols as u64,
        resident,
        u64::from(limits.multiprocessors),
    );
    let zeroed = plan.needs_zeroed_output(args.rows as u64, workers);
    if zeroed {
        zero(stream, args.s, args.rows * args.k * esz)?;
    }
    let dims = plan.grid_block(workers);
    for p in 0..plan.passes() {
        let (c_lo, kb) = plan.pass_range(p);
        let mut kargs = [
            KernelArg::size(args.rows)?,
            KernelArg::size(args.cols)?,
            KernelArg::size(args.ld)?,
            KernelArg::Ptr(args.m),
            KernelArg::Ptr(args.labels),
            KernelArg::I64(as_i64(c_lo)?),
            KernelArg::I64(as_i64(kb)?),
            KernelArg::size(args.k)?,
            KernelArg::Ptr(args.s),
            KernelArg::I64(as_i64(workers)?),
        ];
        launch(stream, &function, &name, dims, &mut kargs)?;
    }
    Ok(Some(ClusterSumsReport {
        launch: plan,
        workers,
        blocks_per_sm,
        zeroed,
    }))
}

fn as_i64(v: u64) -> Result<i64, RuntimeError> {
    i64::try_from(v).map_err(|_| invalid(format!("cluster sums: {v} does not fit in 64-bit sizes")))
}

/// Zeroes `bytes` (a multiple of 4) at `ptr`, stream-ordered.
fn zero(stream: &CudaStream, ptr: u64, bytes: usize) -> Result<(), RuntimeError> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: `ptr` is the output buffer of the step, checked to hold `bytes` bytes (rows x k
    // elements of the step's type); the stream belongs to the current context.
    unsafe { sys::cuMemsetD32Async(ptr, 0, bytes / 4, stream.cu_stream()) }
        .result()
        .map_err(|e| driver("cuMemsetD32Async", e))
}

#[cfg(test)]
mod tests {
    //! GPU tests against a naive f64 loop, and an ignored benchmark. Without a CUDA device the
    //! tests print a notice and pass, unless `POPCORN_REQUIRE_GPU` is set.

    use super::*;
    use crate::backend::{Backend, HostSlice, HostVec};
    use crate::cuda::{cuda_available, CudaConfig};

    /// A backend, or `None` without a GPU. `sync`: synchronise after every step (tests; not
    /// for timing).
    fn gpu_with(sync: bool) -> Option<CudaBackend> {
        let why = match cuda_available() {
            Ok(_) => {
                let config = CudaConfig {
                    allow_tf32: false,
                    sync_after_step: sync,
                    cache_dir: Some(
                        std::env::temp_dir()
                            .join(format!("popcorn-cluster-sums-tests-{}", std::process::id())),
                    ),
                    dump_dir: None,
                    log_cache: false,
                };
                match CudaBackend::with_config(0, config) {
                    Ok(b) => return Some(b),
                    Err(e) => e.to_string(),
                }
            }
            Err(why) => why,
        };
        if std::env::var_os("POPCORN_REQUIRE_GPU").is_some() {
            panic!("POPCORN_REQUIRE_GPU is set but the CUDA backend is unusable: {why}");
        }
        eprintln!("skipping GPU test: {why}");
        None
    }

    fn gpu() -> Option<CudaBackend> {
        gpu_with(true)
    }

    /// A deterministic generator.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 ^ (self.0 >> 29)
        }
        /// In [-1, 1).
        fn value(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        }
        fn below(&mut self, n: u32) -> u32 {
            ((self.next_u64() >> 33) % u64::from(n)) as u32
        }
    }

    /// Naive f64 sums of the first `cols` columns of an `rows x ld` matrix; labels >= k skipped.
    fn reference(
        rows: usize,
        cols: usize,
        ld: usize,
        m: &[f64],
        labels: &[u32],
        k: usize,
    ) -> Vec<f64> {
        let mut s = vec![0.0; rows * k];
        for i in 0..rows {
            for j in 0..cols {
                let c = labels[j] as usize;
                if c < k {
                    s[i * k + c] += m[i * ld + j];
                }
            }
        }
        s
    }

    /// Sums of |values| per output entry: the scale of its rounding error.
    fn magnitude(
        rows: usize,
        cols: usize,
        ld: usize,
        m: &[f64],
        labels: &[u32],
        k: usize,
    ) -> Vec<f64> {
        let abs: Vec<f64> = m.iter().map(|v| v.abs()).collect();
        reference(rows, cols, ld, &abs, labels, k)
    }

    struct Case {
        dtype: ScalarType,
        rows: usize,
        cols: usize,
        ld: usize,
        k: usize,
        /// Labels drawn below `k + extra`: `extra > 0` puts some out of range.
        extra: u32,
        tile: Option<(u32, u32)>,
        /// Offset (elements) of M inside its buffer, to test unaligned matrices.
        offset: usize,
        /// At most this many workers (to split row groups on small problems).
        workers: Option<u64>,
    }

    fn case(dtype: ScalarType, rows: usize, cols: usize, k: usize) -> Case {
        Case {
            dtype,
            rows,
            cols,
            ld: cols,
            k,
            extra: 0,
            tile: None,
            offset: 0,
            workers: None,
        }
    }

    /// The smallest leading dimension `>= cols` that is `r` modulo 4.
    fn ld_mod4(cols: usize, r: usize) -> usize {
        cols + (r + 4 - cols % 4) % 4
    }

    /// Runs one case on the GPU and compares with the reference. The elements of M's buffer
    /// that are not M's (the offset before it, the padding columns `cols .. ld`) are NaN, as is
    /// S with guard bands around it: a NaN in the result or a written guard means the kernel
    /// summed or wrote something it should not have.
    fn check(b: &CudaBackend, c: &Case, seed: u64) -> ClusterSumsReport {
        let mut rng = Rng(seed);
        let total = c.offset
            + if c.rows == 0 {
                0
            } else {
                (c.rows - 1) * c.ld + c.cols
            };
        // The buffer ends on a 16-byte boundary: the copy of M's last partial 16-byte block
        // asks for its bytes inside M only (the rest is zero-filled), but compute-sanitizer
        // reports it as a 16-byte read past the allocation's end when the buffer ends inside
        // that block (it never leaves the block, so it cannot fault).
        let padded = total.max(1).next_multiple_of(16 / c.dtype.size_bytes());
        let m: Vec<f64> = (0..padded)
            .map(|i| {
                let v = rng.value();
                if i < c.offset || i >= total || (i - c.offset) % c.ld.max(1) >= c.cols {
                    f64::NAN
                } else {
                    v
                }
            })
            .collect();
        let labels: Vec<u32> = (0..c.cols.max(1))
            .map(|_| rng.below(c.k as u32 + c.extra))
            .collect();
        let elem = match c.dtype {
            ScalarType::F32 => ElemType::F32,
            ScalarType::F64 => ElemType::F64,
        };
        let m32: Vec<f32> = m.iter().map(|v| *v as f32).collect();
        // Reference on the values the GPU sees (rounded to f32 where it computes in f32).
        let seen: Vec<f64> = match c.dtype {
            ScalarType::F32 => m32.iter().map(|v| f64::from(*v)).collect(),
            ScalarType::F64 => m.clone(),
        };
        let mbuf = match c.dtype {
            ScalarType::F32 => b.upload(HostSlice::F32(&m32)),
            ScalarType::F64 => b.upload(HostSlice::F64(&m)),
        }
        .unwrap();
        let lbuf = b.upload(HostSlice::U32(&labels)).unwrap();
        // Guards of 1024 rows of S (a strided row group spans up to 32 * 32 rows) and 64
        // elements.
        let guard = 1024 * c.k + 64;
        let sbuf = b.alloc(elem, 2 * guard + c.rows * c.k).unwrap();
        b.fill(&sbuf, f64::NAN).unwrap();
        let args = ClusterSumsArgs {
            dtype: c.dtype,
            m: mbuf.device_ptr() + (c.offset * c.dtype.size_bytes()) as u64,
            rows: c.rows,
            cols: c.cols,
            ld: c.ld,
            labels: lbuf.device_ptr(),
            k: c.k,
            s: sbuf.device_ptr() + (guard * c.dtype.size_bytes()) as u64,
        };
        let report =
            launch_cluster_sums_with(b, b.stream(), &args, c.tile, c.workers, None).unwrap();
        b.synchronize().unwrap();
        let all = b.download(&sbuf).unwrap().to_f64();
        // Deterministic: a second launch gives the same bits (split row groups have two
        // partial sums, added into zero in either order).
        launch_cluster_sums_with(b, b.stream(), &args, c.tile, c.workers, None).unwrap();
        b.synchronize().unwrap();
        let again = b.download(&sbuf).unwrap().to_f64();
        assert!(
            all.iter()
                .zip(&again)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{:?} {}x{} k {}: a second launch gave different sums",
            c.dtype,
            c.rows,
            c.cols,
            c.k
        );
        let (before, rest) = all.split_at(guard);
        let (got, after) = rest.split_at(c.rows * c.k);
        let want = reference(c.rows, c.cols, c.ld, &seen[c.offset..], &labels, c.k);
        let mag = magnitude(c.rows, c.cols, c.ld, &seen[c.offset..], &labels, c.k);
        let eps = match c.dtype {
            ScalarType::F32 => f64::from(f32::EPSILON),
            ScalarType::F64 => f64::EPSILON,
        };
        let what = format!(
            "{:?} {}x{} ld {} k {} extra {} tile {:?} offset {} workers {:?}",
            c.dtype, c.rows, c.cols, c.ld, c.k, c.extra, c.tile, c.offset, c.workers
        );
        assert!(
            before.iter().chain(after).all(|v| v.is_nan()),
            "{what}: a guard band around S was written"
        );
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tol = 4.0 * eps * (c.cols as f64).sqrt().max(1.0) * mag[i] + 1e-300;
            assert!(
                (g - w).abs() <= tol,
                "{what}: S[{}, {}] = {g}, expected {w} (tolerance {tol:e})",
                i / c.k,
                i % c.k
            );
        }
        let report = report.unwrap_or_else(|| panic!("{what}: nothing was launched"));
        assert_eq!(
            report.launch.variant.aligned,
            ClusterSumsVariant::prefers_aligned(c.dtype, args.m, c.ld as u64),
            "{what}: row mode"
        );
        if let Some(cap) = c.workers {
            assert!(report.workers <= cap, "{what}: {report:?}");
        }
        report
    }

    #[test]
    fn matches_naive_sums_over_odd_sizes_and_cluster_counts() {
        let Some(b) = gpu() else { return };
        let mut seed = 1;
        for dtype in [ScalarType::F32, ScalarType::F64] {
            for &(rows, cols) in &[
                (1, 1),
                (1, 7),
                (3, 64),
                (33, 65),
                (37, 1001),
                (64, 256),
                (100, 333),
            ] {
                for k in [1, 7, 100, 1000] {
                    seed += 1;
                    check(&b, &case(dtype, rows, cols, k), seed);
                }
            }
        }
    }

    #[test]
    fn small_matrices_split_every_row_group_between_two_workers() {
        let Some(b) = gpu() else { return };
        for dtype in [ScalarType::F32, ScalarType::F64] {
            // Aligned rows: 5 row groups of 32 rows, 16 column tiles each.
            let r = check(&b, &case(dtype, 160, 2048, 10), 21);
            assert_eq!(r.workers, 10, "{r:?}");
            assert!(r.zeroed);
            // Strided rows (odd columns), with an odd number of column tiles.
            let c = case(dtype, 300, 999, 33);
            let r = check(&b, &c, 22);
            assert!(!r.launch.variant.aligned);
            assert_eq!(r.workers, 2 * r.launch.variant.row_groups(300), "{r:?}");
        }
    }

    #[test]
    fn strided_rows_for_unaligned_matrices_and_leading_dimensions() {
        let Some(b) = gpu() else { return };
        for dtype in [ScalarType::F32, ScalarType::F64] {
            // ld not a multiple of 16 bytes.
            let mut c = case(dtype, 45, 130, 7);
            c.ld = 133;
            let r = check(&b, &c, 11);
            assert!(!r.launch.variant.aligned);
            // M starts 1 element into its buffer.
            let mut c = case(dtype, 40, 128, 9);
            c.offset = 1;
            let r = check(&b, &c, 12);
            assert!(!r.launch.variant.aligned);
            // Rows on 16-byte but not 128-byte boundaries: strided too (tiles on cache lines).
            let mut c = case(dtype, 70, 100, 9);
            c.ld = 132;
            let r = check(&b, &c, 14);
            assert!(!r.launch.variant.aligned);
            // Aligned (rows on 128-byte boundaries), with ld > cols.
            let mut c = case(dtype, 40, 100, 9);
            c.ld = 128;
            let r = check(&b, &c, 13);
            assert!(r.launch.variant.aligned);
        }
    }

    /// Every kind of shift pattern of the strided mode (tiles on 128-byte boundaries: RA = 32
    /// f32 or 16 f64 elements): M at offsets 0 to 3 and further into its 128-byte line, `ld`
    /// odd (each row's shift differs from the last), `ld = 2 mod 4` (f32: shifts alternate in
    /// parity), `ld = 0 mod 4` and `ld = RA / 2 mod RA` (every other row on a line, as
    /// n = 50000 in f32), so row groups take rows 1 to RA apart (every period occurs, checked),
    /// every case off 128-byte lines (those on lines take the aligned mode); rows that leave
    /// partial and empty row groups and span several super groups of `32 RP` rows, `cols`
    /// around the tile width (the last tile of a row group may lie entirely past `cols`), a few
    /// cluster counts and labels out of range.
    #[test]
    fn strided_rows_over_every_shift_pattern() {
        let Some(b) = gpu() else { return };
        let mut seed = 1000;
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let esz = dtype.size_bytes();
            let ra = 128 / esz;
            let tw = 512 / esz;
            let mut periods = std::collections::BTreeSet::new();
            for offset in [0, 1, 2, 3, ra / 2 + 1, ra - 1] {
                for rows in [1, 5, 127, 129, 1000, 1025, 2100] {
                    for cols in [1, 3, 37, tw - 1, tw, tw + 1, 300] {
                        let half_line = cols.div_ceil(ra) * ra + ra / 2;
                        for ld in (0..4).map(|r| ld_mod4(cols, r)).chain([half_line]) {
                            // (M's buffer starts on a 256-byte boundary.) Rows on lines
                            // take the aligned mode.
                            if ClusterSumsVariant::prefers_aligned(
                                dtype,
                                (offset * esz) as u64,
                                ld as u64,
                            ) {
                                continue;
                            }
                            seed += 1;
                            let k = [1, 7, 100][(seed as usize / 3) % 3];
                            let mut c = case(dtype, rows, cols, k);
                            c.ld = ld;
                            c.offset = offset;
                            c.extra = if seed % 2 == 0 { 3 } else { 0 };
                            let r = check(&b, &c, seed);
                            assert!(!r.launch.variant.aligned, "{r:?}");
                            periods.insert(r.launch.variant.row_period as usize);
                        }
                    }
                }
            }
            let every: std::collections::BTreeSet<usize> =
                (0..=ra.trailing_zeros()).map(|e| 1 << e).collect();
            assert_eq!(periods, every, "{dtype:?}");
        }
    }

    /// The strided mode with row groups split between few workers (partial sums added into a
    /// zeroed S, empty row groups at the end), several passes over cluster ranges, and every
    /// tile width and pipeline depth.
    #[test]
    fn strided_rows_with_split_row_groups_passes_and_every_variant() {
        let Some(b) = gpu() else { return };
        let mut seed = 5000;
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let esz = dtype.size_bytes() as u32;
            let ra = (128 / esz) as usize;
            // Few workers over 1 (f32: 32 row groups, 31 empty), 129, 1000 and 2100 rows.
            for rows in [1, 129, 1000, 2100] {
                for workers in [1u64, 2, 3, 5, 7, 33] {
                    for (cols, ld, offset) in [(37, 37, 0), (300, 302, 1), (1, 1, ra - 1)] {
                        seed += 1;
                        let mut c = case(dtype, rows, cols, 7);
                        c.ld = ld;
                        c.offset = offset;
                        c.workers = Some(workers);
                        let r = check(&b, &c, seed);
                        assert!(!r.launch.variant.aligned);
                        let groups = r.launch.variant.row_groups(rows as u64);
                        let halves = r.launch.variant.column_tiles(cols as u64) >= 2
                            && 2 * groups <= workers;
                        let want = if halves {
                            2 * groups
                        } else {
                            workers.min(groups)
                        };
                        assert_eq!(r.workers, want, "{r:?}");
                        assert_eq!(r.zeroed, r.workers != groups, "{r:?}");
                    }
                }
            }
            // Several passes over cluster ranges (k = 2000 does not fit in one).
            for (rows, cols, workers) in
                [(129, 301, None), (1000, 77, Some(6)), (2100, 33, Some(40))]
            {
                seed += 1;
                let mut c = case(dtype, rows, cols, 2000);
                c.offset = 1;
                c.workers = workers;
                let r = check(&b, &c, seed);
                assert!(!r.launch.variant.aligned);
                assert!(r.launch.passes() > 1, "{r:?}");
            }
            // Every tile width and depth. cols = 1024 is a multiple of every tile width, so with
            // ld = 1025 the row groups whose shift is 0 end with a tile entirely past cols.
            for row_bytes in [64u32, 128, 256, 512] {
                for stages in 2..=4 {
                    for (cols, ld, offset) in [(1024, 1025, 0), (1001, 1001, 1)] {
                        seed += 1;
                        let mut c = case(dtype, 97, cols, 13);
                        c.ld = ld;
                        c.offset = offset;
                        c.tile = Some((row_bytes / esz, stages));
                        c.workers = Some(5);
                        let r = check(&b, &c, seed);
                        assert!(!r.launch.variant.aligned);
                        assert_eq!(
                            (r.launch.variant.tile_cols, r.launch.variant.stages),
                            (row_bytes / esz, stages)
                        );
                    }
                }
            }
        }
        // More row groups than workers (4 per SM), split without a cap.
        let mut c = case(ScalarType::F32, 40_001, 67, 10);
        c.offset = 3;
        let r = check(&b, &c, 41);
        assert!(r.zeroed && !r.launch.variant.aligned, "{r:?}");
        let c = case(ScalarType::F64, 40_001, 67, 3);
        let r = check(&b, &c, 42);
        assert!(r.zeroed && !r.launch.variant.aligned, "{r:?}");
    }

    #[test]
    fn labels_out_of_range_are_skipped() {
        let Some(b) = gpu() else { return };
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let mut c = case(dtype, 70, 301, 5);
            c.extra = 1000;
            check(&b, &c, 21);
            let mut c = case(dtype, 70, 300, 1000);
            c.extra = u32::MAX - 1000;
            check(&b, &c, 22);
        }
    }

    #[test]
    fn every_variant_and_split_row_groups() {
        let Some(b) = gpu() else { return };
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let esz = dtype.size_bytes() as u32;
            for row_bytes in [64u32, 128, 256, 512] {
                for stages in 2..=4 {
                    let mut c = case(dtype, 97, 1000, 13);
                    c.tile = Some((row_bytes / esz, stages));
                    check(&b, &c, u64::from(row_bytes + stages));
                }
            }
        }
        // More row groups than workers (4 per SM): row groups are split between workers and
        // added into a zeroed S.
        let c = case(ScalarType::F32, 40_000, 300, 10);
        let r = check(&b, &c, 31);
        assert!(r.zeroed && r.workers < 1250, "{r:?}");
        let c = case(ScalarType::F64, 40_001, 67, 3);
        let r = check(&b, &c, 32);
        assert!(r.zeroed, "{r:?}");
    }

    #[test]
    fn results_are_deterministic() {
        let Some(b) = gpu() else { return };
        // cols = 224 (896-byte rows, on cache lines): aligned rows; 201: strided rows. Both
        // split row groups between workers.
        for cols in [224, 201] {
            let (rows, k) = (50_000, 50);
            let mut rng = Rng(5);
            let m: Vec<f32> = (0..rows * cols).map(|_| rng.value() as f32).collect();
            let labels: Vec<u32> = (0..cols).map(|_| rng.below(k as u32)).collect();
            let mbuf = b.upload(HostSlice::F32(&m)).unwrap();
            let lbuf = b.upload(HostSlice::U32(&labels)).unwrap();
            let sbuf = b.alloc(ElemType::F32, rows * k).unwrap();
            let args = ClusterSumsArgs {
                dtype: ScalarType::F32,
                m: mbuf.device_ptr(),
                rows,
                cols,
                ld: cols,
                labels: lbuf.device_ptr(),
                k,
                s: sbuf.device_ptr(),
            };
            let mut first: Option<Vec<f32>> = None;
            for _ in 0..3 {
                b.fill(&sbuf, f64::NAN).unwrap();
                let report = launch_cluster_sums(&b, b.stream(), &args, None)
                    .unwrap()
                    .unwrap();
                assert_eq!(report.launch.variant.aligned, cols == 224);
                let HostVec::F32(got) = b.download(&sbuf).unwrap() else {
                    panic!("f32 expected")
                };
                match &first {
                    None => first = Some(got),
                    Some(f) => {
                        assert!(f.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()))
                    }
                }
            }
        }
    }

    #[test]
    fn empty_and_zero_column_problems() {
        let Some(b) = gpu() else { return };
        let lbuf = b.upload(HostSlice::U32(&[0])).unwrap();
        let mbuf = b.upload(HostSlice::F32(&[1.0])).unwrap();
        let sbuf = b.alloc(ElemType::F32, 12).unwrap();
        b.fill(&sbuf, f64::NAN).unwrap();
        let args = ClusterSumsArgs {
            dtype: ScalarType::F32,
            m: mbuf.device_ptr(),
            rows: 3,
            cols: 0,
            ld: 0,
            labels: lbuf.device_ptr(),
            k: 4,
            s: sbuf.device_ptr(),
        };
        assert!(launch_cluster_sums(&b, b.stream(), &args, None)
            .unwrap()
            .is_none());
        assert_eq!(b.download(&sbuf).unwrap().to_f64(), vec![0.0; 12]);
        let none = ClusterSumsArgs { rows: 0, ..args };
        assert!(launch_cluster_sums(&b, b.stream(), &none, None)
            .unwrap()
            .is_none());
        let bad = ClusterSumsArgs {
            cols: 2,
            ld: 1,
            ..args
        };
        assert!(launch_cluster_sums(&b, b.stream(), &bad, None).is_err());
        // Labels are u32: 2^32 clusters or more are refused before anything is launched.
        let huge = ClusterSumsArgs {
            cols: 1,
            ld: 1,
            k: 1 << 32,
            ..args
        };
        let e = launch_cluster_sums(&b, b.stream(), &huge, None).unwrap_err();
        assert!(e.to_string().contains("2^32"), "{e}");
    }

    // -----------------------------------------------------------------------------------------
    // Benchmark: `cargo test --release -p popcorn-runtime cluster_sums::tests::bench -- --ignored
    // --nocapture`, sizes from CS_BENCH_N (e.g. "50000,60000"), CS_BENCH_K ("10,50,100"),
    // forced tiles CS_BENCH_TILES ("64x3,64x2,128x2", for k <= CS_BENCH_TILE_MAX_K, 100) beside
    // the automatic choice, CS_BENCH_REPS (20), CS_BENCH_OUT (a file for the table),
    // CS_BENCH_OFFSET (0; the kernel rows alone start this many elements into K's rows and have
    // that many fewer columns, e.g. 1 to time strided rows at an even n), CS_BENCH_PERIODS
    // (strided rows this many apart, e.g. "2,32", beside the automatic period), CS_BENCH_LD_PAD
    // (e.g. 32: also time a copy of K whose rows are padded to a multiple of that many elements),
    // CS_BENCH_WORKERS (e.g. "396,528": also time the automatic kernel with at most that many
    // workers).

    const FILL_RANDOM: &str = r#"
extern "C" __global__ void pk_bench_fill_random(const long long len, float* __restrict__ out, const unsigned long long seed)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
        unsigned long long x = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;
        x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
        out[i] = (float)((x >> 40) * (1.0 / 16777216.0));
    }
}
"#;

    const READ_ALL: &str = r#"
extern "C" __global__ void pk_bench_read_all(const long long len4, const float4* __restrict__ in, float* __restrict__ out)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < len4; i += 4 * stride) {
        const float4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
        acc += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
    }
    for (; i < len4; i += stride) {
        const float4 a = in[i];
        acc += a.x + a.y + a.z + a.w;
    }
    if (acc == -1.0f) {
        out[0] = acc;
    }
}
"#;

    fn env_list(name: &str, default: &str) -> Vec<String> {
        std::env::var(name)
            .unwrap_or_else(|_| default.to_string())
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The numbers of a comma-separated environment variable (entries that do not parse are
    /// left out).
    fn env_numbers<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
        env_list(name, default)
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }

    /// One number from the environment, or `default`.
    fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// Median milliseconds of `reps` runs of `f` (after two warm-ups), timed with events.
    fn time_ms(b: &CudaBackend, reps: usize, mut f: impl FnMut()) -> f64 {
        f();
        f();
        b.synchronize().unwrap();
        let mut times = Vec::new();
        for _ in 0..reps {
            let start = b.mark().unwrap();
            f();
            let end = b.mark().unwrap();
            times.push(b.elapsed_ms(&start, &end).unwrap());
        }
        median(times)
    }

    #[test]
    #[ignore = "benchmark: needs a large GPU"]
    fn bench() {
        use crate::executor::{execute, Workspace};
        use popcorn_dsl::{DimBindings, PlannerConfig, Program, ScalarBindings};
        use std::collections::{BTreeMap, HashMap};
        use std::fmt::Write as _;

        let Some(b) = gpu_with(false) else { return };
        let reps: usize = env_number("CS_BENCH_REPS", 20);
        let ns: Vec<usize> = env_numbers("CS_BENCH_N", "60000");
        let ks: Vec<usize> = env_numbers("CS_BENCH_K", "10,50,100");
        let tiles: Vec<(u32, u32)> = env_list("CS_BENCH_TILES", "64x3")
            .iter()
            .filter_map(|s| {
                let (a, c) = s.split_once('x')?;
                Some((a.parse().ok()?, c.parse().ok()?))
            })
            .collect();
        let periods: Vec<u32> = env_numbers("CS_BENCH_PERIODS", "");
        let worker_caps: Vec<u64> = env_numbers("CS_BENCH_WORKERS", "");
        let pad: usize = env_number("CS_BENCH_LD_PAD", 0);
        let offset: usize = env_number("CS_BENCH_OFFSET", 0);
        let tile_max_k: usize = env_number("CS_BENCH_TILE_MAX_K", 100);
        let program = Program::parse(
            "fn f(K: Dense[n, n], labels: Index[n]) -> (E: Dense[n, k]) { E = -2 * K * selection(labels, k)^T; }",
        )
        .unwrap();
        let fill = b
            .kernel("pk_bench_fill_random", || FILL_RANDOM.to_string())
            .unwrap();
        let read = b
            .kernel("pk_bench_read_all", || READ_ALL.to_string())
            .unwrap();
        let mut table = String::new();
        let mut printed = 0;
        let _ = writeln!(table, "device: {}", b.describe());
        let _ = writeln!(
            table,
            "{:>6} {:>5} {:<22} {:>9} {:>8} {:>7} {:>9}",
            "n", "k", "what", "ms", "GB/s", "/floor", "/cusparse"
        );
        for &n in &ns {
            let bytes = n * n * 4;
            let k_buf = match b.alloc(ElemType::F32, n * n) {
                Ok(x) => x,
                Err(e) => {
                    let _ = writeln!(table, "n = {n}: {e}");
                    continue;
                }
            };
            let scratch = b.alloc(ElemType::F32, 1).unwrap();
            let grid = kernels_gen::builtins::linear_grid_block((n * n) as u64);
            let mut fill_args = [
                KernelArg::size(n * n).unwrap(),
                KernelArg::Ptr(k_buf.device_ptr()),
                KernelArg::I64(12345),
            ];
            launch(b.stream(), &fill, "fill", grid, &mut fill_args).unwrap();
            // The floor: a device-to-device copy of the first half of K onto the second half moves
            // 4 n^2 bytes (2 n^2 read, 2 n^2 written): its time is K's bytes at copy bandwidth.
            // Halves rounded down to 4 KiB, so both start aligned; the time is scaled to K's bytes.
            let half = (bytes / 2) & !4095;
            let src = k_buf.device_ptr();
            let copy_ms = time_ms(&b, reps, || {
                // SAFETY: both halves lie inside K's allocation and do not overlap.
                unsafe {
                    cudarc::driver::result::memcpy_dtod_async(
                        src + half as u64,
                        src,
                        half,
                        b.stream().cu_stream(),
                    )
                }
                .unwrap();
            });
            let floor = copy_ms * bytes as f64 / (2 * half) as f64;
            let copy_bw = (2 * half) as f64 / copy_ms / 1e6;
            launch(b.stream(), &fill, "fill", grid, &mut fill_args).unwrap();
            let read_ms = time_ms(&b, reps, || {
                let mut a = [
                    KernelArg::size(n * n / 4).unwrap(),
                    KernelArg::Ptr(src),
                    KernelArg::Ptr(scratch.device_ptr()),
                ];
                launch(
                    b.stream(),
                    &read,
                    "read",
                    ((132 * 8, 1, 1), (512, 1, 1), 0),
                    &mut a,
                )
                .unwrap();
            });
            let _ = writeln!(
                table,
                "{n:>6} {:>5} {:<22} {floor:>9.3} {copy_bw:>8.0} {:>7.3} {:>9}",
                "-", "d2d copy (floor)", 1.0, ""
            );
            let _ = writeln!(
                table,
                "{n:>6} {:>5} {:<22} {read_ms:>9.3} {:>8.0} {:>7.3} {:>9}",
                "-",
                "read-only kernel",
                bytes as f64 / read_ms / 1e6,
                read_ms / floor,
                ""
            );
            // A copy of K's shape with rows padded to `pad` elements, filled alike.
            let padded = (pad > 0).then(|| {
                let ldp = n.div_ceil(pad) * pad;
                let buf = b.alloc(ElemType::F32, n * ldp).unwrap();
                let mut a = [
                    KernelArg::size(n * ldp).unwrap(),
                    KernelArg::Ptr(buf.device_ptr()),
                    KernelArg::I64(12345),
                ];
                let grid = kernels_gen::builtins::linear_grid_block((n * ldp) as u64);
                launch(b.stream(), &fill, "fill", grid, &mut a).unwrap();
                (ldp, buf)
            });
            let mut rng = Rng(n as u64);
            for &k in &ks {
                let labels: Vec<u32> = (0..n).map(|_| rng.below(k as u32)).collect();
                let l_buf = b.upload(HostSlice::U32(&labels)).unwrap();
                let dims: DimBindings = [("n".to_string(), n), ("k".to_string(), k)]
                    .into_iter()
                    .collect();
                let run_plan = |max_k: usize, e: &CudaBuffer| -> f64 {
                    let config = PlannerConfig {
                        cluster_sums_max_k: max_k,
                        ..PlannerConfig::default()
                    };
                    let plan =
                        popcorn_dsl::plan(&program, &dims, &config, &BTreeMap::new()).unwrap();
                    let ws = Workspace::allocate(&b, &plan).unwrap();
                    let inputs: HashMap<String, Arg<'_, CudaBuffer>> = [
                        (
                            "K".to_string(),
                            Arg::Dense {
                                buf: &k_buf,
                                rows: n,
                                cols: n,
                            },
                        ),
                        (
                            "labels".to_string(),
                            Arg::Index {
                                buf: &l_buf,
                                len: n,
                            },
                        ),
                    ]
                    .into_iter()
                    .collect();
                    let outputs: HashMap<String, Arg<'_, CudaBuffer>> = [(
                        "E".to_string(),
                        Arg::Dense {
                            buf: e,
                            rows: n,
                            cols: k,
                        },
                    )]
                    .into_iter()
                    .collect();
                    time_ms(&b, reps, || {
                        execute(
                            &b,
                            &plan,
                            &ws,
                            &inputs,
                            &outputs,
                            &ScalarBindings::new(),
                            &dims,
                        )
                        .unwrap();
                    })
                };
                let e_sparse = b.alloc(ElemType::F32, n * k).unwrap();
                let e_sums = b.alloc(ElemType::F32, n * k).unwrap();
                b.fill(&e_sparse, f64::NAN).unwrap();
                b.fill(&e_sums, f64::NAN).unwrap();
                let sparse_ms = run_plan(0, &e_sparse);
                let sums_plan_ms = run_plan(1024, &e_sums);
                let got = b.download(&e_sums).unwrap().to_f64();
                let want = b.download(&e_sparse).unwrap().to_f64();
                let (mut num, mut den) = (0.0f64, 0.0f64);
                for (g, w) in got.iter().zip(&want) {
                    num += (g - w) * (g - w);
                    den += w * w;
                }
                let rel = if got.iter().all(|v| v.is_finite()) {
                    (num / den).sqrt()
                } else {
                    f64::NAN
                };
                let s_buf = b.alloc(ElemType::F32, n * k).unwrap();
                let args = ClusterSumsArgs {
                    dtype: ScalarType::F32,
                    m: src + 4 * offset.min(n - 1) as u64,
                    rows: n,
                    cols: n - offset.min(n - 1),
                    ld: n,
                    labels: l_buf.device_ptr(),
                    k,
                    s: s_buf.device_ptr(),
                };
                let row = |table: &mut String, what: &str, ms: f64| {
                    let _ = writeln!(
                        table,
                        "{n:>6} {k:>5} {what:<22} {ms:>9.3} {:>8.0} {:>7.3} {:>9.3}",
                        bytes as f64 / ms / 1e6,
                        ms / floor,
                        ms / sparse_ms
                    );
                };
                row(&mut table, "cusparse plan", sparse_ms);
                row(&mut table, "cluster-sums plan", sums_plan_ms);
                let forced = tiles.iter().filter(|_| k <= tile_max_k).map(|t| Some(*t));
                for tile in std::iter::once(None).chain(forced) {
                    let mut report = None;
                    let ms = time_ms(&b, reps, || {
                        report = launch_cluster_sums(&b, b.stream(), &args, tile).unwrap();
                    });
                    let what = match report {
                        Some(r) => format!(
                            "kernel {}{}x{}{} w{} {}p",
                            if tile.is_none() { "auto " } else { "" },
                            r.launch.variant.tile_cols,
                            r.launch.variant.stages,
                            if r.launch.variant.aligned { "a" } else { "r" },
                            r.workers,
                            r.launch.passes()
                        ),
                        None => "kernel (nothing)".to_string(),
                    };
                    row(&mut table, &what, ms);
                }
                for &w in &worker_caps {
                    let mut report = None;
                    let ms = time_ms(&b, reps, || {
                        report =
                            launch_cluster_sums_with(&b, b.stream(), &args, None, Some(w), None)
                                .unwrap();
                    });
                    let got = report.map_or(0, |r| r.workers);
                    row(&mut table, &format!("kernel {got} workers"), ms);
                }
                for &p in &periods {
                    let ms = time_ms(&b, reps, || {
                        launch_cluster_sums_with(&b, b.stream(), &args, None, None, Some(p))
                            .unwrap();
                    });
                    row(&mut table, &format!("kernel rows {p} apart"), ms);
                }
                if let Some((ldp, padded)) = &padded {
                    let padded_args = ClusterSumsArgs {
                        m: padded.device_ptr(),
                        cols: n,
                        ld: *ldp,
                        ..args
                    };
                    let mut report = None;
                    let ms = time_ms(&b, reps, || {
                        report = launch_cluster_sums(&b, b.stream(), &padded_args, None).unwrap();
                    });
                    let mode =
                        report.map_or("-", |r| if r.launch.variant.aligned { "a" } else { "r" });
                    row(&mut table, &format!("kernel ld {ldp} ({mode})"), ms);
                }
                let _ = writeln!(
                    table,
                    "{n:>6} {k:>5} plan results: |E_sums - E_cusparse| / |E_cusparse| = {rel:.2e}"
                );
                print!("{}", &table[printed..]);
                printed = table.len();
            }
        }
        print!("{}", &table[printed..]);
        if let Ok(path) = std::env::var("CS_BENCH_OUT") {
            let _ = std::fs::write(path, &table);
        }
    }
}
