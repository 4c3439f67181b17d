use super::super::test_support::{
    assert_mentions, dict, err_msg, f64_le, gzip, npy_bytes, TempDir,
};
use super::super::*;

fn load_bytes(bytes: &[u8]) -> Result<Dataset, IoError> {
    let dir = TempDir::new();
    let path = dir.file("x.npy", bytes);
    load_npy(&path)
}

#[test]
fn f8_little_endian_version_1() {
    let values = [1.0, -2.5, 3.25, 1e-300, 0.0, 7.0];
    let ds = load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(3, 2)"),
        &f64_le(&values),
    ))
    .unwrap();
    assert_eq!((ds.n, ds.d, ds.labels.clone()), (3, 2, None));
    assert_eq!(ds.x, values.to_vec());
}

#[test]
fn f4_version_2_and_u1_version_3() {
    let values = [0.5f32, -1.25, 3.0];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ds = load_bytes(&npy_bytes(2, &dict("<f4", false, "(1, 3)"), &data)).unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (1, 3, vec![0.5, -1.25, 3.0]));
    let ds = load_bytes(&npy_bytes(
        3,
        &dict("|u1", false, "(2, 2)"),
        &[0, 255, 7, 128],
    ))
    .unwrap();
    assert_eq!(
        (ds.n, ds.d, ds.x.clone()),
        (2, 2, vec![0.0, 255.0, 7.0, 128.0])
    );
}

#[test]
fn big_endian_floats() {
    let data: Vec<u8> = [1.5f64, -4.0]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    let ds = load_bytes(&npy_bytes(1, &dict(">f8", false, "(2, 1)"), &data)).unwrap();
    assert_eq!(ds.x, vec![1.5, -4.0]);
    let data: Vec<u8> = [2.5f32, 8.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let ds = load_bytes(&npy_bytes(1, &dict(">f4", false, "(1, 2)"), &data)).unwrap();
    assert_eq!(ds.x, vec![2.5, 8.0]);
}

#[test]
fn one_dimensional_is_n_by_1_and_higher_dimensions_flatten() {
    let ds = load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(3,)"),
        &f64_le(&[1.0, 2.0, 3.0]),
    ))
    .unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (3, 1, vec![1.0, 2.0, 3.0]));
    let values: Vec<f64> = (0..12).map(f64::from).collect();
    let ds = load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(2, 3, 2)"),
        &f64_le(&values),
    ))
    .unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (2, 6, values));
}

#[test]
fn header_variants_key_order_double_quotes_and_long_ints() {
    let header = "{\"shape\": (2L, 1L), \"fortran_order\": False, \"descr\": \"<f8\"}";
    let ds = load_bytes(&npy_bytes(1, header, &f64_le(&[5.0, 6.0]))).unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (2, 1, vec![5.0, 6.0]));
    let header = "{'descr':'<f8','fortran_order':False,'shape':(1,1)}";
    let ds = load_bytes(&npy_bytes(1, header, &f64_le(&[9.0]))).unwrap();
    assert_eq!(ds.x, vec![9.0]);
}

#[test]
fn gzip_compressed_npy_is_read() {
    let dir = TempDir::new();
    let bytes = npy_bytes(1, &dict("<f8", false, "(1, 2)"), &f64_le(&[1.0, 2.0]));
    let path = dir.file("x.npy.gz", &gzip(&bytes));
    assert_eq!(load_npy(&path).unwrap().x, vec![1.0, 2.0]);
}

#[test]
fn bad_magic_and_version() {
    let msg = err_msg(load_bytes(b"PK\x03\x04 not numpy at all"));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "bad magic number 50 4b 03 04 20 6e at byte offset 0",
            "NUMPY",
        ],
    );
    let mut bytes = npy_bytes(1, &dict("<f8", false, "(1, 1)"), &f64_le(&[1.0]));
    bytes[6] = 4;
    let msg = err_msg(load_bytes(&bytes));
    assert_mentions(
        &msg,
        &["x.npy", "byte offset 6", "version 4.0 is not supported"],
    );
}

#[test]
fn fortran_order_and_unsupported_dtypes_are_named() {
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f8", true, "(2, 2)"),
        &f64_le(&[0.0; 4]),
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "fortran_order is True",
            "only C order",
            "ascontiguousarray",
        ],
    );
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<i8", false, "(1, 1)"),
        &[0; 8],
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "unsupported .npy dtype `<i8`",
            "astype(np.float64)",
        ],
    );
    let header = "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }";
    let msg = err_msg(load_bytes(&npy_bytes(1, header, &[0; 8])));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "malformed .npy header at byte offset",
            "structured dtypes",
        ],
    );
}

#[test]
fn truncated_and_oversized_data_name_the_offset() {
    // The preamble and padded header take 128 bytes; 2 x 2 f8 need 32 data bytes, give 20.
    let bytes = npy_bytes(1, &dict("<f8", false, "(2, 2)"), &[0u8; 20]);
    assert_eq!(bytes.len(), 148);
    let msg = err_msg(load_bytes(&bytes));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "truncated at byte offset 148",
            "12 more bytes of the array data",
        ],
    );
    let bytes = npy_bytes(1, &dict("<f8", false, "(1, 1)"), &[0u8; 9]);
    let msg = err_msg(load_bytes(&bytes));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "unexpected data after byte offset 136",
            "shape does not match",
        ],
    );
    let msg = err_msg(load_bytes(b"\x93NUMPY\x01\x00\x40"));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "truncated at byte offset 9",
            "1 more bytes of the .npy header length",
        ],
    );
    let mut bytes = npy_bytes(1, &dict("<f8", false, "(1, 1)"), &[]);
    bytes.truncate(30);
    let msg = err_msg(load_bytes(&bytes));
    assert_mentions(
        &msg,
        &["x.npy", "truncated at byte offset 30", "the .npy header"],
    );
}

