//! One GPU against several: Kernel K-means fits (the library's `KernelKMeans`, the example's
//! path) on synthetic points, uniform in [0, 1) from the example's generator and seed, first
//! on one device and then on several, alternating for `--rounds` rounds. Each figure is the
//! median of a fit's per-iteration wall times from the third iteration on (host time
//! included: a partitioned iteration's fixed cost is what the speed-up is about). Prints a
//! table and, with `--json`, every number.
//!
//! ```text
//! cargo run --release -p popcorn-bench --bin bench_ranks -- --one cuda:0 --several cuda:0,1 --shapes mnist,1m --rounds 3
//! ```
//!
//! Shapes (the polynomial kernel (1, 1, 2), no convergence test): `mnist` (60,000 x 780,
//! k = 10, stored K, 20 iterations), `mnist2x` (120,000 x 780), `1m` (10^6 x 50, k = 100, K
//! recomputed with TF32, 5 iterations). Without a usable GPU it says so and exits with status 0;
//! `--one cpu --several cpu --scale 0.01` is a smoke run (set `POPCORN_CPU_RANKS` to partition).

use clap::Parser;
use popcorn::kkmeans::{Algorithm, Init, Kernel, KernelKMeans, Points, SplitMix64};
use popcorn::DeviceSpec;
use serde::Serialize;
use std::io::Write as _;
use std::path::PathBuf;

/// One against several devices, per-iteration medians and speed-ups.
#[derive(Parser)]
#[command(about = "Times Kernel K-means iterations on one GPU against several (table and JSON)")]
struct Cli {
    /// The one device
    #[arg(long, default_value = "cuda:0", value_parser = parse_device)]
    one: DeviceSpec,
    /// The several devices
    #[arg(long, default_value = "cuda:all", value_parser = parse_device)]
    several: DeviceSpec,
    /// Shapes, comma separated: mnist, mnist2x, 1m
    #[arg(long, value_delimiter = ',', default_value = "mnist,1m")]
    shapes: Vec<String>,
    /// Rounds of one-then-several fits per shape
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Write every number as JSON to this file
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Multiply every n by this (d is kept), e.g. 0.01 for a smoke run on the CPU
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
}

fn parse_device(s: &str) -> Result<DeviceSpec, String> {
    s.parse::<DeviceSpec>().map_err(|e| e.to_string())
}

/// A benchmark shape.
struct Shape {
    name: &'static str,
    n: usize,
    d: usize,
    k: usize,
    recompute: bool,
    iterations: usize,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "mnist",
        n: 60_000,
        d: 780,
        k: 10,
        recompute: false,
        iterations: 20,
    },
    Shape {
        name: "mnist2x",
        n: 120_000,
        d: 780,
        k: 10,
        recompute: false,
        iterations: 20,
    },
    Shape {
        name: "1m",
        n: 1_000_000,
        d: 50,
        k: 100,
        recompute: true,
        iterations: 5,
    },
];

/// One shape's figures.
#[derive(Serialize)]
struct Row {
    shape: &'static str,
    n: usize,
    d: usize,
    k: usize,
    algorithm: &'static str,
    /// Per-iteration medians (ms), one per round.
    one_ms: Vec<f64>,
    several_ms: Vec<f64>,
    /// one / several, per round.
    speedup: Vec<f64>,
    one_objective: f64,
    several_objective: f64,
}

#[derive(Serialize)]
struct Report {
    one: String,
    several: String,
    rows: Vec<Row>,
}

fn main() {
    std::process::exit(match Cli::try_parse() {
        Ok(cli) => match run(&cli) {
            Ok(()) => 0,
            Err(Stop::NoDevice(m)) => {
                println!("{m}");
                0
            }
            Err(Stop::Failed(m)) => {
                eprintln!("error: {m}");
                1
            }
        },
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() {
                2
            } else {
                0
            }
        }
    });
}

enum Stop {
    NoDevice(String),
    Failed(String),
}

/// The median of a fit's per-iteration times from the third iteration on (all of them for
/// fewer than three), in ms.
fn median_ms(per_iteration_s: &[f64]) -> f64 {
    let from_third = per_iteration_s.get(2..).filter(|t| !t.is_empty());
    1e3 * popcorn_bench::stats::median(from_third.unwrap_or(per_iteration_s))
}

