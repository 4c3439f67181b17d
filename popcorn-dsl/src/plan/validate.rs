//! [`Plan::validate`]: the structural checks a plan passes before it runs, so that a plan made
//! elsewhere (loaded from JSON, edited, or from another version of popcorn) is an error naming
//! its fault rather than a panic or an out-of-bounds access.

use super::{Elem, Home, Plan, StepOp, ValueId, ValueKind};
use crate::ops::Builtin;
use crate::passes::PlanError;
use kernel_ir::Form;

fn invalid(message: String) -> PlanError {
    PlanError::Invalid(message)
}

impl Plan {
    /// Checks the plan's structure: every value, buffer, input and output it names exists;
    /// every temporary has the buffers its kind needs, of the right element type and size;
    /// every step has the operands its operation takes, reads only values already written (or
    /// inputs and host scalars), and a fused step's kernel is well formed and named after its
    /// spec; every pipeline joins a banded producer to the banded map after it, over bands that
    /// cover its rows in order.
    pub fn validate(&self) -> Result<(), PlanError> {
        self.validate_values()?;
        self.validate_steps()?;
        self.validate_pipelines()
    }

    /// A plan read back from [`Plan::to_json`]'s text, checked by [`Plan::validate`]: malformed
    /// JSON or an inconsistent plan is a [`PlanError::Invalid`] naming the problem.
    pub fn from_json(text: &str) -> Result<Plan, PlanError> {
        let plan: Plan = serde_json::from_str(text)
            .map_err(|e| PlanError::Invalid(format!("the plan's JSON cannot be read: {e}")))?;
        plan.validate()?;
        Ok(plan)
    }

    fn value_checked(&self, id: ValueId, what: &str) -> Result<&super::Value, PlanError> {
        self.values.get(id.0).ok_or_else(|| {
            invalid(format!(
                "{what} names value {} but the plan has {} values",
                id.0,
                self.values.len()
            ))
        })
    }

