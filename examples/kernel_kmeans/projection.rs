//! Two coordinates per point for a scatter plot: the features themselves for data of one or
//! two features, otherwise the projections on the first two principal components.

/// Points in the plane, and what their axes are.
pub struct Projection {
    /// One `(x, y)` per point.
    pub xy: Vec<(f64, f64)>,
    /// The axes' names.
    pub axes: [&'static str; 2],
}

/// Rows the principal components are estimated from (every row of smaller data).
const SAMPLE_ROWS: usize = 5000;
/// Power iterations per component at most.
const MAX_ITERATIONS: usize = 200;

/// The plane of `n` points of `d` features (row-major `x`).
pub fn project(x: &[f64], n: usize, d: usize) -> Projection {
    match d {
        1 => Projection {
            xy: x.iter().map(|&v| (v, 0.0)).collect(),
            axes: ["x1", ""],
        },
        2 => Projection {
            xy: x.chunks_exact(2).map(|p| (p[0], p[1])).collect(),
            axes: ["x1", "x2"],
        },
        _ => principal_plane(x, n, d),
    }
}

/// Projections on the first two principal components, estimated by power iteration on the
/// centred covariance of (at most [`SAMPLE_ROWS`] evenly spaced) rows, the second kept
/// orthogonal to the first.
fn principal_plane(x: &[f64], n: usize, d: usize) -> Projection {
    let mut mean = vec![0.0; d];
    for row in x.chunks_exact(d) {
        mean.iter_mut()
            .zip(row)
            .for_each(|(m, v)| *m += v / n as f64);
    }
    let stride = n.div_ceil(SAMPLE_ROWS).max(1);
    // Row-major, like `x`.
    let sample: Vec<f64> = x
        .chunks_exact(d)
        .step_by(stride)
        .flat_map(|row| row.iter().zip(&mean).map(|(v, m)| v - m))
        .collect();
    let first = component(&sample, d, None);
    let second = component(&sample, d, Some(&first));
    let xy = x
        .chunks_exact(d)
        .map(|row| {
            let dot = |axis: &[f64]| {
                row.iter()
                    .zip(&mean)
                    .zip(axis)
                    .map(|((v, m), a)| (v - m) * a)
                    .sum()
            };
            (dot(&first), dot(&second))
        })
        .collect();
    Projection {
        xy,
        axes: ["principal component 1", "principal component 2"],
    }
}

/// The leading eigenvector of `sum_r r r^T` over the centred `rows` (row-major, `d` values
/// each), orthogonal to `other`.
fn component(rows: &[f64], d: usize, other: Option<&[f64]>) -> Vec<f64> {
    // A fixed start with weight on every feature, so runs are reproducible.
    let mut v: Vec<f64> = (0..d).map(|j| 1.0 + (j % 7) as f64 / 7.0).collect();
    orthonormalise(&mut v, other);
    for _ in 0..MAX_ITERATIONS {
        let mut w = vec![0.0; d];
        for r in rows.chunks_exact(d) {
            let s: f64 = r.iter().zip(&v).map(|(a, b)| a * b).sum();
            w.iter_mut().zip(r).for_each(|(wi, ri)| *wi += s * ri);
        }
        if !orthonormalise(&mut w, other) {
            // The data has no variance left in this direction: any unit vector serves.
            break;
        }
        let change: f64 = w.iter().zip(&v).map(|(a, b)| (a - b).abs()).sum();
        v = w;
        if change < 1e-10 {
            break;
        }
    }
    v
}

/// Removes from `v` its part along `other` and scales it to unit length; false if nothing is
/// left (then `v` is unchanged).
fn orthonormalise(v: &mut Vec<f64>, other: Option<&[f64]>) -> bool {
    let mut w = v.clone();
    if let Some(o) = other {
        let s: f64 = w.iter().zip(o).map(|(a, b)| a * b).sum();
        w.iter_mut().zip(o).for_each(|(a, b)| *a -= s * b);
    }
    let norm = w.iter().map(|a| a * a).sum::<f64>().sqrt();
    if !(norm > 1e-300 && norm.is_finite()) {
        return false;
    }
    w.iter_mut().for_each(|a| *a /= norm);
    *v = w;
    true
}

#[cfg(test)]
mod tests {
    use super::project;

    /// Points on a tilted plane of 3-D space: the principal plane is that plane, so the
    /// projection keeps every distance.
    #[test]
    fn points_on_a_plane_keep_their_distances() {
        let u = [1.0 / 3f64.sqrt(); 3];
        let w = [1.0 / 2f64.sqrt(), -1.0 / 2f64.sqrt(), 0.0];
        let coords: Vec<(f64, f64)> = (0..40)
            .map(|i| ((i as f64 * 0.37).sin() * 3.0, (i as f64 * 0.91).cos()))
            .collect();
        let x: Vec<f64> = coords
            .iter()
            .flat_map(|&(a, b)| (0..3).map(move |j| 5.0 + a * u[j] + b * w[j]))
            .collect();
        let p = project(&x, 40, 3);
        assert_eq!(p.axes[0], "principal component 1");
        let dist =
            |a: (f64, f64), b: (f64, f64)| ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt();
        for i in 0..40 {
            for j in 0..i {
                let want = dist(coords[i], coords[j]);
                let got = dist(p.xy[i], p.xy[j]);
                assert!((got - want).abs() < 1e-6, "{i}, {j}: {got} vs {want}");
            }
        }
        // The first component carries the larger spread (the 3-wide direction).
        let spread = |f: fn(&(f64, f64)) -> f64| {
            let v: Vec<f64> = p.xy.iter().map(f).collect();
            v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min)
        };
        assert!(spread(|q| q.0) > spread(|q| q.1));
    }

    #[test]
    fn two_features_are_drawn_as_they_are() {
        let p = project(&[1.0, 2.0, 3.0, 4.0], 2, 2);
        assert_eq!(p.xy, vec![(1.0, 2.0), (3.0, 4.0)]);
        assert_eq!(p.axes, ["x1", "x2"]);
    }
}
