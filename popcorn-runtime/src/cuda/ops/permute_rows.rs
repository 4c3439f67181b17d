//! `Builtin::PermuteRows`: a matrix's rows (or an index vector's entries) in a selection
//! matrix's order, cluster by cluster, or back. The order is the selection's column indices,
//! all `n` of them: the selection step lists the points with labels `>= k` after the
//! clusters (see `Builtins::selection`).

use super::{Io, StepCx};
use crate::backend::Arg;
use crate::cuda::args::{count, csr, dense, index};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;
use popcorn_dsl::ops::{OpFacts, PermuteRows};

/// Runs a permutation step: inputs `(M, S)`, output `M`'s rows in `S`'s order (`op.inverse`
/// false: `out[p] = M[col_idx[p]]`) or back (true: `out[col_idx[p]] = M[p]`), the step named
/// by the op.
pub(crate) fn run(
    cx: &StepCx<'_>,
    op: PermuteRows,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    let inverse = op.inverse;
    let what = op.step_name();
    count(what, inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let s = csr(&inputs[1], elem, &format!("{what}: the selection"))?;
    // (address, rows, 32-bit words per row, leading dimension in words)
    let (src, dst) = match (&inputs[0], &outputs[0]) {
        (Arg::Index { .. }, _) => {
            let (src, n) = index(&inputs[0], &format!("{what} input"))?;
            let (dst, m) = index(&outputs[0], &format!("{what} output"))?;
            ((src, n, 1, 1), (dst, m, 1))
        }
        _ => {
            let a = dense(&inputs[0], elem, &format!("{what} input"))?;
            let o = dense(&outputs[0], elem, &format!("{what} output"))?;
            if o.cols != a.cols {
                return Err(invalid(format!(
                    "{what} of a {} x {} matrix into {} x {}",
                    a.rows, a.cols, o.rows, o.cols
                )));
            }
            let words = a.cols * elem.size_bytes() / 4;
            ((a.ptr, a.rows, words, words), (o.ptr, o.rows, words))
        }
    };
    let (src_ptr, rows, words, src_ld) = src;
    let (dst_ptr, dst_rows, dst_ld) = dst;
    if dst_rows != rows || s.cols != rows {
        return Err(invalid(format!(
            "{what}: {rows} rows, {dst_rows} in the output, a selection of {} points",
            s.cols
        )));
    }
    if s.nnz < rows {
        return Err(invalid(format!(
            "{what}: the selection's column indices hold {} entries, the order needs {rows}",
            s.nnz
        )));
    }
    let bytes = (rows * words * 4) as u64;
    if bytes > 0 && src_ptr < dst_ptr + bytes && dst_ptr < src_ptr + bytes {
        return Err(invalid(format!("{what}: the output overlaps the input")));
    }
    // SAFETY: input and output hold `rows` rows of `words` 32-bit words each and do not
    // overlap, and the selection's column indices at least `rows` entries (checked above and
    // by `csr`). The selection step of this backend writes all `n` column indices, each point
    // once (its clusters, then the points outside them).
    unsafe {
        cx.device.builtins(cx.stream).permute_rows(
            rows, words, s.col_idx, src_ptr, src_ld, dst_ptr, dst_ld, inverse,
        )
    }
}
