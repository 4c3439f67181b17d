//! Borrowed CSR (compressed sparse row) matrices, their validation and transposition.

use rayon::prelude::*;

use super::error::CpuError;
use super::real::Real;

/// A borrowed `rows x cols` sparse matrix in CSR form with `i32` indices (cuSPARSE's layout).
///
/// Row `r` holds the entries `row_ptr[r]..row_ptr[r + 1]` of `col_idx` (column of each entry)
/// and `values`. `row_ptr` has exactly `rows + 1` entries, starts at 0 and never decreases;
/// `col_idx` and `values` have at least `nnz = row_ptr[rows]` entries. Column indices need not
/// be sorted; duplicates add up.
#[derive(Clone, Copy, Debug)]
pub struct CsrRef<'a, T> {
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Row offsets, `rows + 1` entries.
    pub row_ptr: &'a [i32],
    /// Column index of each stored entry.
    pub col_idx: &'a [i32],
    /// Value of each stored entry.
    pub values: &'a [T],
}

impl<'a, T: Real> CsrRef<'a, T> {
    /// Number of stored entries, `row_ptr[rows]` (0 if `row_ptr` is malformed; call
    /// [`CsrRef::validate`] first).
    pub fn nnz(&self) -> usize {
        self.row_ptr
            .get(self.rows)
            .map_or(0, |&v| usize::try_from(v).unwrap_or(0))
    }

    /// Checks the structure: `rows` and `cols` fit `i32`; `row_ptr` has `rows + 1` entries, starts at 0 and is monotone;
    /// `col_idx` and `values` hold at least `nnz` entries; every column index is in `0..cols`.
    ///
    /// # Errors
    /// [`CpuError::InvalidCsr`] saying which rule is broken and where.
    pub fn validate(&self) -> Result<(), CpuError> {
        self.validate_named("S")
    }

    /// [`CsrRef::validate`] with the operand name used in error messages.
    pub(crate) fn validate_named(&self, operand: &str) -> Result<(), CpuError> {
        let err = |detail: String| CpuError::InvalidCsr {
            operand: operand.to_string(),
            detail,
        };
        let limit = i32::MAX as usize;
        if self.rows > limit || self.cols > limit {
            return Err(err(format!(
                "{}x{} is too large for i32 indices (limit {limit})",
                self.rows, self.cols
            )));
        }
        if self.row_ptr.len() != self.rows + 1 {
            return Err(err(format!(
                "row_ptr has {} entries but a matrix with {} rows needs exactly {}",
                self.row_ptr.len(),
                self.rows,
                self.rows + 1
            )));
        }
        if self.row_ptr[0] != 0 {
            return Err(err(format!(
                "row_ptr[0] is {}, it must be 0",
                self.row_ptr[0]
            )));
        }
        if let Some(r) = self.row_ptr.windows(2).position(|w| w[1] < w[0]) {
            return Err(err(format!(
                "row_ptr decreases at row {r}: row_ptr[{r}] = {} > row_ptr[{}] = {}",
                self.row_ptr[r],
                r + 1,
                self.row_ptr[r + 1]
            )));
        }
        let nnz = self.nnz();
        if self.col_idx.len() < nnz || self.values.len() < nnz {
            return Err(err(format!(
                "row_ptr says {nnz} entries but col_idx has {} and values has {}",
                self.col_idx.len(),
                self.values.len()
            )));
        }
        let cols = self.cols;
        let bad = self.col_idx[..nnz]
            .par_iter()
            .with_min_len(4096)
            .position_first(|&c| c < 0 || c as usize >= cols);
        if let Some(p) = bad {
            return Err(err(format!(
                "col_idx[{p}] = {} is outside 0..{cols}",
                self.col_idx[p]
            )));
        }
        Ok(())
    }

    /// Column indices and values of row `r`. Valid only after validation.
    #[inline(always)]
    pub(crate) fn row(&self, r: usize) -> (&'a [i32], &'a [T]) {
        let lo = self.row_ptr[r] as usize;
        let hi = self.row_ptr[r + 1] as usize;
        (&self.col_idx[lo..hi], &self.values[lo..hi])
    }
}

/// An owned CSR matrix, built by transposing a borrowed one.
pub(crate) struct CsrOwned<T> {
    rows: usize,
    cols: usize,
    row_ptr: Vec<i32>,
    col_idx: Vec<i32>,
    values: Vec<T>,
}

impl<T: Real> CsrOwned<T> {
    /// The transpose of a validated matrix, by a counting sort over columns. Within each row of
    /// the result, entries appear in increasing source-row order.
    pub(crate) fn transpose_of(s: CsrRef<'_, T>) -> Self {
        let nnz = s.nnz();
        let mut row_ptr = vec![0i32; s.cols + 1];
        for &c in &s.col_idx[..nnz] {
            row_ptr[c as usize + 1] += 1;
        }
        for c in 0..s.cols {
            row_ptr[c + 1] += row_ptr[c];
        }
        let mut cursor: Vec<i32> = row_ptr[..s.cols].to_vec();
        let mut col_idx = vec![0i32; nnz];
        let mut values = vec![T::zero(); nnz];
        for r in 0..s.rows {
            let (cols, vals) = s.row(r);
            for (&c, &v) in cols.iter().zip(vals) {
                let slot = &mut cursor[c as usize];
                col_idx[*slot as usize] = r as i32;
                values[*slot as usize] = v;
                *slot += 1;
            }
        }
        CsrOwned {
            rows: s.cols,
            cols: s.rows,
            row_ptr,
            col_idx,
            values,
        }
    }

    /// A borrowed view.
    pub(crate) fn view(&self) -> CsrRef<'_, T> {
        CsrRef {
            rows: self.rows,
            cols: self.cols,
            row_ptr: &self.row_ptr,
            col_idx: &self.col_idx,
            values: &self.values,
        }
    }
}
