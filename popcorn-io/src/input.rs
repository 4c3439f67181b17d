//! Opening input files (transparently gunzipping them) and reading raw bytes.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;

use super::error::IoError;

/// Buffer size for file and decompressor readers.
const BUFFER_BYTES: usize = 1 << 16;

/// The two bytes every gzip stream starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens `path` for buffered reading. A file starting with the gzip magic bytes `1f 8b` is
/// decompressed on the fly, whatever its name; a file named `.gz` that is not gzip data (for
/// example already decompressed by a browser) is read as is.
pub(super) fn open_input(path: &Path) -> Result<Box<dyn BufRead>, IoError> {
    open_input_sniffed(path).map(|(reader, _)| reader)
}

/// [`open_input`], and whether the file is plain (not gzip-compressed), so that it can be read
/// from any offset by opening it again.
pub(super) fn open_input_sniffed(path: &Path) -> Result<(Box<dyn BufRead>, bool), IoError> {
    let file = File::open(path).map_err(|source| IoError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = BufReader::with_capacity(BUFFER_BYTES, file);
    // Peek without consuming. A fresh 64 KiB BufReader over a file returns at least two bytes
    // unless the file is shorter than that.
    let is_gzip = reader
        .fill_buf()
        .map_err(|source| read_error(path, source))?
        .starts_with(&GZIP_MAGIC);
    if is_gzip {
        Ok((
            Box::new(BufReader::with_capacity(
                BUFFER_BYTES,
                MultiGzDecoder::new(reader),
            )),
            false,
        ))
    } else {
        Ok((Box::new(reader), true))
    }
}

/// Wraps a read failure with the file name.
pub(super) fn read_error(path: &Path, source: std::io::Error) -> IoError {
    IoError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
///
/// An `UnexpectedEof` from a decompressor (a truncated gzip stream) counts as the end of input,
/// so the caller reports it as a truncated file with the offset reached.
pub(super) fn read_full(
    reader: &mut dyn Read,
    buf: &mut [u8],
    path: &Path,
) -> Result<usize, IoError> {
    let mut done = 0;
    while done < buf.len() {
        match reader.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(got) => done += got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(read_error(path, e)),
        }
    }
    Ok(done)
}

/// Reads exactly `buf.len()` bytes at byte `offset` or reports the file as truncated there.
pub(super) fn read_exact_at(
    reader: &mut dyn Read,
    buf: &mut [u8],
    offset: u64,
    path: &Path,
    what: &'static str,
) -> Result<(), IoError> {
    let got = read_full(reader, buf, path)?;
    if got < buf.len() {
        return Err(IoError::Truncated {
            path: path.to_path_buf(),
            offset: offset + got as u64,
            missing: (buf.len() - got) as u64,
            what,
        });
    }
    Ok(())
}

/// Reads the next chunk of a data section of `total` bytes starting at byte `section_offset`,
/// `done` bytes of which were already read; a short read reports the file as truncated with
/// the bytes still missing from the whole section.
pub(super) fn read_section_chunk(
    reader: &mut dyn Read,
    chunk: &mut [u8],
    section_offset: u64,
    done: u64,
    total: u64,
    path: &Path,
    what: &'static str,
) -> Result<(), IoError> {
    let got = read_full(reader, chunk, path)? as u64;
    if got < chunk.len() as u64 {
        return Err(IoError::Truncated {
            path: path.to_path_buf(),
            offset: section_offset + done + got,
            missing: total - done - got,
            what,
        });
    }
    Ok(())
}

/// Fails with [`IoError::TrailingBytes`] if anything is left after byte `offset`.
pub(super) fn expect_end(reader: &mut dyn Read, offset: u64, path: &Path) -> Result<(), IoError> {
    let mut one = [0u8; 1];
    if read_full(reader, &mut one, path)? > 0 {
        return Err(IoError::TrailingBytes {
            path: path.to_path_buf(),
            offset,
        });
    }
    Ok(())
}

/// Reads up to `limit` bytes from the start of the (decompressed) file, for format sniffing.
pub(super) fn read_head(path: &Path, limit: usize) -> Result<Vec<u8>, IoError> {
    let mut reader = open_input(path)?;
    let mut buf = vec![0u8; limit];
    let got = read_full(&mut reader, &mut buf, path)?;
    buf.truncate(got);
    Ok(buf)
}

/// Largest expansion of a gzip stream: deflate's limit is about 1032 to 1.
const GZIP_MAX_EXPANSION: u64 = 1032;

/// Checks, before anything is allocated, that a binary file can hold the `data_bytes` of values
/// its header announces after `data_offset`: a plain file by its size (else it is truncated), a
/// gzip file by deflate's largest expansion (else the header cannot be right).
pub(super) fn check_payload(
    path: &Path,
    data_offset: u64,
    data_bytes: u64,
    what: &'static str,
) -> Result<(), IoError> {
    let mut file = File::open(path).map_err(|source| IoError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let len = file
        .metadata()
        .map_err(|source| read_error(path, source))?
        .len();
    let mut magic = [0u8; 2];
    let is_gzip = file.read_exact(&mut magic).is_ok() && magic == GZIP_MAGIC;
    let needed = data_offset.saturating_add(data_bytes);
    if !is_gzip && needed > len {
        return Err(IoError::Truncated {
            path: path.to_path_buf(),
            offset: len,
            missing: needed - len,
            what,
        });
    }
    if is_gzip && needed > len.saturating_mul(GZIP_MAX_EXPANSION) {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem: format!(
                "the header announces {needed} bytes of data, but a gzip file of {len} bytes \
                 expands to at most {} bytes: the header is wrong or the file is incomplete",
                len.saturating_mul(GZIP_MAX_EXPANSION)
            ),
        });
    }
    Ok(())
}

