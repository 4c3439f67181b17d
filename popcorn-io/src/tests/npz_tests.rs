//! `.npz` archives: fixtures written by scipy (`popcorn-io/tests/data/make_npz_fixtures.py`)
//! and archives built here with one thing wrong each.

use std::io::{Cursor, Write};
use std::path::PathBuf;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::super::test_support::{
    assert_mentions, dict, err_msg, f64_le, gzip, npy_bytes, TempDir,
};
use super::super::*;

/// A fixture of `popcorn-io/tests/data/`.
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The 4 x 5 matrix of the fixtures `csr_f64.npz` and `csr_f32_i64_stored.npz` (row 1 empty).
fn check_fixture_matrix(x: &CsrMatrix) {
    assert_eq!((x.rows(), x.cols(), x.nnz()), (4, 5, 6));
    assert_eq!(x.row_ptr(), &[0, 2, 2, 4, 6]);
    assert_eq!(x.col_idx(), &[0, 3, 1, 4, 0, 2]);
    assert_eq!(x.values(), &[1.0, 2.5, -3.0, 4.0, 0.5, 6.0]);
}

#[test]
fn scipy_csr_deflated_float64_int32() {
    let path = fixture("csr_f64.npz");
    let ds = load_npz(&path).unwrap();
    check_fixture_matrix(&ds.x);
    assert_eq!((ds.labels, ds.source), (None, path));
}

#[test]
fn scipy_csr_array_stored_float32_int64() {
    // A csr_array (with scipy's `_is_array.npy`), entries stored without compression.
    let ds = load_npz(fixture("csr_f32_i64_stored.npz")).unwrap();
    check_fixture_matrix(&ds.x);
}

#[test]
fn scipy_unsorted_indices_are_sorted_and_duplicates_summed() {
    // Row 0 stores columns 3, 0, 3 (values 2, 1, 0.5); row 1 is empty.
    let ds = load_npz(fixture("csr_unsorted.npz")).unwrap();
    assert_eq!((ds.n(), ds.d()), (2, 4));
    assert_eq!(ds.x.row_ptr(), &[0, 2, 2]);
    assert_eq!(ds.x.col_idx(), &[0, 3]);
    assert_eq!(ds.x.values(), &[1.0, 2.5]);
}

#[test]
fn scipy_csc_is_refused_with_how_to_convert() {
    let msg = err_msg(load_npz(fixture("csc.npz")));
    assert_mentions(&msg, &["csc.npz", "format.npy", "CSC matrix", "X.tocsr()"]);
}

#[test]
fn detected_by_name_and_content_and_loaded_dense_or_sparse() {
    let dir = TempDir::new();
    let bytes = std::fs::read(fixture("csr_f64.npz")).unwrap();
    let unnamed = dir.file("points.bin", &bytes);
    assert_eq!(detect_format(&unnamed).unwrap(), Format::Npz);
    assert_eq!(detect_format(&fixture("csc.npz")).unwrap(), Format::Npz);
    assert!(Format::Npz.is_sparse() && Format::Libsvm.is_sparse() && !Format::Npy.is_sparse());
    let dense = load(&unnamed, &LoadOptions::default()).unwrap();
    assert_eq!((dense.n, dense.d, dense.labels), (4, 5, None));
    assert_eq!(
        dense.x,
        vec![
            1.0, 0.0, 0.0, 2.5, 0.0, //
            0.0, 0.0, 0.0, 0.0, 0.0, //
            0.0, -3.0, 0.0, 0.0, 4.0, //
            0.5, 0.0, 6.0, 0.0, 0.0,
        ]
    );
    let sparse = load_sparse(&unnamed, &LoadOptions::default()).unwrap();
    check_fixture_matrix(&sparse.x);
    // A dense format read through load_sparse is converted.
    let csv = dir.file("p.csv", b"1,0,2\n0,0,3\n");
    let from_csv = load_sparse(&csv, &LoadOptions::default()).unwrap();
    assert_eq!(
        (
            from_csv.x.row_ptr(),
            from_csv.x.col_idx(),
            from_csv.x.values()
        ),
        (&[0, 2, 3][..], &[0, 2, 2][..], &[1.0, 2.0, 3.0][..])
    );
}

