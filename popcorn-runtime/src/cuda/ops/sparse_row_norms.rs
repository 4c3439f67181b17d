//! `Builtin::SparseRowNorms`: the squared norm of each row of a CSR matrix, one thread per row.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, csr, dense};
use crate::error::RuntimeError;

/// Runs a row-norms step: input `S` (CSR `r x c`), output the `r`-vector.
pub(crate) fn run(cx: &StepCx<'_>, (inputs, outputs): Io<'_, '_>) -> Result<(), RuntimeError> {
    count("csr rownorms", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let s = csr(&inputs[0], elem, "csr rownorms input")?;
    let out = dense(&outputs[0], elem, "csr rownorms output")?;
    vector_len("csr rownorms output", out.len(), s.rows)?;
    // SAFETY: `s` is a CSR matrix checked against its buffers and `out` holds its `rows`
    // entries (checked).
    unsafe {
        cx.device.builtins(cx.stream).csr_row_norms(
            cx.scalar(),
            s.rows,
            (s.row_ptr, s.col_idx, s.values),
            out.ptr,
        )
    }
}
