//! What predicting needs after a fit: the (scaled) training points, the labels, the centroid
//! norms, and the context to run on.

use super::{programs::program, FitError, Kernel, Points};
use crate::{Args, Context, Tensor};

/// Per-feature standardisation learned from the training points.
#[derive(Clone, Debug)]
pub struct Scaling {
    mean: Vec<f64>,
    scale: Vec<f64>,
}

impl Scaling {
    /// Mean and population standard deviation of every feature; a constant feature gets scale
    /// 1 (it becomes all zeros, never NaN).
    pub fn fit(p: Points<'_>) -> Scaling {
        let mut mean = vec![0.0; p.d];
        for row in p.data.chunks_exact(p.d) {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += v;
            }
        }
        mean.iter_mut().for_each(|m| *m /= p.n as f64);
        let mut var = vec![0.0; p.d];
        for row in p.data.chunks_exact(p.d) {
            for ((s, v), m) in var.iter_mut().zip(row).zip(&mean) {
                *s += (v - m) * (v - m);
            }
        }
        let scale = var
            .iter()
            .map(|s| {
                let sd = (s / p.n as f64).sqrt();
                if sd > 0.0 {
                    sd
                } else {
                    1.0
                }
            })
            .collect();
        Scaling { mean, scale }
    }

    /// The standardised values of `p`.
    pub fn apply(&self, p: Points<'_>) -> Vec<f64> {
        p.data
            .chunks_exact(p.d)
            .flat_map(|row| {
                row.iter()
                    .zip(&self.mean)
                    .zip(&self.scale)
                    .map(|((v, m), s)| (v - m) / s)
            })
            .collect()
    }
}

/// The programs of `kernel_kmeans.pop` for one kernel function, and its scalar arguments
/// (`gamma` defaults to 1/d). Each family has a program per kernel, `{family}_{kernel}`:
/// `kernel` (K itself), `cross` (new points against the points), `kkmeans_recompute` (an
/// iteration from the points) and `kkmeans_predict`.
#[derive(Clone, Debug)]
pub(crate) struct KernelPrograms {
    /// The programs' suffix: `linear`, `polynomial`, `gaussian` or `sigmoid`.
    suffix: &'static str,
    /// The scalar arguments.
    scalars: Vec<(&'static str, f64)>,
}

impl KernelPrograms {
    /// The programs of `kernel` for points of `d` features (a precomputed kernel has none of
    /// its own: the linear ones stand in).
    pub(crate) fn new(kernel: &Kernel, d: usize) -> KernelPrograms {
        let default_gamma = 1.0 / d as f64;
        let (suffix, scalars) = match *kernel {
            Kernel::Linear | Kernel::Precomputed => ("linear", vec![]),
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } => (
                "polynomial",
                vec![("gamma", gamma), ("coef0", coef0), ("degree", degree)],
            ),
            Kernel::Gaussian { gamma } => {
                ("gaussian", vec![("gamma", gamma.unwrap_or(default_gamma))])
            }
            Kernel::Sigmoid { gamma, coef0 } => (
                "sigmoid",
                vec![("gamma", gamma.unwrap_or(default_gamma)), ("coef0", coef0)],
            ),
        };
        KernelPrograms { suffix, scalars }
    }

    /// The name of the family's program for this kernel.
    pub(crate) fn name(&self, family: &str) -> String {
        format!("{family}_{}", self.suffix)
    }

    /// The family's program for this kernel.
    pub(crate) fn program(&self, family: &str) -> &'static popcorn_dsl::Program {
        program(&self.name(family))
    }

    /// `args` with the kernel's scalar arguments.
    pub(crate) fn bind<'a>(&self, args: Args<'a>) -> Args<'a> {
        self.scalars
            .iter()
            .fold(args, |a, &(name, v)| a.scalar(name, v))
    }
}

/// A fitted clustering that can assign new points.
pub struct Model {
    ctx: Context,
    kernel: Kernel,
    d: usize,
    x: Vec<f64>,
    scaling: Option<Scaling>,
    labels: Vec<u32>,
    centroid_norms: Vec<f64>,
    k: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Model({} kernel, {} points, k = {})",
            self.kernel.name(),
            self.labels.len(),
            self.k
        )
    }
}

