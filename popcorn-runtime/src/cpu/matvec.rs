//! Dense matrix-vector product (GEMV) and diagonal extraction.

use rayon::prelude::*;

use super::error::{check_matrix, check_vector, CpuError};
use super::real::{blend, dot, scale_in_place, Real};

/// Rows per block of the transposed product; fixed (not derived from the thread count) so the
/// summation order, and hence the result, is the same on every machine.
const TRANS_ROW_BLOCK: usize = 2048;
/// Columns per task of the transposed product.
const TRANS_COL_CHUNK: usize = 256;

/// Matrix-vector product `y = alpha * op(A) * x + beta * y` with `A` a row-major `m x n` matrix
/// (leading dimension `lda`).
///
/// When `trans` is false, `op(A) = A`: `x` has `n` elements and `y` has `m`. When `trans` is true,
/// `op(A) = A^T`: `x` has `m` elements and `y` has `n`. Slices may be longer; the extra elements
/// are ignored. `beta == 0` means `y` is not read (it may hold NaN). Parallel over rows of `A`
/// (non-transposed) or over column chunks and fixed row blocks (transposed).
///
/// # Errors
/// [`CpuError::Shape`] naming `A`, `x` or `y` when a slice or leading dimension does not fit.
#[allow(clippy::too_many_arguments)]
pub fn gemv<T: Real>(
    trans: bool,
    m: usize,
    n: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    x: &[T],
    beta: T,
    y: &mut [T],
) -> Result<(), CpuError> {
    check_matrix("A", a.len(), m, n, lda)?;
    let (x_len, y_len) = if trans { (m, n) } else { (n, m) };
    check_vector("x", x.len(), x_len)?;
    check_vector("y", y.len(), y_len)?;
    let (x, y) = (&x[..x_len], &mut y[..y_len]);
    if y_len == 0 {
        return Ok(());
    }
    if x_len == 0 || alpha == T::zero() {
        scale_in_place(y, beta);
        return Ok(());
    }
    if trans {
        gemv_trans(m, n, alpha, a, lda, x, beta, y);
    } else {
        y.par_iter_mut()
            .with_min_len(16)
            .enumerate()
            .for_each(|(i, yi)| {
                let row = &a[i * lda..i * lda + n];
                *yi = blend(alpha * dot(row, x), beta, *yi);
            });
    }
    Ok(())
}

/// `y = alpha * A^T x + beta * y`: per fixed row block a partial `A[block]^T x[block]` (itself
/// parallel over column chunks), then the partials summed in block order.
#[allow(clippy::too_many_arguments)]
fn gemv_trans<T: Real>(
    m: usize,
    n: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    x: &[T],
    beta: T,
    y: &mut [T],
) {
    let blocks = m.div_ceil(TRANS_ROW_BLOCK);
    let mut partials = vec![T::zero(); blocks * n];
    partials
        .par_chunks_mut(n)
        .enumerate()
        .for_each(|(block, partial)| {
            let r0 = block * TRANS_ROW_BLOCK;
            let r1 = (r0 + TRANS_ROW_BLOCK).min(m);
            partial
                .par_chunks_mut(TRANS_COL_CHUNK)
                .enumerate()
                .for_each(|(chunk, acc)| {
                    let j0 = chunk * TRANS_COL_CHUNK;
                    for (i, &xi) in x.iter().enumerate().take(r1).skip(r0) {
                        let seg = &a[i * lda + j0..i * lda + j0 + acc.len()];
                        for (s, &v) in acc.iter_mut().zip(seg) {
                            *s += v * xi;
                        }
                    }
                });
        });
    y.par_chunks_mut(TRANS_COL_CHUNK)
        .enumerate()
        .for_each(|(chunk, ys)| {
            let j0 = chunk * TRANS_COL_CHUNK;
            for (t, yj) in ys.iter_mut().enumerate() {
                let mut s = T::zero();
                for block in 0..blocks {
                    s += partials[block * n + j0 + t];
                }
                *yj = blend(alpha * s, beta, *yj);
            }
        });
}

/// Copies the diagonal of the row-major `n x n` matrix `A` (leading dimension `lda`) into
/// `out[..n]`; with `offset`, `A` is `n` rows of a larger square matrix starting at its row
/// `offset`, and `out[i] = A[i, offset + i]`.
///
/// # Errors
/// [`CpuError::Shape`] naming `A` or `out` when a slice or leading dimension does not fit.
pub fn diag<T: Real>(
    n: usize,
    offset: usize,
    a: &[T],
    lda: usize,
    out: &mut [T],
) -> Result<(), CpuError> {
    check_matrix("A", a.len(), n, n + offset, lda)?;
    check_vector("out", out.len(), n)?;
    for (i, o) in out[..n].iter_mut().enumerate() {
        *o = a[i * lda + offset + i];
    }
    Ok(())
}

/// `out (rows x cols) = [a | 0]`: the `rows x a_cols` matrix `a` (leading dimension `a_cols`)
/// with zero columns appended up to `cols`.
pub fn pad_cols<T: Real>(
    rows: usize,
    a_cols: usize,
    a: &[T],
    cols: usize,
    out: &mut [T],
) -> Result<(), CpuError> {
    check_matrix("A", a.len(), rows, a_cols, a_cols)?;
    check_matrix("out", out.len(), rows, cols, cols)?;
    if cols < a_cols {
        return Err(CpuError::Shape {
            operand: "out".into(),
            detail: format!("padding a matrix of {a_cols} columns to {cols}"),
        });
    }
    for i in 0..rows {
        let row = &mut out[i * cols..(i + 1) * cols];
        row[..a_cols].copy_from_slice(&a[i * a_cols..(i + 1) * a_cols]);
        row[a_cols..].fill(T::from_f64(0.0));
    }
    Ok(())
}
