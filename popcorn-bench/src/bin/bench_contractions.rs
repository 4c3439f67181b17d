//! Fused contractions against the library product they replace, on one device.
//!
//! For each Lloyd shape `n x d` with `k` centroids it measures, in one run and after a warm-up
//! (medians of CUDA-event times):
//! - the ceilings at the same sizes: cuBLAS's `X * C^T` (`n x k`, inner `d`) in strict fp32
//!   and in TF32;
//! - the fused assignment alone (`argmin_rows(-2 X C^T + rownorms(C)^T)`, one contraction),
//!   as a rate of `2 n k d` flops against those ceilings;
//! - a whole Lloyd iteration (selection, centroid SpMM, assignment, the number of changed
//!   labels read back to the host) with the product stored (library) and fused, strict and
//!   TF32;
//! - kernel smoothing (`K * y ./ sum_rows(K)`, Gaussian K of `n x m` never stored) fused.
//!
//! With `--sparse-gram NxDxDENSITY` it also measures the Gram matrix `K = X * X^T` of random
//! sparse points (`n x d`, that fraction of entries stored, sorted columns) planned from the CSR
//! matrix (the plan's choice is printed: on the GPU an SpMM against `X^T` written dense, or
//! densify + SYRK) against the SYRK of the same points uploaded dense, strict and TF32; the
//! SCOTUS shape of Popcorn's paper is `6400x126405x0.005`.
//!
//! Prints a table and writes JSON (`--json`). The peers (flash-kmeans, PyTorch) are measured
//! by `popcorn-bench/scripts/contraction_peers.py` in the same session.
//!
//! ```text
//! bench_contractions [--lloyd 100000x128x1024,...] [--smooth 200000x16] [--sparse-gram 6400x126405x0.005] [--reps 10] [--json F]
//! bench_contractions --lloyd '' --smooth '' --sparse-gram 6400x126405x0.005   # the sparse Gram alone
//! ```

use clap::Parser;
use popcorn::dsl::ContractionPolicy;
use popcorn::{Args, Context, DType, Outputs, PlannerConfig, Program, RuntimeError, Tensor};
use serde::Serialize;
use std::process::ExitCode;

const PROGRAMS: &str = "
fn product(X: Dense[n, d], C: Dense[k, d]) -> (P: Dense[n, k]) {
    P = X * C^T;
}
fn assign(X: Dense[n, d], C: Dense[k, d]) -> (labels: Index[n]) {
    labels = argmin_rows(-2 * X * C^T + rownorms(C)^T);
}
fn lloyd_iteration(X: Dense[n, d], labels: Index[n]) -> (new_labels: Index[n], changed: Scalar) {
    V = selection(labels, k);
    C = V * X;
    D = -2 * X * C^T + rownorms(C)^T;
    new_labels = argmin_rows(D);
    changed = sum(new_labels != labels);
}
fn kernel_smoothing(X: Dense[n, d], Y: Dense[m, d], y: Col[m], gamma: Scalar) -> (s: Col[n]) {
    K = exp(-gamma * max(rownorms(X) + rownorms(Y)^T - 2 * X * Y^T, 0));
    s = K * y ./ sum_rows(K);
}
fn gram(X: Dense[n, d]) -> (K: Dense[n, n]) {
    K = X * X^T;
}
fn gram_sparse(X: Csr[n, d]) -> (K: Dense[n, n]) {
    K = X * X^T;
}
";

#[derive(Parser)]
#[command(about = "Fused contractions against library products")]
struct Cli {
    /// Lloyd shapes, `NxDxK` separated by commas.
    #[arg(
        long,
        default_value = "100000x128x1024,1048576x128x1024,1048576x32x100"
    )]
    lloyd: String,
    /// Kernel smoothing shape `NxD` (n = m query and training points).
    #[arg(long, default_value = "200000x16")]
    smooth: String,
    /// The sparse Gram matrix of `NxDxDENSITY` random sparse points against the dense SYRK
    /// (empty: not measured).
    #[arg(long, default_value = "")]
    sparse_gram: String,
    /// Timed repetitions of each measurement (after one warm-up).
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct LloydRow {
    n: usize,
    d: usize,
    k: usize,
    sgemm_ms: f64,
    tf32_gemm_ms: f64,
    fused_strict_assign_ms: f64,
    fused_tf32_assign_ms: f64,
    fused_strict_over_sgemm_rate: f64,
    fused_tf32_over_tf32_gemm_rate: f64,
    iteration_library_ms: f64,
    iteration_library_tf32_ms: f64,
    iteration_fused_strict_ms: f64,
    iteration_fused_tf32_ms: f64,
    strict_iteration_over_sgemm_flops: f64,
}

