//! Sparse points: the product of two CSR matrices written dense (`C = alpha * A * B^T`, a Gram
//! or cross kernel matrix), a CSR matrix written dense, and the row norms of a CSR matrix.

use rayon::prelude::*;

use super::csr::{CsrOwned, CsrRef};
use super::error::{check_matrix, check_vector, CpuError};
use super::matmul::par_rows_mut;
use super::real::{scale_in_place, Real};

/// `C = alpha * A * B^T` of CSR matrices `A` (`m x k`) and `B` (`n x k`), `C` dense `m x n`
/// with leading dimension `ldc` (not read).
///
/// `B` is first transposed (a counting sort, `O(nnz(B) + k)` memory); then, in parallel over
/// rows `i`, each entry `A[i, c]` meets the entries of column `c` of `B`, summed into row `i` of
/// `C` (Gustavson's row-by-row product with the dense row as accumulator): `2 nnz(A) nnz(B) / k`
/// flops for evenly spread entries, whatever the density of `C`. Each `C[i, j]` adds its
/// products in the order of row `i` of `A`, so where rows have sorted, unique columns (every
/// CSR matrix popcorn-io builds), `A * A^T` is exactly symmetric.
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed operand; [`CpuError::Shape`] for mismatched inner
/// dimensions or a short `C`.
pub fn spgemm_abt<T: Real>(
    a: CsrRef<'_, T>,
    b: CsrRef<'_, T>,
    alpha: T,
    c: &mut [T],
    ldc: usize,
) -> Result<(), CpuError> {
    a.validate_named("A")?;
    b.validate_named("B")?;
    if a.cols != b.cols {
        return Err(CpuError::Shape {
            operand: "B".into(),
            detail: format!(
                "A * B^T needs as many columns in B as in A: A is {}x{}, B is {}x{}",
                a.rows, a.cols, b.rows, b.cols
            ),
        });
    }
    let (m, n) = (a.rows, b.rows);
    check_matrix("C", c.len(), m, n, ldc)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let bt = CsrOwned::transpose_of(b);
    let bt = bt.view();
    par_rows_mut(c, m, n, ldc).enumerate().for_each(|(i, row)| {
        row.fill(T::zero());
        let (cols, vals) = a.row(i);
        for (&col, &v) in cols.iter().zip(vals) {
            let (js, ws) = bt.row(col as usize);
            for (&j, &w) in js.iter().zip(ws) {
                row[j as usize] += v * w;
            }
        }
        if alpha != T::one() {
            scale_in_place(row, alpha);
        }
    });
    Ok(())
}

/// Writes the CSR matrix `s` dense into `out` (`rows x cols` with leading dimension `ld`), or
/// its transpose (`cols x rows`) with `transpose`; entries `s` does not store are 0.
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed `s`; [`CpuError::Shape`] for a short `out`.
pub fn csr_densify<T: Real>(
    s: CsrRef<'_, T>,
    transpose: bool,
    out: &mut [T],
    ld: usize,
) -> Result<(), CpuError> {
    s.validate_named("S")?;
    let transposed;
    let s = if transpose {
        transposed = CsrOwned::transpose_of(s);
        transposed.view()
    } else {
        s
    };
    check_matrix("the dense result", out.len(), s.rows, s.cols, ld)?;
    if s.rows == 0 || s.cols == 0 {
        return Ok(());
    }
    par_rows_mut(out, s.rows, s.cols, ld)
        .enumerate()
        .for_each(|(i, row)| {
            row.fill(T::zero());
            let (cols, vals) = s.row(i);
            for (&c, &v) in cols.iter().zip(vals) {
                // Duplicates add up, as in every product.
                row[c as usize] += v;
            }
        });
    Ok(())
}

/// `out[i] = sum of the squares of row i's stored values` (duplicates of a column summed
/// first, so it is the squared norm of the row `s` means).
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed `s`; [`CpuError::Shape`] for a short `out`.
pub fn csr_row_norms<T: Real>(s: CsrRef<'_, T>, out: &mut [T]) -> Result<(), CpuError> {
    s.validate_named("S")?;
    check_vector("the row norms", out.len(), s.rows)?;
    out[..s.rows].par_iter_mut().enumerate().for_each(|(i, o)| {
        let (cols, vals) = s.row(i);
        let sorted = cols.windows(2).all(|w| w[0] < w[1]);
        *o = if sorted {
            vals.iter().fold(T::zero(), |acc, &v| acc + v * v)
        } else {
            let mut entries: Vec<(i32, T)> =
                cols.iter().copied().zip(vals.iter().copied()).collect();
            entries.sort_by_key(|e| e.0);
            let mut total = T::zero();
            let mut p = 0;
            while p < entries.len() {
                let mut v = entries[p].1;
                let mut q = p + 1;
                while q < entries.len() && entries[q].0 == entries[p].0 {
                    v += entries[q].1;
                    q += 1;
                }
                total += v * v;
                p = q;
            }
            total
        };
    });
    Ok(())
}
