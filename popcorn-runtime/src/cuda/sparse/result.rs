//! The result layer over cuSPARSE's raw bindings: one function per call, each returning a
//! `Result` whose error names the call. Every function is `unsafe` where the raw call is:
//! descriptors and handles must be live and device pointers valid for the described shapes.

use cudarc::cusparse::sys;
use std::ffi::c_void;

/// A cuSPARSE call that returned a status other than success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CusparseError {
    /// The call.
    pub call: &'static str,
    /// Its status.
    pub status: sys::cusparseStatus_t,
}

impl CusparseError {
    /// Whether cuSPARSE does not support the requested combination of layouts and operations.
    pub fn is_not_supported(&self) -> bool {
        self.status == sys::cusparseStatus_t::CUSPARSE_STATUS_NOT_SUPPORTED
    }
}

impl CusparseError {
    /// The status and cuSPARSE's description of it.
    pub fn message(&self) -> String {
        // SAFETY: cusparseGetErrorString returns a pointer to a static NUL-terminated string
        // (or null), which is only read.
        let text = unsafe {
            let p = sys::cusparseGetErrorString(self.status);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        format!("{:?}: {text}", self.status)
    }
}

impl std::fmt::Display for CusparseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.message())
    }
}

impl std::error::Error for CusparseError {}

/// Checks a status.
fn check(call: &'static str, status: sys::cusparseStatus_t) -> Result<(), CusparseError> {
    if status == sys::cusparseStatus_t::CUSPARSE_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CusparseError { call, status })
    }
}

/// `cusparseCreate`.
///
/// # Safety
/// A CUDA context must be current.
pub unsafe fn create() -> Result<sys::cusparseHandle_t, CusparseError> {
    let mut handle = std::ptr::null_mut();
    check("cusparseCreate", sys::cusparseCreate(&mut handle))?;
    Ok(handle)
}

/// `cusparseDestroy`.
///
/// # Safety
/// `handle` is live and is not used afterwards.
pub unsafe fn destroy(handle: sys::cusparseHandle_t) -> Result<(), CusparseError> {
    check("cusparseDestroy", sys::cusparseDestroy(handle))
}

/// `cusparseSetStream`.
///
/// # Safety
/// `handle` is live and `stream` belongs to the handle's context and outlives its use.
pub unsafe fn set_stream(
    handle: sys::cusparseHandle_t,
    stream: sys::cudaStream_t,
) -> Result<(), CusparseError> {
    check("cusparseSetStream", sys::cusparseSetStream(handle, stream))
}

/// `cusparseCreateCsr` with 32-bit indices, zero-based.
///
/// # Safety
/// The arrays are device memory of `rows + 1`, `nnz` and `nnz` elements that outlive the
/// descriptor's use.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_csr(
    rows: i64,
    cols: i64,
    nnz: i64,
    row_offsets: *mut c_void,
    col_indices: *mut c_void,
    values: *mut c_void,
    value_type: sys::cudaDataType,
) -> Result<sys::cusparseSpMatDescr_t, CusparseError> {
    let mut descr = std::ptr::null_mut();
    check(
        "cusparseCreateCsr",
        sys::cusparseCreateCsr(
            &mut descr,
            rows,
            cols,
            nnz,
            row_offsets,
            col_indices,
            values,
            sys::cusparseIndexType_t::CUSPARSE_INDEX_32I,
            sys::cusparseIndexType_t::CUSPARSE_INDEX_32I,
            sys::cusparseIndexBase_t::CUSPARSE_INDEX_BASE_ZERO,
            value_type,
        ),
    )?;
    Ok(descr)
}

/// `cusparseDestroySpMat`.
///
/// # Safety
/// `descr` is live and not used afterwards.
pub unsafe fn destroy_sp_mat(descr: sys::cusparseSpMatDescr_t) -> Result<(), CusparseError> {
    check(
        "cusparseDestroySpMat",
        sys::cusparseDestroySpMat(descr as sys::cusparseConstSpMatDescr_t),
    )
}

/// `cusparseCreateDnMat`.
///
/// # Safety
/// `values` is device memory holding the described matrix.
pub unsafe fn create_dn_mat(
    rows: i64,
    cols: i64,
    ld: i64,
    values: *mut c_void,
    value_type: sys::cudaDataType,
    order: sys::cusparseOrder_t,
) -> Result<sys::cusparseDnMatDescr_t, CusparseError> {
    let mut descr = std::ptr::null_mut();
    check(
        "cusparseCreateDnMat",
        sys::cusparseCreateDnMat(&mut descr, rows, cols, ld, values, value_type, order),
    )?;
    Ok(descr)
}

/// `cusparseDestroyDnMat`.
///
/// # Safety
/// `descr` is live and not used afterwards.
pub unsafe fn destroy_dn_mat(descr: sys::cusparseDnMatDescr_t) -> Result<(), CusparseError> {
    check(
        "cusparseDestroyDnMat",
        sys::cusparseDestroyDnMat(descr as sys::cusparseConstDnMatDescr_t),
    )
}

