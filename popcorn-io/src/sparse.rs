//! Sparse point sets: a validated CSR matrix ([`CsrMatrix`]) and a loaded sparse data set
//! ([`SparseDataset`]), kept sparse until a dense view is asked for.

use std::path::PathBuf;

use super::dataset::Dataset;
use super::error::IoError;
use super::input::{alloc_f64, alloc_points};

/// A `rows x cols` sparse matrix in CSR form, validated on construction.
///
/// Row `r` holds the entries `row_ptr[r]..row_ptr[r + 1]` of `col_idx` and `values`. Within a
/// row the column indices strictly increase (no duplicates), every index is below `cols`, and
/// every value is finite. Explicit zeros are kept as given.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrMatrix {
    rows: usize,
    cols: usize,
    row_ptr: Vec<usize>,
    col_idx: Vec<usize>,
    values: Vec<f64>,
}

/// An [`IoError::InvalidCsr`] with `problem`.
fn invalid(problem: String) -> IoError {
    IoError::InvalidCsr { problem }
}

/// The number of row offsets of a `rows x cols` matrix, `rows + 1`, or an
/// [`IoError::InvalidCsr`] naming the shape when that overflows.
fn offsets_for(rows: usize, cols: usize) -> Result<usize, IoError> {
    rows.checked_add(1).ok_or_else(|| {
        invalid(format!(
            "the shape {rows} x {cols} has too many rows: rows + 1 row offsets overflow"
        ))
    })
}

