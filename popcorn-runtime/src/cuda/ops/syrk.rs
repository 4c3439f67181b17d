//! `StepOp::Syrk`: `C = alpha A A^T` (or `A^T A`) through cuBLAS: one library SYRK, or GEMMs
//! over block rows ([`crate::cuda::syrk_blocks`]) whose diagonal blocks come first (the
//! prologue) and then one GEMM per block row (a band), each writing only its own rows, so a
//! map can follow each band on another lane. The full matrix is completed on the device unless
//! the step writes its lower triangle only.

use super::{Io, StepCx};
use crate::cuda::args::{count, dense, shape};
use crate::cuda::errors::invalid;
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;
use popcorn_dsl::plan::{Step, StepOp, StepPart};

/// A rank's block of rows `[start, end)` of `C = alpha A A^T` (A stored `n x k`, whole), in
/// full (both triangles), as one GEMM of those rows of `A` against all of `A`: the rank's
/// rows of the product without the rest. The whole step's SYRK sums in another order, so a
/// rank's rows may differ from it by rounding.
fn rank_rows(
    cx: &StepCx<'_>,
    step: &Step,
    (inputs, outputs): Io<'_, '_>,
    (trans, n, k, tf32): (bool, usize, usize, bool),
    (start, end): (usize, usize),
) -> Result<(), RuntimeError> {
    if trans {
        return Err(invalid(format!(
            "{}: a block of rows of A^T A (a rank's rows of a transposed SYRK) has no GPU form",
            step.op_name()
        )));
    }
    if start > end || end > n {
        return Err(invalid(format!(
            "rows [{start}, {end}) of a SYRK of order {n}"
        )));
    }
    cx.require_main_lane("syrk")?;
    count("syrk", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let a = dense(&inputs[0], elem, "syrk input A")?;
    let c = dense(&outputs[0], elem, "syrk output C (a rank's rows)")?;
    shape("syrk input A", (a.rows, a.cols), (n, k))?;
    let m = end - start;
    shape("syrk output C (a rank's rows)", (c.rows, c.cols), (m, n))?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // SAFETY: `c` was checked to hold `m x n` elements of the plan's type.
        return unsafe { cx.zero(c.ptr, m * n, elem) };
    }
    let mut blas = cx.device.blas.lock().map_err(|_| poisoned())?;
    blas.set_tf32(tf32 || cx.device.allow_tf32)?;
    let first_row = a.ptr + (start * k * cx.dtype.size_bytes()) as u64;
    // SAFETY: A holds `n x k` and C `m x n` elements of the plan's type (checked above), on
    // this device and used on its main stream; rows `start..end` of A start at `first_row`.
    unsafe {
        blas.gemm(
            cx.dtype, false, true, m, n, k, cx.alpha, first_row, a.ptr, c.ptr,
        )
    }
}

/// Runs part `part` of a SYRK step: input `A`, output `C`.
pub(crate) fn run(
    cx: &StepCx<'_>,
    step: &Step,
    (inputs, outputs): Io<'_, '_>,
    part: StepPart,
) -> Result<(), RuntimeError> {
    let StepOp::Syrk {
        trans,
        n,
        k,
        tf32,
        lower_only,
        block_rows,
        ..
    } = step.op
    else {
        return Err(invalid(format!("{} step given as a SYRK", step.op_name())));
    };
    if let StepOp::Syrk {
        row_block: Some(rows),
        ..
    } = step.op
    {
        return rank_rows(cx, step, (inputs, outputs), (trans, n, k, tf32), rows);
    }
    cx.require_main_lane("syrk")?;
    count("syrk", inputs, outputs, 1, 1)?;
    let elem = cx.elem();
    let a = dense(&inputs[0], elem, "syrk input A")?;
    let c = dense(&outputs[0], elem, "syrk output C")?;
    shape(
        "syrk input A",
        (a.rows, a.cols),
        if trans { (k, n) } else { (n, k) },
    )?;
    shape("syrk output C", (c.rows, c.cols), (n, n))?;
    if part != StepPart::Whole && block_rows == 0 {
        return Err(invalid(
            "a SYRK computed by one library call runs whole, not in bands".to_string(),
        ));
    }
    if let StepPart::Band(r0, r1) = part {
        if r0 >= r1 || r1 > n || r0 % block_rows != 0 || (r1 != n && r1 - r0 != block_rows) {
            return Err(invalid(format!(
                "rows {r0}..{r1} are not a block row of {block_rows} rows of a SYRK of order {n}"
            )));
        }
    }
    if n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty product is zero: written whole by the whole step or the prologue.
        return match part {
            // SAFETY: `c` was checked to hold `n x n` elements of the plan's type.
            StepPart::Whole | StepPart::Prologue => unsafe { cx.zero(c.ptr, n * n, elem) },
            StepPart::Band(..) => Ok(()),
        };
    }
    {
        let mut blas = cx.device.blas.lock().map_err(|_| poisoned())?;
        blas.set_tf32(tf32 || cx.device.allow_tf32)?;
        // SAFETY (each call): A and C were checked above to hold `op(A)` (`n x k`) and the
        // `n x n` C in the plan's type, buffers of this device used on its main stream; the
        // blocked calls touch rectangles inside them (syrk_blocks, tested on the host).
        match part {
            StepPart::Whole if block_rows == 0 => unsafe {
                blas.syrk_lower(cx.dtype, trans, n, k, cx.alpha, a.ptr, c.ptr)?
            },
            StepPart::Whole => unsafe {
                blas.syrk_lower_blocked(cx.dtype, trans, n, k, cx.alpha, a.ptr, c.ptr, block_rows)?
            },
            StepPart::Prologue => unsafe {
                blas.syrk_diagonal_blocks(
                    cx.dtype, trans, n, k, cx.alpha, a.ptr, c.ptr, block_rows,
                )?
            },
            StepPart::Band(r0, r1) => unsafe {
                blas.syrk_block_row(
                    cx.dtype,
                    trans,
                    n,
                    k,
                    cx.alpha,
                    a.ptr,
                    c.ptr,
                    (r0, r1),
                    block_rows,
                )?
            },
        }
    }
    if lower_only || part != StepPart::Whole {
        return Ok(());
    }
    // SAFETY: `c` holds the `n x n` matrix in the plan's type (checked above).
    unsafe {
        cx.device
            .builtins(cx.stream)
            .symmetrize(cx.scalar(), c.ptr, n)
    }
}