/// `cusparseCreateDnVec`.
///
/// # Safety
/// `values` is device memory of `size` elements.
pub unsafe fn create_dn_vec(
    size: i64,
    values: *mut c_void,
    value_type: sys::cudaDataType,
) -> Result<sys::cusparseDnVecDescr_t, CusparseError> {
    let mut descr = std::ptr::null_mut();
    check(
        "cusparseCreateDnVec",
        sys::cusparseCreateDnVec(&mut descr, size, values, value_type),
    )?;
    Ok(descr)
}

/// `cusparseDestroyDnVec`.
///
/// # Safety
/// `descr` is live and not used afterwards.
pub unsafe fn destroy_dn_vec(descr: sys::cusparseDnVecDescr_t) -> Result<(), CusparseError> {
    check(
        "cusparseDestroyDnVec",
        sys::cusparseDestroyDnVec(descr as sys::cusparseConstDnVecDescr_t),
    )
}

/// `cusparseSpMM_bufferSize`.
///
/// # Safety
/// Live handle and descriptors; `alpha` and `beta` point to host values of the compute type.
#[allow(clippy::too_many_arguments)]
pub unsafe fn spmm_buffer_size(
    handle: sys::cusparseHandle_t,
    op_a: sys::cusparseOperation_t,
    op_b: sys::cusparseOperation_t,
    alpha: *const c_void,
    a: sys::cusparseSpMatDescr_t,
    b: sys::cusparseDnMatDescr_t,
    beta: *const c_void,
    c: sys::cusparseDnMatDescr_t,
    compute: sys::cudaDataType,
    alg: sys::cusparseSpMMAlg_t,
) -> Result<usize, CusparseError> {
    let mut size = 0usize;
    check(
        "cusparseSpMM_bufferSize",
        sys::cusparseSpMM_bufferSize(
            handle, op_a, op_b, alpha, a as _, b as _, beta, c, compute, alg, &mut size,
        ),
    )?;
    Ok(size)
}

/// `cusparseSpMM`.
///
/// # Safety
/// As [`spmm_buffer_size`]; `buffer` is device memory of at least the size it returned, and
/// every described array is valid device memory.
#[allow(clippy::too_many_arguments)]
pub unsafe fn spmm(
    handle: sys::cusparseHandle_t,
    op_a: sys::cusparseOperation_t,
    op_b: sys::cusparseOperation_t,
    alpha: *const c_void,
    a: sys::cusparseSpMatDescr_t,
    b: sys::cusparseDnMatDescr_t,
    beta: *const c_void,
    c: sys::cusparseDnMatDescr_t,
    compute: sys::cudaDataType,
    alg: sys::cusparseSpMMAlg_t,
    buffer: *mut c_void,
) -> Result<(), CusparseError> {
    check(
        "cusparseSpMM",
        sys::cusparseSpMM(
            handle, op_a, op_b, alpha, a as _, b as _, beta, c, compute, alg, buffer,
        ),
    )
}

/// `cusparseSpMV_bufferSize`.
///
/// # Safety
/// Live handle and descriptors; `alpha` and `beta` point to host values of the compute type.
#[allow(clippy::too_many_arguments)]
pub unsafe fn spmv_buffer_size(
    handle: sys::cusparseHandle_t,
    op_a: sys::cusparseOperation_t,
    alpha: *const c_void,
    a: sys::cusparseSpMatDescr_t,
    x: sys::cusparseDnVecDescr_t,
    beta: *const c_void,
    y: sys::cusparseDnVecDescr_t,
    compute: sys::cudaDataType,
    alg: sys::cusparseSpMVAlg_t,
) -> Result<usize, CusparseError> {
    let mut size = 0usize;
    check(
        "cusparseSpMV_bufferSize",
        sys::cusparseSpMV_bufferSize(
            handle, op_a, alpha, a as _, x as _, beta, y, compute, alg, &mut size,
        ),
    )?;
    Ok(size)
}

/// `cusparseSpMV`.
///
/// # Safety
/// As [`spmv_buffer_size`]; `buffer` is device memory of at least the size it returned.
#[allow(clippy::too_many_arguments)]
pub unsafe fn spmv(
    handle: sys::cusparseHandle_t,
    op_a: sys::cusparseOperation_t,
    alpha: *const c_void,
    a: sys::cusparseSpMatDescr_t,
    x: sys::cusparseDnVecDescr_t,
    beta: *const c_void,
    y: sys::cusparseDnVecDescr_t,
    compute: sys::cudaDataType,
    alg: sys::cusparseSpMVAlg_t,
    buffer: *mut c_void,
) -> Result<(), CusparseError> {
    check(
        "cusparseSpMV",
        sys::cusparseSpMV(
            handle, op_a, alpha, a as _, x as _, beta, y, compute, alg, buffer,
        ),
    )
}
