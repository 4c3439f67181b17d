//! CSR validation, SpMM (both orders) and SpMV against dense naive loops.

use super::super::{spmm_dense_sparse, spmm_sparse_dense, spmv, CpuError, CsrRef, Real};
use super::reference::*;

fn csr_ref<'a, T: Real>(s: &'a RandomCsr, values: &'a [T]) -> CsrRef<'a, T> {
    CsrRef {
        rows: s.rows,
        cols: s.cols,
        row_ptr: &s.row_ptr,
        col_idx: &s.col_idx,
        values,
    }
}

/// C = alpha op(S) op(D) + beta C, checked against the dense product.
#[allow(clippy::too_many_arguments)]
pub fn check_sparse_dense<T: Real>(
    rng: &mut Rng,
    ts: bool,
    td: bool,
    s_rows: usize,
    s_cols: usize,
    c_cols: usize,
    density: usize,
    pad: usize,
    beta: f64,
) {
    let s = RandomCsr::new::<T>(rng, s_rows, s_cols, density);
    let sd = s.dense();
    let (m, kk) = if ts {
        (s_cols, s_rows)
    } else {
        (s_rows, s_cols)
    };
    let (dr, dc) = if td { (c_cols, kk) } else { (kk, c_cols) };
    let (ldd, ldc) = (dc + pad, c_cols + 2 * pad);
    let d = random_matrix::<T>(rng, dr, dc, ldd);
    let mut want = if beta == 0.0 {
        vec![f64::NAN; span(m, c_cols, ldc) + 2]
    } else {
        random_matrix::<T>(rng, m, c_cols, ldc)
    };
    let mut c: Vec<T> = to_t(&want);
    let vals: Vec<T> = to_t(&s.values);
    spmm_sparse_dense(
        ts,
        csr_ref(&s, &vals),
        td,
        &to_t::<T>(&d),
        ldd,
        T::from_f64(0.5),
        T::from_f64(beta),
        &mut c,
        ldc,
        c_cols,
    )
    .unwrap();
    naive_gemm(
        ts,
        td,
        m,
        c_cols,
        kk,
        0.5,
        &sd,
        s_cols.max(1),
        &d,
        ldd,
        beta,
        &mut want,
        ldc,
    );
    let what = format!("spmm_sparse_dense ts={ts} td={td} S={s_rows}x{s_cols} c_cols={c_cols}");
    assert_matrix(&c, &want, m, c_cols, ldc, tol::<T>(kk), &what);
}

/// C = alpha op(D) op(S) + beta C, checked against the dense product.
#[allow(clippy::too_many_arguments)]
pub fn check_dense_sparse<T: Real>(
    rng: &mut Rng,
    td: bool,
    ts: bool,
    m: usize,
    s_rows: usize,
    s_cols: usize,
    density: usize,
    pad: usize,
    beta: f64,
) {
    let s = RandomCsr::new::<T>(rng, s_rows, s_cols, density);
    let sd = s.dense();
    let (kk, n) = if ts {
        (s_cols, s_rows)
    } else {
        (s_rows, s_cols)
    };
    let (dr, dc) = if td { (kk, m) } else { (m, kk) };
    let (ldd, ldc) = (dc + 2 * pad, n + pad);
    let d = random_matrix::<T>(rng, dr, dc, ldd);
    let mut want = if beta == 0.0 {
        vec![f64::NAN; span(m, n, ldc) + 2]
    } else {
        random_matrix::<T>(rng, m, n, ldc)
    };
    let mut c: Vec<T> = to_t(&want);
    let vals: Vec<T> = to_t(&s.values);
    spmm_dense_sparse(
        td,
        &to_t::<T>(&d),
        ldd,
        m,
        ts,
        csr_ref(&s, &vals),
        T::from_f64(-1.25),
        T::from_f64(beta),
        &mut c,
        ldc,
    )
    .unwrap();
    naive_gemm(
        td,
        ts,
        m,
        n,
        kk,
        -1.25,
        &d,
        ldd,
        &sd,
        s_cols.max(1),
        beta,
        &mut want,
        ldc,
    );
    let what = format!("spmm_dense_sparse td={td} ts={ts} m={m} S={s_rows}x{s_cols}");
    assert_matrix(&c, &want, m, n, ldc, tol::<T>(kk), &what);
}

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (3, 17, 1),
    (17, 3, 33),
    (33, 100, 5),
    (100, 33, 17),
    (257, 3, 3),
];

fn spmm_all<T: Real>() {
    let mut rng = Rng::new(11);
    for &(a, b, c) in SHAPES {
        for ts in [false, true] {
            for td in [false, true] {
                for (density, pad, beta) in [(30, 0, 0.0), (5, 3, 0.5), (100, 1, 1.0)] {
                    check_sparse_dense::<T>(&mut rng, ts, td, a, b, c, density, pad, beta);
                    check_dense_sparse::<T>(&mut rng, td, ts, c, a, b, density, pad, beta);
                }
            }
        }
    }
}

#[test]
fn spmm_f64_all_transposes() {
    spmm_all::<f64>();
}

#[test]
fn spmm_f32_all_transposes() {
    spmm_all::<f32>();
}

