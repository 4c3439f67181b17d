//! Stored or recomputed kernel matrix: a fit either builds K once (`n x n` in memory) and reads
//! it every iteration, or recomputes its tiles from the points every iteration inside the
//! contraction that sums them by cluster (`kkmeans_recompute_*`), never holding K. `Auto` asks
//! the planner's cost model ([`Plan::estimated_seconds`](crate::Plan::estimated_seconds)) which
//! is faster for the expected number of iterations, among the choices that fit in memory. A
//! third, the kernel's explicit features (polynomial kernels of degree 1 or 2), is weighed
//! with these by `feature_choice::choose`.

use super::model::{weighted_name, KernelPrograms};
use super::{programs, FitError};
use crate::{Context, DType, Plan, PlannerConfig};
use popcorn_dsl::plan::StepOp;
use popcorn_dsl::target::{Target, TargetKind};
use popcorn_dsl::ContractionPolicy;
use serde::Serialize;
use std::fmt;

/// How a fit gets the kernel matrix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Algorithm {
    /// The faster of the two that fits in memory, by the target's cost model.
    #[default]
    Auto,
    /// K built once and stored (`n^2` values), read every iteration.
    Stored,
    /// K's tiles recomputed from the points every iteration, never stored: memory linear in
    /// `n`, work `2 n^2 d` flops per iteration.
    Recompute,
    /// The kernel's explicit features (polynomial kernels of degree 1 or 2): the points mapped
    /// to `phi(x)` with `phi(x) . phi(y) = kappa(x, y)`, `D <= (d + 1) (d + 2) / 2` of them,
    /// and the linear kernel's recompute iterations on them (Lloyd's algorithm in feature
    /// space): `O(n D k)` work per iteration, memory `n D` values, no `n x n` value; the same
    /// labels and objective as the other two, up to rounding. Where `n D` values do not fit
    /// in free memory (or [`KernelKMeans::memory_limit`](super::KernelKMeans::memory_limit)),
    /// every iteration builds them block of rows by block, never whole
    /// ([`AlgorithmChoice::feature_block_rows`]): memory linear in `n`, `d` values a point.
    Features,
}

impl Algorithm {
    /// The name used by the CLI (`auto`, `stored`, `recompute`, `features`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Stored => "stored",
            Algorithm::Recompute => "recompute",
            Algorithm::Features => "features",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Algorithm, String> {
        match s {
            "auto" => Ok(Algorithm::Auto),
            "stored" => Ok(Algorithm::Stored),
            "recompute" => Ok(Algorithm::Recompute),
            "features" => Ok(Algorithm::Features),
            other => Err(format!(
                "unknown algorithm `{other}`; use auto, stored, recompute or features"
            )),
        }
    }
}

/// Iterations a fit is expected to run, for comparing a one-time cost (building K) with a
/// per-iteration one; `max_iter` caps it.
pub const EXPECTED_ITERATIONS: usize = 20;

/// What a fit runs, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AlgorithmChoice {
    /// [`Algorithm::Stored`], [`Algorithm::Recompute`] or [`Algorithm::Features`].
    pub algorithm: Algorithm,
    /// Why, in words.
    pub reason: String,
    /// The choice and its reason in a few words, for summaries.
    pub summary: String,
    /// Bytes of the stored kernel matrix.
    pub kernel_matrix_bytes: u64,
    /// Estimated seconds of the stored algorithm: building K once, then the iterations.
    pub stored_s: f64,
    /// Estimated seconds of the recompute algorithm over the same iterations.
    pub recompute_s: f64,
    /// The iterations both estimates assume.
    pub iterations: usize,
    /// K (held in 16 bits) is built by one kernel that computes its product tile by tile and
    /// writes K directly, because the product stored in f32 first would not fit in memory.
    #[serde(default)]
    pub fused_build: bool,
    /// The power of two a stored K held in 16 bits was multiplied by to fit the format's
    /// range (1 unless fp16 needed it); objectives and centroid norms are reported unscaled.
    pub kernel_scale: f64,
    /// Estimated seconds of the features algorithm over the same iterations (infinite where
    /// the kernel has no small feature map or it was not estimated).
    #[serde(default)]
    pub features_s: f64,
    /// Features per point of the features algorithm (0 where the kernel has none).
    #[serde(default)]
    pub feature_dim: usize,
    /// Rows of the blocks the features algorithm builds its features in every iteration,
    /// never holding them whole, where they do not fit in memory whole; 0 where it holds them
    /// whole (or runs another algorithm).
    #[serde(default)]
    pub feature_block_rows: usize,
}

