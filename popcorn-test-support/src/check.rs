//! Tolerances and comparisons: values within a relative or absolute tolerance (NaN matching only
//! NaN, infinities exactly), and labels equal up to near-ties of their distances.

use popcorn_dsl::DType;

/// The relative tolerance used for a dtype in the example-program tests.
pub fn rtol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
    }
}

/// The largest finite magnitude of `v`, at least 1: the scale tolerances are relative to.
pub fn scale_of(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(1.0f64, |m, x| m.max(x.abs()))
}

/// Whether `got` matches `want` within `tol` (absolute); infinities must match exactly, NaN
/// matches only NaN.
pub fn same(got: f64, want: f64, tol: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= tol
}

/// Compares element by element, relative to the largest magnitude of `want` (at least 1);
/// the error names the first mismatches.
pub fn check_close(what: &str, got: &[f64], want: &[f64], rtol: f64) -> Result<(), String> {
    check_close_scaled(what, got, want, rtol * scale_of(want))
}

/// Compares element by element within the absolute tolerance `tol`.
pub fn check_close_scaled(what: &str, got: &[f64], want: &[f64], tol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| !same(**g, **w, tol))
        .take(5)
        .map(|(i, (g, w))| format!("[{i}] got {g:e}, expected {w:e} (diff {:e})", (g - w).abs()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: mismatches beyond {tol:e}: {}",
            bad.join("; ")
        ))
    }
}

/// Panics with the message of [`check_close`].
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64) {
    if let Err(e) = check_close(what, got, want, rtol) {
        panic!("{e}");
    }
}

/// Checks labels against a distance matrix `d` (`n x k`, row-major) whose exact argmin is
/// `want`: equal labels, or a label whose distance is within `tol` of the minimum (a near-tie
/// that rounding may break either way).
pub fn check_labels(
    what: &str,
    got: &[u32],
    want: &[u32],
    d: &[f64],
    k: usize,
    tol: f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} labels, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g == w {
            continue;
        }
        let (g, w) = (g as usize, w as usize);
        if g >= k {
            return Err(format!(
                "{what}: label {g} of point {i} is not below k = {k}"
            ));
        }
        let (dg, dw) = (d[i * k + g], d[i * k + w]);
        if !same(dg, dw, tol) {
            return Err(format!(
                "{what}: point {i} got label {g} (distance {dg:e}), expected {w} (distance {dw:e}); not a near-tie within {tol:e}"
            ));
        }
    }
    Ok(())
}

/// The exact argmin of each row of `d` (`n x k`), ties to the lowest index.
pub fn argmin_rows(d: &[f64], k: usize) -> Vec<u32> {
    d.chunks(k)
        .map(|row| {
            let mut best = 0;
            for c in 1..k {
                if row[c] < row[best] {
                    best = c;
                }
            }
            best as u32
        })
        .collect()
}
