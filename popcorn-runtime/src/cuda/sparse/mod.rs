//! cuSPARSE in cudarc's style: a result layer over the raw bindings ([`result`]), a safe layer
//! of RAII handle and descriptors ([`safe`]), the row-major layout mapping ([`layout`]), and
//! the backend's SpMM/SpMV with work buffers sized once per step shape.

pub mod layout;
pub mod result;
pub mod safe;

use crate::cuda::args::Csr;
use crate::cuda::errors::to_i64;
use crate::cuda::memory::GrowBuffer;
use crate::error::RuntimeError;
use cudarc::driver::CudaStream;
use layout::{spmm_layout, SpmmLayout};
use popcorn_dsl::DType;
use result::CusparseError;
use safe::{CsrDescr, DnMatDescr, DnVecDescr, SparseHandle, ValueType};
use std::collections::HashMap;
use std::sync::Arc;

/// What a cached work-buffer size belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ShapeKey {
    Spmm {
        ty: ValueType,
        sparse_left: bool,
        trans_sparse: bool,
        trans_dense: bool,
        m: usize,
        n: usize,
        sparse: (usize, usize, usize),
        dense: (usize, usize),
    },
    Spmv {
        ty: ValueType,
        trans: bool,
        sparse: (usize, usize, usize),
    },
}

/// A step shape's work-buffer size and, for SpMM, the layout cuSPARSE accepted.
#[derive(Clone, Copy, Debug)]
struct ShapeInfo {
    bytes: usize,
    matched_orders: bool,
}

/// cuSPARSE's value type of a plan dtype.
pub(crate) fn value_type(dtype: DType) -> ValueType {
    match dtype {
        DType::F32 => ValueType::F32,
        DType::F64 => ValueType::F64,
    }
}

/// The dense operand of an SpMM: device address and stored row-major shape.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseOperand {
    pub(crate) ptr: u64,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

/// An SpMM request in popcorn's terms.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpmmRequest {
    pub(crate) ty: ValueType,
    pub(crate) sparse_left: bool,
    pub(crate) trans_sparse: bool,
    pub(crate) trans_dense: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) alpha: f64,
}

/// The backend's cuSPARSE state: handle, work-buffer sizes per step shape, one work buffer
/// grown to the largest size needed.
pub(crate) struct SparseOps {
    handle: SparseHandle,
    shapes: HashMap<ShapeKey, ShapeInfo>,
    workspace: GrowBuffer,
    stream: Arc<CudaStream>,
}

impl SparseOps {
    /// A handle on `stream`.
    pub(crate) fn new(stream: &Arc<CudaStream>) -> Result<SparseOps, RuntimeError> {
        Ok(SparseOps {
            handle: SparseHandle::new(stream)?,
            shapes: HashMap::new(),
            workspace: GrowBuffer::default(),
            stream: stream.clone(),
        })
    }

