//! The graph readers: Matrix Market (general, symmetric, pattern, integer; gzip) and edge
//! lists (0- and 1-based, weights, comments, both directions), against dense matrices written
//! out by hand, and their errors naming the line.

use crate::test_support::{assert_mentions, err_msg, gzip, TempDir};
use crate::{load_edge_list, load_mtx, IndexBase};

/// The dense row-major values of a CSR matrix.
fn dense(m: &crate::CsrMatrix) -> Vec<f64> {
    m.to_dense().expect("small matrix")
}

#[test]
fn mtx_general_real_keeps_the_entries_and_sums_repeats() {
    let text = "%%MatrixMarket matrix coordinate real general\n% a comment\n\n2 3 4\n1 1 1.5\n2 3 -2\n1 3 4e-1\n1 1 0.5\n";
    let dir = TempDir::new();
    let m = load_mtx(dir.file("g.mtx", text.as_bytes())).unwrap();
    assert_eq!((m.rows(), m.cols(), m.nnz()), (2, 3, 3));
    assert_eq!(dense(&m), vec![2.0, 0.0, 0.4, 0.0, 0.0, -2.0]);
}

#[test]
fn mtx_symmetric_is_expanded_and_gzip_is_read() {
    let text =
        "%%MatrixMarket Matrix Coordinate Integer Symmetric\n3 3 4\n1 1 5\n2 1 1\n3 1 2\n3 2 7\n";
    let dir = TempDir::new();
    let m = load_mtx(dir.file("s.mtx.gz", &gzip(text.as_bytes()))).unwrap();
    #[rustfmt::skip]
    let want = vec![
        5.0, 1.0, 2.0,
        1.0, 0.0, 7.0,
        2.0, 7.0, 0.0,
    ];
    assert_eq!(dense(&m), want);
    assert_eq!(m.nnz(), 7);
}

#[test]
fn mtx_pattern_entries_are_ones() {
    let text = "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 2\n4 4\n";
    let dir = TempDir::new();
    let m = load_mtx(dir.file("p.mtx", text.as_bytes())).unwrap();
    #[rustfmt::skip]
    let want = vec![
        0.0, 1.0, 0.0, 0.0,
        1.0, 0.0, 1.0, 0.0,
        0.0, 1.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 1.0,
    ];
    assert_eq!(dense(&m), want);
}

#[test]
fn mtx_errors_name_the_line() {
    let dir = TempDir::new();
    let head = "%%MatrixMarket matrix coordinate real general\n";
    for (text, parts) in [
        ("hello\n", vec!["line 1", "is not a banner"]),
        (
            "%%MatrixMarket matrix array real general\n2 2\n",
            vec!["line 1", "`array`"],
        ),
        (
            "%%MatrixMarket matrix coordinate complex general\n",
            vec!["line 1", "`complex`"],
        ),
        (
            "%%MatrixMarket matrix coordinate real skew-symmetric\n",
            vec!["line 1", "`skew-symmetric`"],
        ),
        (
            "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n",
            vec!["line 2", "must be square"],
        ),
        (
            &format!("{head}% c\n2 x 1\n"),
            vec!["line 3", "not a size line"],
        ),
        (
            &format!("{head}2 2 2\n1 1 1\n"),
            vec!["line 3", "after 1 entries", "announces 2"],
        ),
        (
            &format!("{head}2 2 1\n1 1 1\n2 2 1\n"),
            vec!["line 4", "more entries than the 1"],
        ),
        (
            &format!("{head}2 2 1\n3 1 1\n"),
            vec!["line 3", "row index 3 is outside 1..=2"],
        ),
        (
            &format!("{head}2 2 1\n1 0 1\n"),
            vec!["line 3", "column index 0 is outside"],
        ),
        (
            &format!("{head}2 2 1\n1 1\n"),
            vec!["line 3", "has 2 fields"],
        ),
        (&format!("{head}2 2 1\n1 1 nan\n"), vec!["line 3", "NaN"]),
        (
            &format!("{head}2 2 1\n1 1 abc\n"),
            vec!["line 3", "`abc` is not a number"],
        ),
    ] {
        let path = dir.file("bad.mtx", text.as_bytes());
        assert_mentions(&err_msg(load_mtx(&path)), &parts);
    }
    assert_mentions(&err_msg(load_mtx(dir.file("empty.mtx", b""))), &["empty"]);
}

#[test]
fn edge_lists_are_made_symmetric() {
    // Both directions of 0-1 listed (counted once), a weighted edge, a self-loop, comments.
    let text = "# a graph\n0 1\n1 0\n1,2,2.5 % weighted\n\n3\t3 4\n0 3\n";
    let dir = TempDir::new();
    let m = load_edge_list(dir.file("g.edges", text.as_bytes()), IndexBase::Zero).unwrap();
    #[rustfmt::skip]
    let want = vec![
        0.0, 1.0, 0.0, 1.0,
        1.0, 0.0, 2.5, 0.0,
        0.0, 2.5, 0.0, 0.0,
        1.0, 0.0, 0.0, 4.0,
    ];
    assert_eq!(dense(&m), want);
    // The same graph 1-based.
    let one = "1 2\n2 3 2.5\n4 4 4\n1 4\n";
    let m1 = load_edge_list(dir.file("g1.edges", one.as_bytes()), IndexBase::One).unwrap();
    assert_eq!(dense(&m1), want);
}

#[test]
fn edge_list_errors_name_the_line() {
    let dir = TempDir::new();
    for (text, base, parts) in [
        ("0 1\n0\n", IndexBase::Zero, vec!["line 2", "has 1 fields"]),
        ("0 1 2 3\n", IndexBase::Zero, vec!["line 1", "has 4 fields"]),
        (
            "0 -1\n",
            IndexBase::Zero,
            vec!["line 1", "`-1` is not a node index"],
        ),
        (
            "1 2\n0 1\n",
            IndexBase::One,
            vec!["line 2", "node index 0 with 1-based"],
        ),
        (
            "0 1 -2\n",
            IndexBase::Zero,
            vec!["line 1", "weight -2", "negative"],
        ),
        (
            "0 1 2\n# x\n1 0 3\n",
            IndexBase::Zero,
            vec!["line 3", "weight 3 here and 2 on line 1"],
        ),
        ("0 1 inf\n", IndexBase::Zero, vec!["line 1", "infinite"]),
    ] {
        let path = dir.file("bad.edges", text.as_bytes());
        assert_mentions(&err_msg(load_edge_list(&path, base)), &parts);
    }
    let path = dir.file("none.edges", b"# only a comment\n");
    assert_mentions(
        &err_msg(load_edge_list(&path, IndexBase::Zero)),
        &["no edges"],
    );
}
