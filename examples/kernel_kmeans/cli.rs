//! The command line: flags compatible with the reference's `gpukmeans`, plus popcorn's own.

use clap::Parser;
use popcorn::io::LabelColumn;
use popcorn::kernel_ir::Half;
use popcorn::kkmeans::{Algorithm, ProductPrecision};
use popcorn::{DType, DeviceSpec};
use std::path::PathBuf;

/// Points in the synthetic data sets when `-n` is not given.
pub const DEFAULT_N: usize = 1500;

/// Kernel K-means on the CPU or a GPU with popcorn.
#[derive(Parser, Debug)]
#[command(
    name = "kernel_kmeans",
    version,
    about = "Kernel K-means with popcorn (flags compatible with the reference's gpukmeans)",
    long_about = None,
    after_help = "\
DATA:
  -i FILE          cluster FILE (.csv/.tsv/.txt, libsvm, .npy, scipy sparse .npz, IDX; all
                   but .npz gzip too). With -f precomputed, FILE holds the n x n kernel
                   matrix instead (.csv or .npy).
  (no -i, no -d)   the demo: 2 concentric rings (radii 0.25 and 1, radial noise 0.05, seeded
                   by -s, n = 1500 unless -n), clustered with the gaussian kernel (gamma 4)
                   AND with the linear kernel (plain k-means), printing the ARI of both
                   (-f replaces the gaussian kernel; --gamma its gamma).
  (no -i, -d D)    n x D uniform random values in [0, 1), as the reference draws.

DEFAULTS:
  -k               the number of classes of a labeled file; 2 for the synthetic data.
  -f               gaussian for the rings demo; linear otherwise.
  --gamma          polynomial 1; gaussian and sigmoid 1/d (4 in the rings demo).
  --coef0, --degree  1 and 2 (the reference's polynomial kernel is (1, 1, 2)).

WEIGHTS:
  --weights FILE   point i weighs w_i: centroids are weighted means in feature space and the
                   objective is sum_i w_i ||phi(x_i) - c||^2 (integer weights act as repeating
                   each point). A zero-weight point is labelled but moves no centroid.

SPARSE POINTS:
  --sparse auto|on|off  keep the points sparse (CSR): the kernel matrix is built from them
                   without densifying where the planner finds that cheaper (the plan says
                   how). auto (default): sparse for a libsvm or scipy .npz file whose density
                   is below 10%; on: always (other formats are converted); off: dense.
                   Sparse points take the stored kernel matrix; --zscore, --algorithm
                   recompute, -o, --plot and -l naive need dense ones.

GRAPHS:
  --graph FILE     the normalized cut of a graph: FILE.mtx (Matrix Market coordinate, real,
                   integer or pattern, general or symmetric) or an edge list (`i j [weight]`
                   a line, 0-based unless --one-based, # and % comments; made symmetric).
                   Weighted Kernel K-means with the degrees as weights and the kernel
                   sigma D^-1 + D^-1 A D^-1, one sparse product per iteration (--sigma auto|S).
                   Uses -k, -m, -r, -s (random labels), --device, --dtype, --labels-out, --json.

When the data has true labels, the ARI and NMI of the clustering are printed.
Exit status: 0 done, 1 bad data or a failed run, 2 bad usage."
)]
pub struct Cli {
    /// Number of points of the synthetic data; with -i, cluster only the first N points
    #[arg(short = 'n', value_name = "N")]
    pub n: Option<usize>,

    /// Dimensions: without -i, draw uniform random data of N x D; with -i, the file must
    /// have D features
    #[arg(short = 'd', value_name = "D")]
    pub d: Option<usize>,

    /// Number of clusters
    #[arg(short = 'k', value_name = "K")]
    pub k: Option<usize>,

    /// Maximum number of iterations (per run)
    #[arg(short = 'm', value_name = "ITERS", default_value_t = 300)]
    pub max_iter: usize,

