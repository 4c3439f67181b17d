use super::super::test_support::{assert_mentions, err_msg, TempDir};
use super::super::*;

#[test]
fn labeled_csv_has_one_point_a_line_and_reads_back_exactly() {
    let dir = TempDir::new();
    let path = dir.path().join("out.csv");
    let x = [1.0, -0.5, 0.1, 1e300, 3.0, 2.0 / 3.0];
    write_labeled_csv(&path, &[2, 0, 7], &x, 3, 2).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, "2,1.0,-0.5\n0,0.1,1e300\n7,3.0,0.6666666666666666\n");
    let options = CsvOptions {
        label_column: LabelColumn::First,
        ..CsvOptions::default()
    };
    let back = load_csv(&path, &options).unwrap();
    assert_eq!((back.n, back.d), (3, 2));
    assert_eq!(back.x, x.to_vec());
    assert_eq!(back.labels, Some(vec![2, 0, 7]));
}

#[test]
fn labeled_csv_with_one_point_of_one_feature() {
    let dir = TempDir::new();
    let path = dir.path().join("one.csv");
    write_labeled_csv(&path, &[4], &[-2.5], 1, 1).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "4,-2.5\n");
}

#[test]
fn labels_file_has_one_label_a_line() {
    let dir = TempDir::new();
    let path = dir.path().join("labels.txt");
    write_labels(&path, &[3, 0, 4294967295]).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "3\n0\n4294967295\n"
    );
    write_labels(&path, &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
}

#[test]
fn inconsistent_sizes_and_unwritable_paths_are_errors() {
    let dir = TempDir::new();
    let path = dir.path().join("out.csv");
    let msg = err_msg(write_labeled_csv(&path, &[1, 2], &[0.0; 6], 3, 2));
    assert_mentions(&msg, &["out.csv", "2 labels given for n = 3 points"]);
    let msg = err_msg(write_labeled_csv(&path, &[1, 2, 3], &[0.0; 5], 3, 2));
    assert_mentions(&msg, &["out.csv", "5 coordinates given for n x d = 3 x 2"]);
    let nowhere = dir.path().join("no-such-dir").join("out.csv");
    let msg = err_msg(write_labels(&nowhere, &[1]));
    assert_mentions(&msg, &["cannot write", "no-such-dir", "No such file"]);
}