impl AlgorithmChoice {
    /// The choice for a kernel matrix the caller gives (`fit_precomputed`): stored.
    pub fn given(n: usize, dtype: DType) -> AlgorithmChoice {
        AlgorithmChoice {
            algorithm: Algorithm::Stored,
            reason: "the kernel matrix is given".into(),
            summary: "stored (given)".into(),
            kernel_matrix_bytes: (n as u64)
                .saturating_mul(n as u64)
                .saturating_mul(dtype.size_bytes() as u64),
            stored_s: 0.0,
            recompute_s: f64::INFINITY,
            iterations: 0,
            fused_build: false,
            kernel_scale: 1.0,
            features_s: f64::INFINITY,
            feature_dim: 0,
            feature_block_rows: 0,
        }
    }
}

/// The planner configuration of the recompute algorithm: its kernel products are always fused
/// into their consumers (K is never stored, whatever the cost model would say of one product
/// alone at a large depth), unless contractions are turned off (`POPCORN_CONTRACTIONS=never`).
pub(crate) fn recompute_config(config: &PlannerConfig) -> PlannerConfig {
    let mut config = config.clone();
    if config.contractions == ContractionPolicy::Auto {
        config.contractions = ContractionPolicy::Always;
    }
    config
}

/// The plan of `program` at `dims` on the context's target with `config` (not allocated).
pub(super) fn plan_of(
    ctx: &Context,
    config: &PlannerConfig,
    program: &str,
    dims: &[(&str, usize)],
) -> Result<Plan, FitError> {
    plan_on(&ctx.target(), config, program, dims)
}

/// The plan of `program` at `dims` on `target` with `config` (not allocated).
fn plan_on(
    target: &Target,
    config: &PlannerConfig,
    program: &str,
    dims: &[(&str, usize)],
) -> Result<Plan, FitError> {
    let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let plan = popcorn_dsl::plan(
        programs::program(program),
        &dims,
        config,
        target,
        &Default::default(),
    )
    .map_err(crate::RuntimeError::from)?;
    Ok(plan)
}

