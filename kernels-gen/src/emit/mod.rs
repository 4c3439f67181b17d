//! CUDA C generation for a [`KernelSpec`].
//!
//! [`emit`] produces one `extern "C" __global__` kernel per spec from one of four templates
//! ([`Form::Map`], [`Form::Rows`], [`Form::Cols`], [`Form::Contraction`]; see the `map`,
//! `rows`, `cols` and `contraction` modules).
//! The source compiles with NVRTC without any `#include`.
//!
//! # Source layout and naming
//!
//! A generated source is a header comment followed by the kernel text:
//! - the header lists the kernel name, the spec's provenance strings, the form, the dtype, the
//!   inputs (with the planner's names), the parameter list, the outputs and the launch shape;
//! - the kernel text is a guarded prelude (`PK_INF_*`/`PK_NAN_*` macros), then one `#error`
//!   line per problem of an invalid spec (see [`KernelSpec::problems`]), then the kernel.
//!
//! The entry point is named [`KernelSpec::name`]: a hash of what the spec computes, without
//! provenance or input names, which appear in the header alone (parameters are named by
//! position, `in0`, `out0`, ...). Two specs that compute the same thing share the kernel name
//! even when their buffers and IR nodes differ, while the full source still records where the
//! kernel came from. Both are deterministic: a runtime may cache compiled modules by full
//! source text or, within one version of this emitter, by name.
//!
//! # Parameters
//!
//! In [`params`](crate::params()) order: `const long long rows, const long long cols`, then for input
//! `k`: a matrix as `const T* __restrict__ ink, const long long ink_ld`; a row or column vector
//! or a broadcast value as `const T* __restrict__ ink`; a scalar as `const T ink`; an index vector as
//! `const unsigned int* __restrict__ ink`; then output `k` as `T* __restrict__ outk` (or
//! `unsigned int* __restrict__ outk` for an argmin). Sizes and scalars are arguments, so one
//! compiled kernel serves every size. Outputs of row and column kernels must not alias inputs or
//! each other (`__restrict__`); a map may write its output over an input it reads only at the
//! element it writes (no `__restrict__` there). All index arithmetic is 64-bit.
//!
//! # Floating-point agreement with the CPU backend
//!
//! Reductions follow the sequential definitions documented on [`ReduceKind`] except for the
//! summation order of `Sum` (documented per template). NVRTC contracts `a * b + c` into fused
//! multiply-adds by default; pass `--fmad=false` for results closer to an unfused CPU
//! evaluation.

mod cols;
mod contraction;
mod expr;
mod launch;
mod map;
mod rows;

pub use launch::{
    blocks_for, column_group_width, column_row_slices, ColumnScratch, LaunchDims, LaunchShape,
    COLUMN_BLOCK_THREADS, COLUMN_MIN_ROWS_PER_THREAD, COLUMN_TARGET_BLOCKS, CONTRACTION_BLOCK_COLS,
    CONTRACTION_BLOCK_ROWS, CONTRACTION_THREADS, LINEAR_BLOCK_THREADS, MAX_COLUMN_GROUP_WIDTH,
    MAX_GRID_BLOCKS, PAIR_BLOCK_ROWS, PAIR_GROUP, PAIR_TILE, PIPELINE_A_CHUNK_BYTES,
    PIPELINE_BLOCK_ROWS, PIPELINE_B_CHUNK_BYTES, PIPELINE_COLUMN_TILE, PIPELINE_COLUMN_WARPS,
    PIPELINE_DEPTH_CHUNK, PIPELINE_MIRROR_MIN_DEPTH, PIPELINE_STAGES, PIPELINE_THREADS,
    PIPELINE_WS_MAX_DEPTH_CHUNKS, PIPELINE_WS_OTHER_BYTES, PIPELINE_WS_STAGES, PIPELINE_WS_THREADS,
    ROW_WARPS_PER_BLOCK,
};

pub(crate) use expr::{from_half_fn, prelude, to_half_fn, HALF_CONVERSIONS};

use crate::params::{params, CType, Param};
use kernel_ir::SpecError;
use kernel_ir::{Access, Expr, Form, KernelSpec, OutputShape, ReduceKind, ScalarType};

/// A generated kernel: its entry-point name, complete CUDA C source and launch geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratedKernel {
    /// The `extern "C"` entry point, `pk_` and 16 hex digits.
    pub name: String,
    /// The complete CUDA C source (header comment and kernel), compilable by NVRTC as is.
    pub source: String,
    /// How to launch it for concrete sizes.
    pub launch: LaunchShape,
}

