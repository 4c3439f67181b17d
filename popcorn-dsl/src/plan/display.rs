//! The plan as a table: one line per step with its operation, operands, shape, flops and bytes.

use super::{Home, Plan, StepOp, ValueKind};
use crate::ops::OpFacts;
use std::fmt;

/// Formats a count with an SI suffix: `1.23 G`, `456 k`.
pub fn si(v: f64) -> String {
    let (scale, suffix) = if v >= 1e12 {
        (1e12, " T")
    } else if v >= 1e9 {
        (1e9, " G")
    } else if v >= 1e6 {
        (1e6, " M")
    } else if v >= 1e3 {
        (1e3, " k")
    } else {
        (1.0, " ")
    };
    format!("{:.3}{}", v / scale, suffix).replace(".000 ", " ")
}

fn detail(plan: &Plan, index: usize) -> String {
    let step = &plan.steps[index];
    let flag = |t: bool| if t { "T" } else { "N" };
    match &step.op {
        StepOp::Gemm(g) => format!(
            "m={} n={} k={} op(A)={} op(B)={} alpha={}{}",
            g.m,
            g.n,
            g.k,
            flag(g.trans_a),
            flag(g.trans_b),
            g.alpha,
            if g.tf32 { " tf32" } else { "" }
        ),
        StepOp::Syrk {
            trans,
            n,
            k,
            alpha,
            tf32,
            lower_only,
            block_rows,
            ..
        } => format!(
            "n={n} k={k} {} alpha={alpha} {}{}{}{}",
            if *trans { "A^T*A" } else { "A*A^T" },
            if *lower_only { "lower" } else { "full" },
            if *block_rows == 0 {
                " (cublas syrk)".to_string()
            } else {
                format!(" ({} gemm block rows)", n.div_ceil(*block_rows))
            },
            if *tf32 { " tf32" } else { "" },
            if plan.pipeline_from(index).is_some() {
                ", next map overlapped"
            } else {
                ""
            }
        ),
        StepOp::Gemv { trans, m, n, alpha } => {
            format!("m={m} n={n} op(A)={} alpha={alpha}", flag(*trans))
        }
        StepOp::SpMM {
            sparse_left,
            trans_sparse,
            trans_dense,
            m,
            n,
            k,
            alpha,
        } => {
            let s = if *trans_sparse { "S^T" } else { "S" };
            let d = if *trans_dense { "D^T" } else { "D" };
            let (l, r) = if *sparse_left { (s, d) } else { (d, s) };
            format!("{l}*{r} m={m} n={n} k={k} alpha={alpha}")
        }
        StepOp::SpMV { trans, alpha } => format!("op(S)={} alpha={alpha}", flag(*trans)),
        StepOp::SpGemm {
            m,
            n,
            k,
            alpha,
            why,
        } => format!("A*B^T (csr x csr^T, dense result) m={m} n={n} k={k} alpha={alpha}, {why}"),
        StepOp::Fused(f) => match &f.spec.form {
            kernel_ir::Form::Contraction {
                precision,
                symmetric,
                ..
            } => format!(
                "{} over {} x {}, product of depth {}{}{}",
                f.name,
                f.rows,
                f.cols,
                f.depth,
                match precision {
                    kernel_ir::Precision::Strict => String::new(),
                    on_cores => format!(" on {}", on_cores.name()),
                },
                if *symmetric {
                    ", symmetric (one triangle of tiles)"
                } else {
                    ""
                }
            ),
            _ => format!("{} over {} x {}", f.name, f.rows, f.cols),
        },
        StepOp::Builtin(b) => b.details(),
        StepOp::Copy => String::new(),
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(f, "plan for {}", self.signature)?;
        writeln!(
            f,
            "  dims: {}   dtype: {}   workspace: {}B in {} buffer(s)",
            if dims.is_empty() {
                "-".to_string()
            } else {
                dims.join(" ")
            },
            self.dtype,
            si(self.workspace_bytes() as f64),
            self.buffers.len()
        )?;
        writeln!(f, "  target: {}", self.target.describe())?;
        let name = |id: &super::ValueId| {
            let v = self.value(*id);
            match &v.kind {
                ValueKind::Scalar(s) if v.name.starts_with('%') => s.to_string(),
                _ => v.name.clone(),
            }
        };
        let mut rows: Vec<[String; 7]> = vec![[
            "step".into(),
            "operation".into(),
            "inputs".into(),
            "outputs".into(),
            "shape".into(),
            "flops".into(),
            "bytes".into(),
        ]];
        for (i, s) in self.steps.iter().enumerate() {
            let shape = s
                .outputs
                .iter()
                .map(|o| self.value(*o).type_string())
                .collect::<Vec<_>>()
                .join(", ");
            rows.push([
                i.to_string(),
                s.op_name(),
                s.inputs.iter().map(name).collect::<Vec<_>>().join(", "),
                s.outputs.iter().map(name).collect::<Vec<_>>().join(", "),
                shape,
                si(s.flops),
                format!("{}B", si(s.bytes)),
            ]);
        }
        let mut widths = [0usize; 7];
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        for (ri, r) in rows.iter().enumerate() {
            write!(f, " ")?;
            for (ci, (w, c)) in widths.iter().zip(r).enumerate() {
                if ci >= 5 {
                    write!(f, " {c:>w$}")?;
                } else {
                    write!(f, " {c:<w$}")?;
                }
            }
            writeln!(f)?;
            if ri == 0 {
                writeln!(
                    f,
                    " {}",
                    "-".repeat(widths.iter().sum::<usize>() + widths.len())
                )?;
            } else {
                let d = detail(self, ri - 1);
                if !d.is_empty() {
                    writeln!(f, "{:w$}{d}", "", w = widths[0] + 3)?;
                }
            }
        }
        writeln!(
            f,
            "  total: {}flop, {}B moved",
            si(self.total_flops()),
            si(self.total_bytes())
        )?;
        let outs: Vec<String> = self
            .outputs
            .iter()
            .map(|(n, id)| match &self.value(*id).home {
                Home::Host => format!("{n} (host scalar)"),
                _ => format!("{n}: {}", self.value(*id).type_string()),
            })
            .collect();
        write!(f, "  outputs: {}", outs.join(", "))?;
        if let Some(p) = &self.partition {
            write!(f, "\n{}", p.describe(self))?;
        }
        Ok(())
    }
}