/// Chooses for `requested` on `n x d` points, `k` clusters, up to `max_iter` iterations, by
/// the plans of the weighted iterations where `weighted`.
pub(crate) fn choose(
    requested: Algorithm,
    ctx: &Context,
    kernel: &KernelPrograms,
    (n, d, k): (usize, usize, usize),
    max_iter: usize,
    weighted: bool,
) -> Result<AlgorithmChoice, FitError> {
    // The features algorithm is weighed against these by feature_choice::choose; here it stands
    // for the choice between the other two.
    let requested = match requested {
        Algorithm::Features => Algorithm::Auto,
        other => other,
    };
    let size = ctx.dtype().size_bytes() as u64;
    let config = ctx.config();
    let iterations = EXPECTED_ITERATIONS.min(max_iter).max(1);
    let build_plan = plan_of(ctx, config, &kernel.name("kernel"), &[("n", n), ("d", d)])?;
    let library_build = build_plan.estimated_seconds();
    // A 16-bit K may be written by one contraction kernel instead, where that is estimated
    // faster than the library's product (whose kernels load at their first use) and a map.
    let contraction_build = faster_contraction_build(
        &ctx.target(),
        config,
        kernel,
        (n, d),
        (&build_plan, library_build),
    )?;
    let build = contraction_build
        .as_ref()
        .map_or(library_build, |(_, seconds)| *seconds);
    // K as the build plan holds it (in 16 bits where the context says so).
    let k_size = build_plan
        .outputs
        .iter()
        .find(|(name, _)| name == "K")
        .map_or(size as usize, |(_, v)| {
            build_plan.value(*v).elem_bytes(ctx.dtype())
        }) as u64;
    // Over several ranks each holds its block of rows of K (rank 0's, the largest, is what
    // the memory of rank 0's device, below, must take).
    let ranks = config.partition.as_ref().map_or(1, |p| p.ranks.max(1));
    let k_rows = n.div_ceil(ranks) as u64;
    let kernel_matrix_bytes = k_rows.saturating_mul(n as u64).saturating_mul(k_size);
    let per_rank = if ranks > 1 {
        format!(" per rank ({ranks} ranks)")
    } else {
        String::new()
    };
    // What building K needs besides K (an f32 product before a 16-bit K is rounded from it).
    let build_workspace = contraction_build
        .as_ref()
        .map_or(&build_plan, |(plan, _)| plan)
        .workspace_bytes() as u64;
    // An algorithm whose plan cannot be made (a plan the partitioning pass cannot split)
    // leaves the other, unless it is asked for: its error then.
    let unless_asked = |plan: Result<Plan, FitError>, algorithm: Algorithm| match plan {
        Err(e) if requested == algorithm => Err(e),
        other => Ok(other.map_err(|e| e.to_string())),
    };
    let stored_iteration = unless_asked(
        plan_of(
            ctx,
            config,
            &weighted_name("kkmeans_iteration", weighted),
            &[("n", n), ("k", k)],
        ),
        Algorithm::Stored,
    )?
    .map(|p| p.estimated_seconds());
    let recompute = unless_asked(
        plan_of(
            ctx,
            &recompute_config(config),
            &weighted_name(&kernel.name("kkmeans_recompute"), weighted),
            &[("n", n), ("d", d), ("k", k)],
        ),
        Algorithm::Recompute,
    )?;
    let recompute_iteration = recompute
        .as_ref()
        .map_or(f64::INFINITY, |p| p.estimated_seconds());
    // Where the target cannot sum this many clusters inside a contraction (or contractions are
    // off), the recompute plan stores K after all.
    let recomputes = recompute.as_ref().is_ok_and(|p| !uses_library_products(p));
    let max_labels = ctx.target().contractions.map_or(0, |t| t.max_labels);
    let stored_s = build + iterations as f64 * stored_iteration.as_ref().unwrap_or(&f64::INFINITY);
    let recompute_s = iterations as f64 * recompute_iteration;
    // K, plus the iteration's n x k values and the points, must fit in what is free, with
    // what building K takes besides (an f32 product before a 16-bit K is rounded from it). A
    // 16-bit K can also be built by one kernel that writes it from the product's tiles.
    let extra = 3 * (n * k.max(d)) as u64 * size;
    let needed = kernel_matrix_bytes
        .saturating_add(build_workspace)
        .saturating_add(extra);
    let free = ctx.memory_info().map(|(free, _)| free as u64);
    let fits_plain = free.is_none_or(|f| needed <= f);
    // Where the library's build does not fit, the contraction kernel's may. Where that is
    // already the build (estimated faster), `needed` counted its workspace: it does not fit
    // either.
    let faster_build = contraction_build.is_some();
    let fused_workspace = if fits_plain || faster_build || config.half_storage.is_empty() {
        None
    } else {
        let config = fused_build_config(config);
        Some(
            plan_of(ctx, &config, &kernel.name("kernel"), &[("n", n), ("d", d)])?.workspace_bytes()
                as u64,
        )
    };
    let fits_fused = fused_workspace.is_some_and(|w| {
        free.is_none_or(|f| kernel_matrix_bytes.saturating_add(w).saturating_add(extra) <= f)
    });
    let fused_build = faster_build || fits_fused;
    let fits = fits_plain || fits_fused;
    let memory = if ctx.is_gpu() {
        "GPU memory"
    } else {
        "host memory"
    };
    let (algorithm, reason) = match requested {
        Algorithm::Stored => (Algorithm::Stored, "asked for".to_string()),
        // Not reached: `requested` stands for Auto above (feature_choice::choose weighs the
        // features algorithm itself).
        Algorithm::Features => (Algorithm::Stored, "asked for".to_string()),
        Algorithm::Recompute | Algorithm::Auto if !recomputes => {
            let why = if let Err(e) = &recompute {
                format!("the recompute algorithm cannot be planned here ({e})")
            } else if config.contractions == ContractionPolicy::Never {
                "contractions are turned off (POPCORN_CONTRACTIONS=never)".to_string()
            } else if k > max_labels {
                format!("the recompute algorithm sums at most {max_labels} clusters on this device, k = {k}")
            } else {
                "the planner kept the kernel product a library call (POPCORN_LOG=fusion says why)"
                    .to_string()
            };
            if requested == Algorithm::Recompute || !fits {
                let fix = if k > max_labels {
                    format!(
                        "use k <= {max_labels} or the stored kernel matrix (--algorithm stored)"
                    )
                } else {
                    "use the stored kernel matrix (--algorithm stored)".to_string()
                };
                return Err(FitError::Parameter(format!(
                    "{why}; {fix}{}",
                    if fits {
                        ""
                    } else {
                        ", which does not fit in memory here"
                    }
                )));
            }
            (Algorithm::Stored, why)
        }
        Algorithm::Recompute => (Algorithm::Recompute, "asked for".to_string()),
        Algorithm::Auto if stored_iteration.is_err() => (
            Algorithm::Recompute,
            format!(
                "the stored algorithm cannot be planned here ({})",
                stored_iteration.as_ref().err().map_or("", |e| e.as_str())
            ),
        ),
        Algorithm::Auto if !fits => (
            Algorithm::Recompute,
            format!(
                "K would take {}{per_rank} but only {} of {memory} are free",
                bytes_text(kernel_matrix_bytes),
                bytes_text(free.unwrap_or(0))
            ),
        ),
        Algorithm::Auto => {
            let winner = if recompute_s < stored_s {
                Algorithm::Recompute
            } else {
                Algorithm::Stored
            };
            (
                winner,
                format!(
                    "estimated faster over {iterations} iterations: stored {:.3} s (K built in {:.3} s, {:.3} ms per iteration), recompute {:.3} s ({:.3} ms per iteration)",
                    stored_s,
                    build,
                    stored_iteration.as_ref().map_or(f64::INFINITY, |s| *s) * 1e3,
                    recompute_s,
                    recompute_iteration * 1e3
                ),
            )
        }
    };
    let fused_build = fused_build && algorithm == Algorithm::Stored;
    let reason = if fused_build && faster_build {
        format!(
            "{reason}; K is built by one kernel writing it from the product's tiles (estimated \
             {:.1} ms against {:.1} ms through the library, its kernels' first use included)",
            build * 1e3,
            (library_build + LIBRARY_FIRST_USE_S) * 1e3
        )
    } else if fused_build {
        format!(
            "{reason}; K is built by one kernel writing it from the product's tiles (the f32 \
             product would not fit beside it)"
        )
    } else {
        reason
    };
    let summary = match requested {
        Algorithm::Auto if !fits => format!(
            "{algorithm} (K needs {}{per_rank}, {} free)",
            bytes_text(kernel_matrix_bytes),
            bytes_text(free.unwrap_or(0))
        ),
        Algorithm::Auto if recomputes => format!(
            "{algorithm} (estimated {:.3} s against {:.3} s)",
            stored_s.min(recompute_s),
            stored_s.max(recompute_s)
        ),
        _ => format!("{algorithm} ({reason})"),
    };
    Ok(AlgorithmChoice {
        algorithm,
        reason,
        summary,
        kernel_matrix_bytes,
        stored_s,
        recompute_s,
        iterations,
        fused_build,
        kernel_scale: 1.0,
        features_s: f64::INFINITY,
        feature_dim: 0,
        feature_block_rows: 0,
    })
}

