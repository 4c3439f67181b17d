//! `Builtin::ClusterSums`: `S[i, c] = sum over j with labels[j] == c of M[i, j]`, one
//! streaming pass over `M` with kernels-gen's [`kernels_gen::cluster_sums`] kernel.
//!
//! This unit checks the step's arguments, picks the kernel variant and its passes
//! ([`plan_cluster_sums`]) for the device's shared-memory limits, sizes the persistent grid
//! from the driver's occupancy calculator, zeroes `S` when a row group is split between two
//! workers, and launches one kernel per pass on the lane's stream. Labels `>= k` are skipped
//! (they never touch memory outside `S`'s rows); the CPU backend reports them as an error
//! instead. The result is deterministic on a given device (see the kernel's documentation for
//! the order of summation).

use super::{Io, StepCx};
use crate::backend::ElemType;
use crate::cuda::args::{count, dense, index, shape};
use crate::cuda::device::Device;
use crate::cuda::driver::{self, KernelArg};
use crate::cuda::errors::{driver_error, invalid};
use crate::error::RuntimeError;
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::CudaStream;
use kernel_ir::{Half, ScalarType};
use kernels_gen::cluster_sums::tensor_cores::{
    plan_tensor_core_sums, MAX_CLUSTER_TILES, MAX_TEAM, PREFERRED_MAX_CLUSTER_TILES,
};
use kernels_gen::cluster_sums::{
    cluster_sums, plan_cluster_sums, ClusterSumsLaunch, ClusterSumsVariant, BLOCK_BYTES, LINE_BYTES,
};

/// One cluster-sums problem in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterSumsArgs {
    /// Element type of `S` (and of `M`, unless `held`).
    pub dtype: ScalarType,
    /// The 16-bit format `M` is held in (with `dtype` f32), or `None` for `M` in `dtype`.
    pub held: Option<Half>,
    /// Address of `M` (row-major).
    pub m: u64,
    /// Rows of `M` and `S`.
    pub rows: usize,
    /// Columns of `M` (and labels).
    pub cols: usize,
    /// Leading dimension of `M`, elements (`>= cols`).
    pub ld: usize,
    /// Address of `cols` `u32` labels.
    pub labels: u64,
    /// Number of clusters: columns of `S`.
    pub k: usize,
    /// Address of `S` (row-major `rows x k`).
    pub s: u64,
}

/// Choices the planner of the launch makes by itself, which tests and benchmarks can force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterSumsTuning {
    /// A tile width and pipeline depth, `(tile_cols, stages)`.
    pub tile: Option<(u32, u32)>,
    /// At most this many workers (tests use it to split row groups between workers on small
    /// problems).
    pub max_workers: Option<u64>,
    /// Strided rows this many rows apart instead of the leading dimension's period (it must be
    /// a multiple of that period).
    pub row_period: Option<u32>,
    /// This many streaming workers per multiprocessor instead of the variant's own number.
    pub warps_per_sm: Option<u32>,
    /// The tensor-core kernel (`Some(true)`, for `k <= 128`) or the bins kernel (`Some(false)`)
    /// for a matrix held in 16 bits, instead of the device's choice (tensor cores where the
    /// device has them and `POPCORN_NO_TENSOR_CORE_SUMS` is unset, for `k <= 128` in teams and
    /// `k <= 64` with one warp a block). Ignored for other matrices.
    pub tensor_cores: Option<bool>,
    /// Warps per block for the tensor-core kernel (a team sharing each worker's tiles, see
    /// [`ClusterSumsVariant::team`]) instead of the device's choice (four where they fit; one
    /// with `max_workers` or `warps_per_sm`, or where `POPCORN_NO_SUMS_TEAMS` is set). Not
    /// used by the bins kernel, but checked: 1 to 8, and 1 with `max_workers`.
    pub team: Option<u32>,
    /// Strided tiles on blocks of this many bytes (`LINE_BYTES` or `BLOCK_BYTES`) instead of
    /// the size's choice ([`ClusterSumsVariant::layout`]); a matrix whose rows are on 512-byte
    /// blocks stays aligned.
    pub block_bytes: Option<u32>,
}

