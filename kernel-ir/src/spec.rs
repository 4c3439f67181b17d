//! The typed description of a fused kernel: what the planner builds, what the CUDA emitter
//! (kernels-gen) turns into C, and what the CPU backend interprets. Nothing here is specific to
//! a target.
//!
//! A fused kernel runs over an iteration space of `rows x cols` elements. Each input is read at
//! element `(i, j)` according to its [`Access`]; an expression tree ([`Expr`]) combines them.
//! The kernel's [`Form`] says what it produces:
//! - [`Form::Map`]: one or more `rows x cols` dense outputs, each an expression;
//! - [`Form::Rows`]: per row `i`, reductions over `j` (sum, min, argmin, pick), optionally also
//!   storing element-wise results;
//! - [`Form::Cols`]: per column `j`, reductions over `i`;
//! - [`Form::Contraction`]: a matrix product `P = op(A) op(B)` computed tile by tile inside the
//!   kernel ([`Expr::Product`] is `P[i, j]`), with stores and row reductions of expressions of
//!   it, so that `P` is never written.

use crate::ops::{BinaryOp, UnaryOp};
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
    /// (see [`KernelSpec::runs_in_bands`]); a GPU template can then write both halves of its
    /// output with coalesced stores.
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
    /// An index vector (`unsigned int`) with one entry per column: the labels of a
    /// [`ReduceKind::ByLabel`] reduction.
    IndexRow,
    /// The left operand of a contraction's product, `op(A)` being `rows x depth`: element
    /// `(i, p)` is `ptr[i * ld + p]`, or transposed `ptr[p * ld + i]`. Read only by the product.
    Left {
        /// Whether A is read transposed.
        transposed: bool,
    },
    /// The right operand of a contraction's product, `op(B)` being `depth x cols`: element
    /// `(p, j)` is `ptr[p * ld + j]`, or transposed `ptr[j * ld + p]`. Read only by the product.
    Right {
        /// Whether B is read transposed.
        transposed: bool,
    },
}

/// How a contraction's product is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Precision {
    /// In the kernel's type, with ordinary fused multiply-adds (strict fp32, or fp64).
    Strict,
    /// f32 operands rounded to TF32 (10 bits of mantissa) on tensor cores, accumulated in
    /// fp32. Only for f32 kernels; a backend without tensor cores computes it strictly.
    Tf32,
    /// f32 operands rounded to a 16-bit format (round to nearest even) on 16-bit tensor
    /// cores, accumulated in fp32: twice TF32's rate and half its operand bytes, at 8 (bf16) or
    /// 11 (fp16) significant bits per operand. Only for f32 kernels; a backend without tensor
    /// cores computes it strictly.
    Half(Half),
    /// f32 operands split into a TF32 part and the TF32 rounding of the rest, multiplied as
    /// three TF32 products (part by part, part by rest, rest by part) accumulated in fp32: about
    /// fp32's accuracy on tensor cores, at a third of TF32's rate. Only for f32 kernels; a
    /// backend or template without it computes the product strictly.
    Tf32x3,
}

impl Precision {
    /// Whether the product asks for tensor cores (TF32, 16-bit operands or 3xTF32).
    pub fn on_tensor_cores(self) -> bool {
        self != Precision::Strict
    }

    /// What a template without packed or split operands (the general, tiled one) computes for
    /// `self`, as far as speed goes: 16-bit operands rounded where staged and multiplied on TF32
    /// tensor cores (TF32's rate), 3xTF32 strictly; the others as they are.
    pub fn on_general_template(self) -> Precision {
        match self {
            Precision::Half(_) => Precision::Tf32,
            Precision::Tf32x3 => Precision::Strict,
            other => other,
        }
    }

    /// The precision three settings ask for: 16-bit operands (`half`) before 3xTF32, before
    /// TF32, else strict.
    pub fn from_settings(half: Option<Half>, tf32x3: bool, tf32: bool) -> Precision {
        match (half, tf32x3, tf32) {
            (Some(half), _, _) => Precision::Half(half),
            (None, true, _) => Precision::Tf32x3,
            (None, false, true) => Precision::Tf32,
            (None, false, false) => Precision::Strict,
        }
    }

    /// The depth a pipelined kernel of this precision walks for a product `depth` deep: 16-bit
    /// operands in words of two values, 3xTF32 split pairs three times as deep, the others as
    /// they are.
    pub fn kernel_depth(self, depth: usize) -> usize {
        match self {
            Precision::Half(_) => depth.div_ceil(2),
            Precision::Tf32x3 => 3 * depth,
            Precision::Strict | Precision::Tf32 => depth,
        }
    }

