//! Runs a plan on a backend: resolves every value of every step to its buffers (the caller's
//! tensors, the plan's workspace, or host scalars) and calls the backend step by step. A
//! plan's pipelined steps ([`Pipeline`]) run band by band on two lanes where the backend has
//! them, and one after the other where it has one; on two lanes the short steps before a
//! plan's cluster sums that the sums do not read run beside them on the second lane
//! (`side_lane`).
//!
//! Switches ([`popcorn_dsl::settings`]): `POPCORN_SYNC=1` synchronises after every step, so an
//! asynchronous failure is reported by the step that caused it; `POPCORN_LOG=time` prints every
//! step's device time with its rates (both queue every step on one lane, in plan order);
//! `POPCORN_NO_SIDE_LANE=1` keeps every step on one lane.

use crate::backend::{Arg, Backend, ElemType};
use crate::error::RuntimeError;
use crate::side_lane::{side_lane, SideLane};
use popcorn_dsl::plan::{Elem, Home, Pipeline, Plan, Step, StepOp, StepPart, ValueId, ValueKind};
use popcorn_dsl::{DimBindings, ScalarBindings};
use std::collections::HashMap;

/// The plan-owned buffers of one plan on one backend, allocated once and reused by every run
/// (transient buffers excepted: those are allocated for each run), and the steps its runs
/// queue beside the plan's long step on a second lane, chosen once.
pub struct Workspace<B: Backend> {
    buffers: Vec<Option<B::Buf>>,
    beside: Option<SideLane>,
}

/// The backend element type of a plan buffer.
fn elem_type(plan: &Plan, elem: Elem) -> ElemType {
    match elem {
        Elem::Float => ElemType::float(plan.dtype),
        Elem::U32 => ElemType::U32,
        Elem::I32 => ElemType::I32,
        Elem::Half(h) => ElemType::Half(h),
    }
}

impl<B: Backend> Workspace<B> {
    /// A workspace holding nothing (for plans whose runs allocate their own buffers).
    pub fn empty() -> Workspace<B> {
        Workspace {
            buffers: Vec::new(),
            beside: None,
        }
    }

    /// Checks `plan` ([`Plan::validate`]) and allocates every buffer it keeps.
    pub fn allocate(backend: &B, plan: &Plan) -> Result<Workspace<B>, RuntimeError> {
        plan.validate()?;
        let buffers = plan
            .buffers
            .iter()
            .map(|b| {
                if b.transient {
                    Ok(None)
                } else {
                    backend
                        .alloc(elem_type(plan, b.elem), b.len.max(1))
                        .map(Some)
                }
            })
            .collect::<Result<_, _>>()?;
        let settings = popcorn_dsl::settings::settings();
        let lanes_free =
            !settings.sync && !settings.log.time && !settings.no_side_lane && backend.lanes() >= 2;
        Ok(Workspace {
            buffers,
            beside: lanes_free.then(|| side_lane(plan)).flatten(),
        })
    }
}

/// The scalar factor of a library step, or 1.
fn alpha_of(op: &StepOp) -> Option<&popcorn_dsl::ScalarExpr> {
    match op {
        StepOp::Gemm(g) => Some(&g.alpha),
        StepOp::Syrk { alpha, .. }
        | StepOp::Gemv { alpha, .. }
        | StepOp::SpMM { alpha, .. }
        | StepOp::SpGemm { alpha, .. }
        | StepOp::SpMV { alpha, .. } => Some(alpha),
        _ => None,
    }
}

