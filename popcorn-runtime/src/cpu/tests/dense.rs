//! GEMM, SYRK, GEMV and diag against naive f64 loops.

use super::super::{diag, gemm, gemv, syrk, syrk_rows, CpuError, Real};
use super::reference::*;

const SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 3, 17),
    (3, 1, 5),
    (17, 33, 3),
    (33, 17, 100),
    (100, 3, 257),
    (3, 257, 33),
    (64, 64, 64),
    (1, 100, 1),
    (257, 17, 1),
];

#[allow(clippy::too_many_arguments)]
fn check_gemm<T: Real>(
    rng: &mut Rng,
    ta: bool,
    tb: bool,
    (m, n, k): (usize, usize, usize),
    pad: usize,
    alpha: f64,
    beta: f64,
) {
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    let (lda, ldb, ldc) = (ac + pad, bc + 2 * pad, n + pad);
    let a = random_matrix::<T>(rng, ar, ac, lda);
    let b = random_matrix::<T>(rng, br, bc, ldb);
    let mut c_ref = if beta == 0.0 {
        vec![f64::NAN; span(m, n, ldc) + 2]
    } else {
        random_matrix::<T>(rng, m, n, ldc)
    };
    let mut c: Vec<T> = to_t(&c_ref);
    gemm(
        ta,
        tb,
        m,
        n,
        k,
        T::from_f64(alpha),
        &to_t::<T>(&a),
        lda,
        &to_t::<T>(&b),
        ldb,
        T::from_f64(beta),
        &mut c,
        ldc,
    )
    .unwrap();
    naive_gemm(
        ta, tb, m, n, k, alpha, &a, lda, &b, ldb, beta, &mut c_ref, ldc,
    );
    let what =
        format!("gemm ta={ta} tb={tb} m={m} n={n} k={k} pad={pad} alpha={alpha} beta={beta}");
    assert_matrix(&c, &c_ref, m, n, ldc, tol::<T>(k), &what);
}

fn gemm_all<T: Real>() {
    let mut rng = Rng::new(1);
    for &shape in SHAPES {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for pad in [0, 3] {
                check_gemm::<T>(&mut rng, ta, tb, shape, pad, 1.0, 0.0);
                check_gemm::<T>(&mut rng, ta, tb, shape, pad, -0.75, 0.5);
            }
        }
    }
}

#[test]
fn gemm_f64_all_transposes_and_shapes() {
    gemm_all::<f64>();
}

#[test]
fn gemm_f32_all_transposes_and_shapes() {
    gemm_all::<f32>();
}

#[test]
fn gemm_k_zero_and_alpha_zero_scale_c_without_reading_a_b() {
    // k = 0: C = beta * C.
    let mut c = vec![1.0f64, 2.0, 3.0, 4.0];
    gemm(false, false, 2, 2, 0, 1.0, &[], 0, &[], 0, 0.5, &mut c, 2).unwrap();
    assert_eq!(c, vec![0.5, 1.0, 1.5, 2.0]);
    // alpha = 0 with NaN in A: C = beta * C, A never read; beta = 0 clears NaN poison.
    let a = vec![f64::NAN; 4];
    let mut c = vec![f64::NAN; 4];
    gemm(false, false, 2, 2, 2, 0.0, &a, 2, &a, 2, 0.0, &mut c, 2).unwrap();
    assert_eq!(c, vec![0.0; 4]);
    // Empty output: nothing happens, even with empty slices.
    gemm::<f32>(
        true,
        true,
        0,
        5,
        3,
        1.0,
        &[],
        0,
        &[0.0; 15],
        3,
        0.0,
        &mut [],
        5,
    )
    .unwrap();
    // ... but B must still be valid.
    gemm::<f32>(
        true,
        true,
        0,
        5,
        3,
        1.0,
        &[],
        0,
        &[0.0; 14],
        3,
        0.0,
        &mut [],
        5,
    )
    .unwrap_err();
}

