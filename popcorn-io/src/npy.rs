//! NumPy `.npy` reader (format versions 1.0, 2.0 and 3.0).
//!
//! Supported: dtypes `<f8`, `<f4`, `|u1` (also big-endian `>f8`, `>f4`), C order only.
//! Shapes: `(n, d)` as is; `(n,)` as `n` points of one feature; `(n, a, b, ...)` as `n` points
//! of `a * b * ...` features (each item flattened in C order, as for IDX images). Float data
//! must be finite. A `.npy` file has no labels. Gzip-compressed files are read too.
//!
//! The members of an `.npz` archive are parsed from memory by [`parse_in_memory`] (header
//! only) and decoded by [`RawArray`]'s methods, with the header rules above.

use std::io::Read;
use std::path::Path;

use super::dataset::Dataset;
use super::error::{hex, IoError};
use super::input::{
    alloc_points, check_payload, expect_end, open_input_sniffed, read_exact_at, read_section_chunk,
};

/// The six bytes every `.npy` file starts with.
const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Largest header accepted; numpy's own headers are a few hundred bytes.
const MAX_HEADER_BYTES: usize = 1 << 20;

/// Values converted per read.
const CHUNK_VALUES: usize = 1 << 16;

/// An opened `.npy` file read as points: its reader (at the data), element type, shape and
/// where the data starts.
struct Matrix {
    reader: Box<dyn std::io::BufRead>,
    /// Whether the file is plain (not gzip-compressed): readable from any offset.
    plain: bool,
    elem: Element,
    n: usize,
    d: usize,
    data_offset: u64,
}

/// A `.npy` matrix's header, checked: element type, points shape, where the data starts.
fn open_matrix(path: &Path) -> Result<Matrix, IoError> {
    let (mut reader, plain) = open_input_sniffed(path)?;
    let (header, data_offset) = read_header(&mut reader, path)?;
    let elem = Element::from_descr(&header.descr).ok_or_else(|| IoError::UnsupportedDtype {
        path: path.to_path_buf(),
        dtype: header.descr.clone(),
    })?;
    if header.fortran_order {
        return Err(IoError::FortranOrder {
            path: path.to_path_buf(),
        });
    }
    let (n, d) = points_shape(&header.shape, path)?;
    let data_bytes = n
        .checked_mul(d)
        .and_then(|t| t.checked_mul(elem.size()))
        .ok_or_else(|| IoError::TooLarge {
            path: path.to_path_buf(),
            n,
            d,
        })?;
    check_payload(path, data_offset, data_bytes as u64, "the array data")?;
    Ok(Matrix {
        reader,
        plain,
        elem,
        n,
        d,
        data_offset,
    })
}

/// Decodes values `first..first + count` of the data (row-major, `d` per row) from `reader`,
/// which stands at value `first`, into `out`; a non-finite value is an error naming its row
/// and column.
#[allow(clippy::too_many_arguments)]
fn read_values(
    reader: &mut dyn Read,
    path: &Path,
    elem: Element,
    data_offset: u64,
    (first, count, total): (usize, usize, usize),
    d: usize,
    out: &mut Vec<f64>,
) -> Result<(), IoError> {
    let size = elem.size();
    let mut bytes = vec![0u8; CHUNK_VALUES.min(count.max(1)) * size];
    let mut done = 0usize;
    while done < count {
        let step = CHUNK_VALUES.min(count - done);
        let chunk = &mut bytes[..step * size];
        let at_value = first + done;
        let offset = data_offset + (at_value * size) as u64;
        read_section_chunk(
            reader,
            chunk,
            data_offset,
            (at_value * size) as u64,
            (total * size) as u64,
            path,
            "the array data",
        )?;
        for (i, raw) in chunk.chunks_exact(size).enumerate() {
            let value = elem.decode(raw);
            if !value.is_finite() {
                let at = at_value + i;
                return Err(IoError::NonFiniteBinary {
                    path: path.to_path_buf(),
                    offset: offset + (i * size) as u64,
                    row: at / d + 1,
                    column: at % d + 1,
                    what: if value.is_nan() {
                        "NaN".into()
                    } else {
                        "an infinite value".into()
                    },
                });
            }
            out.push(value);
        }
        done += step;
    }
    Ok(())
}

