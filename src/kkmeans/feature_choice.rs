//! Whether a fit runs the features algorithm ([`Algorithm::Features`]): asked for, where the
//! kernel has a small feature map; under `Auto`, where the cost model estimates it faster than
//! what Auto would run otherwise. Whole where the features fit in memory, else in blocks of
//! rows (`feature_blocks`).

use super::algorithm::{self, plan_of, recompute_config, EXPECTED_ITERATIONS};
use super::feature_blocks;
use super::features::FeatureMap;
use super::model::{weighted_name, KernelPrograms};
use super::{Algorithm, AlgorithmChoice, FitError, Kernel};
use crate::Context;

/// What a fit of `n x d` points runs for `requested` (see [`algorithm::choose`]), the features
/// algorithm included: asked for, where the kernel has features; under `Auto`, where its
/// estimate (the linear kernel's recompute plan on the features, by the target's cost model)
/// beats what Auto would run otherwise and the features fit in the memory it may plan in,
/// whole or in blocks of rows (the choice's `feature_block_rows`). With the feature map where
/// the choice is the features.
pub(crate) fn choose(
    requested: Algorithm,
    ctx: &Context,
    kernel: &Kernel,
    (n, d, k): (usize, usize, usize),
    max_iter: usize,
    weighted: bool,
) -> Result<(AlgorithmChoice, Option<FeatureMap>), FitError> {
    let programs = KernelPrograms::new(kernel, d);
    let others =
        |requested| algorithm::choose(requested, ctx, &programs, (n, d, k), max_iter, weighted);
    if !matches!(requested, Algorithm::Auto | Algorithm::Features) {
        return others(requested).map(|c| (c, None));
    }
    // Not yet over several ranks (GPUs or processes): the features' build is not planned
    // for a partition.
    let ranks = ctx.config().partition.as_ref().map_or(1, |p| p.ranks);
    let map = if ranks > 1 {
        Err(format!(
            "the features algorithm runs on one rank, this context has {ranks}"
        ))
    } else {
        FeatureMap::of(kernel, d)
    };
    let map = match (requested, map) {
        (Algorithm::Features, Err(why)) => {
            return Err(FitError::Parameter(format!(
                "{why}; use the stored or recomputed kernel matrix (--algorithm stored or \
                 recompute)"
            )))
        }
        (_, Err(_)) => return others(requested).map(|c| (c, None)),
        (_, Ok(map)) => map,
    };
    let dim = map.dim();
    let linear = KernelPrograms::new(&Kernel::Linear, dim);
    let plan = plan_of(
        ctx,
        &recompute_config(ctx.config()),
        &weighted_name(&linear.name("kkmeans_recompute"), weighted),
        &[("n", n), ("d", dim), ("k", k)],
    );
    // Building the features: the poly_features program.
    let build = plan_of(
        ctx,
        ctx.config(),
        "poly_features",
        &[("n", n), ("d", d), ("f", dim)],
    );
    let (build_s, build_workspace) = build.as_ref().map_or((f64::INFINITY, 0), |p| {
        (p.estimated_seconds(), p.workspace_bytes() as u64)
    });
    let iterations = EXPECTED_ITERATIONS.min(max_iter).max(1);
    let per_iteration = plan
        .as_ref()
        .map_or(f64::INFINITY, |p| p.estimated_seconds());
    // On a GPU the build's products go through the library, whose kernels load at their
    // first use (in a fresh process; the stored K's build pays it too, the recompute
    // iterations never do).
    let on_gpu = ctx.target().kind == popcorn_dsl::target::TargetKind::Cuda;
    let first_use = match &build {
        Ok(plan) if on_gpu && algorithm::uses_library_products(plan) => {
            algorithm::LIBRARY_FIRST_USE_S
        }
        _ => 0.0,
    };
    let build_s = build_s + first_use;
    let whole_s = build_s + iterations as f64 * per_iteration;
    let size = ctx.dtype().size_bytes();
    // The features, and at the same time either what building them takes besides (the
    // points, the selections, the build plan's workspace) or what the iterations take
    // besides.
    let iteration_workspace = plan.as_ref().map_or(0, |p| p.workspace_bytes() as u64);
    let points = n as u64 * d as u64 * size as u64;
    let needed = map.bytes(n, size).saturating_add(
        (points + map.build_bytes(size))
            .saturating_add(build_workspace)
            .max(iteration_workspace.saturating_add(3 * (n as u64) * (k as u64) * size as u64)),
    );
    let free = ctx.memory_info().map(|(free, _)| free as u64);
    let usable = |free: u64| (free as f64 * feature_blocks::USABLE_SHARE) as u64;
    let fits = free.is_none_or(|f| needed <= usable(f));
    let memory = if ctx.is_gpu() {
        "GPU memory"
    } else {
        "host memory"
    };
    let text = algorithm::bytes_text;
    let limit = match ctx.memory_budget() {
        Some(limit) => format!(" (within the fit's memory limit of {})", text(limit)),
        None => String::new(),
    };
    let too_big = format!(
        "the kernel's {dim} features per point need {} whole with their build, and {} of \
         {memory} may be planned{limit}",
        text(needed),
        text(free.map_or(0, usable))
    );
    // Whole where they fit; else built block of rows by block every iteration (a first
    // pass sums the initial clusters' features).
    let (features_s, block_rows, how) = if fits {
        let how = format!(
            "{dim} per point built in {build_s:.3} s, {:.3} ms per iteration, {} of them",
            per_iteration * 1e3,
            text(map.bytes(n, size))
        );
        (whole_s, 0, Ok(how))
    } else {
        match feature_blocks::layout(ctx, &map, (n, k), weighted, free) {
            Ok(layout) => {
                let how = format!(
                    "{dim} per point built in blocks of {} rows every iteration, never whole \
                     ({too_big}): {:.3} ms per iteration, {} in all",
                    layout.rows,
                    layout.per_iteration_s * 1e3,
                    text(layout.bytes)
                );
                let seconds = first_use + (iterations + 1) as f64 * layout.per_iteration_s;
                (seconds, layout.rows, Ok(how))
            }
            Err(why) => (f64::INFINITY, 0, Err(format!("{too_big}; {why}"))),
        }
    };
    let base = others(Algorithm::Auto);
    let chosen = |mut choice: AlgorithmChoice, reason: String, summary: String| {
        choice.algorithm = Algorithm::Features;
        choice.reason = reason;
        choice.summary = summary;
        choice.features_s = features_s;
        choice.feature_dim = dim;
        choice.feature_block_rows = block_rows;
        choice.fused_build = false;
        choice.kernel_scale = 1.0;
        choice
    };
    let unknown = || AlgorithmChoice {
        stored_s: f64::INFINITY,
        recompute_s: f64::INFINITY,
        iterations,
        ..AlgorithmChoice::given(n, ctx.dtype())
    };
    let blocks = if block_rows > 0 { ", in blocks" } else { "" };
    if requested == Algorithm::Features {
        if fits {
            plan?;
            build?;
        }
        let how = how.map_err(|why| {
            FitError::Parameter(format!(
                "{why}; allow more memory (--memory-limit, KernelKMeans::memory_limit) or use \
                 the recomputed kernel matrix (--algorithm recompute), which needs no block of \
                 features"
            ))
        })?;
        let reason = format!(
            "asked for: the polynomial kernel's explicit features and the linear kernel's \
             iterations on them ({how})"
        );
        let summary = format!("features ({dim} per point{blocks}, asked for)");
        return Ok((
            chosen(base.unwrap_or_else(|_| unknown()), reason, summary),
            Some(map),
        ));
    }
    let usable = match fits {
        true => plan.is_ok() && build.is_ok(),
        false => how.is_ok(),
    };
    // Where neither of the other two can run, the features may.
    let mut base = match base {
        Ok(base) => base,
        Err(e) if !usable => return Err(e),
        Err(e) => {
            let reason = format!(
                "the other algorithms cannot run here ({e}); features: {}",
                how.unwrap_or_default()
            );
            let summary = format!("features ({dim} per point{blocks}; the others cannot run)");
            return Ok((chosen(unknown(), reason, summary), Some(map)));
        }
    };
    base.features_s = features_s;
    base.feature_dim = dim;
    // Against the estimate of what Auto would run otherwise (which fits).
    let best_other = match base.algorithm {
        Algorithm::Stored if !base.fused_build && on_gpu => {
            base.stored_s + algorithm::LIBRARY_FIRST_USE_S
        }
        Algorithm::Stored => base.stored_s,
        _ => base.recompute_s,
    };
    if !usable || features_s >= best_other {
        if let Err(why) = &how {
            base.reason.push_str(&format!("; features: {why}"));
        }
        return Ok((base, None));
    }
    let reason = format!(
        "estimated faster over {iterations} iterations: features {features_s:.3} s ({}), \
         stored {:.3} s, recompute {:.3} s",
        how.unwrap_or_default(),
        base.stored_s,
        base.recompute_s
    );
    let summary =
        format!("features{blocks} (estimated {features_s:.3} s against {best_other:.3} s)");
    Ok((chosen(base, reason, summary), Some(map)))
}
