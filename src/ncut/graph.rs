//! The graph of a normalized cut: its adjacency checked (square, symmetric, non-negative, no
//! isolated node), its degrees, the diagonal shift sigma that makes the kernel positive
//! semi-definite (a Gershgorin bound), the shifted adjacency `A + sigma D` the program reads,
//! and the normalized cut of a labelling computed directly from `A`.

use crate::io::CsrMatrix;
use crate::kkmeans::FitError;

/// Relative tolerance of the symmetry check: `|A_ij - A_ji| <= 1e-9 max(|A_ij|, |A_ji|)`.
pub const SYMMETRY_TOLERANCE: f64 = 1e-9;

/// A checked adjacency matrix and its degrees.
pub(crate) struct Graph<'a> {
    pub adjacency: &'a CsrMatrix,
    /// `d_i = sum_j A_ij` (a self-loop counted once), all `> 0`.
    pub degrees: Vec<f64>,
}

impl<'a> Graph<'a> {
    /// Checks `adjacency`; the error names the offending entry or node.
    pub fn new(adjacency: &'a CsrMatrix) -> Result<Graph<'a>, FitError> {
        let n = adjacency.rows();
        if n != adjacency.cols() {
            return Err(FitError::Input(format!(
                "the adjacency matrix is {n} x {}; it must be square (one row and one column \
                 per node)",
                adjacency.cols()
            )));
        }
        if n == 0 {
            return Err(FitError::Input("the graph has no nodes".into()));
        }
        let mut degrees = vec![0.0; n];
        for (i, degree) in degrees.iter_mut().enumerate() {
            let (cols, vals) = row(adjacency, i);
            for (&j, &v) in cols.iter().zip(vals) {
                if v < 0.0 {
                    return Err(FitError::Input(format!(
                        "entry ({i}, {j}) is {v}; edge weights must be >= 0"
                    )));
                }
                let back = entry(adjacency, j, i);
                if (v - back).abs() > SYMMETRY_TOLERANCE * v.abs().max(back.abs()) {
                    return Err(FitError::Input(format!(
                        "the adjacency matrix is not symmetric: entry ({i}, {j}) is {v} but \
                         ({j}, {i}) is {back}; an undirected graph needs A = A^T (for a \
                         directed one, cluster A + A^T)"
                    )));
                }
                *degree += v;
            }
        }
        if let Some(i) = degrees.iter().position(|d| *d <= 0.0) {
            return Err(FitError::Input(format!(
                "node {i} is isolated (degree 0; {} of {n} nodes are): its normalized cut is \
                 undefined; remove isolated nodes (they form clusters of their own) or add \
                 self-loops",
                degrees.iter().filter(|d| **d <= 0.0).count()
            )));
        }
        Ok(Graph { adjacency, degrees })
    }

    /// Nodes.
    pub fn n(&self) -> usize {
        self.degrees.len()
    }

    /// The smallest shift that the Gershgorin circle theorem proves safe:
    /// `max_i (1 - 2 A_ii / d_i)` (1 without self-loops). See [`gershgorin_sigma`].
    pub fn sigma_bound(&self) -> f64 {
        (0..self.n())
            .map(|i| 1.0 - 2.0 * entry(self.adjacency, i, i) / self.degrees[i])
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// `A + sigma D`: `sigma d_i` added to each diagonal entry (stored where it was not).
    pub fn shifted(&self, sigma: f64) -> Result<CsrMatrix, FitError> {
        let a = self.adjacency;
        let n = self.n();
        let mut row_ptr = Vec::with_capacity(n + 1);
        let mut col_idx = Vec::with_capacity(a.nnz() + n);
        let mut values = Vec::with_capacity(a.nnz() + n);
        row_ptr.push(0);
        for i in 0..n {
            let (cols, vals) = row(a, i);
            let shift = sigma * self.degrees[i];
            let mut placed = sigma == 0.0;
            for (&j, &v) in cols.iter().zip(vals) {
                if !placed && j >= i {
                    if j == i {
                        col_idx.push(i);
                        values.push(v + shift);
                        placed = true;
                        continue;
                    }
                    col_idx.push(i);
                    values.push(shift);
                    placed = true;
                }
                col_idx.push(j);
                values.push(v);
            }
            if !placed {
                col_idx.push(i);
                values.push(shift);
            }
            row_ptr.push(values.len());
        }
        CsrMatrix::new(n, n, row_ptr, col_idx, values)
            .map_err(|e| FitError::Input(format!("the shifted adjacency: {e}")))
    }

    /// `sum_i (A + sigma D)_ii / d_i`: the weighted kernel's trace `tr(D K)`, which the
    /// program leaves out of its objective.
    pub fn kernel_trace(&self, sigma: f64) -> f64 {
        (0..self.n())
            .map(|i| entry(self.adjacency, i, i) / self.degrees[i] + sigma)
            .sum()
    }
}

/// Row `i`'s column indices and values (empty past the end).
fn row(a: &CsrMatrix, i: usize) -> (&[usize], &[f64]) {
    a.row(i).unwrap_or((&[], &[]))
}

/// `A_ij` (0 where not stored), by binary search in row `i`.
fn entry(a: &CsrMatrix, i: usize, j: usize) -> f64 {
    let (cols, vals) = row(a, i);
    cols.binary_search(&j).map_or(0.0, |p| vals[p])
}

/// The smallest diagonal shift sigma for which the Gershgorin circle theorem proves the kernel
/// `K = sigma D^-1 + D^-1 A D^-1` positive semi-definite: `max_i (1 - 2 A_ii / d_i)` (1 for a
/// graph without self-loops). `K = D^-1 (A + sigma D) D^-1` is positive semi-definite exactly
/// when `A + sigma D` is; row `i` of `A + sigma D` has the diagonal `A_ii + sigma d_i` and off
/// the diagonal `sum_{j != i} |A_ij| = d_i - A_ii` (non-negative weights), so every eigenvalue is
/// at least `min_i d_i (sigma - (1 - 2 A_ii / d_i))`, which is `>= 0` for this sigma. With it,
/// weighted Kernel K-means never increases the normalized cut. The adjacency is checked first.
///
/// ```
/// use popcorn::io::CsrMatrix;
/// // A path 0 - 1 - 2 with a self-loop of weight 1 on node 0 (d_0 = 2: 1 - 2 / 2 = 0).
/// let a = CsrMatrix::from_dense(3, 3, &[1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]).unwrap();
/// assert_eq!(popcorn::ncut::gershgorin_sigma(&a).unwrap(), 1.0);
/// ```
pub fn gershgorin_sigma(adjacency: &CsrMatrix) -> Result<f64, FitError> {
    Ok(Graph::new(adjacency)?.sigma_bound())
}

/// The normalized cut of `labels` (each below `k`) on the graph of `adjacency`, from `A` alone:
/// `sum_c cut(c, V - c) / assoc(c, V)` over the clusters of positive volume, with
/// `assoc(c, V) = sum_{i in c} d_i` and `cut(c, V - c) = assoc(c, V) - sum_{i, j in c} A_ij`.
/// In `[0, k)`; 0 when no edge leaves a cluster.
pub fn normalized_cut(adjacency: &CsrMatrix, labels: &[u32], k: usize) -> Result<f64, FitError> {
    if labels.len() != adjacency.rows() || adjacency.rows() != adjacency.cols() {
        return Err(FitError::Input(format!(
            "{} labels for a {} x {} adjacency matrix; give one label per node of a square matrix",
            labels.len(),
            adjacency.rows(),
            adjacency.cols()
        )));
    }
    if let Some(i) = labels.iter().position(|l| *l as usize >= k) {
        return Err(FitError::Input(format!(
            "label {} of node {i} is not below k = {k}",
            labels[i]
        )));
    }
    let mut volume = vec![0.0; k];
    let mut inside = vec![0.0; k];
    for (i, &li) in labels.iter().enumerate() {
        let (cols, vals) = row(adjacency, i);
        for (&j, &v) in cols.iter().zip(vals) {
            volume[li as usize] += v;
            if labels[j] == li {
                inside[li as usize] += v;
            }
        }
    }
    Ok(volume
        .iter()
        .zip(&inside)
        .filter(|(w, _)| **w > 0.0)
        .map(|(w, l)| (w - l) / w)
        .sum())
}