/// Loads a `.npy` file as a point set (no labels).
pub fn load_npy(path: impl AsRef<Path>) -> Result<Dataset, IoError> {
    let path = path.as_ref();
    let Matrix {
        mut reader,
        elem,
        n,
        d,
        data_offset,
        ..
    } = open_matrix(path)?;
    let mut x = alloc_points(path, n, d)?;
    let total = n * d;
    read_values(
        &mut reader,
        path,
        elem,
        data_offset,
        (0, total, total),
        d,
        &mut x,
    )?;
    expect_end(
        &mut reader,
        data_offset + (total * elem.size()) as u64,
        path,
    )?;
    Ok(Dataset {
        n,
        d,
        x,
        labels: None,
        source: path.to_path_buf(),
    })
}

/// The shape of a `.npy` file read as points, `(rows, columns)`, from its header alone.
pub fn npy_shape(path: impl AsRef<Path>) -> Result<(usize, usize), IoError> {
    let m = open_matrix(path.as_ref())?;
    Ok((m.n, m.d))
}

/// Rows `rows` of a `.npy` file read as points (row-major, as `f64`), reading only those: a
/// plain file is read from the first of them on (a seek), a gzip one decompressed up to them
/// and that part dropped; the data after them is left unread. The checks are [`load_npy`]'s.
/// For a process that holds only its block of a large matrix (a rank's rows of a kernel
/// matrix).
pub fn load_npy_rows(
    path: impl AsRef<Path>,
    rows: std::ops::Range<usize>,
) -> Result<Vec<f64>, IoError> {
    let path = path.as_ref();
    let Matrix {
        mut reader,
        plain,
        elem,
        n,
        d,
        data_offset,
    } = open_matrix(path)?;
    if rows.start > rows.end || rows.end > n {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem: format!(
                "rows {}..{} were asked of a matrix of {n} rows",
                rows.start, rows.end
            ),
        });
    }
    let first = rows.start * d;
    let skip = (first * elem.size()) as u64;
    let count = rows.len() * d;
    let mut x = alloc_points(path, rows.len(), d)?;
    let values = (first, count, n * d);
    if plain {
        // A plain file: opened again, straight at the first row.
        use std::io::{Seek, SeekFrom};
        let mut file = std::fs::File::open(path).map_err(|source| IoError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        file.seek(SeekFrom::Start(data_offset + skip))
            .map_err(|e| super::input::read_error(path, e))?;
        let mut reader = std::io::BufReader::new(file);
        read_values(&mut reader, path, elem, data_offset, values, d, &mut x)?;
        return Ok(x);
    }
    let skipped = std::io::copy(&mut (&mut reader).take(skip), &mut std::io::sink())
        .map_err(|e| super::input::read_error(path, e))?;
    if skipped < skip {
        return Err(IoError::Truncated {
            path: path.to_path_buf(),
            offset: data_offset + skipped,
            missing: skip - skipped,
            what: "the array data",
        });
    }
    read_values(&mut reader, path, elem, data_offset, values, d, &mut x)?;
    Ok(x)
}

/// The element types the reader decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    F64Little,
    F64Big,
    F32Little,
    F32Big,
    U8,
}

impl Element {
    fn from_descr(descr: &str) -> Option<Self> {
        Some(match descr {
            "<f8" => Self::F64Little,
            ">f8" => Self::F64Big,
            "<f4" => Self::F32Little,
            ">f4" => Self::F32Big,
            "|u1" | "<u1" | ">u1" | "u1" => Self::U8,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Self::F64Little | Self::F64Big => 8,
            Self::F32Little | Self::F32Big => 4,
            Self::U8 => 1,
        }
    }

    /// Decodes one element; `raw.len() == self.size()`.
    fn decode(self, raw: &[u8]) -> f64 {
        let mut b8 = [0u8; 8];
        let mut b4 = [0u8; 4];
        match self {
            Self::F64Little | Self::F64Big => b8.copy_from_slice(raw),
            Self::F32Little | Self::F32Big => b4.copy_from_slice(raw),
            Self::U8 => {}
        }
        match self {
            Self::F64Little => f64::from_le_bytes(b8),
            Self::F64Big => f64::from_be_bytes(b8),
            Self::F32Little => f64::from(f32::from_le_bytes(b4)),
            Self::F32Big => f64::from(f32::from_be_bytes(b4)),
            Self::U8 => f64::from(raw[0]),
        }
    }
}

impl Element {
    fn is_float(self) -> bool {
        self != Self::U8
    }
}

/// Signed integer element types (index arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IntElement {
    I32Little,
    I32Big,
    I64Little,
    I64Big,
}

