//! Plans: what runs, in order, over which buffers. A plan is built for one program, one set of
//! dimension sizes and one element type; backends execute it step by step.
//!
//! Read a plan three ways: [`Plan`]'s `Display` (a table of steps with shapes, flops and
//! bytes), [`Plan::to_dot`] (the graph with fused groups as clusters), and the kernel specs of
//! its fused steps ([`Plan::kernels`]), which a backend's emitter turns into code (the CUDA C of
//! each with `kernels_gen::emit`).

pub mod collective;
pub mod cost;
mod display;
pub mod dot;
mod estimate;
mod validate;

use crate::ops::{Builtin, OpFacts};
use crate::scalar::ScalarExpr;
use crate::target::Target;
use crate::types::{DType, DimBindings, Shape};
use kernel_ir::{Half, KernelSpec};
use serde::{Deserialize, Serialize};

pub use dot::GraphView;

/// Index of a value in [`Plan::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId(pub usize);

/// Index of a buffer in [`Plan::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BufferId(pub usize);

/// What kind of data a value is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ValueKind {
    /// Dense row-major `rows x cols` (vectors included), leading dimension `cols`.
    Dense,
    /// CSR `rows x cols`; `nnz` when known at planning time.
    Csr {
        /// Number of stored entries, if known.
        nnz: Option<usize>,
    },
    /// An index vector of `rows` entries (`u32`).
    Index,
    /// A host scalar, evaluated when the plan runs.
    Scalar(ScalarExpr),
}

/// Where a value lives while the plan runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Home {
    /// A tensor passed in by the caller (read only).
    Input(String),
    /// An output, written into a tensor the caller provides (or the executor allocates).
    Output(String),
    /// A temporary in plan-owned buffers: one for dense and index values; three for CSR
    /// (row pointers, column indices, values).
    Temp(Vec<BufferId>),
    /// A temporary that lives in an output's storage before the output itself is written
    /// (so that, for example, `B = X * X^T` followed by `K = pow(B + c, r)` needs one `n x n`
    /// buffer, not two).
    InOutput(String),
    /// A host scalar: no storage.
    Host,
}

/// A value the plan reads or writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Value {
    /// The program name bound to it, or a generated `%N`.
    pub name: String,
    /// What it is.
    pub kind: ValueKind,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Where it lives.
    pub home: Home,
    /// Its shape in the program's dimensions (`n x k`), where lowering knew it: what the
    /// [partitioning pass](crate::passes::partition) reads to find the values that have `n`
    /// rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    /// The 16-bit format a dense input or output is held in
    /// ([`PlannerConfig::half_storage`](crate::PlannerConfig)); `None`: the plan's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Half>,
}

impl Value {
    /// Number of elements of a dense or index value.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the value has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type as users write it (`Dense[60000, 10]`, `Col[60000]`, `Csr[10, 60000]`), and
    /// the 16-bit format it is held in (`Dense[60000, 60000] in bf16`).
    pub fn type_string(&self) -> String {
        let ty = self.kind_string();
        match self.held {
            Some(half) => format!("{ty} in {half}"),
            None => ty,
        }
    }

    fn kind_string(&self) -> String {
        match &self.kind {
            ValueKind::Scalar(_) => "Scalar".into(),
            ValueKind::Index => format!("Index[{}]", self.rows),
            ValueKind::Csr { .. } => format!("Csr[{}, {}]", self.rows, self.cols),
            ValueKind::Dense if self.cols == 1 && self.rows != 1 => format!("Col[{}]", self.rows),
            ValueKind::Dense if self.rows == 1 && self.cols != 1 => format!("Row[{}]", self.cols),
            ValueKind::Dense => format!("Dense[{}, {}]", self.rows, self.cols),
        }
    }

    /// Bytes of one element of a dense value: 2 where it is held in 16 bits, else those of
    /// `dtype`.
    pub fn elem_bytes(&self, dtype: DType) -> usize {
        match self.held {
            Some(_) => 2,
            None => dtype.size_bytes(),
        }
    }
}

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Elem {
    /// The plan's floating-point type.
    Float,
    /// `u32` (index vectors).
    U32,
    /// `i32` (CSR row pointers and column indices).
    I32,
    /// A dense value held in 16 bits ([`Value::held`]).
    Half(Half),
}

/// A plan-owned buffer, allocated once and reused across runs of the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Buffer {
    /// Element type.
    pub elem: Elem,
    /// Number of elements.
    pub len: usize,
    /// The values that live in it, in order of definition.
    pub holds: Vec<ValueId>,
    /// Allocated for each run of the plan (before the first step that writes it, released
    /// after the last that reads it) instead of kept with the plan: scratch copies that only
    /// speed up one step.
    #[serde(default)]
    pub transient: bool,
}

