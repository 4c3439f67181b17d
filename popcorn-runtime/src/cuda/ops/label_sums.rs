//! `Builtin::LabelSums`: a vector's entries summed by label.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense, index};
use crate::error::RuntimeError;

/// Runs a label-sums step: inputs `(x, labels)`, output the `k` sums.
pub(crate) fn run(
    cx: &StepCx<'_>,
    k: usize,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("label sums", inputs, outputs, 2, 1)?;
    let elem = cx.elem();
    let x = dense(&inputs[0], elem, "label sums input x")?;
    let (labels, n) = index(&inputs[1], "label sums labels")?;
    let out = dense(&outputs[0], elem, "label sums output")?;
    vector_len("label sums input x", x.len(), n)?;
    vector_len("label sums output", out.len(), k)?;
    // SAFETY: `x` and `labels` hold `n` entries and `out` `k` values (checked above).
    unsafe {
        cx.device
            .builtins(cx.stream)
            .label_sums(cx.scalar(), x.ptr, labels, n, k, out.ptr)
    }
}