/// What a launch did (for benchmarks and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterSumsReport {
    /// Kernel, clusters per pass and shared memory.
    pub launch: ClusterSumsLaunch,
    /// Workers (blocks of [`ClusterSumsVariant::team`] warps) launched per pass.
    pub workers: u64,
    /// Resident blocks per multiprocessor the occupancy calculator allowed.
    pub blocks_per_sm: u32,
    /// Whether `S` was zeroed first.
    pub zeroed: bool,
}

/// Runs a cluster-sums step: inputs `(M, labels)`, output `S` (`rows(M) x k`).
pub(crate) fn run(
    cx: &StepCx<'_>,
    k: usize,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("cluster sums", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let held = inputs[0].held();
    let m_elem = held.map_or(elem, ElemType::Half);
    let m = dense(&inputs[0], m_elem, "cluster sums input M")?;
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
        dtype: cx.scalar(),
        held,
        m: m.ptr,
        rows: m.rows,
        cols: m.cols,
        ld: m.cols,
        labels,
        k,
        s: s.ptr,
    };
    // SAFETY: M holds `rows x cols` elements of its type, the labels `cols` entries and S
    // `rows x k` elements of the plan's type (checked above); all are buffers of this device.
    unsafe { launch_cluster_sums(cx.device, cx.stream, &args, ClusterSumsTuning::default()) }
        .map(|_| ())
}

/// Computes `S` for `args` on `stream`, with the launch's choices made by the kernel's planner
/// except where `tuning` forces them. `None` when there is nothing to launch.
///
/// # Safety
/// `args.m` holds `rows` rows of `ld` elements (the last `cols` long) of `args.held` (else of
/// `args.dtype`), `args.labels` `cols` `u32` labels and `args.s` `rows x k` elements of
/// `args.dtype`, on this device.
pub(crate) unsafe fn launch_cluster_sums(
    device: &Device,
    stream: &CudaStream,
    args: &ClusterSumsArgs,
    tuning: ClusterSumsTuning,
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
        // SAFETY: S holds `rows x k` elements, as the contract says.
        unsafe { driver::memset32(stream, args.s, 0, args.rows * args.k * esz / 4)? };
        return Ok(None);
    }
    if args.held.is_some() && args.dtype != ScalarType::F32 {
        return Err(invalid(
            "cluster sums: a matrix held in 16 bits is summed in f32 only".to_string(),
        ));
    }
    let m_esz = args.held.map_or(esz, |_| 2);
    if !args.m.is_multiple_of(m_esz as u64) {
        return Err(invalid(format!(
            "cluster sums: the matrix address {:#x} is not aligned to its {m_esz}-byte elements",
            args.m
        )));
    }
    if let Some(b) = tuning.block_bytes {
        if b != LINE_BYTES && b != BLOCK_BYTES {
            return Err(invalid(format!(
                "cluster sums: strided tiles on {b}-byte blocks; use {LINE_BYTES} or {BLOCK_BYTES}"
            )));
        }
    }
    let (aligned, block_bytes) = ClusterSumsVariant::layout(
        args.dtype,
        args.held,
        args.m,
        args.ld as u64,
        args.rows as u64,
        tuning.block_bytes,
    );
    let forced = match tuning.tile {
        Some((tile_cols, stages)) => Some(
            ClusterSumsVariant::new(args.dtype, args.held, tile_cols, stages, aligned)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        None => None,
    };
    let limits = &device.limits;
    let (team, max_tiles) =
        tensor_core_choice(&tuning, device.tensor_core_sums, device.sums_teams)?;
    let tensor_core_plan = args.held.and_then(|held| {
        let plan = |team| {
            plan_tensor_core_sums(
                args.k as u64,
                held,
                aligned,
                tuning.tile,
                team,
                max_tiles,
                limits,
            )
        };
        // Forced tensor cores where the launcher's team does not fit: one warp a block.
        let forced = tuning.tensor_cores == Some(true) && team.is_none();
        plan(team).or_else(|| forced.then(|| plan(Some(1))).flatten())
    });
    let mut plan = match tensor_core_plan {
        Some(plan) => plan,
        None => plan_cluster_sums(
            args.k as u64,
            args.dtype,
            args.held,
            aligned,
            forced,
            limits,
        ),
    }
    .map_err(|e| RuntimeError::Device(e.to_string()))?;
    plan.variant = plan
        .variant
        .with_blocks(block_bytes)
        .with_leading_dimension(args.ld as u64);
    if let (Some(p), false) = (tuning.row_period, plan.variant.aligned) {
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
    let function = device
        .kernels
        .function(&name, || cluster_sums(&variant).source)?;
    let shared = plan.shared_bytes;
    device.allow_opt_in_shared(&function, u64::from(shared), &|| {
        format!("the cluster sums kernel {name}")
    })?;
    // All of the unified L1/shared storage as shared memory: the kernel reads M through
    // cp.async into shared memory and needs L1 for nothing else.
    function
        .set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            100,
        )
        .map_err(|e| driver_error("cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)", e))?;
    let occupancy = function
        .occupancy_max_active_blocks_per_multiprocessor(
            plan.variant.threads_per_block(),
            shared as usize,
            None,
        )
        .map_err(|e| driver_error("cuOccupancyMaxActiveBlocksPerMultiprocessor", e))?;
    let blocks_per_sm = occupancy.min(limits.blocks_per_sm(u64::from(shared)));
    if blocks_per_sm == 0 {
        return Err(RuntimeError::Device(format!(
            "cluster sums: kernel {name} with {shared} bytes of shared memory cannot run on this device"
        )));
    }
    let resident = u64::from(limits.multiprocessors.max(1)) * u64::from(blocks_per_sm);
    let resident = tuning.max_workers.map_or(resident, |cap| resident.min(cap));
    let workers = plan.workers_per_sm(
        args.rows as u64,
        args.cols as u64,
        resident,
        u64::from(limits.multiprocessors),
        tuning
            .warps_per_sm
            .unwrap_or_else(|| plan.variant.streaming_warps_per_sm()),
    );
    let zeroed = plan.needs_zeroed_output(args.rows as u64, workers);
    if zeroed {
        // SAFETY: S holds `rows x k` elements, as the contract says.
        unsafe { driver::memset32(stream, args.s, 0, args.rows * args.k * esz / 4)? };
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
        // SAFETY: the arguments follow the kernel's parameter list; M, the labels and S hold
        // what it reads and writes, as the contract says.
        unsafe { driver::launch(stream, &function, &name, dims, &mut kargs)? };
    }
    Ok(Some(ClusterSumsReport {
        launch: plan,
        workers,
        blocks_per_sm,
        zeroed,
    }))
}

