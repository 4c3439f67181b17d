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
        row_block: Some((start, end)),
        ..
    } = step.op
    {
        return Err(invalid(format!(
            "a SYRK of rows [{start}, {end}) (a rank's block) runs on the CPU ranks only"
        )));
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