impl CsrMatrix {
    /// A CSR matrix from its three arrays, checked: `row_ptr` has `rows + 1` offsets from 0 to
    /// `nnz = values.len()` that never decrease, `col_idx` has `nnz` entries, each row's column
    /// indices strictly increase and are below `cols`, and every value is finite.
    ///
    /// # Errors
    /// [`IoError::InvalidCsr`] naming the rule broken, with the row and the entry's position.
    pub fn new(
        rows: usize,
        cols: usize,
        row_ptr: Vec<usize>,
        col_idx: Vec<usize>,
        values: Vec<f64>,
    ) -> Result<CsrMatrix, IoError> {
        let nnz = values.len();
        let offsets = offsets_for(rows, cols)?;
        if row_ptr.len() != offsets {
            return Err(invalid(format!(
                "row offsets have {} entries; a matrix of {rows} rows needs rows + 1 = \
                 {offsets}",
                row_ptr.len()
            )));
        }
        if col_idx.len() != nnz {
            return Err(invalid(format!(
                "{} column indices but {nnz} values; there must be one index per value",
                col_idx.len()
            )));
        }
        if row_ptr[0] != 0 || row_ptr[rows] != nnz {
            return Err(invalid(format!(
                "row offsets run from {} to {}; they must run from 0 to the number of values \
                 ({nnz})",
                row_ptr[0], row_ptr[rows]
            )));
        }
        if let Some(r) = row_ptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(invalid(format!(
                "row offsets decrease at row {r} ({} then {})",
                row_ptr[r],
                row_ptr[r + 1]
            )));
        }
        for r in 0..rows {
            let (start, end) = (row_ptr[r], row_ptr[r + 1]);
            for p in start..end {
                let c = col_idx[p];
                if c >= cols {
                    return Err(invalid(format!(
                        "row {r}, entry {} (position {p}): column index {c} is not below the \
                         number of columns {cols}",
                        p - start
                    )));
                }
                if p > start && c <= col_idx[p - 1] {
                    let what = if c == col_idx[p - 1] {
                        "repeats"
                    } else {
                        "is below"
                    };
                    return Err(invalid(format!(
                        "row {r}, entry {} (position {p}): column index {c} {what} the \
                         previous index {}; indices must strictly increase within a row (use \
                         CsrMatrix::from_unsorted to sort them and sum duplicates)",
                        p - start,
                        col_idx[p - 1]
                    )));
                }
                if !values[p].is_finite() {
                    return Err(invalid(format!(
                        "row {r}, entry {} (position {p}), column {c}: the value {} is not \
                         finite",
                        p - start,
                        values[p]
                    )));
                }
            }
        }
        Ok(CsrMatrix {
            rows,
            cols,
            row_ptr,
            col_idx,
            values,
        })
    }

    /// Like [`CsrMatrix::new`], but each row's entries may come in any order and repeat a
    /// column: they are sorted by column and duplicates summed (scipy's `sum_duplicates`).
    ///
    /// # Errors
    /// [`IoError::InvalidCsr`] as [`CsrMatrix::new`], except for the order of the indices.
    pub fn from_unsorted(
        rows: usize,
        cols: usize,
        row_ptr: Vec<usize>,
        col_idx: Vec<usize>,
        values: Vec<f64>,
    ) -> Result<CsrMatrix, IoError> {
        // Check offsets and lengths first (without the order rule) by validating an empty
        // structure of the same shape, then sort row by row.
        let offsets = offsets_for(rows, cols)?;
        if row_ptr.len() != offsets
            || col_idx.len() != values.len()
            || row_ptr.first() != Some(&0)
            || row_ptr.last() != Some(&values.len())
            || row_ptr.windows(2).any(|w| w[1] < w[0])
        {
            // `new` names the exact problem.
            return CsrMatrix::new(rows, cols, row_ptr, col_idx, values);
        }
        let mut out_ptr = Vec::with_capacity(offsets);
        let mut out_idx = Vec::with_capacity(col_idx.len());
        let mut out_val = Vec::with_capacity(values.len());
        out_ptr.push(0);
        let mut row: Vec<(usize, f64)> = Vec::new();
        for r in 0..rows {
            row.clear();
            row.extend((row_ptr[r]..row_ptr[r + 1]).map(|p| (col_idx[p], values[p])));
            row.sort_by_key(|&(c, _)| c);
            for &(c, v) in &row {
                match out_idx.last() {
                    Some(&last) if out_idx.len() > out_ptr[r] && last == c => {
                        if let Some(sum) = out_val.last_mut() {
                            *sum += v;
                        }
                    }
                    _ => {
                        out_idx.push(c);
                        out_val.push(v);
                    }
                }
            }
            out_ptr.push(out_idx.len());
        }
        CsrMatrix::new(rows, cols, out_ptr, out_idx, out_val)
    }

    /// The sparse form of a dense row-major `rows x cols` matrix (its zeros left out).
    ///
    /// # Errors
    /// [`IoError::InvalidCsr`] if `x` does not hold `rows * cols` values or one is not finite.
    pub fn from_dense(rows: usize, cols: usize, x: &[f64]) -> Result<CsrMatrix, IoError> {
        if rows.checked_mul(cols) != Some(x.len()) {
            return Err(invalid(format!(
                "{} values for a dense {rows} x {cols} matrix",
                x.len()
            )));
        }
        let mut row_ptr = Vec::with_capacity(rows + 1);
        let mut col_idx = Vec::new();
        let mut values = Vec::new();
        row_ptr.push(0);
        if cols > 0 {
            for row in x.chunks_exact(cols) {
                for (c, &v) in row.iter().enumerate() {
                    if v != 0.0 {
                        col_idx.push(c);
                        values.push(v);
                    }
                }
                row_ptr.push(values.len());
            }
        } else {
            row_ptr.resize(rows + 1, 0);
        }
        CsrMatrix::new(rows, cols, row_ptr, col_idx, values)
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// Stored entries over `rows * cols` (0 for an empty shape).
    pub fn density(&self) -> f64 {
        let cells = self.rows as f64 * self.cols as f64;
        if cells == 0.0 {
            0.0
        } else {
            self.nnz() as f64 / cells
        }
    }

    /// The `rows + 1` row offsets.
    pub fn row_ptr(&self) -> &[usize] {
        &self.row_ptr
    }

    /// The column index of each stored entry.
    pub fn col_idx(&self) -> &[usize] {
        &self.col_idx
    }

    /// The value of each stored entry.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Row `r`'s column indices and values, or `None` past the last row.
    pub fn row(&self, r: usize) -> Option<(&[usize], &[f64])> {
        let start = *self.row_ptr.get(r)?;
        let end = *self.row_ptr.get(r + 1)?;
        Some((&self.col_idx[start..end], &self.values[start..end]))
    }

    /// The dense row-major values (`rows * cols` of them), or `None` if their size overflows.
    /// Not checked against the memory budget: see [`CsrMatrix::to_dense_checked`].
    pub fn to_dense(&self) -> Option<Vec<f64>> {
        let mut x = vec![0.0; self.rows.checked_mul(self.cols)?];
        self.scatter_into(&mut x);
        Some(x)
    }

    /// The dense row-major values (`rows * cols` of them), allocated only after checking
    /// their size against the memory budget (see [`super::set_memory_limit`]).
    ///
    /// # Errors
    /// [`IoError::DenseTooLarge`] when the size overflows, exceeds the budget or cannot be
    /// allocated.
    pub fn to_dense_checked(&self) -> Result<Vec<f64>, IoError> {
        let mut x = alloc_f64(self.rows, self.cols, || IoError::DenseTooLarge {
            rows: self.rows,
            cols: self.cols,
        })?;
        x.resize(self.rows * self.cols, 0.0);
        self.scatter_into(&mut x);
        Ok(x)
    }

    /// Writes the entries into `x`, a zeroed dense row-major `rows x cols` buffer.
    fn scatter_into(&self, x: &mut [f64]) {
        for r in 0..self.rows {
            for p in self.row_ptr[r]..self.row_ptr[r + 1] {
                x[r * self.cols + self.col_idx[p]] = self.values[p];
            }
        }
    }

    /// The rows listed in `rows`, in that order (a row may be listed more than once).
    ///
    /// # Errors
    /// [`IoError::InvalidCsr`] naming the first index that is not below [`CsrMatrix::rows`],
    /// and its position in `rows`.
    pub fn select_rows(&self, rows: &[usize]) -> Result<CsrMatrix, IoError> {
        let mut row_ptr = Vec::with_capacity(rows.len().saturating_add(1));
        let mut col_idx = Vec::new();
        let mut values = Vec::new();
        row_ptr.push(0);
        for (i, &r) in rows.iter().enumerate() {
            let (c, v) = self.row(r).ok_or_else(|| {
                invalid(format!(
                    "row index {r} (position {i} of the selection) is not below the number of \
                     rows {}",
                    self.rows
                ))
            })?;
            col_idx.extend_from_slice(c);
            values.extend_from_slice(v);
            row_ptr.push(values.len());
        }
        Ok(CsrMatrix {
            rows: row_ptr.len() - 1,
            cols: self.cols,
            row_ptr,
            col_idx,
            values,
        })
    }
}

/// A sparse point set loaded from a file (libsvm): `n` points of `d` features as a CSR
/// matrix, plus optional labels.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseDataset {
    /// The points, one row each (`n x d`).
    pub x: CsrMatrix,
    /// The true labels (`n` of them), if the file has them.
    pub labels: Option<Vec<i64>>,
    /// The file the points came from.
    pub source: PathBuf,
}

impl SparseDataset {
    /// Number of points.
    pub fn n(&self) -> usize {
        self.x.rows()
    }

    /// Number of features.
    pub fn d(&self) -> usize {
        self.x.cols()
    }

    /// The dense view, checked against the memory budget first (see
    /// [`super::set_memory_limit`]).
    ///
    /// # Errors
    /// [`IoError::TooLarge`] when `n x d` values would not fit.
    pub fn to_dense(&self) -> Result<Dataset, IoError> {
        let (n, d) = (self.n(), self.d());
        let mut x = alloc_points(&self.source, n, d)?;
        x.resize(n * d, 0.0);
        self.x.scatter_into(&mut x);
        Ok(Dataset {
            n,
            d,
            x,
            labels: self.labels.clone(),
            source: self.source.clone(),
        })
    }
}