    /// Bytes of the work buffer now.
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.workspace.capacity()
    }

    /// `C = alpha op(S) op(D)` or `alpha op(D) op(S)` into the row-major `c` (`m x n`).
    ///
    /// # Safety
    /// `s`, `d` and `c` describe device memory of the backend's stream holding the shapes
    /// given (the caller validated buffer sizes), and stay allocated until the queued work
    /// has run.
    pub(crate) unsafe fn spmm(
        &mut self,
        req: SpmmRequest,
        s: &Csr,
        d: DenseOperand,
        c: u64,
    ) -> Result<(), RuntimeError> {
        self.handle.bind()?;
        let key = ShapeKey::Spmm {
            ty: req.ty,
            sparse_left: req.sparse_left,
            trans_sparse: req.trans_sparse,
            trans_dense: req.trans_dense,
            m: req.m,
            n: req.n,
            sparse: (s.rows, s.cols, s.nnz),
            dense: (d.rows, d.cols),
        };
        let a = CsrDescr::new(
            to_i64(s.rows, "sparse rows")?,
            to_i64(s.cols, "sparse columns")?,
            to_i64(s.nnz, "stored entries")?,
            s.row_ptr,
            s.col_idx,
            s.values,
            req.ty,
        )?;
        if let Some(info) = self.shapes.get(&key).copied() {
            let l = spmm_layout(
                req.sparse_left,
                req.trans_sparse,
                req.trans_dense,
                req.m,
                req.n,
                d.rows,
                d.cols,
                info.matched_orders,
            );
            // SAFETY: the caller's contract.
            return unsafe { self.run_spmm(req, &a, d, c, &l, info.bytes) }.map_err(Into::into);
        }
        // First call for this shape: find a layout cuSPARSE accepts (see `layout`).
        let mut rejected: Vec<String> = Vec::new();
        for matched_orders in [true, false] {
            let l = spmm_layout(
                req.sparse_left,
                req.trans_sparse,
                req.trans_dense,
                req.m,
                req.n,
                d.rows,
                d.cols,
                matched_orders,
            );
            let (b_desc, c_desc) = descriptors(req.ty, &l, d.ptr, c)?;
            let attempt = match self
                .handle
                .spmm_buffer_size(req.ty, l.trans_a, l.trans_b, &a, &b_desc, &c_desc)
            {
                // SAFETY: the caller's contract.
                Ok(bytes) => unsafe { self.run_spmm(req, &a, d, c, &l, bytes) }.map(|()| bytes),
                Err(e) => Err(SpmmFailure::Cusparse(e)),
            };
            match attempt {
                Ok(bytes) => {
                    self.shapes.insert(
                        key,
                        ShapeInfo {
                            bytes,
                            matched_orders,
                        },
                    );
                    return Ok(());
                }
                Err(SpmmFailure::Cusparse(e)) if retryable(&e) => {
                    rejected.push(format!("{e} with {l:?}"))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(RuntimeError::Unsupported {
            call: "cusparseSpMM".to_string(),
            message: format!(
                "cuSPARSE rejected every layout of this product: {}",
                rejected.join("; ")
            ),
        })
    }

    /// Runs one SpMM with a known layout and work-buffer size.
    ///
    /// # Safety
    /// As [`SparseOps::spmm`].
    unsafe fn run_spmm(
        &mut self,
        req: SpmmRequest,
        a: &CsrDescr,
        d: DenseOperand,
        c: u64,
        l: &SpmmLayout,
        bytes: usize,
    ) -> Result<(), SpmmFailure> {
        let (b_desc, c_desc) = descriptors(req.ty, l, d.ptr, c).map_err(SpmmFailure::Cusparse)?;
        let buffer = self
            .workspace
            .ensure(&self.stream, bytes, "cuSPARSE SpMM work buffer")
            .map_err(SpmmFailure::Runtime)?;
        // SAFETY: descriptors describe the caller's device memory (caller's contract) and the
        // work buffer holds `bytes`, the size cuSPARSE asked for this shape.
        unsafe {
            self.handle.spmm(
                req.ty, l.trans_a, l.trans_b, req.alpha, a, &b_desc, &c_desc, buffer,
            )
        }
        .map_err(SpmmFailure::Cusparse)
    }

    /// `y = alpha op(S) x`.
    ///
    /// # Safety
    /// `s`, `x` (length `op(S)`'s columns) and `y` (its rows) are device memory of the
    /// backend's stream that stays allocated until the queued work has run.
    pub(crate) unsafe fn spmv(
        &mut self,
        ty: ValueType,
        trans: bool,
        alpha: f64,
        s: &Csr,
        x: u64,
        y: u64,
    ) -> Result<(), RuntimeError> {
        self.handle.bind()?;
        let (x_len, y_len) = if trans {
            (s.rows, s.cols)
        } else {
            (s.cols, s.rows)
        };
        let a = CsrDescr::new(
            to_i64(s.rows, "sparse rows")?,
            to_i64(s.cols, "sparse columns")?,
            to_i64(s.nnz, "stored entries")?,
            s.row_ptr,
            s.col_idx,
            s.values,
            ty,
        )?;
        let xd = DnVecDescr::new(to_i64(x_len, "x length")?, x, ty)?;
        let yd = DnVecDescr::new(to_i64(y_len, "y length")?, y, ty)?;
        let key = ShapeKey::Spmv {
            ty,
            trans,
            sparse: (s.rows, s.cols, s.nnz),
        };
        let bytes = match self.shapes.get(&key) {
            Some(info) => info.bytes,
            None => {
                let bytes = self.handle.spmv_buffer_size(ty, trans, &a, &xd, &yd)?;
                self.shapes.insert(
                    key,
                    ShapeInfo {
                        bytes,
                        matched_orders: true,
                    },
                );
                bytes
            }
        };
        let buffer = self
            .workspace
            .ensure(&self.stream, bytes, "cuSPARSE SpMV work buffer")?;
        // SAFETY: the caller's contract; the work buffer holds the size cuSPARSE asked for.
        unsafe { self.handle.spmv(ty, trans, alpha, &a, &xd, &yd, buffer) }.map_err(Into::into)
    }
}

/// A failure of one SpMM attempt: cuSPARSE's (maybe retried with another layout) or ours.
enum SpmmFailure {
    Cusparse(CusparseError),
    Runtime(RuntimeError),
}

impl From<SpmmFailure> for RuntimeError {
    fn from(f: SpmmFailure) -> Self {
        match f {
            SpmmFailure::Cusparse(e) => e.into(),
            SpmmFailure::Runtime(e) => e,
        }
    }
}

/// Whether another layout may succeed where this error occurred.
fn retryable(e: &CusparseError) -> bool {
    e.is_not_supported()
        || e.status == cudarc::cusparse::sys::cusparseStatus_t::CUSPARSE_STATUS_INVALID_VALUE
}

/// The dense descriptors of a layout.
fn descriptors(
    ty: ValueType,
    l: &SpmmLayout,
    b: u64,
    c: u64,
) -> Result<(DnMatDescr, DnMatDescr), CusparseError> {
    // Sizes were checked against buffer lengths, which fit in `isize`.
    let as_i64 = |v: usize| v as i64;
    let b_desc = DnMatDescr::new(
        as_i64(l.b.rows),
        as_i64(l.b.cols),
        as_i64(l.b.ld),
        b,
        ty,
        l.b.order,
    )?;
    let c_desc = DnMatDescr::new(
        as_i64(l.c.rows),
        as_i64(l.c.cols),
        as_i64(l.c.ld),
        c,
        ty,
        l.c.order,
    )?;
    Ok((b_desc, c_desc))
}
