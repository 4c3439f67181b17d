//! Where a fit's iterations read the kernel from: the stored matrix K, the points, from
//! which every iteration recomputes K's tiles ([`Algorithm::Recompute`](super::Algorithm)),
//! or the points in blocks whose features every iteration builds. All give the same
//! iteration outputs, K's diagonal and its columns (for k-means++).

use super::feature_blocks::FeatureBlocks;
use super::model::{weighted_name, KernelPrograms};
use super::{features::FeatureMap, programs::program, FitError};
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
    /// The points in blocks, whose features every iteration builds (the features algorithm
    /// where they do not fit whole), the points on the host, and the kernel's own programs
    /// (for its columns).
    Blocks {
        /// The blocks and the iterations' state.
        blocks: &'a FeatureBlocks,
        /// The points, row-major.
        host: &'a [f64],
        /// Features per point.
        d: usize,
        /// The kernel function's programs and scalar arguments.
        programs: &'a KernelPrograms,
    },
}

impl Source<'_> {
    /// One iteration from `labels` (weighted by `w` where given) into `out` (its
    /// `new_labels`, and whatever else the iteration gives): the objective and the number of
    /// labels that changed.
    pub fn step(
        &self,
        ctx: &mut Context,
        labels: &Tensor,
        w: Option<&Tensor>,
        k: usize,
        out: &mut Outputs,
    ) -> Result<(f64, f64), FitError> {
        let mut args = Args::new().tensor("labels", labels).dim("k", k);
        if let Some(w) = w {
            args = args.tensor("w", w);
        }
        let (program, args) = match self {
            Source::Blocks { blocks, .. } => return blocks.step(ctx, labels, out),
            Source::Stored(kmat) => {
                let name = weighted_name("kkmeans_iteration", w.is_some());
                (program(&name), args.tensor("K", kmat))
            }
            Source::Points { x, programs, .. } => (
                programs.program_weighted("kkmeans_recompute", w.is_some()),
                programs.bind(args.tensor("X", x)),
            ),
        };
        ctx.run_into(program, &args, out)?;
        Ok((out.scalar("objective")?, out.scalar("changed")?))
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
            Source::Blocks { blocks, .. } => Ok(Some(blocks.centroid_norms())),
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
            Source::Points { .. } | Source::Blocks { .. } => self.cross(ctx, 0, "s"),
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
            Source::Points { .. } | Source::Blocks { .. } => self.cross(ctx, i, "Kc"),
        }
    }

    /// The cross kernel of every point against point `i` (`Kc`, `n x 1`) or the points' own
    /// kernel values (`s`), from the points: output `name` of the cross program.
    fn cross(&self, ctx: &Context, i: usize, name: &str) -> Result<Vec<f64>, FitError> {
        match self {
            Source::Points {
                x,
                host,
                d,
                programs,
                features,
            } => {
                let center = match features {
                    Some(map) => {
                        let p = map.input_dim();
                        ctx.dense(1, *d, &map.row(&host[i * p..(i + 1) * p]))?
                    }
                    None => ctx.dense(1, *d, &host[i * d..(i + 1) * d])?,
                };
                let args = programs.bind(Args::new().tensor("Y", x).tensor("X", &center));
                Ok(ctx.to_f64(ctx.run(programs.program("cross"), &args)?.tensor(name)?)?)
            }
            Source::Blocks {
                blocks,
                host,
                d,
                programs,
            } => {
                // The kernel's own cross program on each block of points.
                let center = ctx.dense(1, *d, &host[i * d..(i + 1) * d])?;
                let mut values = Vec::with_capacity(host.len() / (*d).max(1));
                for x in blocks.points() {
                    let args = programs.bind(Args::new().tensor("Y", x).tensor("X", &center));
                    let out = ctx.run(programs.program("cross"), &args)?;
                    values.extend(ctx.to_f64(out.tensor(name)?)?);
                }
                Ok(values)
            }
            Source::Stored(_) => Err(FitError::Parameter(
                "the cross kernel needs the points (a bug in popcorn)".into(),
            )),
        }
    }
}
