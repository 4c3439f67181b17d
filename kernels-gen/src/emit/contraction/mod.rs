//! The contraction templates ([`Form::Contraction`](kernel_ir::Form::Contraction)): a matrix
//! product computed tile by tile with its epilogue and row reductions, the product never
//! written.
//!
//! Two templates share the semantics (each row's reductions visit its columns in ascending
//! order within a thread and combine the threads' partials in a fixed order, so `ArgMin`
//! keeps the lowest column among ties and sums are the same from run to run):
//! - [`pipelined`] for `float` products whose operands are both stored depth-contiguous
//!   (`A * B^T` with `A` and `B` row-major, the shape of every distance and kernel matrix)
//!   with at most one sum by label: 256 x 128 tiles on 8 warps, a 3-deep `cp.async` ring and,
//!   for TF32, `wgmma` on Hopper or `ldmatrix` fragments into `mma.sync`; its fixed device code is
//!   `pipeline.cu`, its generated part a fold struct (epilogue and reductions);
//! - [`tiled`] for everything else (`double`, transposed operands, several sums by label):
//!   64 x 64 tiles on 4 warps, one staged slice at a time.

mod pipelined;
mod tiled;

use super::expr::{inf_macro, nan_macro};
use super::launch::LaunchShape;
use super::ContractionVariant;
use crate::params::CType;
use kernel_ir::{Access, Expr, KernelSpec, Precision, ReduceKind, Reduction, ScalarType};

/// The text a contraction template contributes to a kernel: helpers placed before the entry
/// point, and the entry point's statements.
pub(crate) struct Parts {
    /// Device code before the entry point (after the common prelude).
    pub(crate) preamble: String,
    /// The statements of the entry point.
    pub(crate) statements: String,
}

/// Whether `spec` runs on the pipelined template: `float` values, `A` stored as rows of the
/// depth and `B` read transposed (also rows of the depth), at most one sum by label.
pub(crate) fn is_pipelined(spec: &KernelSpec) -> bool {
    let kernel_ir::Form::Contraction {
        a, b, reductions, ..
    } = &spec.form
    else {
        return false;
    };
    let access = |k: usize| spec.inputs.get(k).map(|input| input.access);
    spec.dtype == ScalarType::F32
        && access(*a) == Some(Access::Left { transposed: false })
        && access(*b) == Some(Access::Right { transposed: true })
        && reductions
            .iter()
            .filter(|r| matches!(r.kind, ReduceKind::ByLabel { .. }))
            .count()
            <= 1
}

/// The outputs of `spec` its launcher must zero before the launch: a pipelined contraction adds
/// its sums by label into the output with atomics (from several blocks where it splits a row's
/// columns), so the output starts at zero.
pub(crate) fn zeroed_outputs(spec: &KernelSpec) -> Vec<usize> {
    let kernel_ir::Form::Contraction {
        stores, reductions, ..
    } = &spec.form
    else {
        return Vec::new();
    };
    if !is_pipelined(spec) {
        return Vec::new();
    }
    reductions
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r.kind, ReduceKind::ByLabel { .. }))
        .map(|(k, _)| stores.len() + k)
        .collect()
}

/// The launch shape of a contraction kernel.
pub(crate) fn launch(spec: &KernelSpec) -> LaunchShape {
    if is_pipelined(spec) {
        pipelined::launch(spec)
    } else {
        tiled::launch(spec)
    }
}

/// The precision of `spec`'s product where it runs on the pipelined template, else `None`.
pub(crate) fn pipelined_precision(spec: &KernelSpec) -> Option<Precision> {
    match spec.form {
        kernel_ir::Form::Contraction { precision, .. } if is_pipelined(spec) => Some(precision),
        _ => None,
    }
}

/// Whether a launcher may round `spec`'s operands to TF32 in memory and launch
/// [`emit_variant`](super::emit_variant)'s kernel: a TF32 `float` contraction on the pipelined
/// template, which otherwise rounds every staged chunk of its operands.
pub(crate) fn takes_rounded_operands(spec: &KernelSpec) -> bool {
    pipelined_precision(spec) == Some(Precision::Tf32)
}

