//! The results: per-shape progress tables, the final tables and the JSON file.

use super::cli::Cli;
use super::data::Points;
use super::measure::{Ceilings, Check, Iterations, KRead, KernelMatrix};
use super::BenchError;
use serde::Serialize;
use std::path::Path;

/// The stored iteration's target over the K-read floor (Performance II).
const FLOOR_TARGET: f64 = 1.05;
/// The smallest shape the target holds for.
const FLOOR_TARGET_MIN_N: usize = 50_000;

/// Everything one run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The device, in words.
    pub device: String,
    /// Element type.
    pub dtype: String,
    /// Iterations per run.
    pub iters: usize,
    /// Timed repetitions.
    pub reps: usize,
    /// Timed repetitions of the kernel matrix.
    pub kernel_reps: usize,
    /// Factor on every n.
    pub scale: f64,
    /// The kernel.
    pub kernel: &'static str,
    /// The device's ceilings.
    pub ceilings: Option<Ceilings>,
    /// The naive baseline against the library.
    pub checks: Vec<Check>,
    /// Every shape.
    pub shapes: Vec<ShapeRun>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// One shape's results.
#[derive(Debug, Serialize)]
pub struct ShapeRun {
    /// Name.
    pub name: String,
    /// Points.
    pub n: usize,
    /// Features.
    pub d: usize,
    /// The data, in words.
    pub source: String,
    /// Milliseconds of uploading the points.
    pub upload_ms: f64,
    /// The K-read floor, milliseconds: one streaming read of K itself on a GPU (the median of
    /// [`Self::k_read`]); on the CPU K's bytes (4 n^2) at the read ceiling.
    pub floor_ms: Option<f64>,
    /// That read, timed in the same run.
    pub k_read: Option<KRead>,
    /// K's bytes at the measured copy bandwidth (read + write), milliseconds: the floor of
    /// runs before 52, for comparisons.
    pub copy_floor_ms: Option<f64>,
    /// Popcorn's kernel matrix.
    pub popcorn_kernel: Option<KernelMatrix>,
    /// The naive baseline's kernel matrix (GEMM).
    pub naive_kernel: Option<KernelMatrix>,
    /// Popcorn's kernel matrix with TF32 tensor cores (`--tf32`).
    pub popcorn_kernel_tf32: Option<KernelMatrix>,
    /// On data with true classes (`--tf32`): a whole fit with a strict-fp32 kernel matrix
    /// against one with TF32.
    pub tf32_accuracy: Option<Tf32Accuracy>,
    /// `--syrk-variants`: the kernel matrix per SYRK implementation (`cublas`, `auto`, block
    /// rows), strict fp32 then TF32.
    pub syrk_variants: Vec<SyrkVariant>,
    /// Every k.
    pub runs: Vec<KRun>,
    /// `--kernel-storage`: K held in 16 bits, every k.
    pub half_runs: Vec<HalfRun>,
    /// Why the shape was not (fully) measured.
    pub skipped: Option<String>,
    /// Remarks.
    pub notes: Vec<String>,
}

/// K held in a 16-bit format: its build and one k's iterations.
#[derive(Debug, Serialize)]
pub struct HalfRun {
    /// `bf16` or `fp16`.
    pub format: String,
    /// Clusters.
    pub k: usize,
    /// The kernel matrix written in 16 bits.
    pub kernel: KernelMatrix,
    /// The iterations reading it.
    pub iterations: Iterations,
    /// The distance step over the fp32 K-read floor (a streaming read of the f32 K): the 16-bit
    /// floor is 0.5.
    pub distance_over_fp32_floor: Option<f64>,
    /// The iteration's median over the f32 run's.
    pub iteration_over_f32: Option<f64>,
    /// Fraction of final labels equal to the f32 run's (same start, same iterations).
    pub label_agreement: Option<f64>,
    /// `|objective - f32's| / f32's` after the same iterations.
    pub objective_rel_change: Option<f64>,
}

/// The kernel matrix timed with one SYRK implementation.
#[derive(Debug, Serialize)]
pub struct SyrkVariant {
    /// `cublas`, `auto` or the block rows.
    pub variant: String,
    /// Whether TF32 was on.
    pub tf32: bool,
    /// The timing.
    pub kernel: KernelMatrix,
}

