//! Runs a plan on a backend: resolves every value of every step to its buffers (caller's
//! tensors, plan workspace, or host scalars) and calls the backend step by step.

use crate::backend::{Arg, Backend, ElemType};
use crate::error::RuntimeError;
use popcorn_dsl::plan::{Elem, Home, Plan, Step, StepOp, ValueId, ValueKind};
use popcorn_dsl::{DimBindings, ScalarBindings};
use std::collections::HashMap;

/// The plan-owned buffers of one plan on one backend, allocated once and reused by every run.
pub struct Workspace<B: Backend> {
    buffers: Vec<B::Buf>,
}

impl<B: Backend> Workspace<B> {
    /// Allocates every buffer of `plan`.
    pub fn allocate(backend: &B, plan: &Plan) -> Result<Workspace<B>, RuntimeError> {
        let float = ElemType::float(plan.dtype);
        let buffers = plan
            .buffers
            .iter()
            .map(|b| {
                let elem = match b.elem {
                    Elem::Float => float,
                    Elem::U32 => ElemType::U32,
                    Elem::I32 => ElemType::I32,
                };
                backend.alloc(elem, b.len.max(1))
            })
            .collect::<Result<_, _>>()?;
        Ok(Workspace { buffers })
    }
}

/// Whether `POPCORN_SYNC` asks for a synchronisation after every step.
pub fn sync_each_step() -> bool {
    std::env::var("POPCORN_SYNC").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The scalar factor of a library step, or 1.
fn alpha_of(op: &StepOp) -> Option<&popcorn_dsl::ScalarExpr> {
    match op {
        StepOp::Gemm(g) => Some(&g.alpha),
        StepOp::Syrk { alpha, .. }
        | StepOp::Gemv { alpha, .. }
        | StepOp::SpMM { alpha, .. }
        | StepOp::SpMV { alpha, .. } => Some(alpha),
        _ => None,
    }
}

/// Runs every step of `plan`. `inputs` and `outputs` map names to the caller's tensors (as
/// [`Arg`]s); `scalars` gives scalar parameters; `dims` the dimension sizes.
pub fn execute<B: Backend>(
    backend: &B,
    plan: &Plan,
    workspace: &Workspace<B>,
    inputs: &HashMap<String, Arg<'_, B::Buf>>,
    outputs: &HashMap<String, Arg<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<(), RuntimeError> {
    let sync = sync_each_step();
    let timing = popcorn_dsl::log::enabled("time");
    let mut marks = Vec::new();
    if timing {
        marks.push(backend.mark()?);
    }
    let resolve = |id: ValueId| -> Result<Arg<'_, B::Buf>, RuntimeError> {
        let v = plan.value(id);
        let missing = |what: &str, name: &str| {
            RuntimeError::Binding(format!("{what} `{name}` was not provided"))
        };
        Ok(match &v.home {
            Home::Input(name) => inputs
                .get(name)
                .cloned()
                .ok_or_else(|| missing("input", name))?,
            Home::Output(name) => outputs
                .get(name)
                .cloned()
                .ok_or_else(|| missing("output", name))?,
            Home::InOutput(name) => match outputs.get(name) {
                Some(Arg::Dense { buf, .. }) => match v.kind {
                    ValueKind::Index => Arg::Index { buf, len: v.rows },
                    _ => Arg::Dense {
                        buf,
                        rows: v.rows,
                        cols: v.cols,
                    },
                },
                Some(Arg::Index { buf, .. }) => Arg::Index { buf, len: v.rows },
                _ => return Err(missing("output", name)),
            },
            Home::Temp(ids) => {
                let b = |i: usize| &workspace.buffers[ids[i].0];
                match &v.kind {
                    ValueKind::Dense => Arg::Dense {
                        buf: b(0),
                        rows: v.rows,
                        cols: v.cols,
                    },
                    ValueKind::Index => Arg::Index {
                        buf: b(0),
                        len: v.rows,
                    },
                    ValueKind::Csr { nnz } => Arg::Csr {
                        row_ptr: b(0),
                        col_idx: b(1),
                        values: b(2),
                        rows: v.rows,
                        cols: v.cols,
                        nnz: nnz.unwrap_or(v.cols),
                    },
                    ValueKind::Scalar(_) => unreachable!("scalars live on the host"),
                }
            }
            Home::Host => match &v.kind {
                ValueKind::Scalar(e) => Arg::Scalar(
                    e.eval(scalars, dims)
                        .map_err(|e| RuntimeError::Binding(e.to_string()))?,
                ),
                _ => unreachable!("only scalars live on the host"),
            },
        })
    };
    let mut i = 0;
    while i < plan.steps.len() {
        let step = &plan.steps[i];
        let named = |e: RuntimeError| RuntimeError::Step {
            step: i,
            op: step.op_name(),
            what: step
                .outputs
                .iter()
                .map(|o| plan.value(*o).name.clone())
                .collect::<Vec<_>>()
                .join(", "),
            source: Box::new(e),
        };
        type Io<'a, Buf> = (Vec<Arg<'a, Buf>>, Vec<Arg<'a, Buf>>);
        let io = |s: &Step| -> Result<Io<'_, B::Buf>, RuntimeError> {
            let ins = s
                .inputs
                .iter()
                .map(|v| resolve(*v))
                .collect::<Result<_, _>>()?;
            let outs = s
                .outputs
                .iter()
                .map(|v| resolve(*v))
                .collect::<Result<_, _>>()?;
            Ok((ins, outs))
        };
        let (ins, outs) = io(step).map_err(named)?;
        let alpha = match alpha_of(&step.op) {
            Some(e) => e
                .eval(scalars, dims)
                .map_err(|e| named(RuntimeError::Binding(e.to_string())))?,
            None => 1.0,
        };
        let steps_run = match overlapped_map(plan, i) {
            Some(map) => {
                // Errors name both steps: either may have caused them.
                let named = |e: RuntimeError| RuntimeError::Step {
                    step: i,
                    op: format!(
                        "{} with step {}'s overlapped {}",
                        step.op_name(),
                        i + 1,
                        map.op_name()
                    ),
                    what: step
                        .outputs
                        .iter()
                        .chain(&map.outputs)
                        .map(|o| plan.value(*o).name.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                    source: Box::new(e),
                };
                let (map_ins, map_outs) = io(map).map_err(named)?;
                backend
                    .run_syrk_with_map(
                        step,
                        map,
                        (&ins, &outs),
                        (&map_ins, &map_outs),
                        plan.dtype,
                        alpha,
                    )
                    .map_err(named)?;
                2
            }
            None => {
                backend
                    .run_step(step, &ins, &outs, plan.dtype, alpha)
                    .map_err(named)?;
                1
            }
        };
        if sync {
            backend.synchronize().map_err(named)?;
        }
        if timing {
            // An overlapped map's time is in its SYRK's: both steps end at the same mark.
            for _ in 0..steps_run {
                marks.push(backend.mark().map_err(named)?);
            }
        }
        i += steps_run;
    }
    if timing {
        print_step_times(backend, plan, &marks)?;
    }
    Ok(())
}

/// The map step that runs together with SYRK step `i` (`overlap_map`): the next step, when it
/// reads the SYRK's result.
fn overlapped_map(plan: &Plan, i: usize) -> Option<&Step> {
    let step = &plan.steps[i];
    let StepOp::Syrk {
        overlap_map: true, ..
    } = step.op
    else {
        return None;
    };
    let map = plan.steps.get(i + 1)?;
    let reads_it = step.outputs.iter().all(|o| map.inputs.contains(o));
    (reads_it && matches!(map.op, StepOp::Fused(_))).then_some(map)
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
        if i > 0 && overlapped_map(plan, i - 1).is_some() {
            lines.push(format!(
                "  {i:<4} {:<13} overlapped: its time is in the step above",
                step.op_name()
            ));
            continue;
        }
        // A SYRK with its overlapped map: the rates count both steps' work.
        let (bytes, flops, note) = match (overlapped_map(plan, i), plan.steps.get(i + 1)) {
            (Some(_), Some(map)) => (
                step.bytes + map.bytes,
                step.flops + map.flops,
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