fn run(cli: &Cli) -> Result<(), Stop> {
    for spec in [&cli.one, &cli.several] {
        if let Err(e) = (*spec).resolve() {
            return Err(Stop::NoDevice(format!(
                "bench_ranks: {spec} is not usable ({e}); nothing to benchmark"
            )));
        }
    }
    if cli.rounds == 0 || !(cli.scale > 0.0 && cli.scale <= 1.0) {
        return Err(Stop::Failed(
            "--rounds must be at least 1 and --scale in (0, 1]".into(),
        ));
    }
    let mut rows = Vec::new();
    let (mut one_name, mut several_name) = (String::new(), String::new());
    println!(
        "{:<8} {:>9} {:>5} {:>4} {:>10} | {:>28} | {:>28} | speed-up",
        "shape", "n", "d", "k", "K", "one device ms", "several ms"
    );
    for name in &cli.shapes {
        let shape = SHAPES
            .iter()
            .find(|s| s.name == name.as_str())
            .ok_or_else(|| Stop::Failed(format!("unknown shape `{name}` (mnist, mnist2x, 1m)")))?;
        let n = ((shape.n as f64 * cli.scale).round() as usize).max(shape.k);
        let mut rng = SplitMix64::new(0);
        let x: Vec<f64> = (0..n * shape.d).map(|_| rng.next_f64()).collect();
        let points = Points::new(n, shape.d, &x).map_err(|e| Stop::Failed(e.to_string()))?;
        let fit = |device: &DeviceSpec| {
            let algorithm = if shape.recompute {
                Algorithm::Recompute
            } else {
                Algorithm::Stored
            };
            KernelKMeans::new(shape.k)
                .kernel(Kernel::Polynomial {
                    gamma: 1.0,
                    coef0: 1.0,
                    degree: 2.0,
                })
                .init(Init::Mod)
                .algorithm(algorithm)
                .tf32(shape.recompute)
                .max_iter(shape.iterations)
                .check_convergence(false)
                .device(*device)
                .fit(points)
                .map_err(|e| Stop::Failed(format!("{} on {device}: {e}", shape.name)))
        };
        let mut row = Row {
            shape: shape.name,
            n,
            d: shape.d,
            k: shape.k,
            algorithm: if shape.recompute {
                "recompute (TF32)"
            } else {
                "stored"
            },
            one_ms: Vec::new(),
            several_ms: Vec::new(),
            speedup: Vec::new(),
            one_objective: f64::NAN,
            several_objective: f64::NAN,
        };
        for _ in 0..cli.rounds {
            let one = fit(&cli.one)?;
            let several = fit(&cli.several)?;
            one_name.clone_from(&one.device);
            several_name.clone_from(&several.device);
            let (a, b) = (
                median_ms(&one.timings.per_iteration_s),
                median_ms(&several.timings.per_iteration_s),
            );
            row.one_ms.push(a);
            row.several_ms.push(b);
            row.speedup.push(a / b);
            row.one_objective = one.objective;
            row.several_objective = several.objective;
        }
        let list = |v: &[f64], digits: usize| {
            v.iter()
                .map(|x| format!("{x:.digits$}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        println!(
            "{:<8} {:>9} {:>5} {:>4} {:>10} | {:>28} | {:>28} | {} (min {:.2}x)",
            row.shape,
            row.n,
            row.d,
            row.k,
            if shape.recompute {
                "recompute"
            } else {
                "stored"
            },
            list(&row.one_ms, 3),
            list(&row.several_ms, 3),
            list(&row.speedup, 2),
            row.speedup.iter().copied().fold(f64::INFINITY, f64::min)
        );
        let _ = std::io::stdout().flush();
        rows.push(row);
    }
    println!("one device: {one_name}\nseveral: {several_name}");
    if let Some(path) = &cli.json {
        let report = Report {
            one: one_name,
            several: several_name,
            rows,
        };
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| Stop::Failed(e.to_string()))?;
        std::fs::write(path, text)
            .map_err(|e| Stop::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}