#[test]
fn nan_and_infinity_name_offset_row_and_column() {
    let values = [1.0, 2.0, 3.0, f64::NAN];
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(2, 2)"),
        &f64_le(&values),
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "byte offset 152 (row 2, column 2): NaN is not allowed",
            "drop the point",
        ],
    );
    let values = [f32::INFINITY];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f4", false, "(1, 1)"),
        &data,
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "byte offset 128 (row 1, column 1): an infinite value is not allowed",
        ],
    );
}

#[test]
fn degenerate_shapes_are_errors() {
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "()"),
        &f64_le(&[1.0]),
    )));
    assert_mentions(&msg, &["x.npy", "0-dimensional", "(n, d)"]);
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(0, 3)"),
        &[],
    )));
    assert_mentions(&msg, &["x.npy", "no data", "shape (0, 3) holds no points"]);
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        &dict("<f8", false, "(4, 0)"),
        &[],
    )));
    assert_mentions(&msg, &["shape (4, 0) holds no points"]);
    let huge = dict("<f8", false, "(99999999999, 99999999999)");
    let msg = err_msg(load_bytes(&npy_bytes(1, &huge, &[])));
    assert_mentions(&msg, &["x.npy", "too many to hold in memory"]);
}

#[test]
fn malformed_headers_name_the_offset() {
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        "{'descr': '<f8', 'shape': (1, 1)}",
        &f64_le(&[1.0]),
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "malformed .npy header",
            "`fortran_order` is missing",
        ],
    );
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        "{'descr': '<f8', 'fortran_order': Maybe, 'shape': (1,)}",
        &[],
    )));
    // `{'descr': '<f8', 'fortran_order': ` is 34 bytes, the header starts at byte 10.
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "malformed .npy header at byte offset 44",
            "expected True or False",
        ],
    );
    let msg = err_msg(load_bytes(&npy_bytes(
        1,
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1, x)}",
        &[],
    )));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "malformed .npy header",
            "expected a non-negative integer",
        ],
    );
    let msg = err_msg(load_bytes(&npy_bytes(1, "not a dict", &[])));
    assert_mentions(
        &msg,
        &[
            "x.npy",
            "malformed .npy header at byte offset 10",
            "expected `{`",
        ],
    );
}

#[test]
fn headers_announcing_more_than_the_file_holds_are_refused_before_allocating() {
    // A 100000 x 100000 f8 array (80 GB) announced by a file of a few hundred bytes: plain, it
    // is truncated; gzipped, it cannot expand that far.
    let bytes = npy_bytes(
        1,
        &dict("<f8", false, "(100000, 100000)"),
        &f64_le(&[1.0, 2.0]),
    );
    let err = load_bytes(&bytes).unwrap_err();
    assert!(matches!(err, IoError::Truncated { .. }), "{err}");
    let dir = TempDir::new();
    let path = dir.file("big.npy.gz", &gzip(&bytes));
    let err = load_npy(&path).unwrap_err();
    assert!(matches!(err, IoError::BadShape { .. }), "{err}");
    assert!(err.to_string().contains("expands to at most"), "{err}");
}

/// A block of rows of a plain and of a gzip-compressed file, f8 and f4: exactly those rows of
/// the whole file (none, the first, the middle, the last, all); a range past the end, and a
/// non-finite value inside the rows (named by its row of the whole file), are errors; a
/// non-finite value outside the rows is not read.
#[test]
fn blocks_of_rows_are_those_rows_of_the_file() {
    let dir = TempDir::new();
    let (n, d) = (7, 3);
    let values: Vec<f64> = (0..n * d).map(|i| i as f64 * 0.5 - 3.0).collect();
    let f8 = npy_bytes(1, &dict("<f8", false, "(7, 3)"), &f64_le(&values));
    let f4_data: Vec<u8> = values
        .iter()
        .flat_map(|v| (*v as f32).to_le_bytes())
        .collect();
    let f4 = npy_bytes(2, &dict("<f4", false, "(7, 3)"), &f4_data);
    for (name, bytes) in [
        ("x.npy", f8.clone()),
        ("x.npy.gz", gzip(&f8)),
        ("y.npy", f4.clone()),
        ("y.npy.gz", gzip(&f4)),
    ] {
        let path = dir.file(name, &bytes);
        assert_eq!(npy_shape(&path).unwrap(), (n, d), "{name}");
        let whole = load_npy(&path).unwrap().x;
        for rows in [0..0, 0..1, 2..5, 6..7, 0..7] {
            let got = load_npy_rows(&path, rows.clone()).unwrap();
            assert_eq!(
                got,
                whole[rows.start * d..rows.end * d].to_vec(),
                "{name} {rows:?}"
            );
        }
        let msg = err_msg(load_npy_rows(&path, 5..8));
        assert_mentions(&msg, &[name, "rows 5..8", "7 rows"]);
    }
    let mut bad = values.clone();
    bad[4 * d + 1] = f64::NAN; // row 5, column 2 of the file
    let path = dir.file(
        "bad.npy",
        &npy_bytes(1, &dict("<f8", false, "(7, 3)"), &f64_le(&bad)),
    );
    let msg = err_msg(load_npy_rows(&path, 3..6));
    assert_mentions(&msg, &["bad.npy", "row 5", "column 2", "NaN"]);
    assert_eq!(
        load_npy_rows(&path, 0..4).unwrap(),
        values[..4 * d].to_vec(),
        "the NaN lies after the rows read"
    );
}
