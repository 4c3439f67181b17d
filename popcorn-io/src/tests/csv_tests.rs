use super::super::test_support::{assert_mentions, err_msg, gzip, TempDir};
use super::super::*;

fn load_text(name: &str, text: &str, options: CsvOptions) -> Result<Dataset, IoError> {
    let dir = TempDir::new();
    let path = dir.file(name, text.as_bytes());
    load_csv(&path, &options)
}

fn auto() -> CsvOptions {
    CsvOptions::default()
}

fn with_labels(label_column: LabelColumn) -> CsvOptions {
    CsvOptions {
        label_column,
        ..CsvOptions::default()
    }
}

#[test]
fn header_with_label_first_gives_labels_and_features() {
    let ds = load_text("a.csv", "label,x,y\n1,0.5,-2\n-3,1e2,7.25\n1,0,0\n", auto()).unwrap();
    assert_eq!((ds.n, ds.d), (3, 2));
    assert_eq!(ds.x, vec![0.5, -2.0, 100.0, 7.25, 0.0, 0.0]);
    assert_eq!(ds.labels, Some(vec![1, -3, 1]));
    assert!(ds.source.ends_with("a.csv"));
}

#[test]
fn header_with_label_name_last_gives_labels_from_last_column() {
    let ds = load_text("b.csv", "f1,f2,f3,Class\n1,2,3,0\n4,5,6,2.0\n", auto()).unwrap();
    assert_eq!((ds.n, ds.d), (2, 3));
    assert_eq!(ds.x, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(ds.labels, Some(vec![0, 2]));
}

#[test]
fn auto_label_names_match_y_and_substrings_only() {
    for (name, labelled) in [
        ("y", true),
        (" Y ", true),
        ("TARGET", true),
        ("true_labels", true),
        ("class_id", true),
        ("\"label\"", true),
        ("yield", false),
        ("x", false),
        ("feature", false),
    ] {
        let text = format!("{name},v\n4,1.5\n");
        let ds = load_text("n.csv", &text, auto()).unwrap();
        if labelled {
            assert_eq!(ds.labels, Some(vec![4]), "{name}");
            assert_eq!((ds.d, ds.x.clone()), (1, vec![1.5]), "{name}");
        } else {
            assert_eq!(ds.labels, None, "{name}");
            assert_eq!((ds.d, ds.x.clone()), (2, vec![4.0, 1.5]), "{name}");
        }
    }
}

#[test]
fn x_y_header_is_two_features_but_y_first_is_a_label() {
    let ds = load_text("xy.csv", "x,y\n1,2\n3,4\n", auto()).unwrap();
    assert_eq!((ds.d, ds.labels.clone()), (2, None));
    let ds = load_text("yx.csv", "y,x\n1,2\n3,4\n", auto()).unwrap();
    assert_eq!(
        (ds.d, ds.x.clone(), ds.labels.clone()),
        (1, vec![2.0, 4.0], Some(vec![1, 3]))
    );
}

#[test]
fn header_without_label_names_gives_no_labels() {
    let ds = load_text("c.csv", "a,b\n1,2\n3,4\n5,6\n", auto()).unwrap();
    assert_eq!((ds.n, ds.d, ds.labels.clone()), (3, 2, None));
    assert_eq!(ds.x, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn no_header_and_auto_gives_no_labels() {
    let ds = load_text("d.csv", "1,2,3\n4,5,6\n", auto()).unwrap();
    assert_eq!((ds.n, ds.d, ds.labels.clone()), (2, 3, None));
    assert_eq!(ds.x, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn explicit_label_columns_on_a_headerless_file() {
    let text = "7,1.5,2.5\n8,3.5,9\n";
    let first = load_text("e.csv", text, with_labels(LabelColumn::First)).unwrap();
    assert_eq!(
        (first.d, first.x.clone(), first.labels.clone()),
        (2, vec![1.5, 2.5, 3.5, 9.0], Some(vec![7, 8]))
    );
    let text = "1.5,2.5,7\n3.5,4.5,8\n";
    let last = load_text("e.csv", text, with_labels(LabelColumn::Last)).unwrap();
    assert_eq!(
        (last.d, last.x.clone(), last.labels.clone()),
        (2, vec![1.5, 2.5, 3.5, 4.5], Some(vec![7, 8]))
    );
    let none = load_text("e.csv", text, with_labels(LabelColumn::None)).unwrap();
    assert_eq!((none.d, none.labels.clone()), (3, None));
    assert_eq!(none.x, vec![1.5, 2.5, 7.0, 3.5, 4.5, 8.0]);
}

#[test]
fn label_column_none_overrides_a_label_named_header() {
    let ds = load_text("f.csv", "label,x\n1,2\n", with_labels(LabelColumn::None)).unwrap();
    assert_eq!(
        (ds.d, ds.x.clone(), ds.labels.clone()),
        (2, vec![1.0, 2.0], None)
    );
}

#[test]
fn forced_header_and_forced_no_header() {
    let present = CsvOptions {
        header: Header::Present,
        ..auto()
    };
    let ds = load_text("g.csv", "1,2\n3,4\n", present).unwrap();
    assert_eq!((ds.n, ds.x.clone()), (1, vec![3.0, 4.0]));
    let absent = CsvOptions {
        header: Header::Absent,
        ..auto()
    };
    let msg = err_msg(load_text("g.csv", "x,y\n3,4\n", absent));
    assert_mentions(&msg, &["g.csv", "line 1, column 1", "`x` is not a number"]);
}

#[test]
fn separators_quotes_and_whitespace_are_detected() {
    let expected = vec![1.0, 2.5, -3.0, 4.0, 5.0, 6.0];
    for (name, text) in [
        ("semi.csv", "1;2.5;-3\n4;5;6\n"),
        ("tab.tsv", "1\t2.5\t-3\n4\t5\t6\n"),
        ("space.txt", "  1   2.5 -3\n4 5\t 6  \n"),
        ("quoted.csv", "\"1\", \"2.5\" ,-3\n 4 ,5,\"6\"\n"),
        ("crlf.csv", "1,2.5,-3\r\n4,5,6\r\n"),
        ("bom.csv", "\u{feff}1,2.5,-3\n4,5,6"),
        (
            "comments.csv",
            "# made by hand\n\n1,2.5,-3\n   \n# middle\n4,5,6\n\n",
        ),
    ] {
        let ds = load_text(name, text, auto()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((ds.n, ds.d), (2, 3), "{name}");
        assert_eq!(ds.x, expected, "{name}");
    }
    let forced = CsvOptions {
        separator: Separator::Semicolon,
        ..auto()
    };
    let ds = load_text("f.csv", "1;2\n3;4\n", forced).unwrap();
    assert_eq!(ds.x, vec![1.0, 2.0, 3.0, 4.0]);
    let forced = CsvOptions {
        separator: Separator::Tab,
        ..auto()
    };
    assert_eq!(
        load_text("f.csv", "1\t2\n", forced).unwrap().x,
        vec![1.0, 2.0]
    );
    let forced = CsvOptions {
        separator: Separator::Whitespace,
        ..auto()
    };
    assert_eq!(
        load_text("f.csv", "1 2\n", forced).unwrap().x,
        vec![1.0, 2.0]
    );
    let forced = CsvOptions {
        separator: Separator::Comma,
        ..auto()
    };
    assert_eq!(
        load_text("f.csv", "1,2\n", forced).unwrap().x,
        vec![1.0, 2.0]
    );
}

#[test]
fn single_value_and_odd_sizes() {
    let one = load_text("one.csv", "42\n", auto()).unwrap();
    assert_eq!((one.n, one.d, one.x.clone()), (1, 1, vec![42.0]));
    // 5 points x 3 features, values i * 3 + j.
    let mut text = String::from("p,q,r\n");
    for i in 0..5 {
        text.push_str(&format!("{},{},{}\n", i * 3, i * 3 + 1, i * 3 + 2));
    }
    let ds = load_text("odd.csv", &text, auto()).unwrap();
    assert_eq!((ds.n, ds.d), (5, 3));
    assert_eq!(ds.x, (0..15).map(f64::from).collect::<Vec<_>>());
}

#[test]
fn gzip_compressed_csv_is_read() {
    let dir = TempDir::new();
    let path = dir.file("z.csv.gz", &gzip(b"label,a\n3,0.25\n4,0.5\n"));
    let ds = load_csv(&path, &auto()).unwrap();
    assert_eq!(
        (ds.x.clone(), ds.labels.clone()),
        (vec![0.25, 0.5], Some(vec![3, 4]))
    );
}

#[test]
fn ragged_rows_name_the_line_and_the_reference_line() {
    let msg = err_msg(load_text(
        "r.csv",
        "1,2,3,4\n5,6,7,8\n\n1,2,3,4,5\n",
        auto(),
    ));
    assert_mentions(
        &msg,
        &["r.csv", "line 4 has 5 values, expected 4 (from line 1)"],
    );
    let msg = err_msg(load_text("r.csv", "# c\na,b,c,d\n1,2,3,4\n1,2,3\n", auto()));
    assert_mentions(
        &msg,
        &["r.csv", "line 4 has 3 values, expected 4 (from line 2)"],
    );
    let msg = err_msg(load_text("r.csv", "1,2\n3,4,\n", auto()));
    assert_mentions(&msg, &["line 2 has 3 values, expected 2"]);
}

#[test]
fn non_numbers_name_line_column_and_text() {
    let msg = err_msg(load_text("n.csv", "x,y\n1,2\n3,abc\n", auto()));
    assert_mentions(&msg, &["n.csv", "line 3, column 2: `abc` is not a number"]);
    let msg = err_msg(load_text("n.csv", "1,2\n3,\n", auto()));
    assert_mentions(&msg, &["n.csv", "line 2, column 2: `` is not a number"]);
}

#[test]
fn nan_and_infinity_are_rejected_with_advice() {
    let msg = err_msg(load_text("nan.csv", "x,y\n1,2\n3,NaN\n", auto()));
    assert_mentions(
        &msg,
        &[
            "nan.csv",
            "line 3, column 2: NaN is not allowed; clean the data or drop the point",
        ],
    );
    let msg = err_msg(load_text("inf.csv", "1,2\n-inf,2\n", auto()));
    assert_mentions(
        &msg,
        &[
            "inf.csv",
            "line 2, column 1",
            "infinite value `-inf` is not allowed",
        ],
    );
}

#[test]
fn bad_labels_are_rejected() {
    let msg = err_msg(load_text("l.csv", "label,x\n1,2\n1.5,3\n", auto()));
    assert_mentions(
        &msg,
        &["l.csv", "line 3, column 1: label `1.5` is not an integer"],
    );
    let msg = err_msg(load_text("l.csv", "x,target\n1,cat\n", auto()));
    assert_mentions(
        &msg,
        &["l.csv", "line 2, column 2: label `cat` is not an integer"],
    );
}

#[test]
fn empty_inputs_are_errors() {
    let msg = err_msg(load_text("empty.csv", "", auto()));
    assert_mentions(&msg, &["empty.csv", "no data", "no data rows"]);
    let msg = err_msg(load_text("blank.csv", "\n  \n# only a comment\n", auto()));
    assert_mentions(&msg, &["blank.csv", "no data rows"]);
    let msg = err_msg(load_text("header.csv", "a,b\n", auto()));
    assert_mentions(
        &msg,
        &["header.csv", "no data rows after the header on line 1"],
    );
    let msg = err_msg(load_text("onlylabel.csv", "label\n1\n", auto()));
    assert_mentions(
        &msg,
        &["onlylabel.csv", "line 1", "label column", "no features"],
    );
}

#[test]
fn missing_file_names_the_path_and_the_os_error() {
    let dir = TempDir::new();
    let path = dir.path().join("missing.csv");
    let msg = err_msg(load_csv(&path, &auto()));
    assert_mentions(&msg, &["cannot open", "missing.csv", "No such file"]);
}

#[test]
fn binary_garbage_is_reported_as_not_text() {
    let dir = TempDir::new();
    let path = dir.file("bin.csv", b"1,2\n\xff\xfe,3\n");
    let msg = err_msg(load_csv(&path, &auto()));
    assert_mentions(&msg, &["bin.csv", "line 2 is not valid UTF-8"]);
}
