//! Short steps run on a second lane beside a plan's longest step.
//!
//! A stored-K Kernel K-means iteration spends most of its time in one step, the cluster sums
//! over K, while a few short steps before it (the cluster sizes, the map of the selection's
//! weights, the diagonal) neither feed it nor need it. On a small problem each of those is a
//! kernel of a few microseconds that the sums wait for. [`side_lane`] picks such steps so that
//! the executor can queue them on lane 1 while lane 0 runs the long step:
//!
//! - the long step is the plan's first cluster sums ([`Builtin::ClusterSums`]), and it reads at
//!   most [`SIDE_LANE_MAX_BYTES`] (a small problem, where the side steps' microseconds count);
//! - a side step comes before it, is a generated kernel other than a contraction or a
//!   cluster-size or diagonal builtin (kernels whose launches use only their lane's stream and
//!   their lane's scratch), is part of no pipeline, and none of the steps that stay on lane 0
//!   between it and the long step (the long step included) reads what it writes;
//! - no buffer is shared between a side step and a lane-0 step between it and the long step in
//!   a way that concurrency could break: the lane-0 step writes none of the side step's
//!   buffers, and reads none that the side step writes. (The planner lets values whose lives do
//!   not overlap in the plan's order share a buffer; a side step runs later than its place in
//!   that order.)
//!
//! The executor then queues, where the long step would start: lane 1 waits for lane 0's work so
//! far, the side steps on lane 1 in plan order, the long step on lane 0, and lane 0 waits for
//! lane 1 before the next step. The results are those of the steps in plan order, bit for bit:
//! every step computes the same values from the same inputs.

use kernel_ir::Form;
use popcorn_dsl::ops::Builtin;
use popcorn_dsl::plan::{Home, Plan, Step, StepOp, ValueId};
use std::collections::HashSet;

/// The most bytes the long step may move for the side lane to be used: beyond, its own time
/// dwarfs the side steps' (a few microseconds each), and running them beside it was measured to
/// slow the f32 cluster sums of mnist's shape (60000 points, K 14.4 GB) by 8% at k = 10 and 50
/// (BENCHMARKS.md, run 36; most likely its persistent grid, placed while the side steps held
/// some multiprocessors, ran unevenly).
pub(crate) const SIDE_LANE_MAX_BYTES: f64 = (1u64 << 30) as f64;

/// Which steps run beside which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SideLane {
    /// The long step, on lane 0.
    pub(crate) main: usize,
    /// The steps queued on lane 1 beside it, in plan order (all before `main`).
    pub(crate) side: Vec<usize>,
}

impl SideLane {
    /// Whether step `i` is one of the side steps.
    pub(crate) fn is_side(&self, i: usize) -> bool {
        self.side.binary_search(&i).is_ok()
    }
}

/// Where a value's elements live: a plan buffer, or a caller's tensor by name. Host scalars
/// live nowhere in device memory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Storage {
    Buffer(usize),
    Tensor(String),
}

fn storage(plan: &Plan, v: ValueId) -> Vec<Storage> {
    match plan.values.get(v.0).map(|v| &v.home) {
        Some(Home::Temp(ids)) => ids.iter().map(|b| Storage::Buffer(b.0)).collect(),
        Some(Home::Input(name) | Home::Output(name) | Home::InOutput(name)) => {
            vec![Storage::Tensor(name.clone())]
        }
        Some(Home::Host) | None => Vec::new(),
    }
}

fn storages(plan: &Plan, values: &[ValueId]) -> HashSet<Storage> {
    values.iter().flat_map(|v| storage(plan, *v)).collect()
}

/// Whether `step` may run on the second lane: its launches use only the lane's stream and the
/// lane's scratch.
fn may_run_beside(step: &Step) -> bool {
    match &step.op {
        StepOp::Fused(f) => !matches!(f.spec.form, Form::Contraction { .. }),
        StepOp::Builtin(Builtin::Counts(_) | Builtin::Diag(_)) => true,
        _ => false,
    }
}

