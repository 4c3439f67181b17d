//! Cluster counts and the selection matrix.

use super::super::{
    cluster_sums, counts, label_row_sums, permute_rows, selection, spmm_dense_sparse,
    weigh_selection, CpuError, CsrRef, Real,
};

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

/// The rows of `m` (`width` values each) in the order `listed`, then the rest ascending.
fn by_order(listed: &[usize], m: &[f64], width: usize) -> Vec<f64> {
    let rows = m.len() / width;
    let mut order = listed.to_vec();
    order.extend((0..rows).filter(|p| !listed.contains(p)));
    order
        .iter()
        .flat_map(|&i| m[i * width..(i + 1) * width].iter().copied())
        .collect()
}

#[test]
fn permute_rows_puts_unlisted_points_last_and_inverts() {
    // Labels [2, 0, 2, 5, 0, 7, 2] with k = 3: the selection lists 1, 4, 0, 2, 6; points 3
    // and 5 (labels >= k) follow, ascending.
    let listed = [1i32, 4, 0, 2, 6];
    let labels = [2u32, 0, 2, 5, 0, 7, 2];
    let mut sorted = [u32::MAX; 7];
    permute_rows(&listed, 7, &labels, 1, &mut sorted, false).unwrap();
    assert_eq!(sorted, [0, 0, 2, 2, 2, 5, 7]);
    let mut back = [u32::MAX; 7];
    permute_rows(&listed, 7, &sorted, 1, &mut back, true).unwrap();
    assert_eq!(back, labels);
    // Dense, odd width: forward matches the order, the inverse scatters it back.
    let width = 3;
    let m: Vec<f64> = (0..7 * width).map(|x| x as f64 * 0.25).collect();
    let mut fwd = vec![f64::NAN; m.len()];
    permute_rows(&listed, 7, &m, width, &mut fwd, false).unwrap();
    assert_eq!(fwd, by_order(&[1, 4, 0, 2, 6], &m, width));
    let mut inv = vec![f64::NAN; m.len()];
    permute_rows(&listed, 7, &fwd, width, &mut inv, true).unwrap();
    assert_eq!(inv, m);
    // The inverse of the original scatters row p to order[p] (order = 1, 4, 0, 2, 6, 3, 5).
    let mut scattered = vec![f64::NAN; m.len()];
    permute_rows(&listed, 7, &m, width, &mut scattered, true).unwrap();
    let order = [1usize, 4, 0, 2, 6, 3, 5];
    for (p, &i) in order.iter().enumerate() {
        assert_eq!(
            scattered[i * width..(i + 1) * width],
            m[p * width..(p + 1) * width]
        );
    }
}

#[test]
fn permute_rows_of_one_point_and_of_none_listed() {
    for listed in [&[0i32][..], &[]] {
        for inverse in [false, true] {
            let mut out = [0u32];
            permute_rows(listed, 1, &[9u32], 1, &mut out, inverse).unwrap();
            assert_eq!(out, [9]);
            let mut row = [0.0f32; 2];
            permute_rows(listed, 1, &[1.5f32, -2.0], 2, &mut row, inverse).unwrap();
            assert_eq!(row, [1.5, -2.0]);
        }
    }
    // Nothing listed: the order is the identity.
    let m = [1.0f64, 2.0, 3.0, 4.0, 5.0];
    let mut out = [0.0; 5];
    permute_rows(&[], 5, &m, 1, &mut out, false).unwrap();
    assert_eq!(out, m);
    let mut none: [f64; 0] = [];
    permute_rows(&[], 0, &[], 4, &mut none, true).unwrap();
}

#[test]
fn permute_rows_round_trips_a_selection_with_labels_past_k() {
    // The CPU selection rejects labels >= k; build the order from the labels below k and check
    // that forward then inverse gives the input back, for odd sizes.
    for (n, k) in [(1usize, 1usize), (7, 3), (33, 4), (257, 5)] {
        let labels: Vec<u32> = (0..n).map(|i| ((i * 7 + 3) % (k + 2)) as u32).collect();
        let mut listed = vec![];
        for c in 0..k as u32 {
            listed.extend((0..n).filter(|&i| labels[i] == c).map(|i| i as i32));
        }
        let mut sorted = vec![0u32; n];
        permute_rows(&listed, n, &labels, 1, &mut sorted, false).unwrap();
        let below: Vec<u32> = sorted
            .iter()
            .copied()
            .take_while(|&l| (l as usize) < k)
            .collect();
        assert_eq!(below.len(), listed.len(), "n={n} k={k}");
        assert!(
            below.windows(2).all(|w| w[0] <= w[1]),
            "n={n} k={k}: {sorted:?}"
        );
        let outside: Vec<usize> = (0..n).filter(|&i| labels[i] as usize >= k).collect();
        let tail: Vec<u32> = outside.iter().map(|&i| labels[i]).collect();
        assert_eq!(sorted[listed.len()..], tail[..], "n={n} k={k}");
        let mut back = vec![0u32; n];
        permute_rows(&listed, n, &sorted, 1, &mut back, true).unwrap();
        assert_eq!(back, labels, "n={n} k={k}");
        let m: Vec<f32> = (0..n * 5).map(|x| x as f32 - 3.0).collect();
        let mut fwd = vec![f32::NAN; m.len()];
        permute_rows(&listed, n, &m, 5, &mut fwd, false).unwrap();
        let mut inv = vec![f32::NAN; m.len()];
        permute_rows(&listed, n, &fwd, 5, &mut inv, true).unwrap();
        assert_eq!(inv, m, "n={n} k={k}");
    }
}

