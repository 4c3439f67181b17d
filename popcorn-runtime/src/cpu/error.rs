//! The error type of the CPU primitives and the shape checks every primitive runs first.

use thiserror::Error;

/// Why a CPU primitive refused to run. Every primitive validates its arguments before it reads
/// or writes anything, so on error no output has been touched.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CpuError {
    /// A dense operand's slice, leading dimension or length does not fit the stated dimensions.
    #[error("shape error in operand `{operand}`: {detail}")]
    Shape {
        /// The operand at fault (`"A"`, `"C"`, `"x"`, `input 2 (`dist`)`, ...).
        operand: String,
        /// What is wrong and what was expected.
        detail: String,
    },
    /// A CSR matrix is malformed.
    #[error("invalid CSR matrix `{operand}`: {detail}")]
    InvalidCsr {
        /// The sparse operand at fault.
        operand: String,
        /// What is wrong.
        detail: String,
    },
    /// A cluster label is not below the number of clusters.
    #[error("label {label} at position {position} is out of range: there are only {k} clusters (labels must be < {k})")]
    LabelOutOfRange {
        /// Index of the offending label in the label vector.
        position: usize,
        /// The offending label.
        label: u32,
        /// The number of clusters.
        k: usize,
    },
    /// A `Pick` reduction's index is not below the number of columns.
    #[error("pick index {index} for row {row} is out of range: the iteration space has only {cols} columns")]
    PickOutOfRange {
        /// The row whose index is out of range.
        row: usize,
        /// The offending index.
        index: u32,
        /// The number of columns of the iteration space.
        cols: usize,
    },
    /// A size exceeds what an index type can hold (CSR indices are `i32`, label outputs `u32`).
    #[error(
        "{what} is {value}, which exceeds the limit {limit} of its index type; split the problem"
    )]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its value.
        value: usize,
        /// The largest allowed value.
        limit: usize,
    },
    /// A fused kernel spec is inconsistent with itself or with the arguments passed to it.
    #[error("fused kernel: {0}")]
    Fused(String),
}

/// Checks that `len` elements can hold a `rows x cols` row-major matrix with leading dimension
/// `ld` (`ld >= cols` is required whenever the matrix is non-empty) and returns the number of
/// elements it spans: `(rows - 1) * ld + cols`, or 0 for an empty matrix.
pub(crate) fn check_matrix(
    operand: &str,
    len: usize,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<usize, CpuError> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    let shape_err = |detail: String| CpuError::Shape {
        operand: operand.to_string(),
        detail,
    };
    if ld < cols {
        return Err(shape_err(format!(
            "leading dimension {ld} is smaller than the row width {cols} of a {rows}x{cols} matrix; \
             pass ld >= {cols}"
        )));
    }
    if isize::try_from(ld).is_err() {
        return Err(shape_err(format!(
            "leading dimension {ld} does not fit a pointer offset"
        )));
    }
    let needed = (rows - 1)
        .checked_mul(ld)
        .and_then(|v| v.checked_add(cols))
        .ok_or_else(|| {
            shape_err(format!(
                "a {rows}x{cols} matrix with ld {ld} overflows usize"
            ))
        })?;
    if len < needed {
        return Err(shape_err(format!(
            "slice has {len} elements but a {rows}x{cols} matrix with leading dimension {ld} \
             needs at least {needed}"
        )));
    }
    Ok(needed)
}

/// Checks that a vector slice has at least `needed` elements.
pub(crate) fn check_vector(operand: &str, len: usize, needed: usize) -> Result<(), CpuError> {
    if len < needed {
        return Err(CpuError::Shape {
            operand: operand.to_string(),
            detail: format!("slice has {len} elements but at least {needed} are needed"),
        });
    }
    Ok(())
}
