//! `Builtin::Diag`: the diagonal of a square matrix.

use super::{vector_len, Io, StepCx};
use crate::backend::ElemType;
use crate::cuda::args::{count, dense};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;
use popcorn_dsl::ops::Diag;

/// Runs a diagonal step: input `M` (`n x n`, or `n` rows of a square matrix starting at its
/// row `offset`), output the `n`-vector.
pub(crate) fn run(
    cx: &StepCx<'_>,
    op: &Diag,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("diag", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let held = inputs[0].held();
    if held.is_some() && elem != ElemType::F32 {
        return Err(invalid(
            "diag: a matrix held in 16 bits is read in f32 plans only",
        ));
    }
    let m_elem = held.map_or(elem, ElemType::Half);
    let m = dense(&inputs[0], m_elem, "diag input")?;
    let out = dense(&outputs[0], elem, "diag output")?;
    op.check_input(m.rows, m.cols).map_err(invalid)?;
    vector_len("diag output", out.len(), m.rows)?;
    // Row i's diagonal entry is at i * ld + offset + i: the matrix read from column `offset`.
    let first = m.ptr + (op.offset * m_elem.size_bytes()) as u64;
    // SAFETY: `m` holds `n` rows of `ld = m.cols` entries of `m_elem` and `offset + n <= ld`
    // (checked above), so every entry read from `first` lies inside it; `out` holds its `n`
    // entries of the plan's type.
    unsafe {
        cx.device
            .builtins(cx.stream)
            .diag(cx.scalar(), held, first, m.rows, m.cols, out.ptr)
    }
}
