//! Normalized cut of a graph as weighted Kernel K-means (Dhillon, Guan and Kulis, 2004,
//! "Kernel k-means, spectral clustering and normalized cuts"): a node weighs its degree
//! `d_i = sum_j A_ij` and the kernel is `K = sigma D^-1 + D^-1 A D^-1`; the weighted objective
//! is then the normalized cut plus a constant, so each iteration of Kernel K-means lowers the
//! cut where K is positive semi-definite. The iteration is written in the DSL
//! (`examples/programs/normalized_cut.pop`): one sparse product of `A + sigma D` with the
//! selection matrix and vectors of length `n` and `k`, never an `n x n` dense matrix.
//!
//! ```
//! use popcorn::io::CsrMatrix;
//! use popcorn::ncut::NormalizedCut;
//! use popcorn::DeviceSpec;
//!
//! // Two triangles joined by one edge (2 - 3).
//! let mut a = vec![0.0; 36];
//! for (i, j) in [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5), (2, 3)] {
//!     a[i * 6 + j] = 1.0;
//!     a[j * 6 + i] = 1.0;
//! }
//! let graph = CsrMatrix::from_dense(6, 6, &a).unwrap();
//! let fit = NormalizedCut::new(2)
//!     .init_labels(vec![0, 0, 1, 1, 1, 0])
//!     .device(DeviceSpec::Cpu)
//!     .fit(&graph)
//!     .unwrap();
//! assert_eq!(fit.labels, vec![0, 0, 0, 1, 1, 1]);
//! // One edge cut, each side of volume 7: 1/7 + 1/7.
//! assert!((fit.ncut - 2.0 / 7.0).abs() < 1e-12);
//! ```
//!
//! **The shift sigma.** Kernel K-means never increases its objective when K is positive
//! semi-definite, which `sigma >= max_i (1 - 2 A_ii / d_i)` guarantees ([`gershgorin_sigma`];
//! 1 without self-loops). But the shift also rewards staying: node `i` leaves its cluster only
//! where the fraction of its edges into another cluster exceeds the fraction into its own by
//! about sigma, so at sigma = 1 no node ever moves. [`Sigma::Auto`] (the default) therefore
//! starts at 0 and takes back any step that raised the cut (the next iteration measures it),
//! raising sigma toward the bound (`max(2 sigma, bound / 16)`, at most the bound) and repeating
//! the step from the previous labels; at the bound the step cannot raise the cut, so the cut
//! never increases across the accepted iterations and the run ends. [`Sigma::Fixed`] runs plain
//! weighted Kernel K-means with the given shift (monotone from the bound up).

mod graph;

pub use graph::{gershgorin_sigma, normalized_cut, SYMMETRY_TOLERANCE};

use crate::io::CsrMatrix;
use crate::kkmeans::{upload, FitError, SplitMix64};
use crate::{Args, Context, DType, DeviceSpec, Outputs, Program, Tensor};
use graph::Graph;
use serde::Serialize;
use std::sync::OnceLock;
use std::time::Instant;

/// The source of the normalized cut program.
pub const SOURCE: &str = include_str!("../../examples/programs/normalized_cut.pop");

/// The iteration program `ncut_iteration` of `normalized_cut.pop`, parsed and checked once.
pub fn program() -> &'static Program {
    static PROGRAM: OnceLock<Program> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        Program::parse_all(SOURCE)
            .unwrap_or_else(|e| panic!("normalized_cut.pop does not check (a bug in popcorn): {e}"))
            .into_iter()
            .find(|p| p.name == "ncut_iteration")
            .unwrap_or_else(|| {
                panic!("normalized_cut.pop has no ncut_iteration (a bug in popcorn)")
            })
    })
}

/// The diagonal shift of the kernel `K = sigma D^-1 + D^-1 A D^-1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub enum Sigma {
    /// Start at 0; a step that raises the cut is taken back and sigma raised toward the
    /// Gershgorin bound, where no step can raise it (see the module's notes).
    #[default]
    Auto,
    /// This shift throughout, no step taken back: plain weighted Kernel K-means, whose cut
    /// never increases for `sigma >=` [`gershgorin_sigma`].
    Fixed(f64),
}

