//! Format selection and the one-call loader.

use std::path::{Path, PathBuf};

use super::csv::{load_csv, CsvOptions};
use super::dataset::Dataset;
use super::error::IoError;
use super::idx::{find_idx_labels, load_idx};
use super::input::read_head;
use super::libsvm::{load_libsvm, load_libsvm_sparse};
use super::npy::load_npy;
use super::npz::{load_npz, ZIP_MAGIC};
use super::sparse::{CsrMatrix, SparseDataset};

/// The file format of a data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Chosen by [`detect_format`].
    #[default]
    Auto,
    /// Delimited text (see [`load_csv`]).
    Csv,
    /// libsvm / svmlight text (see [`super::load_libsvm`]).
    Libsvm,
    /// NumPy `.npy` (see [`super::load_npy`]).
    Npy,
    /// IDX, as MNIST (see [`load_idx`]).
    Idx,
    /// scipy sparse `.npz`, CSR (see [`super::load_npz`]).
    Npz,
}

impl Format {
    /// Whether files of this format hold sparse points (libsvm, `.npz`): [`load_sparse`]
    /// reads them without densifying.
    pub fn is_sparse(self) -> bool {
        matches!(self, Format::Libsvm | Format::Npz)
    }
}

/// Where the labels of an IDX images file come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IdxLabels {
    /// The sibling labels file found by [`find_idx_labels`], if it exists; else no labels.
    #[default]
    Sibling,
    /// No labels.
    None,
    /// This labels file.
    File(PathBuf),
}

/// Options of [`load`]; the default detects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadOptions {
    /// The file format.
    pub format: Format,
    /// Options used when the file is delimited text.
    pub csv: CsvOptions,
    /// Number of features of a libsvm file (`None`: the largest index).
    pub libsvm_dim: Option<usize>,
    /// Labels of an IDX images file.
    pub idx_labels: IdxLabels,
}

/// Loads a data set in any supported format (each may be gzip-compressed, except `.npz`, a
/// zip archive); sparse formats are densified under the memory budget.
pub fn load(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Dataset, IoError> {
    let path = path.as_ref();
    match resolve_format(path, options.format)? {
        Format::Auto | Format::Csv => load_csv(path, &options.csv),
        Format::Libsvm => load_libsvm(path, options.libsvm_dim),
        Format::Npy => load_npy(path),
        Format::Npz => load_npz(path)?.to_dense(),
        Format::Idx => {
            let labels = match &options.idx_labels {
                IdxLabels::Sibling => find_idx_labels(path),
                IdxLabels::None => None,
                IdxLabels::File(labels) => Some(labels.clone()),
            };
            load_idx(path, labels.as_deref())
        }
    }
}

/// Loads a data set as a CSR matrix: libsvm and `.npz` files as stored, never densified
/// ([`Format::is_sparse`]); the other formats read dense and converted
/// ([`CsrMatrix::from_dense`]).
pub fn load_sparse(
    path: impl AsRef<Path>,
    options: &LoadOptions,
) -> Result<SparseDataset, IoError> {
    let path = path.as_ref();
    match resolve_format(path, options.format)? {
        Format::Libsvm => load_libsvm_sparse(path, options.libsvm_dim),
        Format::Npz => load_npz(path),
        dense => {
            let options = LoadOptions {
                format: dense,
                ..options.clone()
            };
            let ds = load(path, &options)?;
            Ok(SparseDataset {
                x: CsrMatrix::from_dense(ds.n, ds.d, &ds.x)?,
                labels: ds.labels,
                source: ds.source,
            })
        }
    }
}

/// `chosen`, or the detected format of `path` for [`Format::Auto`].
fn resolve_format(path: &Path, chosen: Format) -> Result<Format, IoError> {
    match chosen {
        Format::Auto => detect_format(path),
        chosen => Ok(chosen),
    }
}

/// The format of `path` (never [`Format::Auto`]).
///
/// By name first, ignoring case and a trailing `.gz`: `.csv`, `.tsv`, `.txt` -> CSV;
/// `.libsvm`, `.svm`, `.svmlight` -> libsvm; `.npy` -> NumPy; `.npz` -> scipy sparse; `.idx`,
/// a name ending in `ubyte` or containing `idx1`/`idx3` -> IDX. Otherwise by content: the
/// `.npy` magic, the zip magic (`PK 03 04`, `.npz`), an IDX magic (`00 00 08 0D`), a first data line whose tokens after the first are all `index:value` pairs
/// (libsvm), else CSV. Fails only if an unrecognised file cannot be read.
pub fn detect_format(path: &Path) -> Result<Format, IoError> {
    if let Some(format) = format_from_name(path) {
        return Ok(format);
    }
    Ok(format_from_content(&read_head(path, 4096)?))
}

fn format_from_name(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    let ends = |suffixes: &[&str]| suffixes.iter().any(|s| name.ends_with(s));
    if ends(&[".csv", ".tsv", ".txt"]) {
        Some(Format::Csv)
    } else if ends(&[".libsvm", ".svm", ".svmlight"]) {
        Some(Format::Libsvm)
    } else if ends(&[".npy"]) {
        Some(Format::Npy)
    } else if ends(&[".npz"]) {
        Some(Format::Npz)
    } else if ends(&[".idx", "ubyte"]) || name.contains("idx1") || name.contains("idx3") {
        Some(Format::Idx)
    } else {
        None
    }
}

fn format_from_content(head: &[u8]) -> Format {
    if head.starts_with(b"\x93NUMPY") {
        return Format::Npy;
    }
    if head.starts_with(ZIP_MAGIC) {
        return Format::Npz;
    }
    if head.len() >= 4 && head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] > 0 {
        return Format::Idx;
    }
    let text = String::from_utf8_lossy(head);
    let first_data_line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let is_libsvm = first_data_line.is_some_and(|line| {
        let mut tokens = line
            .split('#')
            .next()
            .unwrap_or("")
            .split_ascii_whitespace();
        let label = tokens.next();
        let pairs: Vec<&str> = tokens.collect();
        label.is_some_and(|l| !l.contains(':'))
            && !pairs.is_empty()
            && pairs.iter().all(|t| t.contains(':'))
    });
    if is_libsvm {
        Format::Libsvm
    } else {
        Format::Csv
    }
}