/// Generates the CUDA C kernel for `spec`. Deterministic: equal specs give equal names and
/// sources.
///
/// Never panics. For a spec with structural problems (see [`KernelSpec::problems`]) the source
/// carries one `#error` line per problem, so compiling it fails with that message; use
/// [`try_emit`] to get the problem as an error instead.
pub fn emit(spec: &KernelSpec) -> GeneratedKernel {
    emit_variant(spec, ContractionVariant::default())
}

/// Operands of a TF32 contraction that its launcher has rounded to TF32 in memory, so that the
/// kernel does not round its staged copies of them (each chunk of an operand is staged once
/// per tile of the other: rounding once in memory saves that work).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RoundedOperands {
    /// The left operand `A` is rounded.
    pub a: bool,
    /// The right operand `B` is rounded.
    pub b: bool,
}

impl RoundedOperands {
    /// Neither operand: the kernel rounds what it stages.
    pub const NONE: RoundedOperands = RoundedOperands { a: false, b: false };
    /// Both operands (one copy standing for both where they are one matrix).
    pub const BOTH: RoundedOperands = RoundedOperands { a: true, b: true };

    /// Bit 0 `A`, bit 1 `B`: the kernel template's argument.
    pub(crate) fn mask(self) -> u8 {
        u8::from(self.a) | (u8::from(self.b) << 1)
    }
}

/// How a launcher specialises a TF32 contraction kernel on the pipelined template for one
/// launch (see [`emit_variant`]): the default is [`emit`]'s kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ContractionVariant {
    /// Operands the launcher rounded to TF32 in memory.
    pub rounded: RoundedOperands,
    /// The warp-specialised body (`pk::contraction_warp_specialised`): for devices of compute
    /// capability 9.0 only, with both operands rounded in rows of a multiple of 16 bytes and
    /// at most [`PIPELINE_WS_MAX_DEPTH_CHUNKS`] chunks of depth. Its
    /// kernel takes, after the spec's parameters, the tensor maps of `A` and `B`
    /// (`CUtensorMap`s of the row-major `float` matrices: dimensions (depth, rows), boxes of
    /// 32 x 256 rows for `A` and 32 x 128 for `B`, 128-byte swizzle, zeros outside), and
    /// launches with [`LaunchShape::warp_specialised`]'s shape. Ignored unless both operands
    /// are rounded.
    pub warp_specialised: bool,
}

impl ContractionVariant {
    /// What `spec`'s kernel makes of the request: a TF32 contraction on the pipelined template
    /// ([takes rounded operands](takes_rounded_operands)) takes the operands asked for, and the
    /// warp-specialised body only with both rounded; one with packed 16-bit or split 3xTF32
    /// operands never rounds and may take the warp-specialised body; any other nothing.
    fn for_spec(self, spec: &KernelSpec) -> ContractionVariant {
        match contraction::pipelined_precision(spec) {
            // Packed 16-bit operands or split TF32 pairs: always in rows of a multiple of 16
            // bytes, never rounded by the kernel.
            Some(kernel_ir::Precision::Half(_) | kernel_ir::Precision::Tf32x3) => {
                ContractionVariant {
                    rounded: RoundedOperands::NONE,
                    warp_specialised: self.warp_specialised,
                }
            }
            Some(kernel_ir::Precision::Tf32) => ContractionVariant {
                rounded: self.rounded,
                warp_specialised: self.warp_specialised && self.rounded == RoundedOperands::BOTH,
            },
            _ => ContractionVariant::default(),
        }
    }
}

pub use contraction::{packs_half_operands, splits_tf32_operands};

/// Whether a launcher may round `spec`'s operands to TF32 in memory ([`emit_variant`] with
/// [`RoundedOperands`]): a TF32 contraction on the pipelined template (`float` operands stored
/// as rows of the depth). Packed 16-bit and split 3xTF32 products
/// ([`packs_half_operands`], [`splits_tf32_operands`]) have variants of their own too.
pub fn takes_rounded_operands(spec: &KernelSpec) -> bool {
    contraction::takes_rounded_operands(spec)
}

/// The entry-point name of [`emit_variant`]`(spec, variant)`'s kernel, without generating it.
pub fn variant_name(spec: &KernelSpec, variant: ContractionVariant) -> String {
    variant_entry(&spec.name(), spec, variant).into_owned()
}

