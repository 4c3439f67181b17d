//! `Builtin::PermuteRows`: a matrix's rows (or an index vector's entries) in a selection
//! matrix's order, cluster by cluster.

use super::{Io, StepCx};
use crate::backend::Arg;
use crate::cuda::args::{count, csr, dense, index};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;

/// Runs a permutation step: inputs `(M, S)`, output `M`'s rows in `S`'s column order.
pub(crate) fn run(cx: &StepCx<'_>, (inputs, outputs): Io<'_, '_>) -> Result<(), RuntimeError> {
    count("rows by cluster", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let s = csr(&inputs[1], elem, "rows by cluster: the selection")?;
    // (address, rows, 32-bit words per row, fill of rows past the selection's entries)
    let (src, dst) = match (&inputs[0], &outputs[0]) {
        (Arg::Index { .. }, _) => {
            let (src, n) = index(&inputs[0], "rows by cluster input")?;
            let (dst, m) = index(&outputs[0], "rows by cluster output")?;
            ((src, n, 1, u32::MAX), (dst, m))
        }
        _ => {
            let a = dense(&inputs[0], elem, "rows by cluster input")?;
            let o = dense(&outputs[0], elem, "rows by cluster output")?;
            if o.cols != a.cols {
                return Err(invalid(format!(
                    "rows by cluster of a {} x {} matrix into {} x {}",
                    a.rows, a.cols, o.rows, o.cols
                )));
            }
            let words = a.cols * elem.size_bytes() / 4;
            ((a.ptr, a.rows, words, 0), (o.ptr, o.rows))
        }
    };
    let (src_ptr, rows, words, fill) = src;
    if dst.1 != rows || s.cols != rows {
        return Err(invalid(format!(
            "rows by cluster: {rows} rows, {} in the output, a selection of {} points",
            dst.1, s.cols
        )));
    }
    // SAFETY: input and output hold `rows` rows of `words` 32-bit words each, the selection's
    // row offsets `k + 1` entries and its column indices at least `row_ptr[k]` (<= rows)
    // entries below `rows` (checked above and by `csr`).
    unsafe {
        cx.device.builtins(cx.stream).permute_rows(
            rows, words, s.row_ptr, s.col_idx, s.rows, src_ptr, dst.0, fill,
        )
    }
}