/// The evaluated scalar factor of `step` (1 for steps without one).
pub(crate) fn alpha(
    step: &Step,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<f64, RuntimeError> {
    match alpha_of(&step.op) {
        Some(e) => e
            .eval(scalars, dims)
            .map_err(|e| RuntimeError::Binding(e.to_string())),
        None => Ok(1.0),
    }
}

/// Runs every step of `plan`. `inputs` and `outputs` map names to the caller's tensors (as
/// [`Arg`]s); `scalars` gives scalar parameters; `dims` the dimension sizes. The workspace
/// must have been allocated for this plan ([`Workspace::allocate`], which validates it).
pub fn execute<B: Backend>(
    backend: &B,
    plan: &Plan,
    workspace: &Workspace<B>,
    inputs: &HashMap<String, Arg<'_, B::Buf>>,
    outputs: &HashMap<String, Arg<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<(), RuntimeError> {
    let transient = allocate_transient(backend, plan)?;
    execute_with(
        backend, plan, workspace, &transient, inputs, outputs, scalars, dims,
    )
}

/// The plan's transient buffers (those a run allocates for itself), by buffer; `None` for
/// the workspace's.
pub(crate) fn allocate_transient<B: Backend>(
    backend: &B,
    plan: &Plan,
) -> Result<Vec<Option<B::Buf>>, RuntimeError> {
    plan.buffers
        .iter()
        .map(|b| {
            if b.transient {
                backend
                    .alloc(elem_type(plan, b.elem), b.len.max(1))
                    .map(Some)
            } else {
                Ok(None)
            }
        })
        .collect()
}

/// [`execute`] with the transient buffers given ([`allocate_transient`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_with<B: Backend>(
    backend: &B,
    plan: &Plan,
    workspace: &Workspace<B>,
    transient: &[Option<B::Buf>],
    inputs: &HashMap<String, Arg<'_, B::Buf>>,
    outputs: &HashMap<String, Arg<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<(), RuntimeError> {
    if workspace.buffers.len() != plan.buffers.len() || transient.len() != plan.buffers.len() {
        return Err(RuntimeError::InvalidData(format!(
            "the workspace holds {} buffers but the plan of `{}` has {}: allocate it for this plan",
            workspace.buffers.len(),
            plan.program,
            plan.buffers.len()
        )));
    }
    let env = Env {
        plan,
        workspace,
        transient,
        inputs,
        outputs,
        scalars,
        dims,
    };
    let settings = popcorn_dsl::settings::settings();
    let mut marks = Vec::new();
    if settings.log.time {
        marks.push(backend.mark()?);
    }
    let mut i = 0;
    while i < plan.steps.len() {
        let steps_run = match plan.pipeline_from(i) {
            Some(pipeline) => {
                run_pipeline(backend, &env, pipeline).map_err(|e| env.named(i, true, e))?;
                2
            }
            None => {
                match &workspace.beside {
                    // Queued beside the long step, when it comes.
                    Some(b) if b.is_side(i) => {}
                    Some(b) if b.main == i => run_beside(backend, &env, b)?,
                    _ => queue_whole(backend, &env, i, 0)?,
                }
                1
            }
        };
        if settings.sync {
            backend
                .synchronize()
                .map_err(|e| env.named(i, steps_run == 2, e))?;
        }
        if settings.log.time {
            // A pipeline's consumer's time is in its producer's: both steps end at one mark.
            for _ in 0..steps_run {
                marks.push(backend.mark().map_err(|e| env.named(i, false, e))?);
            }
        }
        i += steps_run;
    }
    if settings.log.time {
        print_step_times(backend, plan, &marks)?;
    }
    Ok(())
}

/// Everything a step's values resolve against.
struct Env<'p, 'a, B: Backend> {
    plan: &'p Plan,
    workspace: &'p Workspace<B>,
    transient: &'p [Option<B::Buf>],
    inputs: &'p HashMap<String, Arg<'a, B::Buf>>,
    outputs: &'p HashMap<String, Arg<'a, B::Buf>>,
    scalars: &'p ScalarBindings,
    dims: &'p DimBindings,
}

/// A step's resolved inputs and outputs.
type Io<'b, Buf> = (Vec<Arg<'b, Buf>>, Vec<Arg<'b, Buf>>);

impl<'p, 'a: 'p, B: Backend> Env<'p, 'a, B> {
    /// The error of step `i` (and, for a pipeline, of the step after it), naming the step.
    fn named(&self, i: usize, pipelined: bool, e: RuntimeError) -> RuntimeError {
        let step = &self.plan.steps[i];
        let mut values: Vec<ValueId> = step.outputs.clone();
        let mut op = step.op_name();
        if let (true, Some(next)) = (pipelined, self.plan.steps.get(i + 1)) {
            // Errors name both steps: either may have caused them.
            op = format!("{op} with step {}'s overlapped {}", i + 1, next.op_name());
            values.extend(&next.outputs);
        }
        RuntimeError::Step {
            step: i,
            op,
            what: values
                .iter()
                .map(|o| self.plan.value(*o).name.clone())
                .collect::<Vec<_>>()
                .join(", "),
            source: Box::new(e),
        }
    }

    /// Buffer `id` of the plan.
    fn buffer(&self, id: popcorn_dsl::plan::BufferId) -> Result<&'p B::Buf, RuntimeError> {
        let kept = self.workspace.buffers.get(id.0).and_then(Option::as_ref);
        let run = self.transient.get(id.0).and_then(Option::as_ref);
        kept.or(run).ok_or_else(|| {
            RuntimeError::InvalidData(format!("the plan's buffer {} is not allocated", id.0))
        })
    }

    /// The argument value `id` resolves to.
    fn resolve(&self, id: ValueId) -> Result<Arg<'p, B::Buf>, RuntimeError> {
        let v =
            self.plan.values.get(id.0).ok_or_else(|| {
                RuntimeError::InvalidData(format!("the plan has no value {}", id.0))
            })?;
        let missing = |what: &str, name: &str| {
            RuntimeError::Binding(format!("{what} `{name}` was not provided"))
        };
        Ok(match &v.home {
            Home::Input(name) => self
                .inputs
                .get(name)
                .cloned()
                .ok_or_else(|| missing("input", name))?,
            Home::Output(name) => self
                .outputs
                .get(name)
                .cloned()
                .ok_or_else(|| missing("output", name))?,
            Home::InOutput(name) => match self.outputs.get(name) {
                Some(Arg::Dense { buf, .. }) | Some(Arg::Index { buf, .. }) => match v.kind {
                    ValueKind::Index => Arg::Index { buf, len: v.rows },
                    _ => Arg::Dense {
                        buf,
                        rows: v.rows,
                        cols: v.cols,
                    },
                },
                _ => return Err(missing("output", name)),
            },
            Home::Temp(ids) => {
                let b = |i: usize| -> Result<&'p B::Buf, RuntimeError> {
                    let id = ids.get(i).ok_or_else(|| {
                        RuntimeError::InvalidData(format!("value `{}` has too few buffers", v.name))
                    })?;
                    self.buffer(*id)
                };
                match &v.kind {
                    ValueKind::Dense => Arg::Dense {
                        buf: b(0)?,
                        rows: v.rows,
                        cols: v.cols,
                    },
                    ValueKind::Index => Arg::Index {
                        buf: b(0)?,
                        len: v.rows,
                    },
                    ValueKind::Csr { nnz } => Arg::Csr {
                        row_ptr: b(0)?,
                        col_idx: b(1)?,
                        values: b(2)?,
                        rows: v.rows,
                        cols: v.cols,
                        nnz: nnz.unwrap_or(v.cols),
                    },
                    ValueKind::Scalar(_) => {
                        return Err(RuntimeError::InvalidData(format!(
                            "scalar `{}` placed in device buffers",
                            v.name
                        )))
                    }
                }
            }
            Home::Host => match &v.kind {
                ValueKind::Scalar(e) => Arg::Scalar(
                    e.eval(self.scalars, self.dims)
                        .map_err(|e| RuntimeError::Binding(e.to_string()))?,
                ),
                _ => {
                    return Err(RuntimeError::InvalidData(format!(
                        "value `{}` lives on the host but is not a scalar",
                        v.name
                    )))
                }
            },
        })
    }

    /// The resolved inputs and outputs of `step`.
    fn io(&self, step: &Step) -> Result<Io<'p, B::Buf>, RuntimeError> {
        let ins = step
            .inputs
            .iter()
            .map(|v| self.resolve(*v))
            .collect::<Result<_, _>>()?;
        let outs = step
            .outputs
            .iter()
            .map(|v| self.resolve(*v))
            .collect::<Result<_, _>>()?;
        Ok((ins, outs))
    }

    /// The evaluated scalar factor of `step` (1 for steps without one).
    fn alpha(&self, step: &Step) -> Result<f64, RuntimeError> {
        alpha(step, self.scalars, self.dims)
    }
}