#[derive(Serialize)]
struct SmoothRow {
    n: usize,
    d: usize,
    fused_strict_ms: f64,
    fused_tf32_ms: f64,
}

#[derive(Serialize)]
struct SparseGramRow {
    n: usize,
    d: usize,
    nnz: usize,
    density: f64,
    /// The planned steps of the sparse Gram matrix (`densify`, `spmm`, ...).
    sparse_plan: Vec<String>,
    /// The cost model's note on its choice.
    sparse_why: String,
    sparse_ms: f64,
    dense_syrk_ms: f64,
    dense_syrk_tf32_ms: f64,
    dense_over_sparse: f64,
}

#[derive(Serialize)]
struct Report {
    device: String,
    lloyd: Vec<LloydRow>,
    smoothing: Option<SmoothRow>,
    sparse_gram: Option<SparseGramRow>,
}

/// Uniform values in [0, 1) from a splitmix64 stream.
fn uniform(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

fn program(name: &str) -> Result<Program, String> {
    Program::parse_all(PROGRAMS)
        .map_err(|e| format!("{e:?}"))?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("no program {name}"))
}

/// `ctx` planning in f32 with TF32 allowed or not and the given contraction policy.
fn configure(ctx: &mut Context, tf32: bool, contractions: ContractionPolicy) -> &Context {
    ctx.set_config(PlannerConfig {
        dtype: DType::F32,
        tf32,
        contractions,
        ..PlannerConfig::default()
    });
    ctx
}

/// Median milliseconds of `reps` runs of `p` after one warm-up.
fn time_program(
    ctx: &Context,
    p: &Program,
    args: &Args<'_>,
    reps: usize,
) -> Result<f64, RuntimeError> {
    let mut out = Outputs::default();
    ctx.run_into(p, args, &mut out)?;
    ctx.synchronize()?;
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let ((), t) = ctx.time(|| ctx.run_into(p, args, &mut out))?;
        ms.push(t);
    }
    Ok(popcorn_bench::stats::median(&ms))
}

/// Median milliseconds of one Lloyd iteration, labels fed back and `changed` read each time.
fn time_iterations(
    ctx: &Context,
    p: &Program,
    x: &Tensor,
    k: usize,
    n: usize,
    reps: usize,
) -> Result<f64, RuntimeError> {
    let mut labels = ctx.index(&(0..n).map(|i| (i % k) as u32).collect::<Vec<_>>())?;
    let mut out = Outputs::default();
    let mut ms = Vec::new();
    for it in 0..reps + 1 {
        let args = Args::new()
            .tensor("X", x)
            .tensor("labels", &labels)
            .dim("k", k);
        let ((), t) = ctx.time(|| {
            ctx.run_into(p, &args, &mut out)?;
            out.scalar("changed").map(|_| ())
        })?;
        if it > 0 {
            ms.push(t);
        }
        let next = out.take("new_labels")?;
        out.insert("new_labels", std::mem::replace(&mut labels, next));
    }
    Ok(popcorn_bench::stats::median(&ms))
}

fn lloyd_row(
    ctx: &mut Context,
    (n, d, k): (usize, usize, usize),
    reps: usize,
) -> Result<LloydRow, String> {
    let e = |e: RuntimeError| e.to_string();
    let x = ctx.dense_f32(n, d, &uniform(n * d, 1)).map_err(e)?;
    let c = ctx.dense_f32(k, d, &uniform(k * d, 2)).map_err(e)?;
    let args = Args::new().tensor("X", &x).tensor("C", &c);
    let product = program("product")?;
    let assign = program("assign")?;
    let iteration = program("lloyd_iteration")?;
    use ContractionPolicy::{Always, Never};
    let sgemm_ms = time_program(configure(ctx, false, Never), &product, &args, reps).map_err(e)?;
    let tf32_gemm_ms =
        time_program(configure(ctx, true, Never), &product, &args, reps).map_err(e)?;
    let fused_strict_assign_ms =
        time_program(configure(ctx, false, Always), &assign, &args, reps).map_err(e)?;
    let fused_tf32_assign_ms =
        time_program(configure(ctx, true, Always), &assign, &args, reps).map_err(e)?;
    let mut it = |tf32, policy| {
        time_iterations(configure(ctx, tf32, policy), &iteration, &x, k, n, reps).map_err(e)
    };
    let iteration_library_ms = it(false, Never)?;
    let iteration_library_tf32_ms = it(true, Never)?;
    let iteration_fused_strict_ms = it(false, Always)?;
    let iteration_fused_tf32_ms = it(true, Always)?;
    Ok(LloydRow {
        n,
        d,
        k,
        sgemm_ms,
        tf32_gemm_ms,
        fused_strict_assign_ms,
        fused_tf32_assign_ms,
        fused_strict_over_sgemm_rate: sgemm_ms / fused_strict_assign_ms,
        fused_tf32_over_tf32_gemm_rate: tf32_gemm_ms / fused_tf32_assign_ms,
        iteration_library_ms,
        iteration_library_tf32_ms,
        iteration_fused_strict_ms,
        iteration_fused_tf32_ms,
        strict_iteration_over_sgemm_flops: iteration_fused_strict_ms / sgemm_ms,
    })
}

