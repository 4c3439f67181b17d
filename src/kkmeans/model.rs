//! What predicting needs after a fit: the (scaled) training points, the labels, the centroid
//! norms, and the context to run on.

use super::{programs::program, FitError, Kernel, Points};
use crate::io::CsrMatrix;
use crate::{Args, Context, Tensor};

/// Per-feature standardisation learned from the training points.
#[derive(Clone, Debug, PartialEq)]
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

    /// A scaling from its per-feature means and scales (as [`Scaling::mean`] and
    /// [`Scaling::scale`] give them): equally long, finite, every scale positive.
    pub fn new(mean: Vec<f64>, scale: Vec<f64>) -> Result<Scaling, FitError> {
        if mean.len() != scale.len() {
            return Err(FitError::Input(format!(
                "a scaling needs as many scales as means, got {} and {}",
                scale.len(),
                mean.len()
            )));
        }
        if let Some(f) = mean.iter().position(|m| !m.is_finite()) {
            return Err(FitError::Input(format!(
                "the mean of feature {f} is {}",
                mean[f]
            )));
        }
        if let Some(f) = scale.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(FitError::Input(format!(
                "the scale of feature {f} is {}; scales are finite and positive",
                scale[f]
            )));
        }
        Ok(Scaling { mean, scale })
    }

    /// The mean of every feature.
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// The scale (standard deviation, 1 for a constant feature) of every feature.
    pub fn scale(&self) -> &[f64] {
        &self.scale
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

    /// The family's program of sparse points for this kernel (`{family}_{kernel}_sparse`).
    pub(crate) fn program_sparse(&self, family: &str) -> &'static popcorn_dsl::Program {
        program(&format!("{}_sparse", self.name(family)))
    }

    /// The family's program for this kernel, its weighted form (`{family}_{kernel}_weighted`)
    /// where `weighted`.
    pub(crate) fn program_weighted(
        &self,
        family: &str,
        weighted: bool,
    ) -> &'static popcorn_dsl::Program {
        program(&weighted_name(&self.name(family), weighted))
    }

    /// `args` with the kernel's scalar arguments.
    pub(crate) fn bind<'a>(&self, args: Args<'a>) -> Args<'a> {
        self.scalars
            .iter()
            .fold(args, |a, &(name, v)| a.scalar(name, v))
    }
}

/// The name of a program's weighted form (`{name}_weighted`) where `weighted`.
pub(crate) fn weighted_name(name: &str, weighted: bool) -> String {
    if weighted {
        format!("{name}_weighted")
    } else {
        name.to_string()
    }
}

/// What a [`Model`] holds, apart from its context: to store a model and build it again
/// ([`Model::parts`], [`Model::from_parts`]; the Python package pickles models this way).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelParts {
    /// The kernel ([`Kernel::Precomputed`] for a model that predicts from kernel values).
    pub kernel: Kernel,
    /// Features per point (for a precomputed kernel, the number of training points).
    pub d: usize,
    /// The training points as the kernel sees them (standardised where the fit was), `n x d`
    /// row-major; empty for a precomputed kernel and for a fit of sparse points.
    pub x: Vec<f64>,
    /// The training points of a fit of sparse points, kept sparse (`n x d`; [`ModelParts::x`]
    /// is then empty); `None` for a fit of dense points.
    pub x_sparse: Option<CsrMatrix>,
    /// The standardisation learned from the training points, if any.
    pub scaling: Option<Scaling>,
    /// The cluster of every training point.
    pub labels: Vec<u32>,
    /// Number of clusters.
    pub k: usize,
    /// Squared feature-space norms of the centroids (`+inf` for empty clusters).
    pub centroid_norms: Vec<f64>,
    /// The training points' weights, for a weighted fit (the centroids are weighted means).
    pub weights: Option<Vec<f64>>,
}

/// A fitted clustering that can assign new points.
pub struct Model {
    ctx: Context,
    parts: ModelParts,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Model({} kernel, {} points, k = {})",
            self.parts.kernel.name(),
            self.parts.labels.len(),
            self.parts.k
        )
    }
}

/// Squared feature-space norms of the centroids of `labels` (weighted by `weights` where
/// given) from the stored kernel matrix (`+inf` for empty clusters).
pub(crate) fn centroid_norms(
    ctx: &Context,
    kmat: &Tensor,
    labels: &[u32],
    weights: Option<&Tensor>,
    k: usize,
) -> Result<Vec<f64>, FitError> {
    let l = ctx.index(labels)?;
    let mut args = Args::new()
        .tensor("K", kmat)
        .tensor("labels", &l)
        .dim("k", k);
    if let Some(w) = weights {
        args = args.tensor("w", w);
    }
    let name = weighted_name("kkmeans_centroid_norms", weights.is_some());
    let out = ctx.run(program(&name), &args)?;
    Ok(ctx.to_f64(out.tensor("cn")?)?)
}

