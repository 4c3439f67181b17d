//! A generated kernel's parameter list: what the launcher passes, in order.

use kernel_ir::{Access, Form, KernelSpec, ReduceKind};

/// One kernel parameter, in order, as the launcher must pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// `long long rows` of the iteration space.
    Rows,
    /// `long long cols` of the iteration space.
    Cols,
    /// `long long depth`: the inner dimension of a contraction's product.
    Depth,
    /// `long long width`: the columns of a contraction's by-label outputs.
    Width,
    /// Pointer to the values of input `.0` (`const T*`).
    InputPtr(usize),
    /// `long long` leading dimension of matrix input `.0`.
    InputLd(usize),
    /// Scalar input `.0` passed by value as `T`.
    InputScalar(usize),
    /// Pointer to index input `.0` (`const unsigned int*`).
    InputIndex(usize),
    /// Pointer to output `.0` (`T*`, or `unsigned int*` where the output is an index). Outputs
    /// are numbered: stores (or map outputs) first, then reductions.
    Output(usize),
    /// `long long band_start`: the first row of the band of rows whose tile pairs a
    /// [banded](KernelSpec::runs_in_bands) launch writes (a multiple of the tile side;
    /// 0 for the whole matrix).
    BandStart,
    /// `long long band_end`: one past the last row of that band (`rows` for the whole matrix).
    BandEnd,
    /// Device scratch of a column kernel that splits its rows over blocks (see
    /// [`LaunchShape::column_scratch`](crate::LaunchShape::column_scratch)): the blocks'
    /// partials and one ticket per column group, the tickets zero at launch. Null when the
    /// launch has one block of rows.
    Scratch,
}

/// The ordered parameter list of the kernel generated for `spec`: `rows, cols` (and the band for
/// a [banded](KernelSpec::runs_in_bands) map; `depth`, and `width` where a by-label reduction
/// needs it, for a contraction), then each input (matrices as pointer and leading
/// dimension), then each output pointer.
pub fn params(spec: &KernelSpec) -> Vec<Param> {
    let mut p = vec![Param::Rows, Param::Cols];
    if spec.runs_in_bands() {
        p.push(Param::BandStart);
        p.push(Param::BandEnd);
    }
    if let Form::Contraction { reductions, .. } = &spec.form {
        p.push(Param::Depth);
        if reductions
            .iter()
            .any(|r| matches!(r.kind, ReduceKind::ByLabel { .. }))
        {
            p.push(Param::Width);
        }
    }
    for (k, input) in spec.inputs.iter().enumerate() {
        match input.access {
            Access::Matrix { .. }
            | Access::LowerSymmetric
            | Access::Left { .. }
            | Access::Right { .. } => {
                p.push(Param::InputPtr(k));
                p.push(Param::InputLd(k));
            }
            Access::Col | Access::Row | Access::Broadcast => p.push(Param::InputPtr(k)),
            Access::Scalar => p.push(Param::InputScalar(k)),
            Access::IndexCol | Access::IndexRow => p.push(Param::InputIndex(k)),
        }
    }
    p.extend((0..spec.outputs().len()).map(Param::Output));
    if let Form::Cols { reductions } = &spec.form {
        if !reductions.is_empty() {
            p.push(Param::Scratch);
        }
    }
    p
}

/// The C name of a kernel's element type.
pub trait CType {
    /// `float` or `double`.
    fn c_name(self) -> &'static str;
}

impl CType for kernel_ir::ScalarType {
    fn c_name(self) -> &'static str {
        match self {
            kernel_ir::ScalarType::F32 => "float",
            kernel_ir::ScalarType::F64 => "double",
        }
    }
}
