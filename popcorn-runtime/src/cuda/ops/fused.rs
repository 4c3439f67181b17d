//! `StepOp::Fused`: a generated kernel. Its CUDA C comes from kernels-gen on first use (then
//! from the kernel cache), its launch shape from kernels-gen's data, and its arguments, in the
//! order of [`kernels_gen::params`], are checked against the kernel's reads and writes. A map
//! over a lower-symmetric input also runs band by band (the consumer of a pipeline).

use super::{operand_copies, Io, StepCx};
use crate::backend::{Arg, BufferInfo, ElemType};
use crate::cuda::args::{check_buffer, kind};
use crate::cuda::driver::{self, KernelArg};
use crate::cuda::errors::invalid;
use crate::cuda::memory::DeviceAddress;
use crate::cuda::nvrtc::poisoned;
use crate::error::RuntimeError;
use kernel_ir::{Access, Form, OutputShape, ScalarType};
use kernels_gen::Param;
use kernels_gen::{ContractionVariant, LaunchShape};
use popcorn_dsl::plan::FusedStep;
use popcorn_dsl::plan::StepPart;

/// Runs part `part` of a fused step (the whole space, or a band of rows of a banded map) on
/// its lane's stream.
pub(crate) fn run(
    cx: &StepCx<'_>,
    f: &FusedStep,
    (inputs, outputs): Io<'_, '_>,
    part: StepPart,
) -> Result<(), RuntimeError> {
    let band = match part {
        StepPart::Whole => None,
        StepPart::Band(r0, r1) => Some((r0, r1)),
        StepPart::Prologue => return Ok(()),
    };
    let shape = launch_shape(cx, f)?;
    let share = match f.share {
        Some(share) => Some(share_view(f, shape, band, share)?),
        None => None,
    };
    let scratch = column_scratch(cx, f, shape)?;
    let mut args = kernel_args(f, inputs, outputs, band, scratch)?;
    // Operands packed in 16 bits, or rounded to TF32 once (whole launches only), held until
    // the launch below.
    let copies = operand_copies::prepare(cx, f, inputs, band.is_none())?;
    // The depth the kernel takes: in words where the operands are packed in pairs, tripled for
    // split ones.
    let depth = copies.kernel_depth.unwrap_or(f.depth);
    let variant = ContractionVariant {
        rounded: copies.rounded,
        warp_specialised: warp_specialised(cx, f, shape, &copies, depth),
    };
    let shape = if variant.warp_specialised {
        shape.warp_specialised()
    } else {
        shape
    };
    let name = kernels_gen::variant_entry(&f.name, &f.spec, variant);
    let params = kernels_gen::params(&f.spec);
    if copies.copy != 0 {
        let Form::Contraction { a, b, .. } = &f.spec.form else {
            return Err(invalid(format!("kernel {name} is not a contraction")));
        };
        // One copy stands for B, and for A too where A is the same matrix (else A may have its
        // own packed copy), each with its own (padded) leading dimension; packed operands come
        // with the depth in words.
        let operands = (*a, *b);
        for (param, arg) in params.iter().zip(args.iter_mut()) {
            match param {
                Param::InputPtr(k) if copies.replaces(*k, operands) => {
                    *arg = KernelArg::Ptr(copies.operand(*k, operands).0)
                }
                Param::InputLd(k) if copies.replaces(*k, operands) => {
                    *arg = KernelArg::size(copies.operand(*k, operands).1)?
                }
                Param::Depth => *arg = KernelArg::size(depth)?,
                _ => {}
            }
        }
    }
    // The launch's rows and columns: the whole space, or a share's rows [r0, r1) against
    // columns [c0, n), every operand read from its row r0 or column c0 (`ShareView`).
    let (rows, cols) = match &share {
        Some(view) => {
            let offsets = share_offsets(f, inputs, &copies, view)?;
            for (param, arg) in params.iter().zip(args.iter_mut()) {
                match param {
                    Param::Rows => *arg = KernelArg::size(view.rows.len())?,
                    Param::Cols => *arg = KernelArg::size(f.cols - view.first_col())?,
                    Param::InputPtr(k) | Param::InputIndex(k) | Param::Output(k) => {
                        let offset = if matches!(param, Param::Output(_)) {
                            output_offset(f, *k, view.rows.start)?
                        } else {
                            offsets[*k]
                        };
                        if let KernelArg::Ptr(p) = arg {
                            *arg = KernelArg::Ptr(*p + offset);
                        }
                    }
                    _ => {}
                }
            }
            (view.rows.len(), f.cols - view.first_col())
        }
        None => (f.rows, f.cols),
    };
    if variant.warp_specialised {
        let first_row = share.as_ref().map_or(0, |v| v.first_col());
        for map in copies.tensor_maps(rows, cols, depth, first_row)? {
            args.push(KernelArg::TensorMap(map));
        }
    }
    let function = cx
        .device
        .kernels
        .function(&name, || kernels_gen::emit_variant(&f.spec, variant).source)?;
    let limits = &cx.device.limits;
    let dims = match (band, shape) {
        (None, LaunchShape::Pipelined { .. }) => shape
            .pipelined_grid_block(
                (rows as u64, cols as u64, depth as u64),
                limits.multiprocessors,
                limits.shared_bytes_per_block_optin,
            )
            .map_err(|needed| {
                invalid(format!(
                    "kernel {} (a pipelined contraction) needs {needed} bytes of shared memory \
                     per block and this device allows {}; plan without fused contractions \
                     (POPCORN_CONTRACTIONS=never) on this device",
                    f.name, limits.shared_bytes_per_block_optin
                ))
            })?,
        (None, _) => shape.grid_block_wide(rows as u64, cols as u64, f.width as u64),
        (Some((r0, r1)), _) => shape.band_grid_block(f.rows as u64, r0 as u64, r1 as u64),
    };
    if dims.2 > STATIC_SHARED_LIMIT {
        // Beyond the default 48 KiB (by-label bins, pipelined staging): opt in.
        cx.device
            .allow_opt_in_shared(&function, u64::from(dims.2), &|| {
                format!(
                    "kernel {} ({} by-label columns, depth {}; plan with fewer clusters per \
                     contraction, or without fused contractions: POPCORN_CONTRACTIONS=never)",
                    f.name, f.width, f.depth
                )
            })?;
    }
    if share.is_some() {
        // A share's partial sums are summed over the ranks: every row it does not write is 0.
        zero_whole_outputs(cx, f, outputs)?;
    } else {
        zero_accumulated_outputs(cx, f, outputs)?;
    }
    if rows == 0 || cols == 0 {
        return Ok(()); // a share of no rows: its partial sums are the zeros just written
    }
    // SAFETY: `kernel_args` built the arguments in the order of the kernel's parameters and
    // checked every buffer against what the kernel reads and writes over this space or band;
    // a rounded copy holds the rows of the operand it replaces, at its own leading dimension;
    // a warp-specialised kernel's tensor maps (its last two parameters) describe that copy. A
    // share reads and writes rows [r0, r1) and columns [c0, n) of the checked whole space,
    // every operand and output moved to its row r0 or column c0 (`share_offsets`).
    let launched = unsafe { driver::launch(cx.stream, &function, &name, dims, &mut args) };
    drop(copies);
    launched
}