/// Whether a launcher must pack `spec`'s two operands in pairs of 16-bit values before the
/// launch (one 32-bit word a pair, rows padded with zeros to a multiple of 16 bytes) and pass
/// depth and leading dimensions in words: an f32 contraction with 16-bit operands
/// ([`Precision::Half`]) on the pipelined template, which multiplies them on 16-bit tensor cores
/// straight from the staged words. The tiled template rounds what it stages instead. Its
/// kernels (every variant) read only packed operands; the warp-specialised one takes the packed
/// copies' tensor maps, described as `float` matrices of words.
pub fn packs_half_operands(spec: &KernelSpec) -> Option<kernel_ir::Half> {
    match pipelined_precision(spec) {
        Some(Precision::Half(half)) => Some(half),
        _ => None,
    }
}

/// Whether a launcher must give `spec`'s kernel the split pairs of a 3xTF32 product
/// ([`Precision::Tf32x3`]) on the pipelined template: each operand row `x` split into `h =
/// tf32(x)` and `l = tf32(x - h)`, the left operand's copy holding `[h, h, l]` and the right's
/// `[h, l, h]` (rows of three times the depth, padded to 16 bytes), whose TF32 product is `h h'
/// + h l' + l h'`; the depth passed three times the product's. Where the operands are one
/// matrix the product stays symmetric, and the kernel walks one triangle of tiles of the two
/// copies (the fold's `kSplitOperands`). Elsewhere (the tiled template) the product is strict.
pub fn splits_tf32_operands(spec: &KernelSpec) -> bool {
    pipelined_precision(spec) == Some(Precision::Tf32x3)
}

/// The template text of a contraction kernel.
pub(crate) fn parts(
    spec: &KernelSpec,
    operands: (usize, usize),
    precision: Precision,
    variant: ContractionVariant,
    stores: &[Expr],
    reductions: &[Reduction],
) -> Parts {
    let precision = if spec.dtype == ScalarType::F32 {
        precision
    } else {
        Precision::Strict
    };
    if is_pipelined(spec) {
        pipelined::parts(spec, operands, precision, variant, stores, reductions)
    } else {
        tiled::parts(spec, operands, precision, stores, reductions)
    }
}

/// The value a row's partial of `kind` starts from (none for sums by label, which have no
/// per-row partial).
fn identity(kind: ReduceKind, dtype: ScalarType) -> Option<String> {
    let inf = inf_macro(dtype);
    Some(match kind {
        ReduceKind::Sum | ReduceKind::Dot { .. } => format!("({})0", dtype.c_name()),
        ReduceKind::Min | ReduceKind::ArgMin => inf.to_string(),
        ReduceKind::Max => format!("-{inf}"),
        ReduceKind::Pick { .. } => nan_macro(dtype).to_string(),
        ReduceKind::ByLabel { .. } => return None,
    })
}

/// The statement folding element value `v` of column `j` (row `i`) into the partial
/// `partial` (and, for `ArgMin`, its column `at`). None for sums by label.
fn fold(kind: ReduceKind, v: &str, partial: &str, at: &str) -> Option<String> {
    Some(match kind {
        ReduceKind::Sum => format!("{partial} += {v};"),
        ReduceKind::Min => format!("{partial} = ({v} < {partial}) ? {v} : {partial};"),
        ReduceKind::Max => format!("{partial} = ({v} > {partial}) ? {v} : {partial};"),
        ReduceKind::ArgMin => {
            format!("if ({v} < {partial}) {{ {partial} = {v}; {at} = (unsigned int)j; }}")
        }
        ReduceKind::Dot { weights } => format!("{partial} += {v} * in{weights}[j];"),
        ReduceKind::Pick { index_input } => {
            format!("if (j == (long long)in{index_input}[i]) {{ {partial} = {v}; }}")
        }
        ReduceKind::ByLabel { .. } => return None,
    })
}

/// The statement combining the partial `o` (of higher columns; `o_at` its column for
/// `ArgMin`) into `v` (`at`). None for sums by label.
fn combine(kind: ReduceKind, v: &str, o: &str, at: &str, o_at: &str) -> Option<String> {
    Some(match kind {
        ReduceKind::Sum | ReduceKind::Dot { .. } => format!("{v} += {o};"),
        ReduceKind::Min => format!("{v} = ({o} < {v}) ? {o} : {v};"),
        ReduceKind::Max => format!("{v} = ({o} > {v}) ? {o} : {v};"),
        ReduceKind::ArgMin => format!(
            "if ({o} < {v} || ({o} == {v} && {o_at} < {at})) {{ {v} = {o}; {at} = {o_at}; }}"
        ),
        // One thread saw the element; the others hold NaN.
        ReduceKind::Pick { .. } => format!("{v} = ({v} != {v}) ? {o} : {v};"),
        ReduceKind::ByLabel { .. } => return None,
    })
}
