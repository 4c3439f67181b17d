//! Contraction operands copied before the launch: rounded to TF32, or packed in 16 bits.
//!
//! TF32 operands rounded once in memory: a pipelined TF32 contraction stages each chunk of its
//! right operand `B` once per block of rows (and of `A` once per column tile where `A` is not
//! kept resident), rounding every staged copy. Where `B` would be staged several times, the
//! launcher rounds it (and `A`, when it is the same matrix) into the lane's scratch first and
//! launches the kernel that leaves those chunks as staged ([`kernels_gen::emit_variant`]). The
//! rounding is the kernel's own (`cvt.rna.tf32.f32`), so the results are the same bit for bit.
//! The copy's rows are padded to a multiple of 16 bytes ([`padded_ld`]): the kernel then stages
//! them with 16-byte copies, where rows of an odd depth (Kernel K-means' points, d = 50) would
//! take four 4-byte copies, each with its own bounds test, per 16 bytes.
//!
//! A 3xTF32 product ([`kernel_ir::Precision::Tf32x3`]) on the pipelined template always takes
//! its operands split ([`split_tf32`]): rows of `[h, h, l]` and `[h, l, h]`, three times as
//! deep, whose TF32 product is the three products' sum.
//!
//! 16-bit operands ([`kernel_ir::Precision::Half`]) on the pipelined template are always
//! packed ([`pack_half`]): each operand rounded to bf16 or fp16 and stored in pairs, one 32-bit
//! word a pair, rows padded to 16 bytes; the kernel takes depth and leading dimensions in
//! words, and half the bytes of the f32 operands.

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

/// Copies of a contraction's operands (rounded or packed), in the lane's scratch, which stays
/// locked (so no other step on this lane can reuse it) until the contraction is launched.
pub(crate) struct RoundedCopies<'a> {
    /// Which operands the copy stands for (`B`, and `A` where it is the same matrix).
    pub(crate) rounded: RoundedOperands,
    /// The address of the copy (0 where nothing is copied).
    pub(crate) copy: u64,
    /// Its leading dimension (in 32-bit words: floats, or pairs of 16-bit values).
    pub(crate) ld: usize,
    /// `A`'s own packed copy (address, leading dimension in words) where `A` is another matrix
    /// than `B` and both are packed in 16 bits.
    pub(crate) a_copy: Option<(u64, usize)>,
    /// The depth the kernel takes, where it is not the product's: in words for operands packed
    /// in 16 bits, three times the product's for a 3xTF32 product's split pairs.
    pub(crate) kernel_depth: Option<usize>,
    _scratch: Option<MutexGuard<'a, GrowBuffer>>,
}

impl RoundedCopies<'_> {
    /// No operand copied: the kernel rounds what it stages.
    pub(crate) fn none() -> RoundedCopies<'static> {
        RoundedCopies {
            rounded: RoundedOperands::NONE,
            copy: 0,
            ld: 0,
            a_copy: None,
            kernel_depth: None,
            _scratch: None,
        }
    }

    /// Whether operand `k` of contraction `(a, b)` is read from a copy (its address and
    /// leading dimension then replaced by [`RoundedCopies::operand`]'s).
    pub(crate) fn replaces(&self, k: usize, (a, b): (usize, usize)) -> bool {
        (k == b && self.rounded.b) || (k == a && (self.rounded.a || self.a_copy.is_some()))
    }

    /// The address and leading dimension (words) of the copy standing for operand `k` of
    /// contraction `(a, b)`, where [`RoundedCopies::replaces`] says one does.
    pub(crate) fn operand(&self, k: usize, (a, _): (usize, usize)) -> (u64, usize) {
        match self.a_copy {
            Some(copy) if k == a => copy,
            _ => (self.copy, self.ld),
        }
    }
}

/// The copies fused step `f` launches with: its operands packed in 16 bits where its kernel
/// multiplies 16-bit values ([`kernels_gen::packs_half_operands`]), which every launch needs;
/// else rounded to TF32 where it pays ([`round`], whole launches only); else none.
pub(crate) fn prepare<'a, B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'a>,
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
    whole: bool,
) -> Result<RoundedCopies<'a>, RuntimeError> {
    if let Some(half) = kernels_gen::packs_half_operands(&f.spec) {
        return pack_half(cx, f, inputs, half);
    }
    if kernels_gen::splits_tf32_operands(&f.spec) {
        return split_tf32(cx, f, inputs);
    }
    if whole {
        round(cx, f, inputs)
    } else {
        Ok(RoundedCopies::none())
    }
}