/// How the first labels are chosen.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Init {
    /// Uniformly random labels (run `r` of `n_init` uses `seed + r`).
    Random {
        /// Seed.
        seed: u64,
    },
    /// Given labels, one per node, each below `k` (one run).
    Labels(Vec<u32>),
}

/// Seconds spent in each phase of a fit.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NcutTimings {
    /// Checking the graph, shifting it and uploading it with the degrees.
    pub upload_s: f64,
    /// All iterations of all runs (and the sparse matrices of raised shifts).
    pub iterations_s: f64,
    /// Each iteration of the best run.
    pub per_iteration_s: Vec<f64>,
    /// Everything.
    pub total_s: f64,
}

/// The result of a fit.
#[derive(Clone, Debug, Serialize)]
pub struct NcutResult {
    /// Cluster of each node.
    pub labels: Vec<u32>,
    /// The normalized cut of the labels, `sum_c cut(c, V - c) / assoc(c, V)`, computed in f64
    /// directly from the adjacency ([`normalized_cut`]): a check of the iterations' values.
    pub ncut: f64,
    /// The normalized cut of the labels at the start of each accepted iteration (best run),
    /// as the program computed it; never increasing under [`Sigma::Auto`].
    pub ncut_history: Vec<f64>,
    /// The weighted Kernel K-means objective of the labels with the final shift,
    /// `sum_i d_i ||phi(i) - m_{label_i}||^2`: `ncut` plus `sum_i A_ii / d_i + (n - k') sigma -
    /// k'` for `k'` clusters that have nodes.
    pub objective: f64,
    /// Runs of the iteration program (best run), taken-back steps included.
    pub iterations: usize,
    /// Whether the best run reached labels that no iteration changes (or, under
    /// [`Sigma::Auto`], whose every step raised the cut at the Gershgorin bound), not
    /// `max_iter`.
    pub converged: bool,
    /// Steps taken back because they raised the cut (best run).
    pub rejected_steps: usize,
    /// The shift at the end of the best run.
    pub sigma: f64,
    /// The Gershgorin bound ([`gershgorin_sigma`]) of the graph.
    pub sigma_bound: f64,
    /// Clusters without nodes at the end.
    pub empty_clusters: usize,
    /// Which of the `n_init` runs won (the lowest cut).
    pub best_run: usize,
    /// Nodes.
    pub n: usize,
    /// Stored entries of the adjacency matrix.
    pub nnz: usize,
    /// Time per phase.
    pub timings: NcutTimings,
    /// The device, in words.
    pub device: String,
    /// Element type of the computation.
    pub dtype: DType,
    /// The parameters of the fit.
    pub params: NormalizedCut,
}

/// Normalized cut clustering of a graph, with a builder.
#[derive(Clone, Debug, Serialize)]
pub struct NormalizedCut {
    /// Number of clusters.
    pub k: usize,
    /// The kernel's diagonal shift.
    pub sigma: Sigma,
    /// Initial labels.
    pub init: Init,
    /// Runs from different seeds (random init); the lowest cut wins.
    pub n_init: usize,
    /// Iteration limit (per run).
    pub max_iter: usize,
    /// Where to run.
    #[serde(skip)]
    pub device: DeviceSpec,
    /// Element type.
    pub dtype: DType,
}

impl NormalizedCut {
    /// `k` clusters, [`Sigma::Auto`], random labels from seed 0, one run, up to 300
    /// iterations, on the default device in f32.
    pub fn new(k: usize) -> NormalizedCut {
        NormalizedCut {
            k,
            sigma: Sigma::Auto,
            init: Init::Random { seed: 0 },
            n_init: 1,
            max_iter: 300,
            device: DeviceSpec::Auto,
            dtype: DType::F32,
        }
    }

    /// Sets the shift.
    pub fn sigma(mut self, sigma: Sigma) -> Self {
        self.sigma = sigma;
        self
    }

    /// Sets the initialisation.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }

    /// Starts from the given labels ([`Init::Labels`]).
    pub fn init_labels(self, labels: Vec<u32>) -> Self {
        self.init(Init::Labels(labels))
    }

