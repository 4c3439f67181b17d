//! cuBLAS: a handle bound to the backend's main stream, and row-major GEMM, SYRK (whole, or as
//! GEMMs over block rows: [`crate::cuda::syrk_blocks`]) and GEMV, through the column-major
//! mapping of [`crate::cuda::col_major`]. The methods take raw device addresses and are
//! `unsafe`: the step units check their operands first.

use crate::cuda::col_major::{col_major_gemm, col_major_gemv, col_major_syrk, ColMajorGemm};
use crate::cuda::errors::to_i64;
use crate::cuda::syrk_blocks::{block_row_gemm, diagonal_pieces, SyrkBlock, SYRK_LEAF_ROWS};
use crate::error::RuntimeError;
use cudarc::cublas::sys;
use cudarc::driver::CudaStream;
use popcorn_dsl::plan::block_row_ranges;
use popcorn_dsl::DType;
use std::sync::Arc;

/// A cuBLAS handle bound to one stream. Not thread-safe: the backend keeps it behind a mutex.
pub(crate) struct BlasHandle {
    raw: sys::cublasHandle_t,
    /// Keeps the stream (and its context) alive as long as the handle.
    stream: Arc<CudaStream>,
    /// Whether [`BlasHandle::prepare`] has run.
    prepared: bool,
}

// SAFETY: the handle is only used through `&mut self` behind the backend's mutex, so one
// thread at a time uses it; cuBLAS handles may move between threads (the context is bound
// before each use).
unsafe impl Send for BlasHandle {}

/// A failed cuBLAS call.
fn blas_error(call: &str, status: sys::cublasStatus_t) -> RuntimeError {
    // SAFETY: cublasGetStatusString returns a pointer to a static NUL-terminated string (or
    // null), which is only read here.
    let text = unsafe {
        let p = sys::cublasGetStatusString(status);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    RuntimeError::Blas {
        call: call.to_string(),
        text,
        source: cudarc::cublas::result::CublasError(status),
    }
}

/// Checks a cuBLAS status.
fn check(call: &str, status: sys::cublasStatus_t) -> Result<(), RuntimeError> {
    if status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(blas_error(call, status))
    }
}

fn op(trans: bool) -> sys::cublasOperation_t {
    if trans {
        sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        sys::cublasOperation_t::CUBLAS_OP_N
    }
}

impl BlasHandle {
    /// Creates a handle on `stream`. Strict fp32 unless `allow_tf32`.
    pub(crate) fn new(stream: &Arc<CudaStream>, allow_tf32: bool) -> Result<Self, RuntimeError> {
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| crate::cuda::errors::driver_error("cuCtxSetCurrent", e))?;
        let mut raw: sys::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: `raw` is a live out-pointer; the context is current.
        check("cublasCreate", unsafe { sys::cublasCreate_v2(&mut raw) })?;
        let handle = BlasHandle {
            raw,
            stream: stream.clone(),
            prepared: false,
        };
        // SAFETY: the handle is live; the stream belongs to the current context and outlives
        // the handle (the handle holds an `Arc` to it).
        check("cublasSetStream", unsafe {
            sys::cublasSetStream_v2(handle.raw, stream.cu_stream() as sys::cudaStream_t)
        })?;
        let mode = if allow_tf32 {
            sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: the handle is live.
        check("cublasSetMathMode", unsafe {
            sys::cublasSetMathMode(handle.raw, mode)
        })?;
        Ok(handle)
    }

    /// Has cuBLAS set itself up now, by one 1 x 1 x 1 product, and waits for it: cuBLAS
    /// initialises itself at its first product (0.1-0.2 s on an H100, in PyTorch as here), which
    /// would otherwise count in the time of whatever product comes first. Once per handle:
    /// later calls return at once (no allocation, no wait).
    pub(crate) fn prepare(&mut self) -> Result<(), RuntimeError> {
        if self.prepared {
            return Ok(());
        }
        let scratch =
            crate::cuda::memory::CudaBuffer::alloc(&self.stream, crate::backend::ElemType::F32, 3)?;
        let base = scratch.device_ptr();
        // SAFETY: the three operands are the three f32 elements of `scratch`, a live buffer of
        // this handle's context (uninitialised values: only the product's setup matters), used
        // on the handle's stream, which is synchronised before `scratch` is dropped.
        unsafe {
            self.gemm(
                DType::F32,
                false,
                true,
                1,
                1,
                1,
                1.0,
                base,
                base + 4,
                base + 8,
            )?
        };
        self.stream
            .synchronize()
            .map_err(|e| crate::cuda::errors::driver_error("cuStreamSynchronize", e))?;
        self.prepared = true;
        Ok(())
    }

