//! The cluster-sums kernel alone (the distance step of stored-K Kernel K-means): its time over
//! a random `n x n` K against the K-read floor (a device copy moving K's bytes), a read-only
//! kernel, the whole `-2 * K * selection(labels, k)^T` plan with cuSPARSE and with cluster
//! sums, and the kernel with its launch choices forced (tile and pipeline depth, workers, row
//! period, a padded leading dimension). CUDA-event medians after two warm-ups.
//!
//! ```text
//! cargo run --release -p popcorn-bench --bin bench_cluster_sums -- --n 50000,60000 --k 10,50,100
//! cargo run --release -p popcorn-bench --bin bench_cluster_sums -- --tiles 64x3,64x2 --periods 2,32 --workers 396,528 --ld-pad 32
//! cargo run --release -p popcorn-bench --bin bench_cluster_sums -- --n 60000 --held bf16 --tiles 256x3,128x4 --warps-per-sm 4,12
//! cargo run --release -p popcorn-bench --bin bench_cluster_sums -- --n 10500,6400 --k 26,100 --held bf16 --tensor-cores --tiles 128x2,64x2 --teams 2,4,8
//! ```
//!
//! With `--held bf16|fp16` the kernel rows read K held in 16 bits (their floor half of f32's);
//! the plans' rows still read the f32 K. Each plan is timed on its own context's stream.
//!
//! Without a usable GPU it says so and exits with status 0.

use clap::Parser;
use kernel_ir::{Half, ScalarType};
use popcorn::{Args, Context, DeviceSpec, PlannerConfig, Program, RuntimeError, Tensor};
use popcorn_bench::stats::median;
use popcorn_runtime::cuda::raw::{
    ClusterSumsArgs, ClusterSumsTuning, KernelArg, RawCuda, RawKernel,
};
use std::fmt::Write as _;

/// Fills an array with values uniform in [0, 1) from a hash of the index: as floats
/// (`pk_bench_fill_random`), or held in 16 bits (`pk_bench_fill_random16`: bf16, or fp16 with
/// `fp16 = 1`).
const FILL_RANDOM: &str = r#"
__device__ __forceinline__ float pk_bench_unit(const long long i, const unsigned long long seed)
{
    unsigned long long x = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (float)((x >> 40) * (1.0 / 16777216.0));
}

extern "C" __global__ void pk_bench_fill_random(const long long len, float* __restrict__ out, const unsigned long long seed)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
        out[i] = pk_bench_unit(i, seed);
    }
}

extern "C" __global__ void pk_bench_fill_random16(const long long len, unsigned short* __restrict__ out, const unsigned long long seed, const unsigned fp16)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += stride) {
        const float v = pk_bench_unit(i, seed);
        unsigned short h;
        if (fp16) {
            asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        } else {
            asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        }
        out[i] = h;
    }
}
"#;

