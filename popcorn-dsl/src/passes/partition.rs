//! Partitioning: how a plan runs over `P` ranks that each own a block of rows of the points
//! (see [`crate::plan::collective`] for the model and the determinism rule). The pass leaves
//! the steps as they are and records a [`Partition`] beside them; a plan it cannot split
//! fails to plan with an error naming the step and why, never a wrong answer.
//!
//! Rules, from the symbolic shapes of the values (a value is *n-row* when its rows are `n`):
//! - a step whose first output is n-row runs **locally** when every operand it reads at the
//!   iteration's row is n-row (or not n-sized): element-wise kernels and row reductions, a
//!   contraction's rows (`-2 X C^T` and its argmin, `K * y`), a GEMM or GEMV of not transposed
//!   A, sums of `K`'s rows by label, a diagonal of `K`'s rows, padding, copies. An operand read
//!   along the columns (the right side of a product, `b^T`, the labels of a by-label sum) is
//!   needed **whole**: an input is then replicated, a computed value all-gathered;
//! - a sum over the points of integers (`counts(labels, k)`, a sum of comparisons such as
//!   `sum(new_labels != labels)`) runs locally on n-row operands and is followed by an
//!   all-reduce(sum), exact in any order; where its operands are already whole it runs
//!   replicated;
//! - every other step runs **replicated**: reductions over the points of reals (label sums,
//!   `sum(...)`, transposed products) read their operands whole (all-gathered), so they sum in
//!   the unpartitioned plan's order; `k`-sized work is the same on every rank;
//! - a SYRK over the points (`X X^T`, the kernel matrix's product) runs **locally**: each rank
//!   its block of rows of the product against all of `X` (needed whole), every entry computed
//!   as the whole SYRK computes it (on the CPU, the same panel GEMMs), so a map reading the
//!   product's lower triangle reads the rank's full rows instead;
//! - sparse (CSR) inputs whose rows are the points are held in blocks of rows (each rank its
//!   rows' offsets rebased to 0, their column indices and values), or whole where a step
//!   needs them so (the right side of `X X^T`); products whose rows are the points run
//!   **locally**: `D * op(S)` (the rank's rows of `D` against all of `S`: Kernel K-means'
//!   weighted `K * V^T`), `S * op(D)`, `A B^T` of two sparse matrices and `S x` (the rank's
//!   block of `S` or `A`), and so do densifying sparse points and their rows' norms; other
//!   sparse products run replicated (sparse values over the points built in the plan are
//!   selections, made whole from all-gathered labels);
//! - a symmetric contraction (the recomputed kernel matrix's sums by label over the points
//!   sorted by cluster, whose kernel computes one triangle of tiles and adds each tile to its
//!   rows and, mirrored, to its columns) runs **shared**: every rank reads its operands whole,
//!   computes its share of the work into the whole output (partial sums, zero elsewhere), and
//!   an all-reduce(sum) adds the ranks' outputs (see [`crate::plan::collective::Share`]);
//! - reordering the points by cluster (`PermuteRows`) runs replicated, over the whole points
//!   and labels (every rank makes the same order);
//! - not partitioned (an error): a SYRK overlapped with its map in bands, a lower-triangle
//!   operand, an operand read transposed along the points.

use super::{PassContext, PlanError, PlanPass};
use crate::ops::Builtin;
use crate::plan::collective::{
    Collective, CollectiveKind, Partition, PartitionSpec, Placement, RankStep, StepMode,
};
use crate::plan::{Elem, Plan, Step, StepOp, ValueId, ValueKind};
use crate::types::{DType, Dim};
use kernel_ir::{Access, BinaryOp, Expr, Form, ReduceKind};

/// The pass: with [`super::PlannerConfig::partition`] set, records the plan's [`Partition`].
pub struct Partitioning;

impl PlanPass for Partitioning {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn run(&self, plan: &mut Plan, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let Some(spec) = &cx.config.partition else {
            return Ok(false);
        };
        plan.partition = Some(partition(plan, spec)?);
        Ok(true)
    }
}

