//! Plans partitioned along the points over several ranks, and the collectives between them.
//!
//! A [`Partition`] is a property of a plan: the plan's steps stay as they are (its table prints
//! and runs exactly as the unpartitioned plan does), and the partition says how `P` ranks run
//! them together. The [partitioning pass](crate::passes::partition) makes it.
//!
//! - **Rows.** Dimension `n` ([`PartitionSpec::dim`]) is split into `P` balanced blocks:
//!   rank `r` owns rows `[start_r, end_r)` with `n / P` rows each and one more for the first
//!   `n % P` ranks ([`PartitionSpec::rows`]). With `n < P` the last ranks own no rows; they
//!   still take part in every collective (with nothing, or with zeros).
//! - **Placements.** Every value whose rows are `n` (`Dense[n, ..]`, `Col[n]`, `Index[n]`, `K`'s
//!   rows) is either [`Placement::Rows`] (each rank holds its block of rows, all columns) or
//!   [`Placement::Replicated`] (each rank holds it whole: an input needed whole, such as the
//!   labels that select `K`'s columns, or a value made by a replicated step). Every other value
//!   (`k`-sized, `d`-sized, scalars) is replicated.
//! - **Steps.** Each step runs on every rank either [`StepMode::Local`] (over the rank's rows:
//!   [`Partition::local_step`] rewrites its sizes, the diagonal of a block of rows starts at
//!   the block's first row, and a SYRK becomes the block of rows `[start, end)` of the product,
//!   written in full), [`StepMode::Replicated`] (whole, the same on every rank, reading
//!   whole operands) or [`StepMode::Shared`] (a symmetric contraction, its points sorted by
//!   cluster: every rank computes a [`Share`] of it over whole operands, writes partial sums
//!   of the whole output, zero elsewhere, and an all-reduce adds them up).
//! - **Collectives** ([`Collective`]) stand between steps: an [`CollectiveKind::AllGather`]
//!   where a value held in rows is needed whole, an [`CollectiveKind::AllReduceSum`] after a
//!   local partial sum over the points. Each names its value, element type and bytes, so a
//!   backend maps it onto its library (the in-memory one of the CPU ranks, NCCL later).
//!
//! ## Determinism
//! A partitioned plan gives the unpartitioned plan's results exactly (bit for bit in f64 and
//! f32), by construction:
//! - a local step computes each of its rows as the whole step does (the same kernel, the same
//!   columns in the same order); a SYRK's block of rows runs the whole SYRK's panel GEMMs of
//!   the same shapes (a GEMM's summation order depends on its shape) and keeps its rows;
//! - a sum over the points of real values (centroid norms' label sums, the objective, Lloyd's
//!   label sums of the points) is never split: its operand is all-gathered and the reduction
//!   runs replicated over all points in point order, as in the unpartitioned plan;
//! - only sums of integers (cluster sizes `counts(labels, k)`, and sums of comparisons such as
//!   the changed-labels count) are split into local sums and an all-reduce, and those are exact
//!   in any order while the total stays below 2^24 (f32) or 2^53 (f64), which the pass checks.
//!
//! One exception: a shared step (the recomputed kernel matrix's sums by label, `E = K V^T`
//! from the points) is split over the ranks and its partial sums of reals are all-reduced. A
//! backend that computes each row of its share in full, as the CPU does (equal blocks of rows,
//! zeros elsewhere), still gives the unpartitioned results bit for bit, since `x + 0 = x`; one
//! that splits the symmetric triangle of tiles (the GPU: each tile's row and mirror sums added
//! with atomics, already in no fixed order on one device) agrees to rounding.
//!
//! The all-reduce adds the ranks' partial sums in rank order (rank 0 first), so a backend whose
//! sums of reals were split the same way would still be reproducible run to run.

use super::{Elem, Plan, Step, StepOp, Value, ValueId};
use crate::ops::Builtin;
use crate::plan_error::PlanError;
use crate::types::{DType, Dim};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::ops::Range;