impl Model {
    /// A model of checked parts, predicting on `ctx`.
    /// (`parts.x_sparse` holds the points of a fit of sparse points, `parts.x` then empty.)
    pub(crate) fn new(ctx: Context, parts: ModelParts) -> Model {
        Model { ctx, parts }
    }

    /// Whether the model was fitted on sparse points.
    pub fn is_sparse(&self) -> bool {
        self.parts.x_sparse.is_some()
    }

    /// Squared feature-space norms of the centroids (`+inf` for empty clusters).
    pub fn centroid_norms(&self) -> &[f64] {
        &self.parts.centroid_norms
    }

    /// The training points' weights, for a weighted fit.
    pub fn weights(&self) -> Option<&[f64]> {
        self.parts.weights.as_deref()
    }

    /// What the model holds, to store it. A model of sparse points keeps them sparse
    /// ([`ModelParts::x_sparse`]; nothing is made dense).
    pub fn parts(&self) -> ModelParts {
        self.parts.clone()
    }

    /// A model from stored parts, predicting on `ctx`. The parts are checked against each
    /// other (sizes, labels below `k`, finite points, weights), never trusted. Parts with
    /// [`ModelParts::x_sparse`] give a model of sparse points.
    ///
    /// ```
    /// use popcorn::kkmeans::{KernelKMeans, Model, Points};
    /// use popcorn::{Context, DeviceSpec};
    ///
    /// let x = [0.0, 0.1, 0.2, 5.0, 5.1, 5.2];
    /// let fit = KernelKMeans::new(2).device(DeviceSpec::Cpu).fit(Points::new(6, 1, &x).unwrap()).unwrap();
    /// let parts = fit.model.as_ref().unwrap().parts();
    /// let again = Model::from_parts(Context::new(DeviceSpec::Cpu).unwrap(), parts).unwrap();
    /// let new = Points::new(2, 1, &[0.05, 4.9]).unwrap();
    /// assert_eq!(again.predict(new).unwrap(), fit.predict(new).unwrap());
    /// ```
    pub fn from_parts(ctx: Context, parts: ModelParts) -> Result<Model, FitError> {
        let ModelParts {
            kernel,
            d,
            x,
            x_sparse,
            scaling,
            labels,
            k,
            centroid_norms,
            weights,
        } = &parts;
        let (d, k) = (*d, *k);
        let n = labels.len();
        let bad = |m: String| Err(FitError::Input(format!("model parts: {m}")));
        if n == 0 || k == 0 || d == 0 {
            return bad(format!("{n} labels, k = {k}, d = {d}; none may be 0"));
        }
        if let Some(xs) = x_sparse {
            if *kernel == Kernel::Precomputed || !x.is_empty() || scaling.is_some() {
                return bad(format!(
                    "sparse points go with an empty x, no scaling and a kernel on points; got \
                     {} dense values, {} scaling and the {} kernel",
                    x.len(),
                    if scaling.is_some() { "a" } else { "no" },
                    kernel.name()
                ));
            }
            if xs.rows() != n || xs.cols() != d {
                return bad(format!(
                    "sparse points of shape {} x {} for {n} labels and d = {d}",
                    xs.rows(),
                    xs.cols()
                ));
            }
        } else if *kernel == Kernel::Precomputed {
            if !x.is_empty() || d != n {
                return bad(format!(
                    "a precomputed kernel over {n} points has no points and d = n, got {} values and d = {d}",
                    x.len()
                ));
            }
        } else {
            // n x d finite values.
            Points::new(n, d, x)?;
        }
        if let Some(s) = scaling {
            if s.mean.len() != d {
                return bad(format!("a scaling of {} features for {d}", s.mean.len()));
            }
        }
        if let Some(p) = labels.iter().position(|l| *l as usize >= k) {
            return bad(format!(
                "label {} of point {p} is not below k = {k}",
                labels[p]
            ));
        }
        if centroid_norms.len() != k {
            return bad(format!(
                "{} centroid norms for k = {k}",
                centroid_norms.len()
            ));
        }
        if let Some(w) = weights {
            if let Err(e) = super::weights::check(w, n) {
                return bad(e.to_string());
            }
        }
        Ok(Model { ctx, parts })
    }

    /// The weights on the device, for a weighted model.
    fn weights_tensor(&self) -> Result<Option<Tensor>, FitError> {
        Ok(match &self.parts.weights {
            // Divided by a power of two, as in the fit: predictions depend on ratios only.
            Some(w) => Some(super::weights::upload(&self.ctx, w)?.0),
            None => None,
        })
    }

