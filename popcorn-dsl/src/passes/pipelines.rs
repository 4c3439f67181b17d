//! Pipelined steps (on the lowered plan): a SYRK that writes its lower triangle block row by
//! block row, followed by the map that reads it, run together: the map processes each band of
//! rows as soon as the product has written it, beside the product's next block rows, so the
//! map's memory traffic overlaps the product's arithmetic ([`Pipeline`]).
//!
//! It needs a target that runs work concurrently in bands ([`Target::band_rows_multiple`]),
//! block rows on multiples of that band size, the map the very next step, and the user's
//! [`overlap`](super::PlannerConfig::overlap) switch on.
//!
//! [`Target::band_rows_multiple`]: crate::target::Target::band_rows_multiple

use super::{PassContext, PlanError, PlanPass};
use crate::plan::{block_row_ranges, Pipeline, Plan, StepOp};

/// The pipelining pass.
pub struct Pipelines;

impl PlanPass for Pipelines {
    fn name(&self) -> &'static str {
        "pipelines"
    }

    fn run(&self, plan: &mut Plan, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let Some(multiple) = cx.target.band_rows_multiple.filter(|m| *m > 0) else {
            return Ok(false);
        };
        // A partitioned plan's ranks each compute their block of rows of the product in one
        // step (a band pipeline over the whole matrix has no block form yet).
        if !cx.config.overlap || cx.config.partition.is_some() {
            return Ok(false);
        }
        let mut changed = false;
        for s in 0..plan.steps.len().saturating_sub(1) {
            let StepOp::Syrk {
                n,
                lower_only: true,
                block_rows,
                ..
            } = plan.steps[s].op
            else {
                continue;
            };
            if block_rows == 0 || !block_rows.is_multiple_of(multiple) {
                continue;
            }
            let map = &plan.steps[s + 1];
            let reads_it = plan.steps[s].outputs.iter().all(|o| map.inputs.contains(o));
            let banded = matches!(&map.op, StepOp::Fused(f) if f.spec.runs_in_bands() && f.rows == n && f.cols == n);
            if !reads_it || !banded || plan.pipelines.iter().any(|p| p.producer == s) {
                continue;
            }
            plan.pipelines.push(Pipeline {
                producer: s,
                bands: block_row_ranges(n, block_rows).collect(),
            });
            changed = true;
        }
        Ok(changed)
    }
}
