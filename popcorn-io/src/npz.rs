//! scipy sparse `.npz` reader: the archive `scipy.sparse.save_npz` writes (a zip of the `.npy`
//! members `data`, `indices`, `indptr`, `shape` and `format`, stored or deflated), read as a
//! CSR matrix.
//!
//! Rules:
//! - `format.npy` must name `csr`; CSC, COO, BSR and DIA archives are refused with how to
//!   convert them (`X.tocsr()`).
//! - `data.npy`: float32 or float64, one dimension, finite; `indices.npy` and `indptr.npy`:
//!   int32 or int64, one dimension, not negative; `shape.npy`: two integers (rows, columns).
//! - Column indices may be unsorted and repeat within a row, as scipy allows: they are sorted
//!   and duplicates summed (scipy's `sum_duplicates`); then the CSR rules of
//!   [`CsrMatrix::new`] hold.
//! - Other members (scipy's `_is_array.npy`) are ignored. An `.npz` file has no labels.
//!
//! Errors name the archive and the member at fault ([`IoError::Npz`]); an error inside a
//! member's `.npy` header names it as `archive.npz/member.npy`.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use zip::result::ZipError;
use zip::ZipArchive;

use super::error::IoError;
use super::input::{fits_memory_budget, read_error};
use super::npy::{parse_in_memory, RawArray};
use super::sparse::{CsrMatrix, SparseDataset};

/// The local file header signature every zip archive (so every `.npz`) starts with.
pub(super) const ZIP_MAGIC: &[u8; 4] = b"PK\x03\x04";

/// What a scipy sparse archive holds, for errors about a member that is missing.
const MEMBERS: &str = "an archive of scipy.sparse.save_npz holds data.npy, indices.npy, \
                       indptr.npy, shape.npy and format.npy";

/// The member named for problems found across the three CSR arrays.
const CSR_MEMBERS: &str = "the CSR arrays (indptr.npy, indices.npy, data.npy)";

type Archive = ZipArchive<BufReader<File>>;

/// Loads a scipy sparse `.npz` archive (`scipy.sparse.save_npz` of a CSR matrix) as a CSR
/// matrix without labels, never densified. See the module documentation for the rules.
///
/// # Errors
/// [`IoError::Npz`] naming the member and the problem; [`IoError::Empty`] for a shape without
/// rows or columns; [`IoError::Open`] / [`IoError::Read`] when the file cannot be read; a
/// member's malformed `.npy` header as the `.npy` reader reports it.
pub fn load_npz(path: impl AsRef<Path>) -> Result<SparseDataset, IoError> {
    let path = path.as_ref();
    let mut archive = open_archive(path)?;
    member(&mut archive, path, "format.npy", check_format)?;
    let (rows, cols) = member(&mut archive, path, "shape.npy", read_shape)?;
    if rows == 0 || cols == 0 {
        return Err(IoError::Empty {
            path: path.to_path_buf(),
            problem: format!("shape.npy says {rows} x {cols}: the matrix holds no points"),
        });
    }
    let indptr = member(&mut archive, path, "indptr.npy", read_indices)?;
    let indices = member(&mut archive, path, "indices.npy", read_indices)?;
    let data = member(&mut archive, path, "data.npy", read_values)?;
    let npz = |member: &str, problem: String| IoError::Npz {
        path: path.to_path_buf(),
        member: member.to_string(),
        problem,
    };
    if indptr.len() != rows + 1 {
        return Err(npz(
            "indptr.npy",
            format!(
                "{} row offsets for the {rows} rows of shape.npy; a CSR matrix has rows + 1 = {}",
                indptr.len(),
                rows + 1
            ),
        ));
    }
    if indices.len() != data.len() {
        return Err(npz(
            "indices.npy",
            format!(
                "{} column indices but data.npy holds {} values; there is one index per value",
                indices.len(),
                data.len()
            ),
        ));
    }
    let x = CsrMatrix::from_unsorted(rows, cols, indptr, indices, data).map_err(|e| match e {
        IoError::InvalidCsr { problem } => npz(CSR_MEMBERS, problem),
        other => other,
    })?;
    Ok(SparseDataset {
        x,
        labels: None,
        source: path.to_path_buf(),
    })
}