/// The steps of `plan` to run beside its first cluster sums, or `None` where there are none.
pub(crate) fn side_lane(plan: &Plan) -> Option<SideLane> {
    let main = plan
        .steps
        .iter()
        .position(|s| matches!(s.op, StepOp::Builtin(Builtin::ClusterSums(_))))?;
    let pipelined: HashSet<usize> = plan
        .pipelines
        .iter()
        .flat_map(|p| [p.producer, p.producer + 1])
        .collect();
    if pipelined.contains(&main) || plan.steps[main].bytes > SIDE_LANE_MAX_BYTES {
        return None;
    }
    // Where each step up to the long one reads and writes, found once.
    let reads: Vec<HashSet<Storage>> = plan.steps[..=main]
        .iter()
        .map(|s| storages(plan, &s.inputs))
        .collect();
    let writes: Vec<HashSet<Storage>> = plan.steps[..=main]
        .iter()
        .map(|s| storages(plan, &s.outputs))
        .collect();
    // Decided from the long step down: when step j is weighed, every step after it is placed.
    let mut side: Vec<usize> = Vec::new();
    for j in (0..main).rev() {
        let step = &plan.steps[j];
        if pipelined.contains(&j) || !may_run_beside(step) {
            continue;
        }
        let conflict = (j + 1..=main).filter(|k| !side.contains(k)).any(|k| {
            plan.steps[k]
                .inputs
                .iter()
                .any(|v| step.outputs.contains(v))
                || writes[k]
                    .iter()
                    .any(|s| writes[j].contains(s) || reads[j].contains(s))
                || reads[k].iter().any(|s| writes[j].contains(s))
        });
        if !conflict {
            side.push(j);
        }
    }
    side.reverse();
    (!side.is_empty()).then_some(SideLane { main, side })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_steps::reference_gpu_plan;
    use popcorn_dsl::plan::BufferId;
    use popcorn_dsl::Program;

    const KKM: &str = include_str!("../../examples/programs/kernel_kmeans.pop");

    fn gpu_plan(name: &str, dims: &[(&str, usize)]) -> Plan {
        let p = Program::parse_all(KKM)
            .unwrap()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        reference_gpu_plan(&p, dims)
    }

    #[test]
    fn the_iterations_short_first_steps_run_beside_its_cluster_sums() {
        let plan = gpu_plan("kkmeans_iteration", &[("n", 10_500), ("k", 26)]);
        let lane = side_lane(&plan).unwrap_or_else(|| panic!("no side lane in\n{plan}"));
        assert_eq!(plan.steps[lane.main].op_name(), "cluster sums", "{plan}");
        assert!(!lane.side.is_empty());
        for &s in &lane.side {
            assert!(s < lane.main);
            assert!(may_run_beside(&plan.steps[s]), "{plan}");
            // The sums read nothing a side step writes.
            for v in &plan.steps[s].outputs {
                assert!(!plan.steps[lane.main].inputs.contains(v), "{plan}");
            }
        }
        let names: Vec<String> = lane.side.iter().map(|&s| plan.steps[s].op_name()).collect();
        assert!(names.contains(&"counts".to_string()), "{names:?}\n{plan}");
        assert!(names.contains(&"diag".to_string()), "{names:?}\n{plan}");
    }

    #[test]
    fn large_problems_keep_one_lane() {
        let plan = gpu_plan("kkmeans_iteration", &[("n", 60_000), ("k", 10)]);
        assert!(plan.steps.iter().any(|s| s.op_name() == "cluster sums"));
        assert_eq!(side_lane(&plan), None);
    }

    #[test]
    fn plans_without_cluster_sums_have_no_side_lane() {
        let p = Program::parse("fn f(x: Col[n]) -> (y: Col[n]) { y = 2 * x; }").unwrap();
        let plan = reference_gpu_plan(&p, &[("n", 100)]);
        assert_eq!(side_lane(&plan), None);
    }

    #[test]
    fn a_step_whose_buffer_a_later_step_reuses_stays_on_lane_zero() {
        let mut plan = gpu_plan("kkmeans_iteration", &[("n", 10_500), ("k", 26)]);
        let lane = side_lane(&plan).unwrap();
        let first = lane.side[0];
        // Give the long step's output the buffer of the first side step's output: running that
        // step beside the long one could then race with it.
        let written = plan.steps[first].outputs[0];
        let Home::Temp(ids) = plan.values[written.0].home.clone() else {
            panic!("a side step writes a caller's tensor")
        };
        let out = plan.steps[lane.main].outputs[0];
        plan.values[out.0].home = Home::Temp(vec![BufferId(ids[0].0)]);
        let again = side_lane(&plan);
        assert!(
            again.as_ref().is_none_or(|l| !l.is_side(first)),
            "{again:?}"
        );
    }
}
