//! Benchmarks Kernel K-means on the paper's shapes: popcorn (the DSL's plans) against the
//! hand-written naive GPU baseline, with the device's ceilings measured first.
//!
//! ```text
//! cargo run --release -p popcorn-bench --bin bench_kkmeans                          # everything, on the GPU
//! cargo run --release -p popcorn-bench --bin bench_kkmeans -- --shapes letter,mnist --k 10 --reps 3
//! cargo run --release -p popcorn-bench --bin bench_kkmeans -- --json bench.json --fashion train-images-idx3-ubyte.gz
//! cargo run --release -p popcorn-bench --bin bench_kkmeans -- --device cpu --scale 0.01 --reps 1   # smoke run
//! cargo run --release -p popcorn-bench --bin bench_kkmeans -- --help
//! ```
//!
//! Without a usable GPU (and without `--device cpu`) it says so and exits with status 0.

mod cli;
mod data;
mod measure;
mod programs;
mod report;
mod threshold;

use clap::Parser;
use cli::Cli;
use data::Points;
use measure::Ceilings;
use popcorn::{Context, DeviceSpec, RuntimeError};
use report::{HalfRun, KRun, Report, ShapeRun};
use std::io::Write;
use std::time::Instant;

/// What can stop the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No usable GPU: not a failure (status 0), the message says what to do.
    #[error("{0}")]
    NoDevice(String),
    /// The flags do not make sense.
    #[error("{0}")]
    Usage(String),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The library's fit failed (the check).
    #[error(transparent)]
    Fit(#[from] popcorn::kkmeans::FitError),
    /// Fashion-MNIST could not be read.
    #[error(transparent)]
    Io(#[from] popcorn::io::IoError),
    /// The JSON could not be written.
    #[error("cannot write `{path}`: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs the command; returns the exit status.
fn main() {
    std::process::exit(status());
}

/// Runs the benchmark; the process status.
fn status() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if let Err(m) = cli.validate() {
        eprintln!("error: {m} (see --help)");
        return 2;
    }
    match run(&cli) {
        Ok(()) => 0,
        Err(BenchError::NoDevice(m)) => {
            println!("{m}");
            0
        }
        Err(e @ BenchError::Usage(_)) => {
            eprintln!("error: {e}");
            2
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// Prints a progress line at once (so that a run cut short still shows how far it went).
macro_rules! say {
    ($($t:tt)*) => {{
        println!($($t)*);
        let _ = std::io::stdout().flush();
    }};
}

fn run(cli: &Cli) -> Result<(), BenchError> {
    let device = match cli.device.resolve() {
        Ok(d) => d,
        Err(e) => {
            return Err(BenchError::NoDevice(format!(
                "bench_kkmeans: no usable GPU ({e}); nothing to benchmark. For a smoke run on the CPU: --device cpu --scale 0.01"
            )))
        }
    };
    let on_gpu = matches!(device, DeviceSpec::Cuda(_));
    if cli.threshold {
        let rows = threshold::sweep(cli)?;
        if let Some(path) = &cli.json {
            let text = serde_json::to_string_pretty(&rows)
                .map_err(|e| BenchError::Usage(e.to_string()))?;
            std::fs::write(path, text)
                .map_err(|e| BenchError::Usage(format!("{}: {e}", path.display())))?;
        }
        return Ok(());
    }
    let ctx = Context::new(device)?;
    let fashion_path = data::find_fashion(cli.fashion.as_deref());
    let shapes = data::select(&cli.shapes, fashion_path.is_some()).map_err(BenchError::Usage)?;
    let mut report = Report::new(cli, ctx.describe(), ctx.dtype().to_string());
    say!("bench_kkmeans on {}", report.device);
    if let Some((free, total)) = ctx.memory_info() {
        say!("memory: {} MiB free of {} MiB", free >> 20, total >> 20);
    }
    let naive_on = on_gpu && !cli.no_naive;
    if !on_gpu && !cli.no_naive {
        report.note("naive baseline skipped: it is a GPU implementation");
    }

    // Ceilings.
    if !cli.no_ceilings {
        let copy_bytes = ((2usize << 30) as f64 * cli.scale).max((16 << 20) as f64) as usize;
        let dim = ((8192.0 * cli.scale.cbrt() / 64.0).round() as usize * 64).max(256);
        let t = Instant::now();
        let c = measure::ceilings(&ctx, copy_bytes, dim, cli.reps, cli.seed)?;
        say!(
            "ceilings: copy {:.0} GB/s (read + write, {} MiB buffer), read {:.0} GB/s, SGEMM {:.1} TFLOP/s ({}^3, strict fp32)  [{:.1} s]",
            c.copy_gb_s,
            c.copy_bytes >> 20,
            c.read_gb_s,
            c.sgemm_tflop_s,
            c.sgemm_dim,
            t.elapsed().as_secs_f64()
        );
        report.ceilings = Some(c);
    }

    // The naive baseline against the library.
    if naive_on && !cli.no_check {
        let (n, d, k) = (3000, 16, 10);
        let blobs = data::blobs(n, d, k, cli.seed);
        let uniform: Vec<f64> = data::uniform(2000, 32, cli.seed ^ 0x5eed)
            .x
            .iter()
            .map(|v| *v as f64)
            .collect();
        for (what, x, n, d) in [("blobs", &blobs, n, d), ("uniform", &uniform, 2000, 32)] {
            let points = popcorn::kkmeans::Points::new(n, d, x)?;
            let c = measure::check(&ctx, what, points, k, cli.iters, device)?;
            say!(
                "check naive vs library ({what} {n} x {d}, k {k}): {} of {n} labels equal, iterations {} vs {}, objective rel. diff {:.1e} -> {}",
                c.same_labels,
                c.naive_iterations,
                c.library_iterations,
                c.objective_rel_diff,
                if c.pass { "PASS" } else { "MISMATCH" }
            );
            report.checks.push(c);
        }
    }

    for shape in &shapes {
        let n = data::scaled(shape.n, cli.scale);
        let t = Instant::now();
        let points = match shape.name {
            "fashion" => match &fashion_path {
                Some(p) => data::fashion(p, n)?,
                None => continue,
            },
            _ => data::uniform(n, shape.d, cli.seed ^ hash(shape.name)),
        };
        let gen_s = t.elapsed().as_secs_f64();
        let mut run = ShapeRun::new(shape.name, &points);
        if let Some(skip) = memory_problem(&ctx, &points) {
            say!("{}: skipped: {skip}", shape.name);
            run.skipped = Some(skip);
            report.shapes.push(run);
            continue;
        }
        match shape_runs(
            cli,
            &ctx,
            &points,
            naive_on,
            report.ceilings.as_ref(),
            &mut run,
        ) {
            Ok(()) => {}
            Err(BenchError::Runtime(e)) => {
                // One shape failing (memory, say) should not lose the others.
                say!("{}: failed: {e}", shape.name);
                run.skipped = Some(format!("failed: {e}"));
            }
            Err(e) => return Err(e),
        }
        say!(
            "{}: {} x {} ({}, made in {:.1} s) done",
            shape.name,
            points.n,
            points.d,
            points.source,
            gen_s
        );
        report::print_shape(&run);
        report.shapes.push(run);
    }

    report.print();
    if let Some(path) = &cli.json {
        report.write_json(path)?;
        say!("wrote {}", path.display());
    }
    Ok(())
}

/// A stable per-shape seed offset.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why the shape cannot fit on the GPU, if it cannot: X and K, plus a margin.
fn memory_problem(ctx: &Context, p: &Points) -> Option<String> {
    let (free, _) = ctx.memory_info()?;
    let need = 4 * (p.n * p.d + p.n * p.n) + (512 << 20);
    (need > free).then(|| {
        format!(
            "needs about {} MiB (X and K) but {} MiB are free",
            need >> 20,
            free >> 20
        )
    })
}

/// Everything measured on one shape: popcorn's kernel matrix and iterations for every k,
/// then (K freed first) the naive baseline's.
fn shape_runs(
    cli: &Cli,
    ctx: &Context,
    points: &Points,
    naive_on: bool,
    ceilings: Option<&Ceilings>,
    run: &mut ShapeRun,
) -> Result<(), BenchError> {
    let (x, upload_ms) = measure::upload(ctx, points)?;
    run.upload_ms = upload_ms;
    let n = points.n;
    let sgemm = ceilings.map(|c| c.sgemm_tflop_s);
    // Milliseconds of moving K's bytes (4 n^2) at `gb_s`.
    let k_bytes_at = |gb_s: f64| 4.0 * (n as f64).powi(2) / (gb_s * 1e9) * 1e3;
    run.copy_floor_ms = ceilings.map(|c| k_bytes_at(c.copy_gb_s));
    let ks: Vec<usize> = cli.ks.iter().copied().filter(|k| *k <= n).collect();
    for k in cli.ks.iter().filter(|k| **k > n) {
        run.notes.push(format!(
            "k = {k} skipped: more clusters than the {n} points"
        ));
    }

    let (kt, kmat) = measure::kernel_matrix(
        ctx,
        popcorn::kkmeans::programs::program("kernel_polynomial"),
        &x,
        false,
        cli.kernel_reps(),
        sgemm,
    )?;
    say!(
        "  popcorn K: {} {:.1} ms ({:.1} TFLOP/s)",
        kt.product,
        kt.median_ms,
        kt.tflop_s
    );
    let kernel_ms = kt.median_ms;
    let strict_ms = kt.median_ms;
    run.popcorn_kernel = Some(kt);
    // The floor of an iteration (with the ceilings): one streaming read of K itself on a GPU;
    // on the CPU, K's bytes at the read ceiling.
    if ceilings.is_some() {
        run.k_read = measure::read_of(ctx, &kmat, cli.reps)?;
    }
    let floor_ms = match &run.k_read {
        Some(r) => Some(r.median_ms),
        None => ceilings.map(|c| k_bytes_at(c.read_gb_s)),
    };
    run.floor_ms = floor_ms;
    if let Some(r) = &run.k_read {
        say!("  read of K: {:.3} ms ({:.0} GB/s)", r.median_ms, r.gb_s);
    }
    if cli.tf32 {
        tf32_runs(cli, ctx, points, &x, strict_ms, sgemm, run)?;
    }
    syrk_variant_runs(cli, ctx, &x, sgemm, run)?;
    for &k in &ks {
        let it = measure::popcorn_iterations(
            ctx, &kmat, k, cli.iters, cli.reps, floor_ms, kernel_ms, true,
        )?;
        say!(
            "  popcorn k {k}: iteration {:.2} ms (distance {:.2} ms), end to end {:.3} s",
            it.iteration_median_ms,
            it.distance_median_ms,
            it.end_to_end_s
        );
        run.runs.push(KRun::new(k, it, points.truth.as_deref()));
    }
    drop(kmat);
    half_runs(cli, points, &ks, floor_ms, sgemm, run)?;

    if naive_on {
        let (kt, kmat) = measure::kernel_matrix(
            ctx,
            programs::program("kernel_polynomial_gemm"),
            &x,
            true,
            cli.kernel_reps(),
            sgemm,
        )?;
        say!(
            "  naive K: {} {:.1} ms ({:.1} TFLOP/s)",
            kt.product,
            kt.median_ms,
            kt.tflop_s
        );
        let kernel_ms = kt.median_ms;
        run.naive_kernel = Some(kt);
        for r in run.runs.iter_mut() {
            let it = measure::naive_iterations(
                ctx, &kmat, r.k, cli.iters, cli.reps, floor_ms, kernel_ms,
            )?;
            say!(
                "  naive k {}: iteration {:.2} ms (row sums {:.2} ms), end to end {:.3} s",
                r.k,
                it.iteration_median_ms,
                it.distance_median_ms,
                it.end_to_end_s
            );
            r.add_naive(it, points.truth.as_deref());
        }
    }
    Ok(())
}

/// `--kernel-storage`: for each 16-bit format, K built in it and every k's iterations over it
/// (the sparse-left distance variant is skipped: its SpMM reads a widened copy of K).
fn half_runs(
    cli: &Cli,
    points: &Points,
    ks: &[usize],
    floor_ms: Option<f64>,
    sgemm: Option<f64>,
    run: &mut ShapeRun,
) -> Result<(), BenchError> {
    // The largest |K| the points give (Cauchy-Schwarz): fp16 holds at most 65504.
    let max_norm2 = points
        .x
        .chunks(points.d.max(1))
        .map(|r| r.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>())
        .fold(0.0f64, f64::max);
    let bound = popcorn::kkmeans::Kernel::Polynomial {
        gamma: measure::GAMMA,
        coef0: measure::COEF0,
        degree: measure::DEGREE,
    }
    .bound_from_norm(max_norm2);
    for &half in &cli.kernel_storage {
        if bound > half.max_finite() {
            let note = format!(
                "K in {half} skipped: its values may reach {bound:.3e}, beyond {half}'s {:.0}",
                half.max_finite()
            );
            say!("  {note}");
            run.notes.push(note);
            continue;
        }
        let base = Context::new(cli.device)?;
        // With --tf32, K's product on TF32 tensor cores too (the fastest stored K).
        let mut config = base.config().clone().with_half_storage("K", half);
        config.tf32 = cli.tf32;
        let ctx = base.with_config(config);
        let (x, _) = measure::upload(&ctx, points)?;
        let (kt, kmat) = measure::kernel_matrix(
            &ctx,
            popcorn::kkmeans::programs::program("kernel_polynomial"),
            &x,
            false,
            cli.kernel_reps(),
            sgemm,
        )?;
        say!(
            "  popcorn K in {half}{}: {} {:.1} ms",
            if cli.tf32 { " (TF32)" } else { "" },
            kt.product,
            kt.median_ms
        );
        for &k in ks {
            let it = measure::popcorn_iterations(
                &ctx,
                &kmat,
                k,
                cli.iters,
                cli.reps,
                floor_ms,
                kt.median_ms,
                false,
            )?;
            let f32_run = run.runs.iter().find(|r| r.k == k);
            let iteration_over_f32 =
                f32_run.map(|r| it.iteration_median_ms / r.popcorn.iteration_median_ms);
            let objective_rel_change = f32_run.map(|r| {
                (it.objective - r.popcorn.objective).abs() / r.popcorn.objective.abs().max(1e-300)
            });
            let label_agreement = f32_run.map(|r| {
                let same = r
                    .popcorn
                    .labels
                    .iter()
                    .zip(&it.labels)
                    .filter(|(a, b)| a == b)
                    .count();
                same as f64 / it.labels.len().max(1) as f64
            });
            say!(
                "  popcorn {half} k {k}: iteration {:.3} ms (distance {:.3} ms, {} x the fp32 floor), labels {} equal to f32's, objective {} relative to f32's; end to end {:.1} ms (K + {} iterations)",
                it.iteration_median_ms,
                it.distance_median_ms,
                it.distance_over_floor.map_or("-".into(), |r| format!("{r:.3}")),
                label_agreement.map_or("-".into(), |a| format!("{:.2}%", 100.0 * a)),
                objective_rel_change.map_or("-".into(), |c| format!("{c:.2e}")),
                kt.median_ms + cli.iters as f64 * it.iteration_median_ms,
                cli.iters
            );
            run.half_runs.push(HalfRun {
                format: half.to_string(),
                k,
                kernel: kt.clone(),
                distance_over_fp32_floor: it.distance_over_floor,
                iterations: it,
                iteration_over_f32,
                label_agreement,
                objective_rel_change,
            });
        }
    }
    Ok(())
}

/// Times popcorn's kernel matrix of `x` planned with `config` (K itself is dropped).
fn kernel_matrix_with(
    cli: &Cli,
    config: popcorn::PlannerConfig,
    x: &popcorn::Tensor,
    sgemm: Option<f64>,
) -> Result<measure::KernelMatrix, BenchError> {
    let ctx = Context::new(cli.device)?.with_config(config);
    let (timing, _k) = measure::kernel_matrix(
        &ctx,
        popcorn::kkmeans::programs::program("kernel_polynomial"),
        x,
        false,
        cli.kernel_reps(),
        sgemm,
    )?;
    Ok(timing)
}

/// `--syrk-variants`: the kernel matrix with each SYRK implementation, strict fp32 and (with
/// `--tf32`) TF32.
fn syrk_variant_runs(
    cli: &Cli,
    ctx: &Context,
    x: &popcorn::Tensor,
    sgemm: Option<f64>,
    run: &mut ShapeRun,
) -> Result<(), BenchError> {
    let modes: &[bool] = if cli.tf32 { &[false, true] } else { &[false] };
    for name in &cli.syrk_variants {
        let Some((block_rows, overlap)) = cli::syrk_variant(name) else {
            continue;
        };
        for &tf32 in modes {
            let config = popcorn::PlannerConfig {
                tf32,
                syrk_block_rows: block_rows,
                overlap,
                ..ctx.config().clone()
            };
            let kt = kernel_matrix_with(cli, config, x, sgemm)?;
            say!(
                "  K with SYRK {name}{}: {:.1} ms ({:.1} TFLOP/s on n^2 d)  [{}]",
                if tf32 { " tf32" } else { "" },
                kt.median_ms,
                kt.tflop_s,
                kt.plan
            );
            run.syrk_variants.push(report::SyrkVariant {
                variant: name.clone(),
                tf32,
                kernel: kt,
            });
        }
    }
    Ok(())
}

/// TF32 for the kernel matrix: its time against strict fp32 and, on data with true classes,
/// what it changes in a whole fit (objective, labels, ARI).
fn tf32_runs(
    cli: &Cli,
    ctx: &Context,
    points: &Points,
    x: &popcorn::Tensor,
    strict_ms: f64,
    sgemm: Option<f64>,
    run: &mut ShapeRun,
) -> Result<(), BenchError> {
    let config = popcorn::PlannerConfig {
        tf32: true,
        ..ctx.config().clone()
    };
    let kt = kernel_matrix_with(cli, config, x, sgemm)?;
    say!(
        "  popcorn K with TF32: {} {:.1} ms ({:.1} TFLOP/s), {:.2}x strict fp32",
        kt.product,
        kt.median_ms,
        kt.tflop_s,
        strict_ms / kt.median_ms
    );
    run.popcorn_kernel_tf32 = Some(kt);
    let Some(truth) = points.truth.as_deref() else {
        return Ok(());
    };
    let k = 10;
    let x64: Vec<f64> = points.x.iter().map(|v| *v as f64).collect();
    let pts = popcorn::kkmeans::Points::new(points.n, points.d, &x64)?;
    let fit = |tf32: bool| {
        popcorn::kkmeans::KernelKMeans::new(k)
            .kernel(popcorn::kkmeans::Kernel::POLYNOMIAL_DEFAULT)
            .device(cli.device)
            .tf32(tf32)
            .max_iter(300)
            .fit(pts)
    };
    let (strict, fast): (popcorn::kkmeans::FitResult, popcorn::kkmeans::FitResult) =
        (fit(false)?, fit(true)?);
    let same = strict
        .labels
        .iter()
        .zip(&fast.labels)
        .filter(|(a, b)| a == b)
        .count();
    let ari = |l: &[u32]| {
        let l: Vec<i64> = l.iter().map(|v| *v as i64).collect();
        popcorn::metrics::adjusted_rand_index(truth, &l)
    };
    let acc = report::Tf32Accuracy {
        k,
        objective_strict: strict.objective,
        objective_tf32: fast.objective,
        objective_rel_change: (fast.objective - strict.objective).abs() / strict.objective.abs(),
        label_agreement: same as f64 / points.n as f64,
        ari_strict: ari(&strict.labels),
        ari_tf32: ari(&fast.labels),
        iterations: (strict.iterations, fast.iterations),
    };
    say!(
        "  TF32 accuracy (k {k}, to convergence): objective {:.6e} vs {:.6e} ({:.2e} relative), {:.2}% labels equal, ARI {:.4} vs {:.4}, iterations {} vs {}",
        acc.objective_strict,
        acc.objective_tf32,
        acc.objective_rel_change,
        100.0 * acc.label_agreement,
        acc.ari_strict,
        acc.ari_tf32,
        acc.iterations.0,
        acc.iterations.1
    );
    run.tf32_accuracy = Some(acc);
    Ok(())
}
