use super::super::test_support::{assert_mentions, err_msg, TempDir};
use super::super::*;

#[test]
fn format_is_detected_from_the_name() {
    let dir = TempDir::new();
    for (name, format) in [
        ("a.csv", Format::Csv),
        ("a.CSV.gz", Format::Csv),
        ("a.tsv", Format::Csv),
        ("a.txt", Format::Csv),
        ("a.libsvm", Format::Libsvm),
        ("a.svm.gz", Format::Libsvm),
        ("a.svmlight", Format::Libsvm),
        ("a.npy", Format::Npy),
        ("a.npy.gz", Format::Npy),
        ("train-images-idx3-ubyte.gz", Format::Idx),
        ("t10k-labels.idx1-ubyte", Format::Idx),
        ("a.idx", Format::Idx),
    ] {
        // Content that would sniff as something else proves the name decided.
        let path = dir.file(name, b"garbage");
        assert_eq!(detect_format(&path).unwrap(), format, "{name}");
    }
}

#[test]
fn format_is_sniffed_from_content_when_the_name_says_nothing() {
    let dir = TempDir::new();
    let npy = dir.file("x.data", b"\x93NUMPY\x01\x00");
    assert_eq!(detect_format(&npy).unwrap(), Format::Npy);
    let idx = dir.file("images", &[0, 0, 8, 3, 0, 0, 0, 1]);
    assert_eq!(detect_format(&idx).unwrap(), Format::Idx);
    let libsvm = dir.file("train", b"# comment\n\n+1 1:0.5 7:2\n");
    assert_eq!(detect_format(&libsvm).unwrap(), Format::Libsvm);
    let csv = dir.file("points", b"x,y\n1,2\n");
    assert_eq!(detect_format(&csv).unwrap(), Format::Csv);
    let spaces = dir.file("spaces", b"1 2 3\n");
    assert_eq!(detect_format(&spaces).unwrap(), Format::Csv);
    let empty = dir.file("empty", b"");
    assert_eq!(detect_format(&empty).unwrap(), Format::Csv);
    let missing = dir.path().join("missing");
    let msg = err_msg(detect_format(&missing));
    assert_mentions(&msg, &["cannot open", "missing"]);
}

#[test]
fn load_dispatches_and_the_override_wins() {
    let dir = TempDir::new();
    let path = dir.file("points.txt", b"1 1:4 2:5\n2 2:6\n");
    let as_libsvm = LoadOptions {
        format: Format::Libsvm,
        ..LoadOptions::default()
    };
    let ds = load(&path, &as_libsvm).unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (2, 2, vec![4.0, 5.0, 0.0, 6.0]));
    assert_eq!(ds.labels, Some(vec![1, 2]));
    let with_dim = LoadOptions {
        format: Format::Libsvm,
        libsvm_dim: Some(3),
        ..LoadOptions::default()
    };
    assert_eq!(load(&path, &with_dim).unwrap().d, 3);
    // By name it is CSV: line 1 (`1:4` is no number) is taken as a header, line 2 is short.
    let msg = err_msg(load(&path, &LoadOptions::default()));
    assert_mentions(
        &msg,
        &[
            "points.txt",
            "line 2 has 2 values, expected 3 (from line 1)",
        ],
    );
    let csv = dir.file("p.csv", b"label,a\n1,2\n");
    let ds = load(&csv, &LoadOptions::default()).unwrap();
    assert_eq!(
        (ds.x.clone(), ds.labels.clone()),
        (vec![2.0], Some(vec![1]))
    );
    let no_label = LoadOptions {
        csv: CsvOptions {
            label_column: LabelColumn::None,
            ..CsvOptions::default()
        },
        ..LoadOptions::default()
    };
    assert_eq!(load(&csv, &no_label).unwrap().x, vec![1.0, 2.0]);
}
