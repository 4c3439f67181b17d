//! The CSR matrix's validation and conversions, and the libsvm reader kept sparse.

use super::super::test_support::{assert_mentions, err_msg, TempDir};
use super::super::*;

#[test]
fn libsvm_stays_sparse_and_matches_the_dense_reader() {
    let text = "+1 1:0.5 3:-2\n-1 2:7 # comment\n\n3 qid:4 4:1e-3\n0\n";
    let dir = TempDir::new();
    let path = dir.file("data.libsvm", text.as_bytes());
    let sparse = load_libsvm_sparse(&path, None).unwrap();
    assert_eq!((sparse.n(), sparse.d(), sparse.x.nnz()), (4, 4, 4));
    assert_eq!(sparse.x.row_ptr(), &[0, 2, 3, 4, 4]);
    assert_eq!(sparse.x.col_idx(), &[0, 2, 1, 3]);
    assert_eq!(sparse.x.values(), &[0.5, -2.0, 7.0, 1e-3]);
    assert_eq!(sparse.labels, Some(vec![1, -1, 3, 0]));
    assert_eq!(sparse.x.row(3), Some((&[][..], &[][..])));
    assert_eq!(sparse.x.row(4), None);
    assert!((sparse.x.density() - 0.25).abs() < 1e-15);
    let dense = load_libsvm(&path, None).unwrap();
    assert_eq!(sparse.to_dense().unwrap(), dense);
    assert_eq!(sparse.x.to_dense(), Some(dense.x.clone()));
    assert_eq!(CsrMatrix::from_dense(4, 4, &dense.x).unwrap(), sparse.x);
}

#[test]
fn libsvm_sparse_errors_name_the_line() {
    let dir = TempDir::new();
    for (text, parts) in [
        (
            "1 1:1\n1 2:1 2:3\n",
            &["line 2", "index 2 in `2:3` follows index 2"][..],
        ),
        (
            "1 3:1 1:1\n",
            &["line 1", "index 1 in `1:1` follows index 3"],
        ),
        ("1 1:1\n2 5:x\n", &["line 2", "`x` is not a number"]),
        (
            "1 1:1 junk\n",
            &["line 1", "`junk` is not an `index:value` pair"],
        ),
        (
            "1 1:1\n1 9:1\n",
            &[
                "line 2",
                "index 9 in `9:1` is larger than the given dimension 8",
            ],
        ),
        ("1 1:nan\n", &["line 1", "NaN"]),
    ] {
        let path = dir.file("bad.libsvm", text.as_bytes());
        let dim = text.contains("9:1").then_some(8);
        assert_mentions(&err_msg(load_libsvm_sparse(&path, dim)), parts);
    }
}

#[test]
fn csr_validation_names_the_row_and_position() {
    let bad = |r: Result<CsrMatrix, IoError>| err_msg(r);
    assert_mentions(
        &bad(CsrMatrix::new(2, 3, vec![0, 1], vec![0], vec![1.0])),
        &["row offsets have 2 entries", "rows + 1 = 3"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(
            2,
            3,
            vec![0, 1, 2],
            vec![0, 3],
            vec![1.0, 2.0],
        )),
        &["row 1, entry 0 (position 1)", "column index 3", "columns 3"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(1, 3, vec![0, 2], vec![2, 1], vec![1.0, 2.0])),
        &[
            "row 0, entry 1 (position 1)",
            "1 is below the previous index 2",
            "from_unsorted",
        ],
    );
    assert_mentions(
        &bad(CsrMatrix::new(1, 3, vec![0, 2], vec![1, 1], vec![1.0, 2.0])),
        &["column index 1 repeats"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(
            1,
            3,
            vec![0, 1],
            vec![1],
            vec![f64::INFINITY],
        )),
        &["row 0, entry 0 (position 0), column 1", "not finite"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(
            2,
            3,
            vec![0, 2, 1],
            vec![0, 1],
            vec![1.0, 2.0],
        )),
        &["run from 0 to 1", "number of values (2)"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(2, 3, vec![0, 2, 1], vec![0], vec![1.0])),
        &["decrease at row 1 (2 then 1)"],
    );
    assert_mentions(
        &bad(CsrMatrix::new(1, 3, vec![0, 1], vec![0, 1], vec![1.0])),
        &["2 column indices but 1 values"],
    );
}

#[test]
fn from_unsorted_sorts_rows_and_sums_duplicates() {
    let m = CsrMatrix::from_unsorted(
        3,
        4,
        vec![0, 4, 4, 6],
        vec![3, 1, 3, 0, 2, 2],
        vec![1.0, 2.0, 0.5, 4.0, 1.0, -1.0],
    )
    .unwrap();
    assert_eq!(m.row_ptr(), &[0, 3, 3, 4]);
    assert_eq!(m.col_idx(), &[0, 1, 3, 2]);
    assert_eq!(m.values(), &[4.0, 2.0, 1.5, 0.0]);
    assert_mentions(
        &err_msg(CsrMatrix::from_unsorted(
            1,
            2,
            vec![0, 1],
            vec![5],
            vec![1.0],
        )),
        &["column index 5"],
    );
}

#[test]
fn select_rows_and_empty_shapes() {
    let m = CsrMatrix::from_dense(3, 2, &[1.0, 0.0, 0.0, 0.0, 0.0, 2.0]).unwrap();
    let s = m.select_rows(&[2, 0, 2]).unwrap();
    assert_eq!((s.rows(), s.cols()), (3, 2));
    assert_eq!(s.to_dense(), Some(vec![0.0, 2.0, 1.0, 0.0, 0.0, 2.0]));
    assert_mentions(
        &err_msg(m.select_rows(&[2, 0, 7])),
        &["row index 7", "position 2", "number of rows 3"],
    );
    let empty = CsrMatrix::from_dense(2, 0, &[]).unwrap();
    assert_eq!((empty.rows(), empty.nnz(), empty.density()), (2, 0, 0.0));
    assert!(CsrMatrix::from_dense(2, 2, &[1.0]).is_err());
}

#[test]
fn a_row_count_of_usize_max_is_an_error_naming_the_shape_not_a_panic() {
    let rows = usize::MAX;
    for result in [
        CsrMatrix::new(rows, 3, vec![], vec![], vec![]),
        CsrMatrix::new(rows, 3, vec![0], vec![], vec![]),
        CsrMatrix::from_unsorted(rows, 3, vec![], vec![], vec![]),
        CsrMatrix::from_unsorted(rows, 3, vec![0], vec![], vec![]),
    ] {
        let msg = err_msg(result);
        assert!(msg.contains(&format!("{rows} x 3")), "{msg}");
        assert!(msg.contains("overflow"), "{msg}");
    }
}

#[test]
fn the_checked_dense_view_refuses_what_cannot_fit() {
    let m = CsrMatrix::from_dense(2, 3, &[1.0, 0.0, 2.0, 0.0, 3.0, 0.0]).unwrap();
    assert_eq!(m.to_dense_checked().unwrap(), m.to_dense().unwrap());
    // 10^6 x 10^6 values are 8 TB: refused before anything is allocated.
    let rows = 1_000_000;
    let mut row_ptr = vec![1; rows + 1];
    row_ptr[0] = 0;
    let huge = CsrMatrix::new(rows, rows, row_ptr, vec![7], vec![1.0]).unwrap();
    assert_mentions(
        &err_msg(huge.to_dense_checked()),
        &["1000000 x 1000000 sparse values", "too large"],
    );
}