/// The cluster-sums micro-benchmark.
#[derive(Parser)]
#[command(about = "Times popcorn's cluster-sums kernel against the K-read floor and cuSPARSE")]
struct Cli {
    /// Orders of K.
    #[arg(long, value_delimiter = ',', default_value = "60000")]
    n: Vec<usize>,
    /// Numbers of clusters.
    #[arg(long, value_delimiter = ',', default_value = "10,50,100")]
    k: Vec<usize>,
    /// Forced tiles `COLSxSTAGES` (for k up to --tile-max-k), beside the automatic choice.
    #[arg(long, value_delimiter = ',', default_value = "64x3")]
    tiles: Vec<String>,
    /// The largest k the forced tiles are timed for.
    #[arg(long, default_value_t = 100)]
    tile_max_k: usize,
    /// The automatic kernel also with strided tiles on blocks of these many bytes (128 or
    /// 512), beside the size's choice (matrices whose rows are on 512-byte blocks stay
    /// aligned).
    #[arg(long, value_delimiter = ',')]
    blocks: Vec<u32>,
    /// Strided rows this many rows apart, beside the automatic period.
    #[arg(long, value_delimiter = ',')]
    periods: Vec<u32>,
    /// The automatic kernel with at most this many workers.
    #[arg(long, value_delimiter = ',')]
    workers: Vec<u64>,
    /// Also time a copy of K whose rows are padded to a multiple of this many elements.
    #[arg(long, default_value_t = 0)]
    ld_pad: usize,
    /// The kernel's rows start this many elements into K's rows (and have as many fewer
    /// columns), to time strided rows at an even n.
    #[arg(long, default_value_t = 0)]
    offset: usize,
    /// The kernel rows (automatic, forced tiles, warps per SM) also with this many streaming
    /// workers per multiprocessor, beside the variant's own number.
    #[arg(long, value_delimiter = ',')]
    warps_per_sm: Vec<u32>,
    /// The tensor-core kernel rows (a K held in 16 bits) also with teams of this many warps
    /// per block, beside the automatic team.
    #[arg(long, value_delimiter = ',')]
    teams: Vec<u32>,
    /// The kernel rows of a K held in 16 bits on the tensor-core kernel up to k = 128 also in
    /// one warp per block (the launcher takes it up to k = 128 in teams, up to 64 in one warp).
    #[arg(long)]
    tensor_cores: bool,
    /// The kernel rows read a copy of K held in 16 bits (`bf16` or `fp16`, written over K's
    /// first half after the plans are timed); their floor is then half of f32's. No padded
    /// row (`--ld-pad`) then.
    #[arg(long)]
    held: Option<String>,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Also write the table to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(table) => {
            if let Some(path) = &cli.out {
                if let Err(e) = std::fs::write(path, &table) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// The distance step the plans compute: `E = -2 K selection(labels, k)^T` (the selection's
/// rows are the clusters' indicators over their sizes).
fn distance_program() -> Result<Program, RuntimeError> {
    Ok(Program::parse(
        "fn f(K: Dense[n, n], labels: Index[n]) -> (E: Dense[n, k]) { E = -2 * K * selection(labels, k)^T; }",
    )?)
}

/// The arguments of [`distance_program`]: `k` is not determined by the inputs.
fn distance_args<'a>(kmat: &'a Tensor, labels: &'a Tensor, k: usize) -> Args<'a> {
    Args::new()
        .tensor("K", kmat)
        .tensor("labels", labels)
        .dim("k", k)
}

/// Median milliseconds of `reps` runs of `f` after two warm-ups, timed with CUDA events.
fn time_ms(
    ctx: &Context,
    reps: usize,
    mut f: impl FnMut() -> Result<(), RuntimeError>,
) -> Result<f64, RuntimeError> {
    f()?;
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        times.push(ctx.time(&mut f)?.1);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The device address of a dense or index tensor of the GPU context.
fn address(t: &Tensor) -> Result<u64, RuntimeError> {
    Ok(popcorn_bench::read::device_buffer(t)?.0)
}

/// Fills `len` floats at `ptr` with random values.
fn fill(raw: &RawCuda<'_>, kernel: &RawKernel, ptr: u64, len: usize) -> Result<(), RuntimeError> {
    let grid = kernels_gen::builtins::linear_grid_block(len as u64);
    let mut args = [
        KernelArg::size(len)?,
        KernelArg::Ptr(ptr),
        KernelArg::I64(12345),
    ];
    // SAFETY: the fill kernel takes (len, float*, seed) and writes `len` floats at `ptr`, which
    // every caller allocated with at least that many.
    unsafe { raw.launch(kernel, grid, &mut args) }
}

/// `|got - want| / |want|` over finite results, NaN if any result is not finite.
fn relative_difference(got: &[f64], want: &[f64]) -> f64 {
    if !got.iter().all(|v| v.is_finite()) {
        return f64::NAN;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        num += (g - w) * (g - w);
        den += w * w;
    }
    (num / den).sqrt()
}

fn run(cli: &Cli) -> Result<String, RuntimeError> {
    let ctx = match Context::new(DeviceSpec::Cuda(0)) {
        Ok(ctx) => ctx,
        Err(e) => {
            println!("no usable GPU ({e}): the cluster-sums benchmark needs one");
            return Ok(String::new());
        }
    };
    let Some(backend) = ctx.cuda_backend() else {
        return Ok(String::new());
    };
    let raw = backend.raw();
    let tiles: Vec<(u32, u32)> = cli
        .tiles
        .iter()
        .filter_map(|s| {
            let (a, c) = s.split_once('x')?;
            Some((a.parse().ok()?, c.parse().ok()?))
        })
        .collect();
    let held = match cli.held.as_deref() {
        None => None,
        Some("bf16") => Some(Half::Bf16),
        Some("fp16") => Some(Half::F16),
        Some(other) => {
            return Err(RuntimeError::InvalidData(format!(
                "--held {other}: use bf16 or fp16"
            )))
        }
    };
    let program = distance_program()?;
    let cusparse = Context::new(DeviceSpec::Cuda(0))?.with_config(PlannerConfig {
        cluster_sums_max_k: Some(0),
        ..PlannerConfig::default()
    });
    let fill_kernel = raw.kernel("pk_bench_fill_random", || FILL_RANDOM.to_string())?;
    let streaming_read = popcorn_bench::read::StreamingRead::new(&ctx, backend.raw())?;
    let fill16_kernel = raw.kernel("pk_bench_fill_random16", || FILL_RANDOM.to_string())?;
    let mut table = String::new();
    let mut printed = 0;
    let _ = writeln!(table, "device: {}", ctx.describe());
    let _ = writeln!(
        table,
        "{:>6} {:>5} {:<22} {:>9} {:>8} {:>7} {:>9}",
        "n", "k", "what", "ms", "GB/s", "/floor", "/cusparse"
    );
    for &n in &cli.n {
        let bytes = n * n * 4;
        let kmat = match ctx.dense_f32(n, n, &vec![0.0; n * n]) {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(table, "n = {n}: {e}");
                continue;
            }
        };
        let src = address(&kmat)?;
        fill(&raw, &fill_kernel, src, n * n)?;
        // The floor: a device-to-device copy of the first half of K onto the second half moves
        // 4 n^2 bytes (2 n^2 read, 2 n^2 written): its time is K's bytes at copy bandwidth.
        // Halves rounded down to 4 KiB, so both start aligned; the time is scaled to K's bytes.
        let half = (bytes / 2) & !4095;
        let copy_ms = time_ms(&ctx, cli.reps, || {
            // SAFETY: both halves lie inside K's allocation and do not overlap.
            unsafe { raw.copy(src + half as u64, src, half) }
        })?;
        let floor = copy_ms * bytes as f64 / (2 * half) as f64;
        let copy_bw = (2 * half) as f64 / copy_ms / 1e6;
        fill(&raw, &fill_kernel, src, n * n)?;
        let read_ms = median(&streaming_read.time_ms(&ctx, &kmat, cli.reps)?.0);
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
        // A copy of K's shape with rows padded to `ld_pad` elements, filled alike.
        let padded = if cli.ld_pad > 0 {
            let ldp = n.div_ceil(cli.ld_pad) * cli.ld_pad;
            let t = ctx.dense_f32(n, ldp, &vec![0.0; n * ldp])?;
            fill(&raw, &fill_kernel, address(&t)?, n * ldp)?;
            Some((ldp, t))
        } else {
            None
        };
        let mut seed = n as u64;
        for &k in &cli.k {
            let labels: Vec<u32> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) % k as u64) as u32
                })
                .collect();
            let l = ctx.index(&labels)?;
            // The cuSPARSE plan reads K and the labels from another context's stream.
            ctx.synchronize()?;
            let args = distance_args(&kmat, &l, k);
            let mut out_sparse = popcorn::Outputs::default();
            let mut out_sums = popcorn::Outputs::default();
            let sparse_ms = time_ms(&cusparse, cli.reps, || {
                cusparse.run_into(&program, &args, &mut out_sparse)
            })?;
            let sums_ms = time_ms(&ctx, cli.reps, || {
                ctx.run_into(&program, &args, &mut out_sums)
            })?;
            let rel = relative_difference(
                &ctx.to_f64(out_sums.tensor("E")?)?,
                &ctx.to_f64(out_sparse.tensor("E")?)?,
            );
            let s = ctx.dense_f32(n, k, &vec![0.0; n * k])?;
            let offset = cli.offset.min(n - 1);
            // The kernel rows of a 16-bit K read n x n 16-bit values over K's first half,
            // written after this k's plans read the f32 K; K is filled again after the rows.
            if let Some(h) = held {
                let mut a = [
                    KernelArg::size(n * n)?,
                    KernelArg::Ptr(src),
                    KernelArg::I64(12345),
                    KernelArg::U32(u32::from(h == Half::F16)),
                ];
                let grid = kernels_gen::builtins::linear_grid_block((n * n) as u64);
                // SAFETY: the kernel takes (len, u16*, seed, fp16) and writes `n * n` 16-bit
                // values from `src`, inside K's 4 n^2 bytes.
                unsafe { raw.launch(&fill16_kernel, grid, &mut a) }?;
            }
            let esz = if held.is_some() { 2 } else { 4 };
            let (kernel_bytes, kernel_floor) = if held.is_some() {
                (bytes / 2, floor / 2.0)
            } else {
                (bytes, floor)
            };
            let cs = ClusterSumsArgs {
                held,
                dtype: ScalarType::F32,
                m: src + (esz * offset) as u64,
                rows: n,
                cols: n - offset,
                ld: n,
                labels: address(&l)?,
                k,
                s: address(&s)?,
            };
            let row = |table: &mut String, what: &str, ms: f64| {
                let (b, f) = if what.starts_with("kernel") {
                    (kernel_bytes, kernel_floor)
                } else {
                    (bytes, floor)
                };
                let _ = writeln!(
                    table,
                    "{n:>6} {k:>5} {what:<22} {ms:>9.3} {:>8.0} {:>7.3} {:>9.3}",
                    b as f64 / ms / 1e6,
                    ms / f,
                    ms / sparse_ms
                );
            };
            row(&mut table, "cusparse plan", sparse_ms);
            row(&mut table, "cluster-sums plan", sums_ms);
            // Each launch below: K holds n rows of n floats from `src`, the labels `n - offset`
            // of n entries, S n x k floats, as the raw call requires.
            let forced = tiles
                .iter()
                .filter(|_| k <= cli.tile_max_k)
                .map(|t| Some(*t));
            let per_sm = std::iter::once(None).chain(cli.warps_per_sm.iter().map(|w| Some(*w)));
            let teams: Vec<_> = std::iter::once(None)
                .chain(cli.teams.iter().map(|t| Some(*t)))
                .collect();
            let forced: Vec<_> = std::iter::once(None).chain(forced).collect();
            for ((tile, warps_per_sm), team) in forced
                .iter()
                .flat_map(|t| per_sm.clone().map(move |w| (*t, w)))
                .flat_map(|tw| teams.iter().map(move |team| (tw, *team)))
            {
                let tuning = ClusterSumsTuning {
                    tile,
                    warps_per_sm,
                    team,
                    tensor_cores: cli.tensor_cores.then_some(true),
                    ..ClusterSumsTuning::default()
                };
                let mut report = None;
                let timed = time_ms(&ctx, cli.reps, || {
                    // SAFETY: see above.
                    report = unsafe { raw.cluster_sums(&cs, tuning) }?;
                    Ok(())
                });
                // A forced launch the device cannot make (too much shared memory) is a row of
                // the table, not the end of the run.
                let ms = match timed {
                    Ok(ms) => ms,
                    Err(e) => {
                        let _ = writeln!(table, "{n:>6} {k:>5} kernel {tile:?} team {team:?}: {e}");
                        continue;
                    }
                };
                let what = match report {
                    Some(r) => format!(
                        "kernel {}{}{}x{}{} w{}{} {}p",
                        if r.launch.variant.tensor_core_tiles > 0 {
                            "mma "
                        } else {
                            ""
                        },
                        if tile.is_none() { "auto " } else { "" },
                        r.launch.variant.tile_cols,
                        r.launch.variant.stages,
                        if r.launch.variant.aligned { "a" } else { "r" },
                        r.workers,
                        match r.launch.variant.warps_per_block() {
                            1 => String::new(),
                            t => format!("x{t}"),
                        },
                        r.launch.passes()
                    ),
                    None => "kernel (nothing)".to_string(),
                };
                row(&mut table, &what, ms);
            }
            // The kernel with one launch choice forced: its time and its last report.
            let forced = |tuning: ClusterSumsTuning| {
                let mut report = None;
                let ms = time_ms(&ctx, cli.reps, || {
                    // SAFETY: see above.
                    report = unsafe { raw.cluster_sums(&cs, tuning) }?;
                    Ok(())
                })?;
                Ok::<_, RuntimeError>((ms, report))
            };
            for &w in &cli.workers {
                let (ms, report) = forced(ClusterSumsTuning {
                    max_workers: Some(w),
                    ..ClusterSumsTuning::default()
                })?;
                let got = report.map_or(0, |r| r.workers);
                row(&mut table, &format!("kernel {got} workers"), ms);
            }
            for &p in &cli.periods {
                let (ms, _) = forced(ClusterSumsTuning {
                    row_period: Some(p),
                    ..ClusterSumsTuning::default()
                })?;
                row(&mut table, &format!("kernel rows {p} apart"), ms);
            }
            for &bytes in &cli.blocks {
                let (ms, report) = forced(ClusterSumsTuning {
                    block_bytes: Some(bytes),
                    ..ClusterSumsTuning::default()
                })?;
                let name = report.map_or(String::new(), |r| r.launch.variant.name());
                row(&mut table, &format!("kernel blocks {bytes} {name}"), ms);
            }
            if let (Some((ldp, padded)), None) = (&padded, held) {
                let padded_args = ClusterSumsArgs {
                    m: address(padded)?,
                    cols: n,
                    ld: *ldp,
                    ..cs
                };
                let mut report = None;
                let ms = time_ms(&ctx, cli.reps, || {
                    // SAFETY: the padded copy holds n rows of `ldp` floats.
                    report =
                        unsafe { raw.cluster_sums(&padded_args, ClusterSumsTuning::default()) }?;
                    Ok(())
                })?;
                let mode = report.map_or("-", |r| if r.launch.variant.aligned { "a" } else { "r" });
                row(&mut table, &format!("kernel ld {ldp} ({mode})"), ms);
            }
            if held.is_some() {
                // The next k's plans read the f32 K again.
                fill(&raw, &fill_kernel, src, n * n)?;
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
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The program and arguments the benchmark times run (here on the CPU, with and without
    /// the cluster-sums pattern) and give `-2` times each row's means by label.
    #[test]
    fn the_timed_program_runs_with_its_arguments() {
        let k_values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let labels = [0u32, 1, 0];
        for max_k in [None, Some(0)] {
            let ctx = Context::new(DeviceSpec::Cpu)
                .expect("the CPU context opens")
                .with_config(PlannerConfig {
                    cluster_sums_max_k: max_k,
                    ..PlannerConfig::default()
                });
            let kmat = ctx.dense_f32(3, 3, &k_values).unwrap();
            let l = ctx.index(&labels).unwrap();
            let out = ctx
                .run(&distance_program().unwrap(), &distance_args(&kmat, &l, 2))
                .unwrap();
            let e = ctx.to_f64(out.tensor("E").unwrap()).unwrap();
            // The selection's rows are each cluster's indicator over its size: row i's mean
            // over columns 0 and 2 (label 0) and its column 1 (label 1), times -2.
            let want = [-4.0, -4.0, -10.0, -10.0, -16.0, -16.0];
            assert_eq!(e, want, "cluster_sums_max_k {max_k:?}");
        }
    }
}
