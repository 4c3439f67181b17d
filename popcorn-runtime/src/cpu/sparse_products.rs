//! Sparse-dense products: CSR times dense (SpMM, both operand orders) and CSR times vector.

use rayon::prelude::*;

use super::csr::{CsrOwned, CsrRef};
use super::error::{check_matrix, check_vector, CpuError};
use super::matmul::{par_rows_mut, scale_matrix};
use super::real::{blend, scale_in_place, Real};

/// `sum over the entries (c, v) of a sparse row` of `v * dense[c]`, four interleaved
/// accumulators. `dense` must be longer than every column index (guaranteed by validation).
#[inline(always)]
fn sparse_dot<T: Real>(cols: &[i32], vals: &[T], dense: &[T]) -> T {
    let mut acc = [T::zero(); 4];
    let cc = cols.chunks_exact(4);
    let cv = vals.chunks_exact(4);
    let (tc, tv) = (cc.remainder(), cv.remainder());
    for (c, v) in cc.zip(cv) {
        for l in 0..4 {
            acc[l] += v[l] * dense[c[l] as usize];
        }
    }
    let mut t = T::zero();
    for (&c, &v) in tc.iter().zip(tv) {
        t += v * dense[c as usize];
    }
    (acc[0] + acc[2]) + (acc[1] + acc[3]) + t
}

/// Sparse-dense product `C = alpha * op(S) * op(D) + beta * C`.
///
/// Dimensions: `S` is the CSR matrix `s.rows x s.cols`; `op(S)` is `m x kk` with
/// `(m, kk) = (s.rows, s.cols)`, or `(s.cols, s.rows)` when `trans_s`. `op(D)` is
/// `kk x c_cols`: `D` is stored row-major `kk x c_cols` (leading dimension `ldd`), or
/// `c_cols x kk` when `trans_d`. `C` is `m x c_cols`, leading dimension `ldc`.
/// `beta == 0` means `C` is not read (it may hold NaN); `alpha == 0` or `kk == 0` means
/// `C = beta * C` without reading `D`. A transposed `S` is first rebuilt as a
/// transposed CSR (a counting sort, `O(nnz + kk)` memory). Parallel over rows of `C`.
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed `S`; [`CpuError::Shape`] naming `D` or `C`.
#[allow(clippy::too_many_arguments)]
pub fn spmm_sparse_dense<T: Real>(
    trans_s: bool,
    s: CsrRef<'_, T>,
    trans_d: bool,
    d: &[T],
    ldd: usize,
    alpha: T,
    beta: T,
    c: &mut [T],
    ldc: usize,
    c_cols: usize,
) -> Result<(), CpuError> {
    s.validate_named("S")?;
    let (m, kk) = if trans_s {
        (s.cols, s.rows)
    } else {
        (s.rows, s.cols)
    };
    let (d_rows, d_cols) = if trans_d { (c_cols, kk) } else { (kk, c_cols) };
    check_matrix("D", d.len(), d_rows, d_cols, ldd)?;
    check_matrix("C", c.len(), m, c_cols, ldc)?;
    if m == 0 || c_cols == 0 {
        return Ok(());
    }
    if alpha == T::zero() || kk == 0 {
        scale_matrix(c, m, c_cols, ldc, beta);
        return Ok(());
    }
    let transposed;
    let s = if trans_s {
        transposed = CsrOwned::transpose_of(s);
        transposed.view()
    } else {
        s
    };
    par_rows_mut(c, m, c_cols, ldc)
        .enumerate()
        .for_each(|(i, c_row)| {
            let (cols, vals) = s.row(i);
            if trans_d {
                // op(D)[p, j] = D[j, p]: C[i, j] is a sparse dot with row j of the stored D.
                for (j, cij) in c_row.iter_mut().enumerate() {
                    let d_row = &d[j * ldd..j * ldd + kk];
                    *cij = blend(alpha * sparse_dot(cols, vals, d_row), beta, *cij);
                }
            } else {
                scale_in_place(c_row, beta);
                for (&p, &v) in cols.iter().zip(vals) {
                    let p = p as usize;
                    let d_row = &d[p * ldd..p * ldd + c_cols];
                    let av = alpha * v;
                    for (cij, &dpj) in c_row.iter_mut().zip(d_row) {
                        *cij += av * dpj;
                    }
                }
            }
        });
    Ok(())
}

