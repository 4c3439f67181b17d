//! `Builtin::Densify`: a CSR matrix written dense (or its transpose), zeroed on the stream then
//! scattered by one thread per row.

use super::{Io, StepCx};
use crate::cuda::args::{count, csr, dense, shape};
use crate::error::RuntimeError;

/// Runs a densify step: input `S` (CSR `r x c`), output `D` (`r x c`, or `c x r` transposed).
pub(crate) fn run(
    cx: &StepCx<'_>,
    transpose: bool,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("densify", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let s = csr(&inputs[0], elem, "densify input")?;
    let d = dense(&outputs[0], elem, "densify output")?;
    let want = if transpose {
        (s.cols, s.rows)
    } else {
        (s.rows, s.cols)
    };
    shape("densify output", (d.rows, d.cols), want)?;
    // SAFETY: `d` holds `rows x cols` elements of the plan's type (checked).
    unsafe { cx.zero(d.ptr, d.len(), elem)? };
    // SAFETY: `s` is a CSR matrix checked against its buffers (offsets, indices and values of
    // `nnz` entries, columns validated when it was made) and `d` holds every entry its indices
    // address at leading dimension `d.cols`.
    unsafe {
        cx.device.builtins(cx.stream).csr_scatter(
            cx.scalar(),
            s.rows,
            (s.row_ptr, s.col_idx, s.values),
            transpose,
            d.ptr,
            d.cols,
        )
    }
}
