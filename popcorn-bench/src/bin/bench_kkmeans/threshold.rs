//! The GEMM/SYRK threshold for `X * X^T` (`X: n x d`), measured: the same product planned
//! both ways (the planner's `syrk_gemm_ratio` forced to 0 and to infinity), timed with CUDA
//! events, over a grid of n and d. SYRK does half the flops of GEMM but runs at a lower rate
//! and needs the triangle copied into the other half; which wins depends on n/d.

use super::measure::median;
use super::{BenchError, Cli};
use popcorn::{Args, Context, Outputs, PlannerConfig, Program};
use serde::Serialize;

/// One (n, d) point of the sweep.
#[derive(Debug, Serialize)]
pub struct ThresholdRow {
    /// Points.
    pub n: usize,
    /// Features.
    pub d: usize,
    /// Median milliseconds of `K = X * X^T` through SYRK (full output).
    pub syrk_ms: f64,
    /// The same through GEMM.
    pub gemm_ms: f64,
}

/// Times `X * X^T` through SYRK and GEMM for every (n, d) of the grid (scaled by `--scale`).
pub fn sweep(cli: &Cli) -> Result<Vec<ThresholdRow>, BenchError> {
    let program = Program::parse("fn gram(X: Dense[n, d]) -> (K: Dense[n, n]) { K = X * X^T; }")
        .map_err(popcorn::RuntimeError::from)?;
    let ctx_for = |ratio: f64| -> Result<Context, BenchError> {
        let ctx = Context::new(cli.device)?;
        let config = PlannerConfig {
            syrk_gemm_ratio: Some(ratio),
            ..ctx.config().clone()
        };
        Ok(ctx.with_config(config))
    };
    let (syrk_ctx, gemm_ctx) = (ctx_for(f64::INFINITY)?, ctx_for(0.0)?);
    let scale = |v: usize| ((v as f64 * cli.scale.sqrt()).round() as usize).max(16);
    let mut rows = Vec::new();
    println!(
        "GEMM vs SYRK for K = X * X^T (median of {} reps each)",
        cli.reps
    );
    println!("       n       d     n/d    syrk ms    gemm ms   faster");
    for n in [10000, 40000, 70000].map(scale) {
        for d in [16, 64, 256, 1024, 4096].map(scale) {
            let mut seed = (n * 31 + d) as u64 | 1;
            let x: Vec<f32> = (0..n * d)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 40) as f32 / (1u64 << 24) as f32
                })
                .collect();
            let time_with = |ctx: &Context| -> Result<f64, BenchError> {
                let xt = ctx.dense_f32(n, d, &x)?;
                let mut out = Outputs::default();
                let args = Args::new().tensor("X", &xt);
                ctx.run_into(&program, &args, &mut out)?;
                let mut ms = Vec::new();
                for _ in 0..cli.reps.max(1) {
                    let ((), t) = ctx.time(|| ctx.run_into(&program, &args, &mut out))?;
                    ms.push(t);
                }
                Ok(median(&ms))
            };
            let syrk_ms = time_with(&syrk_ctx)?;
            let gemm_ms = time_with(&gemm_ctx)?;
            println!(
                "{n:>8} {d:>7} {:>7.1} {syrk_ms:>10.2} {gemm_ms:>10.2}   {}",
                n as f64 / d as f64,
                if syrk_ms < gemm_ms { "syrk" } else { "gemm" }
            );
            rows.push(ThresholdRow {
                n,
                d,
                syrk_ms,
                gemm_ms,
            });
        }
    }
    Ok(rows)
}