/// [`variant_name`] from `name`, the entry point of [`emit`]`(spec)` (a launcher holding it
/// saves hashing the spec again): `name` itself for the default variant, else
/// `{name}_r{mask}`, with `_ws` for the warp-specialised body.
pub fn variant_entry<'a>(
    name: &'a str,
    spec: &KernelSpec,
    variant: ContractionVariant,
) -> std::borrow::Cow<'a, str> {
    let variant = variant.for_spec(spec);
    if variant == ContractionVariant::default() {
        return std::borrow::Cow::Borrowed(name);
    }
    let ws = if variant.warp_specialised { "_ws" } else { "" };
    std::borrow::Cow::Owned(format!("{name}_r{}{ws}", variant.rounded.mask()))
}

/// The kernel of `spec` for one launch's [`ContractionVariant`]: [`emit`]'s kernel for the
/// default variant or a spec that does not [take rounded operands](takes_rounded_operands);
/// else the same kernel, named by [`variant_entry`], that leaves the rounded operands' staged
/// chunks as they are (its results equal [`emit`]'s bit for bit when the operands are rounded
/// as `cvt.rna.tf32.f32` rounds them) and, where asked, runs the warp-specialised body (the
/// same products and epilogue; the mirror images' sums by label added in another order).
pub fn emit_variant(spec: &KernelSpec, variant: ContractionVariant) -> GeneratedKernel {
    let variant = variant.for_spec(spec);
    let name = variant_entry(&spec.name(), spec, variant).into_owned();
    let launch = if variant.warp_specialised {
        launch_shape(spec).warp_specialised()
    } else {
        launch_shape(spec)
    };
    let (preamble, statements) = match &spec.form {
        Form::Map { outputs } => (String::new(), map::body(spec, outputs)),
        Form::Rows { stores, reductions } => (String::new(), rows::body(spec, stores, reductions)),
        Form::Cols { reductions } => (String::new(), cols::body(spec, reductions)),
        Form::Contraction {
            a,
            b,
            precision,
            stores,
            reductions,
            ..
        } => {
            let parts = contraction::parts(spec, (*a, *b), *precision, variant, stores, reductions);
            (parts.preamble, parts.statements)
        }
    };

    let mut kernel = prelude(spec.dtype);
    if !spec.narrow.is_empty() {
        kernel.push_str(expr::HALF_CONVERSIONS);
    }
    kernel.push_str(&preamble);
    for problem in spec.problems() {
        kernel.push_str(&format!(
            "#error \"{}\"\n",
            c_string_text(&problem.to_string())
        ));
    }
    let bounds = match launch.min_blocks_per_multiprocessor() {
        Some(blocks) => format!("{}, {blocks}", launch.threads_per_block()),
        None => launch.threads_per_block().to_string(),
    };
    kernel.push_str(&format!(
        "extern \"C\" __global__ void __launch_bounds__({bounds}) {name}(\n"
    ));
    let mut params: Vec<String> = params(spec)
        .iter()
        .map(|p| format!("    {}", param_decl(spec, p)))
        .collect();
    if variant.warp_specialised {
        params.push("    const __grid_constant__ pk::TensorMap pk_ta".to_string());
        params.push("    const __grid_constant__ pk::TensorMap pk_tb".to_string());
    }
    kernel.push_str(&params.join(",\n"));
    kernel.push_str(")\n{\n");
    kernel.push_str(&statements);
    kernel.push_str("}\n");

    let mut source = header(spec, &name, &launch);
    source.push_str(&kernel);
    GeneratedKernel {
        name,
        source,
        launch,
    }
}

/// How the kernel generated for `spec` is launched, without generating it (the same value as
/// [`emit`]'s `launch`).
pub fn launch_shape(spec: &KernelSpec) -> LaunchShape {
    match &spec.form {
        Form::Map { .. } => map::launch(spec),
        Form::Rows { .. } => rows::LAUNCH,
        Form::Cols { .. } => cols::launch(spec),
        Form::Contraction { .. } => contraction::launch(spec),
    }
}

/// The outputs (indices in the kernel's output order) that the launcher of the kernel generated
/// for `spec` must set to zero before each launch, because the kernel adds into them (the sums
/// by label of a pipelined contraction). Empty for most kernels.
pub fn zeroed_outputs(spec: &KernelSpec) -> Vec<usize> {
    match &spec.form {
        Form::Contraction { .. } => contraction::zeroed_outputs(spec),
        _ => Vec::new(),
    }
}