/// How to split a plan: dimension `dim` over `ranks` ranks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PartitionSpec {
    /// The dimension split into blocks of rows (the points, `n`).
    pub dim: String,
    /// Number of ranks, at least 1.
    pub ranks: usize,
}

impl PartitionSpec {
    /// The points `n` over `ranks` ranks.
    pub fn points(ranks: usize) -> PartitionSpec {
        PartitionSpec {
            dim: "n".into(),
            ranks,
        }
    }

    /// The rows `[start, end)` of rank `rank` among `size` rows: balanced blocks, the first
    /// `size % ranks` ranks one row longer; empty for a rank beyond the rows.
    pub fn rows(&self, size: usize, rank: usize) -> Range<usize> {
        let ranks = self.ranks.max(1);
        let (base, extra) = (size / ranks, size % ranks);
        let start = rank * base + rank.min(extra);
        let len = base + usize::from(rank < extra);
        start.min(size)..(start + len).min(size)
    }
}

/// Where a value lives across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Each rank holds its block of rows (all columns).
    Rows,
    /// Each rank holds the whole value.
    Replicated,
}

/// How a step runs on the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepMode {
    /// Over the rank's rows ([`Partition::local_step`]).
    Local,
    /// Whole, the same on every rank.
    Replicated,
    /// Over whole operands, each rank its [`Share`] of the work
    /// ([`Partition::shared_step`]), writing partial sums of whole outputs that an
    /// all-reduce adds up.
    Shared,
}

/// A rank's share of a symmetric contraction ([`StepMode::Shared`]): part `part` of `parts`.
/// Each backend splits the work its own way, so that the parts' outputs add up to the whole
/// step's: [`Share::rows`] (whole rows, equal blocks) or [`Share::triangle_rows`] (rows of
/// one triangle of the symmetric product, equal areas).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Share {
    /// This rank's part, `< parts`.
    pub part: usize,
    /// Number of parts (the ranks).
    pub parts: usize,
}

impl Share {
    /// Rows `[start, end)` of `n` in equal blocks (as [`PartitionSpec::rows`]): a part that
    /// computes its rows in full.
    pub fn rows(&self, n: usize) -> Range<usize> {
        PartitionSpec {
            dim: String::new(),
            ranks: self.parts,
        }
        .rows(n, self.part)
    }

    /// Rows `[start, end)` of `n` whose entries on and above the diagonal (row `i`: columns
    /// `i..n`) are about `1 / parts` of the triangle's, boundaries rounded to multiples of
    /// `align` (a kernel's block of rows): a part that computes one triangle of a symmetric
    /// product and adds each entry to its row and its column.
    pub fn triangle_rows(&self, n: usize, align: usize) -> Range<usize> {
        let boundary = |p: usize| -> usize {
            if p == 0 {
                return 0;
            }
            if p >= self.parts {
                return n;
            }
            // Rows [0, x) hold x n - x^2 / 2 entries of the triangle's n^2 / 2.
            let f = p as f64 / self.parts as f64;
            let x = n as f64 * (1.0 - (1.0 - f).sqrt());
            let a = align.max(1);
            (((x / a as f64).round() as usize) * a).min(n)
        };
        let start = boundary(self.part);
        start..boundary(self.part + 1).max(start)
    }
}

/// What a collective does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveKind {
    /// Every rank's rows of a value, concatenated in rank order, to every rank.
    AllGather,
    /// The element-wise sum of the ranks' copies of a value (added in rank order), to every
    /// rank.
    AllReduceSum,
}

/// A collective step of a partitioned plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Collective {
    /// What it does.
    pub kind: CollectiveKind,
    /// The value it completes: gathered whole, or summed over the ranks.
    pub value: ValueId,
    /// Its element type.
    pub elem: Elem,
    /// Elements of the whole value.
    pub len: usize,
}

