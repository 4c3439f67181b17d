//! Kernel K-means in the kernel's feature space, where it has a small one: a polynomial kernel
//! of degree 1 or 2 is an inner product of explicit features, `kappa(x, y) = phi(x) . phi(y)`,
//! with `D = (d + 1) (d + 2) / 2` features at most for degree 2. Every quantity of an iteration
//! (the sums of K's rows by cluster, the centroids' norms, the objective) is then the linear
//! kernel's on the features, so the fit runs the linear kernel's recompute plan on `phi(X)`:
//! the sums by cluster reassociated as `phi(X) (phi(X)^T V^T)` (the planner's chain pass),
//! `O(n D k)` work per iteration instead of `O(n^2 d)`, and no `n x n` value. This is
//! [`Algorithm::Features`](super::Algorithm::Features). Where `n x D` features do not fit in
//! memory, the iterations build them in blocks of rows instead (`feature_blocks`); whether a
//! fit takes them at all is `feature_choice`'s.
//!
//! For `kappa(x, y) = (g x . y + c)^2 = g^2 (x . y)^2 + 2 g c (x . y) + c^2`:
//! `phi(x) = [g x_a^2 (a < d), sqrt(2) g x_a x_b (a < b), sqrt(2 g c) x_a (a < d), c]`,
//! the middle block needing `g c >= 0` (real features), and blocks of zeros left out; for
//! degree 1, `g x . y + c` with `g, c >= 0`: `phi(x) = [sqrt(g) x, sqrt(c)]`.

use super::{FitError, Kernel};
use crate::Context;

/// Most features a map may have (2^28: a point's features alone would take 1 GiB in f32).
const MAX_FEATURES: u128 = 1 << 28;

/// The explicit feature map of a kernel (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FeatureMap {
    /// Scale of the dot product.
    gamma: f64,
    /// Offset.
    coef0: f64,
    /// 1 or 2.
    degree: u8,
    /// Features of a point.
    d: usize,
}