/// What a step needs of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Need {
    /// Nothing: the operand is not n-sized (replicated already).
    Any,
    /// The rank's rows.
    Rows,
    /// The whole value.
    Whole,
}

/// How a step runs, before the collectives are placed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// Over the rank's rows, reading its operands as the needs say.
    Local(Vec<Need>),
    /// A sum of integers over the points: locally plus an all-reduce where an operand is held
    /// in rows, else replicated.
    IntegerSum(Vec<Need>),
    /// Whole on every rank, every n-sized operand whole.
    Replicated,
    /// Every rank its share over whole operands, its outputs partial sums added up by an
    /// all-reduce.
    Shared,
}

/// Where the symbolic shape puts `n`.
struct Dims<'a> {
    plan: &'a Plan,
    dim: Dim,
}

impl Dims<'_> {
    fn rows_n(&self, v: ValueId) -> bool {
        self.plan
            .value(v)
            .shape
            .as_ref()
            .is_some_and(|s| s.rows == self.dim)
    }
    fn cols_n(&self, v: ValueId) -> bool {
        self.plan
            .value(v)
            .shape
            .as_ref()
            .is_some_and(|s| s.cols == self.dim)
    }
    fn has_n(&self, v: ValueId) -> bool {
        self.rows_n(v) || self.cols_n(v)
    }
    /// What a step iterating over the rank's rows needs of operand `v`, read at the
    /// iteration's row along its rows (`by_row`), or not at all (`false`: along columns, or as
    /// a whole).
    fn need(&self, v: ValueId, by_row: bool) -> Need {
        if by_row && self.rows_n(v) {
            Need::Rows
        } else if self.has_n(v) {
            Need::Whole
        } else {
            Need::Any
        }
    }
}

/// Whether every value of `e` is 0 or 1: a comparison, or a choice between such values.
fn indicator(e: &Expr) -> bool {
    match e {
        Expr::Binary(op, _, _) => matches!(
            op,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne
        ),
        Expr::Const(c) => *c == 0.0 || *c == 1.0,
        Expr::Select(_, a, b) => indicator(a) && indicator(b),
        _ => false,
    }
}

/// Whether a sum of `n` indicators is exact in `dtype` in any order.
fn exact_count(n: usize, dtype: DType) -> bool {
    let bits = match dtype {
        DType::F32 => 24,
        DType::F64 => 53,
    };
    (n as u128) <= (1u128 << bits)
}

/// Whether `v` is written by a SYRK (the full symmetric product on the CPU ranks).
fn syrk_product(plan: &Plan, v: ValueId) -> bool {
    plan.steps
        .iter()
        .any(|s| matches!(s.op, StepOp::Syrk { .. }) && s.outputs.contains(&v))
}