/// The accuracy cost of TF32 for the kernel matrix: one fit each way, to convergence.
#[derive(Debug, Serialize)]
pub struct Tf32Accuracy {
    /// Clusters.
    pub k: usize,
    /// Final objective, strict fp32.
    pub objective_strict: f64,
    /// Final objective, TF32.
    pub objective_tf32: f64,
    /// `|tf32 - strict| / strict`.
    pub objective_rel_change: f64,
    /// Fraction of points with the same label.
    pub label_agreement: f64,
    /// ARI of each against the true classes.
    pub ari_strict: f64,
    /// ARI with TF32.
    pub ari_tf32: f64,
    /// Iterations of each.
    pub iterations: (usize, usize),
}

/// One (shape, k).
#[derive(Debug, Serialize)]
pub struct KRun {
    /// Clusters.
    pub k: usize,
    /// Popcorn.
    pub popcorn: Iterations,
    /// The naive baseline.
    pub naive: Option<Iterations>,
    /// Naive end to end over popcorn end to end.
    pub speedup_end_to_end: Option<f64>,
    /// Naive iteration over popcorn iteration (medians).
    pub speedup_iteration: Option<f64>,
    /// Naive row sums over popcorn's distance step (medians).
    pub speedup_distance: Option<f64>,
    /// Points whose final label is the same in both (near ties may differ in f32).
    pub same_labels: Option<usize>,
    /// ARI of popcorn's labels against the true classes.
    pub ari_popcorn: Option<f64>,
    /// ARI of the naive baseline's labels against the true classes.
    pub ari_naive: Option<f64>,
}

fn ari(truth: Option<&[i64]>, labels: &[u32]) -> Option<f64> {
    let t = truth?;
    let pred: Vec<i64> = labels.iter().map(|l| *l as i64).collect();
    (t.len() == pred.len()).then(|| popcorn::metrics::adjusted_rand_index(t, &pred))
}

impl KRun {
    /// Popcorn's results for `k`.
    pub fn new(k: usize, popcorn: Iterations, truth: Option<&[i64]>) -> KRun {
        KRun {
            k,
            ari_popcorn: ari(truth, &popcorn.labels),
            popcorn,
            naive: None,
            speedup_end_to_end: None,
            speedup_iteration: None,
            speedup_distance: None,
            same_labels: None,
            ari_naive: None,
        }
    }

    /// Adds the naive baseline's results.
    pub fn add_naive(&mut self, naive: Iterations, truth: Option<&[i64]>) {
        let p = &self.popcorn;
        self.speedup_end_to_end = Some(naive.end_to_end_s / p.end_to_end_s);
        self.speedup_iteration = Some(naive.iteration_median_ms / p.iteration_median_ms);
        self.speedup_distance = Some(naive.distance_median_ms / p.distance_median_ms);
        self.same_labels = Some(
            naive
                .labels
                .iter()
                .zip(&p.labels)
                .filter(|(a, b)| a == b)
                .count(),
        );
        self.ari_naive = ari(truth, &naive.labels);
        self.naive = Some(naive);
    }
}

impl ShapeRun {
    /// An empty result for the points.
    pub fn new(name: &str, p: &Points) -> ShapeRun {
        ShapeRun {
            name: name.into(),
            n: p.n,
            d: p.d,
            source: p.source.clone(),
            upload_ms: f64::NAN,
            floor_ms: None,
            k_read: None,
            copy_floor_ms: None,
            popcorn_kernel: None,
            naive_kernel: None,
            popcorn_kernel_tf32: None,
            tf32_accuracy: None,
            half_runs: Vec::new(),
            syrk_variants: Vec::new(),
            runs: Vec::new(),
            skipped: None,
            notes: Vec::new(),
        }
    }
}

/// A number with `digits` decimals, or `-`.
fn num(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.digits$}"),
        _ => "-".into(),
    }
}

