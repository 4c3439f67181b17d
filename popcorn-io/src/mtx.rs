//! Matrix Market reader (`.mtx`, the SuiteSparse collection's format) into a [`CsrMatrix`].
//!
//! Rules:
//! - The first line is the banner `%%MatrixMarket matrix coordinate FIELD SYMMETRY` (words in
//!   any case); FIELD is `real`, `integer` or `pattern` (every stored entry 1), SYMMETRY is
//!   `general` or `symmetric`. `array` (dense) files, `complex` values and `skew-symmetric` or
//!   `hermitian` matrices are errors naming the word.
//! - Lines starting with `%` after the banner are comments; blank lines are skipped.
//! - The size line `rows cols entries` comes next, then exactly `entries` lines `i j [value]`
//!   with 1-based indices.
//! - A `symmetric` file stores one triangle: each entry off the diagonal is also stored
//!   mirrored (`(i, j)` and `(j, i)`). An entry given twice is summed (as scipy's `mmread`).
//! - Errors ([`IoError::Graph`]) name the 1-based line.

use std::path::Path;

use super::error::{shorten, IoError};
use super::input::open_input;
use super::sparse::CsrMatrix;
use super::text::{parse_value, LineReader};

/// The values of a Matrix Market file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Real,
    Pattern,
}

/// Loads a Matrix Market coordinate file (gzip-compressed or not) as a CSR matrix; see the
/// module's rules. A `symmetric` file comes back with both triangles.
///
/// # Errors
/// [`IoError::Graph`] naming the line for a malformed banner, size line or entry, an index out
/// of range, an unsupported kind of matrix or a wrong number of entries; [`IoError::Open`] /
/// [`IoError::Read`] for the file; [`IoError::NotANumber`] / [`IoError::NonFinite`] for values.
pub fn load_mtx(path: impl AsRef<Path>) -> Result<CsrMatrix, IoError> {
    let path = path.as_ref();
    let mut lines = LineReader::new(open_input(path)?, path);
    let error = |line: usize, problem: String| IoError::Graph {
        path: path.to_path_buf(),
        line,
        problem,
    };
    let Some((line_no, banner)) = lines.next_line()? else {
        return Err(IoError::Empty {
            path: path.to_path_buf(),
            problem: "the file is empty; a Matrix Market file starts with a \
                      `%%MatrixMarket matrix coordinate ...` line"
                .into(),
        });
    };
    let (field, symmetric) = parse_banner(banner).map_err(|p| error(line_no, p))?;
    // The size line: the first line that is neither a comment nor blank.
    let (rows, cols, entries, size_line) = loop {
        let Some((line_no, text)) = lines.next_line()? else {
            return Err(error(
                line_no,
                "the file ends before the size line `rows cols entries`".into(),
            ));
        };
        let text = text.trim();
        if text.is_empty() || text.starts_with('%') {
            continue;
        }
        let numbers: Vec<&str> = text.split_ascii_whitespace().collect();
        let parsed: Option<Vec<usize>> = numbers.iter().map(|t| t.parse().ok()).collect();
        match parsed.as_deref() {
            Some(&[r, c, e]) => break (r, c, e, line_no),
            _ => {
                return Err(error(
                    line_no,
                    format!(
                        "`{}` is not a size line `rows cols entries` (three non-negative integers)",
                        shorten(text)
                    ),
                ))
            }
        }
    };
    if symmetric && rows != cols {
        return Err(error(
            size_line,
            format!("a symmetric matrix must be square, the size line says {rows} x {cols}"),
        ));
    }
    let mut triplets: Vec<(usize, usize, f64)> = Vec::with_capacity(entries.saturating_mul(2));
    let mut seen = 0usize;
    let mut last_line = size_line;
    while let Some((line_no, text)) = lines.next_line()? {
        last_line = line_no;
        let text = text.trim();
        if text.is_empty() || text.starts_with('%') {
            continue;
        }
        if seen == entries {
            return Err(error(
                line_no,
                format!("more entries than the {entries} the size line announces"),
            ));
        }
        let tokens: Vec<&str> = text.split_ascii_whitespace().collect();
        let wanted = if field == Field::Pattern { 2 } else { 3 };
        if tokens.len() != wanted {
            return Err(error(
                line_no,
                format!(
                    "`{}` has {} fields; a {} entry is `i j{}`",
                    shorten(text),
                    tokens.len(),
                    if field == Field::Pattern {
                        "pattern"
                    } else {
                        "coordinate"
                    },
                    if field == Field::Pattern {
                        ""
                    } else {
                        " value"
                    }
                ),
            ));
        }
        let index = |t: &str, what: &str, size: usize| -> Result<usize, IoError> {
            match t.parse::<usize>() {
                Ok(i) if (1..=size).contains(&i) => Ok(i - 1),
                Ok(i) => Err(error(
                    line_no,
                    format!("{what} index {i} is outside 1..={size} (indices are 1-based)"),
                )),
                Err(_) => Err(error(
                    line_no,
                    format!("`{}` is not a {what} index", shorten(t)),
                )),
            }
        };
        let i = index(tokens[0], "row", rows)?;
        let j = index(tokens[1], "column", cols)?;
        let v = match field {
            Field::Pattern => 1.0,
            Field::Real => parse_value(tokens[2], path, line_no, 3)?,
        };
        triplets.push((i, j, v));
        if symmetric && i != j {
            triplets.push((j, i, v));
        }
        seen += 1;
    }
    if seen != entries {
        return Err(error(
            last_line,
            format!("the file ends after {seen} entries; the size line announces {entries}"),
        ));
    }
    from_triplets(rows, cols, triplets)
}