#[test]
fn permute_rows_rejects_bad_orders_and_shapes() {
    let mut out = [7u32; 3];
    let err = permute_rows(&[0, 3], 3, &[1u32, 2, 3], 1, &mut out, false).unwrap_err();
    assert!(
        matches!(&err, CpuError::InvalidCsr { detail, .. } if detail.contains("point 3 of 3")),
        "{err}"
    );
    let err = permute_rows(&[-1], 3, &[1u32, 2, 3], 1, &mut out, true).unwrap_err();
    assert!(matches!(&err, CpuError::InvalidCsr { .. }), "{err}");
    let err = permute_rows(&[2, 0, 2], 3, &[1u32, 2, 3], 1, &mut out, false).unwrap_err();
    assert!(
        matches!(&err, CpuError::InvalidCsr { detail, .. } if detail.contains("twice")),
        "{err}"
    );
    assert_eq!(out, [7, 7, 7], "nothing written on error");
    let err = permute_rows(&[], 3, &[1u32, 2], 1, &mut out, false).unwrap_err();
    assert!(matches!(&err, CpuError::Shape { .. }), "{err}");
    let err = permute_rows(&[], 2, &[1.0f64; 4], 2, &mut [0.0; 3], false).unwrap_err();
    assert!(matches!(&err, CpuError::Shape { .. }), "{err}");
}

#[test]
fn selection_still_rejects_labels_past_k() {
    let mut row_ptr = [0i32; 3];
    let mut col_idx = [0i32; 3];
    let mut values = [0.0f64; 3];
    let err = selection(&[0, 1, 2], 2, &mut row_ptr, &mut col_idx, &mut values).unwrap_err();
    assert_eq!(
        err,
        CpuError::LabelOutOfRange {
            position: 2,
            label: 2,
            k: 2
        }
    );
}

/// Sums by label of every row, rows in groups and alone (1 to 20 rows: groups of eight (f32
/// with AVX) or four and the rest), a leading dimension past the columns, columns not a
/// multiple of eight, labels in any order: each row's bins equal a direct left-to-right sum,
/// bit for bit, in f32 and f64, and the output past `rows * k` is left alone.
#[test]
fn cluster_sums_match_direct_sums_for_any_row_count() {
    fn case<T: Real>(rows: usize, cols: usize, ldm: usize, k: usize) {
        let labels: Vec<u32> = (0..cols).map(|j| ((j * 7 + j / 3) % k) as u32).collect();
        let m: Vec<T> = (0..rows * ldm)
            .map(|i| T::from_f64(((i * 2654435761usize) % 1000) as f64 / 997.0 - 0.4))
            .collect();
        let mut out = vec![T::nan(); rows * k + 3];
        cluster_sums(rows, cols, &m, ldm, &labels, k, &mut out).unwrap();
        for i in 0..rows {
            let mut want = vec![T::zero(); k];
            for j in 0..cols {
                want[labels[j] as usize] += m[i * ldm + j];
            }
            assert_eq!(
                &out[i * k..(i + 1) * k],
                &want[..],
                "rows {rows}, cols {cols}, row {i}"
            );
        }
        assert!(
            out[rows * k..].iter().all(|v| v.is_nan()),
            "rows {rows}: wrote past the end"
        );
    }
    for rows in 1..=20usize {
        for (cols, ldm, k) in [(37, 41, 5), (64, 64, 3), (7, 9, 26), (1, 1, 1)] {
            case::<f32>(rows, cols, ldm, k);
            case::<f64>(rows, cols, ldm, k);
        }
    }
}