    /// Sets the number of runs.
    pub fn n_init(mut self, n_init: usize) -> Self {
        self.n_init = n_init;
        self
    }

    /// Sets the iteration limit.
    pub fn max_iter(mut self, max_iter: usize) -> Self {
        self.max_iter = max_iter;
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
        crate::fit_checks::check_runs(self.k, n, self.max_iter, self.n_init, "nodes")?;
        if let Sigma::Fixed(s) = self.sigma {
            if !s.is_finite() {
                return Err(FitError::Parameter(format!("sigma = {s} must be finite")));
            }
        }
        if let Init::Labels(given) = &self.init {
            crate::fit_checks::check_initial_labels(given, n, self.k, "nodes")?;
        }
        Ok(())
    }

    /// Clusters the graph of `adjacency`: a square, symmetric (to
    /// [`SYMMETRY_TOLERANCE`]) matrix of non-negative weights without isolated nodes (each
    /// error names the offending entry or node), `k <= n`.
    pub fn fit(&self, adjacency: &CsrMatrix) -> Result<NcutResult, FitError> {
        let start = Instant::now();
        let graph = Graph::new(adjacency)?;
        let n = graph.n();
        self.validate(n)?;
        let ctx = Context::new(self.device)?.with_dtype(self.dtype);
        let degrees = ctx.col(&graph.degrees)?;
        ctx.synchronize()?;
        let upload_s = start.elapsed().as_secs_f64();
        let runs = match self.init {
            Init::Labels(_) => 1,
            Init::Random { .. } => self.n_init,
        };
        let t_iter = Instant::now();
        let mut best: Option<(usize, Run)> = None;
        for run in 0..runs {
            let labels0 = match &self.init {
                Init::Labels(given) => given.clone(),
                Init::Random { seed } => {
                    let mut rng = SplitMix64::new(seed.wrapping_add(run as u64));
                    (0..n).map(|_| rng.below(self.k) as u32).collect()
                }
            };
            let r = self.run_once(&ctx, &graph, &degrees, labels0)?;
            if best.as_ref().is_none_or(|(_, b)| r.ncut < b.ncut) {
                best = Some((run, r));
            }
        }
        let iterations_s = t_iter.elapsed().as_secs_f64();
        let (best_run, r) = best.ok_or_else(|| FitError::Parameter("no run".into()))?;
        let mut sizes = vec![0usize; self.k];
        for &l in &r.labels {
            sizes[l as usize] += 1;
        }
        Ok(NcutResult {
            empty_clusters: sizes.iter().filter(|s| **s == 0).count(),
            labels: r.labels,
            ncut: r.ncut,
            ncut_history: r.history,
            objective: r.objective,
            iterations: r.iterations,
            converged: r.converged,
            rejected_steps: r.rejected,
            sigma: r.sigma,
            sigma_bound: graph.sigma_bound(),
            best_run,
            n,
            nnz: adjacency.nnz(),
            timings: NcutTimings {
                upload_s,
                iterations_s,
                per_iteration_s: r.per_iteration_s,
                total_s: start.elapsed().as_secs_f64(),
            },
            device: ctx.describe(),
            dtype: ctx.dtype(),
            params: self.clone(),
        })
    }