/// The most bytes a loaded point set may take (0: no limit beyond the system's memory).
static MEMORY_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Limits the point sets the loaders build to `bytes` (`None`: only the system's available
/// memory limits them); a larger file is refused as [`IoError::TooLarge`] before anything is
/// allocated. Programs pass their `POPCORN_MEMORY_LIMIT` here.
pub fn set_memory_limit(bytes: Option<u64>) {
    MEMORY_LIMIT.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// The bytes a loaded point set may take: the system's available memory, under the limit.
fn memory_budget() -> Option<u64> {
    let limit = match MEMORY_LIMIT.load(Ordering::Relaxed) {
        0 => None,
        l => Some(l),
    };
    match (available_memory(), limit) {
        (Some(a), Some(l)) => Some(a.min(l)),
        (a, l) => a.or(l),
    }
}

/// The system's total and available memory in bytes (`MemTotal` and `MemAvailable` of
/// `/proc/meminfo`), where they can be read (Linux).
pub fn system_memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib.saturating_mul(1024))
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// The system's available memory in bytes, where known.
fn available_memory() -> Option<u64> {
    system_memory().map(|(_, available)| available)
}

/// Allocates an empty `Vec<f64>` with room for `n * d` values, or explains why it cannot
/// (more than the memory budget, see [`set_memory_limit`], or an overflowing size).
pub(super) fn alloc_points(path: &Path, n: usize, d: usize) -> Result<Vec<f64>, IoError> {
    alloc_f64(n, d, || IoError::TooLarge {
        path: path.to_path_buf(),
        n,
        d,
    })
}

/// An empty `Vec<f64>` with room for `rows * cols` values, checked against the memory budget
/// (see [`set_memory_limit`]); `too_large()` where the size overflows, exceeds the budget or
/// cannot be allocated.
pub(super) fn alloc_f64(
    rows: usize,
    cols: usize,
    too_large: impl Fn() -> IoError,
) -> Result<Vec<f64>, IoError> {
    let total = rows.checked_mul(cols).ok_or_else(&too_large)?;
    let bytes = total
        .checked_mul(std::mem::size_of::<f64>())
        .ok_or_else(&too_large)?;
    if !fits_memory_budget(bytes as u64) {
        return Err(too_large());
    }
    let mut x = Vec::new();
    x.try_reserve_exact(total).map_err(|_| too_large())?;
    Ok(x)
}

/// Whether `bytes` more fit in the memory budget (see [`set_memory_limit`]).
pub(super) fn fits_memory_budget(bytes: u64) -> bool {
    memory_budget().is_none_or(|budget| bytes <= budget)
}
