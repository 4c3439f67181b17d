//! `StepOp::SpMM`: a sparse (CSR) matrix times a dense one, on either side, through cuSPARSE.

use super::{Io, StepCx};
use crate::cuda::args::{count, csr, dense, shape};
use crate::cuda::nvrtc::poisoned;
use crate::cuda::sparse::{value_type, DenseOperand, SpmmRequest};
use crate::error::RuntimeError;

/// The product's shape: `C (m x n) = op(S) op(D)` (`sparse_left`) or `op(D) op(S)`, inner
/// dimension `k`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) sparse_left: bool,
    pub(crate) trans_sparse: bool,
    pub(crate) trans_dense: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
}

/// Runs an SpMM step: inputs in product order, output `C`.
pub(crate) fn run(
    cx: &StepCx<'_>,
    p: Shape,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    cx.require_main_lane("spmm")?;
    count("spmm", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let (si, di) = if p.sparse_left { (0, 1) } else { (1, 0) };
    let s = csr(&inputs[si], elem, "spmm sparse input")?;
    let d = dense(&inputs[di], elem, "spmm dense input")?;
    let c = dense(&outputs[0], elem, "spmm output C")?;
    let (s_shape, d_shape) = if p.sparse_left {
        (
            if p.trans_sparse {
                (p.k, p.m)
            } else {
                (p.m, p.k)
            },
            if p.trans_dense {
                (p.n, p.k)
            } else {
                (p.k, p.n)
            },
        )
    } else {
        (
            if p.trans_sparse {
                (p.n, p.k)
            } else {
                (p.k, p.n)
            },
            if p.trans_dense {
                (p.k, p.m)
            } else {
                (p.m, p.k)
            },
        )
    };
    shape("spmm sparse input", (s.rows, s.cols), s_shape)?;
    shape("spmm dense input", (d.rows, d.cols), d_shape)?;
    shape("spmm output C", (c.rows, c.cols), (p.m, p.n))?;
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    if p.k == 0 || s.nnz == 0 {
        // SAFETY: `c` was checked to hold `m x n` elements of the plan's type.
        return unsafe { cx.zero(c.ptr, c.len(), elem) };
    }
    let req = SpmmRequest {
        ty: value_type(cx.dtype),
        sparse_left: p.sparse_left,
        trans_sparse: p.trans_sparse,
        trans_dense: p.trans_dense,
        m: p.m,
        n: p.n,
        alpha: cx.alpha,
    };
    let operand = DenseOperand {
        ptr: d.ptr,
        rows: d.rows,
        cols: d.cols,
    };
    let mut sparse = cx.device.sparse.lock().map_err(|_| poisoned())?;
    // SAFETY: every address comes from a buffer of this device whose element type and size
    // were checked above against the shapes described; the buffers are borrowed for the step
    // and freed stream-ordered; the handle is bound to the main stream this step runs on.
    unsafe { sparse.spmm(req, &s, operand, c.ptr) }
}
