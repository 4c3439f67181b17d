//! The sparse x sparse^T product written dense, densify and CSR row norms against dense loops,
//! over shapes with 1s, odd sizes, empty rows and columns and a fully dense row.

use super::super::{csr_densify, csr_row_norms, spgemm_abt, CpuError, CsrRef, Real};
use super::reference::*;

fn view<'a, T: Real>(s: &'a RandomCsr, values: &'a [T]) -> CsrRef<'a, T> {
    CsrRef {
        rows: s.rows,
        cols: s.cols,
        row_ptr: &s.row_ptr,
        col_idx: &s.col_idx,
        values,
    }
}

/// A random CSR matrix whose row `dense_row` (if any) stores every column and whose column
/// `empty_col` (if any) stores nothing.
fn matrix<T: Real>(
    rng: &mut Rng,
    rows: usize,
    cols: usize,
    density: usize,
    dense_row: Option<usize>,
    empty_col: Option<usize>,
) -> RandomCsr {
    let s = RandomCsr::new::<T>(rng, rows, cols, density);
    let mut row_ptr = vec![0i32];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for r in 0..rows {
        if Some(r) == dense_row {
            for c in 0..cols {
                col_idx.push(c as i32);
                values.push(T::from_f64(rng.uniform() - 0.5).to_f64());
            }
        } else {
            for p in s.row_ptr[r] as usize..s.row_ptr[r + 1] as usize {
                col_idx.push(s.col_idx[p]);
                values.push(s.values[p]);
            }
        }
        row_ptr.push(col_idx.len() as i32);
    }
    let keep: Vec<bool> = col_idx
        .iter()
        .map(|&c| Some(c as usize) != empty_col)
        .collect();
    let mut kept_ptr = vec![0i32];
    let (mut kc, mut kv) = (Vec::new(), Vec::new());
    for r in 0..rows {
        for p in row_ptr[r] as usize..row_ptr[r + 1] as usize {
            if keep[p] {
                kc.push(col_idx[p]);
                kv.push(values[p]);
            }
        }
        kept_ptr.push(kc.len() as i32);
    }
    RandomCsr {
        rows,
        cols,
        row_ptr: kept_ptr,
        col_idx: kc,
        values: kv,
    }
}

fn check_gram<T: Real>(rng: &mut Rng, m: usize, n: usize, k: usize, same: bool) {
    let a = matrix::<T>(rng, m, k, 30, (m > 2).then_some(1), (k > 3).then_some(2));
    let b = if same {
        None
    } else {
        Some(matrix::<T>(rng, n, k, 20, None, (k > 1).then_some(0)))
    };
    let b_ref = b.as_ref().unwrap_or(&a);
    let n = b_ref.rows;
    let (av, bv): (Vec<T>, Vec<T>) = (to_t(&a.values), to_t(&b_ref.values));
    let ldc = n + 1;
    let mut want = vec![f64::NAN; span(m, n, ldc) + 1];
    naive_gemm(
        false,
        true,
        m,
        n,
        k,
        0.5,
        &a.dense(),
        k,
        &b_ref.dense(),
        k,
        0.0,
        &mut want,
        ldc,
    );
    let mut c: Vec<T> = to_t(&vec![f64::NAN; want.len()]);
    spgemm_abt(
        view(&a, &av),
        view(b_ref, &bv),
        T::from_f64(0.5),
        &mut c,
        ldc,
    )
    .unwrap();
    assert_matrix(
        &c,
        &want,
        m,
        n,
        ldc,
        tol::<T>(k),
        &format!("A*B^T {m}x{n}x{k} same={same}"),
    );
    if same {
        // With sorted, unique columns in every row, C[i, j] and C[j, i] add the same products
        // in the same order.
        let canonical = from_dense(m, k, &a.dense());
        let cv: Vec<T> = to_t(&canonical.values);
        spgemm_abt(
            view(&canonical, &cv),
            view(&canonical, &cv),
            T::one(),
            &mut c,
            ldc,
        )
        .unwrap();
        for i in 0..m {
            for j in 0..i {
                assert_eq!(
                    c[i * ldc + j],
                    c[j * ldc + i],
                    "A*A^T not symmetric at ({i}, {j})"
                );
            }
        }
    }
}