impl Collective {
    /// Bytes of the value it delivers to each rank (the whole gathered value, or the summed
    /// buffer) for a plan of element type `dtype`.
    pub fn bytes(&self, dtype: DType) -> usize {
        let size = match self.elem {
            Elem::Float => dtype.size_bytes(),
            Elem::U32 | Elem::I32 => 4,
            Elem::Half(_) => 2,
        };
        self.len * size
    }

    /// `all-gather` or `all-reduce(sum)`.
    pub fn name(&self) -> &'static str {
        match self.kind {
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::AllReduceSum => "all-reduce(sum)",
        }
    }
}

/// One entry of a partitioned plan's schedule, run by every rank in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RankStep {
    /// Step `step` of the plan.
    Run {
        /// Index into [`Plan::steps`].
        step: usize,
        /// Over the rank's rows or whole.
        mode: StepMode,
        /// For each input, whether the rank reads its rows (else the whole value); all
        /// `false` in a replicated step.
        rows_of: Vec<bool>,
    },
    /// A collective between the ranks.
    Collective(Collective),
}

/// How a plan runs over several ranks (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// The dimension and the number of ranks.
    pub spec: PartitionSpec,
    /// The size of the dimension.
    pub size: usize,
    /// The placement of every value, by [`ValueId`].
    pub placements: Vec<Placement>,
    /// What every rank runs, in order.
    pub schedule: Vec<RankStep>,
}

impl Partition {
    /// The rows of rank `rank`.
    pub fn rows(&self, rank: usize) -> Range<usize> {
        self.spec.rows(self.size, rank)
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.spec.ranks
    }

    /// Whether `value`'s rows are the partitioned dimension (each rank has a block of them).
    pub fn splits(&self, value: &Value) -> bool {
        value
            .shape
            .as_ref()
            .is_some_and(|s| s.rows == Dim::Sym(self.spec.dim.clone()))
    }

    /// The placement of value `v`.
    pub fn placement(&self, v: ValueId) -> Placement {
        self.placements
            .get(v.0)
            .copied()
            .unwrap_or(Placement::Replicated)
    }

    /// The collectives of the schedule, in order.
    pub fn collectives(&self) -> impl Iterator<Item = &Collective> {
        self.schedule.iter().filter_map(|s| match s {
            RankStep::Collective(c) => Some(c),
            RankStep::Run { .. } => None,
        })
    }

    /// Bytes every rank receives from the collectives of one run.
    pub fn collective_bytes(&self, dtype: DType) -> usize {
        self.collectives().map(|c| c.bytes(dtype)).sum()
    }

    /// Step `index` of `plan` as rank `rank` runs it locally: over the rank's rows, the sizes of
    /// its operation rewritten (a product's or kernel's rows, a diagonal's first column), its
    /// estimates scaled to the rows.
    pub fn local_step(&self, plan: &Plan, index: usize, rank: usize) -> Result<Step, PlanError> {
        let rows = self.rows(rank);
        let mut step = plan.steps.get(index).cloned().ok_or_else(|| {
            PlanError::Invalid(format!("the partition runs step {index}, which is missing"))
        })?;
        match &mut step.op {
            StepOp::Gemm(g) => g.m = rows.len(),
            StepOp::SpMM { m, .. } | StepOp::SpGemm { m, .. } => *m = rows.len(),
            StepOp::Gemv { m, .. } => *m = rows.len(),
            StepOp::Fused(f) => {
                f.rows = rows.len();
                // A SYRK's product read as its lower triangle: the rank's SYRK wrote its rows
                // in full (see the partitioning pass), read as they are.
                let mut changed = false;
                for input in &mut f.spec.inputs {
                    if input.access == kernel_ir::Access::LowerSymmetric {
                        input.access = kernel_ir::Access::Matrix { transposed: false };
                        changed = true;
                    }
                }
                // Another spec is another kernel: its name follows the spec.
                if changed {
                    f.name = f.spec.name();
                }
            }
            StepOp::Syrk { row_block, .. } => *row_block = Some((rows.start, rows.end)),
            StepOp::Builtin(Builtin::Diag(d)) => {
                d.offset = rows.start;
                d.block = true;
            }
            StepOp::Builtin(
                Builtin::Counts(_)
                | Builtin::ClusterSums(_)
                | Builtin::PadCols(_)
                | Builtin::Densify(_)
                | Builtin::SparseRowNorms(_),
            )
            | StepOp::SpMV { .. }
            | StepOp::Copy => {}
            other => {
                return Err(PlanError::Invalid(format!(
                    "step {index} ({}) has no local form over a block of rows",
                    Step {
                        op: other.clone(),
                        ..step.clone()
                    }
                    .op_name()
                )))
            }
        }
        if self.size > 0 {
            let share = rows.len() as f64 / self.size as f64;
            step.flops *= share;
            step.bytes *= share;
        }
        Ok(step)
    }