impl FeatureMap {
    /// The map of `kernel` on points of `d` features, or why there is none.
    pub(crate) fn of(kernel: &Kernel, d: usize) -> Result<FeatureMap, String> {
        let Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } = *kernel
        else {
            return Err(format!(
                "the {} kernel has no small explicit feature map (only polynomial kernels of \
                 degree 1 or 2 do)",
                kernel.name()
            ));
        };
        let map = |degree| FeatureMap {
            gamma,
            coef0,
            degree,
            d,
        };
        let map = if degree == 2.0 {
            if gamma * coef0 < 0.0 {
                return Err(format!(
                    "the polynomial kernel's features need gamma * coef0 >= 0 (gamma = \
                     {gamma}, coef0 = {coef0}): its middle term 2 gamma coef0 (x . y) would \
                     need imaginary features"
                ));
            }
            map(2)
        } else if degree == 1.0 {
            if gamma < 0.0 || coef0 < 0.0 {
                return Err(format!(
                    "the degree-1 polynomial kernel's features need gamma >= 0 and coef0 >= 0 \
                     (gamma = {gamma}, coef0 = {coef0})"
                ));
            }
            map(1)
        } else {
            return Err(format!(
                "only polynomial kernels of degree 1 or 2 have a small explicit feature map \
                 (degree = {degree})"
            ));
        };
        // A bound on the features that keeps every size below far from overflowing (and a
        // point's column indices within u32).
        let dim = map.dim();
        if dim == 0 {
            return Err(
                "the kernel is 0 everywhere (gamma = coef0 = 0): it has no features".to_string(),
            );
        }
        if dim as u128 > MAX_FEATURES || d as u128 >= MAX_FEATURES {
            return Err(format!(
                "{d} features per point make {dim} kernel features, more than the {} the \
                 features algorithm builds",
                MAX_FEATURES
            ));
        }
        Ok(map)
    }

    /// The features as terms `(a, b, coef)`: feature `f` of a point `x` is `coef xe[a] xe[b]`
    /// with `xe = [x, 1]` (see the module documentation); blocks of zeros left out.
    fn terms(&self) -> Vec<(usize, usize, f64)> {
        let (d, g, c) = (self.d, self.gamma, self.coef0);
        let mut t = Vec::new();
        match self.degree {
            2 => {
                if g != 0.0 {
                    for a in 0..d {
                        t.push((a, a, g));
                        for b in a + 1..d {
                            t.push((a, b, std::f64::consts::SQRT_2 * g));
                        }
                    }
                }
                if g * c != 0.0 {
                    t.extend((0..d).map(|a| (a, d, (2.0 * g * c).sqrt())));
                }
                if c != 0.0 {
                    t.push((d, d, c));
                }
            }
            _ => {
                if g != 0.0 {
                    t.extend((0..d).map(|a| (a, d, g.sqrt())));
                }
                if c != 0.0 {
                    t.push((d, d, c.sqrt()));
                }
            }
        }
        t
    }

    /// Features of a point.
    pub(crate) fn dim(&self) -> usize {
        let d = self.d as u128;
        let (g, c) = (self.gamma != 0.0, self.coef0 != 0.0);
        let n = match self.degree {
            2 => u128::from(g) * d * (d + 1) / 2 + u128::from(g && c) * d + u128::from(c),
            _ => u128::from(g) * d + u128::from(c),
        };
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// Features of a point before the map (`d`).
    pub(crate) fn input_dim(&self) -> usize {
        self.d
    }

    /// The features of one point `x` (`d` values), computed on the host in f64 (the device's
    /// f32 features of the same point may differ from them in the last bit).
    pub(crate) fn row(&self, x: &[f64]) -> Vec<f64> {
        let xe = |i: usize| if i < self.d { x[i] } else { 1.0 };
        self.terms()
            .into_iter()
            .map(|(a, b, coef)| coef * xe(a) * xe(b))
            .collect()
    }

    /// The features of `n` points (`n x d` row-major) as `n x dim()` row-major, on the host
    /// (the reference of the tests; fits compute them with [`FeatureMap::upload`]).
    #[cfg(test)]
    pub(crate) fn apply(&self, x: &[f64], n: usize) -> Vec<f64> {
        (0..n)
            .flat_map(|i| self.row(&x[i * self.d..(i + 1) * self.d]))
            .collect()
    }

    /// The map as columns of `[x, 1]`: feature `f` is `c[f] xe[a[f]] xe[b[f]]` with
    /// `xe = [x, 1]` (index `d` is the 1): `(a, b, c)` (see [`Self::terms`]).
    fn columns(&self) -> (Vec<u32>, Vec<u32>, Vec<f64>) {
        let terms = self.terms();
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        (
            terms.iter().map(|t| index(t.0)).collect(),
            terms.iter().map(|t| index(t.1)).collect(),
            terms.iter().map(|t| t.2).collect(),
        )
    }

    /// Bytes the build takes besides the points and the features, in elements of `size`:
    /// the map's columns and coefficients on the device.
    pub(crate) fn build_bytes(&self, size: usize) -> u64 {
        (self.dim() as u64).saturating_mul(8 + size as u64)
    }

    /// The map's columns on `ctx`, to build features with.
    pub(crate) fn builder(&self, ctx: &Context) -> Result<FeatureBuilder, FitError> {
        let (a, b, c) = self.columns();
        Ok(FeatureBuilder {
            a: ctx.index(&a)?,
            b: ctx.index(&b)?,
            c: ctx.col(&c)?,
        })
    }

    /// The features of `n` points (`n x d` row-major, on the host) computed on `ctx` (see
    /// [`FeatureBuilder::build`]) and left there: `n x dim()`.
    pub(crate) fn upload(
        &self,
        ctx: &mut Context,
        x: &[f64],
        n: usize,
    ) -> Result<crate::Tensor, FitError> {
        let points = ctx.dense(n, self.d, x)?;
        self.builder(ctx)?.build(ctx, &points)
    }

    /// Bytes of `n` points' features in elements of `elem_bytes`.
    pub(crate) fn bytes(&self, n: usize, elem_bytes: usize) -> u64 {
        (n as u64)
            .saturating_mul(self.dim() as u64)
            .saturating_mul(elem_bytes as u64)
    }
}

/// A feature map's columns and coefficients on a device: builds the features of points
/// already there.
pub(crate) struct FeatureBuilder {
    a: crate::Tensor,
    b: crate::Tensor,
    c: crate::Tensor,
}

