//! Point weights (weighted Kernel K-means, Dhillon, Guan and Kulis 2004): point `i` weighs
//! `w_i >= 0`, a centroid is the weighted mean of its points in feature space, and the
//! objective is `sum_i w_i ||phi(x_i) - c_{label_i}||^2`. Integer weights give what repeating
//! each point that many times gives. A zero-weight point still takes the nearest centroid but
//! moves none and adds nothing to the objective; a cluster whose weights sum to 0 is empty
//! (its centroid norm `+inf`), as scikit-learn's `KMeans` treats `sample_weight`.

//!
//! Labels and centroids do not change when every weight is multiplied by the same number, so
//! the weights go to the device divided by a power of two that brings the largest into
//! `[2^32, 2^33)` ([`scale`], [`upload`]): weights far below or above the range of `f32`
//! (`1e-46`, `1e39`) cluster as their ratios say, and the objective (the one number in weight
//! units) is multiplied back, exactly. Every positive weight must then be a normal number in
//! the fit's precision (so a cluster's `1 / W_c` cannot overflow): a positive weight below
//! about `2.7e-48` times the largest in `f32` (`2^-158`; about `1e-317` in `f64`) is an error
//! naming it.

use super::FitError;
use crate::{Context, DType, Tensor};
use serde::Serialize;

/// Checks that `weights` gives one finite, non-negative weight to each of `n` points, not all
/// 0; the error names the first bad position and what to do.
pub fn check(weights: &[f64], n: usize) -> Result<(), FitError> {
    if weights.len() != n {
        return Err(FitError::Input(format!(
            "{} sample weights for {n} points; give one weight per point",
            weights.len()
        )));
    }
    if let Some(i) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
        return Err(FitError::Input(format!(
            "sample weight {i} is {}; weights must be finite and >= 0 (0 leaves a point out of \
             the centroids and the objective)",
            weights[i]
        )));
    }
    if weights.iter().all(|w| *w == 0.0) {
        return Err(FitError::Input(
            "every sample weight is 0; at least one point must weigh more than 0".into(),
        ));
    }
    Ok(())
}

/// Points per cluster of `labels` (`k` clusters), or with `weights` the weight per cluster.
pub(crate) fn cluster_sizes(labels: &[u32], weights: Option<&[f64]>, k: usize) -> Vec<f64> {
    let mut sizes = vec![0.0; k];
    for (i, &l) in labels.iter().enumerate() {
        sizes[l as usize] += weights.map_or(1.0, |w| w[i]);
    }
    sizes
}

/// The power of two the weights are divided by on the device: the one that brings the
/// largest of checked `weights` into `[2^32, 2^33)` (kept within the normal range of `f64`),
/// so the division and the objective's multiplication back are exact. `2^32` leaves room
/// below for weights far smaller than the largest and above for the objective's sums.
pub fn scale(weights: &[f64]) -> f64 {
    let max = weights.iter().copied().fold(0.0, f64::max);
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let e = (max.log2().floor() as i64 - 32).clamp(-1022, 1023);
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// Checked `weights` divided by [`scale`]`(weights)`, as a fit in `dtype` holds them.
///
/// # Errors
/// [`FitError::Input`] naming the first positive weight that is not a normal number in
/// `dtype` once divided (it would count as 0, or its cluster's `1 / W_c` would overflow,
/// without saying so).
pub fn scaled(dtype: DType, weights: &[f64]) -> Result<Vec<f64>, FitError> {
    let s = scale(weights);
    let scaled: Vec<f64> = weights.iter().map(|w| w / s).collect();
    let vanishes = |v: f64| match dtype {
        DType::F32 => !(v as f32).is_normal(),
        DType::F64 => !v.is_normal(),
    };
    if let Some(i) = (0..weights.len()).find(|&i| weights[i] > 0.0 && vanishes(scaled[i])) {
        let max = weights.iter().copied().fold(0.0, f64::max);
        return Err(FitError::Input(format!(
            "sample weight {i} is {}, {:.1e} times the largest ({max:e}): too small a ratio for \
             {dtype} to weigh; compute in f64, or give it weight 0",
            weights[i],
            weights[i] / max
        )));
    }
    Ok(scaled)
}

/// Checked `weights` on the device of `ctx`, divided by [`scale`]`(weights)` ([`scaled`]),
/// and that scale (to multiply the objective by).
///
/// # Errors
/// As [`scaled`].
pub fn upload(ctx: &Context, weights: &[f64]) -> Result<(Tensor, f64), FitError> {
    Ok((ctx.col(&scaled(ctx.dtype(), weights)?)?, scale(weights)))
}

/// What a fit's weights were, for its result and reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightSummary {
    /// The sum of the weights.
    pub total: f64,
    /// The smallest weight.
    pub min: f64,
    /// The largest weight.
    pub max: f64,
    /// Points of weight 0.
    pub zero: usize,
}

impl WeightSummary {
    /// The summary of checked weights.
    pub fn of(weights: &[f64]) -> WeightSummary {
        WeightSummary {
            total: weights.iter().sum(),
            min: weights.iter().copied().fold(f64::INFINITY, f64::min),
            max: weights.iter().copied().fold(0.0, f64::max),
            zero: weights.iter().filter(|w| **w == 0.0).count(),
        }
    }
}

/// The index `i` at which the running sum of `weights` passes `r` (`0 <= r < sum`): a draw
/// with probability proportional to the weights. The last index of positive weight where
/// rounding leaves `r` unspent.
pub fn draw(weights: impl IntoIterator<Item = f64>, r: f64) -> usize {
    let mut left = r;
    let mut last = 0;
    for (i, w) in weights.into_iter().enumerate() {
        if w > 0.0 {
            last = i;
            left -= w;
            if left < 0.0 {
                return i;
            }
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_weights_name_the_first_bad_position() {
        assert!(check(&[1.0, 0.0, 2.5], 3).is_ok());
        let msg = |w: &[f64], n| check(w, n).unwrap_err().to_string();
        assert_eq!(
            msg(&[1.0, 2.0], 3),
            "invalid input: 2 sample weights for 3 points; give one weight per point"
        );
        assert!(msg(&[1.0, -0.5, f64::NAN], 3).contains("sample weight 1 is -0.5"));
        assert!(msg(&[1.0, f64::NAN], 2).contains("sample weight 1 is NaN"));
        assert!(msg(&[f64::INFINITY], 1).contains("sample weight 0 is inf"));
        assert!(msg(&[0.0, 0.0], 2).contains("every sample weight is 0"));
    }

    #[test]
    fn draws_follow_the_running_sum_and_skip_zero_weights() {
        let w = [0.0, 1.0, 0.0, 3.0];
        assert_eq!(draw(w, 0.0), 1);
        assert_eq!(draw(w, 0.999), 1);
        assert_eq!(draw(w, 1.0), 3);
        assert_eq!(draw(w, 3.999), 3);
        // Rounding past the total: the last point of positive weight.
        assert_eq!(draw(w, 4.5), 3);
        assert_eq!(
            WeightSummary::of(&w),
            WeightSummary {
                total: 4.0,
                min: 0.0,
                max: 3.0,
                zero: 2
            }
        );
    }
}
