//! The `kernel_kmeans` command, callable in-process ([`run`]) so that tests can drive it.

mod cli;
mod data;
mod error;
mod graph;
mod naive;
mod plans;
mod plot;
mod progress;
mod projection;
mod report;
mod setup;

use clap::Parser;
use cli::{Cli, KernelName, Level, DEFAULT_N};
use data::{Data, Source};
use error::CliError;
use popcorn::kkmeans::{Algorithm, Init, Kernel};
use popcorn::DeviceSpec;
use progress::ProgressLine;
use report::Outcome;
use setup::FitSpec;
use std::ffi::OsString;
use std::io::Write;
use std::time::Instant;

/// Runs the command with `args` (the program name first), printing results on `out` and
/// warnings, errors and (when `terminal`) progress on `err`; returns the exit status.
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write, terminal: bool) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&e, out, err),
    };
    match execute(&cli, out, err, terminal) {
        Ok(()) => 0,
        Err(e) => {
            // One rank of a run over several processes: the others stop too, naming this one.
            popcorn::runtime::ranks::world::abandon_process_run(&e.one_line());
            let _ = writeln!(err, "error: {}", e.one_line());
            e.exit_code()
        }
    }
}

/// Help and version go to `out` (status 0); a usage error becomes one `error:` line (status 2).
fn clap_error(e: &clap::Error, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = write!(out, "{text}");
            0
        }
        _ => {
            let first = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("error: invalid arguments");
            let line = if first.starts_with("error:") {
                first.to_string()
            } else {
                format!("error: {first}")
            };
            let _ = writeln!(err, "{line} (see --help)");
            2
        }
    }
}

