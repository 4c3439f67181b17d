//! Symmetric rank-k update (SYRK): `C = alpha * op(A) op(A)^T + beta * C`, full and exactly
//! symmetric output at about half the cost of a GEMM.

use rayon::prelude::*;

use super::error::{check_matrix, CpuError};
use super::matmul::gemm;
use super::real::Real;

/// Rows per panel. Each panel computes its upper trapezoid with one GEMM; the diagonal block of
/// each panel is computed in full, so smaller panels waste fewer flops but make smaller GEMMs.
const PANEL: usize = 256;
/// Rows handled together when mirroring a panel into the lower triangle.
const MIRROR_ROWS: usize = 16;

/// Symmetric rank-k update `C = alpha * op(A) * op(A)^T + beta * C` on row-major matrices.
///
/// `op(A)` is `n x k`: `A` is stored `n x k` (leading dimension `lda`) when `trans` is false,
/// `k x n` otherwise. `C` is `n x n` with leading dimension `ldc`. The FULL matrix is written and
/// it is exactly symmetric: only blocks on and above the diagonal are computed (with GEMM, about
/// half of GEMM's flops) and the strictly lower triangle is a copy of the upper one.
///
/// `beta == 0` means `C` is not read (it may hold NaN). Otherwise `C` is taken to be symmetric:
/// the result is built from its upper triangle and its strictly lower triangle is overwritten.
///
/// # Errors
/// [`CpuError::Shape`] naming `A` or `C` when a slice or leading dimension does not fit.
#[allow(clippy::too_many_arguments)]
pub fn syrk<T: Real>(
    trans: bool,
    n: usize,
    k: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<(), CpuError> {
    let (a_rows, a_cols) = if trans { (k, n) } else { (n, k) };
    check_matrix("A", a.len(), a_rows, a_cols, lda)?;
    let spanned = check_matrix("C", c.len(), n, n, ldc)?;
    if n == 0 {
        return Ok(());
    }
    let c = &mut c[..spanned];
    let mut i0 = 0;
    while i0 < n {
        let i1 = (i0 + PANEL).min(n);
        // C[i0..i1, i0..n]: the panel's upper trapezoid.
        panel_gemm(
            trans,
            n,
            k,
            alpha,
            a,
            lda,
            beta,
            &mut c[i0 * ldc + i0..],
            ldc,
            i0,
            i1,
        )?;
        mirror_panel(c, n, ldc, i0, i1);
        i0 = i1;
    }
    Ok(())
}

/// Rows `rows` of `C = alpha * op(A) * op(A)^T` (all `n` columns) into `c`, a
/// `rows.len() x n` row-major block with leading dimension `ldc`, every entry bit for bit as
/// [`syrk`] (with `beta == 0` and `ldc == n`) computes it: a rank's block of rows of a
/// partitioned plan.
///
/// [`syrk`] computes each entry on or above the diagonal in the GEMM of its row's panel and
/// mirrors it below, and a GEMM's summation order depends on its shape, so this runs the same
/// panel GEMMs, of the same shapes and strides, for every panel that starts before the block
/// ends (into a scratch panel), and copies out the block's entries: its rows' upper parts from
/// their panels, their lower parts from the earlier panels' columns. The flops are those of the
/// panels up to the block's last row, not of the block alone; the memory is one panel.
///
/// # Errors
/// [`CpuError::Shape`] naming `A` or `C` when a slice or leading dimension does not fit.
#[allow(clippy::too_many_arguments)]
pub fn syrk_rows<T: Real>(
    trans: bool,
    n: usize,
    k: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    rows: std::ops::Range<usize>,
    c: &mut [T],
    ldc: usize,
) -> Result<(), CpuError> {
    let (a_rows, a_cols) = if trans { (k, n) } else { (n, k) };
    check_matrix("A", a.len(), a_rows, a_cols, lda)?;
    if rows.start > rows.end || rows.end > n {
        return Err(CpuError::Shape {
            operand: "C".into(),
            detail: format!("rows [{}, {}) of a SYRK of order {n}", rows.start, rows.end),
        });
    }
    check_matrix("C", c.len(), rows.len(), n, ldc)?;
    if rows.is_empty() {
        return Ok(());
    }
    // One panel's rows of C, laid out as in the whole product (leading dimension n).
    let mut scratch = vec![T::zero(); PANEL.min(n) * n];
    let mut i0 = 0;
    while i0 < rows.end {
        let i1 = (i0 + PANEL).min(n);
        let panel = &mut scratch[..(i1 - i0) * n];
        panel_gemm(
            trans,
            n,
            k,
            alpha,
            a,
            lda,
            T::zero(),
            &mut panel[i0..],
            n,
            i0,
            i1,
        )?;
        // C[i, j] with i0 <= j, i or j in the panel, is the panel's (min, max) entry.
        for i in rows.clone() {
            let out = &mut c[(i - rows.start) * ldc..(i - rows.start) * ldc + n];
            if (i0..i1).contains(&i) {
                // The row's upper part, and the diagonal block's lower part mirrored.
                out[i..n].copy_from_slice(&panel[(i - i0) * n + i..(i - i0) * n + n]);
                for (q, o) in out.iter_mut().enumerate().take(i).skip(i0) {
                    *o = panel[(q - i0) * n + i];
                }
            } else if i >= i1 {
                // Below the panel: the mirror of the panel's column i.
                for (q, o) in out.iter_mut().enumerate().take(i1).skip(i0) {
                    *o = panel[(q - i0) * n + i];
                }
            }
        }
        i0 = i1;
    }
    Ok(())
}

/// The GEMM of panel rows `i0..i1`: `c_panel` starts at the panel's entry `(i0, i0)` of C.
#[allow(clippy::too_many_arguments)]
fn panel_gemm<T: Real>(
    trans: bool,
    n: usize,
    k: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    beta: T,
    c_panel: &mut [T],
    ldc: usize,
    i0: usize,
    i1: usize,
) -> Result<(), CpuError> {
    if k == 0 {
        // No A elements exist; only C is scaled.
        return gemm(
            false,
            false,
            i1 - i0,
            n - i0,
            0,
            alpha,
            &[],
            0,
            &[],
            0,
            beta,
            c_panel,
            ldc,
        );
    }
    if trans {
        // op(A)[i, p] = A[p*lda + i]: the panel rows are the stored columns i0.., and
        // op(A)[i0..n, :]^T is the stored k x (n - i0) block starting at column i0.
        let a_cols = &a[i0..];
        gemm(
            true,
            false,
            i1 - i0,
            n - i0,
            k,
            alpha,
            a_cols,
            lda,
            a_cols,
            lda,
            beta,
            c_panel,
            ldc,
        )
    } else {
        let a_rows = &a[i0 * lda..];
        gemm(
            false,
            true,
            i1 - i0,
            n - i0,
            k,
            alpha,
            a_rows,
            lda,
            a_rows,
            lda,
            beta,
            c_panel,
            ldc,
        )
    }
}

/// Copies the upper part of panel rows `i0..i1` into the lower triangle: the diagonal block's
/// strictly lower triangle, then `C[r, i0..i1]` for every row `r >= i1`.
fn mirror_panel<T: Real>(c: &mut [T], n: usize, ldc: usize, i0: usize, i1: usize) {
    for r in i0 + 1..i1 {
        for q in i0..r {
            c[r * ldc + q] = c[q * ldc + r];
        }
    }
    if i1 >= n {
        return;
    }
    let (head, tail) = c.split_at_mut(i1 * ldc);
    let head: &[T] = head;
    tail.par_chunks_mut(MIRROR_ROWS * ldc)
        .enumerate()
        .for_each(|(block, rows)| {
            let r_start = i1 + block * MIRROR_ROWS;
            let nrows = rows.len().div_ceil(ldc);
            for q in i0..i1 {
                let src = &head[q * ldc + r_start..q * ldc + r_start + nrows];
                for (t, &v) in src.iter().enumerate() {
                    rows[t * ldc + q] = v;
                }
            }
        });
}