    /// The nearest feature-space centroid of each new point (not for a precomputed kernel:
    /// see [`Model::predict_precomputed`]).
    pub fn predict(&self, points: Points<'_>) -> Result<Vec<u32>, FitError> {
        let p = &self.parts;
        if p.kernel == Kernel::Precomputed {
            return Err(FitError::Parameter(
                "this model's kernel is precomputed: it predicts from kernel values \
                 (Model::predict_precomputed), not from points"
                    .into(),
            ));
        }
        if points.d != p.d {
            return Err(FitError::Input(format!(
                "the model was fitted on {} features, the new points have {}",
                p.d, points.d
            )));
        }
        if self.parts.x_sparse.is_some() {
            let y = CsrMatrix::from_dense(points.n, points.d, points.data)
                .map_err(|e| FitError::Input(e.to_string()))?;
            return self.predict_sparse(&y);
        }
        let y_host = match &p.scaling {
            Some(s) => s.apply(points),
            None => points.data.to_vec(),
        };
        // The cross kernel's product multiplies the new points and the training points as the
        // fit's products did (a features fit checked its features, not its points).
        for points in [&y_host, &p.x] {
            super::precision::check_fp16_range(
                self.ctx.config().half_products,
                &p.kernel,
                points,
                false,
            )?;
        }
        let n = p.labels.len();
        let ctx = &self.ctx;
        let y = ctx.dense(points.n, p.d, &y_host)?;
        let x = ctx.dense(n, p.d, &p.x)?;
        let labels = ctx.index(&p.labels)?;
        let cn = ctx.col(&p.centroid_norms)?;
        let w = self.weights_tensor()?;
        // One program from the points: the cross kernel is summed by cluster tile by tile
        // inside its contraction, never stored (m x n values).
        let programs = KernelPrograms::new(&p.kernel, p.d);
        let mut args = Args::new()
            .tensor("Y", &y)
            .tensor("X", &x)
            .tensor("labels", &labels)
            .tensor("cn", &cn);
        if let Some(w) = &w {
            args = args.tensor("w", w);
        }
        let out = ctx.run(
            programs.program_weighted("kkmeans_predict", w.is_some()),
            &programs.bind(args),
        )?;
        Ok(ctx.to_u32(out.tensor("predicted")?)?)
    }

    /// The nearest feature-space centroid of each new sparse point (`m x d` CSR, the fit's
    /// `d`). A model of sparse points computes the cross kernel from both sides kept sparse
    /// (`cross_*_sparse`, stored `m x n`); a model of dense points predicts the points made
    /// dense, checked against the memory budget first ([`CsrMatrix::to_dense_checked`]).
    pub fn predict_sparse(&self, y: &CsrMatrix) -> Result<Vec<u32>, FitError> {
        let p = &self.parts;
        if y.cols() != p.d {
            return Err(FitError::Input(format!(
                "the model was fitted on {} features, the new points have {}",
                p.d,
                y.cols()
            )));
        }
        let Some(x) = &p.x_sparse else {
            let dense = y
                .to_dense_checked()
                .map_err(|e| FitError::Input(e.to_string()))?;
            return self.predict(Points::new(y.rows(), y.cols(), &dense)?);
        };
        if p.kernel == Kernel::Precomputed {
            return Err(FitError::Parameter(
                "this model's kernel is precomputed: it predicts from kernel values".into(),
            ));
        }
        let ctx = &self.ctx;
        let programs = KernelPrograms::new(&p.kernel, p.d);
        let yt = super::csr_upload::upload(ctx, y)?;
        let xt = super::csr_upload::upload(ctx, x)?;
        let out = ctx.run(
            programs.program_sparse("cross"),
            &programs.bind(Args::new().tensor("Y", &yt).tensor("X", &xt)),
        )?;
        self.assign(out.tensor("Kc")?, out.tensor("s")?)
    }

    /// The nearest centroid of new points given their kernel values against the training
    /// points (`m x n`, row-major) and their self-similarities `kappa(y, y)` (length `m`):
    /// the way to predict with a precomputed kernel.
    pub fn predict_precomputed(
        &self,
        cross: &[f64],
        self_similarity: &[f64],
    ) -> Result<Vec<u32>, FitError> {
        let n = self.parts.labels.len();
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
        let labels = ctx.index(&self.parts.labels)?;
        let cn = ctx.col(&self.parts.centroid_norms)?;
        let w = self.weights_tensor()?;
        let mut args = Args::new()
            .tensor("Kc", kc)
            .tensor("s", s)
            .tensor("labels", &labels)
            .tensor("cn", &cn);
        if let Some(w) = &w {
            args = args.tensor("w", w);
        }
        let name = weighted_name("kkmeans_assign", w.is_some());
        let out = ctx.run(program(&name), &args)?;
        Ok(ctx.to_u32(out.tensor("predicted")?)?)
    }
}
