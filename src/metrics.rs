//! Clustering quality against known classes: the adjusted Rand index and normalized mutual
//! information, both from the contingency table.

use std::collections::HashMap;

/// The contingency table of two labelings: counts per (class, cluster) pair, and the row and
/// column sums.
struct Contingency {
    cells: HashMap<(i64, i64), u64>,
    rows: HashMap<i64, u64>,
    cols: HashMap<i64, u64>,
    n: u64,
}

fn contingency(truth: &[i64], pred: &[i64]) -> Contingency {
    let mut c = Contingency {
        cells: HashMap::new(),
        rows: HashMap::new(),
        cols: HashMap::new(),
        n: 0,
    };
    for (t, p) in truth.iter().zip(pred) {
        *c.cells.entry((*t, *p)).or_default() += 1;
        *c.rows.entry(*t).or_default() += 1;
        *c.cols.entry(*p).or_default() += 1;
        c.n += 1;
    }
    c
}

fn pairs(x: u64) -> f64 {
    let x = x as f64;
    x * (x - 1.0) / 2.0
}

/// The adjusted Rand index of `pred` against `truth` (1 for identical partitions, about 0 for
/// random ones). Label values need not match, only the grouping. Both slices must have the same
/// length; an empty input gives 1.
///
/// ```
/// use popcorn::metrics::adjusted_rand_index;
/// assert_eq!(adjusted_rand_index(&[0, 0, 1, 1], &[5, 5, 3, 3]), 1.0);
/// ```
pub fn adjusted_rand_index(truth: &[i64], pred: &[i64]) -> f64 {
    assert_eq!(truth.len(), pred.len(), "labelings of different lengths");
    let c = contingency(truth, pred);
    if c.n < 2 {
        return 1.0;
    }
    let index: f64 = c.cells.values().map(|v| pairs(*v)).sum();
    let a: f64 = c.rows.values().map(|v| pairs(*v)).sum();
    let b: f64 = c.cols.values().map(|v| pairs(*v)).sum();
    let expected = a * b / pairs(c.n);
    let max = 0.5 * (a + b);
    if (max - expected).abs() < f64::EPSILON {
        // Both partitions are trivial (all in one group, or all singletons).
        return if (index - expected).abs() < f64::EPSILON {
            1.0
        } else {
            0.0
        };
    }
    (index - expected) / (max - expected)
}

/// Normalized mutual information of `pred` against `truth`, with the arithmetic-mean
/// normalization (scikit-learn's default): 1 for identical partitions, 0 for independent ones.
///
/// ```
/// use popcorn::metrics::normalized_mutual_info;
/// assert!((normalized_mutual_info(&[0, 0, 1, 1], &[1, 1, 0, 0]) - 1.0).abs() < 1e-12);
/// ```
pub fn normalized_mutual_info(truth: &[i64], pred: &[i64]) -> f64 {
    assert_eq!(truth.len(), pred.len(), "labelings of different lengths");
    let c = contingency(truth, pred);
    if c.n == 0 {
        return 1.0;
    }
    let n = c.n as f64;
    let entropy = |m: &HashMap<i64, u64>| -> f64 {
        m.values()
            .map(|v| {
                let p = *v as f64 / n;
                -p * p.ln()
            })
            .sum()
    };
    let (ht, hp) = (entropy(&c.rows), entropy(&c.cols));
    if ht == 0.0 && hp == 0.0 {
        return 1.0;
    }
    let mi: f64 = c
        .cells
        .iter()
        .map(|((t, p), v)| {
            let v = *v as f64;
            let (a, b) = (c.rows[t] as f64, c.cols[p] as f64);
            (v / n) * ((n * v) / (a * b)).ln()
        })
        .sum();
    let denom = 0.5 * (ht + hp);
    if denom == 0.0 {
        0.0
    } else {
        (mi / denom).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ari_matches_hand_computed_values() {
        // scikit-learn: adjusted_rand_score([0,0,1,1],[0,0,1,2]) = 0.5714285714285715
        assert!(
            (adjusted_rand_index(&[0, 0, 1, 1], &[0, 0, 1, 2]) - 0.5714285714285715).abs() < 1e-12
        );
        // No pair together in both: index 0, expected 6 * 3 / 15 = 1.2, max (6 + 3) / 2 = 4.5,
        // so (0 - 1.2) / (4.5 - 1.2) = -4/11.
        assert!(
            (adjusted_rand_index(&[0, 0, 0, 1, 1, 1], &[0, 1, 2, 0, 1, 2]) + 4.0 / 11.0).abs()
                < 1e-12
        );
        assert_eq!(adjusted_rand_index(&[1, 1, 1], &[2, 2, 2]), 1.0);
    }

    #[test]
    fn nmi_matches_hand_computed_values() {
        // scikit-learn: normalized_mutual_info_score([0,0,1,1],[0,0,1,2]) = 0.8
        assert!((normalized_mutual_info(&[0, 0, 1, 1], &[0, 0, 1, 2]) - 0.8).abs() < 1e-12);
        assert!(normalized_mutual_info(&[0, 0, 1, 1], &[0, 1, 0, 1]).abs() < 1e-12);
    }
}