fn kernel_row(s: &ShapeRun) -> String {
    let k = |m: &Option<KernelMatrix>| match m {
        Some(m) => format!(
            "{:>4} {:>9} {:>6} {:>6}",
            m.product,
            num(Some(m.median_ms), 1),
            num(Some(m.tflop_s), 1),
            num(m.of_sgemm.map(|f| 100.0 * f), 0)
        ),
        None => format!("{:>4} {:>9} {:>6} {:>6}", "-", "-", "-", "-"),
    };
    format!(
        "{:<9} {:>6} {:>6} | {} | {} | {:>8}",
        s.name,
        s.n,
        s.d,
        k(&s.popcorn_kernel),
        k(&s.naive_kernel),
        num(s.floor_ms, 2)
    )
}

/// The header of the kernel-matrix table, in the widths of [`kernel_row`].
fn kernel_header() -> String {
    let k = format!("{:>4} {:>9} {:>6} {:>6}", "op", "ms", "TF/s", "%SGEMM");
    format!(
        "{:<9} {:>6} {:>6} | {:<w$} | {:<w$} | {:>8}\n{:<24}| {k} | {k} | {:>8}",
        "",
        "",
        "",
        "popcorn K",
        "naive K (GEMM)",
        "floor",
        "shape        n      d",
        "ms",
        w = k.len()
    )
}

fn iteration_rows(s: &ShapeRun) -> Vec<String> {
    s.runs
        .iter()
        .map(|r| {
            let p = &r.popcorn;
            let naive = r.naive.as_ref();
            format!(
                "{:<9} {:>4} | {:>8} {:>6} {:>8} {:>6} {:>8} {:>6} {:>7} {:>6} {:>8} | {:>8} {:>8} {:>6} {:>7} {:>8} | {:>5} {:>5} {:>5} | {:>6}",
                s.name,
                r.k,
                num(Some(p.iteration_median_ms), 3),
                num(p.iteration_over_floor, 3),
                num(Some(p.distance_median_ms), 3),
                num(p.distance_over_floor, 3),
                num(p.sparse_left_median_ms, 2),
                num(p.sparse_left_over_floor, 2),
                num(Some(p.argmin_median_ms), 2),
                num(Some(p.readback_median_ms), 2),
                num(Some(p.end_to_end_s), 3),
                num(naive.map(|n| n.iteration_median_ms), 2),
                num(naive.map(|n| n.distance_median_ms), 2),
                num(naive.and_then(|n| n.distance_over_floor), 2),
                num(naive.map(|n| n.argmin_median_ms), 2),
                num(naive.map(|n| n.end_to_end_s), 3),
                num(r.speedup_end_to_end, 2),
                num(r.speedup_iteration, 2),
                num(r.speedup_distance, 2),
                match r.same_labels {
                    Some(same) => format!("{:.1}%", 100.0 * same as f64 / s.n as f64),
                    None => "-".into(),
                }
            )
        })
        .collect()
}

/// The two header lines of the iteration table, in the widths of [`iteration_rows`].
fn iteration_header() -> String {
    let popcorn = format!(
        " {:>8} {:>6} {:>8} {:>6} {:>8} {:>6} {:>7} {:>6} {:>8} ",
        "iter", "/flr", "dist", "/flr", "(V*K)", "/flr", "rest", "rdbk", "e2e s"
    );
    let naive = format!(
        " {:>8} {:>8} {:>6} {:>7} {:>8} ",
        "iter", "rowsums", "/flr", "k2+k3", "e2e s"
    );
    let speedup = format!(" {:>5} {:>5} {:>5} ", "e2e", "iter", "dist");
    let first = format!(
        "{:<15}|{:<w1$}|{:<w2$}|{:<w3$}| same",
        "",
        " popcorn (ms per iteration; e2e s)",
        " naive (ms per iteration; e2e s)",
        " naive/popcorn",
        w1 = popcorn.len(),
        w2 = naive.len(),
        w3 = speedup.len()
    );
    format!(
        "{first}\n{:<9} {:>4} |{popcorn}|{naive}|{speedup}| labels",
        "shape", "k"
    )
}

/// Prints one shape's rows as soon as it is done.
pub fn print_shape(s: &ShapeRun) {
    if let Some(why) = &s.skipped {
        println!("  {}: {why}", s.name);
    }
    println!("  {}", kernel_row(s));
    for row in iteration_rows(s) {
        println!("  {row}");
    }
}

