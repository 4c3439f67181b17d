//! Popcorn's data readers and writers: load a point set `X` (`n x d`, row-major `f64`) and
//! optional true labels for clustering, and write clustering results. A crate of its own, so
//! that the command line and other front ends (a Python package) read data the same way.
//!
//! Formats (each may be gzip-compressed, detected by the `1f 8b` magic):
//! - delimited text ([`load_csv`]): header and label column detected, see [`LabelColumn`];
//! - libsvm ([`load_libsvm_sparse`]): sparse `label index:value ...` lines kept as a CSR
//!   matrix ([`SparseDataset`]), or made dense ([`load_libsvm`]);
//! - NumPy `.npy` ([`load_npy`]): `<f8`, `<f4`, `|u1`, C order;
//! - scipy sparse `.npz` ([`load_npz`]): a CSR matrix written by `scipy.sparse.save_npz`
//!   (a zip archive, so not gzip-compressed), kept as a CSR matrix;
//! - IDX ([`load_idx`]): MNIST / Fashion-MNIST images and labels.
//!
//! Graphs (a symmetric adjacency matrix as a [`CsrMatrix`]): Matrix Market `.mtx`
//! ([`load_mtx`]) and edge lists `i j [w]` ([`load_edge_list`]).
//!
//! [`load`] picks the reader from the file name or content ([`detect_format`]) and returns
//! dense points; [`load_sparse`] returns a CSR matrix, reading libsvm and `.npz` files without
//! densifying.
//! Every value is checked finite. Errors ([`IoError`]) name the file, the 1-based line or the
//! byte offset, the problem, and what to do; no input makes the readers panic.

#![warn(missing_docs)]

mod csv;
mod dataset;
mod edges;
mod error;
mod idx;
mod input;
mod libsvm;
mod load;
mod mtx;
mod npy;
mod npz;
mod sparse;
mod text;
mod write;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use self::csv::{load_csv, CsvOptions, Header, LabelColumn, Separator};
pub use self::dataset::{check_k, Dataset};
pub use self::edges::{load_edge_list, IndexBase};
pub use self::error::IoError;
pub use self::idx::{find_idx_labels, load_idx, load_idx_labels};
pub use self::input::{set_memory_limit, system_memory};
pub use self::libsvm::{load_libsvm, load_libsvm_sparse};
pub use self::load::{detect_format, load, load_sparse, Format, IdxLabels, LoadOptions};
pub use self::mtx::load_mtx;
pub use self::npy::{load_npy, load_npy_rows, npy_shape};
pub use self::npz::load_npz;
pub use self::sparse::{CsrMatrix, SparseDataset};
pub use self::write::{write_labeled_csv, write_labels};