/// The configuration that builds K by one fused kernel (see [`AlgorithmChoice::fused_build`]),
/// at the context's precision (run 26's TF32 build, 180 times slower than the strict one,
/// counted the compilation of its variants: warm, it writes acoustic's 12.4 GB bf16 K in 51
/// ms, BENCHMARKS.md run 40).
pub(crate) fn fused_build_config(config: &PlannerConfig) -> PlannerConfig {
    PlannerConfig {
        contractions: ContractionPolicy::Always,
        ..config.clone()
    }
}

/// What a build through the library's products costs besides its estimate in a process that
/// has not run them yet: the driver loads each of their kernels at its first launch. Building
/// letter's K (10500 x 26) by a SYRK of 21 block rows and a map took 27-127 ms in fresh
/// processes against 3.6-4.4 ms for the contraction kernel (BENCHMARKS.md, run 40). The lower
/// end of what was measured, so that only builds the estimates already put close go to the
/// contraction kernel on its account.
pub(super) const LIBRARY_FIRST_USE_S: f64 = 0.015;

/// A size in bytes for people: GiB, MiB or KiB, whichever reads best.
pub(crate) fn bytes_text(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        b_ if b_ >= 1 << 30 => format!("{:.2} GiB", b / (1u64 << 30) as f64),
        b_ if b_ >= 1 << 20 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        _ => format!("{:.1} KiB", b / 1024.0),
    }
}