    /// Relative objective improvement under which -c 1 stops
    #[arg(
        short = 't',
        value_name = "TOL",
        default_value_t = 1e-4,
        allow_negative_numbers = true
    )]
    pub tol: f64,

    /// Check convergence: 1 also stops when the objective improves by less than -t
    /// (a fixed point, where no label changes, always stops)
    #[arg(short = 'c', value_name = "0|1", default_value = "0", action = clap::ArgAction::Set, value_parser = parse_switch)]
    pub check_convergence: bool,

    /// Make all -m iterations even past a fixed point (same labels; for timing a fixed number
    /// of iterations, as a benchmark peer that never checks does)
    #[arg(long)]
    pub all_iterations: bool,

    /// Runs from different seeds (random and kmeans++ inits); the lowest objective wins
    #[arg(short = 'r', value_name = "RUNS", default_value_t = 1)]
    pub runs: usize,

    /// Seed of the synthetic data and of the random and kmeans++ inits
    #[arg(short = 's', value_name = "SEED", default_value_t = 0)]
    pub seed: u64,

    /// Input file (see DATA below)
    #[arg(short = 'i', value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Point weights (weighted Kernel K-means): one weight per line, or a one-column .csv or
    /// .npy; as many as points (with -n N, the first N). Finite, >= 0, not all 0
    #[arg(long, value_name = "FILE")]
    pub weights: Option<PathBuf>,

    /// Sparse points: auto (a libsvm or .npz file below 10% density), on, off (see SPARSE
    /// POINTS)
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_sparse)]
    pub sparse: SparseMode,

    /// Output CSV: the label, then the coordinates, one point a line
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Kernel: linear, polynomial, gaussian (or rbf), sigmoid, precomputed
    #[arg(short = 'f', value_name = "KERNEL", value_parser = parse_kernel)]
    pub kernel: Option<KernelName>,

    /// Initial labels: mod (point i in cluster i mod k), random, kmeans++
    #[arg(long, value_name = "INIT", default_value = "mod", value_parser = parse_init)]
    pub init: InitName,

    /// Implementation level: popcorn (or 2); naive (or 0), the hand-written GPU baseline
    /// (GPU only; --init mod or random)
    #[arg(short = 'l', value_name = "LEVEL", default_value = "popcorn", value_parser = parse_level)]
    pub level: Level,

    /// Kernel gamma (polynomial, gaussian, sigmoid)
    #[arg(long, value_name = "G", allow_negative_numbers = true)]
    pub gamma: Option<f64>,

    /// Kernel coef0 (polynomial, sigmoid)
    #[arg(long, value_name = "C", allow_negative_numbers = true)]
    pub coef0: Option<f64>,

    /// Kernel degree (polynomial)
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub degree: Option<f64>,

    /// Standardise every feature (zero mean, unit variance) before clustering
    #[arg(long)]
    pub zscore: bool,

    /// Compute the kernel matrix with TF32 tensor cores (f32 on a GPU; see BENCHMARKS.md for
    /// its accuracy cost); the same as --precision tf32
    #[arg(long)]
    pub tf32: bool,

    /// How the kernel's products multiply their operands (f32 on a GPU): strict fp32, tf32
    /// (tensor cores), bf16 / fp16 (both operands rounded to 16 bits on 16-bit tensor cores,
    /// f32 accumulation; the library's products then use TF32), or 3xtf32 (three TF32 products
    /// of split operands: about fp32's accuracy on tensor cores). BENCHMARKS.md measures each
    /// one's accuracy
    #[arg(long, value_name = "PRECISION", default_value = "strict", value_parser = parse_precision)]
    pub precision: ProductPrecision,

    /// How a stored kernel matrix is held: f32 (the fit's type), or bf16 / fp16 (half the bytes
    /// written and read every iteration, each entry rounded to 16 bits; computed in f32)
    #[arg(long, value_name = "FORMAT", default_value = "f32", value_parser = parse_storage)]
    pub kernel_storage: KernelStorage,

    /// Kernel matrix: stored (built once, n^2 values), recompute (its tiles recomputed from the
    /// points every iteration, never stored), features (polynomial kernels of degree 1 or 2:
    /// the linear kernel on the kernel's explicit features, (d+1)(d+2)/2 at most, no n x n
    /// value), or auto (the fastest that fits in memory)
    #[arg(long, value_name = "ALGORITHM", default_value = "auto", value_parser = parse_algorithm)]
    pub algorithm: Algorithm,

    /// The most memory (GPU, or host on the CPU) the fit's plans count as free: bytes, or a
    /// number with K, M, G or T (powers of 1024), e.g. 1536M. Auto takes no stored K beyond
    /// it, and the features algorithm builds its features in blocks of rows within it (the
    /// context's own memory comes on top; an algorithm asked for by name, and recompute's
    /// memory, are not checked against it)
    #[arg(long, value_name = "BYTES", value_parser = parse_memory)]
    pub memory_limit: Option<u64>,

    /// Device: cpu, cuda, cuda:N, cuda:0,1 (several GPUs), cuda:all or auto (default: $POPCORN_DEVICE, else the first GPU, else
    /// the CPU)
    #[arg(long, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<DeviceSpec>,

    /// Element type of the computation: f32 or f64
    #[arg(long, value_name = "DTYPE", default_value = "f32", value_parser = parse_dtype)]
    pub dtype: DType,

    /// Which column of a CSV input holds the true labels: auto, first, last, none
    #[arg(long, value_name = "COLUMN", default_value = "auto", value_parser = parse_label_column)]
    pub label_column: LabelColumn,

    /// Write the labels, one a line
    #[arg(long, value_name = "FILE")]
    pub labels_out: Option<PathBuf>,

    /// Write the whole result as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Print the plans of the programs the run uses, then run
    #[arg(long)]
    pub plan: bool,

    /// Draw every fit into FILE (.png or .svg): the points coloured by cluster (2-D data as
    /// it is, other data on its first two principal components) and the objective per
    /// iteration
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// The TrueType font of --plot's text (default: one found under the system's font
    /// folders)
    #[arg(long, value_name = "FILE.ttf", requires = "plot")]
    pub plot_font: Option<PathBuf>,

    /// A graph to cluster by normalized cut (see GRAPHS)
    #[command(flatten)]
    pub graph: super::graph::GraphArgs,
}

