//! `Builtin::PadCols`: a dense matrix with zero columns appended (a TF32 SYRK's operand padded
//! to whole tensor-core rows): the added columns zeroed, then the rows copied, as two 2-D
//! copies on the stream.

use super::{Io, StepCx};
use crate::cuda::args::{count, dense};
use crate::cuda::driver;
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;

/// Runs a padding step: input `A` (`n x k`), output `P` (`n x cols`, `cols >= k`).
pub(crate) fn run(
    cx: &StepCx<'_>,
    cols: usize,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("pad columns", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let a = dense(&inputs[0], elem, "pad columns input")?;
    let p = dense(&outputs[0], elem, "pad columns output")?;
    if p.rows != a.rows || p.cols != cols || cols < a.cols {
        return Err(invalid(format!(
            "pad columns of a {} x {} matrix into {} x {} (expected {} x {cols})",
            a.rows, a.cols, p.rows, p.cols, a.rows
        )));
    }
    let esz = elem.size_bytes();
    let words_per_elem = esz / 4;
    // SAFETY: `p` holds `rows x cols` elements (checked): each row's added columns `[k, cols)`
    // lie inside it, and every element size is a whole number of 32-bit words.
    unsafe {
        driver::memset32_rows(
            cx.stream,
            p.ptr,
            cols * esz,
            a.cols * words_per_elem,
            0,
            (cols - a.cols) * words_per_elem,
            p.rows,
        )?;
    }
    // SAFETY: `a` holds `rows x k` elements and `p` `rows x cols` (checked), `k <= cols`; rows
    // are `k` and `cols` elements apart.
    unsafe {
        driver::copy_rows(
            cx.stream,
            p.ptr,
            cols * esz,
            a.ptr,
            a.cols * esz,
            a.cols * esz,
            a.rows,
        )
    }
}
