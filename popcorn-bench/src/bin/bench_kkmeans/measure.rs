//! The measurements: device ceilings, the kernel matrix, popcorn's iterations and the naive
//! baseline's, each timed with the context's marks (CUDA events on a GPU) after a warm-up.

use super::data::Points;
use super::programs;
use super::BenchError;
use popcorn::dsl::plan::StepOp;
use popcorn::{Args, Context, Outputs, Program, RuntimeError, Tensor};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// The polynomial kernel of the paper's runs.
pub const GAMMA: f64 = 1.0;
/// See [`GAMMA`].
pub const COEF0: f64 = 1.0;
/// See [`GAMMA`].
pub const DEGREE: f64 = 2.0;

pub use popcorn_bench::stats::median;

/// Runs `f` once to warm up, then `reps` times under the context's marks; the milliseconds.
fn timed(
    ctx: &Context,
    reps: usize,
    mut f: impl FnMut() -> Result<(), RuntimeError>,
) -> Result<Vec<f64>, BenchError> {
    f()?;
    ctx.synchronize()?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let ((), t) = ctx.time(&mut f)?;
        ms.push(t);
    }
    Ok(ms)
}

/// The device's measured ceilings.
#[derive(Clone, Debug, Serialize)]
pub struct Ceilings {
    /// Bytes copied per device-to-device copy.
    pub copy_bytes: usize,
    /// Milliseconds per copy (every repetition).
    pub copy_ms: Vec<f64>,
    /// Read plus written bytes over the median time, GB/s.
    pub copy_gb_s: f64,
    /// Milliseconds per read of the same buffer, summed (every repetition).
    pub read_ms: Vec<f64>,
    /// Bytes read over the median time, GB/s.
    pub read_gb_s: f64,
    /// Order of the square SGEMM.
    pub sgemm_dim: usize,
    /// Milliseconds per SGEMM (every repetition).
    pub sgemm_ms: Vec<f64>,
    /// 2 m^3 over the median time, TFLOP/s.
    pub sgemm_tflop_s: f64,
}

/// Measures the copy bandwidth (`copy_bytes` per copy), the read bandwidth (the same buffer
/// summed) and the SGEMM throughput (`dim`^3) through the runtime: programs `y = x` (a
/// device-to-device copy), `s = sum(x)` and `C = A * B` (cuBLAS in strict fp32 on a GPU, the
/// gemm crate on the CPU), on random data.
pub fn ceilings(
    ctx: &Context,
    copy_bytes: usize,
    dim: usize,
    reps: usize,
    seed: u64,
) -> Result<Ceilings, BenchError> {
    let cols = 1024;
    let rows = (copy_bytes / 4 / cols).max(1);
    let copy_bytes = rows * cols * 4;
    let x = {
        let host = super::data::uniform(rows, cols, seed ^ 0xc0);
        ctx.dense_f32(rows, cols, &host.x)?
    };
    // Milliseconds of the benchmark program `name` over x, its outputs reused.
    let over_x = |name: &str| {
        let program = programs::program(name);
        let mut out = Outputs::default();
        timed(ctx, reps.max(5), || {
            ctx.run_into(program, &Args::new().tensor("x", &x), &mut out)
        })
    };
    let copy_ms = over_x("copy")?;
    let read_ms = over_x("read")?;
    drop(x);
    let a = ctx.dense_f32(dim, dim, &super::data::uniform(dim, dim, seed ^ 0xa).x)?;
    let b = ctx.dense_f32(dim, dim, &super::data::uniform(dim, dim, seed ^ 0xb).x)?;
    let sgemm = programs::program("sgemm");
    let mut out = Outputs::default();
    let sgemm_ms = timed(ctx, reps.max(3), || {
        ctx.run_into(
            sgemm,
            &Args::new().tensor("A", &a).tensor("B", &b),
            &mut out,
        )
    })?;
    let copy_gb_s = 2.0 * copy_bytes as f64 / (median(&copy_ms) * 1e-3) / 1e9;
    let read_gb_s = copy_bytes as f64 / (median(&read_ms) * 1e-3) / 1e9;
    let sgemm_tflop_s = 2.0 * (dim as f64).powi(3) / (median(&sgemm_ms) * 1e-3) / 1e12;
    Ok(Ceilings {
        copy_bytes,
        copy_ms,
        copy_gb_s,
        read_ms,
        read_gb_s,
        sgemm_dim: dim,
        sgemm_ms,
        sgemm_tflop_s,
    })
}