/// The team (`None`: the launcher's choice) and the most tiles of 8 clusters the tensor-core
/// kernel may take, from `tuning` and the device's settings: forced tensor cores take up to
/// [`MAX_CLUSTER_TILES`]; the device's choice as many in teams, and in one warp per block
/// (asked for, or where `POPCORN_NO_SUMS_TEAMS` is set, a cap on the workers or on the warps
/// per SM is given, which are knobs of one-warp workers) up to [`PREFERRED_MAX_CLUSTER_TILES`],
/// the bins kernel above.
fn tensor_core_choice(
    tuning: &ClusterSumsTuning,
    tensor_core_sums: bool,
    sums_teams: bool,
) -> Result<(Option<u32>, u32), RuntimeError> {
    if let Some(team) = tuning.team {
        if team == 0 || team > MAX_TEAM {
            return Err(invalid(format!(
                "cluster sums: a team of {team} warps; use 1 to {MAX_TEAM}"
            )));
        }
        if team > 1 && tuning.max_workers.is_some() {
            return Err(invalid(format!(
                "cluster sums: a team of {team} warps takes one or two blocks per row group; a cap on the workers is for one warp per block"
            )));
        }
    }
    let one_warp = tuning.max_workers.is_some() || tuning.warps_per_sm.is_some() || !sums_teams;
    let team = tuning.team.or(one_warp.then_some(1));
    let max_tiles = match tuning.tensor_cores {
        Some(true) => MAX_CLUSTER_TILES,
        Some(false) => 0,
        None if !tensor_core_sums => 0,
        None if team == Some(1) => PREFERRED_MAX_CLUSTER_TILES,
        None => MAX_CLUSTER_TILES,
    };
    Ok((team, max_tiles))
}

