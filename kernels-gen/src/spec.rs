//! The typed description of a fused kernel: what the planner builds, what the CUDA emitter
//! turns into C, and what the CPU backend interprets. No strings of CUDA live here.
//!
//! A fused kernel runs over an iteration space of `rows x cols` elements. Each input is read at
//! element `(i, j)` according to its [`Access`]; an expression tree ([`Expr`]) combines them.
//! The kernel's [`Form`] says what it produces:
//! - [`Form::Map`]: one or more `rows x cols` dense outputs, each an expression;
//! - [`Form::Rows`]: per row `i`, reductions over `j` (sum, min, argmin, pick), optionally also
//!   storing element-wise results;
//! - [`Form::Cols`]: per column `j`, reductions over `i`.

use serde::{Deserialize, Serialize};

/// Floating-point type a kernel computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScalarType {
    /// 32-bit IEEE float (`float`).
    F32,
    /// 64-bit IEEE float (`double`).
    F64,
}

impl ScalarType {
    /// The CUDA C name of the type.
    pub fn c_name(self) -> &'static str {
        match self {
            ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            ScalarType::F32 => 4,
            ScalarType::F64 => 8,
        }
    }
}

/// How an input is read at element `(i, j)` of the iteration space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    /// A dense row-major matrix with a leading dimension (row stride) passed at launch.
    /// Not transposed: element `(i, j)` is `ptr[i * ld + j]`; transposed: `ptr[j * ld + i]`.
    Matrix {
        /// Whether the matrix is read transposed.
        transposed: bool,
    },
    /// A square row-major matrix of which only the lower triangle (`j <= i`) holds values,
    /// read as the symmetric matrix it stands for: element `(i, j)` is
    /// `ptr[max(i, j) * ld + min(i, j)]`. SYRK steps produce it when they leave the mirror
    /// image to their consumer; a map kernel reading one runs over pairs of mirrored tiles
    /// (see [`crate::LaunchShape::TilePairs`]) so both halves of its output are written with
    /// coalesced stores.
    LowerSymmetric,
    /// A vector indexed by the row: element `(i, j)` is `ptr[i]` (broadcast along columns).
    Col,
    /// A vector indexed by the column: element `(i, j)` is `ptr[j]` (broadcast along rows).
    Row,
    /// A scalar passed by value.
    Scalar,
    /// A single value in device memory (a 1 x 1 result such as `sum(X)`) read at every
    /// element: `ptr[0]`. Passed as a pointer (`const T*`), like `Col` and `Row`.
    Broadcast,
    /// An index vector (`unsigned int`) with one entry per row: read by [`ReduceKind::Pick`],
    /// or as a value in expressions (the index converted to `T`, broadcast along columns),
    /// as in `changed = sum(new_labels != labels)`.
    IndexCol,
}

/// One input of a fused kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Input {
    /// A C identifier, unique within the kernel (the planner's buffer or value name, sanitised).
    pub name: String,
    /// How the input is read.
    pub access: Access,
}

/// Unary element-wise operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// absolute value
    Abs,
    /// hyperbolic tangent
    Tanh,
}

/// Binary element-wise operations. Comparisons yield 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b` (element-wise)
    Mul,
    /// `a / b`
    Div,
    /// `a` raised to `b`
    Pow,
    /// larger of the two (NaN-propagating is not guaranteed; follows C `fmax`)
    Max,
    /// smaller of the two (follows C `fmin`)
    Min,
    /// `a < b` as 1 or 0
    Lt,
    /// `a <= b` as 1 or 0
    Le,
    /// `a > b` as 1 or 0
    Gt,
    /// `a >= b` as 1 or 0
    Ge,
    /// `a == b` as 1 or 0
    Eq,
    /// `a != b` as 1 or 0
    Ne,
}

