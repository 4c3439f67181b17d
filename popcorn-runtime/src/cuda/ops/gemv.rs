//! `StepOp::Gemv`: `y = alpha op(A) x` through cuBLAS.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense, shape};
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;

/// Runs a GEMV step: inputs `(A, x)` with A stored `m x n`, output `y`.
pub(crate) fn run(
    cx: &StepCx<'_>,
    trans: bool,
    m: usize,
    n: usize,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    cx.require_main_lane("gemv")?;
    count("gemv", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let a = dense(&inputs[0], elem, "gemv input A")?;
    let x = dense(&inputs[1], elem, "gemv input x")?;
    let y = dense(&outputs[0], elem, "gemv output y")?;
    shape("gemv input A", (a.rows, a.cols), (m, n))?;
    let (x_len, y_len) = if trans { (m, n) } else { (n, m) };
    vector_len("gemv input x", x.len(), x_len)?;
    vector_len("gemv output y", y.len(), y_len)?;
    if y_len == 0 {
        return Ok(());
    }
    if x_len == 0 {
        // SAFETY: `y` was checked to hold `y_len` elements of the plan's type.
        return unsafe { cx.zero(y.ptr, y_len, elem) };
    }
    let mut blas = cx.device.blas.lock().map_err(|_| poisoned())?;
    // SAFETY: A, x and y were checked above against the product's shapes in the plan's type;
    // they are buffers of this device, used on its main stream.
    unsafe { blas.gemv(cx.dtype, trans, m, n, cx.alpha, a.ptr, x.ptr, y.ptr) }
}
