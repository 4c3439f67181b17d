//! 16-bit storage: the dense parameters and results that
//! [`PlannerConfig::half_storage`](super::PlannerConfig) names are held in bf16 or fp16 while
//! every step computes in f32 (a kernel matrix written in half the bytes and read in half the
//! bytes every iteration).
//!
//! Steps that can hold a value in 16 bits do so directly: a generated kernel widens it as it
//! loads it and rounds it (to nearest even) as it stores it ([`kernel_ir::Narrow`]), and the
//! cluster-sums and diagonal builtins read it as it is. Any other step (a library product, a
//! copy) gets a conversion beside it: a generated map that widens the value into an f32
//! temporary before the step, or that rounds the step's f32 result into the 16-bit output
//! after it; the plan shows those maps, and their temporaries take f32 memory.

use super::{PassContext, PlanError, PlanPass};
use crate::ops::Builtin;
use crate::plan::{FusedStep, Home, Plan, Step, StepOp, Value, ValueId, ValueKind};
use crate::types::DType;
use kernel_ir::{Access, Expr, Form, Half, Input, KernelSpec};

/// The 16-bit storage pass.
pub struct HalfStorage;

impl PlanPass for HalfStorage {
    fn name(&self) -> &'static str {
        "half_storage"
    }

    fn run(&self, plan: &mut Plan, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let mut held = Vec::new();
        for (name, half) in &cx.config.half_storage {
            if let Some(v) = held_value(plan, name)? {
                held.push((v, *half));
            }
        }
        if held.is_empty() {
            return Ok(false);
        }
        if plan.dtype != DType::F32 {
            return Err(PlanError::Unsupported(format!(
                "16-bit storage ({}) needs an f32 plan, and this one is {}; plan in f32 or \
                 hold the values in the plan's type",
                held_names(cx),
                plan.dtype
            )));
        }
        for (v, half) in held {
            plan.values[v.0].held = Some(half);
        }
        let mut s = 0;
        while s < plan.steps.len() {
            s += hold(plan, s)?;
        }
        Ok(true)
    }
}