    /// The name plans print: `strict`, `tf32`, `bf16`, `fp16` or `3xtf32`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Strict => "strict",
            Precision::Tf32 => "tf32",
            Precision::Half(half) => half.name(),
            Precision::Tf32x3 => "3xtf32",
        }
    }
}

/// A 16-bit format a dense matrix may be held in memory, while the kernel computes in its
/// [`ScalarType`]: loads widen each element, stores round to nearest even.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Half {
    /// bfloat16: 8 bits of exponent (the range of `f32`), 8 bits of significand.
    Bf16,
    /// IEEE binary16: 5 bits of exponent (largest finite value 65504), 11 bits of significand.
    F16,
}

impl Half {
    /// The name users write (`bf16`, `fp16`).
    pub fn name(self) -> &'static str {
        match self {
            Half::Bf16 => "bf16",
            Half::F16 => "fp16",
        }
    }

    /// The largest finite value the format holds.
    pub fn max_finite(self) -> f64 {
        match self {
            Half::Bf16 => f64::from(f32::from_bits(0x7f7f_0000)),
            Half::F16 => 65504.0,
        }
    }
}

impl std::fmt::Display for Half {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Half {
    type Err = String;
    fn from_str(s: &str) -> Result<Half, String> {
        match s {
            "bf16" | "bfloat16" => Ok(Half::Bf16),
            "fp16" | "f16" | "float16" | "half" => Ok(Half::F16),
            other => Err(format!("unknown 16-bit format `{other}`; use bf16 or fp16")),
        }
    }
}

/// The dense inputs and outputs of a kernel held in 16 bits (everything else is held in the
/// kernel's [`ScalarType`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Narrow {
    /// `(input number, format)`: [`Access::Matrix`] or [`Access::LowerSymmetric`] inputs.
    pub inputs: Vec<(usize, Half)>,
    /// `(output number, format)`: [`OutputShape::Full`] outputs.
    pub outputs: Vec<(usize, Half)>,
}

impl Narrow {
    /// Whether every input and output is held in the kernel's type.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.outputs.is_empty()
    }

    /// The format input `k` is held in, if 16 bits.
    pub fn input(&self, k: usize) -> Option<Half> {
        self.inputs.iter().find(|(i, _)| *i == k).map(|(_, h)| *h)
    }

    /// The format output `k` is held in, if 16 bits.
    pub fn output(&self, k: usize) -> Option<Half> {
        self.outputs.iter().find(|(i, _)| *i == k).map(|(_, h)| *h)
    }
}

/// One input of a fused kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Input {
    /// A C identifier, unique within the kernel (the planner's buffer or value name, sanitised).
    pub name: String,
    /// How the input is read.
    pub access: Access,
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
    /// The product `P[i, j] = sum_p op(A)[i, p] op(B)[p, j]` of a [`Form::Contraction`]
    /// (unscaled: a product's scalar factor appears as a multiplication around it).
    Product,
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
            Expr::Const(_) | Expr::Product => {}
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

    /// Whether the expression reads a contraction's product.
    pub fn uses_product(&self) -> bool {
        match self {
            Expr::Product => true,
            Expr::Input(_) | Expr::Const(_) => false,
            Expr::Unary(_, a) => a.uses_product(),
            Expr::Binary(_, a, b) => a.uses_product() || b.uses_product(),
            Expr::Select(c, a, b) => c.uses_product() || a.uses_product() || b.uses_product(),
        }
    }

    /// Number of nodes, a rough measure of arithmetic per element.
    pub fn node_count(&self) -> usize {
        match self {
            Expr::Input(_) | Expr::Const(_) | Expr::Product => 1,
            Expr::Unary(_, a) => 1 + a.node_count(),
            Expr::Binary(_, a, b) => 1 + a.node_count() + b.node_count(),
            Expr::Select(c, a, b) => 1 + c.node_count() + a.node_count() + b.node_count(),
        }
    }
}