    fn validate_values(&self) -> Result<(), PlanError> {
        for (name, id) in &self.inputs {
            self.value_checked(*id, &format!("input `{name}`"))?;
        }
        for (name, id) in &self.outputs {
            self.value_checked(*id, &format!("output `{name}`"))?;
        }
        for (b, buffer) in self.buffers.iter().enumerate() {
            for v in &buffer.holds {
                self.value_checked(*v, &format!("buffer {b}"))?;
            }
        }
        let float_len = |v: &super::Value| v.len();
        for (i, v) in self.values.iter().enumerate() {
            let what = format!("value {i} (`{}`)", v.name);
            match &v.home {
                Home::Input(name) => {
                    if !self.inputs.iter().any(|(n, _)| n == name) {
                        return Err(invalid(format!(
                            "{what} lives in input `{name}`, which the plan does not take"
                        )));
                    }
                }
                Home::Output(name) | Home::InOutput(name) => {
                    if !self.outputs.iter().any(|(n, _)| n == name) {
                        return Err(invalid(format!(
                            "{what} lives in output `{name}`, which the plan does not produce"
                        )));
                    }
                }
                Home::Host => {
                    if !matches!(v.kind, ValueKind::Scalar(_)) {
                        return Err(invalid(format!(
                            "{what} lives on the host but is not a scalar"
                        )));
                    }
                }
                Home::Temp(ids) => {
                    let needed: Vec<(Elem, usize)> = match &v.kind {
                        ValueKind::Dense => vec![(Elem::Float, float_len(v))],
                        ValueKind::Index => vec![(Elem::U32, v.rows)],
                        ValueKind::Csr { nnz } => {
                            let nnz = nnz.unwrap_or(v.cols);
                            vec![
                                (Elem::I32, v.rows + 1),
                                (Elem::I32, nnz),
                                (Elem::Float, nnz),
                            ]
                        }
                        ValueKind::Scalar(_) => {
                            return Err(invalid(format!("{what} is a scalar in device buffers")))
                        }
                    };
                    if ids.len() != needed.len() {
                        return Err(invalid(format!(
                            "{what} has {} buffer(s) but a value of its kind needs {}",
                            ids.len(),
                            needed.len()
                        )));
                    }
                    for (id, (elem, len)) in ids.iter().zip(needed) {
                        let b = self.buffers.get(id.0).ok_or_else(|| {
                            invalid(format!(
                                "{what} lives in buffer {} but the plan has {} buffers",
                                id.0,
                                self.buffers.len()
                            ))
                        })?;
                        if b.elem != elem || b.len < len {
                            return Err(invalid(format!(
                                "{what} needs {len} {elem:?} elements but buffer {} holds {} {:?}",
                                id.0, b.len, b.elem
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_steps(&self) -> Result<(), PlanError> {
        let mut written = vec![false; self.values.len()];
        for (i, v) in self.values.iter().enumerate() {
            written[i] = matches!(v.home, Home::Input(_) | Home::Host);
        }
        for (s, step) in self.steps.iter().enumerate() {
            let what = format!("step {s} ({})", step.op_name());
            let arity = match &step.op {
                StepOp::Gemm(_)
                | StepOp::Gemv { .. }
                | StepOp::SpMM { .. }
                | StepOp::SpGemm { .. }
                | StepOp::SpMV { .. } => Some((2, 1)),
                StepOp::Syrk { .. } | StepOp::Copy => Some((1, 1)),
                StepOp::Builtin(
                    Builtin::ClusterSums(_) | Builtin::LabelSums(_) | Builtin::PermuteRows(_),
                ) => Some((2, 1)),
                StepOp::Builtin(Builtin::Selection(sel)) => Some((sel.operands(), 1)),
                StepOp::Builtin(Builtin::Monomials(_)) => Some((4, 1)),
                StepOp::Builtin(_) => Some((1, 1)),
                StepOp::Fused(f) => {
                    if f.name != f.spec.name() {
                        return Err(invalid(format!(
                            "{what}: kernel {} does not match its spec (named {}); the plan was made by another version of popcorn: plan the program again",
                            f.name,
                            f.spec.name()
                        )));
                    }
                    f.spec
                        .validate()
                        .map_err(|e| invalid(format!("{what}: {e}")))?;
                    Some((f.spec.inputs.len(), f.spec.outputs().len()))
                }
            };
            if let Some((ins, outs)) = arity {
                if step.inputs.len() != ins || step.outputs.len() != outs {
                    return Err(invalid(format!(
                        "{what} takes {ins} input(s) and {outs} output(s) but has {} and {}",
                        step.inputs.len(),
                        step.outputs.len()
                    )));
                }
            }
            for v in &step.inputs {
                self.value_checked(*v, &what)?;
                if !written[v.0] {
                    return Err(invalid(format!(
                        "{what} reads `{}` before any step writes it",
                        self.values[v.0].name
                    )));
                }
            }
            for v in &step.outputs {
                let value = self.value_checked(*v, &what)?;
                if matches!(value.home, Home::Input(_) | Home::Host) {
                    return Err(invalid(format!(
                        "{what} writes `{}`, which is an input or a host scalar",
                        value.name
                    )));
                }
                written[v.0] = true;
            }
        }
        Ok(())
    }

    fn validate_pipelines(&self) -> Result<(), PlanError> {
        for p in &self.pipelines {
            let what = format!("the pipeline from step {}", p.producer);
            let (Some(producer), Some(consumer)) =
                (self.steps.get(p.producer), self.steps.get(p.producer + 1))
            else {
                return Err(invalid(format!("{what} has no step after its producer")));
            };
            let StepOp::Syrk {
                n,
                lower_only: true,
                block_rows,
                ..
            } = producer.op
            else {
                return Err(invalid(format!(
                    "{what}: its producer is a {}, not a lower-triangle SYRK",
                    producer.op_name()
                )));
            };
            let banded = matches!(&consumer.op, StepOp::Fused(f) if matches!(f.spec.form, Form::Map { .. }) && f.spec.runs_in_bands() && f.rows == n && f.cols == n);
            if !banded || !producer.outputs.iter().all(|o| consumer.inputs.contains(o)) {
                return Err(invalid(format!(
                    "{what}: step {} is not a map that reads the product in bands",
                    p.producer + 1
                )));
            }
            let expected: Vec<(usize, usize)> = super::block_row_ranges(n, block_rows).collect();
            if block_rows == 0 || p.bands != expected {
                return Err(invalid(format!(
                    "{what}: its bands are not the SYRK's block rows of {block_rows} rows over {n}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::{BufferId, Home, Pipeline, StepOp, ValueId};
    use crate::target::Target;
    use crate::{plan, PlanError, PlannerConfig, Program};
    use std::collections::BTreeMap;

    fn kkmeans_plan() -> crate::Plan {
        let p = Program::parse(
            "fn k(X: Dense[n, d], labels: Index[n]) -> (K: Dense[n, n], E: Dense[n, k]) {
                K = pow(X * X^T + 1, 2);
                E = -2 * K * selection(labels, k)^T;
            }",
        )
        .unwrap();
        let dims: BTreeMap<String, usize> = [("n", 5000), ("d", 64), ("k", 10)]
            .map(|(a, b)| (a.to_string(), b))
            .into();
        plan(
            &p,
            &dims,
            &PlannerConfig::default(),
            &Target::reference_gpu(),
            &BTreeMap::new(),
        )
        .unwrap()
    }

    fn expect_invalid(p: &crate::Plan, words: &str) {
        match p.validate() {
            Err(PlanError::Invalid(m)) => assert!(m.contains(words), "{m}"),
            other => panic!("expected an invalid plan ({words}), got {other:?}"),
        }
    }

    #[test]
    fn planned_plans_are_valid_and_survive_json() {
        let p = kkmeans_plan();
        assert_eq!(p.validate(), Ok(()));
        let again = crate::Plan::from_json(&p.to_json()).expect("reads back");
        assert_eq!(again, p);
        assert!(matches!(
            crate::Plan::from_json("{\"steps\": 3}"),
            Err(crate::passes::PlanError::Invalid(m)) if m.contains("JSON")
        ));
    }

    #[test]
    fn broken_plans_name_their_fault() {
        let good = kkmeans_plan();
        let mut p = good.clone();
        p.steps[0].inputs.push(ValueId(999));
        expect_invalid(&p, "takes 1 input(s)");
        let mut p = good.clone();
        p.steps[0].inputs[0] = ValueId(999);
        expect_invalid(&p, "value 999");
        let mut p = good.clone();
        let last = p.steps.len() - 1;
        p.steps.swap(0, last);
        p.pipelines.clear();
        expect_invalid(&p, "before any step writes it");
        let mut p = good.clone();
        if let Some(v) = p
            .values
            .iter_mut()
            .find(|v| matches!(v.home, Home::Temp(_)))
        {
            v.home = Home::Temp(vec![BufferId(77)]);
        }
        expect_invalid(&p, "buffer 77");
        let mut p = good.clone();
        for s in &mut p.steps {
            if let StepOp::Fused(f) = &mut s.op {
                f.name = "pk_0000000000000000".into();
            }
        }
        expect_invalid(&p, "does not match its spec");
        let mut p = good.clone();
        p.pipelines = vec![Pipeline {
            producer: p.steps.len() - 1,
            bands: vec![(0, 1)],
        }];
        expect_invalid(&p, "pipeline");
        let mut p = good;
        if let Some(pipe) = p.pipelines.first_mut() {
            pipe.bands.pop();
            expect_invalid(&p, "block rows");
        }
    }
}