fn smooth_row(ctx: &mut Context, (n, d): (usize, usize), reps: usize) -> Result<SmoothRow, String> {
    let e = |e: RuntimeError| e.to_string();
    let x = ctx.dense_f32(n, d, &uniform(n * d, 3)).map_err(e)?;
    let y = ctx.dense_f32(n, d, &uniform(n * d, 4)).map_err(e)?;
    let t = ctx.dense_f32(n, 1, &uniform(n, 5)).map_err(e)?;
    let args = Args::new()
        .tensor("X", &x)
        .tensor("Y", &y)
        .tensor("y", &t)
        .scalar("gamma", 0.5);
    let p = program("kernel_smoothing")?;
    let fused_strict_ms = time_program(
        configure(ctx, false, ContractionPolicy::Always),
        &p,
        &args,
        reps,
    )
    .map_err(e)?;
    let fused_tf32_ms = time_program(
        configure(ctx, true, ContractionPolicy::Always),
        &p,
        &args,
        reps,
    )
    .map_err(e)?;
    Ok(SmoothRow {
        n,
        d,
        fused_strict_ms,
        fused_tf32_ms,
    })
}

/// Random sparse points: `n x d`, each row about `density * d` distinct sorted columns, values
/// in (0, 1]; returns (row offsets, column indices, values).
fn random_sparse(n: usize, d: usize, density: f64) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let per_row = ((density * d as f64).round() as usize).clamp(1, d);
    let draws = uniform(n * per_row, 6);
    let vals = uniform(n * per_row, 7);
    let mut row_ptr = vec![0i32];
    let mut col_idx = Vec::with_capacity(n * per_row);
    let mut values = Vec::with_capacity(n * per_row);
    for i in 0..n {
        let mut cols: Vec<i32> = draws[i * per_row..(i + 1) * per_row]
            .iter()
            .map(|u| ((*u as f64 * d as f64) as usize).min(d - 1) as i32)
            .collect();
        cols.sort_unstable();
        cols.dedup();
        for (t, c) in cols.into_iter().enumerate() {
            col_idx.push(c);
            values.push(f64::from(vals[i * per_row + t]) + 1e-3);
        }
        row_ptr.push(col_idx.len() as i32);
    }
    (row_ptr, col_idx, values)
}

fn sparse_gram_row(
    ctx: &mut Context,
    (n, d, density): (usize, usize, f64),
    reps: usize,
) -> Result<SparseGramRow, String> {
    let e = |e: RuntimeError| e.to_string();
    let (row_ptr, col_idx, values) = random_sparse(n, d, density);
    let nnz = values.len();
    let sparse = program("gram_sparse")?;
    let dense = program("gram")?;
    configure(ctx, false, ContractionPolicy::Auto);
    let xs = ctx.csr(n, d, &row_ptr, &col_idx, &values).map_err(e)?;
    let args = Args::new().tensor("X", &xs);
    let (dims, _, nnz_of) = popcorn::runtime::context::bind(&sparse, &args).map_err(e)?;
    let plan = popcorn::dsl::plan(&sparse, &dims, ctx.config(), &ctx.target(), &nnz_of)
        .map_err(|e| e.to_string())?;
    let sparse_plan: Vec<String> = plan.steps.iter().map(|s| s.op_name()).collect();
    let sparse_why = plan
        .steps
        .iter()
        .find_map(|s| match &s.op {
            popcorn::dsl::plan::StepOp::SpGemm { why, .. } => Some(why.clone()),
            popcorn::dsl::plan::StepOp::Builtin(popcorn::dsl::ops::Builtin::Densify(dd)) => {
                Some(dd.why.clone())
            }
            _ => None,
        })
        .unwrap_or_default();
    let sparse_ms = time_program(ctx, &sparse, &args, reps).map_err(e)?;
    drop(xs);
    // The same points dense (f32), for the SYRK.
    let mut x = vec![0f32; n * d];
    for i in 0..n {
        for p in row_ptr[i] as usize..row_ptr[i + 1] as usize {
            x[i * d + col_idx[p] as usize] = values[p] as f32;
        }
    }
    let xd = ctx.dense_f32(n, d, &x).map_err(e)?;
    drop(x);
    let dargs = Args::new().tensor("X", &xd);
    let dense_syrk_ms = time_program(
        configure(ctx, false, ContractionPolicy::Never),
        &dense,
        &dargs,
        reps,
    )
    .map_err(e)?;
    let dense_syrk_tf32_ms = time_program(
        configure(ctx, true, ContractionPolicy::Never),
        &dense,
        &dargs,
        reps,
    )
    .map_err(e)?;
    Ok(SparseGramRow {
        n,
        d,
        nnz,
        density: nnz as f64 / (n as f64 * d as f64),
        sparse_plan,
        sparse_why,
        sparse_ms,
        dense_syrk_ms,
        dense_syrk_tf32_ms,
        dense_over_sparse: dense_syrk_ms / sparse_ms,
    })
}

