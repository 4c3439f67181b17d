//! `--plan`: the plans of the DSL programs a fit runs, at the run's sizes.

use super::error::CliError;
use super::setup::FitSpec;
use popcorn::dsl::{DimBindings, PlannerConfig};
use popcorn::kkmeans::{programs, Init, Kernel};
use std::collections::BTreeMap;
use std::io::Write;

/// The programs a fit runs: the kernel matrix (unless precomputed), the k-means++ columns, the
/// iteration, and the centroid norms kept for predicting (unless precomputed).
pub fn programs_of(spec: &FitSpec) -> Vec<&'static str> {
    let p = &spec.params;
    let mut names = Vec::new();
    match p.kernel {
        Kernel::Linear => names.push("kernel_linear"),
        Kernel::Polynomial { .. } => names.push("kernel_polynomial"),
        Kernel::Gaussian { .. } => names.push("kernel_gaussian"),
        Kernel::Sigmoid { .. } => names.push("kernel_sigmoid"),
        Kernel::Precomputed => {}
    }
    if matches!(p.init, Init::KMeansPlusPlus { .. }) {
        names.push("kernel_column");
    }
    names.push("kkmeans_iteration");
    if p.kernel != Kernel::Precomputed {
        names.push("kkmeans_centroid_norms");
    }
    names
}

/// Prints the plan of every program the fits run (each once) for `n` points of `d` features.
pub fn print_plans(
    specs: &[FitSpec],
    n: usize,
    d: usize,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let mut seen = Vec::new();
    for spec in specs {
        let config = PlannerConfig::from_env().with_dtype(spec.params.dtype);
        let target = popcorn::Context::new(spec.params.device)?.target();
        for name in programs_of(spec) {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let program = programs::program(name);
            let sizes = [("n", n), ("d", d), ("k", spec.params.k)];
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
            let plan = popcorn::dsl::plan(program, &dims, &config, &target, &BTreeMap::new())
                .map_err(|e| CliError::Data(format!("cannot plan `{name}`: {e}")))?;
            writeln!(out, "{plan}\n")?;
        }
    }
    Ok(())
}
