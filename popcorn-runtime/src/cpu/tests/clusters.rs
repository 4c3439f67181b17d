//! Cluster counts and the selection matrix.

use super::super::{counts, selection, spmm_dense_sparse, CpuError, CsrRef};

#[test]
fn counts_with_empty_clusters() {
    let labels = [2u32, 0, 2, 2, 4];
    let mut out = [f64::NAN; 6];
    counts(&labels, 5, &mut out).unwrap();
    assert_eq!(&out[..5], &[1.0, 0.0, 3.0, 0.0, 1.0]);
    assert!(out[5].is_nan(), "element past k written");
    let mut out32 = [0.0f32; 2];
    counts(&[], 2, &mut out32).unwrap();
    assert_eq!(out32, [0.0, 0.0]);
}

#[test]
fn counts_rejects_bad_labels_and_short_output() {
    let mut out = [0.0f64; 3];
    let err = counts(&[0, 1, 3, 7], 3, &mut out).unwrap_err();
    assert_eq!(
        err,
        CpuError::LabelOutOfRange {
            position: 2,
            label: 3,
            k: 3
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("label 3") && msg.contains("position 2"),
        "{msg}"
    );
    let err = counts(&[0], 4, &mut out).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "out"),
        "{err}"
    );
}

#[test]
fn selection_builds_normalised_rows_with_empty_clusters() {
    let labels = [2u32, 0, 2, 2, 4, 0];
    let (k, n) = (5, labels.len());
    let mut row_ptr = [-1i32; 6];
    let mut col_idx = [-1i32; 6];
    let mut values = [f64::NAN; 6];
    selection(&labels, k, &mut row_ptr, &mut col_idx, &mut values).unwrap();
    assert_eq!(row_ptr, [0, 2, 2, 5, 5, 6]);
    assert_eq!(col_idx, [1, 5, 0, 2, 3, 4]);
    let third = 1.0 / 3.0;
    assert_eq!(values, [0.5, 0.5, third, third, third, 1.0]);
    let v = CsrRef {
        rows: k,
        cols: n,
        row_ptr: &row_ptr,
        col_idx: &col_idx,
        values: &values,
    };
    v.validate().unwrap();
    // E = K V^T with K = identity-ish: row i of E is V[:, i]^T.
    let mut kmat = vec![0.0f64; n * n];
    for i in 0..n {
        kmat[i * n + i] = 1.0;
    }
    let mut e = vec![f64::NAN; n * k];
    spmm_dense_sparse(false, &kmat, n, n, true, v, 1.0, 0.0, &mut e, k).unwrap();
    assert_eq!(&e[0..5], &[0.0, 0.0, third, 0.0, 0.0]);
    assert_eq!(&e[25..30], &[0.5, 0.0, 0.0, 0.0, 0.0]);
}

#[test]
fn selection_f32_and_errors() {
    let mut row_ptr = [0i32; 3];
    let mut col_idx = [0i32; 3];
    let mut values = [0.0f32; 3];
    selection(&[1, 1, 1], 2, &mut row_ptr, &mut col_idx, &mut values).unwrap();
    assert_eq!(row_ptr, [0, 0, 3]);
    assert_eq!(col_idx, [0, 1, 2]);
    assert_eq!(values, [1.0f32 / 3.0; 3]);
    let err = selection(&[1, 2, 1], 2, &mut row_ptr, &mut col_idx, &mut values).unwrap_err();
    assert_eq!(
        err,
        CpuError::LabelOutOfRange {
            position: 1,
            label: 2,
            k: 2
        }
    );
    let err = selection(&[0, 0, 0], 3, &mut row_ptr, &mut col_idx, &mut values).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "row_ptr"),
        "{err}"
    );
    let err = selection(&[0, 0, 0], 2, &mut row_ptr, &mut col_idx[..2], &mut values).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "col_idx"),
        "{err}"
    );
}