/// Whether `plan` runs a product through the library (a GEMM or a SYRK step).
pub(super) fn uses_library_products(plan: &Plan) -> bool {
    plan.steps
        .iter()
        .any(|s| matches!(s.op, StepOp::Gemm(_) | StepOp::Syrk { .. }))
}

/// The plan that builds a 16-bit K by one contraction kernel (no f32 product in memory), with
/// its estimated seconds, where that is below `library`'s (the build through the library's
/// products, with its estimate) plus the library's first use; on a GPU target, with K held in
/// 16 bits, contractions left to the planner and one rank. `None` elsewhere, or where the
/// planner does not make it one kernel.
fn faster_contraction_build(
    target: &Target,
    config: &PlannerConfig,
    kernel: &KernelPrograms,
    (n, d): (usize, usize),
    (library, library_s): (&Plan, f64),
) -> Result<Option<(Plan, f64)>, FitError> {
    if config.half_storage.is_empty()
        || config.contractions != ContractionPolicy::Auto
        || config.partition.is_some()
        || target.kind != TargetKind::Cuda
        || !uses_library_products(library)
    {
        return Ok(None);
    }
    let plan = plan_on(
        target,
        &fused_build_config(config),
        &kernel.name("kernel"),
        &[("n", n), ("d", d)],
    )?;
    let seconds = plan.estimated_seconds();
    let faster = seconds < library_s + LIBRARY_FIRST_USE_S;
    Ok((faster && !uses_library_products(&plan)).then_some((plan, seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkmeans::Kernel;
    use popcorn_dsl::plan::collective::PartitionSpec;

    /// In a context whose plans run partitioned over two ranks both algorithms plan, weighted
    /// or not (the weighted stored iteration's sparse product runs each rank's rows of K), and
    /// each is taken when asked for; where a plan cannot be made at all the request fails
    /// with the planner's reason.
    #[test]
    fn partitioned_contexts_plan_both_algorithms() {
        let ctx = Context::new(crate::DeviceSpec::Cpu).expect("cpu");
        let config = PlannerConfig {
            partition: Some(PartitionSpec::points(2)),
            ..ctx.config().clone()
        };
        let ctx = ctx.with_config(config);
        let programs = KernelPrograms::new(&Kernel::POLYNOMIAL_DEFAULT, 4);
        let shape = (100, 4, 3);
        for weighted in [false, true] {
            for asked in [Algorithm::Stored, Algorithm::Recompute] {
                let chosen = choose(asked, &ctx, &programs, shape, 10, weighted).expect("plans");
                assert_eq!(
                    chosen.algorithm, asked,
                    "weighted {weighted}: {}",
                    chosen.reason
                );
            }
            let auto = choose(Algorithm::Auto, &ctx, &programs, shape, 10, weighted).expect("auto");
            assert!(
                auto.stored_s.is_finite() && auto.recompute_s.is_finite(),
                "weighted {weighted}: {}",
                auto.reason
            );
        }
        // Over ranks each holding its rows of K, a K too large for one rank's memory is still
        // stored when its rows fit: 3000 points in f32 (K 34 MiB) with 24 MiB per rank.
        let shape = (3000, 4, 3);
        let limit = 24 << 20;
        for (ranks, stored) in [(1, false), (2, true), (3, true)] {
            let ctx = Context::cpu_ranks(ranks, Some(limit));
            let chosen = choose(Algorithm::Auto, &ctx, &programs, shape, 10, false).expect("plans");
            assert_eq!(
                chosen.algorithm == Algorithm::Stored,
                stored,
                "{ranks} rank(s): {}",
                chosen.reason
            );
            if !stored {
                assert!(chosen.reason.contains("K would take"), "{}", chosen.reason);
            }
        }
        let zero = ctx.with_config(PlannerConfig {
            partition: Some(PartitionSpec::points(0)),
            ..PlannerConfig::default()
        });
        let e = choose(Algorithm::Stored, &zero, &programs, shape, 10, true).expect_err("no ranks");
        assert!(e.to_string().contains("at least 1 rank"), "{e}");
    }

    /// On the reference H100 with TF32 and a bf16 K, the contraction kernel builds K where the
    /// library's product is all first-use cost (letter's shape: 3.6 ms against 27-127 ms
    /// measured), where writing K dominates a shallow product (acoustic's: 25.7 ms against
    /// 58-60 ms, BENCHMARKS.md run 41) and where it computes one triangle of a product deep
    /// enough (mnist's: 21 ms against 32-39 ms, run 43); the library keeps the builds whose
    /// products it computes faster (cifar10's, ledgar's, scotus's); never without a 16-bit K,
    /// nor on the CPU.
    #[test]
    fn small_sixteen_bit_builds_go_to_the_contraction_kernel_on_the_reference_gpu() {
        let mut config = PlannerConfig {
            tf32: true,
            ..PlannerConfig::default()
        };
        config
            .half_storage
            .insert("K".into(), crate::kernel_ir::Half::Bf16);
        let gpu = Target::reference_gpu();
        let build = |target: &Target, config: &PlannerConfig, (n, d): (usize, usize)| {
            let programs = KernelPrograms::new(&Kernel::POLYNOMIAL_DEFAULT, d);
            let library = plan_on(
                target,
                config,
                &programs.name("kernel"),
                &[("n", n), ("d", d)],
            )
            .expect("library build");
            let library_s = library.estimated_seconds();
            faster_contraction_build(target, config, &programs, (n, d), (&library, library_s))
                .expect("plans")
                .map(|(_, seconds)| seconds)
        };
        let letter = build(&gpu, &config, (10500, 26)).expect("letter: the contraction kernel");
        assert!(letter < LIBRARY_FIRST_USE_S, "{letter}");
        let acoustic = build(&gpu, &config, (78823, 50)).expect("acoustic: the contraction kernel");
        assert!((0.01..0.04).contains(&acoustic), "{acoustic}");
        let mnist = build(&gpu, &config, (60000, 780)).expect("mnist: the contraction kernel");
        assert!((0.015..0.035).contains(&mnist), "{mnist}");
        for shape in [(50000, 3072), (70000, 19996), (6400, 126405)] {
            assert_eq!(build(&gpu, &config, shape), None, "{shape:?}");
        }
        let wide = PlannerConfig {
            half_storage: Default::default(),
            ..config.clone()
        };
        assert_eq!(build(&gpu, &wide, (10500, 26)), None);
        assert_eq!(build(&Target::cpu(2), &config, (10500, 26)), None);
    }
}