/// Squared feature-space norms of the centroids of `labels` from the stored kernel matrix
/// (`+inf` for empty clusters).
pub(crate) fn centroid_norms(
    ctx: &Context,
    kmat: &Tensor,
    labels: &[u32],
    k: usize,
) -> Result<Vec<f64>, FitError> {
    let l = ctx.index(labels)?;
    let out = ctx.run(
        program("kkmeans_centroid_norms"),
        &Args::new()
            .tensor("K", kmat)
            .tensor("labels", &l)
            .dim("k", k),
    )?;
    Ok(ctx.to_f64(out.tensor("cn")?)?)
}

impl Model {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctx: Context,
        kernel: Kernel,
        d: usize,
        x: Vec<f64>,
        scaling: Option<Scaling>,
        labels: &[u32],
        k: usize,
        centroid_norms: Vec<f64>,
    ) -> Model {
        Model {
            ctx,
            kernel,
            d,
            x,
            scaling,
            labels: labels.to_vec(),
            centroid_norms,
            k,
        }
    }

    /// Squared feature-space norms of the centroids (`+inf` for empty clusters).
    pub fn centroid_norms(&self) -> &[f64] {
        &self.centroid_norms
    }

    /// The nearest feature-space centroid of each new point.
    pub fn predict(&self, points: Points<'_>) -> Result<Vec<u32>, FitError> {
        if points.d != self.d {
            return Err(FitError::Input(format!(
                "the model was fitted on {} features, the new points have {}",
                self.d, points.d
            )));
        }
        let y_host = match &self.scaling {
            Some(s) => s.apply(points),
            None => points.data.to_vec(),
        };
        let n = self.labels.len();
        let ctx = &self.ctx;
        let y = ctx.dense(points.n, self.d, &y_host)?;
        let x = ctx.dense(n, self.d, &self.x)?;
        let labels = ctx.index(&self.labels)?;
        let cn = ctx.col(&self.centroid_norms)?;
        // One program from the points: the cross kernel is summed by cluster tile by tile
        // inside its contraction, never stored (m x n values).
        let programs = KernelPrograms::new(&self.kernel, self.d);
        let args = programs.bind(
            Args::new()
                .tensor("Y", &y)
                .tensor("X", &x)
                .tensor("labels", &labels)
                .tensor("cn", &cn),
        );
        let out = ctx.run(programs.program("kkmeans_predict"), &args)?;
        Ok(ctx.to_u32(out.tensor("predicted")?)?)
    }

    /// The nearest centroid of new points given their kernel values against the training
    /// points (`m x n`, row-major) and their self-similarities `kappa(y, y)` (length `m`):
    /// the way to predict with a precomputed kernel.
    pub fn predict_precomputed(
        &self,
        cross: &[f64],
        self_similarity: &[f64],
    ) -> Result<Vec<u32>, FitError> {
        let n = self.labels.len();
        let m = self_similarity.len();
        if cross.len() != m * n {
            return Err(FitError::Input(format!(
                "{m} new points against {n} training points need {} kernel values, got {}",
                m * n,
                cross.len()
            )));
        }
        let kc = self.ctx.dense(m, n, cross)?;
        let s = self.ctx.col(self_similarity)?;
        self.assign(&kc, &s)
    }

    fn assign(&self, kc: &Tensor, s: &Tensor) -> Result<Vec<u32>, FitError> {
        let ctx = &self.ctx;
        let labels = ctx.index(&self.labels)?;
        let cn = ctx.col(&self.centroid_norms)?;
        let args = Args::new()
            .tensor("Kc", kc)
            .tensor("s", s)
            .tensor("labels", &labels)
            .tensor("cn", &cn);
        let out = ctx.run(program("kkmeans_assign"), &args)?;
        Ok(ctx.to_u32(out.tensor("predicted")?)?)
    }
}