/// Like [`emit`], but returns the spec's first structural problem as an error.
pub fn try_emit(spec: &KernelSpec) -> Result<GeneratedKernel, SpecError> {
    spec.validate()?;
    Ok(emit(spec))
}

/// The C declaration of one kernel parameter. Map kernels declare their pointers without
/// `__restrict__`: the planner runs an element-wise map in place (its output over a dying
/// input), which is safe because every element is read and then written by one thread, but
/// would break a no-alias promise. Row and column kernels never run in place.
pub(crate) fn param_decl(spec: &KernelSpec, param: &Param) -> String {
    let t = spec.dtype.c_name();
    let r = if matches!(spec.form, kernel_ir::Form::Map { .. }) {
        ""
    } else {
        " __restrict__"
    };
    match *param {
        Param::Rows => "const long long rows".to_string(),
        Param::Cols => "const long long cols".to_string(),
        Param::BandStart => "const long long band_start".to_string(),
        Param::BandEnd => "const long long band_end".to_string(),
        Param::Depth => "const long long depth".to_string(),
        Param::Width => "const long long width".to_string(),
        Param::Scratch => format!("unsigned char*{r} scratch"),
        Param::InputPtr(k) if spec.narrow.input(k).is_some() => {
            format!("const unsigned short*{r} in{k}")
        }
        Param::InputPtr(k) => format!("const {t}*{r} in{k}"),
        Param::InputLd(k) => format!("const long long in{k}_ld"),
        Param::InputScalar(k) => format!("const {t} in{k}"),
        Param::InputIndex(k) => format!("const unsigned int*{r} in{k}"),
        Param::Output(k) => match spec.outputs().get(k) {
            Some(OutputShape::PerRowIndex) => format!("unsigned int*{r} out{k}"),
            _ if spec.narrow.output(k).is_some() => format!("unsigned short*{r} out{k}"),
            _ => format!("{t}*{r} out{k}"),
        },
    }
}

/// Whether any of `exprs` reads an input that depends on the element's position (anything but
/// a scalar or a broadcast value), i.e. whether the template must compute `i` and `j`.
pub(crate) fn reads_position<'a>(spec: &KernelSpec, exprs: impl Iterator<Item = &'a Expr>) -> bool {
    let mut positional = false;
    for e in exprs {
        e.for_each_input(&mut |k| {
            let positional_access = |a: Access| !matches!(a, Access::Scalar | Access::Broadcast);
            if spec
                .inputs
                .get(k)
                .is_some_and(|input| positional_access(input.access))
            {
                positional = true;
            }
        });
    }
    positional
}

/// The header comment: everything a reader (or a launcher) needs to know about the kernel.
fn header(spec: &KernelSpec, name: &str, launch: &LaunchShape) -> String {
    let mut h = String::new();
    h.push_str(&format!(
        "// {name}: popcorn fused kernel, generated by kernels-gen (do not edit).\n"
    ));
    h.push_str("// provenance:\n");
    if spec.provenance.is_empty() {
        h.push_str("//   (none)\n");
    }
    for p in &spec.provenance {
        h.push_str(&format!("//   {}\n", comment_text(p)));
    }
    h.push_str(&format!("// form: {}\n", describe_form(&spec.form)));
    h.push_str(&format!(
        "// dtype: {} ({})\n",
        spec.dtype.c_name(),
        dtype_label(spec.dtype)
    ));
    h.push_str("// inputs:\n");
    if spec.inputs.is_empty() {
        h.push_str("//   (none)\n");
    }
    for (k, input) in spec.inputs.iter().enumerate() {
        let held = match spec.narrow.input(k) {
            Some(half) => format!(", held in {half} (widened on load)"),
            None => String::new(),
        };
        h.push_str(&format!(
            "//   in{k} = {}: {}{held}\n",
            comment_text(&input.name),
            describe_access(k, input.access)
        ));
    }
    h.push_str("// parameters:\n");
    for p in params(spec) {
        h.push_str(&format!("//   {}\n", param_decl(spec, &p)));
    }
    h.push_str("// outputs:\n");
    if spec.outputs().is_empty() {
        h.push_str("//   (none)\n");
    }
    for (k, shape) in spec.outputs().iter().enumerate() {
        let what = match shape {
            OutputShape::Full => "rows x cols, row-major, element (i, j) at [i * cols + j]",
            OutputShape::PerRow => "one value per row, [i]",
            OutputShape::PerRowIndex => "one unsigned int index per row, [i]",
            OutputShape::PerCol => "one value per column, [j]",
            OutputShape::PerRowWide => "rows x width, row-major, element (i, c) at [i * width + c]",
        };
        let held = match spec.narrow.output(k) {
            Some(half) => format!(", held in {half} (rounded to nearest even)"),
            None => String::new(),
        };
        h.push_str(&format!("//   out{k}: {what}{held}\n"));
    }
    h.push_str(&format!("// launch: {}\n", launch.describe()));
    h.push_str("// (end of header: the kernel text follows)\n");
    h
}

