//! IDX reader (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
//!
//! An IDX file is a 4-byte magic `00 00 TT DD` (TT = element type, DD = number of
//! dimensions), DD big-endian `u32` sizes, then the elements in C order. Only unsigned bytes
//! (TT = `0x08`) are supported: images `00 00 08 03` (n x rows x cols, giving d = rows * cols;
//! any DD >= 2 is accepted and flattened) and labels `00 00 08 01`. Pixel values are kept as
//! is (0..=255); scale or [`Dataset::zscore`] them as needed.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::dataset::Dataset;
use super::error::{hex, IoError};
use super::input::{
    alloc_points, check_payload, expect_end, open_input, read_exact_at, read_section_chunk,
};

/// IDX element type code of unsigned bytes.
const IDX_U8: u8 = 0x08;

/// Bytes converted per read.
const CHUNK_BYTES: usize = 1 << 16;

/// Loads IDX images as points (one image a row) and, if `labels` is given, their labels.
///
/// The labels file must hold exactly as many labels as there are images.
pub fn load_idx(images: impl AsRef<Path>, labels: Option<&Path>) -> Result<Dataset, IoError> {
    let path = images.as_ref();
    let mut reader = open_input(path)?;
    let dims = read_idx_header(&mut reader, path)?;
    if dims.len() < 2 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem: "this is a 1-D IDX file (magic 00 00 08 01, a labels file); pass the images \
                      file (magic 00 00 08 03) and this one as its labels"
                .into(),
        });
    }
    let n = dims[0];
    let d = dims[1..]
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
            problem: format!("the IDX sizes {dims:?} hold no images"),
        });
    }
    let data_offset = header_bytes(dims.len());
    let data_bytes = n.checked_mul(d).ok_or_else(|| IoError::TooLarge {
        path: path.to_path_buf(),
        n,
        d,
    })?;
    check_payload(path, data_offset, data_bytes as u64, "the IDX data")?;
    let mut x = alloc_points(path, n, d)?;
    read_bytes(&mut reader, path, data_offset, n * d, |chunk| {
        x.extend(chunk.iter().map(|&b| f64::from(b)))
    })?;
    let labels = match labels {
        Some(labels_path) => {
            let values = load_idx_labels(labels_path)?;
            if values.len() != n {
                return Err(IoError::LabelCountMismatch {
                    images: path.to_path_buf(),
                    labels: labels_path.to_path_buf(),
                    n_images: n,
                    n_labels: values.len(),
                });
            }
            Some(values)
        }
        None => None,
    };
    Ok(Dataset {
        n,
        d,
        x,
        labels,
        source: path.to_path_buf(),
    })
}

/// Loads an IDX labels file (magic `00 00 08 01`).
pub fn load_idx_labels(path: impl AsRef<Path>) -> Result<Vec<i64>, IoError> {
    let path = path.as_ref();
    let mut reader = open_input(path)?;
    let dims = read_idx_header(&mut reader, path)?;
    if dims.len() != 1 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem: format!(
                "an IDX labels file must be 1-D (magic 00 00 08 01) but this one has {} dimensions",
                dims.len()
            ),
        });
    }
    let n = dims[0];
    let mut labels = Vec::new();
    labels.try_reserve_exact(n).map_err(|_| IoError::TooLarge {
        path: path.to_path_buf(),
        n,
        d: 1,
    })?;
    read_bytes(&mut reader, path, header_bytes(1), n, |chunk| {
        labels.extend(chunk.iter().map(|&b| i64::from(b)))
    })?;
    Ok(labels)
}

/// The labels file next to an IDX images file, if one exists.
///
/// In the images file's name, `images` becomes `labels` and `idx3` becomes `idx1`
/// (`train-images-idx3-ubyte.gz` -> `train-labels-idx1-ubyte.gz`); that name is tried as is,
/// then with `.gz` added or removed.
pub fn find_idx_labels(images: impl AsRef<Path>) -> Option<PathBuf> {
    let images = images.as_ref();
    let name = images.file_name()?.to_str()?;
    let labels_name = name.replace("images", "labels").replace("idx3", "idx1");
    if labels_name == name {
        return None;
    }
    let toggled = match labels_name.strip_suffix(".gz") {
        Some(plain) => plain.to_string(),
        None => format!("{labels_name}.gz"),
    };
    [labels_name, toggled]
        .into_iter()
        .map(|candidate| images.with_file_name(candidate))
        .find(|candidate| candidate.is_file())
}

/// Size of the magic plus `ndims` sizes, in bytes.
fn header_bytes(ndims: usize) -> u64 {
    4 + 4 * ndims as u64
}

/// Reads the magic and the sizes; checks the element type.
fn read_idx_header(reader: &mut dyn Read, path: &Path) -> Result<Vec<usize>, IoError> {
    let mut magic = [0u8; 4];
    read_exact_at(reader, &mut magic, 0, path, "the IDX magic number")?;
    if magic[0] != 0 || magic[1] != 0 || magic[3] == 0 {
        return Err(IoError::BadMagic {
            path: path.to_path_buf(),
            found: hex(&magic),
            expected: "00 00 08 03 (IDX images) or 00 00 08 01 (IDX labels)".into(),
        });
    }
    if magic[2] != IDX_U8 {
        return Err(IoError::BadShape {
            path: path.to_path_buf(),
            problem: format!(
                "IDX element type 0x{:02x} (magic {}) is not supported; only unsigned bytes \
                 (0x08, as in MNIST) are",
                magic[2],
                hex(&magic)
            ),
        });
    }
    let ndims = usize::from(magic[3]);
    let mut sizes = vec![0u8; 4 * ndims];
    read_exact_at(reader, &mut sizes, 4, path, "the IDX sizes")?;
    Ok(sizes
        .chunks_exact(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect())
}

/// Streams exactly `count` data bytes starting at `offset` through `sink`, then checks that
/// the file ends there.
fn read_bytes(
    reader: &mut dyn Read,
    path: &Path,
    offset: u64,
    count: usize,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), IoError> {
    let mut buf = vec![0u8; CHUNK_BYTES.min(count)];
    let mut done = 0usize;
    while done < count {
        let take = CHUNK_BYTES.min(count - done);
        let chunk = &mut buf[..take];
        read_section_chunk(
            reader,
            chunk,
            offset,
            done as u64,
            count as u64,
            path,
            "the IDX data",
        )?;
        sink(chunk);
        done += take;
    }
    expect_end(reader, offset + count as u64, path)
}