/// The rule of step `index`, or why it cannot be partitioned.
fn rule(d: &Dims<'_>, index: usize, step: &Step) -> Result<Rule, String> {
    let out_rows_n = step.outputs.first().is_some_and(|o| d.rows_n(*o));
    let any_n = step.inputs.iter().chain(&step.outputs).any(|v| d.has_n(*v));
    if !any_n {
        return Ok(Rule::Replicated);
    }
    let n = d.plan.dims.get(dim_name(&d.dim)).copied().unwrap_or(0);
    match &step.op {
        StepOp::Fused(f) => {
            if let Form::Contraction {
                symmetric: true, ..
            } = f.spec.form
            {
                return Ok(Rule::Shared);
            }
            let mut needs = Vec::with_capacity(step.inputs.len());
            for (v, input) in step.inputs.iter().zip(&f.spec.inputs) {
                let by_row = match input.access {
                    Access::Matrix { transposed: false }
                    | Access::Col
                    | Access::IndexCol
                    | Access::Left { transposed: false } => true,
                    Access::Matrix { transposed: true } | Access::Left { transposed: true } => {
                        if d.cols_n(*v) {
                            return Err(format!(
                                "it reads `{}` transposed along the points",
                                d.plan.value(*v).name
                            ));
                        }
                        false
                    }
                    // A SYRK's product: every rank's SYRK (local or whole) writes its rows
                    // in full, each entry as the whole SYRK computes it, so the rank reads its
                    // rows as a whole matrix ([`Partition::local_step`] says so).
                    Access::LowerSymmetric if d.has_n(*v) && syrk_product(d.plan, *v) => true,
                    Access::LowerSymmetric if d.has_n(*v) => {
                        return Err(format!(
                            "it reads the lower triangle of `{}`, whose mirror lies in other \
                             ranks' rows",
                            d.plan.value(*v).name
                        ))
                    }
                    _ => false,
                };
                needs.push(d.need(*v, by_row));
            }
            // The iteration runs over the points when an operand read by row has n rows.
            let over_points = needs.contains(&Need::Rows);
            match &f.spec.form {
                Form::Cols { reductions } if over_points => {
                    let counting = reductions
                        .iter()
                        .all(|r| r.kind == ReduceKind::Sum && indicator(&r.expr));
                    if counting && exact_count(n, d.plan.dtype) {
                        Ok(Rule::IntegerSum(needs))
                    } else {
                        Ok(Rule::Replicated)
                    }
                }
                Form::Cols { .. } => Ok(Rule::Replicated),
                _ if out_rows_n && over_points => Ok(Rule::Local(needs)),
                _ => Ok(Rule::Replicated),
            }
        }
        StepOp::Gemm(g) => {
            let a = step.inputs[0];
            if out_rows_n && !g.trans_a && d.rows_n(a) {
                Ok(Rule::Local(vec![Need::Rows, d.need(step.inputs[1], false)]))
            } else {
                Ok(Rule::Replicated)
            }
        }
        StepOp::Gemv { trans, .. } => {
            let a = step.inputs[0];
            if out_rows_n && !trans && d.rows_n(a) {
                Ok(Rule::Local(vec![Need::Rows, d.need(step.inputs[1], false)]))
            } else {
                Ok(Rule::Replicated)
            }
        }
        StepOp::Syrk { row_block, .. } => {
            if row_block.is_some() {
                return Err("it is already a block of rows of a SYRK".into());
            }
            if d.plan.pipeline_from(index).is_some() {
                return Err(
                    "a SYRK overlapped with its map in bands is not partitioned (partitioned plans \
                     are made without band pipelines)"
                        .into(),
                );
            }
            if out_rows_n {
                // Each rank its rows of the product, against all of A (needed whole).
                Ok(Rule::Local(vec![d.need(step.inputs[0], false)]))
            } else {
                Ok(Rule::Replicated)
            }
        }
        StepOp::SpMM {
            sparse_left,
            trans_sparse,
            trans_dense,
            ..
        } => {
            let (sparse, dense) = if *sparse_left {
                (step.inputs[0], step.inputs[1])
            } else {
                (step.inputs[1], step.inputs[0])
            };
            if !*sparse_left && !*trans_dense && out_rows_n && d.rows_n(dense) {
                // `D * op(S)`: the rank's rows of D against all of S (Kernel K-means'
                // weighted `K * V^T`), each row summed as the whole product sums it.
                Ok(Rule::Local(vec![Need::Rows, d.need(sparse, false)]))
            } else if *sparse_left && !*trans_sparse && out_rows_n && d.rows_n(sparse) {
                // `S * op(D)`: the rank's block of rows of S (sparse points) against all of D.
                Ok(Rule::Local(vec![Need::Rows, d.need(dense, false)]))
            } else {
                Ok(Rule::Replicated)
            }
        }
        StepOp::SpGemm { .. } if out_rows_n && d.rows_n(step.inputs[0]) => {
            // `A B^T` of two sparse matrices: the rank's block of rows of A against all of B.
            Ok(Rule::Local(vec![Need::Rows, d.need(step.inputs[1], false)]))
        }
        StepOp::SpMV { trans: false, .. } if out_rows_n && d.rows_n(step.inputs[0]) => {
            Ok(Rule::Local(vec![Need::Rows, d.need(step.inputs[1], false)]))
        }
        StepOp::SpGemm { .. } | StepOp::SpMV { .. } => Ok(Rule::Replicated),
        StepOp::Builtin(b) => match b {
            Builtin::Diag(_) | Builtin::PadCols(_) if out_rows_n => {
                Ok(Rule::Local(vec![Need::Rows]))
            }
            Builtin::ClusterSums(_) if out_rows_n => {
                Ok(Rule::Local(vec![Need::Rows, d.need(step.inputs[1], false)]))
            }
            Builtin::Counts(_) if exact_count(n, d.plan.dtype) => {
                Ok(Rule::IntegerSum(vec![d.need(step.inputs[0], true)]))
            }
            // A block of rows of sparse points, densified or its rows' norms, stays the rank's.
            Builtin::Densify(f) if !f.transpose && out_rows_n => Ok(Rule::Local(vec![Need::Rows])),
            Builtin::SparseRowNorms(_) if out_rows_n => Ok(Rule::Local(vec![Need::Rows])),
            _ => Ok(Rule::Replicated),
        },
        StepOp::Copy if out_rows_n => Ok(Rule::Local(vec![Need::Rows])),
        StepOp::Copy => Ok(Rule::Replicated),
    }
}