/// An element-wise expression at element `(i, j)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// The value of input number `.0` (an index into [`KernelSpec::inputs`]) at `(i, j)`.
    Input(usize),
    /// A constant. Infinities are allowed; NaN is not produced by the planner.
    Const(f64),
    /// A unary operation.
    Unary(UnaryOp, Box<Expr>),
    /// A binary operation.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `if cond != 0 { then } else { otherwise }`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Builds a unary node.
    pub fn unary(op: UnaryOp, a: Expr) -> Expr {
        Expr::Unary(op, Box::new(a))
    }

    /// Builds a binary node.
    pub fn binary(op: BinaryOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }

    /// Builds a select node.
    pub fn select(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
        Expr::Select(Box::new(cond), Box::new(then), Box::new(otherwise))
    }

    /// Visits the indices of every input the expression reads (with repetitions).
    pub fn for_each_input(&self, f: &mut impl FnMut(usize)) {
        match self {
            Expr::Input(i) => f(*i),
            Expr::Const(_) => {}
            Expr::Unary(_, a) => a.for_each_input(f),
            Expr::Binary(_, a, b) => {
                a.for_each_input(f);
                b.for_each_input(f);
            }
            Expr::Select(c, a, b) => {
                c.for_each_input(f);
                a.for_each_input(f);
                b.for_each_input(f);
            }
        }
    }

    /// Number of nodes, a rough measure of arithmetic per element.
    pub fn node_count(&self) -> usize {
        match self {
            Expr::Input(_) | Expr::Const(_) => 1,
            Expr::Unary(_, a) => 1 + a.node_count(),
            Expr::Binary(_, a, b) => 1 + a.node_count() + b.node_count(),
            Expr::Select(c, a, b) => 1 + c.node_count() + a.node_count() + b.node_count(),
        }
    }
}

/// The kind of a reduction.
///
/// Each kind is defined by a sequential scan of the values `v_0, v_1, ...` of the reduced range
/// (the columns of a row, or the rows of a column), which the CUDA kernels reproduce exactly
/// except for the summation order of `Sum`:
/// - `Sum`: `acc = 0; acc += v` for each value.
/// - `Min`: `best = +inf; if v < best { best = v }`: NaN values are skipped, an empty or
///   all-NaN range gives `+inf`.
/// - `Max`: `best = -inf; if v > best { best = v }`: likewise `-inf`.
/// - `ArgMin`: `(best, at) = (+inf, 0); for j ascending: if v_j < best { (best, at) = (v_j, j) }`:
///   ties go to the lowest index, NaN values are skipped, and a range with no value below
///   `+inf` (all `+inf`, all NaN, or empty) gives index 0.
/// - `Pick`: `value(i, idx[i])`, computed once. An out-of-range `idx[i] >= cols` is an error on
///   the CPU backend; the GPU cannot report it and writes NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceKind {
    /// Sum of the values.
    Sum,
    /// Smallest value (NaN values skipped; `+inf` for an empty range).
    Min,
    /// Largest value (NaN values skipped; `-inf` for an empty range).
    Max,
    /// Index of the smallest value, ties to the lowest index; output is `unsigned int`.
    /// NaN values are skipped; a row with no value below `+inf` (e.g. all NaN) yields index 0.
    ArgMin,
    /// The value at the index given by input number `index_input` (an [`Access::IndexCol`]
    /// input): for a row reduction, `value(i, idx[i])`. Only valid in [`Form::Rows`].
    /// On the GPU an index `>= cols` yields NaN.
    Pick {
        /// Index into [`KernelSpec::inputs`] of the index vector.
        index_input: usize,
    },
}

/// One reduction: a kind applied to an expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reduction {
    /// What is computed.
    pub kind: ReduceKind,
    /// The element-wise value reduced.
    pub expr: Expr,
}

impl Reduction {
    /// Whether the output of this reduction is an index (`unsigned int`) rather than a value.
    pub fn yields_index(&self) -> bool {
        matches!(self.kind, ReduceKind::ArgMin)
    }
}

