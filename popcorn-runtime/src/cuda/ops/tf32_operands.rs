//! TF32 operands rounded once in memory: a pipelined TF32 contraction stages each chunk of its
//! right operand `B` once per block of rows (and of `A` once per column tile where `A` is not
//! kept resident), rounding every staged copy. Where `B` would be staged several times, the
//! launcher rounds it (and `A`, when it is the same matrix) into the lane's scratch first and
//! launches the kernel that leaves those chunks as staged ([`kernels_gen::emit_rounded`]). The
//! rounding is the kernel's own (`cvt.rna.tf32.f32`), so the results are the same bit for bit.
//! The copy's rows are padded to a multiple of 16 bytes ([`padded_ld`]): the kernel then stages
//! them with 16-byte copies, where rows of an odd depth (Kernel K-means' points, d = 50) would
//! take four 4-byte copies, each with its own bounds test, per 16 bytes.

use super::StepCx;
use crate::backend::{Arg, BufferInfo};
use crate::cuda::errors::invalid;
use crate::cuda::memory::{DeviceAddress, GrowBuffer};
use crate::error::RuntimeError;
use kernel_ir::Form;
use kernels_gen::RoundedOperands;
use popcorn_dsl::plan::FusedStep;
use std::sync::MutexGuard;

/// Rows of the product from which `B` is rounded in memory: with fewer, its chunks are staged
/// by at most three blocks of rows and rounding them in the kernel costs less than a pass over
/// `B`.
const MIN_ROWS: usize = 1024;

/// Rounded copies of a contraction's operands, in the lane's scratch, which stays locked (so
/// no other step on this lane can reuse it) until the contraction is launched.
pub(crate) struct RoundedCopies<'a> {
    /// Which operands the copy stands for (`B`, and `A` where it is the same matrix).
    pub(crate) rounded: RoundedOperands,
    /// The address of the rounded copy (0 where nothing is rounded).
    pub(crate) copy: u64,
    /// Its leading dimension (in floats).
    pub(crate) ld: usize,
    _scratch: Option<MutexGuard<'a, GrowBuffer>>,
}

impl RoundedCopies<'_> {
    /// No operand rounded: the kernel rounds what it stages.
    pub(crate) fn none() -> RoundedCopies<'static> {
        RoundedCopies {
            rounded: RoundedOperands::NONE,
            copy: 0,
            ld: 0,
            _scratch: None,
        }
    }
}

/// Rounds the operands of fused step `f` where it pays (a TF32 contraction on the pipelined
/// template over at least [`MIN_ROWS`] rows, the device set to round operands): `B` into the
/// lane's scratch, and `A` with it when `A` is the same matrix. Otherwise rounds nothing.
pub(crate) fn round<'a, B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'a>,
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
) -> Result<RoundedCopies<'a>, RuntimeError> {
    let Form::Contraction { a, b, .. } = &f.spec.form else {
        return Ok(RoundedCopies::none());
    };
    if !cx.device.round_tf32_operands
        || !kernels_gen::takes_rounded_operands(&f.spec)
        || f.rows < MIN_ROWS
        || f.cols == 0
    {
        return Ok(RoundedCopies::none());
    }
    let operand = |k: usize| match inputs.get(k) {
        Some(Arg::Dense { buf, rows, cols }) => Ok((buf.address(), *rows, *cols)),
        _ => Err(invalid(format!(
            "operand {k} of contraction {} is not a dense value",
            f.name
        ))),
    };
    let (a_addr, a_rows, a_cols) = operand(*a)?;
    let (b_addr, b_rows, b_cols) = operand(*b)?;
    let same = a_addr == b_addr && (a_rows, a_cols) == (b_rows, b_cols);
    let ld = padded_ld(b_cols);
    let bytes = b_rows
        .checked_mul(ld)
        .and_then(|e| e.checked_mul(4))
        .ok_or_else(|| {
            invalid(format!(
                "operand {b} of contraction {} is too large",
                f.name
            ))
        })?;
    let mut scratch = cx.lane_scratch()?;
    let copy = scratch.ensure(cx.stream, bytes, "TF32-rounded contraction operand")?;
    // SAFETY: `B` is a dense f32 input of `b_rows x b_cols` elements, contiguous (as the step's
    // arguments say), and the scratch holds `b_rows x ld` floats, both on this lane's stream.
    unsafe {
        cx.device
            .builtins(cx.stream)
            .round_tf32((b_addr, b_cols), (b_rows, b_cols), (copy, ld))?;
    }
    Ok(RoundedCopies {
        rounded: RoundedOperands { a: same, b: true },
        copy,
        ld,
        _scratch: Some(scratch),
    })
}

/// The leading dimension of a rounded copy of rows of `cols` floats: the next multiple of 4
/// (16 bytes), so that every row starts on a 16-byte boundary.
pub(crate) fn padded_ld(cols: usize) -> usize {
    cols.div_ceil(4) * 4
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_of_a_rounded_copy_start_on_16_byte_boundaries() {
        for (cols, ld) in [(1, 4), (4, 4), (26, 28), (50, 52), (784, 784), (785, 788)] {
            assert_eq!(super::padded_ld(cols), ld);
        }
    }
}
