//! Line-by-line reading and number parsing shared by the text formats (CSV, libsvm).

use std::io::BufRead;
use std::path::Path;

use super::error::{shorten, IoError};
use super::input::read_error;

/// Reads a text file one line at a time into a reused buffer (no allocation per line).
pub(super) struct LineReader<'p> {
    reader: Box<dyn BufRead>,
    bytes: Vec<u8>,
    line: usize,
    path: &'p Path,
}

impl<'p> LineReader<'p> {
    /// Wraps an opened input.
    pub(super) fn new(reader: Box<dyn BufRead>, path: &'p Path) -> Self {
        Self {
            reader,
            bytes: Vec::with_capacity(4096),
            line: 0,
            path,
        }
    }

    /// The next line as `(1-based line number, text without the line ending)`, or `None` at
    /// the end of the file. A UTF-8 byte-order mark at the start of the file is dropped.
    pub(super) fn next_line(&mut self) -> Result<Option<(usize, &str)>, IoError> {
        self.bytes.clear();
        let got = self
            .reader
            .read_until(b'\n', &mut self.bytes)
            .map_err(|e| read_error(self.path, e))?;
        if got == 0 {
            return Ok(None);
        }
        self.line += 1;
        let mut bytes = &self.bytes[..];
        if self.line == 1 {
            bytes = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF][..]).unwrap_or(bytes);
        }
        while let Some((&last, rest)) = bytes.split_last() {
            if last == b'\n' || last == b'\r' {
                bytes = rest;
            } else {
                break;
            }
        }
        let text = std::str::from_utf8(bytes).map_err(|_| IoError::NotText {
            path: self.path.to_path_buf(),
            line: self.line,
        })?;
        Ok(Some((self.line, text)))
    }
}

/// Parses one numeric field (already trimmed) into a finite `f64`.
pub(super) fn parse_value(
    field: &str,
    path: &Path,
    line: usize,
    column: usize,
) -> Result<f64, IoError> {
    let value: f64 = field.parse().map_err(|_| IoError::NotANumber {
        path: path.to_path_buf(),
        line,
        column,
        field: shorten(field),
    })?;
    if value.is_finite() {
        return Ok(value);
    }
    let what = if value.is_nan() {
        "NaN".to_string()
    } else {
        format!("the infinite value `{}`", shorten(field))
    };
    Err(IoError::NonFinite {
        path: path.to_path_buf(),
        line,
        column,
        what,
    })
}

/// Parses one label field (already trimmed): an integer, or a float with an integral value
/// (such as `3.0` or `1e2`) that fits in `i64`.
pub(super) fn parse_label(
    field: &str,
    path: &Path,
    line: usize,
    column: usize,
) -> Result<i64, IoError> {
    if let Ok(label) = field.parse::<i64>() {
        return Ok(label);
    }
    // 2^63 as f64; any finite float below it in magnitude converts to i64 exactly.
    const I64_RANGE: f64 = 9_223_372_036_854_775_808.0;
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v.fract() == 0.0 && (-I64_RANGE..I64_RANGE).contains(&v) => {
            Ok(v as i64)
        }
        _ => Err(IoError::BadLabel {
            path: path.to_path_buf(),
            line,
            column,
            field: shorten(field),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_value_accepts_common_spellings_and_rejects_the_rest() {
        let p = Path::new("f.csv");
        assert_eq!(parse_value("1.5", p, 1, 1).unwrap(), 1.5);
        assert_eq!(parse_value("-2e-3", p, 1, 1).unwrap(), -2e-3);
        assert_eq!(parse_value("+7", p, 1, 1).unwrap(), 7.0);
        assert_eq!(parse_value(".5", p, 1, 1).unwrap(), 0.5);
        let nan = parse_value("nan", p, 3, 2).unwrap_err().to_string();
        assert!(
            nan.contains("`f.csv`: line 3, column 2: NaN is not allowed"),
            "{nan}"
        );
        let inf = parse_value("-inf", p, 4, 1).unwrap_err().to_string();
        assert!(
            inf.contains("line 4, column 1: the infinite value `-inf` is not allowed"),
            "{inf}"
        );
        let overflow = parse_value("1e400", p, 4, 1).unwrap_err().to_string();
        assert!(overflow.contains("infinite value `1e400`"), "{overflow}");
        let abc = parse_value("abc", p, 3, 2).unwrap_err().to_string();
        assert!(
            abc.contains("line 3, column 2: `abc` is not a number"),
            "{abc}"
        );
        let empty = parse_value("", p, 3, 2).unwrap_err().to_string();
        assert!(empty.contains("`` is not a number"), "{empty}");
    }

    #[test]
    fn parse_label_accepts_integral_floats_only() {
        let p = Path::new("f.csv");
        assert_eq!(parse_label("-3", p, 1, 1).unwrap(), -3);
        assert_eq!(parse_label("+1", p, 1, 1).unwrap(), 1);
        assert_eq!(parse_label("2.0", p, 1, 1).unwrap(), 2);
        assert_eq!(parse_label("1e2", p, 1, 1).unwrap(), 100);
        for bad in ["1.5", "nan", "inf", "cat", "1e30"] {
            let msg = parse_label(bad, p, 5, 1).unwrap_err().to_string();
            assert!(
                msg.contains(&format!(
                    "line 5, column 1: label `{bad}` is not an integer"
                )),
                "{msg}"
            );
        }
    }

    #[test]
    fn shorten_caps_long_fields() {
        let long = "x".repeat(100);
        let short = shorten(&long);
        assert_eq!(short.len(), 43);
        assert!(short.ends_with("..."));
    }
}
