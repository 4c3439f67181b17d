//! `Builtin::Diag`: the diagonal of a square matrix.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;

/// Runs a diagonal step: input `M` (`n x n`), output the `n`-vector.
pub(crate) fn run(cx: &StepCx<'_>, (inputs, outputs): Io<'_, '_>) -> Result<(), RuntimeError> {
    count("diag", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let m = dense(&inputs[0], elem, "diag input")?;
    let out = dense(&outputs[0], elem, "diag output")?;
    if m.rows != m.cols {
        return Err(invalid(format!(
            "diag input is {} x {}, not square",
            m.rows, m.cols
        )));
    }
    vector_len("diag output", out.len(), m.rows)?;
    // SAFETY: `m` holds the square matrix and `out` its `n` entries (checked above).
    unsafe {
        cx.device
            .builtins(cx.stream)
            .diag(cx.scalar(), m.ptr, m.rows, m.cols, out.ptr)
    }
}