/// Runs `lane.side` on lane 1 beside `lane.main` on lane 0: lane 1 first waits for lane 0's
/// work so far, and lane 0 waits for lane 1 after the long step (also after an error part way),
/// so every later step sees the side steps' results.
fn run_beside<B: Backend>(
    backend: &B,
    env: &Env<'_, '_, B>,
    lane: &SideLane,
) -> Result<(), RuntimeError> {
    let queue = || -> Result<(), RuntimeError> {
        backend.order_lanes(0, 1)?;
        for &s in &lane.side {
            queue_whole(backend, env, s, 1)?;
        }
        queue_whole(backend, env, lane.main, 0)
    };
    let queued = queue();
    let joined = backend.join_lanes();
    queued.and(joined)
}

/// Queues step `i` whole on lane `lane`, its errors naming it.
fn queue_whole<B: Backend>(
    backend: &B,
    env: &Env<'_, '_, B>,
    i: usize,
    lane: usize,
) -> Result<(), RuntimeError> {
    let plan = env.plan;
    let step = &plan.steps[i];
    let queued = env.io(step).and_then(|(ins, outs)| {
        let alpha = env.alpha(step)?;
        if lane == 0 {
            backend.run_step(step, &ins, &outs, plan.dtype, alpha)
        } else {
            backend.run_part(step, &ins, &outs, plan.dtype, alpha, StepPart::Whole, lane)
        }
    });
    queued.map_err(|e| env.named(i, false, e))
}