impl IntElement {
    fn from_descr(descr: &str) -> Option<Self> {
        Some(match descr {
            "<i4" => Self::I32Little,
            ">i4" => Self::I32Big,
            "<i8" => Self::I64Little,
            ">i8" => Self::I64Big,
            _ => return None,
        })
    }

    fn size(self) -> usize {
        match self {
            Self::I32Little | Self::I32Big => 4,
            Self::I64Little | Self::I64Big => 8,
        }
    }

    /// Decodes one element; `raw.len() == self.size()`.
    fn decode(self, raw: &[u8]) -> i64 {
        let mut b8 = [0u8; 8];
        let mut b4 = [0u8; 4];
        match self {
            Self::I32Little | Self::I32Big => b4.copy_from_slice(raw),
            Self::I64Little | Self::I64Big => b8.copy_from_slice(raw),
        }
        match self {
            Self::I32Little => i64::from(i32::from_le_bytes(b4)),
            Self::I32Big => i64::from(i32::from_be_bytes(b4)),
            Self::I64Little => i64::from_le_bytes(b8),
            Self::I64Big => i64::from_be_bytes(b8),
        }
    }
}

/// A `.npy` array held in memory (an `.npz` member): its header's dtype and shape, and its
/// data bytes, not yet decoded.
#[derive(Debug)]
pub(super) struct RawArray<'b> {
    /// The dtype descriptor, such as `<f8`.
    pub(super) descr: String,
    /// The shape (empty for a 0-dimensional array).
    pub(super) shape: Vec<usize>,
    /// Everything after the header.
    data: &'b [u8],
    /// Where `data` starts in the member.
    data_offset: u64,
}

/// Parses the header of the `.npy` bytes `bytes`; `path` names them in errors (for an `.npz`
/// member, `archive.npz/member.npy`). Fortran order is refused for arrays of more than one
/// dimension (for one dimension both orders are the same).
pub(super) fn parse_in_memory<'b>(bytes: &'b [u8], path: &Path) -> Result<RawArray<'b>, IoError> {
    let mut reader = bytes;
    let (header, data_offset) = read_header(&mut reader, path)?;
    if header.fortran_order && header.shape.len() > 1 {
        return Err(IoError::FortranOrder {
            path: path.to_path_buf(),
        });
    }
    // The header was read from `bytes`, so it ends inside them.
    let data = bytes.get(data_offset as usize..).unwrap_or(&[]);
    Ok(RawArray {
        descr: header.descr,
        shape: header.shape,
        data,
        data_offset,
    })
}