#[test]
fn gemm_hand_computed() {
    // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
    let a = [1.0f64, 2.0, 3.0, 4.0];
    let b = [5.0f64, 6.0, 7.0, 8.0];
    let mut c = [f64::NAN; 4];
    gemm(false, false, 2, 2, 2, 1.0, &a, 2, &b, 2, 0.0, &mut c, 2).unwrap();
    assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    // A^T * B = [1 3; 2 4] * B = [26 30; 38 44]
    gemm(true, false, 2, 2, 2, 1.0, &a, 2, &b, 2, 0.0, &mut c, 2).unwrap();
    assert_eq!(c, [26.0, 30.0, 38.0, 44.0]);
    // 2 * A * B^T + 1 * C: A*B^T = [17 23; 39 53]
    let mut c = [1.0f64, 1.0, 1.0, 1.0];
    gemm(false, true, 2, 2, 2, 2.0, &a, 2, &b, 2, 1.0, &mut c, 2).unwrap();
    assert_eq!(c, [35.0, 47.0, 79.0, 107.0]);
}

#[test]
fn gemm_shape_errors_name_the_operand() {
    let a = [0.0f64; 6];
    let mut c = [0.0f64; 4];
    let err = gemm(
        false,
        false,
        2,
        2,
        3,
        1.0,
        &a[..5],
        3,
        &a,
        2,
        0.0,
        &mut c,
        2,
    )
    .unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "A"),
        "{err}"
    );
    let err = gemm(
        false,
        false,
        2,
        2,
        3,
        1.0,
        &a,
        3,
        &a[..5],
        2,
        0.0,
        &mut c,
        2,
    )
    .unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "B"),
        "{err}"
    );
    let err = gemm(false, false, 2, 2, 3, 1.0, &a, 3, &a, 2, 0.0, &mut c, 1).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "C"),
        "{err}"
    );
    assert!(err.to_string().contains("leading dimension 1"), "{err}");
    let err = gemm(
        false,
        false,
        2,
        2,
        3,
        1.0,
        &a,
        3,
        &a,
        2,
        0.0,
        &mut c[..3],
        2,
    )
    .unwrap_err();
    assert!(err.to_string().contains("needs at least 4"), "{err}");
}

fn check_syrk<T: Real>(rng: &mut Rng, trans: bool, n: usize, k: usize, pad: usize, beta: f64) {
    let (ar, ac) = if trans { (k, n) } else { (n, k) };
    let lda = ac + pad;
    let ldc = n + pad;
    let a = random_matrix::<T>(rng, ar, ac, lda);
    // A symmetric C for beta != 0 (the lower triangle of the input is ignored anyway).
    let mut c0 = vec![f64::NAN; span(n, n, ldc) + 2];
    if beta != 0.0 {
        for i in 0..n {
            for j in i..n {
                let v = T::from_f64(rng.uniform()).to_f64();
                c0[i * ldc + j] = v;
                c0[j * ldc + i] = v;
            }
        }
    }
    let at_: Vec<T> = to_t(&a);
    let alpha = T::from_f64(1.5);
    let mut c: Vec<T> = to_t(&c0);
    syrk(
        trans,
        n,
        k,
        alpha,
        &at_,
        lda,
        T::from_f64(beta),
        &mut c,
        ldc,
    )
    .unwrap();
    // Reference: naive op(A) op(A)^T.
    let mut want = c0.clone();
    naive_gemm(
        trans, !trans, n, n, k, 1.5, &a, lda, &a, lda, beta, &mut want, ldc,
    );
    let what = format!("syrk trans={trans} n={n} k={k} pad={pad} beta={beta}");
    assert_matrix(&c, &want, n, n, ldc, tol::<T>(k), &what);
    for i in 0..n {
        for j in 0..i {
            assert_eq!(
                c[i * ldc + j].to_f64().to_bits(),
                c[j * ldc + i].to_f64().to_bits(),
                "{what}: not exactly symmetric at ({i}, {j})"
            );
        }
    }
    // Agrees with GEMM computing the same product.
    let mut g: Vec<T> = to_t(&c0);
    gemm(
        trans,
        !trans,
        n,
        n,
        k,
        alpha,
        &at_,
        lda,
        &at_,
        lda,
        T::from_f64(beta),
        &mut g,
        ldc,
    )
    .unwrap();
    let gf: Vec<f64> = g.iter().map(|x| x.to_f64()).collect();
    assert_matrix(&c, &gf, n, n, ldc, tol::<T>(k), &format!("{what} vs gemm"));
}