impl FeatureBuilder {
    /// The features of the points `x` (`m x d`, on `ctx`), computed by the `poly_features`
    /// program (exactly: each is the product of its coefficient and two of the point's
    /// values, or one, or none), into `out`'s `Phi` (`m x dim`; reused where its shape fits).
    pub(crate) fn build_into(
        &self,
        ctx: &Context,
        x: &crate::Tensor,
        out: &mut crate::Outputs,
    ) -> Result<(), FitError> {
        let args = crate::Args::new()
            .tensor("X", x)
            .tensor("a", &self.a)
            .tensor("b", &self.b)
            .tensor("c", &self.c);
        Ok(ctx.run_into(super::programs::program("poly_features"), &args, out)?)
    }

    /// The features of the points `x` (`m x d`, on `ctx`), left there: `m x dim`.
    pub(crate) fn build(
        &self,
        ctx: &Context,
        x: &crate::Tensor,
    ) -> Result<crate::Tensor, FitError> {
        let mut out = crate::Outputs::default();
        self.build_into(ctx, x, &mut out)?;
        Ok(out.take("Phi")?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kappa(kernel: &Kernel, x: &[f64], y: &[f64]) -> f64 {
        let dot: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
        match *kernel {
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } => (gamma * dot + coef0).powf(degree),
            _ => unreachable!(),
        }
    }

    #[test]
    fn inner_products_of_features_are_the_kernel() {
        let x = [0.3, -1.2, 2.0, 0.7, 0.0, -0.4, 1.1, 0.9, -2.5];
        for (gamma, coef0, degree) in [
            (1.0, 1.0, 2.0),
            (0.5, 0.0, 2.0),
            (-0.7, -1.5, 2.0),
            (2.0, 0.0, 1.0),
            (0.25, 3.0, 1.0),
            (0.0, 2.0, 2.0),
        ] {
            let kernel = Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            };
            let map = FeatureMap::of(&kernel, 3).unwrap();
            let phi = map.apply(&x, 3);
            let dim = map.dim();
            assert_eq!(phi.len(), 3 * dim);
            for i in 0..3 {
                for j in 0..3 {
                    let got: f64 = (0..dim).map(|f| phi[i * dim + f] * phi[j * dim + f]).sum();
                    let want = kappa(&kernel, &x[3 * i..3 * i + 3], &x[3 * j..3 * j + 3]);
                    assert!(
                        (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                        "({gamma}, {coef0}, {degree}) points {i}, {j}: {got} against {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn columns_pick_the_features() {
        let x = [0.3, -1.2, 2.0, 0.7, 0.0, -0.4];
        for (gamma, coef0, degree) in [(1.0, 1.0, 2.0), (0.5, 0.0, 2.0), (0.25, 3.0, 1.0)] {
            let kernel = Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            };
            let map = FeatureMap::of(&kernel, 3).unwrap();
            let (a, b, c) = map.columns();
            let dim = map.dim();
            let want = map.apply(&x, 2);
            for i in 0..2 {
                let p = &x[3 * i..3 * i + 3];
                let xe = |col: u32| p.get(col as usize).copied().unwrap_or(1.0);
                for f in 0..dim {
                    let got = c[f] * xe(a[f]) * xe(b[f]);
                    assert!(
                        (got - want[i * dim + f]).abs() < 1e-12,
                        "({gamma}, {coef0}, {degree}) {i} {f}"
                    );
                }
            }
        }
    }

    #[test]
    fn dimensions_leave_out_zero_blocks() {
        let poly = |gamma, coef0, degree| Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        };
        assert_eq!(
            FeatureMap::of(&poly(1.0, 1.0, 2.0), 50).unwrap().dim(),
            1326
        );
        assert_eq!(
            FeatureMap::of(&poly(1.0, 0.0, 2.0), 50).unwrap().dim(),
            1275
        );
        assert_eq!(FeatureMap::of(&poly(1.0, 1.0, 1.0), 26).unwrap().dim(), 27);
        assert_eq!(FeatureMap::of(&poly(0.0, 1.0, 2.0), 5).unwrap().dim(), 1);
    }

    #[test]
    fn kernels_without_real_features_are_refused_with_the_reason() {
        let err = |k: Kernel| FeatureMap::of(&k, 4).unwrap_err();
        assert!(err(Kernel::Gaussian { gamma: None }).contains("gaussian"));
        assert!(err(Kernel::Polynomial {
            gamma: 1.0,
            coef0: 1.0,
            degree: 3.0
        })
        .contains("degree 1 or 2"));
        assert!(err(Kernel::Polynomial {
            gamma: 1.0,
            coef0: -1.0,
            degree: 2.0
        })
        .contains("gamma * coef0 >= 0"));
    }
}