/// How a rank's share of a symmetric contraction runs on this kernel: rows `[r0, r1)` of the
/// space against columns `[c0, n)`.
struct ShareView {
    /// The share's rows.
    rows: std::ops::Range<usize>,
    /// Whether the kernel computes one triangle of tiles (the pipelined template): the share
    /// is then the square's corner from row and column r0, its rows' tiles on and above the
    /// diagonal, each added to its rows and, mirrored, to its columns. Otherwise the kernel
    /// computes whole rows, against every column.
    corner: bool,
}

impl ShareView {
    /// The first column `c0`.
    fn first_col(&self) -> usize {
        if self.corner {
            self.rows.start
        } else {
            0
        }
    }
}

/// A rank's share of a symmetric contraction on this kernel: on the pipelined template, rows of
/// the one triangle of tiles of about equal areas, boundaries on whole blocks of rows (the
/// kernel's diagonal block holds both halves of its entries only with all its rows present);
/// on other templates (f64), equal blocks of whole rows.
fn share_view(
    f: &FusedStep,
    shape: LaunchShape,
    band: Option<(usize, usize)>,
    share: popcorn_dsl::plan::collective::Share,
) -> Result<ShareView, RuntimeError> {
    let symmetric = matches!(
        f.spec.form,
        Form::Contraction {
            symmetric: true,
            ..
        }
    );
    if !symmetric || band.is_some() || f.rows != f.cols || share.part >= share.parts {
        return Err(invalid(format!(
            "kernel {}: part {} of {} of a {} x {} space is no share of a symmetric contraction",
            f.name, share.part, share.parts, f.rows, f.cols
        )));
    }
    Ok(match shape {
        LaunchShape::Pipelined { block_rows, .. } => ShareView {
            rows: share.triangle_rows(f.rows, block_rows as usize),
            corner: true,
        },
        _ => ShareView {
            rows: share.rows(f.rows),
            corner: false,
        },
    })
}