/// The kind of a reduction.
///
/// Each kind is defined by a sequential scan of the values `v_0, v_1, ...` of the reduced range
/// (the columns of a row, or the rows of a column), which every backend reproduces exactly
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
    /// input): for a row reduction, `value(i, idx[i])`. Valid in [`Form::Rows`] and
    /// [`Form::Contraction`]. On the GPU an index `>= cols` yields NaN.
    Pick {
        /// Index into [`KernelSpec::inputs`] of the index vector.
        index_input: usize,
    },
    /// `sum_j value(i, j) * w[j]`: the row's product with a vector (`M * w`), `w` being input
    /// number `weights` (an [`Access::Row`] input). Only in [`Form::Contraction`]; summed in
    /// column order up to the rounding of the kernel's summation tree, like `Sum`.
    Dot {
        /// Index into [`KernelSpec::inputs`] of the vector.
        weights: usize,
    },
    /// `S[i, c] = sum over j with labels[j] == c of value(i, j)`, for `c` below the output's
    /// width (its columns, given at launch): the row's sums by the label of the column (`M *
    /// selection(labels, k)^T` up to the scaling), the labels being input number `labels` (an
    /// [`Access::IndexRow`] input). Labels at or beyond the width are skipped. Only in
    /// [`Form::Contraction`]; the order of summation is not fixed.
    ByLabel {
        /// Index into [`KernelSpec::inputs`] of the labels.
        labels: usize,
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
    /// A matrix product and what consumes it: `P = op(A) op(B)` (`rows x cols`, inner
    /// dimension `depth`, known at launch from A) is computed tile by tile and never written;
    /// expressions of it ([`Expr::Product`]) are stored in full or reduced along the rows, as
    /// in [`Form::Rows`], plus [`ReduceKind::Dot`] and [`ReduceKind::ByLabel`].
    Contraction {
        /// Index into [`KernelSpec::inputs`] of A (an [`Access::Left`] input).
        a: usize,
        /// Index into [`KernelSpec::inputs`] of B (an [`Access::Right`] input).
        b: usize,
        /// How the product is computed.
        precision: Precision,
        /// Whether the product is symmetric and so is what reduces it: `A` and `B` are the same
        /// matrix (`P = A A^T`, its rows and columns the same points in the same order), every
        /// reduction is a [`ReduceKind::ByLabel`] whose labels are also those of the rows, every
        /// expression has the same value at `(i, j)` and `(j, i)`, and nothing is stored. A
        /// backend may then compute only the tiles on and above the diagonal, adding each
        /// one's sums to its rows (by the columns' labels) and to its columns (by the rows'
        /// labels); computing every tile gives the same sums.
        #[serde(default)]
        symmetric: bool,
        /// Element-wise values written out in full.
        stores: Vec<Expr>,
        /// Row reductions.
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
    /// Human-readable provenance (IR node names), for readers. Not part of the kernel's
    /// identity ([`KernelSpec::name`]).
    pub provenance: Vec<String>,
    /// The dense inputs and outputs held in 16 bits (none by default).
    #[serde(default, skip_serializing_if = "Narrow::is_empty")]
    pub narrow: Narrow,
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
    /// A `rows x w` dense matrix, row-major, its width `w` given at launch (the clusters of a
    /// [`ReduceKind::ByLabel`] reduction).
    PerRowWide,
}

impl KernelSpec {
    /// The kernel's outputs in parameter order: stores or map outputs first, then reductions.
    pub fn outputs(&self) -> Vec<OutputShape> {
        match &self.form {
            Form::Map { outputs } => vec![OutputShape::Full; outputs.len()],
            Form::Rows { stores, reductions }
            | Form::Contraction {
                stores, reductions, ..
            } => {
                let mut v = vec![OutputShape::Full; stores.len()];
                v.extend(reductions.iter().map(|r| match r.kind {
                    ReduceKind::ArgMin => OutputShape::PerRowIndex,
                    ReduceKind::ByLabel { .. } => OutputShape::PerRowWide,
                    _ => OutputShape::PerRow,
                }));
                v
            }
            Form::Cols { reductions } => vec![OutputShape::PerCol; reductions.len()],
        }
    }

    /// Whether the kernel can run band by band: a map over a square space that reads an
    /// [`Access::LowerSymmetric`] input. Band `[r0, r1)` writes every output element `(i, j)` and
    /// its mirror `(j, i)` with `r0 <= i < r1` and `j <= i`, reading only rows `< r1` of the lower
    /// triangle, so the map can follow a producer that writes the lower triangle band by band
    /// (see the plan's pipelined steps). A target may require band boundaries on multiples of
    /// its tile side.
    pub fn runs_in_bands(&self) -> bool {
        matches!(self.form, Form::Map { .. })
            && self
                .inputs
                .iter()
                .any(|input| input.access == Access::LowerSymmetric)
    }

    /// Whether a contraction's only output is one 16-bit store whose value reads nothing but
    /// the product and scalars (no reductions): wherever the product is symmetric (`A` and `B`
    /// the same matrix, a square output) so is what it stores, and a backend may compute one
    /// triangle of tiles and write each tile's mirror image too.
    pub fn stores_a_mirrorable_value(&self) -> bool {
        let Form::Contraction {
            stores, reductions, ..
        } = &self.form
        else {
            return false;
        };
        if !reductions.is_empty() || stores.len() != 1 || self.narrow.output(0).is_none() {
            return false;
        }
        let mut only_scalars = true;
        stores[0].for_each_input(&mut |k| {
            only_scalars &= self
                .inputs
                .get(k)
                .is_some_and(|i| matches!(i.access, Access::Scalar));
        });
        only_scalars
    }
}