/// The field and whether the matrix is symmetric, from the banner line.
fn parse_banner(banner: &str) -> Result<(Field, bool), String> {
    let words: Vec<String> = banner
        .split_ascii_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let shape = "a Matrix Market file starts with `%%MatrixMarket matrix coordinate \
                 real|integer|pattern general|symmetric`";
    if words.first().map(String::as_str) != Some("%%matrixmarket") {
        return Err(format!("`{}` is not a banner; {shape}", shorten(banner)));
    }
    if words.len() != 5 || words[1] != "matrix" {
        return Err(format!(
            "the banner `{}` is incomplete; {shape}",
            shorten(banner)
        ));
    }
    if words[2] != "coordinate" {
        return Err(format!(
            "`{}` matrices are not supported, only `coordinate` (sparse) ones",
            words[2]
        ));
    }
    let field = match words[3].as_str() {
        "real" | "integer" | "double" => Field::Real,
        "pattern" => Field::Pattern,
        other => {
            return Err(format!(
                "the field `{other}` is not supported; use real, integer or pattern"
            ))
        }
    };
    let symmetric = match words[4].as_str() {
        "general" => false,
        "symmetric" => true,
        other => {
            return Err(format!(
                "the symmetry `{other}` is not supported; use general or symmetric"
            ))
        }
    };
    Ok((field, symmetric))
}

/// A CSR matrix from `(row, column, value)` triplets in any order; repeated positions summed.
pub(super) fn from_triplets(
    rows: usize,
    cols: usize,
    mut triplets: Vec<(usize, usize, f64)>,
) -> Result<CsrMatrix, IoError> {
    triplets.sort_by_key(|&(i, _, _)| i);
    let mut row_ptr = vec![0usize; rows + 1];
    for &(i, _, _) in &triplets {
        row_ptr[i + 1] += 1;
    }
    for r in 0..rows {
        row_ptr[r + 1] += row_ptr[r];
    }
    let col_idx = triplets.iter().map(|t| t.1).collect();
    let values = triplets.iter().map(|t| t.2).collect();
    CsrMatrix::from_unsorted(rows, cols, row_ptr, col_idx, values)
}

#[cfg(test)]
#[path = "tests/graph_tests.rs"]
mod tests;