/// A contraction's dense operand `k`: its address, rows and columns.
fn operand<B: BufferInfo + DeviceAddress>(
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
    k: usize,
) -> Result<(u64, usize, usize), RuntimeError> {
    match inputs.get(k) {
        Some(Arg::Dense { buf, rows, cols }) => Ok((buf.address(), *rows, *cols)),
        _ => Err(invalid(format!(
            "operand {k} of contraction {} is not a dense value",
            f.name
        ))),
    }
}

/// A contraction's two dense operands, `A` and `B`: address, rows and columns each, of one
/// depth.
type Operands = ((u64, usize, usize), (u64, usize, usize));

/// The operands of contraction step `f`, which must share their depth.
fn operands<B: BufferInfo + DeviceAddress>(
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
) -> Result<Operands, RuntimeError> {
    let Form::Contraction { a, b, .. } = &f.spec.form else {
        return Err(invalid(format!("kernel {} is not a contraction", f.name)));
    };
    let (a_op, b_op) = (operand(f, inputs, *a)?, operand(f, inputs, *b)?);
    if a_op.2 != b_op.2 {
        return Err(invalid(format!(
            "the operands of contraction {} differ in depth ({} and {})",
            f.name, a_op.2, b_op.2
        )));
    }
    Ok((a_op, b_op))
}

/// Room for a contraction's operand copies in the lane's scratch, locked.
struct CopySpace<'a> {
    scratch: MutexGuard<'a, GrowBuffer>,
    /// `B`'s copy.
    copy: u64,
    /// Where `A`'s own copy starts, after `B`'s (room was made for it unless `shared`).
    a_at: u64,
}

/// Room in the lane's scratch for `B`'s copy and, unless `shared` (one copy standing for
/// both), `A`'s after it, rows of `ld` words (a multiple of 4, so `A`'s copy starts on 16
/// bytes).
fn scratch_for_copies<'a>(
    cx: &StepCx<'a>,
    f: &FusedStep,
    ((_, a_rows, _), (_, b_rows, _)): Operands,
    shared: bool,
    ld: usize,
    what: &str,
) -> Result<CopySpace<'a>, RuntimeError> {
    let too_large = || {
        invalid(format!(
            "the operands of contraction {} are too large",
            f.name
        ))
    };
    let bytes_of = |rows: usize| {
        rows.checked_mul(ld)
            .and_then(|e| e.checked_mul(4))
            .ok_or_else(too_large)
    };
    let b_bytes = bytes_of(b_rows)?;
    let a_bytes = if shared { 0 } else { bytes_of(a_rows)? };
    let total = b_bytes.checked_add(a_bytes).ok_or_else(too_large)?;
    let mut scratch = cx.lane_scratch()?;
    let copy = scratch.ensure(cx.stream, total.max(16), what)?;
    Ok(CopySpace {
        scratch,
        copy,
        a_at: copy + b_bytes as u64,
    })
}

/// Splits both operands of `f` (a 3xTF32 product) into the lane's scratch: `B` as rows of
/// `[h, l, h]`, then `A` as rows of `[h, h, l]` (`h = tf32(x)`, `l = tf32(x - h)`), whose TF32
/// product is `h h' + h l' + l h'`; two copies even where the operands are one matrix (the
/// kernel still walks one triangle of tiles: their product is as symmetric).
fn split_tf32<'a, B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'a>,
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
) -> Result<RoundedCopies<'a>, RuntimeError> {
    let ops @ ((a_addr, a_rows, cols), (b_addr, b_rows, _)) = operands(f, inputs)?;
    // The kernel walks one triangle of tiles of a symmetric spec's two copies (kSplitOperands),
    // which holds only where they are splits of one matrix: the kernel cannot compare them.
    let symmetric = matches!(
        f.spec.form,
        Form::Contraction {
            symmetric: true,
            ..
        }
    );
    if symmetric && (a_addr != b_addr || a_rows != b_rows) {
        return Err(invalid(format!(
            "contraction {} is symmetric (one matrix times itself) but was given two different \
             operands",
            f.name
        )));
    }
    let depth = cols.checked_mul(3).ok_or_else(|| {
        invalid(format!(
            "the operands of contraction {} are too deep",
            f.name
        ))
    })?;
    let ld = padded_ld(depth);
    let CopySpace {
        scratch,
        copy,
        a_at,
    } = scratch_for_copies(cx, f, ops, false, ld, "3xTF32 split contraction operands")?;
    let a_copy = (a_at, ld);
    let builtins = cx.device.builtins(cx.stream);
    // SAFETY: each operand is a dense f32 input of `rows x cols` elements, contiguous (as the
    // step's arguments say); the scratch holds `b_rows x ld` floats for `B` and, after them,
    // `a_rows x ld` for `A`, `ld >= 3 cols`; all on this lane's stream.
    unsafe {
        builtins.split_tf32((b_addr, cols), (b_rows, cols), (copy, ld), true)?;
        builtins.split_tf32((a_addr, cols), (a_rows, cols), a_copy, false)?;
    }
    Ok(RoundedCopies {
        rounded: RoundedOperands { a: false, b: true },
        copy,
        ld,
        a_copy: Some(a_copy),
        kernel_depth: Some(depth),
        _scratch: Some(scratch),
    })
}