fn parse_dims(s: &str) -> Result<Vec<usize>, String> {
    s.split('x')
        .map(|v| v.trim().parse().map_err(|_| format!("`{s}` is not NxDxK")))
        .collect()
}

fn run(cli: &Cli) -> Result<(), String> {
    let mut ctx = Context::from_env().map_err(|e| e.to_string())?;
    let mut report = Report {
        device: ctx.describe(),
        lloyd: Vec::new(),
        smoothing: None,
        sparse_gram: None,
    };
    println!("device: {}", report.device);
    println!(
        "{:>9} {:>4} {:>5} | {:>8} {:>8} | {:>8} {:>8} {:>6} {:>6} | {:>8} {:>8} {:>8} {:>8}",
        "n",
        "d",
        "k",
        "sgemm",
        "tf32gemm",
        "fusedS",
        "fusedT",
        "S/sg",
        "T/tf",
        "it.lib",
        "it.libT",
        "it.fusS",
        "it.fusT"
    );
    for shape in cli.lloyd.split(',').filter(|s| !s.trim().is_empty()) {
        let v = parse_dims(shape)?;
        let [n, d, k] = v[..] else {
            return Err(format!("`{shape}` is not NxDxK"));
        };
        let r = lloyd_row(&mut ctx, (n, d, k), cli.reps)?;
        println!(
            "{:>9} {:>4} {:>5} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} {:>6.2} {:>6.2} | {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            r.n, r.d, r.k, r.sgemm_ms, r.tf32_gemm_ms, r.fused_strict_assign_ms,
            r.fused_tf32_assign_ms, r.fused_strict_over_sgemm_rate,
            r.fused_tf32_over_tf32_gemm_rate, r.iteration_library_ms,
            r.iteration_library_tf32_ms, r.iteration_fused_strict_ms, r.iteration_fused_tf32_ms
        );
        report.lloyd.push(r);
    }
    if !cli.smooth.trim().is_empty() {
        let v = parse_dims(&cli.smooth)?;
        let [n, d] = v[..] else {
            return Err(format!("`{}` is not NxD", cli.smooth));
        };
        let r = smooth_row(&mut ctx, (n, d), cli.reps)?;
        println!(
            "kernel smoothing n = m = {n}, d = {d}: fused strict {:.3} ms, fused tf32 {:.3} ms",
            r.fused_strict_ms, r.fused_tf32_ms
        );
        report.smoothing = Some(r);
    }
    if !cli.sparse_gram.trim().is_empty() {
        let parts: Vec<&str> = cli.sparse_gram.split('x').map(str::trim).collect();
        let bad = || format!("`{}` is not NxDxDENSITY", cli.sparse_gram);
        let [n, d, density] = parts[..] else {
            return Err(bad());
        };
        let n: usize = n.parse().map_err(|_| bad())?;
        let d: usize = d.parse().map_err(|_| bad())?;
        let density: f64 = density.parse().map_err(|_| bad())?;
        if n == 0 || d == 0 || !(density > 0.0 && density <= 1.0) {
            return Err(bad());
        }
        let r = sparse_gram_row(&mut ctx, (n, d, density), cli.reps)?;
        println!(
            "sparse gram {n} x {d}, {} entries ({:.3}%): sparse [{}] {:.3} ms | dense syrk {:.3} ms, tf32 {:.3} ms | dense / sparse {:.2}x",
            r.nnz,
            r.density * 100.0,
            r.sparse_plan.join(", "),
            r.sparse_ms,
            r.dense_syrk_ms,
            r.dense_syrk_tf32_ms,
            r.dense_over_sparse
        );
        println!("  plan: {}", r.sparse_why);
        report.sparse_gram = Some(r);
    }
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    println!("{json}");
    if let Some(path) = &cli.json {
        std::fs::write(path, &json).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_contractions: {e}");
            ExitCode::FAILURE
        }
    }
}
