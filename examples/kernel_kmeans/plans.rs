//! `--plan`: the plans of the DSL programs a fit runs, at the run's sizes.

use super::error::CliError;
use super::setup::FitSpec;
use popcorn::dsl::{DimBindings, PlannerConfig};
use popcorn::kkmeans::{programs, Algorithm, AlgorithmChoice, Init, Kernel};
use std::collections::BTreeMap;
use std::io::Write;

/// The programs a fit runs. Stored K: the kernel matrix (unless precomputed), the k-means++
/// columns, the iteration, and the centroid norms kept for predicting (unless precomputed).
/// Recomputed K: the iteration from the points (it gives the centroid norms too) and, for
/// k-means++, the cross kernel of the points against one center. Features: the linear
/// kernel's recompute programs (on the kernel's features); in blocks of rows, the features'
/// build, the first sums and the step of one block, and for k-means++ the kernel's own cross
/// kernel of a block against one center.
pub fn programs_of(spec: &FitSpec, choice: &AlgorithmChoice) -> Vec<String> {
    let (p, algorithm) = (&spec.params, choice.algorithm);
    let kmeanspp = matches!(p.init, Init::KMeansPlusPlus { .. });
    // The features in blocks: built and stepped block by block; the kernel's own cross
    // kernel gives k-means++ its columns.
    if algorithm == Algorithm::Features && choice.feature_block_rows > 0 {
        let weighted = if p.sample_weight.is_some() {
            "_weighted"
        } else {
            ""
        };
        let mut names = vec!["poly_features".to_string()];
        if kmeanspp {
            names.push(format!("cross_{}", p.kernel.name()));
        }
        names.push(format!("features_sums{weighted}"));
        names.push(format!("features_step{weighted}"));
        return names;
    }
    // Programs are named after the kernel (`kernel_gaussian`); a precomputed K has none.
    let kernel = match (p.kernel, algorithm) {
        (Kernel::Precomputed, _) => "",
        (_, Algorithm::Features) => "linear",
        (other, _) => other.name(),
    };
    let mut names = Vec::new();
    if algorithm == Algorithm::Features {
        names.push("poly_features".into());
    }
    if matches!(algorithm, Algorithm::Recompute | Algorithm::Features) {
        if kmeanspp {
            names.push(format!("cross_{kernel}"));
        }
        names.push(format!("kkmeans_recompute_{kernel}"));
        return names;
    }
    if !kernel.is_empty() {
        names.push(format!("kernel_{kernel}"));
    }
    if kmeanspp {
        names.push("kernel_column".into());
    }
    names.push("kkmeans_iteration".into());
    if !kernel.is_empty() {
        names.push("kkmeans_centroid_norms".into());
    }
    names
}

/// Prints the plan of every program the fits run (each once) for `n` points of `d` features;
/// for sparse points (`sparse_nnz` stored entries), the stored kernel matrix of the
/// `kernel_*_sparse` program, whose plan says how the planner computes the sparse Gram matrix.
pub fn print_plans(
    specs: &[FitSpec],
    n: usize,
    d: usize,
    sparse_nnz: Option<usize>,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut seen = Vec::new();
    for spec in specs {
        let config = PlannerConfig::from_env().with_dtype(spec.params.dtype);
        let target = popcorn::Context::new(spec.params.device)?.target();
        let choice = match sparse_nnz {
            Some(_) => popcorn::kkmeans::AlgorithmChoice::sparse(n, spec.params.dtype),
            None => spec.params.choose_algorithm(n, d)?,
        };
        writeln!(
            out,
            "kernel matrix for {}: {} ({})\n",
            spec.name, choice.algorithm, choice.reason
        )?;
        for mut name in programs_of(spec, &choice) {
            if sparse_nnz.is_some() && name.starts_with("kernel_") && name != "kernel_column" {
                name.push_str("_sparse");
            }
            if seen.contains(&name) {
                continue;
            }
            let program = programs::program(&name);
            seen.push(name.clone());
            // The features algorithm's programs run on the kernel's features (in blocks of
            // rows where they do not fit whole).
            let points_d = d;
            let blocks = choice.feature_block_rows;
            let on_points = name.starts_with("cross_") && blocks > 0;
            let d = match choice.algorithm {
                Algorithm::Features if !on_points => choice.feature_dim,
                _ => d,
            };
            let n = if blocks > 0 && !on_points { blocks } else { n };
            // k-means++'s cross kernel: every point (m of them) against one center; the
            // features' build: points of points_d columns into f features.
            let sizes = if name.starts_with("cross_") && on_points {
                [("m", blocks), ("n", 1), ("d", d)]
            } else if name.starts_with("cross_") {
                [("m", n), ("n", 1), ("d", d)]
            } else if name == "poly_features" {
                [("n", n), ("d", points_d), ("f", d)]
            } else if name.starts_with("features_") {
                [("m", n), ("f", d), ("k", spec.params.k)]
            } else {
                [("n", n), ("d", d), ("k", spec.params.k)]
            };
            let dims: DimBindings = program
                .dims()
                .into_iter()
                .filter_map(|dim| {
                    sizes
                        .iter()
                        .find(|(s, _)| *s == dim)
                        .map(|(s, v)| (s.to_string(), *v))
                })
                .collect();
            let nnz: BTreeMap<String, usize> = sparse_nnz
                .map(|z| ("X".to_string(), z))
                .into_iter()
                .collect();
            let plan = popcorn::dsl::plan(program, &dims, &config, &target, &nnz)
                .map_err(|e| CliError::Data(format!("cannot plan `{name}`: {e}")))?;
            writeln!(out, "{plan}\n")?;
        }
    }
    Ok(())
}
