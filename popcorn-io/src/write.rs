//! Writers for clustering results.
//!
//! Numbers are written in Rust's shortest round-trip form (`{:?}`: `1.0`, `0.1`, `1e300`), so
//! reading the file back gives the exact same `f64` values.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::error::IoError;

/// Writes one point a line: the point's label, then its `d` coordinates, comma-separated, with
/// no header (`3,0.5,-1.25`). `x` is row-major `n x d`; `labels` has `n` entries.
///
/// The file reads back with [`super::load_csv`] and [`super::LabelColumn::First`].
pub fn write_labeled_csv(
    path: impl AsRef<Path>,
    labels: &[u32],
    x: &[f64],
    n: usize,
    d: usize,
) -> Result<(), IoError> {
    let path = path.as_ref();
    let mismatch = |problem: String| IoError::LengthMismatch {
        path: path.to_path_buf(),
        problem,
    };
    if labels.len() != n {
        return Err(mismatch(format!(
            "{} labels given for n = {n} points",
            labels.len()
        )));
    }
    if n.checked_mul(d) != Some(x.len()) {
        return Err(mismatch(format!(
            "{} coordinates given for n x d = {n} x {d} points",
            x.len()
        )));
    }
    write_lines(path, |out| {
        // Format each line into a reused String, then write it in one call.
        let mut line = String::new();
        for (i, &label) in labels.iter().enumerate() {
            line.clear();
            // Formatting into a String cannot fail.
            let _ = write!(line, "{label}");
            for &value in &x[i * d..(i + 1) * d] {
                line.push(',');
                push_value(&mut line, value);
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
        Ok(())
    })
}

/// Appends `value` as `{:?}` would write it. Integral values below 10^16 (pixel values,
/// counts) take a faster integer path that gives the same text (`255.0`).
fn push_value(line: &mut String, value: f64) {
    const INTEGER_PATH_LIMIT: f64 = 1e16;
    // Formatting into a String cannot fail.
    if value.fract() == 0.0
        && value.abs() < INTEGER_PATH_LIMIT
        && !(value == 0.0 && value.is_sign_negative())
    {
        let _ = write!(line, "{}.0", value as i64);
    } else {
        let _ = write!(line, "{value:?}");
    }
}

/// Writes one label a line.
pub fn write_labels(path: impl AsRef<Path>, labels: &[u32]) -> Result<(), IoError> {
    write_lines(path.as_ref(), |out| {
        for label in labels {
            writeln!(out, "{label}")?;
        }
        Ok(())
    })
}

/// Creates `path`, runs `body` on a buffered writer, flushes, and names the file in errors.
fn write_lines(
    path: &Path,
    body: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), IoError> {
    let error = |source| IoError::Write {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(error)?;
    let mut out = BufWriter::with_capacity(1 << 16, file);
    body(&mut out).map_err(error)?;
    out.flush().map_err(error)
}

#[cfg(test)]
mod tests {
    use super::push_value;

    #[test]
    fn push_value_matches_debug_formatting() {
        let values = [
            0.0,
            -0.0,
            1.0,
            -3.0,
            255.0,
            0.1,
            -2.5,
            1e15,
            9.999_999_999_999_998e15,
            1e16,
            -1e16,
            1e300,
            1e-7,
            2.0 / 3.0,
            f64::MAX,
            f64::MIN_POSITIVE,
        ];
        for value in values {
            let mut line = String::new();
            push_value(&mut line, value);
            assert_eq!(line, format!("{value:?}"), "{value:e}");
        }
    }
}