/// The names the configuration holds in 16 bits, for messages.
fn held_names(cx: &PassContext<'_>) -> String {
    cx.config
        .half_storage
        .iter()
        .map(|(n, h)| format!("`{n}` in {h}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The input or output called `name`, which must be dense; `None` where the program has
/// none of that name (the configuration is a context's, shared by all its programs: a name
/// holds wherever a program has it).
fn held_value(plan: &Plan, name: &str) -> Result<Option<ValueId>, PlanError> {
    let found = plan
        .inputs
        .iter()
        .chain(&plan.outputs)
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v);
    let Some(v) = found else {
        let scalar = plan.values.iter().any(|v| {
            matches!(&v.kind, ValueKind::Scalar(crate::scalar::ScalarExpr::Param(p)) if p == name)
        });
        if scalar {
            return Err(PlanError::Unsupported(format!(
                "16-bit storage names `{name}`, a scalar; only dense matrices and vectors can \
                 be held in 16 bits"
            )));
        }
        return Ok(None);
    };
    let value = plan.value(v);
    if value.kind != ValueKind::Dense {
        return Err(PlanError::Unsupported(format!(
            "16-bit storage names `{name}`, a {}; only dense matrices and vectors can be held \
             in 16 bits",
            value.type_string()
        )));
    }
    Ok(Some(v))
}

/// Makes step `s` hold its 16-bit values, adding conversions beside it where it cannot;
/// returns how many steps step `s` became (itself and the conversions).
fn hold(plan: &mut Plan, s: usize) -> Result<usize, PlanError> {
    let step = &plan.steps[s];
    let held_in: Vec<(usize, Half)> = held_positions(plan, &step.inputs);
    let held_out: Vec<(usize, Half)> = held_positions(plan, &step.outputs);
    if held_in.is_empty() && held_out.is_empty() {
        return Ok(1);
    }
    // Bytes no longer moved: two per element of each held value the step streams (a diagonal
    // reads only `n` of them).
    let streams = !matches!(step.op, StepOp::Builtin(Builtin::Diag(_)));
    let saved: f64 = step
        .inputs
        .iter()
        .chain(&step.outputs)
        .filter(|v| streams && plan.value(**v).held.is_some())
        .map(|v| 2.0 * plan.value(*v).len() as f64)
        .sum();
    let direct = match &step.op {
        // What a generated kernel can hold is what its spec's validation allows.
        StepOp::Fused(f) => {
            let mut spec = f.spec.clone();
            spec.narrow.inputs.clone_from(&held_in);
            spec.narrow.outputs.clone_from(&held_out);
            spec.validate().is_ok()
        }
        // The first operand (the matrix) of cluster sums and of diag; their results are
        // f32 temporaries.
        StepOp::Builtin(Builtin::ClusterSums(_) | Builtin::Diag(_)) => {
            held_out.is_empty() && held_in.iter().all(|(k, _)| *k == 0)
        }
        _ => false,
    };
    if direct {
        let step = &mut plan.steps[s];
        if let StepOp::Fused(f) = &mut step.op {
            f.spec.narrow.inputs = held_in;
            f.spec.narrow.outputs = held_out;
            f.name = f.spec.name();
        }
        step.bytes = (step.bytes - saved).max(0.0);
        return Ok(1);
    }
    // Conversions: widen each held input before the step, round each held output after.
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (k, half) in held_in {
        let held = plan.steps[s].inputs[k];
        let wide = wide_twin(plan, held, "widened");
        plan.steps[s].inputs[k] = wide;
        before.push(conversion(plan, held, wide, half, Convert::Widen));
    }
    for (k, half) in held_out {
        let held = plan.steps[s].outputs[k];
        let wide = wide_twin(plan, held, "unrounded");
        plan.steps[s].outputs[k] = wide;
        after.push(conversion(plan, wide, held, half, Convert::Round));
    }
    // The pass runs before pipelines are formed, so inserting steps renumbers nothing.
    let count = 1 + before.len() + after.len();
    let step = plan.steps.remove(s);
    plan.steps
        .splice(s..s, before.into_iter().chain([step]).chain(after));
    Ok(count)
}

/// The positions in `values` of those held in 16 bits, with their format.
fn held_positions(plan: &Plan, values: &[ValueId]) -> Vec<(usize, Half)> {
    values
        .iter()
        .enumerate()
        .filter_map(|(k, v)| plan.value(*v).held.map(|h| (k, h)))
        .collect()
}

/// A new f32 temporary of the shape of `v`, named after it.
fn wide_twin(plan: &mut Plan, v: ValueId, what: &str) -> ValueId {
    let value = plan.value(v);
    let twin = Value {
        name: format!("{}'{what}", value.name),
        kind: ValueKind::Dense,
        rows: value.rows,
        cols: value.cols,
        home: Home::Temp(Vec::new()),
        shape: value.shape.clone(),
        held: None,
    };
    plan.values.push(twin);
    ValueId(plan.values.len() - 1)
}

/// Which way a conversion map goes.
#[derive(Clone, Copy)]
enum Convert {
    /// From 16 bits to f32.
    Widen,
    /// From f32 to 16 bits.
    Round,
}

/// A generated map copying `from` into `to`, widening from `half` or rounding to it.
fn conversion(plan: &Plan, from: ValueId, to: ValueId, half: Half, way: Convert) -> Step {
    let source = plan.value(from);
    let mut spec = KernelSpec {
        dtype: plan.dtype.scalar_type(),
        inputs: vec![Input {
            name: source.name.clone(),
            access: Access::Matrix { transposed: false },
        }],
        form: Form::Map {
            outputs: vec![Expr::Input(0)],
        },
        provenance: Vec::new(),
        narrow: Default::default(),
    };
    let verb = match way {
        Convert::Widen => {
            spec.narrow.inputs.push((0, half));
            "widened from"
        }
        Convert::Round => {
            spec.narrow.outputs.push((0, half));
            "rounded to"
        }
    };
    spec.provenance.push(format!(
        "{} = {} ({verb} {half})",
        plan.value(to).name,
        source.name
    ));
    let elements = source.len() as f64;
    Step {
        op: StepOp::Fused(FusedStep {
            name: spec.name(),
            rows: source.rows,
            cols: source.cols,
            depth: 0,
            width: 0,
            share: None,
            spec: spec.clone(),
        }),
        inputs: vec![from],
        outputs: vec![to],
        provenance: spec.provenance.clone(),
        flops: 0.0,
        bytes: elements * 6.0,
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{Elem, Home, Plan, StepOp};
    use crate::{PlannerConfig, Program, Target};
    use kernel_ir::Half;

    fn plan(src: &str, dims: &[(&str, usize)], held: &[(&str, Half)]) -> Result<Plan, String> {
        let program = Program::parse(src).map_err(|e| e.to_string())?;
        let mut config = PlannerConfig::default();
        for (name, half) in held {
            config.half_storage.insert(name.to_string(), *half);
        }
        let dims = dims.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        crate::planner::plan(
            &program,
            &dims,
            &config,
            &Target::reference_gpu(),
            &Default::default(),
        )
        .map_err(|e| e.to_string())
    }

    const KERNEL: &str = "fn kp(X: Dense[n, d], c: Scalar) -> (K: Dense[n, n]) { \
        K = pow(X * X^T + c, 2); }";
    const ITERATION: &str = "fn it(K: Dense[n, n], labels: Index[n]) -> (new_labels: Index[n]) \
        { V = selection(labels, k); D = -2 * K * V^T + diag(K); new_labels = argmin_rows(D); }";

    #[test]
    fn the_kernel_map_rounds_k_and_the_product_gets_its_own_f32_buffer() {
        let p = plan(KERNEL, &[("n", 100), ("d", 3)], &[("K", Half::Bf16)]).unwrap();
        let k = p.outputs[0].1;
        assert_eq!(p.value(k).held, Some(Half::Bf16));
        let writer = p.steps.iter().find(|s| s.outputs.contains(&k)).unwrap();
        let StepOp::Fused(f) = &writer.op else {
            panic!("K is written by {}", writer.op_name());
        };
        assert_eq!(f.spec.narrow.outputs, vec![(0, Half::Bf16)]);
        assert_eq!(f.name, f.spec.name());
        // The f32 product cannot live in K's 16-bit storage.
        assert!(p
            .values
            .iter()
            .all(|v| !matches!(&v.home, Home::InOutput(_))));
        assert_eq!(p.workspace_bytes(), 100 * 100 * 4);
        assert!(p.buffers.iter().all(|b| b.elem == Elem::Float));
        assert!(p.to_string().contains("Dense[100, 100] in bf16"));
    }

    #[test]
    fn the_iteration_reads_k_in_sixteen_bits_without_conversions() {
        let f32_plan = plan(ITERATION, &[("n", 1000), ("k", 10)], &[]).unwrap();
        let p = plan(ITERATION, &[("n", 1000), ("k", 10)], &[("K", Half::F16)]).unwrap();
        assert_eq!(p.steps.len(), f32_plan.steps.len(), "{p}");
        let k = p.inputs[0].1;
        for s in p.steps.iter().filter(|s| s.inputs.contains(&k)) {
            assert!(
                matches!(s.op_name().as_str(), "cluster sums" | "diag"),
                "{} reads K",
                s.op_name()
            );
        }
        // The cluster sums move half the bytes of K.
        let bytes = |p: &Plan| {
            p.steps
                .iter()
                .find(|s| s.op_name() == "cluster sums")
                .map(|s| s.bytes)
                .unwrap()
        };
        let saved = bytes(&f32_plan) - bytes(&p);
        assert_eq!(saved, 2.0 * 1000.0 * 1000.0);
    }

    #[test]
    fn names_a_program_lacks_are_ignored_and_scalars_cannot_be_held() {
        let p = plan(KERNEL, &[("n", 5), ("d", 3)], &[("Q", Half::Bf16)]).unwrap();
        assert!(p.values.iter().all(|v| v.held.is_none()));
        let e = plan(KERNEL, &[("n", 5), ("d", 3)], &[("c", Half::Bf16)]).unwrap_err();
        assert!(e.contains("`c`") && e.contains("dense"), "{e}");
    }
}