/// Bytes by which a share moves each input: an operand read at the row (`A`, a row broadcast,
/// the rows' indices) to row r0, one read at the column (`B^T`, a column broadcast, the
/// columns' labels) to column c0: rows of a matrix (the rounded copy's rows where one stands
/// for it), entries of a vector or an index; 0 for scalars.
fn share_offsets<B: BufferInfo + DeviceAddress>(
    f: &FusedStep,
    inputs: &[Arg<'_, B>],
    copies: &operand_copies::RoundedCopies<'_>,
    view: &ShareView,
) -> Result<Vec<u64>, RuntimeError> {
    let Form::Contraction { a, b, .. } = &f.spec.form else {
        return Err(invalid(format!("kernel {} is not a contraction", f.name)));
    };
    let replaced = |k: usize| copies.replaces(k, (*a, *b));
    let elem = f.spec.dtype.size_bytes() as u64;
    let (r0, c0) = (view.rows.start, view.first_col());
    f.spec
        .inputs
        .iter()
        .enumerate()
        .map(|(k, input)| {
            let at = match input.access {
                Access::Left { transposed: false } | Access::Col | Access::IndexCol => r0,
                Access::Right { transposed: true } | Access::Row | Access::IndexRow => c0,
                Access::Scalar | Access::Broadcast => return Ok(0),
                other => {
                    return Err(invalid(format!(
                        "input {k} of kernel {} is read as {other:?}, which a share of a \
                         symmetric contraction cannot move to its rows",
                        f.name
                    )))
                }
            };
            match input.access {
                _ if replaced(k) => Ok(copies.row_offset_bytes(at)),
                Access::Left { .. } | Access::Right { .. } => match inputs.get(k) {
                    Some(Arg::Dense { cols, .. }) => Ok((at * cols) as u64 * elem),
                    _ => Err(invalid(format!(
                        "operand {k} of kernel {} is not a dense matrix",
                        f.name
                    ))),
                },
                Access::IndexCol | Access::IndexRow => Ok(at as u64 * 4),
                _ => Ok(at as u64 * elem),
            }
        })
        .collect()
}

/// A share's output `k`: its elements per row and bytes per element (a per-row value or index,
/// or a row of by-label sums); anything else is no output a share can write.
fn shared_output(f: &FusedStep, k: usize) -> Result<(usize, usize), RuntimeError> {
    let elem = f.spec.dtype.size_bytes();
    match f.spec.outputs().get(k) {
        Some(OutputShape::PerRowWide) => Ok((f.width, elem)),
        Some(OutputShape::PerRow) => Ok((1, elem)),
        Some(OutputShape::PerRowIndex) => Ok((1, 4)),
        _ => Err(invalid(format!(
            "output {k} of kernel {} is no per-row sum, which a share cannot write",
            f.name
        ))),
    }
}

/// Bytes by which a share moves output `k`: to its row r0.
fn output_offset(f: &FusedStep, k: usize, r0: usize) -> Result<u64, RuntimeError> {
    let (per_row, elem) = shared_output(f, k)?;
    Ok((r0 * per_row * elem) as u64)
}

/// Fewest elements of a product (rows x columns) for the warp-specialised body: on smaller
/// ones (letter's 10,500 x 10,500 in BENCHMARKS.md run 27) its start-up and per-unit waits
/// cost more than its overlap saves.
const WARP_SPECIALISED_MIN_ELEMENTS: u64 = 1 << 30;

/// Whether a whole launch of `f` takes the warp-specialised body: the device has one and
/// allows it, the launcher rounded (or packed) both operands into one copy (16-byte rows, which
/// its tensor maps need), the product is large and exactly
/// [`PIPELINE_WS_MAX_DEPTH_CHUNKS`](kernels_gen::emit::PIPELINE_WS_MAX_DEPTH_CHUNKS) = 2
/// chunks deep (33 to 64 floats, 65 to 128 packed 16-bit values), or one chunk of packed
/// 16-bit values (up to 64): with one chunk of TF32 values (50,000 x 16 in run 27) a tile's
/// products are too short for the handshakes with the producer to pay, while one chunk of
/// 16-bit values is as deep as TF32's two.
fn warp_specialised(
    cx: &StepCx<'_>,
    f: &FusedStep,
    shape: LaunchShape,
    copies: &operand_copies::RoundedCopies<'_>,
    depth: usize,
) -> bool {
    use kernels_gen::emit::{PIPELINE_DEPTH_CHUNK, PIPELINE_WS_MAX_DEPTH_CHUNKS};
    let chunks = (depth as u64).div_ceil(u64::from(PIPELINE_DEPTH_CHUNK));
    cx.device.warp_specialised_contractions
        && matches!(shape, LaunchShape::Pipelined { .. })
        && copies.rounded == kernels_gen::RoundedOperands::BOTH
        && copies.copy.is_multiple_of(16)
        && (chunks == u64::from(PIPELINE_WS_MAX_DEPTH_CHUNKS)
            || (kernels_gen::packs_half_operands(&f.spec).is_some() && chunks == 1))
        && (f.rows as u64).saturating_mul(f.cols as u64) >= WARP_SPECIALISED_MIN_ELEMENTS
}

/// Zeroes every output of a share whole, on the step's stream: the ranks' outputs are summed,
/// so the rows a share does not write must be 0.
fn zero_whole_outputs<B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'_>,
    f: &FusedStep,
    outputs: &[Arg<'_, B>],
) -> Result<(), RuntimeError> {
    for (k, out) in outputs.iter().enumerate() {
        let buf = match out {
            Arg::Dense { buf, .. } | Arg::Index { buf, .. } => *buf,
            _ => {
                return Err(invalid(format!(
                    "output {k} of fused kernel {} is not a dense value or an index",
                    f.name
                )))
            }
        };
        // The output's own extent (its buffer may be longer).
        let (per_row, elem) = shared_output(f, k)?;
        let len = f.rows * per_row;
        if buf.len() < len {
            return Err(invalid(format!(
                "output {k} of fused kernel {} holds {} elements, {len} needed",
                f.name,
                buf.len()
            )));
        }
        let bytes = len * elem;
        if !bytes.is_multiple_of(4) {
            return Err(invalid(format!(
                "output {k} of fused kernel {} ({bytes} bytes) is no whole number of 32-bit words",
                f.name
            )));
        }
        let words = bytes / 4;
        // SAFETY: the buffer holds at least `len` elements of its type (checked above), `words`
        // 32-bit words in all; the memset runs on this step's stream, before the launch.
        unsafe {
            cx.device
                .builtins(cx.stream)
                .memset32(buf.address(), 0, words)?;
        }
    }
    Ok(())
}

/// Zeroes, on the step's stream, the outputs the kernel adds into (the sums by label of a
/// pipelined contraction, whose blocks add their partial sums with atomics).
fn zero_accumulated_outputs<B: BufferInfo + DeviceAddress>(
    cx: &StepCx<'_>,
    f: &FusedStep,
    outputs: &[Arg<'_, B>],
) -> Result<(), RuntimeError> {
    for k in kernels_gen::zeroed_outputs(&f.spec) {
        let Some(Arg::Dense { buf, .. }) = outputs.get(k) else {
            return Err(invalid(format!(
                "output {k} of fused kernel {} (a sum by label) is not a dense value",
                f.name
            )));
        };
        let words = f.rows * f.width * f.spec.dtype.size_bytes() / 4;
        // SAFETY: `kernel_args` checked that the buffer holds the rows x width elements the
        // kernel writes; the memset runs on this step's stream, before the launch.
        unsafe {
            cx.device
                .builtins(cx.stream)
                .memset32(buf.address(), 0, words)?;
        }
    }
    Ok(())
}

/// The device scratch of a column kernel whose rows the launch splits over blocks (its
/// lane's, grown as needed; steps on one lane run in stream order, so reuse is safe), with
/// its tickets zeroed on the lane's stream; 0 (a null pointer) for every other launch.
fn column_scratch(cx: &StepCx<'_>, f: &FusedStep, shape: LaunchShape) -> Result<u64, RuntimeError> {
    let kernel_ir::Form::Cols { reductions } = &f.spec.form else {
        return Ok(0);
    };
    let Some(need) = shape.column_scratch(f.rows as u64, f.cols as u64, reductions.len()) else {
        return Ok(0);
    };
    let too_big = |_| {
        invalid(format!(
            "kernel {} needs {} bytes of scratch",
            f.name, need.bytes
        ))
    };
    let bytes = usize::try_from(need.bytes).map_err(too_big)?;
    let tickets = usize::try_from(need.tickets).map_err(too_big)?;
    let mut buffer = cx.lane_scratch()?;
    let base = buffer.ensure(cx.stream, bytes, "column-reduction scratch")?;
    // SAFETY: the scratch holds `bytes` bytes, the tickets `tickets` words from
    // `tickets_offset` (within `bytes`, as `column_scratch` computed), on this lane's stream.
    unsafe {
        cx.device
            .builtins(cx.stream)
            .memset32(base + need.tickets_offset, 0, tickets)?;
    }
    Ok(base)
}

/// Dynamic shared memory a kernel may use without opting in.
const STATIC_SHARED_LIMIT: u32 = 48 * 1024;

/// The launch shape of a fused kernel on this device, from kernels-gen (cached by kernel name;
/// a name that is not its spec's is an error, checked once).
fn launch_shape(cx: &StepCx<'_>, f: &FusedStep) -> Result<LaunchShape, RuntimeError> {
    let mut shapes = cx.device.launch_shapes.lock().map_err(|_| poisoned())?;
    if let Some(s) = shapes.get(&f.name) {
        return Ok(*s);
    }
    if f.spec.name() != f.name {
        return Err(invalid(format!(
            "the plan's kernel {} does not match its spec (named {}); the plan was made by \
             another version of popcorn: plan the program again",
            f.name,
            f.spec.name()
        )));
    }
    let shape = kernels_gen::launch_shape(&f.spec);
    // Only the wgmma body (sm_90a) writes mirror images: elsewhere their stage would take
    // shared memory for nothing (past what an A100 block may have, 163 KB, from 256 deep).
    let shape = if cx.device.wgmma {
        shape
    } else {
        shape.without_mirror_stage()
    };
    shapes.insert(f.name.clone(), shape);
    Ok(shape)
}

/// The element type of a kernel's values.
fn float_elem(dtype: ScalarType) -> ElemType {
    match dtype {
        ScalarType::F32 => ElemType::F32,
        ScalarType::F64 => ElemType::F64,
    }
}

/// The kernel arguments of `step`, in parameter order: sizes as `long long`, pointers,
/// leading dimensions (the value's columns) as `long long`, scalars by value in the kernel's
/// type. Every buffer is checked to hold what the kernel reads or writes. `band` (rows
/// `[start, end)`, `start` a multiple of the tile side) limits a tile-pair map to the pairs of
/// those tile rows; `None` is the whole space. `scratch` is the address passed for
/// [`Param::Scratch`] (see `column_scratch`).
pub(crate) fn kernel_args<B: BufferInfo + DeviceAddress>(
    step: &FusedStep,
    inputs: &[Arg<'_, B>],
    outputs: &[Arg<'_, B>],
    band: Option<(usize, usize)>,
    scratch: u64,
) -> Result<Vec<KernelArg>, RuntimeError> {
    let spec = &step.spec;
    let out_shapes = spec.outputs();
    if inputs.len() != spec.inputs.len() || outputs.len() != out_shapes.len() {
        return Err(invalid(format!(
            "fused kernel {} takes {} input(s) and {} output(s), got {} and {}",
            step.name,
            spec.inputs.len(),
            out_shapes.len(),
            inputs.len(),
            outputs.len()
        )));
    }
    let (rows, cols) = (step.rows, step.cols);
    let empty = rows == 0 || cols == 0;
    let elem = float_elem(spec.dtype);
    let input_what = |k: usize| {
        format!(
            "input {k} (`{}`) of fused kernel {}",
            spec.inputs[k].name, step.name
        )
    };
    let output_what = |k: usize| format!("output {k} of fused kernel {}", step.name);
    let (band_start, band_end) = band.unwrap_or((0, rows));
    let tile = kernels_gen::emit::PAIR_TILE as usize;
    if band.is_some()
        && (!spec.runs_in_bands()
            || band_start > band_end
            || band_end > rows
            || !band_start.is_multiple_of(tile))
    {
        return Err(invalid(format!(
            "fused kernel {}: rows {band_start}..{band_end} are not a band of its tile pairs \
             (a tile-pair map over {rows} rows, bands starting on multiples of {tile})",
            step.name
        )));
    }
    let params = kernels_gen::params(spec);
    let mut args = Vec::with_capacity(params.len());
    for p in params {
        let arg = match p {
            Param::Rows => KernelArg::size(rows)?,
            Param::Cols => KernelArg::size(cols)?,
            Param::BandStart => KernelArg::size(band_start)?,
            Param::BandEnd => KernelArg::size(band_end)?,
            Param::Depth => KernelArg::size(step.depth)?,
            Param::Width => KernelArg::size(step.width)?,
            Param::Scratch => KernelArg::Ptr(scratch),
            Param::InputPtr(k) => {
                let what = input_what(k);
                let (buf, r, c) = dense_parts(&inputs[k], &what)?;
                let needed = if empty {
                    0
                } else {
                    match spec.inputs[k].access {
                        Access::Matrix { transposed } => {
                            let (need_r, need_c) = if transposed {
                                (cols, rows)
                            } else {
                                (rows, cols)
                            };
                            if r < need_r || c < need_c {
                                return Err(invalid(format!(
                                    "{what} is {r} x {c} but the kernel reads {need_r} x {need_c}"
                                )));
                            }
                            r * c
                        }
                        Access::LowerSymmetric => {
                            if rows != cols || r < rows || c < cols {
                                return Err(invalid(format!(
                                    "{what} is {r} x {c}, read as a symmetric {rows} x {cols} \
                                     matrix stored as its lower triangle; it needs a square \
                                     iteration space within the matrix"
                                )));
                            }
                            r * c
                        }
                        Access::Left { transposed } | Access::Right { transposed } => {
                            let left = matches!(spec.inputs[k].access, Access::Left { .. });
                            let outer = if left { rows } else { cols };
                            let depth = step.depth;
                            // Left: rows x depth (stored depth x rows transposed); right:
                            // depth x cols (stored cols x depth transposed).
                            let (need_r, need_c) = match (left, transposed) {
                                (true, false) | (false, true) => (outer, depth),
                                (true, true) | (false, false) => (depth, outer),
                            };
                            if depth > 0 && (r < need_r || c < need_c) {
                                return Err(invalid(format!(
                                    "{what} is {r} x {c} but the product reads {need_r} x {need_c}"
                                )));
                            }
                            r * c
                        }
                        Access::Col => rows,
                        Access::Row => cols,
                        Access::Broadcast => 1,
                        Access::Scalar | Access::IndexCol | Access::IndexRow => {
                            return Err(invalid(format!(
                                "{what}: a pointer parameter for a by-value input"
                            )))
                        }
                    }
                };
                if r * c < needed {
                    return Err(invalid(format!(
                        "{what} has {} elements but the kernel reads {needed}",
                        r * c
                    )));
                }
                let in_elem = spec.narrow.input(k).map_or(elem, ElemType::Half);
                check_buffer(buf, in_elem, r * c, &what)?;
                KernelArg::Ptr(buf.address())
            }
            Param::InputLd(k) => {
                let (_, _, c) = dense_parts(&inputs[k], &input_what(k))?;
                KernelArg::size(c)?
            }
            Param::InputScalar(k) => match &inputs[k] {
                Arg::Scalar(v) => KernelArg::float(*v, spec.dtype),
                other => {
                    return Err(invalid(format!(
                        "{}: expected a scalar, got {}",
                        input_what(k),
                        kind(other)
                    )))
                }
            },
            Param::InputIndex(k) => match &inputs[k] {
                Arg::Index { buf, len } => {
                    let what = input_what(k);
                    let per = match spec.inputs[k].access {
                        Access::IndexRow => cols,
                        _ => rows,
                    };
                    let needed = if empty { 0 } else { per };
                    if *len < needed {
                        return Err(invalid(format!(
                            "{what} has {len} entries but the kernel reads {needed}"
                        )));
                    }
                    check_buffer(*buf, ElemType::U32, needed, &what)?;
                    KernelArg::Ptr(buf.address())
                }
                other => {
                    return Err(invalid(format!(
                        "{}: expected an index vector, got {}",
                        input_what(k),
                        kind(other)
                    )))
                }
            },
            Param::Output(k) => {
                let what = output_what(k);
                let shape = out_shapes[k];
                let (buf, len) = match &outputs[k] {
                    Arg::Dense { buf, rows, cols } => (*buf, rows * cols),
                    Arg::Index { buf, len } => (*buf, *len),
                    other => {
                        return Err(invalid(format!(
                            "{what}: expected a dense or index value, got {}",
                            kind(other)
                        )))
                    }
                };
                let (needed, out_elem) = match shape {
                    OutputShape::Full => (
                        rows * cols,
                        spec.narrow.output(k).map_or(elem, ElemType::Half),
                    ),
                    OutputShape::PerRow => (rows, elem),
                    OutputShape::PerRowIndex => (rows, ElemType::U32),
                    OutputShape::PerCol => (cols, elem),
                    OutputShape::PerRowWide => (rows * step.width, elem),
                };
                if len < needed {
                    return Err(invalid(format!(
                        "{what} has {len} elements but the kernel writes {needed}"
                    )));
                }
                check_buffer(buf, out_elem, needed, &what)?;
                KernelArg::Ptr(buf.address())
            }
        };
        args.push(arg);
    }
    Ok(args)
}

/// The buffer and shape of a dense input.
fn dense_parts<'a, B>(arg: &Arg<'a, B>, what: &str) -> Result<(&'a B, usize, usize), RuntimeError> {
    match arg {
        Arg::Dense { buf, rows, cols } => Ok((*buf, *rows, *cols)),
        other => Err(invalid(format!(
            "{what}: expected a dense value, got {}",
            kind(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::args::fake::{buf, FakeBuf};
    use kernel_ir::{BinaryOp, Expr, Form, Input, KernelSpec, ReduceKind, Reduction};

    fn step(spec: KernelSpec, rows: usize, cols: usize) -> FusedStep {
        FusedStep {
            name: spec.name(),
            spec,
            rows,
            cols,
            depth: 0,
            width: 0,
            share: None,
        }
    }

    fn input(name: &str, access: Access) -> Input {
        Input {
            name: name.into(),
            access,
        }
    }

    #[test]
    fn parameters_follow_the_spec_order_with_sizes_pointers_and_scalars() {
        // out0 = x^T[i, j] * s + b[j], plus argmin per row.
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F64,
            inputs: vec![
                input("x", Access::Matrix { transposed: true }),
                input("s", Access::Scalar),
                input("b", Access::Row),
            ],
            form: Form::Rows {
                stores: vec![Expr::binary(
                    BinaryOp::Add,
                    Expr::binary(BinaryOp::Mul, Expr::Input(0), Expr::Input(1)),
                    Expr::Input(2),
                )],
                reductions: vec![Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: Expr::Input(0),
                }],
            },
            provenance: vec![],
        };
        let s = step(spec, 3, 5);
        let x = buf(ElemType::F64, 15, 0x100);
        let b = buf(ElemType::F64, 5, 0x200);
        let out = buf(ElemType::F64, 15, 0x300);
        let idx = buf(ElemType::U32, 3, 0x400);
        let inputs = [
            Arg::Dense {
                buf: &x,
                rows: 5,
                cols: 3,
            },
            Arg::Scalar(2.5),
            Arg::Dense {
                buf: &b,
                rows: 1,
                cols: 5,
            },
        ];
        let outputs = [
            Arg::Dense {
                buf: &out,
                rows: 3,
                cols: 5,
            },
            Arg::Index { buf: &idx, len: 3 },
        ];
        let args = kernel_args(&s, &inputs, &outputs, None, 0).ok();
        assert_eq!(
            args,
            Some(vec![
                KernelArg::I64(3),
                KernelArg::I64(5),
                KernelArg::Ptr(0x100),
                KernelArg::I64(3),
                KernelArg::F64(2.5),
                KernelArg::Ptr(0x200),
                KernelArg::Ptr(0x300),
                KernelArg::Ptr(0x400),
            ])
        );
    }

    #[test]
    fn mismatched_arguments_are_errors() {
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F32,
            inputs: vec![
                input("x", Access::Matrix { transposed: false }),
                input("c", Access::Col),
            ],
            form: Form::Map {
                outputs: vec![Expr::binary(BinaryOp::Sub, Expr::Input(0), Expr::Input(1))],
            },
            provenance: vec![],
        };
        let s = step(spec, 4, 2);
        let x = buf(ElemType::F32, 8, 1);
        let c = buf(ElemType::F32, 4, 2);
        let short_c = buf(ElemType::F32, 3, 2);
        let out = buf(ElemType::F32, 8, 3);
        let wrong_type = buf(ElemType::F64, 8, 3);
        let good_in = [
            Arg::Dense {
                buf: &x,
                rows: 4,
                cols: 2,
            },
            Arg::Dense {
                buf: &c,
                rows: 4,
                cols: 1,
            },
        ];
        let good_out = [Arg::Dense {
            buf: &out,
            rows: 4,
            cols: 2,
        }];
        assert!(kernel_args(&s, &good_in, &good_out, None, 0).is_ok());
        let bad_in = [
            Arg::Dense {
                buf: &x,
                rows: 4,
                cols: 2,
            },
            Arg::Dense {
                buf: &short_c,
                rows: 3,
                cols: 1,
            },
        ];
        assert!(kernel_args(&s, &bad_in, &good_out, None, 0).is_err());
        let bad_out = [Arg::Dense {
            buf: &wrong_type,
            rows: 4,
            cols: 2,
        }];
        assert!(kernel_args(&s, &good_in, &bad_out, None, 0).is_err());
        let small_x = [
            Arg::Dense {
                buf: &x,
                rows: 2,
                cols: 4,
            },
            Arg::Dense {
                buf: &c,
                rows: 4,
                cols: 1,
            },
        ];
        assert!(kernel_args(&s, &small_x, &good_out, None, 0).is_err());
        let none: [Arg<'_, FakeBuf>; 0] = [];
        assert!(kernel_args(&s, &none, &good_out, None, 0).is_err());
    }

    #[test]
    fn tile_pair_maps_take_bands_of_whole_tiles() {
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F32,
            inputs: vec![input("K", Access::LowerSymmetric)],
            form: Form::Map {
                outputs: vec![Expr::Input(0)],
            },
            provenance: vec![],
        };
        let s = step(spec, 300, 300);
        let k = buf(ElemType::F32, 90_000, 0x100);
        let out = buf(ElemType::F32, 90_000, 0x200);
        let inputs = [Arg::Dense {
            buf: &k,
            rows: 300,
            cols: 300,
        }];
        let outputs = [Arg::Dense {
            buf: &out,
            rows: 300,
            cols: 300,
        }];
        let args = |band| kernel_args(&s, &inputs, &outputs, band, 0);
        let whole = args(None).ok();
        assert_eq!(
            whole,
            Some(vec![
                KernelArg::I64(300),
                KernelArg::I64(300),
                KernelArg::I64(0),
                KernelArg::I64(300),
                KernelArg::Ptr(0x100),
                KernelArg::I64(300),
                KernelArg::Ptr(0x200),
            ])
        );
        let band = args(Some((128, 256))).ok().map(|a| a[2..4].to_vec());
        assert_eq!(band, Some(vec![KernelArg::I64(128), KernelArg::I64(256)]));
        assert!(args(Some((256, 300))).is_ok());
        // Not on a tile boundary, reversed, or past the end.
        for bad in [(100, 200), (256, 128), (256, 301)] {
            let err = args(Some(bad)).unwrap_err().to_string();
            assert!(err.contains("not a band"), "{err}");
        }
    }
}
