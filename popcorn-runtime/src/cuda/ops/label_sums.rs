//! `Builtin::LabelSums`: a vector's entries, or a matrix's rows, summed by label.

use super::{vector_len, Io, StepCx};
use crate::cuda::args::{count, dense, index, shape, Dense};
use crate::cuda::driver::{self, KernelArg};
use crate::cuda::errors::invalid;
use crate::error::RuntimeError;
use kernels_gen::label_row_sums::{
    partial_kernel, partial_name, reduce_kernel, reduce_name, LabelRowSumsLayout,
};
use popcorn_dsl::ops::LABEL_SUMS_VECTOR_MAX_WORK;

/// Runs a label-sums step: inputs `(x, labels)`, output the `k` sums (x a column vector) or the
/// `k x d` row sums (x an `n x d` matrix).
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
    if x.cols != 1 {
        shape("label sums input x", (x.rows, x.cols), (n, x.cols))?;
        shape("label sums output", (out.rows, out.cols), (k, x.cols))?;
        // SAFETY: `x` holds `n x d` values, `labels` `n` entries and `out` `k x d` values
        // (checked above).
        return unsafe { row_sums(cx, x, labels, k, out) };
    }
    vector_len("label sums input x", x.len(), n)?;
    vector_len("label sums output", out.len(), k)?;
    if one_pass(cx, n, k) {
        let column = |d: Dense, rows: usize| Dense { rows, cols: 1, ..d };
        // SAFETY: `x` and `labels` hold `n` entries and `out` `k` values (checked above): an
        // `n x 1` and a `k x 1` matrix.
        return unsafe { row_sums(cx, column(x, n), labels, k, column(out, k)) };
    }
    // SAFETY: `x` and `labels` hold `n` entries and `out` `k` values (checked above).
    unsafe {
        cx.device
            .builtins(cx.stream)
            .label_sums(cx.scalar(), x.ptr, labels, n, k, out.ptr)
    }
}

/// Whether the label sums of a vector of `n` entries over `k` clusters run as the label sums of
/// an `n x 1` matrix, one pass over the labels, instead of the per-cluster kernel that reads
/// them `k` times: past [`LABEL_SUMS_VECTOR_MAX_WORK`] (the planner's weighted counts
/// `counts(labels, k, w)` and weighted scales reach here whatever `n k`), where the row sums'
/// `k x 32` bins of one warp fit a block's shared memory (not for `k` beyond about 900 in
/// f64, 1,800 in f32: those keep the per-cluster kernel).
fn one_pass(cx: &StepCx<'_>, n: usize, k: usize) -> bool {
    if n.saturating_mul(k) <= LABEL_SUMS_VECTOR_MAX_WORK {
        return false;
    }
    let limits = &cx.device.limits;
    let elem_bytes = cx.elem().size_bytes() as u64;
    LabelRowSumsLayout::new(n as u64, 1, k as u64, elem_bytes, limits, |s| {
        limits.blocks_per_sm(u64::from(s))
    })
    .is_some()
}

/// The label sums of the rows of `x` (`n x d`) into `out` (`k x d`): the two passes of
/// [`kernels_gen::label_row_sums`], the partial sums in the lane's scratch.
///
/// # Safety
/// `x` holds `n x d` elements of the plan's type, `labels` `n` words and `out` `k x d`
/// elements, all device memory usable on the step's stream.
unsafe fn row_sums(
    cx: &StepCx<'_>,
    x: Dense,
    labels: u64,
    k: usize,
    out: Dense,
) -> Result<(), RuntimeError> {
    let (n, d) = (x.rows, x.cols);
    if n == 0 || k == 0 || d == 0 {
        if out.len() > 0 {
            // SAFETY: `out` holds `k x d` elements (the contract).
            unsafe {
                driver::memset32(
                    cx.stream,
                    out.ptr,
                    0,
                    out.len() * cx.elem().size_bytes() / 4,
                )?
            };
        }
        return Ok(());
    }
    let dtype = cx.scalar();
    let elem_bytes = cx.elem().size_bytes() as u64;
    // The names only: the sources are built the first time a kernel is compiled.
    let (first, second) = (partial_name(dtype), reduce_name(dtype));
    let device = cx.device;
    let partial_fn = device
        .kernels
        .function(first, || partial_kernel(dtype).source)?;
    let reduce_fn = device
        .kernels
        .function(second, || reduce_kernel(dtype).source)?;
    let limits = &device.limits;
    let layout = LabelRowSumsLayout::new(n as u64, d as u64, k as u64, elem_bytes, limits, |s| {
        limits.blocks_per_sm(u64::from(s))
    })
    .ok_or_else(|| {
        invalid(format!(
            "label sums of rows: {k} clusters need {} bytes of shared memory per warp and this \
             device allows {} per block; plan with fewer clusters (a smaller \
             cluster_sums_max_k keeps the selection matrix and its SpMM)",
            k as u64 * 32 * elem_bytes,
            limits.shared_bytes_per_block_optin
        ))
    })?;
    device.allow_opt_in_shared(&partial_fn, u64::from(layout.shared_bytes), &|| {
        format!("the label sums of rows ({first})")
    })?;
    let partial_bytes = usize::try_from(layout.partial_elems * elem_bytes).map_err(|_| {
        invalid(format!(
            "label sums of rows: {} partial sums do not fit this machine's addresses",
            layout.partial_elems
        ))
    })?;
    let mut scratch = cx.lane_scratch()?;
    // Steps on one lane run in stream order, so the lane's scratch is free for this step.
    let partial = scratch.ensure(cx.stream, partial_bytes, "label row sums partials")?;
    let mut first_args = [
        KernelArg::size(n)?,
        KernelArg::size(d)?,
        KernelArg::size(k)?,
        KernelArg::size(layout.rows_per_block as usize)?,
        KernelArg::Ptr(x.ptr),
        KernelArg::Ptr(labels),
        KernelArg::Ptr(partial),
    ];
    // SAFETY: the arguments follow the first pass's parameters; `x`, `labels` and `out` hold
    // what the contract says, and `partial` the layout's `k d blocks` elements.
    unsafe {
        driver::launch(
            cx.stream,
            &partial_fn,
            first,
            layout.partial_dims(),
            &mut first_args,
        )?;
    }
    let mut second_args = [
        KernelArg::size(k * d)?,
        KernelArg::size(layout.blocks as usize)?,
        KernelArg::Ptr(partial),
        KernelArg::Ptr(out.ptr),
    ];
    // SAFETY: the second pass reads the `k d blocks` partial sums the first wrote and writes
    // the `k d` outputs.
    unsafe {
        driver::launch(
            cx.stream,
            &reduce_fn,
            second,
            layout.reduce_dims(),
            &mut second_args,
        )
    }
}