fn dim_name(d: &Dim) -> &str {
    match d {
        Dim::Sym(s) => s,
        Dim::Fixed(_) => "",
    }
}

/// The partition of `plan` by `spec` (see the module docs), or why it has none.
pub fn partition(plan: &Plan, spec: &PartitionSpec) -> Result<Partition, PlanError> {
    let unsupported = |why: String| PlanError::Unsupported(why);
    if spec.ranks == 0 {
        return Err(unsupported(
            "a partitioned plan needs at least 1 rank".into(),
        ));
    }
    let size = plan.dims.get(&spec.dim).copied().ok_or_else(|| {
        unsupported(format!(
            "`{}` has no dimension `{}` to partition over ranks",
            plan.program, spec.dim
        ))
    })?;
    let d = Dims {
        plan,
        dim: Dim::Sym(spec.dim.clone()),
    };
    if let Some(v) = plan.values.iter().find(|v| v.shape.is_none()) {
        return Err(PlanError::Internal {
            pass: "partition",
            message: format!("value `{}` has no symbolic shape", v.name),
        });
    }
    let rules = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            rule(&d, i, s).map_err(|why| {
                unsupported(format!(
                    "`{}` cannot run partitioned over `{}`: step {i} ({}, writing {}): {why}",
                    plan.program,
                    spec.dim,
                    s.op_name(),
                    s.outputs
                        .iter()
                        .map(|o| plan.value(*o).name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Inputs: replicated where a step needs them whole, else each rank reads its rows.
    let mut placements: Vec<Placement> = (0..plan.values.len())
        .map(|i| {
            if d.rows_n(ValueId(i)) {
                Placement::Rows
            } else {
                Placement::Replicated
            }
        })
        .collect();
    let needed_whole = |v: ValueId| {
        plan.steps.iter().zip(&rules).any(|(s, r)| {
            s.inputs.iter().enumerate().any(|(k, u)| {
                *u == v
                    && match r {
                        Rule::Replicated | Rule::Shared => d.has_n(v),
                        Rule::Local(needs) => needs.get(k) == Some(&Need::Whole),
                        Rule::IntegerSum(_) => false,
                    }
            })
        })
    };
    // Which values each rank holds whole, and which in rows, as the schedule goes.
    let mut whole = vec![false; plan.values.len()];
    let mut rows = vec![false; plan.values.len()];
    for (i, v) in plan.values.iter().enumerate() {
        let id = ValueId(i);
        let input = matches!(
            v.home,
            crate::plan::Home::Input(_) | crate::plan::Home::Host
        );
        if input && d.rows_n(id) && !needed_whole(id) {
            rows[i] = true;
        } else if input {
            whole[i] = true;
            placements[i] = Placement::Replicated;
        }
    }
    let elem = |v: ValueId| match plan.value(v).kind {
        ValueKind::Index => Elem::U32,
        _ => Elem::Float,
    };
    let mut schedule = Vec::new();
    for (i, (step, rule)) in plan.steps.iter().zip(&rules).enumerate() {
        let needs: Vec<Need> = match rule {
            Rule::Local(n) | Rule::IntegerSum(n) => n.clone(),
            Rule::Replicated | Rule::Shared => {
                step.inputs.iter().map(|v| d.need(*v, false)).collect()
            }
        };
        let mode = match rule {
            Rule::Local(_) => StepMode::Local,
            Rule::Replicated => StepMode::Replicated,
            Rule::Shared => StepMode::Shared,
            Rule::IntegerSum(_) => {
                let all_whole = step
                    .inputs
                    .iter()
                    .zip(&needs)
                    .all(|(v, n)| *n == Need::Any || whole[v.0]);
                if all_whole {
                    StepMode::Replicated
                } else {
                    StepMode::Local
                }
            }
        };
        for (v, need) in step.inputs.iter().zip(&needs) {
            let need = match (mode, *need) {
                (StepMode::Replicated, Need::Rows) => Need::Whole,
                (_, n) => n,
            };
            match need {
                Need::Whole if !whole[v.0] => {
                    if matches!(plan.value(*v).kind, ValueKind::Csr { .. }) {
                        return Err(unsupported(format!(
                            "`{}` cannot run partitioned over `{}`: step {i} needs the sparse \
                             value `{}` whole after the ranks split it into blocks of rows",
                            plan.program,
                            spec.dim,
                            plan.value(*v).name
                        )));
                    }
                    if !rows[v.0] {
                        return Err(PlanError::Internal {
                            pass: "partition",
                            message: format!(
                                "step {i} reads `{}` before any rank holds it",
                                plan.value(*v).name
                            ),
                        });
                    }
                    schedule.push(RankStep::Collective(Collective {
                        kind: CollectiveKind::AllGather,
                        value: *v,
                        elem: elem(*v),
                        len: plan.value(*v).len(),
                    }));
                    whole[v.0] = true;
                }
                Need::Rows if !rows[v.0] && !whole[v.0] => {
                    return Err(PlanError::Internal {
                        pass: "partition",
                        message: format!(
                            "step {i} reads the rows of `{}` before any rank holds them",
                            plan.value(*v).name
                        ),
                    });
                }
                _ => {}
            }
        }
        let rows_of = needs
            .iter()
            .map(|n| mode == StepMode::Local && *n == Need::Rows)
            .collect();
        schedule.push(RankStep::Run {
            step: i,
            mode,
            rows_of,
        });
        for o in &step.outputs {
            match mode {
                StepMode::Local if d.rows_n(*o) => {
                    rows[o.0] = true;
                    placements[o.0] = Placement::Rows;
                }
                StepMode::Local if !matches!(rule, Rule::IntegerSum(_)) => {
                    return Err(PlanError::Internal {
                        pass: "partition",
                        message: format!(
                            "step {i} runs over the rows but writes `{}`, which has no rows of \
                             the points",
                            plan.value(*o).name
                        ),
                    });
                }
                StepMode::Local | StepMode::Shared => {
                    // The ranks' partial sums added up: of a local sum over the points, or of
                    // a shared step's whole output.
                    schedule.push(RankStep::Collective(Collective {
                        kind: CollectiveKind::AllReduceSum,
                        value: *o,
                        elem: elem(*o),
                        len: plan.value(*o).len(),
                    }));
                    whole[o.0] = true;
                    placements[o.0] = Placement::Replicated;
                }
                StepMode::Replicated => {
                    whole[o.0] = true;
                    placements[o.0] = Placement::Replicated;
                }
            }
        }
    }
    Ok(Partition {
        spec: spec.clone(),
        size,
        placements,
        schedule,
    })
}
