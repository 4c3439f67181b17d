//! `Builtin::Selection`: the CSR selection matrix `V[c, i] = 1/|c|` for `labels[i] == c`, or
//! weighted, `V[c, i] = w[i] / W_c`.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, csr, dense, index, shape};
use crate::cuda::errors::invalid;
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;

/// Runs a selection step: input the labels (and, `weighted`, the weights), output the `k x n`
/// CSR matrix. Labels `>= k` are in no row; their points follow the clusters' in the column
/// indices (`col_idx[nnz..n]`, ascending), so all `n` column indices are the order
/// `Builtin::PermuteRows` uses.
pub(crate) fn run(
    cx: &StepCx<'_>,
    k: usize,
    weighted: bool,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("selection", inputs, outputs, 1 + usize::from(weighted), 1)?;
    let (labels, n) = index(&inputs[0], "selection labels")?;
    let weights = if weighted {
        let w = dense(&inputs[1], cx.elem(), "selection weights")?;
        vector_len("selection weights", w.len(), n)?;
        Some(w.ptr)
    } else {
        None
    };
    let v = csr(&outputs[0], cx.elem(), "selection output")?;
    shape("selection output", (v.rows, v.cols), (k, n))?;
    if v.nnz < n {
        return Err(invalid(format!(
            "selection output holds {} entries but {n} labels may need {n}",
            v.nnz
        )));
    }
    let mut scratch = cx.device.scratch.lock().map_err(|_| poisoned())?;
    let builtins = cx.device.builtins(cx.stream);
    // SAFETY: `labels` holds `n` labels; `v` holds `k + 1` row offsets and `n` column
    // indices and values, all of which the step writes (checked above); the scratch is the
    // device's, used on this stream.
    unsafe {
        builtins.selection(
            cx.scalar(),
            &mut scratch,
            labels,
            n,
            k,
            v.row_ptr,
            v.col_idx,
            v.values,
        )?;
    }
    let Some(weights) = weights else {
        return Ok(());
    };
    // SAFETY: the selection just built `k + 1` row offsets and, within the first `n`
    // entries, the column indices (each below `n`) and values of rows `0..k`; `weights`
    // holds `n` values (checked above).
    unsafe { builtins.selection_weigh(cx.scalar(), k, v.row_ptr, v.col_idx, weights, v.values) }
}