fn syrk_all<T: Real>() {
    let mut rng = Rng::new(2);
    for n in [1, 3, 17, 33, 100, 257, 300] {
        for k in [1, 5, 33] {
            for trans in [false, true] {
                check_syrk::<T>(&mut rng, trans, n, k, if n % 2 == 0 { 3 } else { 0 }, 0.0);
                check_syrk::<T>(&mut rng, trans, n, k, 1, 0.25);
            }
        }
    }
    check_syrk::<T>(&mut rng, false, 600, 7, 2, 0.0);
}

#[test]
fn syrk_f64_symmetric_and_matches_gemm() {
    syrk_all::<f64>();
}

#[test]
fn syrk_f32_symmetric_and_matches_gemm() {
    syrk_all::<f32>();
}

/// Blocks of rows of a SYRK equal the whole SYRK's rows bit for bit (the rows of a rank).
fn syrk_rows_all<T: Real>() {
    let mut rng = Rng::new(3);
    for n in [1, 2, 7, 33, 256, 300, 600] {
        for k in [1, 2, 5, 33] {
            for trans in [false, true] {
                let (ar, ac) = if trans { (k, n) } else { (n, k) };
                let lda = ac + 1;
                let a: Vec<T> = to_t(&random_matrix::<T>(&mut rng, ar, ac, lda));
                let alpha = T::from_f64(0.75);
                let mut whole = vec![T::from_f64(f64::NAN); n * n];
                syrk(trans, n, k, alpha, &a, lda, T::zero(), &mut whole, n).unwrap();
                let mut blocks: Vec<(usize, usize)> = (1..=4)
                    .flat_map(|p| {
                        (0..p).map(move |r| {
                            let (base, extra) = (n / p, n % p);
                            let start = r * base + r.min(extra);
                            (start, start + base + usize::from(r < extra))
                        })
                    })
                    .collect();
                blocks.extend([(0, n), (n / 2, n), (n - 1, n), (n, n)]);
                for (start, end) in blocks {
                    let mut c = vec![T::from_f64(f64::NAN); (end - start) * n];
                    syrk_rows(trans, n, k, alpha, &a, lda, start..end, &mut c, n).unwrap();
                    for (x, y) in c.iter().zip(&whole[start * n..end * n]) {
                        assert_eq!(
                            x.to_f64().to_bits(),
                            y.to_f64().to_bits(),
                            "syrk rows [{start}, {end}) trans={trans} n={n} k={k}"
                        );
                    }
                }
            }
        }
    }
    let mut c = [0.0f64; 2];
    let err = syrk_rows(false, 2, 1, 1.0, &[1.0, 2.0], 1, 1..3, &mut c, 2).unwrap_err();
    assert!(err.to_string().contains("rows [1, 3)"), "{err}");
}

#[test]
fn syrk_rows_equal_the_whole_syrk_bit_for_bit() {
    syrk_rows_all::<f64>();
    syrk_rows_all::<f32>();
}

#[test]
fn syrk_k_zero_scales_and_symmetrises() {
    let mut c = [1.0f64, 2.0, 2.0, 4.0];
    syrk(false, 2, 0, 1.0, &[], 0, 2.0, &mut c, 2).unwrap();
    assert_eq!(c, [2.0, 4.0, 4.0, 8.0]);
    let mut c = [f64::NAN; 4];
    syrk(true, 2, 0, 1.0, &[], 2, 0.0, &mut c, 2).unwrap();
    assert_eq!(c, [0.0; 4]);
}

