//! The CPU interpreter of fused kernels ([`KernelSpec`]): the same semantics as the generated
//! CUDA, evaluated tile by tile (see `eval`) in parallel over rows.

mod cols;
mod contraction;
mod eval;
mod reduce;
mod rows;

use kernel_ir::{Access, Expr, Form, KernelSpec, OutputShape, ReduceKind};

use self::eval::{slots_needed, Source};
use super::error::{check_matrix, check_vector, CpuError};
use super::real::Real;

/// One argument of a fused kernel, matching one entry of [`KernelSpec::inputs`] in order.
#[derive(Clone, Copy, Debug)]
pub enum FusedArg<'a, T> {
    /// For [`Access::Matrix`]: row-major data with leading dimension `ld`. Not transposed, it is
    /// stored `rows x cols` and element `(i, j)` is `data[i * ld + j]`; transposed, it is stored
    /// `cols x rows` and element `(i, j)` is `data[j * ld + i]`. For
    /// [`Access::LowerSymmetric`]: a square matrix of which only the lower triangle is read,
    /// element `(i, j)` being `data[max(i, j) * ld + min(i, j)]`.
    Matrix {
        /// The elements.
        data: &'a [T],
        /// The leading dimension (row stride) of the stored matrix.
        ld: usize,
    },
    /// For [`Access::Col`] (`rows` elements, read as `v[i]`), [`Access::Row`] (`cols` elements,
    /// read as `v[j]`) or [`Access::Broadcast`] (at least one element, read as `v[0]`).
    Vector(&'a [T]),
    /// For [`Access::Scalar`] (or, equivalently, [`Access::Broadcast`] with the value read out).
    Scalar(T),
    /// For [`Access::IndexCol`]: one index per row, read by `Pick` reductions or as a value;
    /// for [`Access::IndexRow`]: one index per column (the labels of a `ByLabel` reduction).
    Index(&'a [u32]),
    /// For [`Access::Matrix`] (not transposed) in a [`Form::Map`] with one output: the output's
    /// own buffer, `rows x cols` with leading dimension `cols`, read element by element
    /// before the element is written (the map computes in place; see [`reads_in_place`]).
    InPlace,
}

/// Whether input `input` of `spec` may be its output's own buffer ([`FusedArg::InPlace`]):
/// the spec is a [`Form::Map`] with one output written in full, and the input is read as a
/// matrix at the element being written (not transposed). Each element is then read before it
/// is written and by no other element, so no copy of the input is needed.
pub fn reads_in_place(spec: &KernelSpec, input: usize) -> bool {
    let one_full_output = match &spec.form {
        Form::Map { outputs } => {
            outputs.len() == 1 && matches!(spec.outputs().first(), Some(OutputShape::Full))
        }
        _ => false,
    };
    one_full_output
        && matches!(
            spec.inputs.get(input).map(|i| i.access),
            Some(Access::Matrix { transposed: false })
        )
}

/// One output of a fused kernel, matching one entry of [`KernelSpec::outputs`] in order.
#[derive(Debug)]
pub enum FusedOut<'a, T> {
    /// For [`OutputShape::Full`] (`rows * cols` elements, row-major, leading dimension `cols`),
    /// [`OutputShape::PerRow`] (`rows` elements), [`OutputShape::PerCol`] (`cols` elements) and
    /// [`OutputShape::PerRowWide`] (`rows * width` elements, row-major).
    Values(&'a mut [T]),
    /// For [`OutputShape::PerRowIndex`] (`rows` elements).
    Indices(&'a mut [u32]),
}

/// Runs the fused kernel `spec` over the `rows x cols` iteration space on the CPU.
///
/// `args` holds one argument per `spec.inputs` entry and `outs` one output per
/// `spec.outputs()` entry, in order; slices may be longer than needed (the rest is ignored).
///
/// Semantics (shared with the CUDA emitter): inputs are read at `(i, j)` according to their
/// [`Access`]. `Map` writes `out_k[i * cols + j] = expr_k`. `Rows` writes its stores the same way
/// and reduces each row: `Sum`; `Min` (from `+inf`); `Max` (from `-inf`); `ArgMin` (lowest index
/// among equal minima, NaN values skipped, 0 for a row without a non-NaN value); `Pick` gives
/// `expr(i, idx[i])`. `Cols` reduces each column over rows with `Sum`, `Min` or `Max`.
/// Comparisons yield 1 or 0, `Select(c, a, b)` is `c != 0 ? a : b`, and `Max`/`Min` follow C
/// `fmax`/`fmin` (a NaN operand yields the other one).
///
/// Results do not depend on the number of threads: row results depend only on their row, and
/// column partials are combined in a fixed order.
///
/// # Errors
/// [`CpuError::Fused`] when the spec is malformed or does not match `T`, `args` or `outs`;
/// [`CpuError::Shape`] naming the input or output whose slice is too short;
/// [`CpuError::PickOutOfRange`] naming the first row whose pick index is `>= cols`.
/// Nothing is written on error.
pub fn run_fused<T: Real>(
    spec: &KernelSpec,
    rows: usize,
    cols: usize,
    args: &[FusedArg<'_, T>],
    outs: &mut [FusedOut<'_, T>],
) -> Result<(), CpuError> {
    if spec.dtype != T::SCALAR_TYPE {
        return Err(CpuError::Fused(format!(
            "the spec computes in {:?} but the buffers hold {:?}; pass buffers of the spec's type",
            spec.dtype,
            T::SCALAR_TYPE
        )));
    }
    if matches!(spec.form, Form::Contraction { .. }) {
        return Err(CpuError::Fused(
            "a contraction needs its depth and width: run it with run_contraction".to_string(),
        ));
    }
    let srcs = resolve_inputs(spec, rows, cols, 0, args)?;
    let exprs = check_form(spec, cols)?;
    let mut slots = 1;
    for e in &exprs {
        check_expr(spec, e)?;
        slots = slots.max(slots_needed(e, 0));
    }
    check_outputs(spec, (rows, cols, 0), outs)?;
    check_picks(spec, &srcs, rows, cols)?;

    let in_place = args.iter().any(|a| matches!(a, FusedArg::InPlace));
    for k in (0..args.len()).filter(|&k| matches!(args[k], FusedArg::InPlace)) {
        if !reads_in_place(spec, k) {
            return Err(CpuError::Fused(format!(
                "input {k} (`{}`) is passed as the output's own buffer, which only a map with \
                 one output reading it untransposed allows; pass a copy",
                spec.inputs[k].name
            )));
        }
    }
    match &spec.form {
        Form::Map { outputs } => {
            if cols > 0 {
                rows::run_rows(&srcs, outputs, &[], rows, cols, outs, slots, in_place);
            }
        }
        Form::Rows { stores, reductions } => {
            if cols > 0 {
                rows::run_rows(&srcs, stores, reductions, rows, cols, outs, slots, false);
            } else {
                empty_rows(reductions, rows, &mut outs[stores.len()..]);
            }
        }
        Form::Cols { reductions } => cols::run_cols(&srcs, reductions, rows, cols, outs, slots),
        Form::Contraction { .. } => {}
    }
    Ok(())
}

/// Runs the contraction `spec` (a [`Form::Contraction`]) over the `rows x cols` space on the
/// CPU: `P = op(A) op(B)` with inner dimension `depth` is computed in cache blocks and never
/// whole (see the `contraction` module), its stores and row reductions as in [`run_fused`],
/// plus `Dot` (`sum_j value * w[j]`) and `ByLabel` (`width` sums per row, by the label of
/// the column; labels `>= width` skipped). The product is computed strictly in `T` whatever
/// the spec's precision (the CPU has no TF32).
///
/// # Errors
/// As [`run_fused`]; also [`CpuError::Fused`] for a spec that is not a valid contraction.
/// Nothing is written on error.
pub fn run_contraction<T: Real>(
    spec: &KernelSpec,
    (rows, cols): (usize, usize),
    depth: usize,
    width: usize,
    args: &[FusedArg<'_, T>],
    outs: &mut [FusedOut<'_, T>],
) -> Result<(), CpuError> {
    let Form::Contraction {
        a,
        b,
        stores,
        reductions,
        ..
    } = &spec.form
    else {
        return Err(CpuError::Fused(
            "run_contraction runs contractions; run other forms with run_fused".to_string(),
        ));
    };
    if spec.dtype != T::SCALAR_TYPE {
        return Err(CpuError::Fused(format!(
            "the spec computes in {:?} but the buffers hold {:?}; pass buffers of the spec's type",
            spec.dtype,
            T::SCALAR_TYPE
        )));
    }
    spec.validate()
        .map_err(|e| CpuError::Fused(format!("invalid contraction: {e}")))?;
    let srcs = resolve_inputs(spec, rows, cols, depth, args)?;
    if reductions.iter().any(|r| r.kind == ReduceKind::ArgMin) && cols > u32::MAX as usize {
        return Err(CpuError::TooLarge {
            what: "the number of columns of an ArgMin".to_string(),
            value: cols,
            limit: u32::MAX as usize,
        });
    }
    check_outputs(spec, (rows, cols, width), outs)?;
    check_picks(spec, &srcs, rows, cols)?;
    let operand = |k: usize| match (spec.inputs[k].access, args[k]) {
        (
            Access::Left { transposed } | Access::Right { transposed },
            FusedArg::Matrix { data, ld },
        ) => Ok((data, ld, transposed)),
        _ => Err(CpuError::Fused(format!(
            "product operand {k} must be a matrix argument"
        ))),
    };
    let product = contraction::Product {
        a: operand(*a)?,
        b: operand(*b)?,
        depth,
    };
    let slots = stores
        .iter()
        .chain(reductions.iter().map(|r| &r.expr))
        .map(|e| slots_needed(e, 0))
        .max()
        .unwrap_or(1);
    contraction::run(
        &srcs,
        product,
        stores,
        reductions,
        (rows, cols, width),
        outs,
        slots,
    )
}

/// Runs rows `part` of the contraction `spec` over the `rows x cols` space, its product
/// `depth` deep and its sums by label `width` wide (a rank's share of a shared step, see
/// `popcorn_dsl::plan::collective::Share`): every output is zeroed whole, then rows `part`
/// are computed exactly as [`run_contraction`] computes them, so the shares'
/// outputs add up to the whole contraction's bit for bit. Operands read at the row (`A`, row
/// broadcasts, row indices) are read from row `part.start`, those read at the column whole.
///
/// # Errors
/// As [`run_contraction`]; also [`CpuError::Fused`] for rows beyond the space or a contraction
/// that stores its elements (a share writes sums only).
pub fn run_contraction_rows<T: Real>(
    spec: &KernelSpec,
    (rows, cols): (usize, usize),
    (depth, width): (usize, usize),
    args: &[FusedArg<'_, T>],
    outs: &mut [FusedOut<'_, T>],
    part: std::ops::Range<usize>,
) -> Result<(), CpuError> {
    if part.start > part.end || part.end > rows {
        return Err(CpuError::Fused(format!(
            "rows {}..{} of a contraction over {rows} rows",
            part.start, part.end
        )));
    }
    let shapes = spec.outputs();
    if shapes.contains(&OutputShape::Full) || shapes.len() != outs.len() {
        return Err(CpuError::Fused(
            "a share of a contraction writes per-row sums only".to_string(),
        ));
    }
    let r0 = part.start;
    let mut shared = Vec::with_capacity(args.len());
    for (input, arg) in spec.inputs.iter().zip(args) {
        let at_row = match (input.access, *arg) {
            (Access::Left { transposed: false }, FusedArg::Matrix { data, ld }) => {
                FusedArg::Matrix {
                    data: data.get(r0 * ld..).unwrap_or_default(),
                    ld,
                }
            }
            (Access::Col, FusedArg::Vector(v)) => FusedArg::Vector(v.get(r0..).unwrap_or_default()),
            (Access::IndexCol, FusedArg::Index(v)) => {
                FusedArg::Index(v.get(r0..).unwrap_or_default())
            }
            (Access::Left { transposed: true }, _) => {
                return Err(CpuError::Fused(
                    "a share of a contraction reads A by rows (not transposed)".to_string(),
                ))
            }
            (_, other) => other,
        };
        shared.push(at_row);
    }
    let mut views = Vec::with_capacity(outs.len());
    for (out, shape) in outs.iter_mut().zip(&shapes) {
        let per_row = match shape {
            OutputShape::PerRowWide => width,
            _ => 1,
        };
        let (lo, hi) = (r0 * per_row, part.end * per_row);
        let short = || CpuError::Fused("an output is shorter than its rows".to_string());
        views.push(match out {
            FusedOut::Values(v) => {
                v.fill(T::zero());
                FusedOut::Values(v.get_mut(lo..hi).ok_or_else(short)?)
            }
            FusedOut::Indices(v) => {
                v.fill(0);
                FusedOut::Indices(v.get_mut(lo..hi).ok_or_else(short)?)
            }
        });
    }
    run_contraction(spec, (part.len(), cols), depth, width, &shared, &mut views)
}

/// Row reductions over zero columns: identities (Sum 0, Min +inf, Max -inf, ArgMin 0).
fn empty_rows<T: Real>(
    reductions: &[kernel_ir::Reduction],
    rows: usize,
    outs: &mut [FusedOut<'_, T>],
) {
    for (red, out) in reductions.iter().zip(outs.iter_mut()) {
        let acc = reduce::RowAcc::<T>::new(red.kind);
        match out {
            FusedOut::Values(v) => v[..rows].fill(acc.value()),
            FusedOut::Indices(v) => v[..rows].fill(0),
        }
    }
}

/// Matches each argument to its input's access mode and checks its extent.
fn resolve_inputs<'a, T: Real>(
    spec: &KernelSpec,
    rows: usize,
    cols: usize,
    depth: usize,
    args: &[FusedArg<'a, T>],
) -> Result<Vec<Source<'a, T>>, CpuError> {
    if args.len() != spec.inputs.len() {
        return Err(CpuError::Fused(format!(
            "the spec has {} inputs but {} arguments were passed; pass one argument per input, \
             in order",
            spec.inputs.len(),
            args.len()
        )));
    }
    let mut srcs = Vec::with_capacity(args.len());
    for (k, (input, arg)) in spec.inputs.iter().zip(args).enumerate() {
        let name = format!("input {k} (`{}`)", input.name);
        let src = match (input.access, *arg) {
            (Access::Matrix { transposed: false }, FusedArg::Matrix { data, ld }) => {
                check_matrix(&name, data.len(), rows, cols, ld)?;
                Source::Matrix { data, ld }
            }
            (Access::Matrix { transposed: true }, FusedArg::Matrix { data, ld }) => {
                check_matrix(&name, data.len(), cols, rows, ld)?;
                Source::MatrixT { data, ld }
            }
            (Access::LowerSymmetric, FusedArg::Matrix { data, ld }) => {
                if rows != cols {
                    return Err(CpuError::Fused(format!(
                        "{name} is a symmetric matrix stored as its lower triangle, but the \
                         iteration space is {rows} x {cols}; such an input needs a square space"
                    )));
                }
                check_matrix(&name, data.len(), rows, cols, ld)?;
                Source::LowerSymmetric { data, ld }
            }
            (Access::Col, FusedArg::Vector(v)) => {
                check_vector(&name, v.len(), rows)?;
                Source::Col(v)
            }
            (Access::Row, FusedArg::Vector(v)) => {
                check_vector(&name, v.len(), cols)?;
                Source::Row(v)
            }
            (Access::Scalar | Access::Broadcast, FusedArg::Scalar(x)) => Source::Scalar(x),
            (Access::Broadcast, FusedArg::Vector(v)) => {
                check_vector(&name, v.len(), 1)?;
                Source::Scalar(v[0])
            }
            (Access::IndexCol, FusedArg::Index(v)) => {
                check_vector(&name, v.len(), rows)?;
                Source::Index(v)
            }
            (Access::IndexRow, FusedArg::Index(v)) => {
                check_vector(&name, v.len(), cols)?;
                Source::IndexRow(v)
            }
            (Access::Matrix { transposed: false }, FusedArg::InPlace) => {
                // The output's own buffer: check_outputs checks its extent.
                Source::InPlace
            }
            (Access::Left { transposed }, FusedArg::Matrix { data, ld }) => {
                let (r, c) = if transposed {
                    (depth, rows)
                } else {
                    (rows, depth)
                };
                check_matrix(&name, data.len(), r, c, ld)?;
                Source::Operand
            }
            (Access::Right { transposed }, FusedArg::Matrix { data, ld }) => {
                let (r, c) = if transposed {
                    (cols, depth)
                } else {
                    (depth, cols)
                };
                check_matrix(&name, data.len(), r, c, ld)?;
                Source::Operand
            }
            (access, _) => {
                return Err(CpuError::Fused(format!(
                    "{name} is accessed as {access:?} but the argument is {}; pass Matrix for \
                     Matrix/Left/Right, Vector for Col/Row/Broadcast, Scalar for Scalar, Index \
                     for IndexCol/IndexRow",
                    arg_kind(arg)
                )))
            }
        };
        srcs.push(src);
    }
    Ok(srcs)
}

fn arg_kind<T>(arg: &FusedArg<'_, T>) -> &'static str {
    match arg {
        FusedArg::Matrix { .. } => "a Matrix",
        FusedArg::Vector(_) => "a Vector",
        FusedArg::Scalar(_) => "a Scalar",
        FusedArg::Index(_) => "an Index",
        FusedArg::InPlace => "the output's own buffer (InPlace)",
    }
}

/// Checks the reductions allowed by the form and returns every expression of the spec.
fn check_form(spec: &KernelSpec, cols: usize) -> Result<Vec<&Expr>, CpuError> {
    Ok(match &spec.form {
        Form::Map { outputs } => outputs.iter().collect(),
        Form::Rows { stores, reductions } => {
            for (r, red) in reductions.iter().enumerate() {
                match red.kind {
                    ReduceKind::Pick { index_input } => {
                        let ok = spec
                            .inputs
                            .get(index_input)
                            .is_some_and(|i| i.access == Access::IndexCol);
                        if !ok {
                            return Err(CpuError::Fused(format!(
                                "reduction {r} picks with input {index_input}, which is not an \
                                 IndexCol input"
                            )));
                        }
                    }
                    ReduceKind::ArgMin if cols > u32::MAX as usize => {
                        return Err(CpuError::TooLarge {
                            what: "the number of columns of an ArgMin".to_string(),
                            value: cols,
                            limit: u32::MAX as usize,
                        })
                    }
                    _ => {}
                }
            }
            stores
                .iter()
                .chain(reductions.iter().map(|r| &r.expr))
                .collect()
        }
        Form::Contraction { .. } => Vec::new(),
        Form::Cols { reductions } => {
            for (r, red) in reductions.iter().enumerate() {
                if !matches!(
                    red.kind,
                    ReduceKind::Sum | ReduceKind::Min | ReduceKind::Max
                ) {
                    return Err(CpuError::Fused(format!(
                        "column reduction {r} is {:?}; only Sum, Min and Max reduce columns",
                        red.kind
                    )));
                }
            }
            reductions.iter().map(|r| &r.expr).collect()
        }
    })
}

/// Checks that an expression reads only existing inputs (index vectors read as values are
/// converted to the value type).
fn check_expr(spec: &KernelSpec, e: &Expr) -> Result<(), CpuError> {
    let mut bad = None;
    e.for_each_input(&mut |k| {
        if k >= spec.inputs.len() && bad.is_none() {
            bad = Some(k);
        }
    });
    match bad {
        None => Ok(()),
        Some(k) => Err(CpuError::Fused(format!(
            "an expression reads input {k}, which does not exist"
        ))),
    }
}

/// Checks the outputs against `spec.outputs()`.
fn check_outputs<T: Real>(
    spec: &KernelSpec,
    (rows, cols, width): (usize, usize, usize),
    outs: &[FusedOut<'_, T>],
) -> Result<(), CpuError> {
    let shapes = spec.outputs();
    if shapes.len() != outs.len() {
        return Err(CpuError::Fused(format!(
            "the spec has {} outputs but {} were passed; pass one per output, in order",
            shapes.len(),
            outs.len()
        )));
    }
    let full = rows.checked_mul(cols).ok_or_else(|| CpuError::TooLarge {
        what: "rows * cols".to_string(),
        value: usize::MAX,
        limit: usize::MAX,
    })?;
    for (o, (shape, out)) in shapes.iter().zip(outs).enumerate() {
        let name = format!("output {o}");
        let (needed, len) = match (shape, out) {
            (OutputShape::Full, FusedOut::Values(v)) => (full, v.len()),
            (OutputShape::PerRow, FusedOut::Values(v)) => (rows, v.len()),
            (OutputShape::PerCol, FusedOut::Values(v)) => (cols, v.len()),
            (OutputShape::PerRowWide, FusedOut::Values(v)) => {
                let wide = rows.checked_mul(width).ok_or_else(|| CpuError::TooLarge {
                    what: "rows * width".to_string(),
                    value: usize::MAX,
                    limit: usize::MAX,
                })?;
                (wide, v.len())
            }
            (OutputShape::PerRowIndex, FusedOut::Indices(v)) => (rows, v.len()),
            (shape, _) => {
                return Err(CpuError::Fused(format!(
                    "{name} is {shape:?}, which needs {}",
                    if *shape == OutputShape::PerRowIndex {
                        "FusedOut::Indices"
                    } else {
                        "FusedOut::Values"
                    }
                )))
            }
        };
        check_vector(&name, len, needed)?;
    }
    Ok(())
}

/// Checks every `Pick` index before anything is written.
fn check_picks<T: Real>(
    spec: &KernelSpec,
    srcs: &[Source<'_, T>],
    rows: usize,
    cols: usize,
) -> Result<(), CpuError> {
    let reductions = match &spec.form {
        Form::Rows { reductions, .. } | Form::Contraction { reductions, .. } => reductions,
        _ => return Ok(()),
    };
    for red in reductions {
        let ReduceKind::Pick { index_input } = red.kind else {
            continue;
        };
        if let Some(Source::Index(idx)) = srcs.get(index_input) {
            if let Some(row) = idx[..rows].iter().position(|&x| x as usize >= cols) {
                return Err(CpuError::PickOutOfRange {
                    row,
                    index: idx[row],
                    cols,
                });
            }
        }
    }
    Ok(())
}
