//! `StepOp::SpMV`: a sparse (CSR) matrix times a vector, through cuSPARSE.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, csr, dense};
use crate::cuda::nvrtc::poisoned;
use crate::cuda::sparse::value_type;
use crate::error::RuntimeError;

/// Runs an SpMV step: inputs `(S, x)`, output `y = alpha op(S) x`.
pub(crate) fn run(
    cx: &StepCx<'_>,
    trans: bool,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    cx.require_main_lane("spmv")?;
    count("spmv", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let s = csr(&inputs[0], elem, "spmv sparse input")?;
    let x = dense(&inputs[1], elem, "spmv input x")?;
    let y = dense(&outputs[0], elem, "spmv output y")?;
    let (x_len, y_len) = if trans {
        (s.rows, s.cols)
    } else {
        (s.cols, s.rows)
    };
    vector_len("spmv input x", x.len(), x_len)?;
    vector_len("spmv output y", y.len(), y_len)?;
    if y_len == 0 {
        return Ok(());
    }
    if x_len == 0 || s.nnz == 0 {
        // SAFETY: `y` was checked to hold `y_len` elements of the plan's type.
        return unsafe { cx.zero(y.ptr, y_len, elem) };
    }
    let mut sparse = cx.device.sparse.lock().map_err(|_| poisoned())?;
    // SAFETY: as for SpMM: checked buffers of this device, on the main stream where the
    // handle is bound.
    unsafe { sparse.spmv(value_type(cx.dtype), trans, cx.alpha, &s, x.ptr, y.ptr) }
}
