//! `Builtin::Counts`: cluster sizes, as floats.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense, index};
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;

/// Runs a counts step: input the labels, output the `k` sizes.
pub(crate) fn run(
    cx: &StepCx<'_>,
    k: usize,
    (inputs, outputs): Io<'_, '_>,
) -> Result<(), RuntimeError> {
    count("counts", inputs, outputs, 1, 1)?;
    let (labels, n) = index(&inputs[0], "counts labels")?;
    let out = dense(&outputs[0], cx.elem(), "counts output")?;
    vector_len("counts output", out.len(), k)?;
    let mut scratch = cx.device.scratch.lock().map_err(|_| poisoned())?;
    // SAFETY: `labels` holds `n` u32 labels and `out` `k` values (checked above); the scratch
    // is the device's, used on this stream.
    unsafe {
        cx.device
            .builtins(cx.stream)
            .counts(cx.scalar(), &mut scratch, labels, n, k, out.ptr)
    }
}
