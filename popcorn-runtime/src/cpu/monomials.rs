//! `monomials(X, a, b, c)`: scaled products of two columns of `[X, 1]`, row by row.

use super::error::CpuError;
use super::real::Real;
use rayon::prelude::*;

/// `out[i, j] = c[j] Xe[i, a[j]] Xe[i, b[j]]` for the `n x d` row-major `x` (leading
/// dimension `ldx`) with `Xe = [x, 1]` (column index `d` is the ones), `out` `n x f` with
/// `f = a.len()`, rows in parallel.
///
/// # Errors
/// [`CpuError::Shape`] where a slice does not fit, `a`, `b` and `c` differ in length, or a
/// column index is beyond `d`.
#[allow(clippy::too_many_arguments)]
pub fn monomials<T: Real>(
    n: usize,
    d: usize,
    x: &[T],
    ldx: usize,
    a: &[u32],
    b: &[u32],
    c: &[T],
    out: &mut [T],
) -> Result<(), CpuError> {
    let f = a.len();
    let shape = |operand: &str, detail: String| CpuError::Shape {
        operand: operand.into(),
        detail,
    };
    if b.len() != f || c.len() < f {
        return Err(shape(
            "b, c",
            format!(
                "{f} first columns, {} second, {} coefficients",
                b.len(),
                c.len()
            ),
        ));
    }
    if let Some(&col) = a.iter().chain(b).find(|&&col| col as usize > d) {
        return Err(shape(
            "a, b",
            format!("column {col} of a matrix of {d} columns (and the ones at {d})"),
        ));
    }
    if n > 0 && (ldx < d || x.len() < (n - 1) * ldx + d) {
        return Err(shape(
            "X",
            format!("{n} x {d} with leading dimension {ldx}"),
        ));
    }
    if out.len() < n * f {
        return Err(shape("out", format!("{n} x {f} needs {} values", n * f)));
    }
    if f == 0 {
        return Ok(());
    }
    out[..n * f]
        .par_chunks_mut(f)
        .enumerate()
        .for_each(|(i, row)| {
            let xi = &x[i * ldx..i * ldx + d];
            let pick = |col: u32| xi.get(col as usize).copied().unwrap_or(T::from_f64(1.0));
            for (j, o) in row.iter_mut().enumerate() {
                *o = c[j] * pick(a[j]) * pick(b[j]);
            }
        });
    Ok(())
}