impl Report {
    /// An empty report for the run's settings.
    pub fn new(cli: &Cli, device: String, dtype: String) -> Report {
        Report {
            device,
            dtype,
            iters: cli.iters,
            reps: cli.reps,
            kernel_reps: cli.kernel_reps(),
            scale: cli.scale,
            kernel: "polynomial (gamma 1, coef0 1, degree 2)",
            ceilings: None,
            checks: Vec::new(),
            shapes: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a remark (printed with the tables).
    pub fn note(&mut self, what: &str) {
        self.notes.push(what.into());
    }

    /// The final tables.
    pub fn print(&self) {
        println!();
        println!("== Kernel K-means benchmark on {} ({}, {} iterations, medians of {} reps, K of {} reps) ==", self.device, self.dtype, self.iters, self.reps, self.kernel_reps);
        if let Some(c) = &self.ceilings {
            println!(
                "ceilings: copy {:.0} GB/s (read + write), read {:.0} GB/s, SGEMM {:.1} TFLOP/s ({}^3 fp32)",
                c.copy_gb_s, c.read_gb_s, c.sgemm_tflop_s, c.sgemm_dim
            );
        }
        for c in &self.checks {
            println!(
                "check naive vs library ({} {} points, k {}): {} labels equal, objective rel. diff {:.1e}: {}",
                c.data,
                c.n,
                c.k,
                c.same_labels,
                c.objective_rel_diff,
                if c.pass { "PASS" } else { "MISMATCH" }
            );
        }
        println!();
        println!("Kernel matrix (ms: whole program, product and fused map; TFLOP/s of the product; floor: one streaming read of K itself, timed in the same run; on the CPU K's bytes at the read ceiling)");
        println!("{}", kernel_header());
        for s in &self.shapes {
            println!("{}", kernel_row(s));
        }
        println!();
        println!("Iterations (iter: device time of one iteration; dist: popcorn's distance step alone (selection, E = -2 K V^T) / naive kernel 1; /flr: over the K-read floor; (V*K): the same product with the sparse operand on the left, not used by the iteration; rest: argmin and update; rdbk: label read-back; e2e: K + {} iterations with read-backs)", self.iters);
        println!("{}", iteration_header());
        for s in &self.shapes {
            for row in iteration_rows(s) {
                println!("{row}");
            }
            if let Some(why) = &s.skipped {
                println!("{:<9} skipped: {why}", s.name);
            }
            for n in &s.notes {
                println!("{:<9} note: {n}", s.name);
            }
        }
        if let Some(line) = self.floor_target() {
            println!("{line}");
        }
        for s in &self.shapes {
            for r in &s.runs {
                if let (Some(a), b) = (r.ari_popcorn, r.ari_naive) {
                    println!(
                        "{} k {}: ARI against the true classes: popcorn {a:.4}, naive {}",
                        s.name,
                        r.k,
                        num(b, 4)
                    );
                }
            }
        }
        for n in &self.notes {
            println!("note: {n}");
        }
    }

    /// The stored iteration's target (Performance II): at most [`FLOOR_TARGET`] times the
    /// K-read floor on every shape of at least [`FLOOR_TARGET_MIN_N`] points, with the worst
    /// (shape, k); `None` where no such iteration was measured against a floor.
    fn floor_target(&self) -> Option<String> {
        let worst = self
            .shapes
            .iter()
            .filter(|s| s.n >= FLOOR_TARGET_MIN_N)
            .flat_map(|s| s.runs.iter().map(move |r| (s, r)))
            .filter_map(|(s, r)| Some((r.popcorn.iteration_over_floor?, s.name.as_str(), r.k)))
            .max_by(|a, b| a.0.total_cmp(&b.0))?;
        let (ratio, name, k) = worst;
        Some(format!(
            "target: the stored {} iteration at most {FLOOR_TARGET:.2}x the K-read floor for n >= {FLOOR_TARGET_MIN_N}: worst {ratio:.3}x ({name}, k = {k}): {}",
            self.dtype,
            if ratio <= FLOOR_TARGET { "met" } else { "not met" }
        ))
    }

    /// Writes the whole report as JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| BenchError::Write {
            path: path.display().to_string(),
            source: e.into(),
        })?;
        std::fs::write(path, text).map_err(|e| BenchError::Write {
            path: path.display().to_string(),
            source: e,
        })
    }
}
