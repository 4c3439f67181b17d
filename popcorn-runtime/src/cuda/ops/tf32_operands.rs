//! TF32 operands rounded once in memory: a pipelined TF32 contraction stages each chunk of its
//! right operand `B` once per block of rows (and of `A` once per column tile where `A` is not
//! kept resident), rounding every staged copy. Where `B` would be staged several times, the
//! launcher rounds it (and `A`, when it is the same matrix) into the lane's scratch first and
//! launches the kernel that leaves those chunks as staged ([`kernels_gen::emit_variant`]). The
//! rounding is the kernel's own (`cvt.rna.tf32.f32`), so the results are the same bit for bit.
//! The copy's rows are padded to a multiple of 16 bytes ([`padded_ld`]): the kernel then stages
//! them with 16-byte copies, where rows of an odd depth (Kernel K-means' points, d = 50) would
//! take four 4-byte copies, each with its own bounds test, per 16 bytes.

use super::StepCx;
use crate::backend::{Arg, BufferInfo};
use crate::cuda::errors::{driver_error, invalid};
use crate::cuda::memory::{DeviceAddress, GrowBuffer};
use crate::error::RuntimeError;
use cudarc::driver::sys;
use kernel_ir::Form;
use kernels_gen::emit::{PIPELINE_BLOCK_ROWS, PIPELINE_COLUMN_TILE, PIPELINE_DEPTH_CHUNK};
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

impl RoundedCopies<'_> {
    /// The tensor maps of the copy as the warp-specialised contraction reads it
    /// ([`kernels_gen::ContractionVariant::warp_specialised`]): `A` (`rows` rows) in boxes of
    /// 32 x 256 and `B` (`cols` rows) in boxes of 32 x 128, `depth` floats a row, 128-byte
    /// swizzle, zeros outside. Only for a copy that stands for both operands.
    ///
    /// `first_row`: the maps start at that row of the copy (a share of a symmetric product,
    /// whose rows and columns both start there); 0 for the whole product.
    pub(crate) fn tensor_maps(
        &self,
        rows: usize,
        cols: usize,
        depth: usize,
        first_row: usize,
    ) -> Result<[sys::CUtensorMap; 2], RuntimeError> {
        if self.rounded != RoundedOperands::BOTH {
            return Err(invalid(
                "tensor maps of a rounded copy that does not stand for both operands",
            ));
        }
        let base = self.copy + self.row_offset_bytes(first_row);
        Ok([
            tensor_map(base, rows, depth, self.ld, PIPELINE_BLOCK_ROWS)?,
            tensor_map(base, cols, depth, self.ld, PIPELINE_COLUMN_TILE)?,
        ])
    }

    /// Bytes from the copy's first row to row `row` (rows of `ld` floats).
    pub(crate) fn row_offset_bytes(&self, row: usize) -> u64 {
        (row as u64) * (self.ld as u64) * 4
    }
}

/// The tensor map of a row-major `float` matrix at `addr` (`rows` x `depth`, rows `ld` floats
/// apart) in boxes of [`PIPELINE_DEPTH_CHUNK`] x `box_rows`, as the pipelined kernels stage it
/// (128-byte swizzle, zeros outside the matrix).
fn tensor_map(
    addr: u64,
    rows: usize,
    depth: usize,
    ld: usize,
    box_rows: u32,
) -> Result<sys::CUtensorMap, RuntimeError> {
    let too_big = || {
        invalid(format!(
            "a {rows} x {depth} matrix is too large for a tensor map"
        ))
    };
    let dims: [u64; 2] = [
        u64::try_from(depth).map_err(|_| too_big())?,
        u64::try_from(rows).map_err(|_| too_big())?,
    ];
    let strides: [u64; 1] = [u64::try_from(ld * 4).map_err(|_| too_big())?];
    let boxes: [u32; 2] = [PIPELINE_DEPTH_CHUNK, box_rows];
    let element_strides: [u32; 2] = [1, 1];
    if !addr.is_multiple_of(16) || !strides[0].is_multiple_of(16) {
        return Err(invalid(format!(
            "a tensor map needs 16-byte aligned rows (address {addr:#x}, {} bytes a row)",
            strides[0]
        )));
    }
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: `map` is writable storage for one tensor map; the dimension, stride, box and
    // element-stride arrays have the lengths rank 2 asks for and outlive the call; the
    // driver only records `addr` (a device address), it does not dereference it here.
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            2,
            addr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }
    .result()
    .map_err(|e| driver_error("cuTensorMapEncodeTiled", e))?;
    // SAFETY: the call succeeded, so it wrote the whole map (and zeroed storage is a valid
    // map of opaque words in any case).
    Ok(unsafe { map.assume_init() })
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