/// The kernel named on the command line (its parameters come from other flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelName {
    /// `linear`
    Linear,
    /// `polynomial`
    Polynomial,
    /// `gaussian` or `rbf`
    Gaussian,
    /// `sigmoid`
    Sigmoid,
    /// `precomputed`
    Precomputed,
}

/// The initialisation named on the command line (seeded by `-s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitName {
    /// `mod`
    Mod,
    /// `random`
    Random,
    /// `kmeans++`
    KMeansPlusPlus,
}

/// The implementation level (`-l`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// `naive` or `0`: the reference's naive GPU baseline.
    Naive,
    /// `popcorn` or `2`.
    Popcorn,
}

fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        _ => Err("expected 0 or 1".into()),
    }
}

fn parse_kernel(s: &str) -> Result<KernelName, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "linear" => Ok(KernelName::Linear),
        "polynomial" | "poly" => Ok(KernelName::Polynomial),
        "gaussian" | "rbf" => Ok(KernelName::Gaussian),
        "sigmoid" => Ok(KernelName::Sigmoid),
        "precomputed" => Ok(KernelName::Precomputed),
        _ => Err(
            "unknown kernel; expected linear, polynomial, gaussian (rbf), sigmoid or precomputed"
                .into(),
        ),
    }
}

/// `--sparse`: whether the points are kept sparse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparseMode {
    /// Sparse for a libsvm or `.npz` file below [`super::data::SPARSE_AUTO_MAX_DENSITY`].
    Auto,
    /// Always sparse.
    On,
    /// Always dense.
    Off,
}

fn parse_sparse(s: &str) -> Result<SparseMode, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(SparseMode::Auto),
        "on" => Ok(SparseMode::On),
        "off" => Ok(SparseMode::Off),
        _ => Err("unknown sparse mode; expected auto, on or off".into()),
    }
}

fn parse_init(s: &str) -> Result<InitName, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "mod" => Ok(InitName::Mod),
        "random" => Ok(InitName::Random),
        "kmeans++" | "k-means++" | "kmeanspp" => Ok(InitName::KMeansPlusPlus),
        _ => Err("unknown init; expected mod, random or kmeans++".into()),
    }
}

fn parse_level(s: &str) -> Result<Level, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "popcorn" | "2" => Ok(Level::Popcorn),
        "naive" | "0" => Ok(Level::Naive),
        _ => Err("unknown level; expected popcorn (2) or naive (0)".into()),
    }
}

fn parse_device(s: &str) -> Result<DeviceSpec, String> {
    s.parse::<DeviceSpec>().map_err(|e| e.to_string())
}

/// How `--kernel-storage` holds a stored kernel matrix: in 16 bits, or (`None`) in the fit's type.
#[derive(Clone, Copy, Debug)]
pub struct KernelStorage(pub Option<Half>);

fn parse_storage(s: &str) -> Result<KernelStorage, String> {
    match s {
        "f32" | "float32" => Ok(KernelStorage(None)),
        other => other
            .parse::<Half>()
            .map(|h| KernelStorage(Some(h)))
            .map_err(|e| format!("{e}, or f32")),
    }
}

fn parse_memory(s: &str) -> Result<u64, String> {
    match popcorn::dsl::settings::parse_bytes(s) {
        Some(0) => {
            Err("a memory limit of 0 leaves nothing to plan in; give a positive size".into())
        }
        Some(bytes) => Ok(bytes),
        None => Err(format!(
            "`{s}` is not a size; give bytes, or a whole number with K, M, G or T (1536M)"
        )),
    }
}

fn parse_precision(s: &str) -> Result<ProductPrecision, String> {
    s.trim().parse::<ProductPrecision>()
}

fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    s.trim().to_ascii_lowercase().parse::<Algorithm>()
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    s.trim().to_ascii_lowercase().parse::<DType>()
}

fn parse_label_column(s: &str) -> Result<LabelColumn, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(LabelColumn::Auto),
        "first" => Ok(LabelColumn::First),
        "last" => Ok(LabelColumn::Last),
        "none" => Ok(LabelColumn::None),
        _ => Err("expected auto, first, last or none".into()),
    }
}
