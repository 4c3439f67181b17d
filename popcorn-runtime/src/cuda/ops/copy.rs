//! `StepOp::Copy`: an output that repeats an input or another output.

use super::{Io, StepCx};
use crate::backend::{Arg, BufferInfo, ElemType};
use crate::cuda::args::{self, count};
use crate::cuda::driver;
use crate::cuda::errors::invalid;
use crate::cuda::memory::CudaBuffer;
use crate::error::RuntimeError;

/// A dense or index value as address, element count and element type.
fn flat(arg: &Arg<'_, CudaBuffer>, what: &str) -> Result<(u64, usize, ElemType), RuntimeError> {
    let (buf, len) = match arg {
        Arg::Dense { buf, rows, cols } => (*buf, rows * cols),
        Arg::Index { buf, len } => (*buf, *len),
        other => {
            return Err(invalid(format!(
                "{what}: expected a dense or index value, got {}",
                args::kind(other)
            )))
        }
    };
    args::check_buffer(buf, buf.elem(), len, what)?;
    Ok((buf.device_ptr(), len, buf.elem()))
}

/// Runs a copy step: input and output of the same element type.
pub(crate) fn run(cx: &StepCx<'_>, (inputs, outputs): Io<'_, '_>) -> Result<(), RuntimeError> {
    count("copy", inputs, outputs, 1, 1)?;
    let (src, src_len, src_elem) = flat(&inputs[0], "copy input")?;
    let (dst, dst_len, dst_elem) = flat(&outputs[0], "copy output")?;
    if src_elem != dst_elem {
        return Err(invalid(format!(
            "copy from {src_elem:?} to {dst_elem:?} elements"
        )));
    }
    if src_len < dst_len {
        return Err(invalid(format!(
            "copy of {dst_len} elements from a value of {src_len}"
        )));
    }
    if src == dst || dst_len == 0 {
        return Ok(());
    }
    // SAFETY: both addresses are buffers of this device holding at least `dst_len` elements
    // of the same type (checked above).
    unsafe { driver::copy_dtod(cx.stream, dst, src, dst_len * dst_elem.size_bytes()) }
}
