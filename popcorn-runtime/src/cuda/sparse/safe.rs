//! The safe layer over [`super::result`]: a handle bound to a stream and descriptors as RAII
//! types. Descriptors only record device addresses and shapes; the products that read and
//! write through them are `unsafe` and state what the addresses must hold.

use super::result::{self, CusparseError};
use crate::cuda::errors::driver_error;
use crate::error::RuntimeError;
use cudarc::cusparse::sys;
use cudarc::driver::CudaStream;
use std::ffi::c_void;
use std::sync::Arc;

/// Element type of sparse and dense operands (also the compute type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl ValueType {
    fn cuda(self) -> sys::cudaDataType {
        match self {
            ValueType::F32 => sys::cudaDataType::CUDA_R_32F,
            ValueType::F64 => sys::cudaDataType::CUDA_R_64F,
        }
    }
}

/// Storage order of a dense matrix descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major: element `(i, j)` at `i * ld + j`.
    Row,
    /// Column-major: element `(i, j)` at `j * ld + i`.
    Col,
}

impl Order {
    fn cuda(self) -> sys::cusparseOrder_t {
        match self {
            Order::Row => sys::cusparseOrder_t::CUSPARSE_ORDER_ROW,
            Order::Col => sys::cusparseOrder_t::CUSPARSE_ORDER_COL,
        }
    }
}

/// A scalar factor on the host, in the compute type.
#[derive(Clone, Copy, Debug)]
enum HostScalar {
    F32(f32),
    F64(f64),
}

impl HostScalar {
    fn new(value: f64, ty: ValueType) -> HostScalar {
        match ty {
            ValueType::F32 => HostScalar::F32(value as f32),
            ValueType::F64 => HostScalar::F64(value),
        }
    }

    fn ptr(&self) -> *const c_void {
        match self {
            HostScalar::F32(v) => v as *const f32 as *const c_void,
            HostScalar::F64(v) => v as *const f64 as *const c_void,
        }
    }
}

fn operation(trans: bool) -> sys::cusparseOperation_t {
    if trans {
        sys::cusparseOperation_t::CUSPARSE_OPERATION_TRANSPOSE
    } else {
        sys::cusparseOperation_t::CUSPARSE_OPERATION_NON_TRANSPOSE
    }
}

/// A cuSPARSE handle whose work runs on one stream. Call [`SparseHandle::bind`] before the
/// products when the thread may have another context current. Not thread-safe: the backend keeps it
/// behind a mutex.
pub struct SparseHandle {
    raw: sys::cusparseHandle_t,
    stream: Arc<CudaStream>,
}

// SAFETY: the handle is used by one thread at a time (behind the backend's mutex); cuSPARSE
// handles may move between threads as long as the context is bound before use.
unsafe impl Send for SparseHandle {}

impl SparseHandle {
    /// Creates a handle bound to `stream`.
    pub fn new(stream: &Arc<CudaStream>) -> Result<SparseHandle, RuntimeError> {
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        // SAFETY: the stream's context is current.
        let raw = unsafe { result::create() }?;
        let handle = SparseHandle {
            raw,
            stream: stream.clone(),
        };
        // SAFETY: the handle is live; the stream belongs to the current context and lives as
        // long as the handle (held by `Arc`).
        unsafe { result::set_stream(handle.raw, stream.cu_stream() as sys::cudaStream_t) }?;
        Ok(handle)
    }

