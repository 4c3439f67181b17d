//! Kernel K-means, the flagship: the linear algebra (kernel matrix, distances, centroid norms,
//! argmin, the selection matrix) is written in the DSL (`examples/programs/kernel_kmeans.pop`);
//! the loop, initialisation and convergence are ordinary Rust.
//!
//! ```
//! use popcorn::kkmeans::{Kernel, KernelKMeans, Points};
//! use popcorn::DeviceSpec;
//!
//! // Two well separated groups on a line.
//! let x = [0.0, 0.1, 0.2, 5.0, 5.1, 5.2];
//! let fit = KernelKMeans::new(2)
//!     .kernel(Kernel::Gaussian { gamma: Some(1.0) })
//!     .device(DeviceSpec::Cpu)
//!     .fit(Points::new(6, 1, &x).unwrap())
//!     .unwrap();
//! assert_eq!(fit.labels[0], fit.labels[2]);
//! assert_ne!(fit.labels[0], fit.labels[3]);
//! assert!(fit.converged);
//! ```

mod algorithm;
mod csr_upload;
pub(crate) mod error;
mod feature_blocks;
mod feature_choice;
mod features;
mod init;
mod model;
mod precision;
pub mod programs;
mod source;
mod sparse;
mod weights;

pub use algorithm::{Algorithm, AlgorithmChoice, EXPECTED_ITERATIONS};
pub(crate) use csr_upload::upload;
pub use error::FitError;
use feature_blocks::FeatureBlocks;
pub use init::SplitMix64;
use model::KernelPrograms;
pub use model::{Model, ModelParts, Scaling};
pub use precision::ProductPrecision;
use source::Source;
pub use weights::WeightSummary;

use crate::{Args, Context, DType, DeviceSpec, Outputs, RuntimeError, Tensor};
use kernel_ir::Half;
use serde::Serialize;
use std::ops::ControlFlow;
use std::time::Instant;

/// The kernel function kappa(x, y).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Kernel {
    /// `x . y`
    Linear,
    /// `(gamma x . y + coef0)^degree` (the reference's runs: gamma 1, coef0 1, degree 2).
    Polynomial {
        /// Scale of the dot product.
        gamma: f64,
        /// Offset.
        coef0: f64,
        /// Exponent.
        degree: f64,
    },
    /// `exp(-gamma ||x - y||^2)`; `gamma` defaults to `1/d`.
    Gaussian {
        /// Width; `None` means `1/d`.
        gamma: Option<f64>,
    },
    /// `tanh(gamma x . y + coef0)`; `gamma` defaults to `1/d`.
    Sigmoid {
        /// Scale; `None` means `1/d`.
        gamma: Option<f64>,
        /// Offset.
        coef0: f64,
    },
    /// The caller gives K itself ([`KernelKMeans::fit_precomputed`]).
    Precomputed,
}

impl Kernel {
    /// The polynomial kernel with the reference's parameters (1, 1, 2).
    pub const POLYNOMIAL_DEFAULT: Kernel = Kernel::Polynomial {
        gamma: 1.0,
        coef0: 1.0,
        degree: 2.0,
    };

    /// The kernel's name as in the CLI (`linear`, `polynomial`, `gaussian`, `sigmoid`,
    /// `precomputed`).
    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Linear => "linear",
            Kernel::Polynomial { .. } => "polynomial",
            Kernel::Gaussian { .. } => "gaussian",
            Kernel::Sigmoid { .. } => "sigmoid",
            Kernel::Precomputed => "precomputed",
        }
    }

    /// Whether the kernel is positive semi-definite (the objective then never increases).
    pub fn is_psd(&self) -> bool {
        !matches!(self, Kernel::Sigmoid { .. } | Kernel::Precomputed)
    }

    /// An upper bound on `|kappa(x, y)|` over the `n x d` row-major points `x` (by
    /// Cauchy-Schwarz, `|x . y| <= max ||x||^2`): `max ||x||^2` for the linear kernel,
    /// `(|gamma| max ||x||^2 + |coef0|)^degree` for the polynomial one (infinite for a
    /// negative degree, whose values are unbounded near a zero base), 1 for the Gaussian and
    /// sigmoid ones. `INFINITY` for a precomputed kernel (its values are checked directly).
    ///
    /// ```
    /// use popcorn::kkmeans::Kernel;
    /// let x = [3.0, 4.0, 1.0, 0.0]; // norms 5 and 1
    /// assert_eq!(Kernel::Linear.bound(&x, 2), 25.0);
    /// assert_eq!(Kernel::POLYNOMIAL_DEFAULT.bound(&x, 2), 26.0 * 26.0);
    /// assert_eq!(Kernel::Gaussian { gamma: None }.bound(&x, 2), 1.0);
    /// ```
    pub fn bound(&self, x: &[f64], d: usize) -> f64 {
        let norm2 = x
            .chunks(d.max(1))
            .map(|row| row.iter().map(|v| v * v).sum::<f64>())
            .fold(0.0f64, f64::max);
        self.bound_from_norm(norm2)
    }

    /// The kernel times `scale` (a positive factor): the polynomial kernel with `gamma` and
    /// `coef0` multiplied by `scale^(1/degree)`, the linear one as that polynomial of degree 1;
    /// the others unchanged (their values stay within 1, so they are never scaled).
    pub fn scaled(&self, scale: f64) -> Kernel {
        if scale == 1.0 {
            return *self;
        }
        match *self {
            Kernel::Linear => Kernel::Polynomial {
                gamma: scale,
                coef0: 0.0,
                degree: 1.0,
            },
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } if degree > 0.0 => {
                let f = scale.powf(1.0 / degree);
                Kernel::Polynomial {
                    gamma: gamma * f,
                    coef0: coef0 * f,
                    degree,
                }
            }
            other => other,
        }
    }

    /// [`Kernel::bound`] from the largest squared norm of the points.
    pub fn bound_from_norm(&self, max_norm2: f64) -> f64 {
        match *self {
            Kernel::Linear => max_norm2,
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } if degree >= 0.0 => (gamma.abs() * max_norm2 + coef0.abs()).powf(degree),
            Kernel::Polynomial { .. } | Kernel::Precomputed => f64::INFINITY,
            Kernel::Gaussian { .. } | Kernel::Sigmoid { .. } => 1.0,
        }
    }
}

/// How the first labels are chosen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Init {
    /// Point `i` starts in cluster `i mod k` (deterministic; the reference's default).
    Mod,
    /// Uniformly random labels.
    Random {
        /// Seed (run `r` of `n_init` uses `seed + r`).
        seed: u64,
    },
    /// k-means++ in feature space (from columns of K).
    KMeansPlusPlus {
        /// Seed (run `r` of `n_init` uses `seed + r`).
        seed: u64,
    },
    /// Given labels, each below `k`.
    Labels(Vec<u32>),
}

