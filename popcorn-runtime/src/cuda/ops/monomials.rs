//! `Builtin::Monomials`: scaled products of two columns of `[X, 1]` (a polynomial kernel's
//! explicit features), one kernel writing the result once.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense, index};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;

/// Runs a monomials step: inputs `X` (`n x d`), the column indices `a` and `b` and the
/// coefficients `c` (`f` each); output `Y` (`n x f`).
pub(crate) fn run(cx: &StepCx<'_>, (inputs, outputs): Io<'_, '_>) -> Result<(), RuntimeError> {
    count("monomials", inputs, outputs, 4, 1)?;
    let elem = cx.elem();
    let x = dense(&inputs[0], elem, "monomials' points")?;
    let (a, f) = index(&inputs[1], "monomials' first columns")?;
    let (b, fb) = index(&inputs[2], "monomials' second columns")?;
    let c = dense(&inputs[3], elem, "monomials' coefficients")?;
    let y = dense(&outputs[0], elem, "monomials output")?;
    vector_len("monomials' second columns", fb, f)?;
    vector_len("monomials' coefficients", c.len(), f)?;
    if y.rows != x.rows || y.cols != f {
        return Err(invalid(format!(
            "monomials of {} points into {} x {} (expected {} x {f})",
            x.rows, y.rows, y.cols, x.rows
        )));
    }
    // SAFETY: `x` holds `n x d` values (leading dimension d), `a` and `b` `f` u32 indices,
    // `c` `f` values and `y` `n x f` values (checked above); indices past `d` read no memory
    // (the kernel gives them the ones).
    unsafe {
        cx.device.builtins(cx.stream).monomials(
            cx.scalar(),
            (x.rows, x.cols, x.ptr),
            (a, b, c.ptr, f),
            y.ptr,
        )
    }
}
