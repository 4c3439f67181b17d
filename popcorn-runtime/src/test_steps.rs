//! Plan steps for the backends' unit tests: an operation with no plan around it.

use popcorn_dsl::plan::{Step, StepOp};

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
