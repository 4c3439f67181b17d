//! The planner: runs the [`PIPELINE`] of passes over a program's graph for concrete dimension
//! sizes and a target, lowering the graph to a [`Plan`] on the way.

use crate::lower::lower;
use crate::passes::{PassContext, PlanError, PlannerConfig, Stage, PIPELINE};
use crate::plan::Plan;
use crate::program::Program;
use crate::target::Target;
use crate::types::DimBindings;
use std::collections::BTreeMap;

/// Plans `program` for the sizes in `dims` on `target`. `nnz` gives the number of stored entries
/// of CSR inputs where known (it only affects the cost estimates). With `POPCORN_LOG=plan` the
/// graph after each graph pass and the final plan go to stderr.
pub fn plan(
    program: &Program,
    dims: &DimBindings,
    config: &PlannerConfig,
    target: &Target,
    nnz: &BTreeMap<String, usize>,
) -> Result<Plan, PlanError> {
    let mut g = program.graph.clone();
    g.remove_dead();
    let cx = PassContext {
        dims,
        config,
        target,
        nnz,
    };
    let log = crate::log::enabled("plan");
    let mut plan: Option<Plan> = None;
    for stage in PIPELINE {
        match (stage, plan.as_mut()) {
            (Stage::Graph(pass), None) => {
                let changed = pass.run(&mut g, &cx)?;
                if log {
                    eprintln!(
                        "[popcorn plan] after pass `{}` (changed: {changed}):\n{g}",
                        pass.name()
                    );
                }
            }
            (Stage::Lower, None) => plan = Some(lower(program, &g, &cx, nnz)?),
            (Stage::Plan(pass), Some(p)) => {
                pass.run(p, &cx)?;
            }
            (stage, _) => {
                return Err(PlanError::Internal {
                    pass: stage.name(),
                    message:
                        "the pass list runs graph passes before lowering and plan passes after"
                            .into(),
                })
            }
        }
    }
    let plan = plan.ok_or_else(|| PlanError::Internal {
        pass: "lower",
        message: "the pass list never lowers the graph".into(),
    })?;
    if log {
        eprintln!("[popcorn plan]\n{plan}");
    }
    Ok(plan)
}