#[test]
fn weighed_selection_rows_are_weights_over_their_totals() {
    // Cluster 0: points 1 (w 1) and 5 (w 3); cluster 1 empty; cluster 2: points 0, 2, 3
    // (w 0, 0, 0: a zero total keeps its entries at 0); cluster 3: point 4 (w 0.5).
    let labels = [2u32, 0, 2, 2, 3, 0];
    let weights = [0.0, 1.0, 0.0, 0.0, 0.5, 3.0];
    let k = 4;
    let mut row_ptr = [-1i32; 5];
    let mut col_idx = [-1i32; 6];
    let mut values = [f64::NAN; 6];
    selection(&labels, k, &mut row_ptr, &mut col_idx, &mut values).unwrap();
    weigh_selection(k, &row_ptr, &col_idx, &weights, &mut values).unwrap();
    assert_eq!(row_ptr, [0, 2, 2, 5, 6]);
    assert_eq!(col_idx, [1, 5, 0, 2, 3, 4]);
    assert_eq!(values, [0.25, 0.75, 0.0, 0.0, 0.0, 1.0]);
    // f32 values, the totals in f64.
    let mut v32 = [0.0f32; 6];
    let w32: Vec<f32> = weights.iter().map(|w| *w as f32).collect();
    weigh_selection(k, &row_ptr, &col_idx, &w32, &mut v32).unwrap();
    assert_eq!(v32, [0.25, 0.75, 0.0, 0.0, 0.0, 1.0]);
}

#[test]
fn weighing_rejects_short_weights_and_bad_offsets() {
    let (row_ptr, col_idx) = ([0i32, 2], [0i32, 3]);
    let mut values = [0.0f64; 2];
    let err = weigh_selection(1, &row_ptr, &col_idx, &[1.0, 1.0], &mut values).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, detail } if operand == "weights" && detail.contains("column 3")),
        "{err}"
    );
    let err = weigh_selection(1, &[0, 5], &col_idx, &[1.0; 4], &mut values).unwrap_err();
    assert!(matches!(&err, CpuError::Shape { .. }), "{err}");
    let err = weigh_selection(2, &[0, 2, 1], &col_idx, &[1.0; 4], &mut values).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "row_ptr"),
        "{err}"
    );
}

/// Hand-computed: three points of two features in clusters 1, 0, 1 of three.
#[test]
fn label_row_sums_by_hand() {
    let x = [1.0, 2.0, 10.0, 20.0, 100.0, 200.0];
    let mut out = [f64::NAN; 7];
    label_row_sums(3, 2, &x, &[1, 0, 1], 3, &mut out).unwrap();
    assert_eq!(&out[..6], &[10.0, 20.0, 101.0, 202.0, 0.0, 0.0]);
    assert!(out[6].is_nan(), "element past k x d written");
}

/// Against sums in point order over many blocks of points, and the same bits whatever the
/// number of threads.
#[test]
fn label_row_sums_match_direct_sums_whatever_the_threads() {
    let (n, d, k) = (20_011, 3, 7);
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let labels: Vec<u32> = (0..n).map(|_| next() % (k as u32 - 1)).collect(); // k - 1 empty
    let x: Vec<f32> = (0..n * d)
        .map(|_| (next() % 1000) as f32 / 250.0 - 2.0)
        .collect();
    let mut want = vec![0.0f64; k * d];
    for (i, &l) in labels.iter().enumerate() {
        for f in 0..d {
            want[l as usize * d + f] += f64::from(x[i * d + f]);
        }
    }
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = vec![f32::NAN; k * d];
        pool.install(|| label_row_sums(n, d, &x, &labels, k, &mut out).unwrap());
        out
    };
    let one = run(1);
    assert_eq!(one, run(3), "the sums depend on the thread count");
    for (i, (g, w)) in one.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "element {i}: {g} against {w}"
        );
    }
    assert!(
        one[(k - 1) * d..].iter().all(|&v| v == 0.0),
        "the empty cluster"
    );
}

#[test]
fn label_row_sums_edges_and_errors() {
    // No points: zero sums.
    let mut out = [f64::NAN; 4];
    label_row_sums(0, 2, &[], &[], 2, &mut out).unwrap();
    assert_eq!(out, [0.0; 4]);
    let err = label_row_sums(2, 2, &[1.0, 2.0, 3.0, 4.0], &[0, 5], 2, &mut out).unwrap_err();
    assert_eq!(
        err,
        CpuError::LabelOutOfRange {
            position: 1,
            label: 5,
            k: 2
        }
    );
    let err = label_row_sums(2, 2, &[1.0, 2.0, 3.0], &[0, 1], 2, &mut out).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "X"),
        "{err}"
    );
    let err = label_row_sums(2, 2, &[1.0; 4], &[0, 1], 3, &mut out).unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "S"),
        "{err}"
    );
}