/// Opens `path` as a zip archive; a gzip-compressed file is refused with what to do.
fn open_archive(path: &Path) -> Result<Archive, IoError> {
    let mut file = File::open(path).map_err(|source| IoError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let mut magic = [0u8; 2];
    let got = file
        .read(&mut magic)
        .map_err(|source| read_error(path, source))?;
    let npz = |problem: String| IoError::Npz {
        path: path.to_path_buf(),
        member: "the archive".into(),
        problem,
    };
    if got == 2 && magic == [0x1f, 0x8b] {
        return Err(npz(
            "it is gzip-compressed; an .npz is a zip archive, compressed already (save_npz's \
             default): decompress it with gunzip first"
                .into(),
        ));
    }
    file.rewind().map_err(|source| read_error(path, source))?;
    ZipArchive::new(BufReader::new(file)).map_err(|e| match e {
        ZipError::Io(source) => read_error(path, source),
        other => npz(format!(
            "not a readable zip archive ({other}); {MEMBERS} (a dense array belongs in a .npy \
             file, np.save)"
        )),
    })
}

/// Reads the member `name` whole, parses its `.npy` header and hands it to `decode` with the
/// member's path (`archive.npz/name`) for its errors.
fn member<T>(
    archive: &mut Archive,
    path: &Path,
    name: &str,
    decode: impl FnOnce(&RawArray<'_>, &Path) -> Result<T, Decode>,
) -> Result<T, IoError> {
    let bytes = member_bytes(archive, path, name)?;
    let member_path = path.join(name);
    let raw = parse_in_memory(&bytes, &member_path)?;
    decode(&raw, &member_path).map_err(|e| match e {
        Decode::Problem(problem) => IoError::Npz {
            path: path.to_path_buf(),
            member: name.to_string(),
            problem,
        },
        Decode::Io(e) => e,
    })
}

/// The uncompressed bytes of the member `name` (its CRC checked by the zip reader).
fn member_bytes(archive: &mut Archive, path: &Path, name: &str) -> Result<Vec<u8>, IoError> {
    let npz = |problem: String| IoError::Npz {
        path: path.to_path_buf(),
        member: name.to_string(),
        problem,
    };
    let mut entry = archive.by_name(name).map_err(|e| match e {
        ZipError::FileNotFound => npz(format!("missing; {MEMBERS}")),
        ZipError::Io(source) => read_error(path, source),
        other => npz(format!("cannot be read: {other}")),
    })?;
    let size = entry.size();
    let too_large = || {
        npz(format!(
            "its {size} bytes do not fit in the memory available (or POPCORN_MEMORY_LIMIT)"
        ))
    };
    let capacity = usize::try_from(size).map_err(|_| too_large())?;
    if !fits_memory_budget(size) {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(capacity).map_err(|_| too_large())?;
    entry.read_to_end(&mut bytes).map_err(|e| {
        npz(format!(
            "cannot be read ({e}); the archive is corrupt or incomplete"
        ))
    })?;
    Ok(bytes)
}

/// Why a member could not be decoded.
enum Decode {
    /// Its content does not fit; [`member`] names the archive and the member.
    Problem(String),
    /// Its data could not be read (as the `.npy` reader reports it).
    Io(IoError),
}

impl From<IoError> for Decode {
    fn from(e: IoError) -> Self {
        Decode::Io(e)
    }
}

fn problem(text: String) -> Decode {
    Decode::Problem(text)
}

/// `format.npy` must be the string `csr`.
fn check_format(raw: &RawArray<'_>, _: &Path) -> Result<(), Decode> {
    let Some(format) = raw.text() else {
        return Err(problem(format!(
            "dtype `{}` of shape {:?}; expected the sparse format's name as a string (`csr`)",
            raw.descr, raw.shape
        )));
    };
    match format.as_str() {
        "csr" => Ok(()),
        "csc" | "coo" | "bsr" | "dia" | "dok" | "lil" => Err(problem(format!(
            "the archive holds a {} matrix; popcorn reads CSR only: save it with \
             scipy.sparse.save_npz(path, X.tocsr())",
            format.to_ascii_uppercase()
        ))),
        other => Err(problem(format!(
            "unknown sparse format `{other}`; popcorn reads CSR archives of \
             scipy.sparse.save_npz"
        ))),
    }
}

/// Checks that the array has one dimension.
fn one_dimension(raw: &RawArray<'_>) -> Result<(), Decode> {
    if raw.shape.len() == 1 {
        Ok(())
    } else {
        Err(problem(format!(
            "shape {:?}; expected a one-dimensional array",
            raw.shape
        )))
    }
}

/// Non-negative integers of a 1-D int32 or int64 array (`indptr.npy`, `indices.npy`).
fn read_indices(raw: &RawArray<'_>, member_path: &Path) -> Result<Vec<usize>, Decode> {
    one_dimension(raw)?;
    let Some(values) = raw.ints(member_path)? else {
        return Err(problem(format!(
            "dtype `{}`; index arrays must be int32 or int64 (<i4, <i8), as scipy writes them",
            raw.descr
        )));
    };
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            usize::try_from(v)
                .map_err(|_| problem(format!("entry {i} is {v}; it cannot be negative")))
        })
        .collect()
}

/// The values of a 1-D float32 or float64 array (`data.npy`); finiteness is checked with the
/// CSR rules, which name the row.
fn read_values(raw: &RawArray<'_>, member_path: &Path) -> Result<Vec<f64>, Decode> {
    one_dimension(raw)?;
    raw.floats(member_path)?.ok_or_else(|| {
        problem(format!(
            "dtype `{}`; the values must be float32 or float64: save X.astype(np.float64)",
            raw.descr
        ))
    })
}

/// `(rows, columns)` from `shape.npy`: two non-negative integers.
fn read_shape(raw: &RawArray<'_>, member_path: &Path) -> Result<(usize, usize), Decode> {
    let dims = read_indices(raw, member_path)?;
    match dims[..] {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(problem(format!(
            "{} dimensions {dims:?}; a point set is a 2-D matrix (n points x d features)",
            dims.len()
        ))),
    }
}