/// A streaming read of K itself ([`popcorn_bench::read`]): the read floor of an iteration.
#[derive(Clone, Debug, Serialize)]
pub struct KRead {
    /// Bytes read.
    pub bytes: usize,
    /// Milliseconds per read (every repetition).
    pub ms: Vec<f64>,
    /// Median of those: the floor.
    pub median_ms: f64,
    /// Bytes over the median time, GB/s.
    pub gb_s: f64,
}

/// Times `reps` streaming reads of `kmat` on a GPU context (`None` on the CPU).
pub fn read_of(ctx: &Context, kmat: &Tensor, reps: usize) -> Result<Option<KRead>, BenchError> {
    let Some(backend) = ctx.cuda_backend() else {
        return Ok(None);
    };
    let read = popcorn_bench::read::StreamingRead::new(ctx, backend.raw())?;
    let (ms, bytes) = read.time_ms(ctx, kmat, reps.max(5))?;
    let median_ms = median(&ms);
    Ok(Some(KRead {
        bytes,
        ms,
        median_ms,
        gb_s: bytes as f64 / (median_ms * 1e-3) / 1e9,
    }))
}

/// The library steps of a plan, for the report (`syrk`, `gemm`, ...).
fn product_op(plan: &popcorn::Plan) -> (&'static str, f64) {
    for s in &plan.steps {
        match &s.op {
            StepOp::Syrk { n, k, .. } => return ("SYRK", (*n as f64).powi(2) * *k as f64),
            StepOp::Gemm(g) => return ("GEMM", 2.0 * g.m as f64 * g.n as f64 * g.k as f64),
            _ => {}
        }
    }
    ("none", 0.0)
}