fn check_gemv<T: Real>(rng: &mut Rng, trans: bool, m: usize, n: usize, pad: usize, beta: f64) {
    let lda = n + pad;
    let a = random_matrix::<T>(rng, m, n, lda);
    let (xl, yl) = if trans { (m, n) } else { (n, m) };
    let x = random_matrix::<T>(rng, 1, xl, xl)[..xl].to_vec();
    let y0: Vec<f64> = if beta == 0.0 {
        vec![f64::NAN; yl]
    } else {
        random_matrix::<T>(rng, 1, yl, yl)[..yl].to_vec()
    };
    let mut y: Vec<T> = to_t(&y0);
    gemv(
        trans,
        m,
        n,
        T::from_f64(0.5),
        &to_t::<T>(&a),
        lda,
        &to_t::<T>(&x),
        T::from_f64(beta),
        &mut y,
    )
    .unwrap();
    let want: Vec<f64> = (0..yl)
        .map(|r| {
            let s: f64 = (0..xl)
                .map(|p| if trans { a[p * lda + r] } else { a[r * lda + p] } * x[p])
                .sum();
            0.5 * s + if beta == 0.0 { 0.0 } else { beta * y0[r] }
        })
        .collect();
    let what = format!("gemv trans={trans} m={m} n={n} pad={pad} beta={beta}");
    assert_vec(&y, &want, tol::<T>(xl), &what);
}

fn gemv_all<T: Real>() {
    let mut rng = Rng::new(3);
    for (m, n) in [
        (1, 1),
        (1, 17),
        (17, 1),
        (33, 100),
        (257, 3),
        (5000, 3),
        (3, 600),
        (2100, 300),
    ] {
        for trans in [false, true] {
            check_gemv::<T>(&mut rng, trans, m, n, 2, 0.0);
            check_gemv::<T>(&mut rng, trans, m, n, 0, -1.0);
        }
    }
}

#[test]
fn gemv_f64_both_orientations() {
    gemv_all::<f64>();
}

#[test]
fn gemv_f32_both_orientations() {
    gemv_all::<f32>();
}

#[test]
fn gemv_errors_and_hand_case() {
    let a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
    let mut y = [f64::NAN; 2];
    gemv(false, 2, 3, 1.0, &a, 3, &[1.0, 1.0, 1.0], 0.0, &mut y).unwrap();
    assert_eq!(y, [6.0, 15.0]);
    let mut y = [1.0f64; 3];
    gemv(true, 2, 3, 2.0, &a, 3, &[1.0, -1.0], 1.0, &mut y).unwrap();
    assert_eq!(y, [-5.0, -5.0, -5.0]);
    let err = gemv(true, 2, 3, 1.0, &a, 3, &[1.0], 0.0, &mut y).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "x"),
        "{err}"
    );
    let err = gemv(false, 2, 3, 1.0, &a, 3, &[1.0; 3], 0.0, &mut y[..1]).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "y"),
        "{err}"
    );
}

#[test]
fn diag_reads_the_diagonal_with_ld() {
    let a = [1.0f64, 9.0, 9.0, 9.0, 2.0, 9.0, 9.0, 9.0, 3.0];
    let mut out = [0.0; 3];
    diag(3, 0, &a, 3, &mut out).unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0]);
    // Rows 1 and 2 of the 3 x 3 matrix: their diagonal entries are in columns 1 and 2.
    let mut block = [0.0; 2];
    diag(2, 1, &a[3..], 3, &mut block).unwrap();
    assert_eq!(block, [2.0, 3.0]);
    let err = diag(2, 2, &a[3..], 3, &mut block).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "A"),
        "{err}"
    );
    // ld 4 over a 2 x 2: elements 0 and 5.
    let a = [7.0f32, 0.0, 0.0, 0.0, 0.0, 8.0];
    let mut out = [0.0f32; 2];
    diag(2, 0, &a, 4, &mut out).unwrap();
    assert_eq!(out, [7.0, 8.0]);
    let err = diag(3, 0, &a, 4, &mut [0.0f32; 3]).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "A"),
        "{err}"
    );
    let err = diag(2, 0, &a, 4, &mut [0.0f32; 1]).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "out"),
        "{err}"
    );
}
