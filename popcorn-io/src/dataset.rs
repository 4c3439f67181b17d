//! The loaded point set and checks on it.

use std::path::PathBuf;

use super::error::IoError;

/// A point set loaded from a file: `n` points of `d` features, row-major, plus optional labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// Number of points (rows).
    pub n: usize,
    /// Number of features (columns).
    pub d: usize,
    /// The points, row-major: point `i` is `x[i * d..(i + 1) * d]`. Always finite.
    pub x: Vec<f64>,
    /// The true labels (`n` of them) with their original integer values, if the file has them.
    pub labels: Option<Vec<i64>>,
    /// The file the points came from (for IDX, the images file).
    pub source: PathBuf,
}

impl Dataset {
    /// The features of point `i`, or `None` when `i >= n`.
    pub fn row(&self, i: usize) -> Option<&[f64]> {
        if i >= self.n {
            return None;
        }
        let start = i.checked_mul(self.d)?;
        self.x.get(start..start.checked_add(self.d)?)
    }

    /// Standardises every feature in place: subtracts the feature's mean and divides by its
    /// population standard deviation (divisor `n`), so each feature has mean 0 and variance 1.
    ///
    /// A constant feature (all values exactly equal) becomes all zeros instead of NaN. Does
    /// nothing when `n == 0`, `d == 0` or `x.len() != n * d`.
    pub fn zscore(&mut self) {
        if self.n == 0 || self.d == 0 || self.n.checked_mul(self.d) != Some(self.x.len()) {
            return;
        }
        let (n, d) = (self.n, self.d);
        let mut sum = vec![0.0f64; d];
        let mut min = vec![f64::INFINITY; d];
        let mut max = vec![f64::NEG_INFINITY; d];
        for row in self.x.chunks_exact(d) {
            for j in 0..d {
                sum[j] += row[j];
                min[j] = min[j].min(row[j]);
                max[j] = max[j].max(row[j]);
            }
        }
        let mean: Vec<f64> = sum.iter().map(|s| s / n as f64).collect();
        // Second pass on the centred values: numerically safer than E[x^2] - E[x]^2.
        let mut sq = vec![0.0f64; d];
        for row in self.x.chunks_exact(d) {
            for j in 0..d {
                let c = row[j] - mean[j];
                sq[j] += c * c;
            }
        }
        // Exact min == max marks a constant column: its centred values are rounding noise,
        // which dividing by a tiny std would blow up, so it is zeroed instead.
        let scale: Vec<Option<f64>> = (0..d)
            .map(|j| {
                let std = (sq[j] / n as f64).sqrt();
                (min[j] != max[j] && std > 0.0).then(|| 1.0 / std)
            })
            .collect();
        for row in self.x.chunks_exact_mut(d) {
            for j in 0..d {
                row[j] = match scale[j] {
                    Some(inv) => (row[j] - mean[j]) * inv,
                    None => 0.0,
                };
            }
        }
    }
}

/// Checks that `k` clusters can be formed from `n` points: `1 <= k <= n`.
///
/// Returns [`IoError::InvalidK`] with a message saying what to do otherwise.
pub fn check_k(n: usize, k: usize) -> Result<(), IoError> {
    let problem = if k == 0 {
        "k = 0 clusters requested; ask for at least 1 cluster".to_string()
    } else if n == 0 {
        format!(
            "k = {k} clusters requested but the data set has no points; load a non-empty data set"
        )
    } else if k > n {
        format!(
            "k = {k} clusters requested but the data set has only {n} points; choose k <= {n} \
             or load more points"
        )
    } else {
        return Ok(());
    };
    Err(IoError::InvalidK { k, n, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dataset(n: usize, d: usize, x: Vec<f64>) -> Dataset {
        Dataset {
            n,
            d,
            x,
            labels: None,
            source: PathBuf::from("mem"),
        }
    }

    #[test]
    fn row_returns_each_point_and_none_past_the_end() {
        let ds = dataset(3, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(ds.row(0), Some(&[1.0, 2.0][..]));
        assert_eq!(ds.row(2), Some(&[5.0, 6.0][..]));
        assert_eq!(ds.row(3), None);
    }

    #[test]
    fn zscore_matches_hand_computed_values_and_zeroes_constant_columns() {
        // Column 0: 1, 2, 3, 6 -> mean 3, population var (4 + 1 + 0 + 9) / 4 = 3.5.
        // Column 1: 0.1 four times (its mean is not exactly 0.1 in f64) -> zeros.
        // Column 2: -5, -5, -5, 7 -> mean -2, var (9 * 3 + 81) / 4 = 27.
        let mut ds = dataset(
            4,
            3,
            vec![
                1.0, 0.1, -5.0, 2.0, 0.1, -5.0, 3.0, 0.1, -5.0, 6.0, 0.1, 7.0,
            ],
        );
        ds.zscore();
        let s0 = 3.5f64.sqrt();
        let s2 = 27.0f64.sqrt();
        let expected = [
            -2.0 / s0,
            0.0,
            -3.0 / s2,
            -1.0 / s0,
            0.0,
            -3.0 / s2,
            0.0,
            0.0,
            -3.0 / s2,
            3.0 / s0,
            0.0,
            9.0 / s2,
        ];
        for (got, want) in ds.x.iter().zip(expected.iter()) {
            assert!((got - want).abs() < 1e-12, "got {got}, want {want}");
        }
        assert!(ds.x.iter().all(|v| v.is_finite()));
    }

    #[test]
    fn zscore_of_a_single_point_is_all_zeros() {
        let mut ds = dataset(1, 3, vec![4.0, -1.0, 0.5]);
        ds.zscore();
        assert_eq!(ds.x, vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn zscore_of_an_odd_sized_column_has_mean_zero_and_unit_variance() {
        let values = [3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0];
        let mut ds = dataset(7, 1, values.to_vec());
        ds.zscore();
        let mean: f64 = ds.x.iter().sum::<f64>() / 7.0;
        let var: f64 = ds.x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 7.0;
        assert!(mean.abs() < 1e-12);
        assert!((var - 1.0).abs() < 1e-12);
    }

    #[test]
    fn check_k_accepts_1_to_n_and_explains_the_rest() {
        assert!(check_k(5, 1).is_ok());
        assert!(check_k(5, 5).is_ok());
        assert!(check_k(1, 1).is_ok());
        let zero = check_k(5, 0).unwrap_err().to_string();
        assert!(
            zero.contains("k = 0") && zero.contains("at least 1"),
            "{zero}"
        );
        let big = check_k(3, 7).unwrap_err().to_string();
        assert!(
            big.contains("k = 7") && big.contains("only 3 points") && big.contains("k <= 3"),
            "{big}"
        );
        let empty = check_k(0, 2).unwrap_err().to_string();
        assert!(empty.contains("no points"), "{empty}");
    }
}