/// The operations of a plan, in order (`selection, spmm`).
pub fn plan_ops(plan: &popcorn::Plan) -> String {
    plan.steps
        .iter()
        .map(|s| s.op_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The time of computing the kernel matrix.
#[derive(Clone, Debug, Serialize)]
pub struct KernelMatrix {
    /// The product the plan chose (`SYRK` or `GEMM`).
    pub product: String,
    /// Its flops (n^2 d for SYRK, 2 n^2 d for GEMM).
    pub flops: f64,
    /// The plan's steps.
    pub plan: String,
    /// Milliseconds of the whole program (product and fused map), every repetition.
    pub ms: Vec<f64>,
    /// Median milliseconds.
    pub median_ms: f64,
    /// Product flops over the median time, TFLOP/s.
    pub tflop_s: f64,
    /// That as a fraction of the measured SGEMM throughput.
    pub of_sgemm: Option<f64>,
}

/// Computes the polynomial kernel matrix of `x` with `program` (warm-up, then `reps` timed
/// runs); returns the timing and the matrix. `gemm_form` passes the points as both `X` and
/// `Y` (the naive baseline's GEMM program).
pub fn kernel_matrix(
    ctx: &Context,
    program: &Program,
    x: &Tensor,
    gemm_form: bool,
    reps: usize,
    sgemm_tflop_s: Option<f64>,
) -> Result<(KernelMatrix, Tensor), BenchError> {
    let (n, d) = x.dims();
    let mut args = Args::new()
        .tensor("X", x)
        .scalar("gamma", GAMMA)
        .scalar("coef0", COEF0)
        .scalar("degree", DEGREE);
    if gemm_form {
        args = args.tensor("Y", x);
    }
    let dims: BTreeMap<String, usize> = [("n".to_string(), n), ("d".to_string(), d)].into();
    let plan = ctx.plan(program, &dims)?;
    let (product, flops) = product_op(&plan);
    let mut out = Outputs::default();
    let ms = timed(ctx, reps, || ctx.run_into(program, &args, &mut out))?;
    let median_ms = median(&ms);
    let tflop_s = flops / (median_ms * 1e-3) / 1e12;
    let timing = KernelMatrix {
        product: product.into(),
        flops,
        plan: plan_ops(&plan),
        ms,
        median_ms,
        tflop_s,
        of_sgemm: sgemm_tflop_s.map(|s| tflop_s / s),
    };
    Ok((timing, out.take("K")?))
}

/// One implementation's iterations on one (shape, k).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Iterations {
    /// Milliseconds of the whole iteration on the device (popcorn: the iteration program,
    /// objective read-back included; naive: its three kernels), every iteration of every
    /// timed repetition.
    pub iteration_ms: Vec<f64>,
    /// Median of those.
    pub iteration_median_ms: f64,
    /// That over the K-read floor.
    pub iteration_over_floor: Option<f64>,
    /// Median milliseconds of the distance step (popcorn: selection and E = -2 K V^T alone,
    /// run as its own program; naive: kernel 1, the row sums).
    pub distance_median_ms: f64,
    /// Median milliseconds of the rest (popcorn: iteration minus distance step, clamped at 0;
    /// naive: kernels 2 and 3, centroid norms and argmin).
    pub argmin_median_ms: f64,
    /// Popcorn only: median milliseconds of the distance step with the sparse operand on the
    /// left (`E^T = -2 V K`, the same numbers since K is symmetric), which the iteration does
    /// not use.
    pub sparse_left_median_ms: Option<f64>,
    /// That over the K-read floor.
    pub sparse_left_over_floor: Option<f64>,
    /// Median milliseconds of reading the labels back.
    pub readback_median_ms: f64,
    /// Wall seconds of each repetition's whole loop (iterations and read-backs).
    pub loop_s: Vec<f64>,
    /// Median of those.
    pub loop_median_s: f64,
    /// Kernel matrix plus loop: median seconds end to end (data upload excluded).
    pub end_to_end_s: f64,
    /// The distance step over the K-read floor (a streaming read of K itself, timed in the
    /// same run).
    pub distance_over_floor: Option<f64>,
    /// Objective of the labels at the start of the last iteration.
    pub objective: f64,
    /// The plan of the distance step (popcorn) or the kernels (naive).
    pub plan: String,
    /// Labels after the last iteration (not serialised).
    #[serde(skip)]
    pub labels: Vec<u32>,
}

fn labels0(n: usize, k: usize) -> Vec<u32> {
    (0..n).map(|i| (i % k) as u32).collect()
}

/// One repetition of an iteration loop.
#[derive(Default)]
struct LoopRun {
    /// Device milliseconds of each iteration's timed part (popcorn: the whole iteration
    /// program; naive: kernel 1).
    first_ms: Vec<f64>,
    /// Naive only: device milliseconds of kernels 2 and 3 of each iteration.
    second_ms: Vec<f64>,
    /// Milliseconds of each label read-back.
    readback_ms: Vec<f64>,
    /// Wall seconds of the loop.
    loop_s: f64,
    /// Labels after the last iteration.
    labels: Vec<u32>,
    /// Objective of the labels at the start of the last iteration.
    objective: f64,
}

/// Popcorn: `iters` runs of the library's iteration program per repetition (labels read back
/// every iteration, as the library's loop does), after a warm-up of two iterations; then the
/// distance step alone, in the iteration's layout and, with `sparse_left`, with the sparse
/// operand on the left.
#[allow(clippy::too_many_arguments)]
pub fn popcorn_iterations(
    ctx: &Context,
    kmat: &Tensor,
    k: usize,
    iters: usize,
    reps: usize,
    floor_ms: Option<f64>,
    kernel_ms: f64,
    sparse_left: bool,
) -> Result<Iterations, BenchError> {
    let (n, _) = kmat.dims();
    let iteration = popcorn::kkmeans::programs::program("kkmeans_iteration");
    let run = |iters: usize| -> Result<(LoopRun, Tensor), BenchError> {
        let mut labels = ctx.index(&labels0(n, k))?;
        let mut out = Outputs::default();
        let mut r = LoopRun::default();
        ctx.synchronize()?;
        let start = Instant::now();
        for _ in 0..iters {
            let args = Args::new()
                .tensor("K", kmat)
                .tensor("labels", &labels)
                .dim("k", k);
            let ((), ms) = ctx.time(|| ctx.run_into(iteration, &args, &mut out))?;
            r.objective = out.scalar("objective")?;
            let t = Instant::now();
            r.labels = ctx.to_u32(out.tensor("new_labels")?)?;
            r.readback_ms.push(t.elapsed().as_secs_f64() * 1e3);
            r.first_ms.push(ms);
            let next = out.take("new_labels")?;
            out.insert("new_labels", std::mem::replace(&mut labels, next));
        }
        r.loop_s = start.elapsed().as_secs_f64();
        Ok((r, labels))
    };
    run(2)?;
    let mut r = Iterations::default();
    let mut readback = Vec::new();
    let mut last_labels = None;
    for _ in 0..reps {
        let (one, labels) = run(iters)?;
        r.iteration_ms.extend(one.first_ms);
        readback.extend(one.readback_ms);
        r.loop_s.push(one.loop_s);
        r.labels = one.labels;
        r.objective = one.objective;
        last_labels = Some(labels);
    }
    let labels = last_labels.ok_or_else(|| BenchError::Usage("no repetition ran".into()))?;
    let step_args = || {
        Args::new()
            .tensor("K", kmat)
            .tensor("labels", &labels)
            .dim("k", k)
    };
    let dist = programs::program("distances_only");
    let dims: BTreeMap<String, usize> = [("n".to_string(), n), ("k".to_string(), k)].into();
    r.plan = plan_ops(&*ctx.plan(dist, &dims)?);
    let mut out = Outputs::default();
    let dist_ms = timed(ctx, reps.max(3), || {
        ctx.run_into(dist, &step_args(), &mut out)
    })?;
    if sparse_left {
        let alt = programs::program("distances_sparse_left");
        let mut out = Outputs::default();
        let alt_ms = timed(ctx, reps.max(3), || {
            ctx.run_into(alt, &step_args(), &mut out)
        })?;
        r.sparse_left_median_ms = Some(median(&alt_ms));
        r.sparse_left_over_floor = floor_ms.map(|f| median(&alt_ms) / f);
    }
    r.iteration_median_ms = median(&r.iteration_ms);
    r.distance_median_ms = median(&dist_ms);
    r.argmin_median_ms = (r.iteration_median_ms - r.distance_median_ms).max(0.0);
    r.readback_median_ms = median(&readback);
    r.loop_median_s = median(&r.loop_s);
    r.end_to_end_s = kernel_ms * 1e-3 + r.loop_median_s;
    r.distance_over_floor = floor_ms.map(|f| r.distance_median_ms / f);
    r.iteration_over_floor = floor_ms.map(|f| r.iteration_median_ms / f);
    Ok(r)
}

/// The naive baseline: `iters` iterations per repetition of its three kernels, the objective
/// and the labels read back every iteration, after a warm-up of two iterations. Kernel 1 and
/// kernels 2-3 are timed separately (each under its own marks).
pub fn naive_iterations(
    ctx: &Context,
    kmat: &Tensor,
    k: usize,
    iters: usize,
    reps: usize,
    floor_ms: Option<f64>,
    kernel_ms: f64,
) -> Result<Iterations, BenchError> {
    let (n, _) = kmat.dims();
    let mut naive = popcorn_bench::naive::naive_kkmeans(ctx, n, k)?;
    let mut run = |iters: usize| -> Result<LoopRun, BenchError> {
        let mut labels = ctx.index(&labels0(n, k))?;
        let mut next = ctx.index(&vec![0; n])?;
        let mut r = LoopRun::default();
        ctx.synchronize()?;
        let start = Instant::now();
        for _ in 0..iters {
            let ((), a) = ctx.time(|| naive.row_sums(kmat, &labels))?;
            let ((), b) = ctx.time(|| naive.assign(kmat, &labels, &next))?;
            r.objective = naive.objective()?;
            let t = Instant::now();
            r.labels = ctx.to_u32(&next)?;
            r.readback_ms.push(t.elapsed().as_secs_f64() * 1e3);
            r.first_ms.push(a);
            r.second_ms.push(b);
            std::mem::swap(&mut labels, &mut next);
        }
        r.loop_s = start.elapsed().as_secs_f64();
        Ok(r)
    };
    run(2)?;
    let mut r = Iterations {
        plan: "naive: row sums, centroid norms, assign".into(),
        ..Iterations::default()
    };
    let (mut k1_all, mut k23_all, mut rb_all) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let one = run(iters)?;
        r.iteration_ms
            .extend(one.first_ms.iter().zip(&one.second_ms).map(|(a, b)| a + b));
        k1_all.extend(one.first_ms);
        k23_all.extend(one.second_ms);
        rb_all.extend(one.readback_ms);
        r.loop_s.push(one.loop_s);
        r.labels = one.labels;
        r.objective = one.objective;
    }
    r.iteration_median_ms = median(&r.iteration_ms);
    r.distance_median_ms = median(&k1_all);
    r.argmin_median_ms = median(&k23_all);
    r.readback_median_ms = median(&rb_all);
    r.loop_median_s = median(&r.loop_s);
    r.end_to_end_s = kernel_ms * 1e-3 + r.loop_median_s;
    r.distance_over_floor = floor_ms.map(|f| r.distance_median_ms / f);
    r.iteration_over_floor = floor_ms.map(|f| r.iteration_median_ms / f);
    Ok(r)
}