/// Points to cluster: `n` rows of `d` features, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Points<'a> {
    /// Number of points.
    pub n: usize,
    /// Number of features.
    pub d: usize,
    /// `n * d` values, row-major.
    pub data: &'a [f64],
}

impl<'a> Points<'a> {
    /// Checks that `data` holds `n * d` finite values.
    pub fn new(n: usize, d: usize, data: &'a [f64]) -> Result<Points<'a>, FitError> {
        if n == 0 || d == 0 {
            return Err(FitError::Input(format!(
                "no data: {n} points of {d} features"
            )));
        }
        if data.len() != n * d {
            return Err(FitError::Input(format!(
                "{n} points of {d} features need {} values, got {}",
                n * d,
                data.len()
            )));
        }
        if let Some(p) = data.iter().position(|v| !v.is_finite()) {
            return Err(FitError::Input(format!(
                "point {}, feature {} is {} ; clean the data or drop the point",
                p / d,
                p % d,
                data[p]
            )));
        }
        Ok(Points { n, d, data })
    }
}

impl<'a> TryFrom<&'a crate::io::Dataset> for Points<'a> {
    type Error = FitError;
    fn try_from(ds: &'a crate::io::Dataset) -> Result<Points<'a>, FitError> {
        Points::new(ds.n, ds.d, &ds.x)
    }
}

/// Seconds spent in each phase of a fit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    /// Creating the context and uploading the points (and, where K is stored, the product
    /// library's one-time setup: cuBLAS's, 0.1-0.2 s on an H100, at its first product).
    pub upload_s: f64,
    /// Computing the kernel matrix (0 when it is recomputed every iteration instead; for
    /// [`Algorithm::Features`], computing the kernel's features).
    pub kernel_matrix_s: f64,
    /// Initial labels (all runs).
    pub init_s: f64,
    /// All iterations of all runs.
    pub iterations_s: f64,
    /// Each iteration of the best run (distances, argmin, objective and the labels-changed
    /// test).
    pub per_iteration_s: Vec<f64>,
    /// Everything.
    pub total_s: f64,
}

/// What happened during a fit, for progress displays.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A phase started (`upload`, `kernel matrix` (stored K only), `features` (the features
    /// algorithm), `init`, `iterations`).
    Phase(&'static str),
    /// An iteration finished.
    Iteration {
        /// Run number (0-based) of `n_init`.
        run: usize,
        /// Iteration number (1-based).
        iteration: usize,
        /// Objective of the labels at the start of the iteration.
        objective: f64,
        /// Points whose label changed.
        changed: usize,
    },
}

/// A callback told of every [`Progress`] event that may stop the fit by breaking.
pub type Control<'c> = dyn FnMut(&Progress) -> ControlFlow<()> + 'c;

/// Tells `control` of `event`; a break becomes [`FitError::Interrupted`], naming the event.
fn report(control: &mut Control<'_>, event: &Progress) -> Result<(), FitError> {
    match control(event) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(()) => Err(FitError::Interrupted(match event {
            Progress::Phase(phase) => format!("before the phase `{phase}`"),
            Progress::Iteration { run, iteration, .. } => {
                format!("after iteration {iteration} of run {}", run + 1)
            }
        })),
    }
}

/// The result of a fit.
#[derive(Debug, Serialize)]
pub struct FitResult {
    /// Cluster of each point.
    pub labels: Vec<u32>,
    /// The objective of the final labels, `sum_i ||phi(x_i) - c_{label_i}||^2` (tr(K) included);
    /// in a weighted fit `sum_i w_i ||phi(x_i) - c_{label_i}||^2`.
    pub objective: f64,
    /// The objective of the labels at the start of each iteration (best run).
    pub objective_history: Vec<f64>,
    /// Iterations run (best run).
    pub iterations: usize,
    /// Whether the best run stopped at a fixed point or under the tolerance, not at max_iter.
    pub converged: bool,
    /// Clusters without points at the end (in a weighted fit, of total weight 0).
    pub empty_clusters: usize,
    /// Which of the `n_init` runs won.
    pub best_run: usize,
    /// Time per phase.
    pub timings: Timings,
    /// The device, in words.
    pub device: String,
    /// Element type of the computation.
    pub dtype: DType,
    /// The parameters of the fit.
    pub params: KernelKMeans,
    /// Stored or recomputed K, and why (a precomputed K is stored).
    pub algorithm: AlgorithmChoice,
    /// The points' weights, where the fit was weighted ([`KernelKMeans::sample_weight`]).
    pub weights: Option<WeightSummary>,
    /// What [`FitResult::predict`] needs.
    #[serde(skip)]
    pub model: Option<Model>,
}

impl FitResult {
    /// The nearest feature-space centroid for new points (`m x d`, the fit's `d`).
    pub fn predict(&self, points: Points<'_>) -> Result<Vec<u32>, FitError> {
        match &self.model {
            Some(m) => m.predict(points),
            None => Err(FitError::Parameter(
                "this result has no model (precomputed kernel); use Model::predict_precomputed"
                    .into(),
            )),
        }
    }
}

/// Kernel K-means with a scikit-learn style builder.
#[derive(Clone, Debug, Serialize)]
pub struct KernelKMeans {
    /// Number of clusters.
    pub k: usize,
    /// Kernel.
    pub kernel: Kernel,
    /// Initial labels.
    pub init: Init,
    /// Iteration limit (per run).
    pub max_iter: usize,
    /// Relative objective improvement under which a run stops (when `check_convergence`).
    pub tol: f64,
    /// Stop when the objective improves by less than `tol` (relative); a fixed point (no label
    /// changed) stops too unless `stop_at_fixed_point` is off.
    pub check_convergence: bool,
    /// Stop at a fixed point (an iteration that changes no label: every later one repeats
    /// it). Off, a run makes all `max_iter` iterations, for timing a fixed number of them.
    pub stop_at_fixed_point: bool,
    /// Number of runs from different seeds; the lowest final objective wins.
    pub n_init: usize,
    /// Standardise every feature (zero mean, unit variance) first.
    pub zscore: bool,
    /// Where to run.
    #[serde(skip)]
    pub device: DeviceSpec,
    /// Element type.
    pub dtype: DType,
    /// Compute the kernel matrix's product with TF32 tensor cores (f32 only): several times
    /// faster, at about 10 bits of mantissa per operand (see BENCHMARKS.md for the cost).
    pub tf32: bool,
    /// Hold the stored kernel matrix in 16 bits (bf16 or fp16; f32 fits only): written and
    /// read in half the bytes, every iteration still computing in f32.
    pub kernel_storage: Option<Half>,
    /// Multiply the kernel's products with 16-bit operands (bf16 or fp16) on 16-bit tensor
    /// cores, accumulating in f32 (f32 fits on a GPU); see [`KernelKMeans::precision`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_products: Option<Half>,
    /// Compute the kernel's products as three TF32 products of split operands (3xTF32), see
    /// [`KernelKMeans::precision`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tf32x3: bool,
    /// Stored or recomputed kernel matrix.
    pub algorithm: Algorithm,
    /// The most memory (GPU, or host on the CPU) the fit plans to take, in bytes; `None`: what
    /// is free. See [`KernelKMeans::memory_limit`].
    #[serde(default)]
    pub memory_limit: Option<u64>,
    /// The points' weights (weighted Kernel K-means), one per point; `None`: every point
    /// weighs 1. Reported as [`FitResult::weights`], not with the parameters.
    #[serde(skip)]
    pub sample_weight: Option<Vec<f64>>,
}