/// Runs a pipeline: on a backend with two lanes, the producer's prologue and then, band by
/// band, the producer's band on lane 0 and the consumer's on lane 1 once the band is written,
/// joining the lanes at the end (also after an error part way); elsewhere the two steps whole,
/// one after the other.
fn run_pipeline<B: Backend>(
    backend: &B,
    env: &Env<'_, '_, B>,
    pipeline: &Pipeline,
) -> Result<(), RuntimeError> {
    let plan = env.plan;
    let producer = &plan.steps[pipeline.producer];
    let consumer = plan.steps.get(pipeline.producer + 1).ok_or_else(|| {
        RuntimeError::InvalidData("a pipeline's producer is the last step".into())
    })?;
    let (p_in, p_out) = env.io(producer)?;
    let (c_in, c_out) = env.io(consumer)?;
    let alpha = env.alpha(producer)?;
    let dtype = plan.dtype;
    if backend.lanes() < 2 {
        backend.run_step(producer, &p_in, &p_out, dtype, alpha)?;
        return backend.run_step(consumer, &c_in, &c_out, dtype, 1.0);
    }
    let queue = || -> Result<(), RuntimeError> {
        backend.run_part(producer, &p_in, &p_out, dtype, alpha, StepPart::Prologue, 0)?;
        for &(r0, r1) in &pipeline.bands {
            let band = StepPart::Band(r0, r1);
            backend.run_part(producer, &p_in, &p_out, dtype, alpha, band, 0)?;
            backend.order_lanes(0, 1)?;
            backend.run_part(consumer, &c_in, &c_out, dtype, 1.0, band, 1)?;
        }
        Ok(())
    };
    let queued = queue();
    // Lane 0 waits for every band queued, also when queuing stopped part way.
    let joined = backend.join_lanes();
    queued.and(joined)
}

/// `POPCORN_LOG=time`: each step's time between the marks recorded around it, with the rates
/// of its planned flops and bytes, on stderr.
fn print_step_times<B: Backend>(
    backend: &B,
    plan: &Plan,
    marks: &[B::Mark],
) -> Result<(), RuntimeError> {
    let mut total = 0.0;
    let mut lines = Vec::with_capacity(plan.steps.len());
    for (i, (step, pair)) in plan.steps.iter().zip(marks.windows(2)).enumerate() {
        let ms = backend.elapsed_ms(&pair[0], &pair[1])?;
        total += ms;
        let secs = (ms * 1e-3).max(1e-12);
        if i > 0 && plan.pipeline_from(i - 1).is_some() {
            lines.push(format!(
                "  {i:<4} {:<13} overlapped: its time is in the step above",
                step.op_name()
            ));
            continue;
        }
        // A pipeline's producer: the rates count both steps' work.
        let (bytes, flops, note) = match (plan.pipeline_from(i), plan.steps.get(i + 1)) {
            (Some(_), Some(next)) => (
                step.bytes + next.bytes,
                step.flops + next.flops,
                "  (with the next step's map)",
            ),
            _ => (step.bytes, step.flops, ""),
        };
        lines.push(format!(
            "  {i:<4} {:<13} {ms:>10.3} ms {:>9.1} GB/s {:>8.2} TFLOP/s{note}",
            step.op_name(),
            bytes / secs / 1e9,
            flops / secs / 1e12,
        ));
    }
    eprintln!(
        "[popcorn time] {} ({} steps, {total:.3} ms on the device)\n{}",
        plan.program,
        plan.steps.len(),
        lines.join("\n")
    );
    Ok(())
}
