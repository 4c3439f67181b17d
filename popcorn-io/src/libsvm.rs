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
use super::input::{alloc_points, open_input};
use super::text::{parse_label, parse_value, LineReader};

/// Loads a libsvm file (gzip-compressed or not) as dense points with labels.
///
/// `dim` fixes the number of features (files of a train/test split may not both use the
/// largest index); `None` infers it as the largest index present.
pub fn load_libsvm(path: impl AsRef<Path>, dim: Option<usize>) -> Result<Dataset, IoError> {
    let path = path.as_ref();
    let mut lines = LineReader::new(open_input(path)?, path);
    let mut labels = Vec::new();
    // Sparse rows: the entries of row i are entries[row_ends[i - 1]..row_ends[i]].
    let mut entries: Vec<(usize, f64)> = Vec::new();
    let mut row_ends = Vec::new();
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
            entries.push((index, value));
            previous = index;
        }
        max_index = max_index.max(previous);
        row_ends.push(entries.len());
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
    let mut x = alloc_points(path, n, d)?;
    x.resize(n * d, 0.0);
    let mut start = 0;
    for (row, &end) in row_ends.iter().enumerate() {
        for &(index, value) in &entries[start..end] {
            x[row * d + index - 1] = value;
        }
        start = end;
    }
    Ok(Dataset {
        n,
        d,
        x,
        labels: Some(labels),
        source: path.to_path_buf(),
    })
}