impl KernelKMeans {
    /// `k` clusters, linear kernel, `i mod k` start, up to 300 iterations, run until no label
    /// changes, on the default device in f32.
    pub fn new(k: usize) -> KernelKMeans {
        KernelKMeans {
            k,
            kernel: Kernel::Linear,
            init: Init::Mod,
            max_iter: 300,
            tol: 1e-4,
            check_convergence: false,
            stop_at_fixed_point: true,
            n_init: 1,
            zscore: false,
            device: DeviceSpec::Auto,
            dtype: DType::F32,
            tf32: false,
            kernel_storage: None,
            half_products: None,
            tf32x3: false,
            algorithm: Algorithm::Auto,
            memory_limit: None,
            sample_weight: None,
        }
    }

    /// Weighs the points (weighted Kernel K-means, Dhillon, Guan and Kulis 2004): point `i`
    /// weighs `weights[i]`, a centroid is the weighted mean of its points in feature space and
    /// the objective `sum_i w_i ||phi(x_i) - c_{label_i}||^2`, so integer weights give what
    /// repeating each point that many times gives. Weights are finite and `>= 0`, one per
    /// point, not all 0 (checked by the fit, which names the first bad one). A zero-weight
    /// point still gets a label (the nearest centroid) but moves no centroid and adds nothing
    /// to the objective; a cluster whose weights sum to 0 counts as empty (as scikit-learn's
    /// `KMeans` treats `sample_weight`). k-means++ draws by weight too.
    ///
    /// ```
    /// use popcorn::kkmeans::{KernelKMeans, Points};
    /// use popcorn::DeviceSpec;
    ///
    /// let x = [0.0, 1.0, 10.0];
    /// let fit = KernelKMeans::new(1)
    ///     .sample_weight(&[1.0, 3.0, 0.0])
    ///     .device(DeviceSpec::Cpu)
    ///     .dtype(popcorn::DType::F64)
    ///     .fit(Points::new(3, 1, &x).unwrap())
    ///     .unwrap();
    /// // The centroid is 0.75; the objective 1 * 0.75^2 + 3 * 0.25^2 (the last point weighs 0).
    /// assert!((fit.objective - 0.75).abs() < 1e-12);
    /// assert_eq!(fit.weights.unwrap().zero, 1);
    /// ```
    pub fn sample_weight(mut self, weights: &[f64]) -> Self {
        self.sample_weight = Some(weights.to_vec());
        self
    }

    /// Sets how the kernel matrix is had: stored once, recomputed every iteration, through the
    /// kernel's explicit features (polynomial kernels of degree 1 or 2), or the fastest that
    /// fits ([`Algorithm::Auto`], the default).
    ///
    /// ```
    /// use popcorn::kkmeans::{Algorithm, Kernel, KernelKMeans, Points};
    /// use popcorn::{DType, DeviceSpec};
    ///
    /// let x = [0.0, 0.3, 0.1, 0.2, 2.0, 2.2, 2.1, 1.9, 4.0, 4.1, 3.9, 4.3];
    /// let km = KernelKMeans::new(2)
    ///     .kernel(Kernel::POLYNOMIAL_DEFAULT)
    ///     .device(DeviceSpec::Cpu)
    ///     .dtype(DType::F64);
    /// let points = Points::new(6, 2, &x).unwrap();
    /// let stored = km.clone().algorithm(Algorithm::Stored).fit(points).unwrap();
    /// let features = km.algorithm(Algorithm::Features).fit(points).unwrap();
    /// assert_eq!(features.algorithm.feature_dim, 6); // x1^2, x1 x2, x2^2, x1, x2, 1
    /// assert_eq!(features.labels, stored.labels);
    /// assert!((features.objective - stored.objective).abs() < 1e-9 * stored.objective.abs());
    /// ```
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Lets the kernel matrix use TF32 tensor cores: the library's products, and the generated
    /// contractions' unless 16-bit or 3xTF32 products are set ([`KernelKMeans::precision`],
    /// which sets all three at once).
    pub fn tf32(mut self, on: bool) -> Self {
        self.tf32 = on;
        self
    }

    /// How the products of the kernel (`X * X^T`, the points' products with the centroids'
    /// features) multiply their f32 operands on a GPU: strictly (the default), on TF32 tensor
    /// cores (11 significant bits per operand), or with both operands rounded to bf16 (8 bits,
    /// the range of f32) or fp16 (11 bits, at most 65504 in magnitude) on 16-bit tensor cores,
    /// which run at twice TF32's rate from half its bytes, or as three TF32 products of split
    /// operands (3xTF32: each operand a TF32 part and the TF32 rounding of the rest), about
    /// fp32's accuracy on tensor cores at a third of TF32's rate (the library's products then
    /// strict); every product accumulates in f32.
    /// The generated contraction kernels (the recompute algorithm, and a stored K written by
    /// one) take 16-bit operands; the library's products (cuBLAS) then run in TF32. The CPU, and
    /// f64 fits, compute every product strictly. An fp16 fit whose points (after z-scoring)
    /// pass 65504 in magnitude is an error naming the fix. The launcher copies both operands
    /// of each such product into scratch memory first (16-bit: half their bytes; 3xTF32: three
    /// times the bytes of each), which the memory limit does not count. BENCHMARKS.md measures each one's
    /// accuracy against f64.
    ///
    /// ```
    /// use popcorn::kkmeans::{KernelKMeans, Points, ProductPrecision};
    /// use popcorn::DeviceSpec;
    ///
    /// let x = [0.0, 0.1, 0.2, 5.0, 5.1, 5.2];
    /// let km = KernelKMeans::new(2).precision(ProductPrecision::Bf16);
    /// assert_eq!(km.product_precision(), ProductPrecision::Bf16);
    /// let fit = km.device(DeviceSpec::Cpu).fit(Points::new(6, 1, &x).unwrap()).unwrap();
    /// assert_eq!(fit.labels[..3], [fit.labels[0]; 3]);
    /// assert_ne!(fit.labels[0], fit.labels[3]);
    /// ```
    pub fn precision(mut self, precision: ProductPrecision) -> Self {
        self.tf32 = !matches!(
            precision,
            ProductPrecision::Strict | ProductPrecision::Tf32x3
        );
        self.tf32x3 = precision == ProductPrecision::Tf32x3;
        self.half_products = match precision {
            ProductPrecision::Bf16 => Some(Half::Bf16),
            ProductPrecision::Fp16 => Some(Half::F16),
            ProductPrecision::Strict | ProductPrecision::Tf32 | ProductPrecision::Tf32x3 => None,
        };
        self
    }

