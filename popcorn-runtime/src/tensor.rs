//! Tensors: values that live on a backend (device memory or host memory), with their shape.

use crate::backend::ElemType;
use crate::cpu_backend::CpuBuffer;
use crate::cuda::CudaBuffer;
use crate::ranks::RankHeld;
use std::fmt;

/// The shape and storage of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorShape {
    /// Dense row-major `rows x cols` (vectors are `n x 1` or `1 x n`).
    Dense {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// CSR `rows x cols` with `nnz` stored entries.
    Csr {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Stored entries.
        nnz: usize,
    },
    /// An index vector of `len` entries.
    Index {
        /// Length.
        len: usize,
    },
}

impl fmt::Display for TensorShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorShape::Dense { rows, cols } => write!(f, "dense {rows} x {cols}"),
            TensorShape::Csr { rows, cols, nnz } => {
                write!(f, "CSR {rows} x {cols} ({nnz} entries)")
            }
            TensorShape::Index { len } => write!(f, "index vector of {len}"),
        }
    }
}

/// The buffers of a tensor on its backend.
pub(crate) enum TensorData {
    Cpu(Vec<CpuBuffer>),
    Cuda(Vec<CudaBuffer>),
    /// Held by the ranks of a partitioned CPU context, rank `r`'s part at `r`.
    CpuRanks(Vec<RankHeld<CpuBuffer>>),
    /// Held by the ranks of a partitioned CUDA context (several GPUs).
    CudaRanks(Vec<RankHeld<CudaBuffer>>),
}

/// A value on a backend: a dense matrix or vector, a CSR matrix, or an index vector. Create
/// tensors with the [`crate::Context`] methods (`dense`, `csr`, `index`, ...) and read them
/// back with [`crate::Context::to_f64`] or [`crate::Context::to_u32`].
pub struct Tensor {
    pub(crate) shape: TensorShape,
    pub(crate) elem: ElemType,
    pub(crate) data: TensorData,
    /// On a context of several devices: whole copies of the tensor on the other ranks'
    /// devices, made by its first partitioned run and kept until the tensor is written.
    pub(crate) copies: std::sync::Mutex<Option<TensorData>>,
}

impl Tensor {
    /// A tensor of `data`, without copies.
    pub(crate) fn new(shape: TensorShape, elem: ElemType, data: TensorData) -> Tensor {
        Tensor {
            shape,
            elem,
            data,
            copies: std::sync::Mutex::new(None),
        }
    }

    /// Forgets the copies on other devices (the tensor was written).
    pub(crate) fn forget_copies(&self) {
        if let Ok(mut c) = self.copies.lock() {
            *c = None;
        }
    }

    /// Its shape.
    pub fn shape(&self) -> TensorShape {
        self.shape
    }

    /// Element type of its values (`U32` for index vectors).
    pub fn elem(&self) -> ElemType {
        self.elem
    }

    /// `(rows, cols)`; an index vector is `len x 1`.
    pub fn dims(&self) -> (usize, usize) {
        match self.shape {
            TensorShape::Dense { rows, cols } | TensorShape::Csr { rows, cols, .. } => (rows, cols),
            TensorShape::Index { len } => (len, 1),
        }
    }

    /// Number of stored elements (values of a dense tensor, entries of a CSR one).
    pub fn len(&self) -> usize {
        match self.shape {
            TensorShape::Dense { rows, cols } => rows * cols,
            TensorShape::Csr { nnz, .. } => nnz,
            TensorShape::Index { len } => len,
        }
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensor's device buffers, when it lives on a GPU (one for a dense or index tensor;
    /// row offsets, column indices and values for a CSR one).
    pub fn cuda_buffers(&self) -> Option<&[CudaBuffer]> {
        match &self.data {
            TensorData::Cuda(bufs) => Some(bufs),
            _ => None,
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let device = match &self.data {
            TensorData::Cpu(_) => "cpu",
            TensorData::Cuda(_) => "cuda",
            TensorData::CpuRanks(r) => {
                return write!(
                    f,
                    "Tensor({}, {:?}, cpu, {} ranks)",
                    self.shape,
                    self.elem,
                    r.len()
                )
            }
            TensorData::CudaRanks(r) => {
                return write!(
                    f,
                    "Tensor({}, {:?}, cuda, {} ranks)",
                    self.shape,
                    self.elem,
                    r.len()
                )
            }
        };
        write!(f, "Tensor({}, {:?}, {device})", self.shape, self.elem)
    }
}