/// A dense x dense product `C (m x n) = alpha * op(A) * op(B)`; `op(A)` is `m x k`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmStep {
    /// A is stored `k x m` and read transposed.
    pub trans_a: bool,
    /// B is stored `n x k` and read transposed.
    pub trans_b: bool,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Scalar factor.
    pub alpha: ScalarExpr,
    /// Let f32 products use TF32 tensor cores (about 10 bits of mantissa per operand).
    #[serde(default)]
    pub tf32: bool,
}

/// Operations of plan steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StepOp {
    /// cuBLAS GEMM (CPU: `gemm` crate). Inputs (A, B), output C.
    Gemm(GemmStep),
    /// Symmetric rank-k update: `C (n x n) = alpha * A * A^T` (A stored `n x k`) or, with
    /// `trans`, `alpha * A^T * A` (A stored `k x n`). Input A, output C: the full matrix, or
    /// with `lower_only` its lower triangle (`j <= i`), the one consumer reading it as
    /// [`kernel_ir::Access::LowerSymmetric`]. With `block_rows`, it can run as a prologue (the
    /// diagonal blocks) and then one band per block row ([`block_row_ranges`]), each writing
    /// only its own rows, the producer of a [`Pipeline`].
    Syrk {
        /// Whether A is read transposed.
        trans: bool,
        /// Order of C.
        n: usize,
        /// Inner dimension.
        k: usize,
        /// Scalar factor.
        alpha: ScalarExpr,
        /// Let f32 products use TF32 tensor cores.
        #[serde(default)]
        tf32: bool,
        /// Only the lower triangle is written (the upper one is left unspecified).
        #[serde(default)]
        lower_only: bool,
        /// 0 for one library SYRK, else the rows per block of the GEMMs that compute the
        /// lower triangle block row by block row.
        #[serde(default)]
        block_rows: usize,
        /// `None` for the whole matrix. `Some((start, end))`: only rows `[start, end)` of C
        /// (all `n` columns, written as a `(end - start) x n` block), each entry computed as the
        /// whole SYRK computes it: a rank's block of rows in a partitioned plan
        /// ([`collective::Partition::local_step`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        row_block: Option<(usize, usize)>,
    },
    /// `y = alpha * op(A) * x` with A stored `m x n`. Inputs (A, x), output y.
    Gemv {
        /// Whether A is read transposed.
        trans: bool,
        /// Rows of A as stored.
        m: usize,
        /// Columns of A as stored.
        n: usize,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// Sparse x dense: `C = alpha * op(S) * op(D)` (`sparse_left`) or `alpha * op(D) * op(S)`.
    /// Inputs in product order, output C (`m x n`, inner dimension `k`).
    SpMM {
        /// Whether the sparse operand is on the left.
        sparse_left: bool,
        /// Whether S is read transposed.
        trans_sparse: bool,
        /// Whether D is read transposed.
        trans_dense: bool,
        /// Rows of C.
        m: usize,
        /// Columns of C.
        n: usize,
        /// Inner dimension.
        k: usize,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// `C (m x n) = alpha * A * B^T` of two CSR matrices (A `m x k`, B `n x k`), written dense.
    /// Inputs (A, B), output C.
    SpGemm {
        /// Rows of C.
        m: usize,
        /// Columns of C.
        n: usize,
        /// Inner dimension (columns of A and B).
        k: usize,
        /// Scalar factor.
        alpha: ScalarExpr,
        /// Why the planner chose it over densifying.
        #[serde(default)]
        why: String,
    },
    /// `y = alpha * op(S) * x`. Inputs (S, x), output y.
    SpMV {
        /// Whether S is read transposed.
        trans: bool,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// A generated kernel. Inputs in `spec.inputs` order, outputs in `spec.outputs()` order.
    Fused(FusedStep),
    /// A builtin operation ([`crate::ops`]), its dimensions at their sizes. Inputs and output
    /// as its operands and result in the graph.
    Builtin(Builtin),
    /// Copies a dense or index value (an output that is also an input or another output).
    Copy,
}

/// A generated kernel in a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedStep {
    /// The kernel's name, [`KernelSpec::name`] of its spec.
    pub name: String,
    /// What it computes.
    pub spec: KernelSpec,
    /// Rows of the iteration space.
    pub rows: usize,
    /// Columns of the iteration space.
    pub cols: usize,
    /// The inner dimension of a contraction's product (0 for other forms).
    #[serde(default)]
    pub depth: usize,
    /// The width of a contraction's by-label outputs (its clusters; 0 without one).
    #[serde(default)]
    pub width: usize,
    /// On a rank of a partitioned plan, the share of a symmetric contraction this rank
    /// computes ([`collective::StepMode::Shared`]); `None`: the whole step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<collective::Share>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// What it does.
    pub op: StepOp,
    /// Values read.
    pub inputs: Vec<ValueId>,
    /// Values written.
    pub outputs: Vec<ValueId>,
    /// The IR nodes it came from (for reading plans and naming failed steps).
    pub provenance: Vec<String>,
    /// Floating-point operations (estimate).
    pub flops: f64,
    /// Bytes read and written in device memory (estimate, each operand once).
    pub bytes: f64,
}

impl Step {
    /// Short name of the operation: `gemm`, `syrk`, `spmm`, `fused map`, ...
    pub fn op_name(&self) -> String {
        match &self.op {
            StepOp::Gemm(_) => "gemm".into(),
            StepOp::Syrk { .. } => "syrk".into(),
            StepOp::Gemv { .. } => "gemv".into(),
            StepOp::SpMM { .. } => "spmm".into(),
            StepOp::SpGemm { .. } => "spgemm".into(),
            StepOp::SpMV { .. } => "spmv".into(),
            StepOp::Fused(f) => match &f.spec.form {
                kernel_ir::Form::Map { .. } => "fused map".into(),
                kernel_ir::Form::Rows { .. } => "fused rows".into(),
                kernel_ir::Form::Contraction { .. } => "contraction".into(),
                kernel_ir::Form::Cols { .. } => "fused cols".into(),
            },
            StepOp::Builtin(b) => b.step_name().into(),
            StepOp::Copy => "copy".into(),
        }
    }
}

/// Two consecutive steps that run together: the producer (step `producer`) writes its output
/// band of rows by band, and the consumer (the next step) processes each band as soon as it is
/// written, where the backend can run them concurrently (on the GPU, the consumer on a second
/// stream beside the producer's next bands); elsewhere the two run one after the other. The
/// producer is a SYRK in block rows (its prologue first), the consumer a map that
/// [runs in bands](kernel_ir::KernelSpec::runs_in_bands). The producer's inputs stay live
/// through the consumer's step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    /// The producing step; the consumer is the next one.
    pub producer: usize,
    /// The bands `[r0, r1)` in order, covering the producer's rows.
    pub bands: Vec<(usize, usize)>,
}