/// Dense-sparse product `C = alpha * op(D) * op(S) + beta * C`.
///
/// Dimensions: `S` is the CSR matrix `s.rows x s.cols`; `op(S)` is `kk x n` with
/// `(kk, n) = (s.rows, s.cols)`, or `(s.cols, s.rows)` when `trans_s`. `op(D)` is `m x kk`:
/// `D` is stored row-major `m x kk` (leading dimension `ldd`), or `kk x m` when `trans_d`.
/// `m` is therefore the number of rows of `op(D)` and of `C`. `C` is `m x n`, leading
/// dimension `ldc`. `beta == 0` means `C` is not read (it may hold NaN); `alpha == 0` or
/// `kk == 0` means `C = beta * C` without reading `D`.
///
/// The Kernel K-means case `E = K * V^T` (`D = K`, `S = V` with one row per cluster,
/// `trans_d = false`, `trans_s = true`) is the fast path: in parallel over rows `i` of `K`,
/// `E[i, c]` is a sparse dot of row `c` of `V` with the contiguous row `i` of `K`. With
/// `trans_s = false`, row `i` of `C` accumulates `op(D)[i, p] * S[p, :]` over `p`.
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed `S`; [`CpuError::Shape`] naming `D` or `C`.
#[allow(clippy::too_many_arguments)]
pub fn spmm_dense_sparse<T: Real>(
    trans_d: bool,
    d: &[T],
    ldd: usize,
    m: usize,
    trans_s: bool,
    s: CsrRef<'_, T>,
    alpha: T,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<(), CpuError> {
    s.validate_named("S")?;
    let (kk, n) = if trans_s {
        (s.cols, s.rows)
    } else {
        (s.rows, s.cols)
    };
    let (d_rows, d_cols) = if trans_d { (kk, m) } else { (m, kk) };
    check_matrix("D", d.len(), d_rows, d_cols, ldd)?;
    check_matrix("C", c.len(), m, n, ldc)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if alpha == T::zero() || kk == 0 {
        scale_matrix(c, m, n, ldc, beta);
        return Ok(());
    }
    // op(D)[i, p]
    let d_at = |i: usize, p: usize| {
        if trans_d {
            d[p * ldd + i]
        } else {
            d[i * ldd + p]
        }
    };
    par_rows_mut(c, m, n, ldc)
        .enumerate()
        .for_each(|(i, c_row)| {
            if trans_s {
                // op(S)[p, c] = S[c, p]: C[i, c] = sum over row c of S of op(D)[i, p] * v.
                if trans_d {
                    for (cluster, cic) in c_row.iter_mut().enumerate() {
                        let (cols, vals) = s.row(cluster);
                        let mut acc = T::zero();
                        for (&p, &v) in cols.iter().zip(vals) {
                            acc += v * d_at(i, p as usize);
                        }
                        *cic = blend(alpha * acc, beta, *cic);
                    }
                } else {
                    let d_row = &d[i * ldd..i * ldd + kk];
                    for (cluster, cic) in c_row.iter_mut().enumerate() {
                        let (cols, vals) = s.row(cluster);
                        *cic = blend(alpha * sparse_dot(cols, vals, d_row), beta, *cic);
                    }
                }
            } else {
                scale_in_place(c_row, beta);
                for p in 0..kk {
                    let a = alpha * d_at(i, p);
                    let (cols, vals) = s.row(p);
                    for (&j, &v) in cols.iter().zip(vals) {
                        c_row[j as usize] += a * v;
                    }
                }
            }
        });
    Ok(())
}

/// Sparse matrix-vector product `y = alpha * op(S) * x + beta * y`.
///
/// `op(S)` is `S` (`s.rows x s.cols`: `x` has `s.cols` elements, `y` has `s.rows`) or, when
/// `trans`, `S^T` (`x` has `s.rows`, `y` has `s.cols`; `S` is first rebuilt transposed).
/// Slices may be longer; the extra elements are ignored. `beta == 0` means `y` is not read.
///
/// # Errors
/// [`CpuError::InvalidCsr`] for a malformed `S`; [`CpuError::Shape`] naming `x` or `y`.
pub fn spmv<T: Real>(
    trans: bool,
    s: CsrRef<'_, T>,
    alpha: T,
    x: &[T],
    beta: T,
    y: &mut [T],
) -> Result<(), CpuError> {
    s.validate_named("S")?;
    let (x_len, y_len) = if trans {
        (s.rows, s.cols)
    } else {
        (s.cols, s.rows)
    };
    check_vector("x", x.len(), x_len)?;
    check_vector("y", y.len(), y_len)?;
    let (x, y) = (&x[..x_len], &mut y[..y_len]);
    if alpha == T::zero() {
        scale_in_place(y, beta);
        return Ok(());
    }
    let transposed;
    let s = if trans {
        transposed = CsrOwned::transpose_of(s);
        transposed.view()
    } else {
        s
    };
    y.par_iter_mut()
        .with_min_len(64)
        .enumerate()
        .for_each(|(i, yi)| {
            let (cols, vals) = s.row(i);
            *yi = blend(alpha * sparse_dot(cols, vals, x), beta, *yi);
        });
    Ok(())
}
