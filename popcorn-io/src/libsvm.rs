//! libsvm / svmlight reader: `label index:value index:value ...` per line.
//!
//! Rules:
//! - Tokens are separated by spaces or tabs; everything after `#` is a comment; blank lines
//!   are skipped (line numbers in errors still count them).
//! - The label comes first and must be an integer (or a float with an integral value, such as
//!   `+1` or `1.0`). A `qid:N` token (ranking data) is ignored.
//! - Feature indices are 1-based and strictly increasing within a line; missing features are 0.
//! - `d` is the given dimension, else the largest index in the file. An index above a given
//!   dimension is an error.
//! - In errors, `column` is the feature index.

use std::path::Path;

use super::dataset::Dataset;
use super::error::IoError;
use super::input::open_input;
use super::sparse::{CsrMatrix, SparseDataset};
use super::text::{parse_label, parse_value, LineReader};

/// Loads a libsvm file (gzip-compressed or not) as dense points with labels (see
/// [`load_libsvm_sparse`] for the rules; the dense view is checked against the memory budget).
///
/// `dim` fixes the number of features (files of a train/test split may not both use the
/// largest index); `None` infers it as the largest index present.
pub fn load_libsvm(path: impl AsRef<Path>, dim: Option<usize>) -> Result<Dataset, IoError> {
    load_libsvm_sparse(path, dim)?.to_dense()
}

/// Loads a libsvm file (gzip-compressed or not) as a CSR matrix with labels, never densified:
/// memory grows with the stored entries, not with `n x d`. Feature `j` (1-based in the file)
/// is column `j - 1`.
///
/// `dim` fixes the number of features; `None` infers it as the largest index present.
pub fn load_libsvm_sparse(
    path: impl AsRef<Path>,
    dim: Option<usize>,
) -> Result<SparseDataset, IoError> {
    let path = path.as_ref();
    let mut lines = LineReader::new(open_input(path)?, path);
    let mut labels = Vec::new();
    // Sparse rows: the entries of row i are col_idx/values[row_ptr[i]..row_ptr[i + 1]].
    let mut col_idx: Vec<usize> = Vec::new();
    let mut values: Vec<f64> = Vec::new();
    let mut row_ptr = vec![0usize];
    let mut max_index = 0usize;
    while let Some((line_no, text)) = lines.next_line()? {
        let content = text.split('#').next().unwrap_or("");
        let mut tokens = content.split_ascii_whitespace();
        let Some(label) = tokens.next() else { continue };
        let libsvm_error = |problem: String| IoError::Libsvm {
            path: path.to_path_buf(),
            line: line_no,
            problem,
        };
        if label.contains(':') {
            return Err(libsvm_error(format!(
                "the line starts with the pair `{label}` instead of a label; every libsvm line \
                 starts with an integer label"
            )));
        }
        labels.push(parse_label(label, path, line_no, 1)?);
        let mut previous = 0usize;
        for token in tokens {
            let Some((index_text, value_text)) = token.split_once(':') else {
                return Err(libsvm_error(format!(
                    "`{token}` is not an `index:value` pair"
                )));
            };
            if index_text == "qid" {
                continue;
            }
            let index: usize = index_text.parse().map_err(|_| {
                libsvm_error(format!(
                    "`{index_text}` in `{token}` is not a feature index (a positive integer)"
                ))
            })?;
            if index == 0 {
                return Err(libsvm_error(format!(
                    "index 0 in `{token}`; libsvm feature indices start at 1"
                )));
            }
            if index <= previous {
                return Err(libsvm_error(format!(
                    "index {index} in `{token}` follows index {previous}; indices must strictly \
                     increase within a line (sort them and merge duplicates)"
                )));
            }
            if let Some(dim) = dim.filter(|&dim| index > dim) {
                return Err(libsvm_error(format!(
                    "index {index} in `{token}` is larger than the given dimension {dim}; pass a \
                     larger dimension or none to infer it"
                )));
            }
            let value = parse_value(value_text, path, line_no, index)?;
            col_idx.push(index - 1);
            values.push(value);
            previous = index;
        }
        max_index = max_index.max(previous);
        row_ptr.push(values.len());
    }
    let n = labels.len();
    let empty = |problem: &str| IoError::Empty {
        path: path.to_path_buf(),
        problem: problem.to_string(),
    };
    if n == 0 {
        return Err(empty("the file has no data lines"));
    }
    let d = dim.unwrap_or(max_index);
    if d == 0 {
        return Err(empty("no line has an `index:value` pair and no dimension was given, so there are no features"));
    }
    Ok(SparseDataset {
        x: CsrMatrix::new(n, d, row_ptr, col_idx, values)?,
        labels: Some(labels),
        source: path.to_path_buf(),
    })
}
