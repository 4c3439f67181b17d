//! Plan steps and plans for the runtime's unit tests: an operation with no plan around it, and
//! a program's plan for the reference GPU.

use popcorn_dsl::plan::{Plan, Step, StepOp};
use popcorn_dsl::{DimBindings, PlannerConfig, Program, Target};
use std::collections::BTreeMap;

/// The plan of `program` at `dims` for the reference GPU, with the default planner settings.
pub(crate) fn reference_gpu_plan(program: &Program, dims: &[(&str, usize)]) -> Plan {
    let dims: DimBindings = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    popcorn_dsl::plan(
        program,
        &dims,
        &PlannerConfig::default(),
        &Target::reference_gpu(),
        &BTreeMap::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A step running `op`, with no plan values, costs or provenance beyond "test".
pub(crate) fn step(op: StepOp) -> Step {
    Step {
        op,
        inputs: vec![],
        outputs: vec![],
        provenance: vec!["test".into()],
        flops: 0.0,
        bytes: 0.0,
    }
}