/// Packs both operands of `f` in pairs of `half` values into the lane's scratch: `B`, then `A`
/// where it is another matrix (one copy stands for both where they are one).
fn pack_half<'a, B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'a>,
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
    half: kernel_ir::Half,
) -> Result<RoundedCopies<'a>, RuntimeError> {
    let ops @ ((a_addr, a_rows, cols), (b_addr, b_rows, _)) = operands(f, inputs)?;
    let same = a_addr == b_addr && a_rows == b_rows;
    let words = kernel_ir::Precision::Half(half).kernel_depth(cols);
    let ld = padded_ld(words);
    let CopySpace {
        scratch,
        copy,
        a_at,
    } = scratch_for_copies(cx, f, ops, same, ld, "16-bit packed contraction operands")?;
    let a_copy = (!same).then_some((a_at, ld));
    let builtins = cx.device.builtins(cx.stream);
    // SAFETY: each operand is a dense f32 input of `rows x cols` elements, contiguous (as the
    // step's arguments say); the scratch holds `b_rows x ld` words for `B` and, after them,
    // `a_rows x ld` for `A` where it has its own copy; all on this lane's stream.
    unsafe {
        builtins.pack_half(half, (b_addr, cols), (b_rows, cols), (copy, ld))?;
        if let Some(a_copy) = a_copy {
            builtins.pack_half(half, (a_addr, cols), (a_rows, cols), a_copy)?;
        }
    }
    Ok(RoundedCopies {
        rounded: RoundedOperands { a: same, b: true },
        copy,
        ld,
        a_copy,
        kernel_depth: Some(words),
        _scratch: Some(scratch),
    })
}

/// Rounds the operands of fused step `f` (a TF32 one) where it pays (a TF32 contraction on the pipelined
/// template over at least [`MIN_ROWS`] rows, the device set to round operands): `B` into the
/// lane's scratch, and `A` with it when `A` is the same matrix. Otherwise rounds nothing.
fn round<'a, B: BufferInfo + DeviceAddress>(
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
    let a_op @ (a_addr, a_rows, a_cols) = operand(f, inputs, *a)?;
    let b_op @ (b_addr, b_rows, b_cols) = operand(f, inputs, *b)?;
    let same = a_addr == b_addr && (a_rows, a_cols) == (b_rows, b_cols);
    let ld = padded_ld(b_cols);
    // Room for B's copy alone: A is read rounded from it where they are one matrix, else as
    // it is.
    let CopySpace { scratch, copy, .. } = scratch_for_copies(
        cx,
        f,
        (a_op, b_op),
        true,
        ld,
        "TF32-rounded contraction operand",
    )?;
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
        a_copy: None,
        kernel_depth: None,
        _scratch: Some(scratch),
    })
}

impl RoundedCopies<'_> {
    /// The tensor maps of the copy as the warp-specialised contraction reads it
    /// ([`kernels_gen::ContractionVariant::warp_specialised`]): `A` (`rows` rows) in boxes of
    /// 32 x 256 and `B` (`cols` rows) in boxes of 32 x 128, `depth` 32-bit words a row (floats,
    /// or pairs of 16-bit values), 128-byte swizzle, zeros outside. Only for a copy that stands for both operands.
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
