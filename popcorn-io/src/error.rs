//! The error type of the data readers and writers.
//!
//! Every variant about a file names the file; parse errors also name the 1-based line (text
//! formats) or the byte offset (binary formats; for gzip files, the offset in the decompressed
//! data), then the problem and, where there is one, what to do about it.

use std::path::PathBuf;

/// An error while reading or writing a data file, or an invalid request about the data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The file could not be opened (not found, no permission, ...).
    #[error("cannot open `{}`: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Reading failed after the file was opened (including a corrupt gzip stream).
    #[error("error reading `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// Creating or writing an output file failed.
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The file holds no data points.
    #[error("`{}`: no data: {problem}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// Why there is no data (empty file, header only, zero-sized shape, ...).
        problem: String,
    },

    /// A text row has a different number of fields than the rows before it.
    #[error(
        "`{}`: line {line} has {found} values, expected {expected} (from line {reference_line}); \
         every row must have the same number of columns",
        path.display()
    )]
    Ragged {
        /// The file.
        path: PathBuf,
        /// The 1-based line of the offending row.
        line: usize,
        /// How many fields that row has.
        found: usize,
        /// How many fields were expected.
        expected: usize,
        /// The 1-based line (header or first data row) the expectation comes from.
        reference_line: usize,
    },

    /// A text line is not valid UTF-8 (often a binary file read as text).
    #[error(
        "`{}`: line {line} is not valid UTF-8 text; if this is a binary file, name its format \
         explicitly (.npy, IDX)",
        path.display()
    )]
    NotText {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
    },

    /// A field that should be a number is not one.
    #[error("`{}`: line {line}, column {column}: `{field}` is not a number", path.display())]
    NotANumber {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The 1-based column in the file (for libsvm, the feature index).
        column: usize,
        /// The offending text (shortened if very long).
        field: String,
    },

    /// A text value is NaN or infinite.
    #[error(
        "`{}`: line {line}, column {column}: {what} is not allowed; clean the data or drop the point",
        path.display()
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The 1-based column in the file (for libsvm, the feature index).
        column: usize,
        /// `NaN` or a description of the infinite value.
        what: String,
    },

    /// A binary value is NaN or infinite.
    #[error(
        "`{}`: byte offset {offset} (row {row}, column {column}): {what} is not allowed; \
         clean the data or drop the point",
        path.display()
    )]
    NonFiniteBinary {
        /// The file.
        path: PathBuf,
        /// Byte offset of the value (in the decompressed data for gzip files).
        offset: u64,
        /// The 1-based row (point).
        row: usize,
        /// The 1-based column (feature).
        column: usize,
        /// `NaN` or `an infinite value`.
        what: String,
    },

    /// A label is not an integer.
    #[error(
        "`{}`: line {line}, column {column}: label `{field}` is not an integer; labels must be \
         integers (or floats with integral values)",
        path.display()
    )]
    BadLabel {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The 1-based column in the file.
        column: usize,
        /// The offending text (shortened if very long).
        field: String,
    },

    /// A malformed libsvm line (bad `index:value` pair, index 0, decreasing indices, an index
    /// above the given dimension, missing label).
    #[error("`{}`: line {line}: {problem}", path.display())]
    Libsvm {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong and what to do.
        problem: String,
    },

    /// A binary file ended before all the data its header announces.
    #[error(
        "`{}`: truncated at byte offset {offset}: {missing} more bytes of {what} were expected; \
         the file is incomplete (download or write it again)",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the data ended (in the decompressed data for gzip files).
        offset: u64,
        /// How many more bytes were expected.
        missing: u64,
        /// What was being read (`the header`, `the data`, ...).
        what: &'static str,
    },

    /// A binary file has bytes after the data its header announces.
    #[error(
        "`{}`: unexpected data after byte offset {offset}; the header's shape does not match \
         the file's size",
        path.display()
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Where the announced data ends.
        offset: u64,
    },

    /// The first bytes of a binary file are not the expected magic number.
    #[error("`{}`: bad magic number {found} at byte offset 0; expected {expected}", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The bytes found, in hex.
        found: String,
        /// What was expected.
        expected: String,
    },

    /// A `.npy` header could not be parsed.
    #[error("`{}`: malformed .npy header at byte offset {offset}: {problem}", path.display())]
    NpyHeader {
        /// The file.
        path: PathBuf,
        /// Byte offset of the problem.
        offset: u64,
        /// What is wrong.
        problem: String,
    },

    /// A `.npy` file has an element type the reader does not support.
    #[error(
        "`{}`: unsupported .npy dtype `{dtype}`; supported: <f8, <f4, |u1 (and big-endian >f8, \
         >f4); convert with `X.astype(np.float64)` before saving",
        path.display()
    )]
    UnsupportedDtype {
        /// The file.
        path: PathBuf,
        /// The dtype descriptor found in the header.
        dtype: String,
    },

    /// A `.npy` file is stored in column-major (Fortran) order.
    #[error(
        "`{}`: fortran_order is True (column-major data); only C order is supported; save \
         `np.ascontiguousarray(X)` instead",
        path.display()
    )]
    FortranOrder {
        /// The file.
        path: PathBuf,
    },

    /// A binary file's shape or element type cannot be used as a point set.
    #[error("`{}`: {problem}", path.display())]
    BadShape {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },

    /// The data would not fit in memory (or its size overflows).
    #[error(
        "`{}`: {n} x {d} points are too many to hold in memory (the system's available \
         memory, or POPCORN_MEMORY_LIMIT); use a smaller subset",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Number of points announced.
        n: usize,
        /// Number of features announced.
        d: usize,
    },

    /// An IDX images file and its labels file disagree on the number of items.
    #[error(
        "`{}` has {n_images} images but `{}` has {n_labels} labels; pass the labels file that \
         belongs to these images",
        images.display(),
        labels.display()
    )]
    LabelCountMismatch {
        /// The images file.
        images: PathBuf,
        /// The labels file.
        labels: PathBuf,
        /// Images in the images file.
        n_images: usize,
        /// Labels in the labels file.
        n_labels: usize,
    },

    /// A writer was given buffers of inconsistent sizes.
    #[error("cannot write `{}`: {problem}", path.display())]
    LengthMismatch {
        /// The output file.
        path: PathBuf,
        /// Which sizes disagree.
        problem: String,
    },

    /// An `.npz` archive is not a readable scipy CSR matrix: not a zip archive, a member
    /// missing or unreadable, another sparse format, a dtype or shape that does not fit.
    /// (Errors inside one member's `.npy` header name it as `archive.npz/member.npy`.)
    #[error("`{}`: {member}: {problem}", path.display())]
    Npz {
        /// The archive.
        path: PathBuf,
        /// The member (such as `indices.npy`), or the part of the archive, at fault.
        member: String,
        /// What is wrong and what to do.
        problem: String,
    },

    /// A malformed graph file (Matrix Market `.mtx` or an edge list): a bad header, size
    /// line or entry, an index out of range, an unsupported kind of matrix, a count that does
    /// not match, or an edge given twice with different weights.
    #[error("`{}`: line {line}: {problem}", path.display())]
    Graph {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong and what to do.
        problem: String,
    },

    /// A CSR matrix's arrays break a rule (offsets, lengths, index order or range, a value
    /// that is not finite); see [`super::CsrMatrix::new`].
    #[error("invalid CSR matrix: {problem}")]
    InvalidCsr {
        /// What is wrong, with the row and the entry's position.
        problem: String,
    },

    /// The dense view of a sparse matrix would not fit in memory (or its size overflows);
    /// see [`super::CsrMatrix::to_dense_checked`].
    #[error(
        "a dense view of {rows} x {cols} sparse values is too large to hold in memory (the \
         system's available memory, or POPCORN_MEMORY_LIMIT); keep the points sparse or use a \
         smaller subset"
    )]
    DenseTooLarge {
        /// Rows of the sparse matrix.
        rows: usize,
        /// Columns of the sparse matrix.
        cols: usize,
    },

    /// An invalid number of clusters for the data set (see [`super::check_k`]).
    #[error("invalid number of clusters: {problem}")]
    InvalidK {
        /// Requested number of clusters.
        k: usize,
        /// Number of points.
        n: usize,
        /// What is wrong and what to do.
        problem: String,
    },
}

/// Shortens a field for an error message so that a huge garbage line does not flood the output.
pub(super) fn shorten(field: &str) -> String {
    const MAX_CHARS: usize = 40;
    if field.chars().count() <= MAX_CHARS {
        field.to_string()
    } else {
        let head: String = field.chars().take(MAX_CHARS).collect();
        format!("{head}...")
    }
}

/// Hex dump of a few bytes, for magic-number errors.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
