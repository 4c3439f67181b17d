//! `StepOp::Gemm`: `C = alpha op(A) op(B)` through cuBLAS (TF32 tensor cores where the step or
//! the backend allows them).

use super::{Io, StepCx};
use crate::cuda::args::{count, dense, shape};
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;
use popcorn_dsl::plan::GemmStep;

/// Runs a GEMM step: inputs `(A, B)`, output `C`.
pub(crate) fn run(
    cx: &StepCx<'_>,
    g: &GemmStep,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    cx.require_main_lane("gemm")?;
    count("gemm", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let a = dense(&inputs[0], elem, "gemm input A")?;
    let b = dense(&inputs[1], elem, "gemm input B")?;
    let c = dense(&outputs[0], elem, "gemm output C")?;
    shape(
        "gemm input A",
        (a.rows, a.cols),
        if g.trans_a { (g.k, g.m) } else { (g.m, g.k) },
    )?;
    shape(
        "gemm input B",
        (b.rows, b.cols),
        if g.trans_b { (g.n, g.k) } else { (g.k, g.n) },
    )?;
    shape("gemm output C", (c.rows, c.cols), (g.m, g.n))?;
    if g.m == 0 || g.n == 0 {
        return Ok(());
    }
    if g.k == 0 {
        // SAFETY: `c` was checked to hold `m x n` elements of the plan's type.
        return unsafe { cx.zero(c.ptr, c.len(), elem) };
    }
    let mut blas = cx.device.blas.lock().map_err(|_| poisoned())?;
    blas.set_tf32(g.tf32 || cx.device.allow_tf32)?;
    // SAFETY: A, B and C were checked above to hold the stored shapes of the product in the
    // plan's type; they are buffers of this device, used on its main stream.
    unsafe {
        blas.gemm(
            cx.dtype, g.trans_a, g.trans_b, g.m, g.n, g.k, cx.alpha, a.ptr, b.ptr, c.ptr,
        )
    }
}