    /// The products' precision these settings ask for ([`KernelKMeans::precision`]).
    pub fn product_precision(&self) -> ProductPrecision {
        kernel_ir::Precision::from_settings(self.half_products, self.tf32x3, self.tf32).into()
    }

    /// Holds the stored kernel matrix in 16 bits (`Some(Half::Bf16)` or `Some(Half::F16)`),
    /// or in the fit's type (`None`, the default). Each iteration then reads half the bytes;
    /// the entries lose precision (bf16 keeps 8 significant bits and f32's range, fp16 11 bits
    /// up to 65504: where the kernel's values could pass half of that, K is held times a power
    /// of two, which changes no label, and the objectives and centroid norms are divided back;
    /// [`AlgorithmChoice::kernel_scale`] says by how much).
    /// Building K still takes an f32 product first (`4 n^2` bytes) where the kernel function
    /// follows it. f32 fits only; the recompute and features algorithms never store K and
    /// ignore it.
    ///
    /// ```
    /// use popcorn::kernel_ir::Half;
    /// use popcorn::kkmeans::{KernelKMeans, Points};
    /// use popcorn::DeviceSpec;
    ///
    /// let x = [0.0, 0.1, 0.2, 5.0, 5.1, 5.2];
    /// let fit = KernelKMeans::new(2)
    ///     .kernel_storage(Some(Half::Bf16))
    ///     .device(DeviceSpec::Cpu)
    ///     .fit(Points::new(6, 1, &x).unwrap())
    ///     .unwrap();
    /// assert_eq!(fit.labels[..3], [fit.labels[0]; 3]);
    /// assert_ne!(fit.labels[0], fit.labels[3]);
    /// ```
    pub fn kernel_storage(mut self, half: Option<Half>) -> Self {
        self.kernel_storage = half;
        self
    }

    /// Plans the fit within `bytes` of memory (GPU memory, or host memory on the CPU) where
    /// less than that is free: the algorithm's choice counts at most this much as free, so
    /// `Auto` takes no stored K that does not fit it, and the features algorithm builds its
    /// features block of rows by block, never whole, where they do not fit it (see
    /// [`Algorithm::Features`]); features that do not fit it even in blocks are an error
    /// naming the memory they need. It steers those choices; it does not cap a GPU's
    /// allocations (the context's own memory, and the library's, come on top), nor the
    /// memory of an algorithm asked for by name, of the recompute algorithm (linear in `n` and
    /// `d`), or of sparse and precomputed fits. `Some(0)` is an error.
    ///
    /// ```
    /// use popcorn::kkmeans::{Algorithm, Kernel, KernelKMeans, Points};
    /// use popcorn::DeviceSpec;
    ///
    /// let x: Vec<f64> = (0..400).map(|i| ((i * 37) % 101) as f64 / 50.0).collect();
    /// let points = Points::new(200, 2, &x).unwrap();
    /// let km = KernelKMeans::new(3)
    ///     .kernel(Kernel::Polynomial { gamma: 1.0, coef0: 1.0, degree: 2.0 })
    ///     .algorithm(Algorithm::Features)
    ///     .device(DeviceSpec::Cpu)
    ///     .dtype(popcorn::DType::F64);
    /// let whole = km.clone().fit(points).unwrap();
    /// // 20 kB leaves no room for the features (200 x 6 values) whole: they are built in blocks.
    /// let blocks = km.memory_limit(Some(20_000)).fit(points).unwrap();
    /// assert_eq!(whole.algorithm.feature_block_rows, 0);
    /// assert!(blocks.algorithm.feature_block_rows > 0);
    /// assert_eq!(blocks.labels, whole.labels);
    /// ```
    pub fn memory_limit(mut self, bytes: Option<u64>) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// The context the fit runs in: the device, the element type, TF32, K's storage and the
    /// memory budget.
    fn context(&self) -> Result<Context, FitError> {
        let ctx = Context::new(self.device)?
            .with_dtype(self.dtype)
            .with_memory_budget(self.memory_limit);
        let mut config = popcorn_dsl::PlannerConfig {
            tf32: self.tf32,
            half_products: self.half_products,
            tf32x3: self.tf32x3,
            ..ctx.config().clone()
        };
        if let Some(half) = self.kernel_storage {
            config.half_storage.insert("K".into(), half);
        }
        Ok(ctx.with_config(config))
    }

    /// Sets the kernel.
    pub fn kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// Sets the initialisation.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }

    /// Sets the iteration limit.
    pub fn max_iter(mut self, max_iter: usize) -> Self {
        self.max_iter = max_iter;
        self
    }

    /// Sets the tolerance and turns the convergence check on.
    pub fn tol(mut self, tol: f64) -> Self {
        self.tol = tol;
        self.check_convergence = true;
        self
    }

    /// Turns the objective-based convergence check on or off.
    pub fn check_convergence(mut self, on: bool) -> Self {
        self.check_convergence = on;
        self
    }

    /// Whether a run stops at a fixed point (on by default); off, it makes all `max_iter`
    /// iterations (the labels and objective are the same; only the time differs).
    ///
    /// ```
    /// use popcorn::kkmeans::{KernelKMeans, Points};
    /// use popcorn::DeviceSpec;
    /// let x = [0.0, 0.1, 5.0, 5.1];
    /// let points = Points::new(4, 1, &x).unwrap();
    /// let fit = |stop| {
    ///     KernelKMeans::new(2)
    ///         .device(DeviceSpec::Cpu)
    ///         .max_iter(6)
    ///         .stop_at_fixed_point(stop)
    ///         .fit(points)
    ///         .unwrap()
    /// };
    /// let (early, all) = (fit(true), fit(false));
    /// assert!(early.iterations < 6);
    /// assert_eq!(all.iterations, 6);
    /// assert_eq!(early.labels, all.labels);
    /// assert!(all.converged);
    /// ```
    pub fn stop_at_fixed_point(mut self, on: bool) -> Self {
        self.stop_at_fixed_point = on;
        self
    }

    /// Sets the number of runs.
    pub fn n_init(mut self, n_init: usize) -> Self {
        self.n_init = n_init;
        self
    }