fn as_i64(v: u64) -> Result<i64, RuntimeError> {
    i64::try_from(v).map_err(|_| invalid(format!("cluster sums: {v} does not fit in 64-bit sizes")))
}

#[cfg(test)]
mod tests {
    //! GPU tests against a naive f64 loop. Without a CUDA device the tests print a notice and
    //! pass, unless `POPCORN_REQUIRE_GPU` is set.

    use super::*;
    use crate::backend::{Backend, ElemType, HostSlice, HostVec};
    use crate::cuda::{cuda_available, CudaBackend, CudaConfig};

    /// A backend with its kernel cache in a temporary directory, or `None` without a GPU.
    fn gpu() -> Option<CudaBackend> {
        let why = match cuda_available() {
            Ok(_) => {
                let config = CudaConfig {
                    allow_tf32: false,
                    cache_dir: Some(
                        std::env::temp_dir()
                            .join(format!("popcorn-cluster-sums-tests-{}", std::process::id())),
                    ),
                    dump_dir: None,
                    log_cache: false,
                    round_tf32_operands: true,
                    warp_specialised_contractions: true,
                    tensor_core_sums: true,
                    sums_teams: true,
                };
                match CudaBackend::with_config(0, config) {
                    Ok(b) => return Some(b),
                    Err(e) => e.to_string(),
                }
            }
            Err(why) => why,
        };
        if popcorn_dsl::settings::settings().require_gpu {
            panic!("POPCORN_REQUIRE_GPU is set but the CUDA backend is unusable: {why}");
        }
        eprintln!("skipping GPU test: {why}");
        None
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

    #[derive(Debug)]
    struct Case {
        dtype: ScalarType,
        /// M held in 16 bits.
        held: Option<Half>,
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
        /// The tensor-core or the bins kernel for M held in 16 bits (None: the device's choice).
        tensor_cores: Option<bool>,
        /// Warps per block of the tensor-core kernel (a team), or the device's choice.
        team: Option<u32>,
        /// Strided tiles on blocks of this many bytes, or the size's choice.
        blocks: Option<u32>,
    }

    fn case(dtype: ScalarType, rows: usize, cols: usize, k: usize) -> Case {
        Case {
            dtype,
            held: None,
            rows,
            cols,
            ld: cols,
            k,
            extra: 0,
            tile: None,
            offset: 0,
            workers: None,
            tensor_cores: None,
            team: None,
            blocks: None,
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
        let mesz = c.held.map_or(c.dtype.size_bytes(), |_| 2);
        let padded = total.max(1).next_multiple_of(16 / mesz);
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
        let bits: Vec<u16> = c.held.map_or_else(Vec::new, |h| {
            m32.iter()
                .map(|v| crate::backend::to_half_bits(h, *v))
                .collect()
        });
        // Reference on the values the GPU sees (rounded to f32 where it computes in f32, and
        // to 16 bits where M is held so).
        let seen: Vec<f64> = match (c.held, c.dtype) {
            (Some(h), _) => bits
                .iter()
                .map(|x| f64::from(crate::backend::from_half_bits(h, *x)))
                .collect(),
            (None, ScalarType::F32) => m32.iter().map(|v| f64::from(*v)).collect(),
            (None, ScalarType::F64) => m.clone(),
        };
        let mbuf = match (c.held, c.dtype) {
            (Some(h), _) => b.upload(HostSlice::Half(h, &bits)),
            (None, ScalarType::F32) => b.upload(HostSlice::F32(&m32)),
            (None, ScalarType::F64) => b.upload(HostSlice::F64(&m)),
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
            held: c.held,
            m: mbuf.device_ptr() + (c.offset * mesz) as u64,
            rows: c.rows,
            cols: c.cols,
            ld: c.ld,
            labels: lbuf.device_ptr(),
            k: c.k,
            s: sbuf.device_ptr() + (guard * c.dtype.size_bytes()) as u64,
        };
        let report = unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &args,
                ClusterSumsTuning {
                    tile: c.tile,
                    max_workers: c.workers,
                    row_period: None,
                    warps_per_sm: None,
                    tensor_cores: c.tensor_cores,
                    team: c.team,
                    block_bytes: c.blocks,
                },
            )
        }
        .unwrap();
        b.synchronize().unwrap();
        let all = b.download(&sbuf).unwrap().to_f64();
        // Deterministic: a second launch gives the same bits (split row groups have two
        // partial sums, added into zero in either order).
        unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &args,
                ClusterSumsTuning {
                    tile: c.tile,
                    max_workers: c.workers,
                    row_period: None,
                    warps_per_sm: None,
                    tensor_cores: c.tensor_cores,
                    team: c.team,
                    block_bytes: c.blocks,
                },
            )
        }
        .unwrap();
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
            "{:?} held {:?} {}x{} ld {} k {} extra {} tile {:?} offset {} workers {:?} tensor cores {:?}",
            c.dtype, c.held, c.rows, c.cols, c.ld, c.k, c.extra, c.tile, c.offset, c.workers, c.tensor_cores
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
        let (aligned, blocks) = ClusterSumsVariant::layout(
            c.dtype,
            c.held,
            args.m,
            c.ld as u64,
            c.rows as u64,
            c.blocks,
        );
        assert_eq!(report.launch.variant.aligned, aligned, "{what}: row mode");
        if !aligned {
            assert_eq!(report.launch.variant.block_bytes, blocks, "{what}: blocks");
        }
        if let Some(cap) = c.workers {
            assert!(report.workers <= cap, "{what}: {report:?}");
        }
        if let (Some(wanted), Some(_)) = (c.tensor_cores, c.held) {
            assert_eq!(
                report.launch.variant.tensor_core_tiles > 0,
                wanted && c.k <= 128,
                "{what}: {report:?}"
            );
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

    /// M held in bf16 or fp16 (8 elements per 16-byte vector), on the bins kernel and on the
    /// tensor-core one (k <= 128): odd sizes, cluster counts, both row modes (odd leading
    /// dimensions and offsets: strided, whose first tiles start in NaN padding), forced tiles,
    /// split row groups, labels out of range; sums in f32 of the widened values.
    #[test]
    fn sixteen_bit_matrices_match_naive_sums_of_their_values() {
        let Some(b) = gpu() else { return };
        let mut seed = 5000;
        for (half, tensor_cores) in [
            (Half::Bf16, false),
            (Half::F16, false),
            (Half::Bf16, true),
            (Half::F16, true),
        ] {
            for &(rows, cols) in &[(1, 1), (1, 9), (33, 65), (37, 1001), (64, 256), (300, 999)] {
                for k in [1, 7, 100, 1000] {
                    seed += 1;
                    let mut c = case(ScalarType::F32, rows, cols, k);
                    c.held = Some(half);
                    c.tensor_cores = Some(tensor_cores);
                    check(&b, &c, seed);
                }
            }
            for (ld_extra, offset, tile, workers) in [
                (3, 0, None, None),
                (0, 1, None, None),
                (64, 0, Some((32, 2)), None),
                (5, 3, Some((128, 3)), Some(7)),
                (0, 0, Some((256, 4)), Some(5)),
            ] {
                seed += 1;
                let mut c = case(ScalarType::F32, 131, 515, 13);
                c.held = Some(half);
                c.tensor_cores = Some(tensor_cores);
                c.ld = 515 + ld_extra;
                c.offset = offset;
                c.tile = tile;
                c.workers = workers;
                c.extra = 3;
                check(&b, &c, seed);
            }
        }
    }

    #[test]
    fn one_warp_blocks_keep_the_bins_kernel_above_64_clusters() {
        let t = ClusterSumsTuning::default();
        let choice = |t: &ClusterSumsTuning, tc, teams| tensor_core_choice(t, tc, teams).unwrap();
        assert_eq!(choice(&t, true, true), (None, MAX_CLUSTER_TILES));
        // POPCORN_NO_SUMS_TEAMS, a team of one, a cap on the workers or warps per SM.
        assert_eq!(
            choice(&t, true, false),
            (Some(1), PREFERRED_MAX_CLUSTER_TILES)
        );
        for one in [
            ClusterSumsTuning { team: Some(1), ..t },
            ClusterSumsTuning {
                max_workers: Some(7),
                ..t
            },
            ClusterSumsTuning {
                warps_per_sm: Some(6),
                ..t
            },
        ] {
            assert_eq!(
                choice(&one, true, true),
                (Some(1), PREFERRED_MAX_CLUSTER_TILES)
            );
            // Forced tensor cores take up to 128 clusters in one warp too.
            let forced = ClusterSumsTuning {
                tensor_cores: Some(true),
                ..one
            };
            assert_eq!(choice(&forced, true, true), (Some(1), MAX_CLUSTER_TILES));
        }
        assert_eq!(choice(&t, false, true).1, 0);
        let bins = ClusterSumsTuning {
            tensor_cores: Some(false),
            ..t
        };
        assert_eq!(choice(&bins, true, true).1, 0);
        let four = ClusterSumsTuning { team: Some(4), ..t };
        assert_eq!(choice(&four, true, true), (Some(4), MAX_CLUSTER_TILES));
        for bad in [
            ClusterSumsTuning { team: Some(0), ..t },
            ClusterSumsTuning { team: Some(9), ..t },
            ClusterSumsTuning {
                team: Some(4),
                max_workers: Some(7),
                ..t
            },
        ] {
            assert!(tensor_core_choice(&bad, true, true).is_err(), "{bad:?}");
        }
    }

    /// Teams of warps per block on the tensor-core kernel: each warp a share of its block's
    /// tiles (some warps none), their sums added in warp order. Odd sizes, both row modes,
    /// forced tiles (rings smaller than a warp's sums), one and two blocks per row group,
    /// labels out of range, k up to 128; against naive sums, and bit for bit on a second launch.
    #[test]
    fn teams_of_warps_match_naive_sums() {
        let Some(b) = gpu() else { return };
        let mut seed = 9000;
        for half in [Half::Bf16, Half::F16] {
            for team in [2u32, 4, 8] {
                for &(rows, cols, ld_extra, offset, tile) in &[
                    (1, 1, 0, 0, None),
                    (33, 65, 0, 0, None),
                    (37, 1001, 3, 1, None),
                    (300, 999, 0, 0, Some((32, 2))),
                    (64, 4096, 0, 0, None),
                    (131, 2000, 5, 3, Some((64, 3))),
                    (97, 5000, 0, 0, Some((128, 2))),
                    // Strided rows 4 and 8 apart: several super groups, one and two blocks
                    // per row group.
                    (131, 1000, 8, 0, None),
                    (600, 2000, 8, 0, None),
                ] {
                    for k in [1, 26, 100, 128] {
                        seed += 1;
                        let mut c = case(ScalarType::F32, rows, cols, k);
                        c.held = Some(half);
                        c.tensor_cores = Some(true);
                        c.team = Some(team);
                        c.ld = cols + ld_extra;
                        c.offset = offset;
                        c.tile = tile;
                        c.extra = 2;
                        let r = check(&b, &c, seed);
                        assert_eq!(r.launch.variant.team, team, "{c:?}: {r:?}");
                        let groups = r.launch.variant.row_groups(rows as u64);
                        assert!(
                            r.workers == groups || r.workers == 2 * groups,
                            "{c:?}: {r:?}"
                        );
                        assert_eq!(r.zeroed, r.workers != groups, "{c:?}: {r:?}");
                    }
                }
            }
        }
    }

    /// The speed of sums over a matrix held in bf16 by streaming workers per multiprocessor
    /// and tile, against the f32 kernel on the same shape (the numbers behind
    /// `MIN_WARPS_PER_SM_HELD`): `cargo test --release -p popcorn-runtime --lib
    /// sixteen_bit_speed -- --ignored --nocapture` on a GPU (about 40 GB of device memory).
    #[test]
    #[ignore]
    fn sixteen_bit_speed_by_workers_and_tiles() {
        let Some(b) = gpu() else { return };
        let time = |args: &ClusterSumsArgs, tuning: ClusterSumsTuning| {
            let run =
                || unsafe { launch_cluster_sums(b.device(), b.device().main(), args, tuning) };
            let report = run().unwrap().unwrap();
            let mut ms = Vec::new();
            for _ in 0..5 {
                let t0 = b.mark().unwrap();
                run().unwrap();
                let t1 = b.mark().unwrap();
                b.synchronize().unwrap();
                ms.push(b.elapsed_ms(&t0, &t1).unwrap());
            }
            ms.sort_by(f64::total_cmp);
            (ms[2], report)
        };
        for &n in &[50_000usize, 78_823] {
            let mut rng = Rng(7);
            let wide = b.alloc(ElemType::F32, n * n).unwrap();
            b.fill(&wide, 0.5).unwrap();
            let held = b.alloc(ElemType::Half(Half::Bf16), n * n).unwrap();
            b.fill(&held, 0.5).unwrap();
            for k in [10usize, 50, 100] {
                let labels: Vec<u32> = (0..n).map(|_| rng.below(k as u32)).collect();
                let lbuf = b.upload(HostSlice::U32(&labels)).unwrap();
                let sbuf = b.alloc(ElemType::F32, n * k).unwrap();
                let args = |m: &crate::cuda::CudaBuffer, held| ClusterSumsArgs {
                    dtype: ScalarType::F32,
                    held,
                    m: m.device_ptr(),
                    rows: n,
                    cols: n,
                    ld: n,
                    labels: lbuf.device_ptr(),
                    k,
                    s: sbuf.device_ptr(),
                };
                let (f32_ms, r) = time(&args(&wide, None), ClusterSumsTuning::default());
                println!(
                    "n {n} k {k} f32 {}: {f32_ms:.3} ms, {:.0} GB/s, {} workers",
                    r.launch.variant.name(),
                    (4 * n * n) as f64 / f32_ms / 1e6,
                    r.workers
                );
                for tile in [
                    None,
                    Some((256, 2)),
                    Some((128, 2)),
                    Some((128, 3)),
                    Some((64, 2)),
                ] {
                    for per_sm in [4, 6, 8, 12, 16] {
                        let tuning = ClusterSumsTuning {
                            tile,
                            warps_per_sm: Some(per_sm),
                            ..ClusterSumsTuning::default()
                        };
                        let (ms, r) = time(&args(&held, Some(Half::Bf16)), tuning);
                        println!(
                            "n {n} k {k} bf16 {} per_sm {per_sm}: {ms:.3} ms, {:.3} of f32, {} workers ({} resident/SM)",
                            r.launch.variant.name(),
                            ms / f32_ms,
                            r.workers,
                            r.blocks_per_sm
                        );
                    }
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
                                None,
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
                            c.blocks = Some(LINE_BYTES);
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

    /// The strided mode on 512-byte blocks (RA = 128 f32 or 64 f64 elements, the preferred
    /// tiles' whole rows), forced on small matrices: M at offsets up to RA - 1 (row 0's chunks
    /// before it zero-filled, not read), leading dimensions giving every period from 1 to RA
    /// (checked), rows that leave a partial last super group (only its row groups that hold
    /// a row are enumerated: 4097 rows, one whole super group of 4096 at period 128 and one
    /// row group of one row), cols around the tile width; and a matrix held in bf16 on tensor
    /// cores (tiles of 256 bytes, RA = 128) and on the bins kernel.
    #[test]
    fn strided_rows_on_512_byte_blocks() {
        let Some(b) = gpu() else { return };
        let mut seed = 3000;
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let esz = dtype.size_bytes();
            let ra = 512 / esz;
            let mut periods = std::collections::BTreeSet::new();
            for offset in [0, 1, 3, ra / 2 + 1, ra - 1] {
                for rows in [1, 129, 4097] {
                    for cols in [37, ra + 1, 300] {
                        for e in 0..=ra.trailing_zeros() {
                            // ld mod RA = RA / 2^e (0 for e = 0): period 2^e.
                            let ld = cols.div_ceil(ra) * ra + (ra >> e) % ra;
                            let on_blocks = ClusterSumsVariant::layout(
                                dtype,
                                None,
                                (offset * esz) as u64,
                                ld as u64,
                                rows as u64,
                                Some(BLOCK_BYTES),
                            )
                            .0;
                            if on_blocks {
                                continue;
                            }
                            seed += 1;
                            let k = [1, 7, 100][(seed as usize / 3) % 3];
                            let mut c = case(dtype, rows, cols, k);
                            c.ld = ld;
                            c.offset = offset;
                            c.extra = if seed % 2 == 0 { 3 } else { 0 };
                            c.blocks = Some(BLOCK_BYTES);
                            let r = check(&b, &c, seed);
                            let v = r.launch.variant;
                            assert!(!v.aligned, "{r:?}");
                            // (A narrower fallback tile where the bins of f64 at k = 100 leave
                            // too little room has a smaller RA: its periods are not counted.)
                            if v.row_alignment() as usize == ra {
                                periods.insert(v.row_period as usize);
                            }
                        }
                    }
                }
            }
            let every: std::collections::BTreeSet<usize> =
                (0..=ra.trailing_zeros()).map(|e| 1 << e).collect();
            assert_eq!(periods, every, "{dtype:?}");
        }
        for tensor_cores in [true, false] {
            for (rows, cols, ld, offset) in
                [(4097, 300, 301, 0), (129, 515, 515, 3), (1000, 37, 64, 5)]
            {
                seed += 1;
                let mut c = case(ScalarType::F32, rows, cols, 50);
                c.held = Some(Half::Bf16);
                c.ld = ld;
                c.offset = offset;
                c.extra = 2;
                c.tensor_cores = Some(tensor_cores);
                c.blocks = Some(BLOCK_BYTES);
                let r = check(&b, &c, seed);
                assert!(!r.launch.variant.aligned, "{r:?}");
            }
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
        // cols = 256 (1024-byte rows, on 512-byte blocks where the buffer is): aligned rows;
        // 200: strided rows on 512-byte blocks (period 16: 50,000 rows are 97 super groups of
        // 512). Both split row groups between workers.
        for cols in [256, 200] {
            let (rows, k) = (50_000, 50);
            let mut rng = Rng(5);
            let m: Vec<f32> = (0..rows * cols).map(|_| rng.value() as f32).collect();
            let labels: Vec<u32> = (0..cols).map(|_| rng.below(k as u32)).collect();
            let mbuf = b.upload(HostSlice::F32(&m)).unwrap();
            let lbuf = b.upload(HostSlice::U32(&labels)).unwrap();
            let sbuf = b.alloc(ElemType::F32, rows * k).unwrap();
            let args = ClusterSumsArgs {
                held: None,
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
                let report = unsafe {
                    launch_cluster_sums(
                        b.device(),
                        b.device().main(),
                        &args,
                        ClusterSumsTuning::default(),
                    )
                }
                .unwrap()
                .unwrap();
                let (aligned, blocks) = ClusterSumsVariant::layout(
                    ScalarType::F32,
                    None,
                    args.m,
                    cols as u64,
                    rows as u64,
                    None,
                );
                assert_eq!(report.launch.variant.aligned, aligned);
                if cols == 200 {
                    assert_eq!((aligned, blocks), (false, BLOCK_BYTES));
                    assert_eq!(report.launch.variant.block_bytes, BLOCK_BYTES);
                }
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
            held: None,
            dtype: ScalarType::F32,
            m: mbuf.device_ptr(),
            rows: 3,
            cols: 0,
            ld: 0,
            labels: lbuf.device_ptr(),
            k: 4,
            s: sbuf.device_ptr(),
        };
        assert!(unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &args,
                ClusterSumsTuning::default(),
            )
        }
        .unwrap()
        .is_none());
        assert_eq!(b.download(&sbuf).unwrap().to_f64(), vec![0.0; 12]);
        let none = ClusterSumsArgs { rows: 0, ..args };
        assert!(unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &none,
                ClusterSumsTuning::default(),
            )
        }
        .unwrap()
        .is_none());
        let bad = ClusterSumsArgs {
            cols: 2,
            ld: 1,
            ..args
        };
        assert!(unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &bad,
                ClusterSumsTuning::default(),
            )
        }
        .is_err());
        // Labels are u32: 2^32 clusters or more are refused before anything is launched.
        let huge = ClusterSumsArgs {
            cols: 1,
            ld: 1,
            k: 1 << 32,
            ..args
        };
        let e = unsafe {
            launch_cluster_sums(
                b.device(),
                b.device().main(),
                &huge,
                ClusterSumsTuning::default(),
            )
        }
        .unwrap_err();
        assert!(e.to_string().contains("2^32"), "{e}");
    }
}