/// A zip archive of `members`, stored (no compression) as `np.savez` writes them.
fn archive(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    for (name, bytes) in members {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

fn i32_npy(values: &[i32]) -> Vec<u8> {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    npy_bytes(
        1,
        &dict("<i4", false, &format!("({},)", values.len())),
        &data,
    )
}

fn i64_npy(values: &[i64]) -> Vec<u8> {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    npy_bytes(
        1,
        &dict("<i8", false, &format!("({},)", values.len())),
        &data,
    )
}

fn f64_npy(values: &[f64]) -> Vec<u8> {
    npy_bytes(
        1,
        &dict("<f8", false, &format!("({},)", values.len())),
        &f64_le(values),
    )
}

fn format_npy(format: &str) -> Vec<u8> {
    npy_bytes(
        1,
        &dict(&format!("|S{}", format.len()), false, "()"),
        format.as_bytes(),
    )
}

/// The members of a valid 2 x 3 CSR matrix [[1, 0, 2], [0, 3, 0]].
fn valid_members() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("format.npy", format_npy("csr")),
        ("shape.npy", i64_npy(&[2, 3])),
        ("indptr.npy", i32_npy(&[0, 2, 3])),
        ("indices.npy", i32_npy(&[0, 2, 1])),
        ("data.npy", f64_npy(&[1.0, 2.0, 3.0])),
    ]
}

/// The valid members with `name` replaced by `bytes` (or left out for `None`).
fn with_member(name: &str, bytes: Option<Vec<u8>>) -> Vec<u8> {
    let members: Vec<(&str, Vec<u8>)> = valid_members()
        .into_iter()
        .filter_map(|(n, b)| match (n == name, &bytes) {
            (false, _) => Some((n, b)),
            (true, Some(replacement)) => Some((n, replacement.clone())),
            (true, None) => None,
        })
        .collect();
    archive(&members)
}

fn load_archive(bytes: &[u8]) -> Result<SparseDataset, IoError> {
    let dir = TempDir::new();
    load_npz(dir.file("x.npz", bytes))
}

#[test]
fn hand_built_archive_reads() {
    let ds = load_archive(&archive(&valid_members())).unwrap();
    assert_eq!(ds.x.to_dense(), Some(vec![1.0, 0.0, 2.0, 0.0, 3.0, 0.0]));
    // `<U3` text for the format, as np.savez writes a Python str.
    let utf32: Vec<u8> = "csr"
        .chars()
        .flat_map(|c| (c as u32).to_le_bytes())
        .collect();
    let unicode = npy_bytes(1, &dict("<U3", false, "()"), &utf32);
    let ds = load_archive(&with_member("format.npy", Some(unicode))).unwrap();
    assert_eq!(ds.x.nnz(), 3);
}

#[test]
fn missing_members_are_named() {
    let msg = err_msg(load_archive(&with_member("indices.npy", None)));
    assert_mentions(
        &msg,
        &["x.npz", "indices.npy: missing", "scipy.sparse.save_npz"],
    );
    // np.savez of a dense array.
    let dense = archive(&[("arr_0.npy", f64_npy(&[1.0, 2.0]))]);
    let msg = err_msg(load_archive(&dense));
    assert_mentions(&msg, &["format.npy: missing"]);
}

#[test]
fn other_formats_and_bad_format_members_are_refused() {
    let msg = err_msg(load_archive(&with_member(
        "format.npy",
        Some(format_npy("coo")),
    )));
    assert_mentions(&msg, &["format.npy", "COO matrix", "CSR only", "X.tocsr()"]);
    let msg = err_msg(load_archive(&with_member(
        "format.npy",
        Some(format_npy("abc")),
    )));
    assert_mentions(&msg, &["format.npy", "unknown sparse format `abc`"]);
    let msg = err_msg(load_archive(&with_member(
        "format.npy",
        Some(f64_npy(&[1.0])),
    )));
    assert_mentions(&msg, &["format.npy", "dtype `<f8`", "string"]);
}

#[test]
fn dtypes_are_checked_per_member() {
    let int_data = i64_npy(&[1, 2, 3]);
    let msg = err_msg(load_archive(&with_member("data.npy", Some(int_data))));
    assert_mentions(&msg, &["data.npy", "dtype `<i8`", "float32 or float64"]);
    let float_indices = f64_npy(&[0.0, 2.0, 1.0]);
    let msg = err_msg(load_archive(&with_member(
        "indices.npy",
        Some(float_indices),
    )));
    assert_mentions(&msg, &["indices.npy", "dtype `<f8`", "int32 or int64"]);
    let two_d = npy_bytes(1, &dict("<i4", false, "(1, 3)"), &[0; 12]);
    let msg = err_msg(load_archive(&with_member("indptr.npy", Some(two_d))));
    assert_mentions(&msg, &["indptr.npy", "shape [1, 3]", "one-dimensional"]);
    // float32 data and big-endian int64 indices are read.
    let f32_data: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut members = valid_members();
    members[4].1 = npy_bytes(1, &dict("<f4", false, "(3,)"), &f32_data);
    let be: Vec<u8> = [0i64, 2, 1].iter().flat_map(|v| v.to_be_bytes()).collect();
    members[3].1 = npy_bytes(1, &dict(">i8", false, "(3,)"), &be);
    let ds = load_archive(&archive(&members)).unwrap();
    assert_eq!(ds.x.col_idx(), &[0, 2, 1]);
    assert_eq!(ds.x.values(), &[1.0, 2.0, 3.0]);
}