    /// Switches between strict fp32 and TF32 tensor-core math for the next products.
    pub(crate) fn set_tf32(&mut self, on: bool) -> Result<(), RuntimeError> {
        let mode = if on {
            sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: the handle is live for as long as `self`.
        check("cublasSetMathMode", unsafe {
            sys::cublasSetMathMode(self.raw, mode)
        })
    }

    fn bind(&self) -> Result<(), RuntimeError> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| crate::cuda::errors::driver_error("cuCtxSetCurrent", e))
    }

    /// Row-major `C = alpha op(A) op(B)` (see [`col_major_gemm`]). `a`, `b`, `c` are device
    /// addresses of arrays of `dtype` holding at least the stored sizes.
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemm(
        &mut self,
        dtype: DType,
        trans_a: bool,
        trans_b: bool,
        m: usize,
        n: usize,
        k: usize,
        alpha: f64,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), RuntimeError> {
        let g = col_major_gemm(trans_a, trans_b, m, n, k);
        self.col_major_gemm(dtype, &g, alpha, b, a, c)
    }

    /// The lower triangle of row-major `C = alpha A A^T` (A stored `n x k`) or, with `trans`,
    /// `alpha A^T A` (A stored `k x n`), in block rows of `block_rows` rows (see
    /// [`crate::cuda::syrk_blocks`]): the diagonal blocks, then each block row's rectangle left
    /// of them. The upper halves of the smallest diagonal blocks are written too; the rest of
    /// the upper triangle is left as it was.
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn syrk_lower_blocked(
        &mut self,
        dtype: DType,
        trans: bool,
        n: usize,
        k: usize,
        alpha: f64,
        a: u64,
        c: u64,
        block_rows: usize,
    ) -> Result<(), RuntimeError> {
        self.syrk_diagonal_blocks(dtype, trans, n, k, alpha, a, c, block_rows)?;
        for (r0, r1) in block_row_ranges(n, block_rows) {
            self.syrk_block_row(dtype, trans, n, k, alpha, a, c, (r0, r1), block_rows)?;
        }
        Ok(())
    }

    /// Every diagonal block of [`BlasHandle::syrk_lower_blocked`], as a few strided batches.
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn syrk_diagonal_blocks(
        &mut self,
        dtype: DType,
        trans: bool,
        n: usize,
        k: usize,
        alpha: f64,
        a: u64,
        c: u64,
        block_rows: usize,
    ) -> Result<(), RuntimeError> {
        for piece in diagonal_pieces(trans, n, k, block_rows, SYRK_LEAF_ROWS) {
            let batch = (piece.count > 1).then_some((piece.count, piece.strides));
            self.syrk_rect(dtype, &piece.block, alpha, a, c, batch)?;
        }
        Ok(())
    }

    /// The GEMM of block row `rows` of a SYRK in blocks of `block_rows` rows (see
    /// [`block_row_gemm`]).
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn syrk_block_row(
        &mut self,
        dtype: DType,
        trans: bool,
        n: usize,
        k: usize,
        alpha: f64,
        a: u64,
        c: u64,
        rows: (usize, usize),
        block_rows: usize,
    ) -> Result<(), RuntimeError> {
        match block_row_gemm(trans, n, k, rows, block_rows, SYRK_LEAF_ROWS) {
            Some(blk) => self.syrk_rect(dtype, &blk, alpha, a, c, None),
            None => Ok(()),
        }
    }

    /// One rectangle of a SYRK (or a strided batch of them) on `A` at `a` and `C` at `c`.
    ///
    /// # Safety
    /// As for [`BlasHandle::gemm`]: the addresses hold what the GEMM reads and writes.
    unsafe fn syrk_rect(
        &mut self,
        dtype: DType,
        blk: &SyrkBlock,
        alpha: f64,
        a: u64,
        c: u64,
        batch: Option<(usize, (usize, usize, usize))>,
    ) -> Result<(), RuntimeError> {
        let esz = dtype.size_bytes() as u64;
        self.col_major_gemm_batched(
            dtype,
            &blk.gemm,
            alpha,
            (
                a + blk.first_offset as u64 * esz,
                a + blk.second_offset as u64 * esz,
                c + blk.c_offset as u64 * esz,
            ),
            batch,
        )
    }

    /// A column-major GEMM `C = alpha op(first) op(second)` on device arrays of `dtype`.
    ///
    /// # Safety
    /// As for [`BlasHandle::gemm`]: the addresses hold what the GEMM reads and writes.
    unsafe fn col_major_gemm(
        &mut self,
        dtype: DType,
        g: &ColMajorGemm,
        alpha: f64,
        first: u64,
        second: u64,
        c: u64,
    ) -> Result<(), RuntimeError> {
        self.col_major_gemm_batched(dtype, g, alpha, (first, second, c), None)
    }

    /// [`BlasHandle::col_major_gemm`] on `(first, second, c)`, or with `batch = (count,
    /// (stride_first, stride_second, stride_c))` that many GEMMs at those element strides (one
    /// strided-batched call).
    ///
    /// # Safety
    /// As for [`BlasHandle::gemm`]: the addresses hold what the GEMM reads and writes.
    unsafe fn col_major_gemm_batched(
        &mut self,
        dtype: DType,
        g: &ColMajorGemm,
        alpha: f64,
        (first, second, c): (u64, u64, u64),
        batch: Option<(usize, (usize, usize, usize))>,
    ) -> Result<(), RuntimeError> {
        self.bind()?;
        let (mm, nn, kk) = (to_i64(g.m, "m")?, to_i64(g.n, "n")?, to_i64(g.k, "k")?);
        let (l1, l2, lc) = (
            to_i64(g.ld_first, "lda")?,
            to_i64(g.ld_second, "ldb")?,
            to_i64(g.ldc, "ldc")?,
        );
        let (t1, t2) = (op(g.trans_first), op(g.trans_second));
        let (count, (s1, s2, sc)) = match batch {
            Some((count, strides)) => (
                Some(to_i64(count, "batch count")?),
                (
                    to_i64(strides.0, "stride")?,
                    to_i64(strides.1, "stride")?,
                    to_i64(strides.2, "stride")?,
                ),
            ),
            None => (None, (0, 0, 0)),
        };
        // SAFETY (every call below): the handle is live and bound to the backend's stream; the
        // pointers are device arrays of the dtype whose sizes the caller validated against the
        // operands' shapes and leading dimensions (at least 1); a batch comes from
        // `syrk_blocks::diagonal_pieces`, whose rectangles all lie inside the `n x n` C and the
        // operands' rows of A (tested on the host), so cuBLAS reads and writes within them.
        let status = match (dtype, count) {
            (DType::F32, None) => {
                let (alpha, beta) = (alpha as f32, 0f32);
                // SAFETY: see above.
                unsafe {
                    sys::cublasSgemm_v2_64(
                        self.raw,
                        t1,
                        t2,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        first as *const f32,
                        l1,
                        second as *const f32,
                        l2,
                        &beta,
                        c as *mut f32,
                        lc,
                    )
                }
            }
            (DType::F64, None) => {
                let beta = 0f64;
                // SAFETY: see above.
                unsafe {
                    sys::cublasDgemm_v2_64(
                        self.raw,
                        t1,
                        t2,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        first as *const f64,
                        l1,
                        second as *const f64,
                        l2,
                        &beta,
                        c as *mut f64,
                        lc,
                    )
                }
            }
            (DType::F32, Some(count)) => {
                let (alpha, beta) = (alpha as f32, 0f32);
                // SAFETY: see above.
                unsafe {
                    sys::cublasSgemmStridedBatched_64(
                        self.raw,
                        t1,
                        t2,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        first as *const f32,
                        l1,
                        s1,
                        second as *const f32,
                        l2,
                        s2,
                        &beta,
                        c as *mut f32,
                        lc,
                        sc,
                        count,
                    )
                }
            }
            (DType::F64, Some(count)) => {
                let beta = 0f64;
                // SAFETY: see above.
                unsafe {
                    sys::cublasDgemmStridedBatched_64(
                        self.raw,
                        t1,
                        t2,
                        mm,
                        nn,
                        kk,
                        &alpha,
                        first as *const f64,
                        l1,
                        s1,
                        second as *const f64,
                        l2,
                        s2,
                        &beta,
                        c as *mut f64,
                        lc,
                        sc,
                        count,
                    )
                }
            }
        };
        let name = match (dtype, batch.is_some()) {
            (DType::F32, false) => "cublasSgemm",
            (DType::F64, false) => "cublasDgemm",
            (DType::F32, true) => "cublasSgemmStridedBatched",
            (DType::F64, true) => "cublasDgemmStridedBatched",
        };
        check(name, status)
    }

    /// Row-major SYRK into the lower triangle of the row-major `C` (see [`col_major_syrk`]);
    /// the caller mirrors it into the upper triangle.
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn syrk_lower(
        &mut self,
        dtype: DType,
        trans: bool,
        n: usize,
        k: usize,
        alpha: f64,
        a: u64,
        c: u64,
    ) -> Result<(), RuntimeError> {
        self.bind()?;
        let s = col_major_syrk(trans, n, k);
        let (nn, kk, lda, ldc) = (
            to_i64(s.n, "n")?,
            to_i64(s.k, "k")?,
            to_i64(s.lda, "lda")?,
            to_i64(n.max(1), "ldc")?,
        );
        let upper = sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER;
        let status = match dtype {
            DType::F32 => {
                let (alpha, beta) = (alpha as f32, 0f32);
                // SAFETY: live handle on the backend's stream; `a` holds n*k and `c` n*n f32
                // values (validated by the caller) and the leading dimensions match.
                unsafe {
                    sys::cublasSsyrk_v2_64(
                        self.raw,
                        upper,
                        op(s.trans),
                        nn,
                        kk,
                        &alpha,
                        a as *const f32,
                        lda,
                        &beta,
                        c as *mut f32,
                        ldc,
                    )
                }
            }
            DType::F64 => {
                let beta = 0f64;
                // SAFETY: as above, for f64 arrays.
                unsafe {
                    sys::cublasDsyrk_v2_64(
                        self.raw,
                        upper,
                        op(s.trans),
                        nn,
                        kk,
                        &alpha,
                        a as *const f64,
                        lda,
                        &beta,
                        c as *mut f64,
                        ldc,
                    )
                }
            }
        };
        check(
            if dtype == DType::F32 {
                "cublasSsyrk"
            } else {
                "cublasDsyrk"
            },
            status,
        )
    }

    /// Row-major `y = alpha op(A) x` with A stored `m x n` (see [`col_major_gemv`]).
    ///
    /// # Safety
    /// Every address is device memory of this handle's context holding the operands at the
    /// stated sizes (and leading dimensions) in `dtype`, usable on the handle's stream.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn gemv(
        &mut self,
        dtype: DType,
        trans: bool,
        m: usize,
        n: usize,
        alpha: f64,
        a: u64,
        x: u64,
        y: u64,
    ) -> Result<(), RuntimeError> {
        self.bind()?;
        let g = col_major_gemv(trans, m, n);
        let (mm, nn, lda) = (to_i64(g.m, "m")?, to_i64(g.n, "n")?, to_i64(g.lda, "lda")?);
        let status = match dtype {
            DType::F32 => {
                let (alpha, beta) = (alpha as f32, 0f32);
                // SAFETY: live handle on the backend's stream; `a` holds m*n values and `x`,
                // `y` the lengths op(A) needs (validated by the caller); unit strides.
                unsafe {
                    sys::cublasSgemv_v2_64(
                        self.raw,
                        op(g.trans),
                        mm,
                        nn,
                        &alpha,
                        a as *const f32,
                        lda,
                        x as *const f32,
                        1,
                        &beta,
                        y as *mut f32,
                        1,
                    )
                }
            }
            DType::F64 => {
                let beta = 0f64;
                // SAFETY: as above, for f64 arrays.
                unsafe {
                    sys::cublasDgemv_v2_64(
                        self.raw,
                        op(g.trans),
                        mm,
                        nn,
                        &alpha,
                        a as *const f64,
                        lda,
                        x as *const f64,
                        1,
                        &beta,
                        y as *mut f64,
                        1,
                    )
                }
            }
        };
        check(
            if dtype == DType::F32 {
                "cublasSgemv"
            } else {
                "cublasDgemv"
            },
            status,
        )
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: the handle was created by cublasCreate and is destroyed once.
        let _ = unsafe { sys::cublasDestroy_v2(self.raw) };
    }
}
