//! Where a fit's iterations read the kernel from: the stored matrix K, or the points, from
//! which every iteration recomputes K's tiles ([`Algorithm::Recompute`](super::Algorithm)).
//! Both give the same iteration outputs, K's diagonal and its columns (for k-means++).

use super::{features::FeatureMap, model::KernelPrograms, programs::program, FitError};
use crate::{Args, Context, Outputs, Tensor};
use popcorn_dsl::Program;

/// The kernel of a fit, stored or recomputed.
pub(crate) enum Source<'a> {
    /// K itself, `n x n`.
    Stored(&'a Tensor),
    /// The (scaled) points, `n x d`, uploaded (`x`) and on the host (`host`), and the kernel's
    /// programs; or, for the features algorithm, the points' features uploaded (`x`, `n x d`)
    /// and the points on the host, whose rows `features` maps.
    Points {
        /// The points (or their features) on the device.
        x: &'a Tensor,
        /// The points, row-major.
        host: &'a [f64],
        /// Columns of `x`.
        d: usize,
        /// The kernel function's programs and scalar arguments.
        programs: &'a KernelPrograms,
        /// The feature map from `host`'s rows to `x`'s, for the features algorithm.
        features: Option<FeatureMap>,
    },
}

impl Source<'_> {
    /// The program of one iteration, weighted or not.
    pub fn iteration(&self, weighted: bool) -> &'static Program {
        match (self, weighted) {
            (Source::Stored(_), false) => program("kkmeans_iteration"),
            (Source::Stored(_), true) => program("kkmeans_iteration_weighted"),
            (Source::Points { programs, .. }, _) => {
                programs.program_weighted("kkmeans_recompute", weighted)
            }
        }
    }

    /// The arguments of one iteration from `labels`, with the points' weights `w` where the
    /// fit is weighted.
    pub fn iteration_args<'b>(
        &'b self,
        labels: &'b Tensor,
        w: Option<&'b Tensor>,
        k: usize,
    ) -> Args<'b> {
        let mut args = Args::new().tensor("labels", labels).dim("k", k);
        if let Some(w) = w {
            args = args.tensor("w", w);
        }
        match self {
            Source::Stored(kmat) => args.tensor("K", kmat),
            Source::Points { x, programs, .. } => programs.bind(args.tensor("X", x)),
        }
    }

    /// The centroid norms of the input labels from an iteration's outputs, where the
    /// iteration computes them (the recompute programs do).
    pub fn centroid_norms(
        &self,
        ctx: &Context,
        out: &Outputs,
    ) -> Result<Option<Vec<f64>>, FitError> {
        match self {
            Source::Stored(_) => Ok(None),
            Source::Points { .. } => Ok(Some(ctx.to_f64(out.tensor("cn")?)?)),
        }
    }

    /// K's diagonal, `kappa(x_i, x_i)`.
    pub fn diagonal(&self, ctx: &Context) -> Result<Vec<f64>, FitError> {
        match self {
            Source::Stored(kmat) => {
                let p = Program::parse("fn d(K: Dense[n, n]) -> (g: Col[n]) { g = diag(K); }")
                    .map_err(crate::RuntimeError::from)?;
                Ok(ctx.to_f64(ctx.run(&p, &Args::new().tensor("K", kmat))?.tensor("g")?)?)
            }
            Source::Points { .. } => {
                let out = self.cross(ctx, 0)?;
                Ok(ctx.to_f64(out.tensor("s")?)?)
            }
        }
    }

    /// Column `i` of K, `kappa(x_j, x_i)` for every `j`.
    pub fn column(&self, ctx: &Context, i: usize, n: usize) -> Result<Vec<f64>, FitError> {
        match self {
            Source::Stored(kmat) => {
                let mut onehot = vec![0.0; n];
                onehot[i] = 1.0;
                let e = ctx.col(&onehot)?;
                let out = ctx.run(
                    program("kernel_column"),
                    &Args::new().tensor("K", kmat).tensor("e", &e),
                )?;
                Ok(ctx.to_f64(out.tensor("column")?)?)
            }
            Source::Points { .. } => Ok(ctx.to_f64(self.cross(ctx, i)?.tensor("Kc")?)?),
        }
    }

    /// The cross kernel of every point against point `i` (`Kc`, `n x 1`) and the points' own
    /// kernel values (`s`), from the points.
    fn cross(&self, ctx: &Context, i: usize) -> Result<Outputs, FitError> {
        let Source::Points {
            x,
            host,
            d,
            programs,
            features,
        } = self
        else {
            return Err(FitError::Parameter(
                "the cross kernel needs the points (a bug in popcorn)".into(),
            ));
        };
        let center = match features {
            Some(map) => {
                let p = map.input_dim();
                ctx.dense(1, *d, &map.row(&host[i * p..(i + 1) * p]))?
            }
            None => ctx.dense(1, *d, &host[i * d..(i + 1) * d])?,
        };
        let args = programs.bind(Args::new().tensor("Y", x).tensor("X", &center));
        Ok(ctx.run(programs.program("cross"), &args)?)
    }
}
