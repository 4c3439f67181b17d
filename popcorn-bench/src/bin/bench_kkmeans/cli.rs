//! The command line of the benchmark.

use clap::Parser;
use popcorn::kernel_ir::Half;
use popcorn::DeviceSpec;
use std::path::PathBuf;

/// Kernel K-means benchmark: popcorn against the naive GPU baseline on the paper's shapes.
#[derive(Parser, Debug)]
#[command(
    name = "bench_kkmeans",
    about = "Benchmarks Kernel K-means (popcorn vs the naive GPU baseline) on the paper's shapes",
    after_help = "\
SHAPES (synthetic uniform [0, 1) data of the paper's sizes; polynomial kernel (1, 1, 2)):
  letter 10500 x 26, scotus 6400 x 126405, cifar10 50000 x 3072, mnist 60000 x 780,
  ledgar 70000 x 19996, acoustic 78823 x 50, and fashion (Fashion-MNIST's 60000 x 784
  training images, scaled to [0, 1], when the IDX file is found: --fashion, else
  /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, else next to the binary).
  `paper` names the six paper shapes, `all` (the default) adds fashion when present.

Every (shape, k) runs exactly --iters iterations (no convergence stop) from labels i mod k.
Times are CUDA-event medians over --reps repetitions after a warm-up."
)]
pub struct Cli {
    /// Shapes, comma separated (see SHAPES)
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub shapes: Vec<String>,

    /// Cluster counts, comma separated
    #[arg(long = "k", value_delimiter = ',', default_value = "10,50,100")]
    pub ks: Vec<usize>,

    /// Iterations per run (all of them run: no convergence test)
    #[arg(long, default_value_t = 30)]
    pub iters: usize,

    /// Timed repetitions of every measurement
    #[arg(long, default_value_t = 5)]
    pub reps: usize,

    /// Timed repetitions of the kernel matrix (default: --reps); it dominates large-d shapes
    #[arg(long)]
    pub k_reps: Option<usize>,

    /// Write every number as JSON to this file
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Fashion-MNIST training images (IDX, gzip or not)
    #[arg(long, value_name = "PATH")]
    pub fashion: Option<PathBuf>,

    /// Device: cuda, cuda:N or cpu (cpu: smoke runs; the naive baseline is GPU only)
    #[arg(long, default_value = "cuda", value_parser = parse_device)]
    pub device: DeviceSpec,

    /// Multiply every n by this (d is kept), e.g. 0.01 for a smoke run on the CPU
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,

    /// Skip the naive baseline
    #[arg(long)]
    pub no_naive: bool,

    /// Only measure the GEMM/SYRK threshold for `X * X^T` over a grid of n and d (the
    /// planner's `syrk_gemm_ratio`), then stop.
    #[arg(long)]
    pub threshold: bool,

    /// Also time the kernel matrix with TF32 tensor cores and, on data with true classes
    /// (Fashion-MNIST), measure TF32's accuracy cost on a whole fit.
    #[arg(long)]
    pub tf32: bool,

    /// Also time the kernel matrix with these SYRK implementations, comma separated: `cublas`
    /// (cuBLAS SYRK), `auto` (the planner's block rows), `serial` (the same, with the map after
    /// the whole product instead of overlapped band by band) or a number of block rows for the
    /// GEMMs over block rows; in strict fp32 and, with --tf32, in TF32
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub syrk_variants: Vec<String>,

    /// Also hold K in these 16-bit formats, comma separated (`bf16`, `fp16`): the kernel matrix
    /// (with --tf32, its product on TF32 tensor cores) and every k's iteration timed again,
    /// against the fp32 floor, with the labels' agreement with the f32 run
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = parse_half)]
    pub kernel_storage: Vec<Half>,

    /// Skip measuring the copy and read bandwidths, the read of each K and the SGEMM
    /// throughput (no floors then)
    #[arg(long)]
    pub no_ceilings: bool,

    /// Skip the check of the naive baseline against the library on small data
    #[arg(long)]
    pub no_check: bool,

    /// Seed of the synthetic data
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_half(s: &str) -> Result<Half, String> {
    s.parse::<Half>()
}

fn parse_device(s: &str) -> Result<DeviceSpec, String> {
    s.parse::<DeviceSpec>().map_err(|e| e.to_string())
}

impl Cli {
    /// Checks the numbers that clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.iters == 0 || self.reps == 0 || self.k_reps == Some(0) {
            return Err("--iters, --reps and --k-reps must be at least 1".into());
        }
        if self.ks.is_empty() || self.ks.contains(&0) {
            return Err("--k needs cluster counts of at least 1".into());
        }
        for v in &self.syrk_variants {
            if syrk_variant(v).is_none() {
                return Err(format!(
                    "--syrk-variants: `{v}` is not cublas, auto, serial or a number of block rows"
                ));
            }
        }
        if !(self.scale > 0.0 && self.scale <= 1.0) {
            return Err(format!("--scale {} must be in (0, 1]", self.scale));
        }
        Ok(())
    }

    /// Timed repetitions of the kernel matrix.
    pub fn kernel_reps(&self) -> usize {
        self.k_reps.unwrap_or(self.reps)
    }
}

/// A `--syrk-variants` entry as the planner's `(syrk_block_rows, overlap_syrk_map)`: `cublas` is
/// `Some(0)`, `auto` is `None`, `serial` is `None` without overlap, a number `b >= 1` is
/// `Some(b)`.
pub fn syrk_variant(v: &str) -> Option<(Option<usize>, bool)> {
    match v {
        "cublas" => Some((Some(0), true)),
        "auto" => Some((None, true)),
        "serial" => Some((None, false)),
        _ => v
            .parse::<usize>()
            .ok()
            .filter(|b| *b >= 1)
            .map(|b| (Some(b), true)),
    }
}