/// The naive baseline against the library on small data.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// The data, in words.
    pub data: String,
    /// Points.
    pub n: usize,
    /// Clusters.
    pub k: usize,
    /// Iterations the library ran (it stops when no label changes).
    pub library_iterations: usize,
    /// Iterations the naive baseline ran.
    pub naive_iterations: usize,
    /// Points with the same final label.
    pub same_labels: usize,
    /// Largest relative difference of the objective histories.
    pub objective_rel_diff: f64,
    /// Whether the labels are identical and the histories agree to 1e-4.
    pub pass: bool,
}

/// Fits `x` (n x d, f64) with the library (`KernelKMeans`, polynomial kernel, i mod k start,
/// at most `max_iter` iterations) and with the naive baseline on this context, from the same
/// start, and compares.
pub fn check(
    ctx: &Context,
    what: &str,
    points: popcorn::kkmeans::Points<'_>,
    k: usize,
    max_iter: usize,
    device: popcorn::DeviceSpec,
) -> Result<Check, BenchError> {
    use popcorn::kkmeans::{Kernel, KernelKMeans};
    let (n, d, x) = (points.n, points.d, points.data);
    let fit = KernelKMeans::new(k)
        .kernel(Kernel::POLYNOMIAL_DEFAULT)
        .max_iter(max_iter)
        .device(device)
        .fit(points)?;
    let xt = ctx.dense(n, d, x)?;
    let (_, kmat) = kernel_matrix(
        ctx,
        popcorn::kkmeans::programs::program("kernel_polynomial"),
        &xt,
        false,
        1,
        None,
    )?;
    let mut naive = popcorn_bench::naive::naive_kkmeans(ctx, n, k)?;
    let options = popcorn_bench::naive::NaiveRunOptions {
        max_iter,
        tol: None,
    };
    let run = naive.run(&kmat, &labels0(n, k), &options)?;
    let same_labels = run
        .labels
        .iter()
        .zip(&fit.labels)
        .filter(|(a, b)| a == b)
        .count();
    let objective_rel_diff = run
        .objective_history
        .iter()
        .zip(&fit.objective_history)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1e-30))
        .fold(0.0, f64::max);
    let pass = same_labels == n && run.iterations == fit.iterations && objective_rel_diff <= 1e-4;
    Ok(Check {
        data: what.into(),
        n,
        k,
        library_iterations: fit.iterations,
        naive_iterations: run.iterations,
        same_labels,
        objective_rel_diff,
        pass,
    })
}

/// Uploads the points; returns the tensor and the milliseconds it took.
pub fn upload(ctx: &Context, p: &Points) -> Result<(Tensor, f64), BenchError> {
    ctx.synchronize()?;
    let t = Instant::now();
    let x = ctx.dense_f32(p.n, p.d, &p.x)?;
    ctx.synchronize()?;
    Ok((x, t.elapsed().as_secs_f64() * 1e3))
}