    /// Turns z-score normalisation on or off.
    pub fn zscore(mut self, on: bool) -> Self {
        self.zscore = on;
        self
    }

    /// Sets the device.
    pub fn device(mut self, device: DeviceSpec) -> Self {
        self.device = device;
        self
    }

    /// Sets the element type.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    fn validate(&self, n: usize) -> Result<(), FitError> {
        crate::fit_checks::check_runs(self.k, n, self.max_iter, self.n_init, "points")?;
        if self.memory_limit == Some(0) {
            return Err(FitError::Parameter(
                "memory_limit = 0 leaves no memory to plan in; give a positive number of bytes, \
                 or None for what is free"
                    .into(),
            ));
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(FitError::Parameter(format!(
                "tol = {} must be a finite non-negative number",
                self.tol
            )));
        }
        let check = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(FitError::Parameter(format!("{name} = {v} must be finite")))
            }
        };
        match self.kernel {
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } => {
                check("gamma", gamma)?;
                check("coef0", coef0)?;
                check("degree", degree)?;
            }
            Kernel::Gaussian { gamma: Some(g) } | Kernel::Sigmoid { gamma: Some(g), .. } => {
                check("gamma", g)?
            }
            _ => {}
        }
        if let Some(w) = &self.sample_weight {
            weights::check(w, n)?;
        }
        if let (Some(half), DType::F64) = (self.kernel_storage, self.dtype) {
            return Err(FitError::Parameter(format!(
                "a kernel matrix held in {half} is computed in f32, and this fit is f64; use \
                 dtype f32 or hold K in f64"
            )));
        }
        Ok(())
    }

    /// The power of two a stored kernel matrix is multiplied by so that a 16-bit format holds
    /// it: 1, or for values that could pass half of the format's largest (`bound` is the
    /// largest `|kappa(x, y)|` the points can give, [`Kernel::bound`]) the power of two that
    /// brings `bound` within it. Labels do not change under a positive factor; the objectives
    /// and centroid norms are divided back. An unbounded kernel (a negative degree) is refused
    /// in fp16.
    pub(crate) fn kernel_scale(&self, bound: f64) -> Result<f64, FitError> {
        let Some(half) = self.kernel_storage else {
            return Ok(1.0);
        };
        let room = half.max_finite() / 2.0;
        if bound <= room {
            return Ok(1.0);
        }
        if !bound.is_finite() {
            return Err(FitError::Parameter(format!(
                "kernel values may grow without bound (a negative degree), beyond {:.0}, the \
                 largest {half} value; hold K in bf16 (the range of f32) or f32",
                half.max_finite()
            )));
        }
        Ok(2f64.powi(-((bound / room).log2().ceil() as i32)))
    }

    /// `choice` for a stored K held times `scale` ([`Self::kernel_scale`] of `bound`), its
    /// reason saying so.
    pub(crate) fn scaled_choice(
        &self,
        mut choice: AlgorithmChoice,
        scale: f64,
        bound: f64,
    ) -> AlgorithmChoice {
        choice.kernel_scale = scale;
        if let (Some(half), true) = (self.kernel_storage, scale != 1.0) {
            choice.reason.push_str(&format!(
                "; K held in {half} as 2^{} K (its values may reach {bound:.3e}; objectives are \
                 reported unscaled)",
                scale.log2() as i64
            ));
        }
        choice
    }

    /// The centroid norms of `result`'s labels from the stored `kmat`, divided back by the
    /// factor K was held times (see [`Self::kernel_scale`]).
    pub(crate) fn stored_centroid_norms(
        &self,
        ctx: &Context,
        kmat: &Tensor,
        result: &FitResult,
        w: Option<&Tensor>,
    ) -> Result<Vec<f64>, FitError> {
        let scale = result.algorithm.kernel_scale;
        let norms = model::centroid_norms(ctx, kmat, &result.labels, w, self.k)?;
        Ok(if scale == 1.0 {
            norms
        } else {
            norms.into_iter().map(|v| v / scale).collect()
        })
    }

    /// Which algorithm a fit of `n` points of `d` features would run, and why: what
    /// [`Algorithm::Auto`] decides, by the planner's cost model and the memory free now.
    ///
    /// ```
    /// use popcorn::kkmeans::{Algorithm, KernelKMeans};
    /// use popcorn::DeviceSpec;
    /// let km = KernelKMeans::new(3).device(DeviceSpec::Cpu);
    /// let choice = km.algorithm(Algorithm::Recompute).choose_algorithm(1000, 2).unwrap();
    /// assert_eq!(choice.algorithm, Algorithm::Recompute);
    /// assert_eq!(choice.kernel_matrix_bytes, 4 * 1000 * 1000);
    /// ```
    pub fn choose_algorithm(&self, n: usize, d: usize) -> Result<AlgorithmChoice, FitError> {
        if self.kernel == Kernel::Precomputed {
            return Ok(AlgorithmChoice::given(n, self.dtype));
        }
        self.validate(n)?;
        feature_choice::choose(
            self.algorithm,
            &self.context()?,
            &self.kernel,
            (n, d, self.k),
            self.max_iter,
            self.sample_weight.is_some(),
        )
        .map(|(choice, _)| choice)
    }

    /// Clusters `points`.
    pub fn fit<'a, P>(&self, points: P) -> Result<FitResult, FitError>
    where
        P: TryInto<Points<'a>>,
        FitError: From<P::Error>,
    {
        self.fit_with_progress(points, &mut |_| {})
    }

    /// Clusters `points`, reporting progress.
    pub fn fit_with_progress<'a, P>(
        &self,
        points: P,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<FitResult, FitError>
    where
        P: TryInto<Points<'a>>,
        FitError: From<P::Error>,
    {
        self.fit_with_control(points, &mut |p| {
            progress(p);
            ControlFlow::Continue(())
        })
    }

    /// Clusters `points`, telling `control` of every phase and iteration as
    /// [`fit_with_progress`](KernelKMeans::fit_with_progress) does; when `control` breaks, the
    /// fit stops there (before the phase, or after the iteration) with
    /// [`FitError::Interrupted`]. The Python package stops a fit on Ctrl-C this way.
    ///
    /// ```
    /// use popcorn::kkmeans::{FitError, KernelKMeans, Points, Progress};
    /// use popcorn::DeviceSpec;
    /// use std::ops::ControlFlow;
    ///
    /// let x = [0.0, 0.1, 0.2, 5.0, 5.1, 5.2];
    /// let err = KernelKMeans::new(2)
    ///     .device(DeviceSpec::Cpu)
    ///     .fit_with_control(Points::new(6, 1, &x).unwrap(), &mut |p| match p {
    ///         Progress::Iteration { .. } => ControlFlow::Break(()),
    ///         _ => ControlFlow::Continue(()),
    ///     })
    ///     .unwrap_err();
    /// assert!(matches!(err, FitError::Interrupted(_)));
    /// assert_eq!(err.to_string(), "the fit was interrupted after iteration 1 of run 1");
    /// ```
    pub fn fit_with_control<'a, P>(
        &self,
        points: P,
        control: &mut Control<'_>,
    ) -> Result<FitResult, FitError>
    where
        P: TryInto<Points<'a>>,
        FitError: From<P::Error>,
    {
        let points: Points<'a> = points.try_into()?;
        if self.kernel == Kernel::Precomputed {
            return Err(FitError::Parameter(
                "the precomputed kernel needs fit_precomputed(K, n)".into(),
            ));
        }
        self.validate(points.n)?;
        let start = Instant::now();
        report(control, &Progress::Phase("upload"))?;
        let ctx = self.context()?;
        let scaling = self.zscore.then(|| model::Scaling::fit(points));
        let x_host: Vec<f64> = match &scaling {
            Some(s) => s.apply(points),
            None => points.data.to_vec(),
        };
        let bound = self.kernel.bound(&x_host, points.d);
        let scale = self.kernel_scale(bound)?;
        // The weights, checked and scaled; on the device whole, or in the features' blocks.
        let scaled_weights = self
            .sample_weight
            .as_deref()
            .map(|w| weights::scaled(ctx.dtype(), w))
            .transpose()?;
        ctx.synchronize()?;
        let mut upload_s = start.elapsed().as_secs_f64();
        let (choice, feature_map) = feature_choice::choose(
            self.algorithm,
            &ctx,
            &self.kernel,
            (points.n, points.d, self.k),
            self.max_iter,
            scaled_weights.is_some(),
        )?;
        precision::check_fp16_range(
            self.half_products,
            &self.kernel,
            &x_host,
            feature_map.is_some(),
        )?;
        // The iterations' points: the points themselves, or for the features algorithm the
        // kernel's features, on which the linear kernel's iterations run (their build counted
        // as the kernel matrix's time), or where those do not fit whole the points in blocks,
        // whose features every iteration builds (the kernel's own programs give its columns).
        // The model keeps the points and the kernel, whose cross kernel gives the same
        // predictions.
        let block_rows = choice.feature_block_rows;
        if feature_map.is_some() {
            report(control, &Progress::Phase("features"))?;
        }
        let points_start = Instant::now();
        let mut ctx = ctx;
        let (x, d_iter, iteration_kernel) = match &feature_map {
            Some(m) if block_rows == 0 => (
                Some(m.upload(&mut ctx, &x_host, points.n)?),
                m.dim(),
                Kernel::Linear,
            ),
            Some(_) => (None, points.d, self.kernel),
            None => (
                Some(ctx.dense(points.n, points.d, &x_host)?),
                points.d,
                self.kernel,
            ),
        };
        let (blocks, w) = match (&feature_map, scaled_weights) {
            (Some(m), weights) if block_rows > 0 => {
                let size = (points.n, self.k);
                let blocks = FeatureBlocks::new(&ctx, m, &x_host, size, block_rows, weights)?;
                (Some(blocks), None)
            }
            (_, weights) => (None, weights.map(|w| ctx.col(&w)).transpose()?),
        };
        ctx.synchronize()?;
        let points_s = points_start.elapsed().as_secs_f64();
        let features_s = match feature_map {
            Some(_) => points_s,
            None => {
                upload_s += points_s;
                0.0
            }
        };
        let kernel_programs = KernelPrograms::new(&iteration_kernel, d_iter);
        // The recompute plans fuse every kernel product (prediction's cross kernel included:
        // the model keeps this context).
        let mut ctx = match choice.algorithm {
            Algorithm::Recompute | Algorithm::Features => {
                let config = algorithm::recompute_config(ctx.config());
                ctx.with_config(config)
            }
            _ => ctx,
        };
        let mut kernel_matrix_s = 0.0;
        let mut prepare_s = 0.0;
        let kmat = match choice.algorithm {
            Algorithm::Recompute | Algorithm::Features => None,
            _ => {
                // The product library's one-time setup, counted with the context's (upload)
                // rather than in K's time; neither a recomputed K nor one that a contraction
                // kernel writes uses the library.
                if !choice.fused_build {
                    let t = Instant::now();
                    ctx.prepare_products()?;
                    prepare_s = t.elapsed().as_secs_f64();
                }
                report(control, &Progress::Phase("kernel matrix"))?;
                let t = Instant::now();
                // Where the f32 product would not fit beside a 16-bit K, one kernel writes K
                // from the product's tiles.
                let iteration_config = ctx.config().clone();
                if choice.fused_build {
                    ctx.set_config(algorithm::fused_build_config(&iteration_config));
                }
                // A 16-bit K is built times `scale` (see kernel_scale).
                let build_programs = KernelPrograms::new(&self.kernel.scaled(scale), points.d);
                let built = ctx
                    .run(
                        build_programs.program("kernel"),
                        &build_programs.bind(Args::new().tensor("X", points_on(&x)?)),
                    )
                    .map_err(suggest_recompute);
                ctx.set_config(iteration_config);
                let kmat = built?.take("K")?;
                ctx.synchronize()?;
                kernel_matrix_s = t.elapsed().as_secs_f64();
                Some(kmat)
            }
        };
        let source = match (&kmat, &blocks) {
            (Some(kmat), _) => Source::Stored(kmat),
            (None, Some(blocks)) => Source::Blocks {
                blocks,
                host: &x_host,
                d: points.d,
                programs: &kernel_programs,
            },
            (None, None) => Source::Points {
                x: points_on(&x)?,
                host: &x_host,
                d: d_iter,
                programs: &kernel_programs,
                features: feature_map,
            },
        };
        // Only a stored K is scaled.
        let choice = match kmat {
            Some(_) => self.scaled_choice(choice, scale, bound),
            None => choice,
        };
        let (mut result, norms) =
            self.iterate(&mut ctx, &source, w.as_ref(), points.n, choice, control)?;
        let norms = match (norms, &kmat) {
            (Some(norms), _) => norms,
            (None, Some(kmat)) => self.stored_centroid_norms(&ctx, kmat, &result, w.as_ref())?,
            (None, None) => {
                return Err(FitError::Parameter(
                    "no centroid norms from the recompute iterations (a bug in popcorn)".into(),
                ))
            }
        };
        // The model keeps the points, not K: its memory goes back now (the features' too).
        drop(kmat);
        drop(x);
        drop(blocks);
        result.timings.upload_s = upload_s + prepare_s;
        result.timings.kernel_matrix_s = kernel_matrix_s + features_s;
        result.timings.total_s = start.elapsed().as_secs_f64();
        result.model = Some(Model::new(
            ctx,
            ModelParts {
                kernel: self.kernel,
                d: points.d,
                x: x_host,
                x_sparse: None,
                scaling,
                labels: result.labels.clone(),
                k: self.k,
                centroid_norms: norms,
                weights: self.sample_weight.clone(),
            },
        ));
        Ok(result)
    }

    /// Clusters with a precomputed kernel matrix `kmat` (`n x n`, row-major, symmetric). The
    /// result's model predicts from kernel values ([`Model::predict_precomputed`]).
    pub fn fit_precomputed(&self, kmat: &[f64], n: usize) -> Result<FitResult, FitError> {
        self.fit_precomputed_with_control(kmat, n, &mut |_| ControlFlow::Continue(()))
    }

    /// [`fit_precomputed`](KernelKMeans::fit_precomputed), telling `control` of every phase
    /// and iteration; when it breaks, the fit stops with [`FitError::Interrupted`].
    pub fn fit_precomputed_with_control(
        &self,
        kmat: &[f64],
        n: usize,
        control: &mut Control<'_>,
    ) -> Result<FitResult, FitError> {
        self.validate(n)?;
        if kmat.len() != n * n {
            return Err(FitError::Input(format!(
                "a {n} x {n} kernel matrix needs {} values, got {}",
                n * n,
                kmat.len()
            )));
        }
        if let Some(what) = non_finite_kernel_entry(kmat, 0, n) {
            return Err(FitError::Input(what));
        }
        let start = Instant::now();
        report(control, &Progress::Phase("upload"))?;
        let ctx = self.context()?;
        let largest = kmat.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let scale = self.kernel_scale(largest)?;
        let kmat = match self.kernel_storage {
            Some(half) if scale != 1.0 => {
                let scaled: Vec<f64> = kmat.iter().map(|v| v * scale).collect();
                ctx.dense_half(n, n, &scaled, half)?
            }
            Some(half) => ctx.dense_half(n, n, kmat, half)?,
            None => ctx.dense(n, n, kmat)?,
        };
        self.fit_stored_kernel(ctx, kmat, n, (scale, largest), start, control)
    }

    /// Clusters with a precomputed kernel matrix (`n x n`, symmetric) read block by block:
    /// `read(rows)` returns those rows of it (row-major). On a context whose plans run
    /// partitioned (several GPUs, or one process per rank under `mpirun`), each rank reads
    /// only its block of rows and holds only it, so K is never whole in any process; elsewhere
    /// it is read at once. K is held in the fit's type (16-bit storage needs the whole matrix:
    /// [`fit_precomputed`](KernelKMeans::fit_precomputed)).
    pub fn fit_precomputed_rows(
        &self,
        n: usize,
        read: &mut dyn FnMut(std::ops::Range<usize>) -> Result<Vec<f64>, FitError>,
    ) -> Result<FitResult, FitError> {
        self.fit_precomputed_rows_with_control(n, read, &mut |_| ControlFlow::Continue(()))
    }

    /// [`fit_precomputed_rows`](KernelKMeans::fit_precomputed_rows), telling `control` of
    /// every phase and iteration.
    pub fn fit_precomputed_rows_with_control(
        &self,
        n: usize,
        read: &mut dyn FnMut(std::ops::Range<usize>) -> Result<Vec<f64>, FitError>,
        control: &mut Control<'_>,
    ) -> Result<FitResult, FitError> {
        self.validate(n)?;
        if let Some(half) = self.kernel_storage {
            return Err(FitError::Parameter(format!(
                "a kernel matrix read by rows is held in the fit's type, not in {half} (which \
                 scales by the largest entry of the whole matrix); use fit_precomputed"
            )));
        }
        let start = Instant::now();
        report(control, &Progress::Phase("upload"))?;
        let ctx = self.context()?;
        let mut failed = None;
        let kmat = ctx.dense_rows(n, n, &mut |rows| {
            let block = read(rows.clone()).map_err(|e| {
                let text = e.to_string();
                failed = Some(e);
                RuntimeError::InvalidData(text)
            })?;
            if let Some(what) = non_finite_kernel_entry(&block, rows.start, n) {
                return Err(RuntimeError::InvalidData(what));
            }
            Ok(block)
        });
        let kmat = match (kmat, failed) {
            (Ok(k), _) => k,
            (Err(_), Some(e)) => return Err(e),
            (Err(e), None) => return Err(e.into()),
        };
        self.fit_stored_kernel(ctx, kmat, n, (1.0, 0.0), start, control)
    }

    /// The iterations, centroid norms and model of a fit on a kernel matrix `kmat` already in
    /// `ctx` (held times `scale`; `largest` bounds its entries).
    fn fit_stored_kernel(
        &self,
        mut ctx: Context,
        kmat: Tensor,
        n: usize,
        (scale, largest): (f64, f64),
        start: Instant,
        control: &mut Control<'_>,
    ) -> Result<FitResult, FitError> {
        let w = self.weights_on(&ctx)?;
        ctx.synchronize()?;
        let upload_s = start.elapsed().as_secs_f64();
        let choice = self.scaled_choice(AlgorithmChoice::given(n, ctx.dtype()), scale, largest);
        let source = Source::Stored(&kmat);
        let (mut result, _) = self.iterate(&mut ctx, &source, w.as_ref(), n, choice, control)?;
        let norms = self.stored_centroid_norms(&ctx, &kmat, &result, w.as_ref())?;
        drop(kmat);
        result.timings.upload_s = upload_s;
        result.timings.total_s = start.elapsed().as_secs_f64();
        result.model = Some(Model::new(
            ctx,
            ModelParts {
                kernel: Kernel::Precomputed,
                d: n,
                x: Vec::new(),
                x_sparse: None,
                scaling: None,
                labels: result.labels.clone(),
                k: self.k,
                centroid_norms: norms,
                weights: self.sample_weight.clone(),
            },
        ));
        Ok(result)
    }

    /// The weights on the device, for a weighted fit.
    /// They go divided by [`weights::scale`]; the iterations multiply the objective back.
    fn weights_on(&self, ctx: &Context) -> Result<Option<Tensor>, FitError> {
        Ok(match &self.sample_weight {
            Some(w) => Some(weights::upload(ctx, w)?.0),
            None => None,
        })
    }

    /// The iterations of every run on the kernel of `source` (weighted by `w` where given);
    /// the best run wins. Also returns the centroid norms of its labels where the iterations
    /// computed them.
    fn iterate(
        &self,
        ctx: &mut Context,
        source: &Source<'_>,
        w: Option<&Tensor>,
        n: usize,
        algorithm: AlgorithmChoice,
        control: &mut Control<'_>,
    ) -> Result<(FitResult, Option<Vec<f64>>), FitError> {
        let k = self.k;
        let runs = if matches!(self.init, Init::Mod | Init::Labels(_)) {
            1
        } else {
            self.n_init
        };
        let t_init = Instant::now();
        report(control, &Progress::Phase("init"))?;
        let diag = if matches!(self.init, Init::KMeansPlusPlus { .. }) {
            source.diagonal(ctx)?
        } else {
            Vec::new()
        };
        let mut init_s = t_init.elapsed().as_secs_f64();
        report(control, &Progress::Phase("iterations"))?;
        let t_iter = Instant::now();
        let mut best: Option<(usize, RunResult)> = None;
        for run in 0..runs {
            let t = Instant::now();
            let weights = self.sample_weight.as_deref();
            let labels0 = init::initial_labels(&self.init, n, k, run, ctx, source, &diag, weights)?;
            init_s += t.elapsed().as_secs_f64();
            let r = self.run_once(
                ctx,
                source,
                w,
                labels0,
                run,
                algorithm.kernel_scale,
                control,
            )?;
            if best.as_ref().is_none_or(|(_, b)| r.objective < b.objective) {
                best = Some((run, r));
            }
        }
        let iterations_s = t_iter.elapsed().as_secs_f64();
        let (best_run, r) = best.ok_or_else(|| FitError::Parameter("no run".into()))?;
        // Points per cluster, or weight per cluster in a weighted fit.
        let sizes = weights::cluster_sizes(&r.labels, self.sample_weight.as_deref(), k);
        let result = FitResult {
            objective: r.objective,
            objective_history: r.history,
            iterations: r.iterations,
            converged: r.converged,
            empty_clusters: sizes.iter().filter(|s| **s == 0.0).count(),
            labels: r.labels,
            best_run,
            timings: Timings {
                init_s,
                iterations_s,
                per_iteration_s: r.per_iteration_s,
                ..Timings::default()
            },
            device: ctx.describe(),
            dtype: ctx.dtype(),
            params: self.clone(),
            algorithm,
            weights: self.sample_weight.as_deref().map(WeightSummary::of),
            model: None,
        };
        Ok((result, r.centroid_norms))
    }

    /// One run from `labels0`: iterate until no label changes, the objective stalls (when
    /// checked) or `max_iter`.
    #[allow(clippy::too_many_arguments)]
    fn run_once(
        &self,
        ctx: &mut Context,
        source: &Source<'_>,
        w: Option<&Tensor>,
        labels0: Vec<u32>,
        run: usize,
        kernel_scale: f64,
        control: &mut Control<'_>,
    ) -> Result<RunResult, FitError> {
        // The labels live on the device; each iteration reads back two numbers (the objective
        // and how many labels changed), and the final labels are read once at the end.
        let mut labels = ctx.index(&labels0)?;
        let mut out = Outputs::default();
        let mut history = Vec::new();
        let mut per_iteration_s = Vec::new();
        let mut converged = false;
        let k = self.k;
        // The device's weights are divided by this power of two (see `weights_on`): the
        // objective it computes is multiplied back, exactly.
        // A stored K held in 16 bits may be multiplied by a power of two (kernel_scale): the
        // objective is divided back, exactly.
        let weight_scale = self.sample_weight.as_deref().map_or(1.0, weights::scale) / kernel_scale;
        for it in 1..=self.max_iter {
            let t = Instant::now();
            let (objective, changed) = source.step(ctx, &labels, w, k, &mut out)?;
            if !objective.is_finite() {
                return Err(FitError::Input(format!(
                    "the objective is {objective} at iteration {it}: the kernel values overflow {}; scale the data (for example with zscore) or compute in f64",
                    ctx.dtype()
                )));
            }
            let objective = objective * weight_scale;
            // A sum of 0/1 values is zero exactly when nothing changed, in any precision.
            let changed = changed.round() as usize;
            per_iteration_s.push(t.elapsed().as_secs_f64());
            history.push(objective);
            report(
                control,
                &Progress::Iteration {
                    run,
                    iteration: it,
                    objective,
                    changed,
                },
            )?;
            if changed == 0 {
                converged = true;
                if self.stop_at_fixed_point {
                    break;
                }
                continue;
            }
            converged = false;
            if self.check_convergence && history.len() >= 2 {
                let prev = history[history.len() - 2];
                if (prev - objective).abs() <= self.tol * prev.abs().max(f64::MIN_POSITIVE) {
                    // The objective stalled: keep the labels it was measured for.
                    converged = true;
                    break;
                }
            }
            // The new labels become the input of the next iteration; the old buffer is reused
            // as the next output.
            let next = out.take("new_labels")?;
            out.insert("new_labels", std::mem::replace(&mut labels, next));
        }
        let mut objective = *history.last().unwrap_or(&f64::NAN);
        if !converged {
            // Stopped by max_iter: the labels changed after the last objective was measured.
            objective = source.step(ctx, &labels, w, k, &mut out)?.0 * weight_scale;
        }
        // The last iteration ran on the final labels: its centroid norms are theirs.
        let centroid_norms = source.centroid_norms(ctx, &out)?;
        let host_labels = ctx.to_u32(&labels)?;
        Ok(RunResult {
            centroid_norms,
            iterations: history.len(),
            labels: host_labels,
            objective,
            history,
            converged,
            per_iteration_s,
        })
    }
}