#[test]
fn shapes_and_lengths_must_agree() {
    let msg = err_msg(load_archive(&with_member("shape.npy", Some(i64_npy(&[6])))));
    assert_mentions(&msg, &["shape.npy", "1 dimensions", "2-D matrix"]);
    let msg = err_msg(load_archive(&with_member(
        "shape.npy",
        Some(i64_npy(&[2, -3])),
    )));
    assert_mentions(&msg, &["shape.npy", "entry 1 is -3", "negative"]);
    let msg = err_msg(load_archive(&with_member(
        "shape.npy",
        Some(i64_npy(&[0, 3])),
    )));
    assert_mentions(&msg, &["x.npz", "no data", "0 x 3"]);
    let msg = err_msg(load_archive(&with_member(
        "indptr.npy",
        Some(i32_npy(&[0, 3])),
    )));
    assert_mentions(
        &msg,
        &["indptr.npy", "2 row offsets for the 2 rows", "rows + 1 = 3"],
    );
    let msg = err_msg(load_archive(&with_member(
        "indices.npy",
        Some(i32_npy(&[0, 2])),
    )));
    assert_mentions(&msg, &["indices.npy", "2 column indices", "3 values"]);
    let msg = err_msg(load_archive(&with_member(
        "indices.npy",
        Some(i32_npy(&[0, -1, 1])),
    )));
    assert_mentions(&msg, &["indices.npy", "entry 1 is -1", "negative"]);
}

#[test]
fn csr_rules_are_checked_with_the_row() {
    let msg = err_msg(load_archive(&with_member(
        "indices.npy",
        Some(i32_npy(&[0, 2, 7])),
    )));
    assert_mentions(
        &msg,
        &[
            "x.npz",
            "indptr.npy, indices.npy, data.npy",
            "row 1",
            "column index 7",
            "3",
        ],
    );
    let nan = f64_npy(&[1.0, f64::NAN, 3.0]);
    let msg = err_msg(load_archive(&with_member("data.npy", Some(nan))));
    assert_mentions(&msg, &["row 0", "position 1", "not finite"]);
    let msg = err_msg(load_archive(&with_member(
        "indptr.npy",
        Some(i32_npy(&[0, 3, 2])),
    )));
    assert_mentions(&msg, &["row offsets"]);
}

#[test]
fn a_truncated_or_padded_member_is_named_by_its_path() {
    let short = npy_bytes(1, &dict("<f8", false, "(3,)"), &f64_le(&[1.0, 2.0]));
    let msg = err_msg(load_archive(&with_member("data.npy", Some(short))));
    assert_mentions(&msg, &["x.npz/data.npy", "truncated", "8 more bytes"]);
    let long = npy_bytes(
        1,
        &dict("<f8", false, "(3,)"),
        &f64_le(&[1.0, 2.0, 3.0, 4.0]),
    );
    let msg = err_msg(load_archive(&with_member("data.npy", Some(long))));
    assert_mentions(&msg, &["x.npz/data.npy", "unexpected data"]);
    let msg = err_msg(load_archive(&with_member(
        "indptr.npy",
        Some(b"not npy".to_vec()),
    )));
    assert_mentions(&msg, &["x.npz/indptr.npy", "truncated"]);
    let msg = err_msg(load_archive(&with_member("indptr.npy", Some(vec![0; 16]))));
    assert_mentions(&msg, &["x.npz/indptr.npy", "bad magic"]);
}

#[test]
fn broken_archives_are_refused() {
    let msg = err_msg(load_archive(b"1,2,3\n4,5,6\n"));
    assert_mentions(
        &msg,
        &["x.npz", "the archive", "not a readable zip archive"],
    );
    let msg = err_msg(load_archive(&[]));
    assert_mentions(&msg, &["not a readable zip archive"]);
    let gzipped = gzip(&std::fs::read(fixture("csr_f64.npz")).unwrap());
    let msg = err_msg(load_archive(&gzipped));
    assert_mentions(&msg, &["gzip-compressed", "gunzip"]);
    // A stored member whose bytes changed after its CRC was written.
    let mut bytes = archive(&valid_members());
    let marker = f64_le(&[3.0]);
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_slice())
        .unwrap();
    bytes[at + 7] ^= 0x01;
    let msg = err_msg(load_archive(&bytes));
    assert_mentions(&msg, &["data.npy", "cannot be read", "corrupt"]);
    let missing = TempDir::new().path().join("none.npz");
    assert_mentions(&err_msg(load_npz(&missing)), &["cannot open", "none.npz"]);
}