    /// One run from `labels0` (see the module's notes on the shift).
    fn run_once(
        &self,
        ctx: &Context,
        graph: &Graph<'_>,
        degrees: &Tensor,
        labels0: Vec<u32>,
    ) -> Result<Run, FitError> {
        let bound = graph.sigma_bound();
        let (mut sigma, adaptive) = match self.sigma {
            Sigma::Auto => (0.0, true),
            Sigma::Fixed(s) => (s, false),
        };
        let mut shifted = upload(ctx, &graph.shifted(sigma)?)?;
        let mut labels = ctx.index(&labels0)?;
        // The labels before the last accepted step, to go back to.
        let mut previous: Option<Tensor> = None;
        let mut out = Outputs::default();
        let mut history: Vec<f64> = Vec::new();
        let mut per_iteration_s = Vec::new();
        let (mut rejected, mut iterations) = (0, 0);
        let mut converged = false;
        // The labels are the previous ones again, already in the history.
        let mut again = false;
        // The labels came from a step whose cut is not measured yet.
        let mut unchecked = false;
        let mut evaluated: Option<Evaluation> = None;
        while iterations < self.max_iter {
            let t = Instant::now();
            let e = evaluate(ctx, &shifted, degrees, sigma, &labels, self.k, &mut out)?;
            iterations += 1;
            per_iteration_s.push(t.elapsed().as_secs_f64());
            let raised = !again && history.last().is_some_and(|&h| e.ncut > h);
            if adaptive && raised {
                // The last step raised the cut: take it back.
                rejected += 1;
                if let Some(p) = previous.take() {
                    labels = p;
                }
                unchecked = false;
                if sigma >= bound {
                    // Cannot happen in exact arithmetic (K is positive semi-definite here);
                    // rounding in near-ties can: the previous labels are the result.
                    converged = true;
                    break;
                }
                sigma = raise(sigma, bound);
                shifted = upload(ctx, &graph.shifted(sigma)?)?;
                again = true;
                continue;
            }
            if !again {
                history.push(e.ncut);
            }
            again = false;
            unchecked = false;
            if e.changed == 0 {
                converged = true;
                evaluated = Some(e);
                break;
            }
            let next = out.take("new_labels")?;
            if let Some(old) = previous.replace(std::mem::replace(&mut labels, next)) {
                out.insert("new_labels", old);
            }
            unchecked = true;
        }
        let e = match evaluated {
            Some(e) => e,
            None => {
                // Stopped by max_iter or a step taken back at the bound: measure the final
                // labels (and, under Auto, take back a last step that raised the cut).
                let mut e = evaluate(ctx, &shifted, degrees, sigma, &labels, self.k, &mut out)?;
                let last = history.last().copied().unwrap_or(f64::INFINITY);
                if adaptive && unchecked && e.ncut > last {
                    if let Some(p) = previous.take() {
                        labels = p;
                        rejected += 1;
                        e = evaluate(ctx, &shifted, degrees, sigma, &labels, self.k, &mut out)?;
                    }
                }
                e
            }
        };
        let labels = ctx.to_u32(&labels)?;
        Ok(Run {
            ncut: normalized_cut(graph.adjacency, &labels, self.k)?,
            objective: e.objective + graph.kernel_trace(sigma),
            labels,
            history,
            iterations,
            converged,
            rejected,
            sigma,
            per_iteration_s,
        })
    }
}

/// The next shift after a step that raised the cut: doubled, at least a sixteenth of the
/// bound, at most the bound (so at most about five raises reach it).
fn raise(sigma: f64, bound: f64) -> f64 {
    (2.0 * sigma).max(bound / 16.0).min(bound)
}

/// What one run of the iteration program says of its input labels.
struct Evaluation {
    ncut: f64,
    objective: f64,
    changed: usize,
}

/// Runs the iteration program on `labels`; its new labels stay in `out`.
fn evaluate(
    ctx: &Context,
    shifted: &Tensor,
    degrees: &Tensor,
    sigma: f64,
    labels: &Tensor,
    k: usize,
    out: &mut Outputs,
) -> Result<Evaluation, FitError> {
    let args = Args::new()
        .tensor("As", shifted)
        .tensor("deg", degrees)
        .scalar("sigma", sigma)
        .tensor("labels", labels)
        .dim("k", k);
    ctx.run_into(program(), &args, out)?;
    let ncut = out.scalar("ncut")?;
    if !ncut.is_finite() {
        return Err(FitError::Input(format!(
            "the normalized cut is {ncut}: the degrees overflow {}; scale the weights or \
             compute in f64",
            ctx.dtype()
        )));
    }
    Ok(Evaluation {
        ncut,
        objective: out.scalar("objective")?,
        // A sum of 0/1 values is zero exactly when nothing changed, in any precision.
        changed: out.scalar("changed")?.round() as usize,
    })
}

struct Run {
    labels: Vec<u32>,
    ncut: f64,
    objective: f64,
    history: Vec<f64>,
    iterations: usize,
    converged: bool,
    rejected: usize,
    sigma: f64,
    per_iteration_s: Vec<f64>,
}
