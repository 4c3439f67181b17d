//! Dense matrix-matrix product (GEMM) through the `gemm` crate, on row-major operands.

use rayon::prelude::*;

use super::error::{check_matrix, CpuError};
use super::real::{scale_in_place, Real};

/// The `gemm` crate's parallelism for the current rayon pool.
pub(crate) fn gemm_parallelism() -> ::gemm::Parallelism {
    let threads = rayon::current_num_threads();
    if threads <= 1 {
        ::gemm::Parallelism::None
    } else {
        ::gemm::Parallelism::Rayon(threads)
    }
}

/// Mutable row views of the first `rows` rows of a row-major matrix: `rows` slices of exactly
/// `cols` elements, in parallel. The caller has checked the shape with `check_matrix`.
pub(crate) fn par_rows_mut<T: Real>(
    c: &mut [T],
    rows: usize,
    cols: usize,
    ld: usize,
) -> impl IndexedParallelIterator<Item = &mut [T]> {
    let spanned = if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    };
    // `max(1)`: an empty matrix may have ld == 0, and chunks of 0 are not allowed.
    c[..spanned]
        .par_chunks_mut(ld.max(1))
        .map(move |row| &mut row[..cols])
}

/// Multiplies a `rows x cols` row-major block of `c` by `beta` (`beta == 0` writes zeros without
/// reading, so NaN poison disappears).
pub(crate) fn scale_matrix<T: Real>(c: &mut [T], rows: usize, cols: usize, ld: usize, beta: T) {
    if beta == T::one() {
        return;
    }
    par_rows_mut(c, rows, cols, ld).for_each(|row| scale_in_place(row, beta));
}

/// General matrix product `C = alpha * op(A) * op(B) + beta * C` on row-major matrices.
///
/// Dimensions: `op(A)` is `m x k`, `op(B)` is `k x n`, `C` is `m x n` with leading dimension
/// `ldc`. When `trans_a` is false `A` is stored `m x k` (leading dimension `lda`), otherwise it
/// is stored `k x m` and read transposed; likewise `B` is stored `k x n`, or `n x k` when
/// `trans_b`. Every leading dimension must be at least the stored row width, and each slice must
/// span the stored matrix (extra trailing elements are ignored).
///
/// `beta == 0` means `C` is not read (it may hold NaN); `alpha == 0` or `k == 0` means `A` and
/// `B` are not read and `C = beta * C`. Runs on the current rayon pool.
///
/// # Errors
/// [`CpuError::Shape`] naming `A`, `B` or `C` when a slice or leading dimension does not fit.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Real>(
    trans_a: bool,
    trans_b: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: T,
    a: &[T],
    lda: usize,
    b: &[T],
    ldb: usize,
    beta: T,
    c: &mut [T],
    ldc: usize,
) -> Result<(), CpuError> {
    gemm_with(
        gemm_parallelism(),
        (trans_a, trans_b),
        (m, n, k),
        alpha,
        (a, lda),
        (b, ldb),
        beta,
        (c, ldc),
    )
}

/// [`gemm`] on one thread, for callers already running in parallel (a block of a contraction).
pub(crate) fn gemm_serial<T: Real>(
    (trans_a, trans_b): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: T,
    a: (&[T], usize),
    b: (&[T], usize),
    beta: T,
    c: (&mut [T], usize),
) -> Result<(), CpuError> {
    gemm_with(
        ::gemm::Parallelism::None,
        (trans_a, trans_b),
        (m, n, k),
        alpha,
        a,
        b,
        beta,
        c,
    )
}

/// [`gemm`] with the given parallelism.
#[allow(clippy::too_many_arguments)]
fn gemm_with<T: Real>(
    parallelism: ::gemm::Parallelism,
    (trans_a, trans_b): (bool, bool),
    (m, n, k): (usize, usize, usize),
    alpha: T,
    (a, lda): (&[T], usize),
    (b, ldb): (&[T], usize),
    beta: T,
    (c, ldc): (&mut [T], usize),
) -> Result<(), CpuError> {
    let (a_rows, a_cols) = if trans_a { (k, m) } else { (m, k) };
    let (b_rows, b_cols) = if trans_b { (n, k) } else { (k, n) };
    check_matrix("A", a.len(), a_rows, a_cols, lda)?;
    check_matrix("B", b.len(), b_rows, b_cols, ldb)?;
    check_matrix("C", c.len(), m, n, ldc)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 || alpha == T::zero() {
        scale_matrix(c, m, n, ldc, beta);
        return Ok(());
    }
    // Strides in elements, (row stride, column stride) of op(A) and op(B). `check_matrix`
    // guaranteed every leading dimension fits an isize.
    let (a_rs, a_cs) = if trans_a {
        (1, lda as isize)
    } else {
        (lda as isize, 1)
    };
    let (b_rs, b_cs) = if trans_b {
        (1, ldb as isize)
    } else {
        (ldb as isize, 1)
    };
    // SAFETY: `check_matrix` verified that `a`, `b` and `c` span every element the strides
    // address: op(A) element (i, p) lies at i*a_rs + p*a_cs <= (rows-1)*ld + cols - 1 < len,
    // likewise for B and C. `c` is borrowed mutably, so it aliases neither `a` nor `b`. `T` is
    // f32 or f64 (sealed `Real`), which the `gemm` crate supports, so it does not panic. Note the
    // crate's convention `dst = alpha*dst + beta*lhs*rhs`: our `beta` is its `alpha` and vice
    // versa; `read_dst = false` when `beta == 0` makes it ignore (and not read) `C`.
    unsafe {
        ::gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            beta != T::zero(),
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            beta,
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}