/// The points (or their features) on the device, which every algorithm but the features in
/// blocks uploads whole.
fn points_on(x: &Option<Tensor>) -> Result<&Tensor, FitError> {
    x.as_ref().ok_or_else(|| {
        FitError::Parameter("the points are not on the device (a bug in popcorn)".into())
    })
}

/// A stored kernel matrix that does not fit: the error also names the algorithm that needs no
/// `n x n` memory.
fn suggest_recompute(mut e: RuntimeError) -> RuntimeError {
    if let RuntimeError::OutOfMemory { hint, .. } = &mut e {
        hint.push_str(
            "; or recompute the kernel matrix every iteration instead of storing it \
             (--algorithm recompute, KernelKMeans::algorithm(Algorithm::Recompute))",
        );
    }
    e
}

struct RunResult {
    centroid_norms: Option<Vec<f64>>,
    labels: Vec<u32>,
    objective: f64,
    history: Vec<f64>,
    iterations: usize,
    converged: bool,
    per_iteration_s: Vec<f64>,
}

/// The first entry of `values` (rows of an `n`-column kernel matrix from row `first_row`) that
/// is not finite, named by its row and column of the whole matrix.
fn non_finite_kernel_entry(values: &[f64], first_row: usize, n: usize) -> Option<String> {
    let p = values.iter().position(|v| !v.is_finite())?;
    Some(format!(
        "kernel entry ({}, {}) is {}",
        first_row + p / n,
        p % n,
        values[p]
    ))
}