impl RawArray<'_> {
    /// The number of elements the shape announces (`None` if it overflows).
    pub(super) fn len(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &dim| acc.checked_mul(dim))
    }

    /// The data split into the shape's elements of `size` bytes; the data must hold exactly
    /// that many bytes (else [`IoError::Truncated`] or [`IoError::TrailingBytes`]).
    fn elements(
        &self,
        size: usize,
        path: &Path,
    ) -> Result<std::slice::ChunksExact<'_, u8>, IoError> {
        let expected = self.len().and_then(|n| n.checked_mul(size));
        match expected {
            Some(bytes) if bytes == self.data.len() => Ok(self.data.chunks_exact(size)),
            Some(bytes) if bytes > self.data.len() => Err(IoError::Truncated {
                path: path.to_path_buf(),
                offset: self.data_offset + self.data.len() as u64,
                missing: (bytes - self.data.len()) as u64,
                what: "the array data",
            }),
            Some(bytes) => Err(IoError::TrailingBytes {
                path: path.to_path_buf(),
                offset: self.data_offset + bytes as u64,
            }),
            None => Err(IoError::BadShape {
                path: path.to_path_buf(),
                problem: format!("the shape {:?} overflows the address space", self.shape),
            }),
        }
    }

    /// The values as `f64` if the dtype is a float (`f4`, `f8`, either byte order), else
    /// `None`. Values are not checked finite here.
    pub(super) fn floats(&self, path: &Path) -> Result<Option<Vec<f64>>, IoError> {
        let Some(elem) = Element::from_descr(&self.descr).filter(|e| e.is_float()) else {
            return Ok(None);
        };
        Ok(Some(
            self.elements(elem.size(), path)?
                .map(|raw| elem.decode(raw))
                .collect(),
        ))
    }

    /// The values as `i64` if the dtype is a signed integer of 4 or 8 bytes (either byte
    /// order), else `None`.
    pub(super) fn ints(&self, path: &Path) -> Result<Option<Vec<i64>>, IoError> {
        let Some(elem) = IntElement::from_descr(&self.descr) else {
            return Ok(None);
        };
        Ok(Some(
            self.elements(elem.size(), path)?
                .map(|raw| elem.decode(raw))
                .collect(),
        ))
    }

    /// The text of a 0-dimensional string array (`|S3` bytes or `<U3` UTF-32), without the
    /// padding NULs; `None` for other dtypes or shapes.
    pub(super) fn text(&self) -> Option<String> {
        if !self.shape.is_empty() {
            return None;
        }
        let (kind, width) = self.descr.split_at_checked(2)?;
        let width: usize = width.parse().ok()?;
        let raw = self
            .data
            .get(..width.checked_mul(if kind == "<U" { 4 } else { 1 })?)?;
        let text: String = match kind {
            "|S" => raw.iter().map(|&b| char::from(b)).collect(),
            "<U" => raw
                .chunks_exact(4)
                .map(|c| char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect::<Option<String>>()?,
            _ => return None,
        };
        Some(text.trim_end_matches('\0').to_string())
    }
}

/// The fields of a `.npy` header dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NpyHeader {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Reads magic, version and header; returns the header and the offset where the data starts.
fn read_header(reader: &mut dyn Read, path: &Path) -> Result<(NpyHeader, u64), IoError> {
    let mut preamble = [0u8; 8];
    read_exact_at(reader, &mut preamble, 0, path, "the .npy preamble")?;
    if &preamble[..6] != NPY_MAGIC {
        return Err(IoError::BadMagic {
            path: path.to_path_buf(),
            found: hex(&preamble[..6]),
            expected: "93 4e 55 4d 50 59 (\\x93NUMPY, a .npy file)".to_string(),
        });
    }
    let (major, minor) = (preamble[6], preamble[7]);
    let header_len = match major {
        1 => {
            let mut len = [0u8; 2];
            read_exact_at(reader, &mut len, 8, path, "the .npy header length")?;
            usize::from(u16::from_le_bytes(len))
        }
        2 | 3 => {
            let mut len = [0u8; 4];
            read_exact_at(reader, &mut len, 8, path, "the .npy header length")?;
            u32::from_le_bytes(len) as usize
        }
        _ => {
            return Err(IoError::NpyHeader {
                path: path.to_path_buf(),
                offset: 6,
                problem: format!(
                    "format version {major}.{minor} is not supported (only 1.0, 2.0, 3.0)"
                ),
            })
        }
    };
    let header_offset: u64 = if major == 1 { 10 } else { 12 };
    if header_len > MAX_HEADER_BYTES {
        return Err(IoError::NpyHeader {
            path: path.to_path_buf(),
            offset: header_offset - if major == 1 { 2 } else { 4 },
            problem: format!(
                "header length {header_len} is implausibly large; the file is corrupt"
            ),
        });
    }
    let mut text = vec![0u8; header_len];
    read_exact_at(reader, &mut text, header_offset, path, "the .npy header")?;
    let header = parse_header(&text).map_err(|(at, problem)| IoError::NpyHeader {
        path: path.to_path_buf(),
        offset: header_offset + at as u64,
        problem,
    })?;
    Ok((header, header_offset + header_len as u64))
}

