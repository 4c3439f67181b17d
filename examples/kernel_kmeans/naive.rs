//! `-l naive`: the hand-written naive GPU baseline (`popcorn_bench::naive`) in place
//! of popcorn's plans, with the same kernel matrix, start and stopping rules as the library.

use super::cli::{Cli, InitName};
use super::data::Data;
use super::error::CliError;
use popcorn::kkmeans::{
    AlgorithmChoice, FitResult, Init, Kernel, KernelKMeans, SplitMix64, Timings,
};
use popcorn::{Args, Context, DeviceSpec};
use popcorn_bench::naive::{naive_kkmeans, NaiveRunOptions};
use std::time::Instant;

/// The flags `-l naive` cannot honour, as a usage error.
pub fn check_flags(cli: &Cli, device: DeviceSpec) -> Result<(), CliError> {
    if !matches!(device, DeviceSpec::Cuda(_)) {
        return Err(CliError::Usage(
            "the naive baseline (-l naive) is a GPU implementation; run it on a GPU (--device cuda) or use -l popcorn".into(),
        ));
    }
    if cli.init == InitName::KMeansPlusPlus {
        return Err(CliError::Usage(
            "-l naive starts from --init mod or random; use -l popcorn for kmeans++".into(),
        ));
    }
    if cli.zscore {
        return Err(CliError::Usage(
            "-l naive does not standardise features; drop --zscore or use -l popcorn".into(),
        ));
    }
    if cli.weights.is_some() {
        return Err(CliError::Usage(
            "-l naive does not weigh points; drop --weights or use -l popcorn".into(),
        ));
    }
    Ok(())
}

/// The library's kernel program and its scalars for `kernel` on `d` features.
fn kernel_program(kernel: &Kernel, d: usize) -> (&'static str, Vec<(&'static str, f64)>) {
    let by_d = |g: Option<f64>| g.unwrap_or(1.0 / d as f64);
    match *kernel {
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } => (
            "kernel_polynomial",
            vec![("gamma", gamma), ("coef0", coef0), ("degree", degree)],
        ),
        Kernel::Gaussian { gamma } => ("kernel_gaussian", vec![("gamma", by_d(gamma))]),
        Kernel::Sigmoid { gamma, coef0 } => (
            "kernel_sigmoid",
            vec![("gamma", by_d(gamma)), ("coef0", coef0)],
        ),
        Kernel::Linear | Kernel::Precomputed => ("kernel_linear", vec![]),
    }
}

/// Clusters `data` with the naive baseline: K through popcorn (or read, for a precomputed
/// kernel), then the baseline's iterations from each run's start; the lowest objective wins.
pub fn fit(params: &KernelKMeans, data: &Data) -> Result<FitResult, CliError> {
    let start = Instant::now();
    let (n, k) = (data.n, params.k);
    let ctx = Context::new(params.device)?.with_dtype(params.dtype);
    let t = Instant::now();
    let (kmat, upload_s, kernel_matrix_s) = if params.kernel == Kernel::Precomputed {
        let kmat = ctx.dense(n, n, &data.x)?;
        ctx.synchronize()?;
        (kmat, t.elapsed().as_secs_f64(), 0.0)
    } else {
        let x = ctx.dense(n, data.d, &data.x)?;
        ctx.synchronize()?;
        let upload_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (name, scalars) = kernel_program(&params.kernel, data.d);
        let mut args = Args::new().tensor("X", &x);
        for (s, v) in &scalars {
            args = args.scalar(s, *v);
        }
        let kmat = ctx
            .run(popcorn::kkmeans::programs::program(name), &args)?
            .take("K")?;
        ctx.synchronize()?;
        (kmat, upload_s, t.elapsed().as_secs_f64())
    };
    let mut naive = naive_kkmeans(&ctx, n, k)?;
    let options = NaiveRunOptions {
        max_iter: params.max_iter,
        tol: params.check_convergence.then_some(params.tol),
    };
    let runs = if matches!(params.init, Init::Random { .. }) {
        params.n_init
    } else {
        1
    };
    let t = Instant::now();
    let mut best = None;
    for run in 0..runs {
        let labels0: Vec<u32> = match &params.init {
            Init::Random { seed } => {
                let mut rng = SplitMix64::new(seed.wrapping_add(run as u64));
                (0..n).map(|_| rng.below(k) as u32).collect()
            }
            _ => (0..n).map(|i| (i % k) as u32).collect(),
        };
        let r = naive.run(&kmat, &labels0, &options)?;
        if best
            .as_ref()
            .is_none_or(|(_, b): &(usize, popcorn_bench::naive::NaiveRun)| {
                r.objective < b.objective
            })
        {
            best = Some((run, r));
        }
    }
    let iterations_s = t.elapsed().as_secs_f64();
    let (best_run, r) = best.ok_or_else(|| CliError::Usage("no run".into()))?;
    let mut sizes = vec![0usize; k];
    for l in &r.labels {
        sizes[*l as usize] += 1;
    }
    Ok(FitResult {
        objective: r.objective,
        objective_history: r.objective_history,
        iterations: r.iterations,
        converged: r.converged,
        empty_clusters: sizes.iter().filter(|s| **s == 0).count(),
        labels: r.labels,
        best_run,
        timings: Timings {
            upload_s,
            kernel_matrix_s,
            init_s: 0.0,
            iterations_s,
            per_iteration_s: r.per_iteration_s,
            total_s: start.elapsed().as_secs_f64(),
        },
        device: format!("{} (naive baseline)", ctx.describe()),
        dtype: ctx.dtype(),
        params: params.clone(),
        weights: None,
        algorithm: AlgorithmChoice {
            reason: "the naive baseline stores K".into(),
            summary: "stored (naive baseline)".into(),
            ..AlgorithmChoice::given(n, ctx.dtype())
        },
        model: None,
    })
}