#[test]
fn spmm_kernel_kmeans_case_hand_computed() {
    // K (3 x 3), labels [0, 1, 0] with k = 2 (one empty? no: both used), V = [[.5 0 .5], [0 1 0]].
    let k = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    let v = CsrRef {
        rows: 2,
        cols: 3,
        row_ptr: &[0, 2, 3],
        col_idx: &[0, 2, 1],
        values: &[0.5, 0.5, 1.0],
    };
    let mut e = [f64::NAN; 6];
    // E = K V^T: E[i, c] = mean of K[i, members of c].
    spmm_dense_sparse(false, &k, 3, 3, true, v, 1.0, 0.0, &mut e, 2).unwrap();
    assert_eq!(e, [2.0, 2.0, 5.0, 5.0, 8.0, 8.0]);
}

#[test]
fn spmv_both_orientations() {
    let mut rng = Rng::new(12);
    for (r, c) in [(1, 1), (3, 17), (17, 3), (100, 257), (257, 1)] {
        for trans in [false, true] {
            for beta in [0.0, 2.0] {
                let s = RandomCsr::new::<f64>(&mut rng, r, c, 20);
                let sd = s.dense();
                let (xl, yl) = if trans { (r, c) } else { (c, r) };
                let x: Vec<f64> = (0..xl).map(|_| rng.uniform()).collect();
                let y0: Vec<f64> = if beta == 0.0 {
                    vec![f64::NAN; yl]
                } else {
                    (0..yl).map(|_| rng.uniform()).collect()
                };
                let mut y = y0.clone();
                spmv(trans, csr_ref(&s, &s.values), 0.5, &x, beta, &mut y).unwrap();
                let want: Vec<f64> = (0..yl)
                    .map(|o| {
                        let dot: f64 = (0..xl)
                            .map(|p| if trans { sd[p * c + o] } else { sd[o * c + p] } * x[p])
                            .sum();
                        0.5 * dot + if beta == 0.0 { 0.0 } else { beta * y0[o] }
                    })
                    .collect();
                assert_vec(&y, &want, 1e-12, &format!("spmv {r}x{c} trans={trans}"));
                // f32 at a stated tolerance.
                let vals32: Vec<f32> = to_t(&s.values);
                let x32: Vec<f32> = to_t(&x);
                let mut y32: Vec<f32> = to_t(&y0);
                spmv(
                    trans,
                    csr_ref(&s, &vals32),
                    0.5,
                    &x32,
                    beta as f32,
                    &mut y32,
                )
                .unwrap();
                assert_vec(&y32, &want, 1e-5 * (xl as f64 + 1.0), "spmv f32");
            }
        }
    }
}

#[test]
fn csr_validation_rejects_malformed_matrices() {
    let ok = CsrRef {
        rows: 2,
        cols: 3,
        row_ptr: &[0, 1, 3],
        col_idx: &[2, 0, 1],
        values: &[1.0f64, 2.0, 3.0],
    };
    ok.validate().unwrap();
    let msg = |s: CsrRef<'_, f64>| s.validate().unwrap_err().to_string();
    assert!(msg(CsrRef {
        row_ptr: &[0, 1],
        ..ok
    })
    .contains("exactly 3"));
    assert!(msg(CsrRef {
        row_ptr: &[1, 1, 3],
        ..ok
    })
    .contains("must be 0"));
    assert!(msg(CsrRef {
        row_ptr: &[0, 2, 1],
        ..ok
    })
    .contains("decreases at row 1"));
    assert!(msg(CsrRef {
        col_idx: &[2, 3, 1],
        ..ok
    })
    .contains("col_idx[1] = 3"));
    assert!(msg(CsrRef {
        col_idx: &[2, 0, -1],
        ..ok
    })
    .contains("col_idx[2] = -1"));
    assert!(msg(CsrRef {
        values: &[1.0],
        ..ok
    })
    .contains("values has 1"));
    // Products validate too, before writing.
    let mut c = [7.0f64; 6];
    let bad = CsrRef {
        col_idx: &[2, 3, 1],
        ..ok
    };
    let err =
        spmm_sparse_dense(false, bad, false, &[0.0; 9], 3, 1.0, 0.0, &mut c, 3, 3).unwrap_err();
    assert!(matches!(err, CpuError::InvalidCsr { .. }), "{err}");
    assert_eq!(c, [7.0; 6]);
    let err =
        spmm_sparse_dense(false, ok, false, &[0.0; 8], 3, 1.0, 0.0, &mut c, 3, 3).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "D"),
        "{err}"
    );
    let err =
        spmm_dense_sparse(false, &[0.0; 4], 2, 2, false, ok, 1.0, 0.0, &mut c, 2).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "C"),
        "{err}"
    );
}

#[test]
fn empty_inner_dimension_scales_c_without_reading_d() {
    let s = CsrRef::<f64> {
        rows: 0,
        cols: 3,
        row_ptr: &[0],
        col_idx: &[],
        values: &[],
    };
    // op(S) = S^T is 3 x 0; op(D) = D^T is 0 x 2 with D stored 2 x 0 (any ld, empty slice).
    let mut c = [f64::NAN; 6];
    spmm_sparse_dense(true, s, true, &[], 5, 1.0, 0.0, &mut c, 2, 2).unwrap();
    assert_eq!(c, [0.0; 6]);
    // op(D) is 2 x 0, op(S) = S is 0 x 3.
    let mut c = [1.0f64; 6];
    spmm_dense_sparse(false, &[], 7, 2, false, s, 1.0, 3.0, &mut c, 3).unwrap();
    assert_eq!(c, [3.0; 6]);
    let mut y = [f64::NAN; 3];
    spmv(true, s, 1.0, &[], 0.0, &mut y).unwrap();
    assert_eq!(y, [0.0; 3]);
}