/// `(n, d)` for a header shape (see the module documentation).
fn points_shape(shape: &[usize], path: &Path) -> Result<(usize, usize), IoError> {
    let describe = || {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        }
    };
    let Some((&n, rest)) = shape.split_first() else {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem:
                "the array is 0-dimensional (a single number); save a 2-D array of shape (n, d)"
                    .into(),
        });
    };
    let d = rest
        .iter()
        .try_fold(1usize, |acc, &dim| acc.checked_mul(dim))
        .ok_or_else(|| IoError::TooLarge {
            path: path.to_path_buf(),
            n,
            d: usize::MAX,
        })?;
    if n == 0 || d == 0 {
        return Err(IoError::Empty {
            path: path.to_path_buf(),
            problem: format!("the array's shape {} holds no points", describe()),
        });
    }
    Ok((n, d))
}

/// Parses the header dictionary, e.g. `{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }`.
/// Errors carry the byte position in the header text.
fn parse_header(text: &[u8]) -> Result<NpyHeader, (usize, String)> {
    let mut parser = DictParser { text, at: 0 };
    let mut descr = None;
    let mut fortran_order = None;
    let mut shape = None;
    parser.expect(b'{')?;
    loop {
        parser.skip_space();
        if parser.eat(b'}') {
            break;
        }
        let key_at = parser.at;
        let key = parser.string()?;
        parser.expect(b':')?;
        match key.as_str() {
            "descr" => {
                parser.skip_space();
                if parser.peek() == Some(b'[') {
                    return Err((parser.at, "structured dtypes (record arrays) are not supported; save a plain numeric array".into()));
                }
                descr = Some(parser.string()?);
            }
            "fortran_order" => fortran_order = Some(parser.boolean()?),
            "shape" => shape = Some(parser.tuple()?),
            _ => return Err((key_at, format!("unexpected key `{key}`"))),
        }
        parser.skip_space();
        if !parser.eat(b',') {
            parser.expect(b'}')?;
            break;
        }
    }
    let missing = |key: &str| (0usize, format!("the key `{key}` is missing"));
    Ok(NpyHeader {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// A cursor over the header's Python-literal text.
struct DictParser<'t> {
    text: &'t [u8],
    at: usize,
}

impl DictParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_space();
        if self.peek() == Some(byte) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), (usize, String)> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err((self.at, format!("expected `{}`", char::from(byte))))
        }
    }

    /// A single- or double-quoted string without escapes.
    fn string(&mut self) -> Result<String, (usize, String)> {
        self.skip_space();
        let start = self.at;
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err((start, "expected a quoted string".into())),
        };
        self.at += 1;
        let body_start = self.at;
        while let Some(b) = self.peek() {
            if b == quote {
                let body = String::from_utf8_lossy(&self.text[body_start..self.at]).into_owned();
                self.at += 1;
                return Ok(body);
            }
            self.at += 1;
        }
        Err((start, "unterminated string".into()))
    }

    fn boolean(&mut self) -> Result<bool, (usize, String)> {
        self.skip_space();
        let rest = &self.text[self.at..];
        if rest.starts_with(b"True") {
            self.at += 4;
            Ok(true)
        } else if rest.starts_with(b"False") {
            self.at += 5;
            Ok(false)
        } else {
            Err((self.at, "expected True or False".into()))
        }
    }

    /// A tuple of non-negative integers such as `(3, 2)`, `(3,)`, `()` or `(3L, 2L)`.
    fn tuple(&mut self) -> Result<Vec<usize>, (usize, String)> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_space();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.at;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.at += 1;
            }
            let digits = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("");
            let dim: usize = digits.parse().map_err(|_| {
                (
                    start,
                    "expected a non-negative integer in the shape".to_string(),
                )
            })?;
            dims.push(dim);
            self.eat(b'L');
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}
