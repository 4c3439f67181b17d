//! `--graph FILE`: the normalized cut of a graph (a Matrix Market `.mtx` file or an edge list)
//! as weighted Kernel K-means ([`popcorn::ncut`]), with its summary and JSON report.

use super::cli::Cli;
use super::error::CliError;
use super::report::{seconds, write_json};
use popcorn::io::{load_edge_list, load_mtx, CsrMatrix, IndexBase};
use popcorn::ncut::{Init, NcutResult, NormalizedCut, Sigma};
use popcorn::DeviceSpec;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The flags of a graph run.
#[derive(clap::Args, Debug)]
pub struct GraphArgs {
    /// Cluster the nodes of a graph by normalized cut (see GRAPHS): FILE.mtx (Matrix Market,
    /// gzip too) or an edge list (`i j [weight]` a line)
    #[arg(long, value_name = "FILE")]
    pub graph: Option<PathBuf>,

    /// The edge list numbers its nodes from 1 (default: from 0)
    #[arg(long, requires = "graph")]
    pub one_based: bool,

    /// The kernel's diagonal shift: auto (from 0, raised toward the Gershgorin bound when a
    /// step would raise the cut) or a number (plain weighted Kernel K-means with it)
    #[arg(long, value_name = "SIGMA", default_value = "auto", requires = "graph", value_parser = parse_sigma, allow_negative_numbers = true)]
    pub sigma: Sigma,
}

fn parse_sigma(s: &str) -> Result<Sigma, String> {
    if s == "auto" {
        return Ok(Sigma::Auto);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Sigma::Fixed(v)),
        _ => Err(format!("`{s}` is neither auto nor a finite number")),
    }
}

/// Reads the graph of `path`: `.mtx` (or `.mtx.gz`) as Matrix Market, anything else as an
/// edge list.
fn read(path: &Path, base: IndexBase) -> Result<CsrMatrix, CliError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    Ok(if name.ends_with(".mtx") || name.ends_with(".mtx.gz") {
        load_mtx(path)?
    } else {
        load_edge_list(path, base)?
    })
}

/// Runs the normalized cut of `path` with the flags of `cli`.
pub fn run(
    cli: &Cli,
    path: &Path,
    device: DeviceSpec,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let other = [
        (cli.input.is_some(), "-i"),
        (cli.kernel.is_some(), "-f"),
        (cli.weights.is_some(), "--weights"),
        (cli.output.is_some(), "-o"),
        (cli.plot.is_some(), "--plot"),
        (cli.zscore, "--zscore"),
    ];
    if let Some((_, flag)) = other.iter().find(|(on, _)| *on) {
        return Err(CliError::Usage(format!(
            "{flag} does not apply to --graph (a graph is clustered by its edges)"
        )));
    }
    let Some(k) = cli.k else {
        return Err(CliError::Usage(
            "give the number of clusters of the graph with -k".into(),
        ));
    };
    let base = if cli.graph.one_based {
        IndexBase::One
    } else {
        IndexBase::Zero
    };
    let t = Instant::now();
    let adjacency = read(path, base)?;
    let read_s = t.elapsed().as_secs_f64();
    let fit = NormalizedCut::new(k)
        .sigma(cli.graph.sigma)
        .init(Init::Random { seed: cli.seed })
        .n_init(cli.runs)
        .max_iter(cli.max_iter)
        .device(device)
        .dtype(cli.dtype)
        .fit(&adjacency)?;
    let mut wrote = Vec::new();
    if let Some(p) = &cli.labels_out {
        popcorn::io::write_labels(p, &fit.labels)?;
        wrote.push(p);
    }
    if let Some(p) = &cli.json {
        let value = serde_json::json!({
            "graph": path.display().to_string(),
            "read_s": read_s,
            "result": fit,
        });
        write_json(p, &value)?;
        wrote.push(p);
    }
    summary(path, read_s, &fit, out)?;
    for p in wrote {
        writeln!(out, "wrote {}", p.display())?;
    }
    Ok(())
}

fn summary(
    path: &Path,
    read_s: f64,
    fit: &NcutResult,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let sigma = match fit.params.sigma {
        Sigma::Auto => format!(
            "auto (final {}, Gershgorin bound {})",
            fit.sigma, fit.sigma_bound
        ),
        Sigma::Fixed(s) => format!("{s} (Gershgorin bound {})", fit.sigma_bound),
    };
    let each = fit.timings.iterations_s / fit.iterations.max(1) as f64;
    let rows = [
        ("nodes", fit.n.to_string()),
        ("stored entries", fit.nnz.to_string()),
        ("k", fit.params.k.to_string()),
        ("sigma", sigma),
        ("device", fit.device.clone()),
        ("dtype", fit.dtype.to_string()),
        (
            "runs",
            format!("{} (best {})", fit.params.n_init, fit.best_run + 1),
        ),
        (
            "iterations",
            format!(
                "{} ({} steps taken back)",
                fit.iterations, fit.rejected_steps
            ),
        ),
        ("converged", if fit.converged { "yes" } else { "no" }.into()),
        ("normalized cut", format!("{:.6}", fit.ncut)),
        ("empty clusters", fit.empty_clusters.to_string()),
        ("time: read", seconds(read_s)),
        ("time: upload", seconds(fit.timings.upload_s)),
        (
            "time: iterations",
            format!(
                "{} ({} each)",
                seconds(fit.timings.iterations_s),
                seconds(each)
            ),
        ),
        ("time: total", seconds(fit.timings.total_s)),
    ];
    writeln!(out, "Normalized cut of {}", path.display())?;
    for (name, value) in rows {
        writeln!(out, "  {name:<20}  {value}")?;
    }
    Ok(())
}