    /// Step `index` of `plan` as rank `rank` runs it shared ([`StepMode::Shared`]): the whole
    /// step, marked with the rank's [`Share`].
    pub fn shared_step(&self, plan: &Plan, index: usize, rank: usize) -> Result<Step, PlanError> {
        let mut step = plan.steps.get(index).cloned().ok_or_else(|| {
            PlanError::Invalid(format!("the partition runs step {index}, which is missing"))
        })?;
        let StepOp::Fused(f) = &mut step.op else {
            return Err(PlanError::Invalid(format!(
                "step {index} ({}) is shared over the ranks but is no fused contraction",
                step.op_name()
            )));
        };
        f.share = Some(Share {
            part: rank,
            parts: self.ranks(),
        });
        let ranks = self.ranks().max(1) as f64;
        step.flops /= ranks;
        Ok(step)
    }

    /// The partition as text: the ranks' rows, the placements, the schedule with the
    /// collectives and their bytes.
    pub fn describe(&self, plan: &Plan) -> String {
        let mut s = String::new();
        let blocks: Vec<String> = (0..self.ranks())
            .map(|r| {
                let rows = self.rows(r);
                format!("{}: [{}, {})", r, rows.start, rows.end)
            })
            .collect();
        let _ = writeln!(
            s,
            "  partitioned along `{}` over {} rank(s), rows {}",
            self.spec.dim,
            self.ranks(),
            blocks.join(" ")
        );
        let names = |p: Placement| -> String {
            let v: Vec<&str> = plan
                .values
                .iter()
                .enumerate()
                .filter(|(i, v)| {
                    self.placements.get(*i) == Some(&p)
                        && !matches!(v.kind, super::ValueKind::Scalar(_))
                })
                .map(|(_, v)| v.name.as_str())
                .collect();
            if v.is_empty() {
                "-".into()
            } else {
                v.join(", ")
            }
        };
        let _ = writeln!(s, "  each rank its rows of: {}", names(Placement::Rows));
        let _ = writeln!(s, "  replicated: {}", names(Placement::Replicated));
        let _ = writeln!(s, "  rank schedule:");
        for entry in &self.schedule {
            let _ = match entry {
                RankStep::Run { step, mode, .. } => writeln!(
                    s,
                    "    step {step:<3} {:<13} {}",
                    plan.steps.get(*step).map_or("?".into(), Step::op_name),
                    match mode {
                        StepMode::Local => "local rows",
                        StepMode::Replicated => "replicated",
                        StepMode::Shared => "shared (each rank a part, partial sums)",
                    }
                ),
                RankStep::Collective(c) => writeln!(
                    s,
                    "    {:<17} {} ({} {}): {}B",
                    c.name(),
                    plan.value(c.value).name,
                    plan.value(c.value).type_string(),
                    match c.elem {
                        Elem::Float => plan.dtype.to_string(),
                        Elem::U32 => "u32".into(),
                        Elem::I32 => "i32".into(),
                        Elem::Half(h) => h.to_string(),
                    },
                    super::display::si(c.bytes(plan.dtype) as f64)
                ),
            };
        }
        let _ = write!(
            s,
            "  collectives: {} per run, {}B to each rank",
            self.collectives().count(),
            super::display::si(self.collective_bytes(plan.dtype) as f64)
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries on and above the diagonal in rows `r` of an `n x n` matrix.
    fn triangle_area(n: usize, r: &Range<usize>) -> usize {
        r.clone().map(|i| n - i).sum()
    }

    #[test]
    fn triangle_shares_cover_the_rows_on_whole_blocks_with_equal_areas() {
        for (n, parts, align) in [
            (1, 2, 128),
            (100, 3, 128),
            (1001, 2, 128),
            (4099, 3, 128),
            (1_000_000, 2, 128),
            (1_000_000, 7, 128),
            (10, 4, 1),
        ] {
            let shares: Vec<Range<usize>> = (0..parts)
                .map(|part| Share { part, parts }.triangle_rows(n, align))
                .collect();
            assert_eq!(shares[0].start, 0, "n={n} parts={parts}");
            assert_eq!(shares[parts - 1].end, n, "n={n} parts={parts}");
            for w in shares.windows(2) {
                assert_eq!(w[0].end, w[1].start, "n={n} parts={parts}: {shares:?}");
            }
            for r in &shares[..parts - 1] {
                assert!(
                    r.end % align == 0 || r.end == n,
                    "n={n} parts={parts}: {r:?} ends inside a block of {align}"
                );
            }
            // Equal areas, up to one block of rows (at most n * align entries) per boundary.
            let whole = n * (n + 1) / 2;
            for r in &shares {
                let area = triangle_area(n, r) as f64;
                let ideal = whole as f64 / parts as f64;
                assert!(
                    (area - ideal).abs() <= (2 * n * align) as f64,
                    "n={n} parts={parts}: {r:?} holds {area} of the triangle's {whole}"
                );
            }
        }
        // Equal blocks of whole rows, as the partition's.
        let rows: Vec<Range<usize>> = (0..3)
            .map(|part| Share { part, parts: 3 }.rows(10))
            .collect();
        assert_eq!(rows, vec![0..4, 4..7, 7..10]);
    }

    #[test]
    fn blocks_are_balanced_and_cover_the_rows() {
        let spec = PartitionSpec::points(3);
        let blocks: Vec<Range<usize>> = (0..3).map(|r| spec.rows(10, r)).collect();
        assert_eq!(blocks, vec![0..4, 4..7, 7..10]);
        // Fewer rows than ranks: the last ranks are empty.
        let blocks: Vec<Range<usize>> = (0..3).map(|r| spec.rows(2, r)).collect();
        assert_eq!(blocks, vec![0..1, 1..2, 2..2]);
        assert_eq!(PartitionSpec::points(1).rows(7, 0), 0..7);
        for n in 0..20 {
            for p in 1..6 {
                let spec = PartitionSpec::points(p);
                let mut next = 0;
                for r in 0..p {
                    let rows = spec.rows(n, r);
                    assert_eq!(rows.start, next, "n={n} p={p} r={r}");
                    assert!(rows.len() <= n.div_ceil(p));
                    next = rows.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn collectives_count_their_bytes() {
        let gather = Collective {
            kind: CollectiveKind::AllGather,
            value: ValueId(0),
            elem: Elem::Float,
            len: 10,
        };
        assert_eq!(gather.bytes(DType::F64), 80);
        assert_eq!(gather.bytes(DType::F32), 40);
        let labels = Collective {
            elem: Elem::U32,
            ..gather.clone()
        };
        assert_eq!(labels.bytes(DType::F64), 40);
        assert_eq!(gather.name(), "all-gather");
    }
}