fn execute(
    cli: &Cli,
    out: &mut dyn Write,
    err: &mut dyn Write,
    terminal: bool,
) -> Result<(), CliError> {
    let precomputed = cli.kernel == Some(KernelName::Precomputed);
    if precomputed && cli.input.is_none() {
        return Err(CliError::Usage("-f precomputed reads the n x n kernel matrix from a file; give it with -i K.csv or -i K.npy".into()));
    }
    if precomputed && cli.zscore {
        return Err(CliError::Usage("--zscore standardises features, and a precomputed kernel matrix has none; drop --zscore".into()));
    }
    if let Some(path) = &cli.plot {
        // Before the fits: a picture that cannot be drawn should not cost a clustering.
        plot::Format::of(path)?;
        plot::load_font(cli.plot_font.as_deref())?;
    }
    // Resolved once, so that the CPU fallback notice of `auto` shows once for all fits.
    let device = cli
        .device
        .map_or_else(DeviceSpec::from_env, Ok)?
        .resolve()?;
    if let Some(path) = &cli.graph.graph {
        return graph::run(cli, path, device, out);
    }
    if cli.level == Level::Naive {
        naive::check_flags(cli, device)?;
    }
    let mut warnings = Vec::new();

    // The data.
    let t_data = Instant::now();
    let data = {
        let task = match &cli.input {
            Some(p) => format!("reading {}", p.display()),
            None => "generating data".to_string(),
        };
        let mut line = ProgressLine::new(err, terminal, &task, 1);
        line.phase("");
        popcorn::io::set_memory_limit(popcorn::dsl::settings::settings().memory_limit);
        match &cli.input {
            Some(path) if precomputed && read_by_rows(path, device)? => {
                data::kernel_matrix_by_rows(path, cli.n)?
            }
            Some(path) if precomputed => data::load_kernel_matrix(path, cli.label_column, cli.n)?,
            Some(path) => data::load_points(path, cli.label_column, cli.n, cli.d, cli.sparse)?,
            None => {
                let n = cli.n.unwrap_or(DEFAULT_N);
                if n == 0 {
                    return Err(CliError::Usage("-n 0: ask for at least one point".into()));
                }
                match cli.d {
                    Some(0) => {
                        return Err(CliError::Usage(
                            "-d 0: ask for at least one dimension".into(),
                        ))
                    }
                    Some(d) => data::uniform(n, d, cli.seed)?,
                    None => data::rings(n, cli.seed)?,
                }
            }
        }
    };
    let data_s = t_data.elapsed().as_secs_f64();
    if data.sparse.is_some() {
        let dense_only = [
            (
                cli.output.is_some(),
                "-o (it writes every coordinate; --labels-out writes the labels)",
            ),
            (cli.plot.is_some(), "--plot"),
            (cli.level == Level::Naive, "-l naive"),
            (cli.zscore, "--zscore (it shifts every feature by its mean)"),
            (
                cli.algorithm == Algorithm::Recompute,
                "--algorithm recompute (sparse points take the stored kernel matrix)",
            ),
            (
                cli.algorithm == Algorithm::Features,
                "--algorithm features (sparse points take the stored kernel matrix)",
            ),
        ];
        if let Some((_, flag)) = dense_only.iter().find(|(on, _)| *on) {
            return Err(CliError::Usage(format!(
                "the points are sparse and {flag} needs them dense; add --sparse off"
            )));
        }
    }
    let by_rows = precomputed && data.x.is_empty();
    if by_rows && (cli.output.is_some() || cli.plot.is_some()) {
        return Err(CliError::Usage(
            "the ranks read their own rows of the kernel matrix, and -o and --plot need all of \
             it; drop them"
                .into(),
        ));
    }
    if precomputed && !by_rows {
        let asym = data::asymmetry(&data.x, data.n);
        if asym > 1e-6 {
            warnings.push(format!(
                "the kernel matrix is not symmetric (largest |K_ij - K_ji| is {asym:.2e} of the largest entry); the objective may not decrease"
            ));
        }
    }

    // The fits.
    let is_rings = matches!(data.source, Source::Rings);
    let k = match (cli.k, data.classes()) {
        (Some(k), _) => k,
        (None, _) if !matches!(data.source, Source::File(_)) => data::RING_RADII.len(),
        (None, Some(classes)) => classes,
        (None, None) => {
            return Err(CliError::Usage(
                "give the number of clusters with -k (the input has no labels to take it from)"
                    .into(),
            ))
        }
    };
    popcorn::io::check_k(data.n, k)?;
    let kernel_name = cli.kernel.unwrap_or(if is_rings {
        KernelName::Gaussian
    } else {
        KernelName::Linear
    });
    let demo_gamma = is_rings.then_some(data::RING_GAMMA);
    let kernel = setup::kernel_from_flags(cli, kernel_name, demo_gamma, &mut warnings);
    let weights = match &cli.weights {
        Some(path) => Some(data::load_weights(path, data.n, cli.n)?),
        None => None,
    };
    let weigh = |b: popcorn::kkmeans::KernelKMeans| match &weights {
        Some(w) => b.sample_weight(w),
        None => b,
    };
    let mut specs = vec![FitSpec {
        name: kernel.name().to_string(),
        params: weigh(setup::builder(cli, kernel, k, device)),
    }];
    if is_rings && kernel != Kernel::Linear {
        specs.push(FitSpec {
            name: "linear".into(),
            params: weigh(setup::builder(cli, Kernel::Linear, k, device)),
        });
    }
    if cli.runs > 1 && cli.init == cli::InitName::Mod {
        warnings.push(format!("-r {} has no effect with --init mod (it is deterministic); use --init random or kmeans++", cli.runs));
    }
    for w in &warnings {
        // A lost warning is no reason to stop.
        let _ = writeln!(err, "warning: {w}");
    }
    if cli.plan {
        let nnz = data.sparse.as_ref().map(|s| s.nnz());
        plans::print_plans(&specs, data.n, data.d, nnz, out)?;
    }

    let mut outcomes = Vec::new();
    for spec in specs {
        let fit = fit_one(&spec, &data, cli.level, err, terminal)?;
        let scores = report::score(&data, &fit.labels);
        outcomes.push(Outcome { spec, fit, scores });
    }

    // The results: written by one process of a run over several (`mpirun`), rank 0; the
    // others ran their ranks of the same fits and stop here.
    if !primary_process()? {
        return Ok(());
    }
    let first = &outcomes[0];
    let mut wrote = Vec::new();
    if let Some(path) = &cli.output {
        popcorn::io::write_labeled_csv(path, &first.fit.labels, &data.x, data.n, data.d)?;
        wrote.push(path);
    }
    if let Some(path) = &cli.labels_out {
        popcorn::io::write_labels(path, &first.fit.labels)?;
        wrote.push(path);
    }
    if let Some(path) = &cli.json {
        report::write_json(path, &report::json(&data, data_s, &outcomes)?)?;
        wrote.push(path);
    }
    if let Some(path) = &cli.plot {
        plot::write(path, &data, &outcomes)?;
        wrote.push(path);
    }
    report::print_summary(&data, cli.seed, data_s, &outcomes, out)?;
    if is_rings {
        print_rings_verdict(&outcomes, out)?;
    }
    for path in wrote {
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}

/// Whether a precomputed kernel matrix is read by each rank for its own rows: a `.npy` file
/// (which can be read from any row) on a device whose plans run partitioned along the points
/// (several GPUs, CPU ranks, or one process per rank under a launcher).
fn read_by_rows(path: &std::path::Path, device: DeviceSpec) -> Result<bool, CliError> {
    let name = path.to_string_lossy().to_ascii_lowercase();
    let npy = name.ends_with(".npy") || name.ends_with(".npy.gz");
    let cpu_ranks = device == DeviceSpec::Cpu
        && popcorn::dsl::settings::settings()
            .cpu_ranks
            .is_some_and(|p| p > 1);
    let partitioned = matches!(device, DeviceSpec::CudaSet(_))
        || cpu_ranks
        || popcorn::runtime::ranks::world::World::from_env()?.is_some();
    Ok(npy && partitioned)
}

/// Whether this process writes the results: the only process, or rank 0 of a run over
/// several (the launcher's environment, as the library reads it).
fn primary_process() -> Result<bool, CliError> {
    Ok(popcorn::runtime::ranks::world::World::from_env()?.is_none_or(|w| w.rank == 0))
}

/// Runs one fit, with a progress line on a terminal.
fn fit_one(
    spec: &FitSpec,
    data: &Data,
    level: Level,
    err: &mut dyn Write,
    terminal: bool,
) -> Result<popcorn::kkmeans::FitResult, CliError> {
    let runs = if matches!(spec.params.init, Init::Mod | Init::Labels(_)) {
        1
    } else {
        spec.params.n_init
    };
    let mut line = ProgressLine::new(err, terminal, &format!("{} kernel", spec.name), runs);
    if level == Level::Naive {
        line.phase("naive baseline");
        return naive::fit(&spec.params, data);
    }
    if spec.params.kernel == Kernel::Precomputed {
        line.phase("upload and iterations");
        if let (true, Source::File(path)) = (data.x.is_empty(), &data.source) {
            // Each rank reads its own rows of the file (read_by_rows).
            return Ok(spec.params.fit_precomputed_rows(data.n, &mut |rows| {
                popcorn::io::load_npy_rows(path, rows)
                    .map_err(|e| popcorn::kkmeans::FitError::Input(e.to_string()))
            })?);
        }
        return Ok(spec.params.fit_precomputed(&data.x, data.n)?);
    }
    if let Some(x) = &data.sparse {
        return Ok(spec.params.fit_sparse_with_control(x, &mut |p| {
            line.update(p);
            std::ops::ControlFlow::Continue(())
        })?);
    }
    Ok(spec
        .params
        .fit_with_progress(data, &mut |p| line.update(p))?)
}

/// The demo's point: the rings are found in the gaussian kernel's feature space, not in the
/// input space.
fn print_rings_verdict(outcomes: &[Outcome], out: &mut dyn Write) -> Result<(), CliError> {
    let ari = |name: &str| {
        outcomes
            .iter()
            .find(|o| o.spec.name == name)
            .and_then(|o| o.scores)
            .map(|s| s.ari)
    };
    if let (Some(first), Some(linear)) = (outcomes.first(), ari("linear")) {
        if first.spec.name != "linear" {
            if let Some(a) = first.scores.map(|s| s.ari) {
                writeln!(
                    out,
                    "The rings are not linearly separable: ARI {a:.4} with the {} kernel, {linear:.4} with the linear kernel (plain k-means).",
                    first.spec.name
                )?;
            }
        }
    }
    Ok(())
}