/// `f32` or `f64`.
fn dtype_label(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "f32",
        ScalarType::F64 => "f64",
    }
}

/// How input `k` is read, for the header.
fn describe_access(k: usize, access: Access) -> String {
    match access {
        Access::Matrix { transposed: false } => {
            format!("matrix, element (i, j) at in{k}[i * in{k}_ld + j]")
        }
        Access::Matrix { transposed: true } => {
            format!("matrix read transposed, element (i, j) at in{k}[j * in{k}_ld + i]")
        }
        Access::LowerSymmetric => format!(
            "symmetric matrix stored as its lower triangle, element (i, j) at \
             in{k}[max(i, j) * in{k}_ld + min(i, j)]"
        ),
        Access::Col => format!("column vector, element (i, j) at in{k}[i]"),
        Access::Row => format!("row vector, element (i, j) at in{k}[j]"),
        Access::Scalar => "scalar, by value".to_string(),
        Access::Broadcast => format!("single value in device memory, in{k}[0] at every element"),
        Access::IndexCol => format!("index vector (unsigned int), in{k}[i] per row"),
        Access::IndexRow => format!("index vector (unsigned int), in{k}[j] per column"),
        Access::Left { transposed: false } => {
            format!("left product operand, rows x depth, element (i, p) at in{k}[i * in{k}_ld + p]")
        }
        Access::Left { transposed: true } => format!(
            "left product operand read transposed, element (i, p) at in{k}[p * in{k}_ld + i]"
        ),
        Access::Right { transposed: false } => format!(
            "right product operand, depth x cols, element (p, j) at in{k}[p * in{k}_ld + j]"
        ),
        Access::Right { transposed: true } => format!(
            "right product operand read transposed, element (p, j) at in{k}[j * in{k}_ld + p]"
        ),
    }
}

/// A one-line summary of the form, for the header.
fn describe_form(form: &Form) -> String {
    let kinds = |reductions: &[kernel_ir::Reduction]| -> String {
        let names: Vec<String> = reductions
            .iter()
            .map(|r| match r.kind {
                ReduceKind::Sum => "sum".to_string(),
                ReduceKind::Min => "min".to_string(),
                ReduceKind::Max => "max".to_string(),
                ReduceKind::ArgMin => "argmin".to_string(),
                ReduceKind::Pick { index_input } => format!("pick(in{index_input})"),
                ReduceKind::Dot { weights } => format!("dot(in{weights})"),
                ReduceKind::ByLabel { labels } => format!("by-label(in{labels})"),
            })
            .collect();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    match form {
        Form::Map { outputs } => format!("map (outputs: {})", outputs.len()),
        Form::Rows { stores, reductions } => format!(
            "rows (stores: {}; reductions over j: {})",
            stores.len(),
            kinds(reductions)
        ),
        Form::Cols { reductions } => format!("cols (reductions over i: {})", kinds(reductions)),
        Form::Contraction {
            a,
            b,
            precision,
            symmetric,
            stores,
            reductions,
        } => format!(
            "contraction (product in{a} * in{b}, {}{}; stores: {}; reductions over j: {})",
            match precision {
                kernel_ir::Precision::Strict => "strict".to_string(),
                on_cores => format!("{} tensor cores", on_cores.name()),
            },
            if *symmetric { ", symmetric" } else { "" },
            stores.len(),
            kinds(reductions)
        ),
    }
}

/// `text` made safe inside a `//` comment: no line breaks or other control characters, no
/// backslash (which would continue the comment onto the next line), ASCII only.
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\\' => '/',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect()
}

/// `text` made safe inside a C string literal of an `#error` line.
fn c_string_text(text: &str) -> String {
    comment_text(text).replace('"', "'")
}