    /// Makes the handle's context current on this thread (call before the products).
    pub fn bind(&self) -> Result<(), RuntimeError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))
    }

    /// Work-buffer bytes for `C = alpha op(A) op(B)` (beta 0).
    pub fn spmm_buffer_size(
        &self,
        ty: ValueType,
        trans_a: bool,
        trans_b: bool,
        a: &CsrDescr,
        b: &DnMatDescr,
        c: &DnMatDescr,
    ) -> Result<usize, CusparseError> {
        let (alpha, beta) = (HostScalar::new(1.0, ty), HostScalar::new(0.0, ty));
        // SAFETY: handle and descriptors are live; the scalars are host values of the
        // compute type that live across the call; no device memory is touched.
        unsafe {
            result::spmm_buffer_size(
                self.raw,
                operation(trans_a),
                operation(trans_b),
                alpha.ptr(),
                a.raw,
                b.raw,
                beta.ptr(),
                c.raw,
                ty.cuda(),
                sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT,
            )
        }
    }

    /// `C = alpha op(A) op(B)` (beta 0), queued on the handle's stream.
    ///
    /// # Safety
    /// Every descriptor describes device memory that holds its shape (and C may be written),
    /// and `buffer` is device memory of at least [`Self::spmm_buffer_size`] bytes; all of it
    /// stays allocated until the queued work has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn spmm(
        &self,
        ty: ValueType,
        trans_a: bool,
        trans_b: bool,
        alpha: f64,
        a: &CsrDescr,
        b: &DnMatDescr,
        c: &DnMatDescr,
        buffer: u64,
    ) -> Result<(), CusparseError> {
        let (alpha, beta) = (HostScalar::new(alpha, ty), HostScalar::new(0.0, ty));
        // SAFETY: the caller's contract; the scalars are host values that live across the call.
        unsafe {
            result::spmm(
                self.raw,
                operation(trans_a),
                operation(trans_b),
                alpha.ptr(),
                a.raw,
                b.raw,
                beta.ptr(),
                c.raw,
                ty.cuda(),
                sys::cusparseSpMMAlg_t::CUSPARSE_SPMM_ALG_DEFAULT,
                buffer as *mut c_void,
            )
        }
    }

    /// Work-buffer bytes for `y = alpha op(A) x` (beta 0).
    pub fn spmv_buffer_size(
        &self,
        ty: ValueType,
        trans_a: bool,
        a: &CsrDescr,
        x: &DnVecDescr,
        y: &DnVecDescr,
    ) -> Result<usize, CusparseError> {
        let (alpha, beta) = (HostScalar::new(1.0, ty), HostScalar::new(0.0, ty));
        // SAFETY: live handle and descriptors; host scalars of the compute type.
        unsafe {
            result::spmv_buffer_size(
                self.raw,
                operation(trans_a),
                alpha.ptr(),
                a.raw,
                x.raw,
                beta.ptr(),
                y.raw,
                ty.cuda(),
                sys::cusparseSpMVAlg_t::CUSPARSE_SPMV_ALG_DEFAULT,
            )
        }
    }

    /// `y = alpha op(A) x` (beta 0), queued on the handle's stream.
    ///
    /// # Safety
    /// As [`Self::spmm`], with [`Self::spmv_buffer_size`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn spmv(
        &self,
        ty: ValueType,
        trans_a: bool,
        alpha: f64,
        a: &CsrDescr,
        x: &DnVecDescr,
        y: &DnVecDescr,
        buffer: u64,
    ) -> Result<(), CusparseError> {
        let (alpha, beta) = (HostScalar::new(alpha, ty), HostScalar::new(0.0, ty));
        // SAFETY: the caller's contract; host scalars live across the call.
        unsafe {
            result::spmv(
                self.raw,
                operation(trans_a),
                alpha.ptr(),
                a.raw,
                x.raw,
                beta.ptr(),
                y.raw,
                ty.cuda(),
                sys::cusparseSpMVAlg_t::CUSPARSE_SPMV_ALG_DEFAULT,
                buffer as *mut c_void,
            )
        }
    }
}

impl Drop for SparseHandle {
    fn drop(&mut self) {
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: the handle was created by cusparseCreate and is destroyed once.
        let _ = unsafe { result::destroy(self.raw) };
    }
}

/// A CSR matrix descriptor (32-bit indices, zero-based).
pub struct CsrDescr {
    raw: sys::cusparseSpMatDescr_t,
}

impl CsrDescr {
    /// Describes `rows x cols` with `nnz` entries at the given device addresses.
    pub fn new(
        rows: i64,
        cols: i64,
        nnz: i64,
        row_ptr: u64,
        col_idx: u64,
        values: u64,
        ty: ValueType,
    ) -> Result<CsrDescr, CusparseError> {
        // SAFETY: creating a descriptor only records the addresses; the operations that use
        // them are `unsafe` and require them to be valid.
        let raw = unsafe {
            result::create_csr(
                rows,
                cols,
                nnz,
                row_ptr as *mut c_void,
                col_idx as *mut c_void,
                values as *mut c_void,
                ty.cuda(),
            )
        }?;
        Ok(CsrDescr { raw })
    }
}

impl Drop for CsrDescr {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreateCsr, destroyed once.
        let _ = unsafe { result::destroy_sp_mat(self.raw) };
    }
}

/// A dense matrix descriptor.
pub struct DnMatDescr {
    raw: sys::cusparseDnMatDescr_t,
}

impl DnMatDescr {
    /// Describes a `rows x cols` matrix in `order` with leading dimension `ld`.
    pub fn new(
        rows: i64,
        cols: i64,
        ld: i64,
        values: u64,
        ty: ValueType,
        order: Order,
    ) -> Result<DnMatDescr, CusparseError> {
        // SAFETY: only records the address and shape.
        let raw = unsafe {
            result::create_dn_mat(
                rows,
                cols,
                ld,
                values as *mut c_void,
                ty.cuda(),
                order.cuda(),
            )
        }?;
        Ok(DnMatDescr { raw })
    }
}

impl Drop for DnMatDescr {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreateDnMat, destroyed once.
        let _ = unsafe { result::destroy_dn_mat(self.raw) };
    }
}

/// A dense vector descriptor.
pub struct DnVecDescr {
    raw: sys::cusparseDnVecDescr_t,
}

impl DnVecDescr {
    /// Describes `len` contiguous values.
    pub fn new(len: i64, values: u64, ty: ValueType) -> Result<DnVecDescr, CusparseError> {
        // SAFETY: only records the address and length.
        let raw = unsafe { result::create_dn_vec(len, values as *mut c_void, ty.cuda()) }?;
        Ok(DnVecDescr { raw })
    }
}

impl Drop for DnVecDescr {
    fn drop(&mut self) {
        // SAFETY: created by cusparseCreateDnVec, destroyed once.
        let _ = unsafe { result::destroy_dn_vec(self.raw) };
    }
}