/// The block rows `[r0, r1)` of an order-`n` blocked SYRK with `block_rows` rows per block (the
/// last one shorter).
pub fn block_row_ranges(n: usize, block_rows: usize) -> impl Iterator<Item = (usize, usize)> {
    let step = block_rows.max(1);
    (0..n).step_by(step).map(move |r0| (r0, (r0 + step).min(n)))
}

/// What one part of a step does when a step runs in parts (a [`Pipeline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepPart {
    /// The whole step.
    Whole,
    /// What comes before the first band (a blocked SYRK's diagonal blocks).
    Prologue,
    /// The rows `[r0, r1)`.
    Band(usize, usize),
}

/// A plan for one program at concrete sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Program name.
    pub program: String,
    /// Program signature, as written.
    pub signature: String,
    /// Element type.
    pub dtype: DType,
    /// Dimension sizes the plan was made for.
    pub dims: DimBindings,
    /// Every value the plan touches.
    pub values: Vec<Value>,
    /// Plan-owned buffers.
    pub buffers: Vec<Buffer>,
    /// Steps, in execution order.
    pub steps: Vec<Step>,
    /// Tensor inputs: parameter name and value.
    pub inputs: Vec<(String, ValueId)>,
    /// Outputs: name and value (host scalars included).
    pub outputs: Vec<(String, ValueId)>,
    /// The planned graph, for drawing.
    pub graph: GraphView,
    /// Steps that run together.
    #[serde(default)]
    pub pipelines: Vec<Pipeline>,
    /// The machine the plan was made for.
    pub target: Target,
    /// How the plan runs over several ranks, when it was planned partitioned
    /// ([`PlannerConfig::partition`](crate::PlannerConfig)); `None`: on one device, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<collective::Partition>,
}

impl Plan {
    /// The value with this id.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    /// The pipeline whose producer is step `i`, if any.
    pub fn pipeline_from(&self, i: usize) -> Option<&Pipeline> {
        self.pipelines.iter().find(|p| p.producer == i)
    }

    /// The step after which the inputs of step `i` may die: the consumer's step where `i` is
    /// a pipeline's producer (the consumer runs while the producer still reads), else `i`.
    pub fn reads_until(&self, i: usize) -> usize {
        if self.pipeline_from(i).is_some() {
            i + 1
        } else {
            i
        }
    }

    /// Total estimated flops.
    pub fn total_flops(&self) -> f64 {
        self.steps.iter().map(|s| s.flops).sum()
    }

    /// Total estimated bytes moved.
    pub fn total_bytes(&self) -> f64 {
        self.steps.iter().map(|s| s.bytes).sum()
    }

    /// Bytes of plan-owned buffers (workspace), for the given element type size.
    pub fn workspace_bytes(&self) -> usize {
        self.buffers
            .iter()
            .map(|b| {
                b.len
                    * match b.elem {
                        Elem::Float => self.dtype.size_bytes(),
                        Elem::U32 | Elem::I32 => 4,
                        Elem::Half(_) => 2,
                    }
            })
            .sum()
    }

    /// Every fused kernel of the plan, in step order.
    pub fn kernels(&self) -> impl Iterator<Item = &FusedStep> {
        self.steps.iter().filter_map(|s| match &s.op {
            StepOp::Fused(f) => Some(f),
            _ => None,
        })
    }

    /// The plan as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