/// The CSR form of a dense row-major matrix: sorted, unique columns.
fn from_dense(rows: usize, cols: usize, d: &[f64]) -> RandomCsr {
    let mut row_ptr = vec![0i32];
    let (mut col_idx, mut values) = (Vec::new(), Vec::new());
    for r in 0..rows {
        for c in 0..cols {
            if d[r * cols + c] != 0.0 {
                col_idx.push(c as i32);
                values.push(d[r * cols + c]);
            }
        }
        row_ptr.push(col_idx.len() as i32);
    }
    RandomCsr {
        rows,
        cols,
        row_ptr,
        col_idx,
        values,
    }
}

#[test]
fn spgemm_matches_the_dense_product() {
    let mut rng = Rng::new(71);
    for &(m, n, k) in &[
        (1, 1, 1),
        (1, 5, 3),
        (7, 1, 9),
        (13, 11, 17),
        (33, 29, 64),
        (64, 65, 5),
        (5, 4, 0),
        (0, 3, 4),
    ] {
        check_gram::<f64>(&mut rng, m, n, k, false);
        check_gram::<f32>(&mut rng, m, n, k, false);
        check_gram::<f64>(&mut rng, m, m, k, true);
        check_gram::<f32>(&mut rng, m, m, k, true);
    }
}

#[test]
fn spgemm_rejects_mismatched_and_malformed_operands() {
    let mut rng = Rng::new(3);
    let a = RandomCsr::new::<f64>(&mut rng, 3, 4, 50);
    let b = RandomCsr::new::<f64>(&mut rng, 2, 5, 50);
    let mut c = vec![0.0f64; 6];
    let err = spgemm_abt(view(&a, &a.values), view(&b, &b.values), 1.0, &mut c, 2).unwrap_err();
    assert!(matches!(err, CpuError::Shape { .. }), "{err}");
    assert!(err.to_string().contains("A is 3x4, B is 2x5"), "{err}");
    let bad = RandomCsr {
        rows: 1,
        cols: 2,
        row_ptr: vec![0, 1],
        col_idx: vec![5],
        values: vec![1.0],
    };
    let err = spgemm_abt(
        view(&bad, &bad.values),
        view(&bad, &bad.values),
        1.0,
        &mut c,
        1,
    );
    assert!(matches!(err, Err(CpuError::InvalidCsr { .. })), "{err:?}");
    let mut short = vec![0.0f64; 2];
    let err = spgemm_abt(view(&a, &a.values), view(&a, &a.values), 1.0, &mut short, 3);
    assert!(matches!(err, Err(CpuError::Shape { .. })), "{err:?}");
}

#[test]
fn densify_and_row_norms_match_dense_loops() {
    let mut rng = Rng::new(5);
    for &(rows, cols) in &[(1, 1), (3, 7), (17, 9), (8, 1), (1, 12), (0, 4)] {
        // RandomCsr scrambles columns (7 steps at a time), so some rows repeat a column.
        let s = matrix::<f64>(&mut rng, rows, cols, 40, (rows > 1).then_some(0), None);
        let dense = s.dense();
        let ld = cols + 2;
        let mut out = vec![f64::NAN; span(rows, cols, ld) + 1];
        let mut want = out.clone();
        for i in 0..rows {
            want[i * ld..i * ld + cols].copy_from_slice(&dense[i * cols..(i + 1) * cols]);
        }
        csr_densify(view(&s, &s.values), false, &mut out, ld).unwrap();
        assert_matrix(&out, &want, rows, cols, ld, 0.0, "densify");
        let ldt = rows + 1;
        let mut out_t = vec![f64::NAN; span(cols, rows, ldt) + 1];
        let mut want_t = out_t.clone();
        for i in 0..rows {
            for j in 0..cols {
                want_t[j * ldt + i] = dense[i * cols + j];
            }
        }
        csr_densify(view(&s, &s.values), true, &mut out_t, ldt).unwrap();
        assert_matrix(&out_t, &want_t, cols, rows, ldt, 0.0, "densify transposed");
        let norms: Vec<f64> = (0..rows)
            .map(|i| dense[i * cols..(i + 1) * cols].iter().map(|v| v * v).sum())
            .collect();
        let mut got = vec![f32::NAN; rows];
        let values: Vec<f32> = to_t(&s.values);
        csr_row_norms(view(&s, &values), &mut got).unwrap();
        assert_vec(&got, &norms, tol::<f32>(cols), "row norms");
    }
}
