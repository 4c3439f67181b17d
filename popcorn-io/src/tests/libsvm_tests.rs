use super::super::test_support::{assert_mentions, err_msg, gzip, TempDir};
use super::super::*;

fn load_text(text: &str, dim: Option<usize>) -> Result<Dataset, IoError> {
    let dir = TempDir::new();
    let path = dir.file("data.libsvm", text.as_bytes());
    load_libsvm(&path, dim)
}

#[test]
fn sparse_lines_become_dense_rows_with_inferred_dimension() {
    let text = "+1 1:0.5 3:-2\n-1 2:7 # comment\n\n# full-line comment\n3 qid:4 4:1e-3\n0\n";
    let ds = load_text(text, None).unwrap();
    assert_eq!((ds.n, ds.d), (4, 4));
    #[rustfmt::skip]
    let expected = vec![
        0.5, 0.0, -2.0, 0.0,
        0.0, 7.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 1e-3,
        0.0, 0.0, 0.0, 0.0,
    ];
    assert_eq!(ds.x, expected);
    assert_eq!(ds.labels, Some(vec![1, -1, 3, 0]));
}

#[test]
fn given_dimension_pads_with_zero_columns() {
    let ds = load_text("2 1:1 2:2\n1.0\t2:5\n", Some(5)).unwrap();
    assert_eq!((ds.n, ds.d), (2, 5));
    assert_eq!(ds.x, vec![1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0]);
    assert_eq!(ds.labels, Some(vec![2, 1]));
}

#[test]
fn single_point_single_feature() {
    let ds = load_text("9 1:3.5", None).unwrap();
    assert_eq!(
        (ds.n, ds.d, ds.x.clone(), ds.labels.clone()),
        (1, 1, vec![3.5], Some(vec![9]))
    );
}

#[test]
fn gzip_compressed_libsvm_is_read() {
    let dir = TempDir::new();
    let path = dir.file("data.svm.gz", &gzip(b"1 2:4\n2 1:3\n"));
    let ds = load_libsvm(&path, None).unwrap();
    assert_eq!(ds.x, vec![0.0, 4.0, 3.0, 0.0]);
}

#[test]
fn index_errors_name_the_line_and_the_rule() {
    let msg = err_msg(load_text("1 1:1\n1 0:2\n", None));
    assert_mentions(
        &msg,
        &["data.libsvm", "line 2", "index 0 in `0:2`", "start at 1"],
    );
    let msg = err_msg(load_text("1 1:1\n\n1 3:1 2:2\n", None));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 3",
            "index 2 in `2:2` follows index 3",
            "increase",
        ],
    );
    let msg = err_msg(load_text("1 2:1 2:2\n", None));
    assert_mentions(&msg, &["line 1", "index 2 in `2:2` follows index 2"]);
    let msg = err_msg(load_text("1 1:1\n1 9:1\n", Some(8)));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 2",
            "index 9 in `9:1` is larger than the given dimension 8",
        ],
    );
    let msg = err_msg(load_text("1 -1:1\n", None));
    assert_mentions(&msg, &["line 1", "`-1` in `-1:1` is not a feature index"]);
}

#[test]
fn malformed_tokens_and_values_are_errors() {
    let msg = err_msg(load_text("1 1:1 oops\n", None));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 1",
            "`oops` is not an `index:value` pair",
        ],
    );
    let msg = err_msg(load_text("1 1:1\n1:2 2:3\n", None));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 2",
            "starts with the pair `1:2` instead of a label",
        ],
    );
    let msg = err_msg(load_text("1 1:1\n1 4:abc\n", None));
    assert_mentions(
        &msg,
        &["data.libsvm", "line 2, column 4: `abc` is not a number"],
    );
    let msg = err_msg(load_text("1 1:1 3:nan\n", None));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 1, column 3: NaN is not allowed; clean the data or drop the point",
        ],
    );
    let msg = err_msg(load_text("1 1:1\n0.5 1:1\n", None));
    assert_mentions(
        &msg,
        &[
            "data.libsvm",
            "line 2, column 1: label `0.5` is not an integer",
        ],
    );
}

#[test]
fn empty_inputs_are_errors() {
    let msg = err_msg(load_text("", None));
    assert_mentions(&msg, &["data.libsvm", "no data", "no data lines"]);
    let msg = err_msg(load_text("# nothing\n\n", None));
    assert_mentions(&msg, &["data.libsvm", "no data lines"]);
    let msg = err_msg(load_text("1\n2\n", None));
    assert_mentions(&msg, &["data.libsvm", "no features"]);
}

#[test]
fn a_feature_index_beyond_memory_is_refused_before_allocating() {
    // One point whose feature 10^11 would make a dense row of 800 GB (found by fuzzing: it
    // used to reach the allocator).
    let err = load_text("1 100000000000:1\n", None).unwrap_err();
    assert!(matches!(err, IoError::TooLarge { n: 1, .. }), "{err}");
    assert!(
        err.to_string().contains("too many to hold in memory"),
        "{err}"
    );
}