/// What a fused kernel produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Form {
    /// Element-wise: each expression is written to its own `rows x cols` dense row-major output
    /// (leading dimension `cols`).
    Map {
        /// One expression per output.
        outputs: Vec<Expr>,
    },
    /// Per row: reductions over the columns of each row (outputs of length `rows`), plus
    /// optional element-wise stores (each a `rows x cols` dense output).
    Rows {
        /// Element-wise values also written out in full.
        stores: Vec<Expr>,
        /// Row reductions, each producing a vector of length `rows`.
        reductions: Vec<Reduction>,
    },
    /// Per column: reductions over the rows of each column (outputs of length `cols`).
    /// Only `Sum`, `Min` and `Max` are valid here.
    Cols {
        /// Column reductions, each producing a vector of length `cols`.
        reductions: Vec<Reduction>,
    },
}

/// A complete fused kernel description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Arithmetic type of values and outputs.
    pub dtype: ScalarType,
    /// Inputs, in kernel-parameter order.
    pub inputs: Vec<Input>,
    /// What the kernel computes.
    pub form: Form,
    /// Human-readable provenance (IR node names) for the header comment. Not part of the
    /// kernel's identity for caching purposes beyond the generated text itself.
    pub provenance: Vec<String>,
}

/// One kernel parameter, in order, as the launcher must pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// `long long rows` of the iteration space.
    Rows,
    /// `long long cols` of the iteration space.
    Cols,
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
    /// [tile-pair](KernelSpec::walks_tile_pairs) launch writes (a multiple of the tile side;
    /// 0 for the whole matrix).
    BandStart,
    /// `long long band_end`: one past the last row of that band (`rows` for the whole matrix).
    BandEnd,
}

/// What one output of a kernel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputShape {
    /// A `rows x cols` dense matrix, row-major, leading dimension `cols`.
    Full,
    /// A vector of length `rows` (values of type `T`).
    PerRow,
    /// A vector of length `rows` of `unsigned int` indices.
    PerRowIndex,
    /// A vector of length `cols`.
    PerCol,
}

impl KernelSpec {
    /// The kernel's outputs in parameter order: stores or map outputs first, then reductions.
    pub fn outputs(&self) -> Vec<OutputShape> {
        match &self.form {
            Form::Map { outputs } => vec![OutputShape::Full; outputs.len()],
            Form::Rows { stores, reductions } => {
                let mut v = vec![OutputShape::Full; stores.len()];
                v.extend(reductions.iter().map(|r| {
                    if r.yields_index() {
                        OutputShape::PerRowIndex
                    } else {
                        OutputShape::PerRow
                    }
                }));
                v
            }
            Form::Cols { reductions } => vec![OutputShape::PerCol; reductions.len()],
        }
    }

    /// Whether the kernel is a map over a square space walking pairs of mirrored tiles (it
    /// reads an [`Access::LowerSymmetric`] input; see [`crate::LaunchShape::TilePairs`]). Such a
    /// kernel takes a band of rows ([`Param::BandStart`], [`Param::BandEnd`]) and writes the
    /// pairs `(I, J)` whose tile row `I` lies in it, so a matrix can be mapped band by band as
    /// its lower triangle is produced.
    pub fn walks_tile_pairs(&self) -> bool {
        matches!(self.form, Form::Map { .. })
            && self
                .inputs
                .iter()
                .any(|input| input.access == Access::LowerSymmetric)
    }

    /// The ordered parameter list of the generated kernel: `rows, cols`, then each input
    /// (matrices as pointer and leading dimension), then each output pointer.
    pub fn params(&self) -> Vec<Param> {
        let mut p = vec![Param::Rows, Param::Cols];
        if self.walks_tile_pairs() {
            p.push(Param::BandStart);
            p.push(Param::BandEnd);
        }
        for (k, input) in self.inputs.iter().enumerate() {
            match input.access {
                Access::Matrix { .. } | Access::LowerSymmetric => {
                    p.push(Param::InputPtr(k));
                    p.push(Param::InputLd(k));
                }
                Access::Col | Access::Row | Access::Broadcast => p.push(Param::InputPtr(k)),
                Access::Scalar => p.push(Param::InputScalar(k)),
                Access::IndexCol => p.push(Param::InputIndex(k)),
            }
        }
        p.extend((0..self.outputs().len()).map(Param::Output));
        p
    }
}
