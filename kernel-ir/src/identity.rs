//! A kernel's identity: a canonical text of what it computes and the name derived from it.
//!
//! Two specs that compute the same thing have the same identity, whatever their provenance and
//! input names (those are for readers only). The text is written here, field by field, rather
//! than through a serialisation format, so that it is fixed by this file alone: floating-point
//! constants are written as their IEEE bits (infinities included) and every enum by a name
//! that does not change when variants are added.

use crate::hash::fnv1a64;
use crate::ops::{BinaryOp, UnaryOp};
use crate::spec::{Access, Expr, Form, KernelSpec, ReduceKind, Reduction, ScalarType};
use std::fmt::Write;

impl KernelSpec {
    /// The canonical text of what the kernel computes (dtype, input accesses, form and
    /// expressions), without provenance or input names.
    pub fn identity(&self) -> String {
        let mut s = String::new();
        s.push_str(match self.dtype {
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        });
        s.push_str(";in[");
        for (k, input) in self.inputs.iter().enumerate() {
            if k > 0 {
                s.push(',');
            }
            s.push_str(access_code(input.access));
        }
        s.push_str("];");
        match &self.form {
            Form::Map { outputs } => {
                s.push_str("map[");
                exprs(&mut s, outputs);
                s.push(']');
            }
            Form::Rows { stores, reductions } => {
                s.push_str("rows[");
                exprs(&mut s, stores);
                s.push_str("][");
                reductions_text(&mut s, reductions);
                s.push(']');
            }
            Form::Cols { reductions } => {
                s.push_str("cols[");
                reductions_text(&mut s, reductions);
                s.push(']');
            }
            Form::Contraction {
                a,
                b,
                precision,
                symmetric,
                stores,
                reductions,
            } => {
                // `,symmetric` only where set: the names of other kernels stay as they were.
                let _ = write!(
                    s,
                    "contraction(a{a},b{b},{}{})[",
                    precision.name(),
                    if *symmetric { ",symmetric" } else { "" }
                );
                exprs(&mut s, stores);
                s.push_str("][");
                reductions_text(&mut s, reductions);
                s.push(']');
            }
        }
        // Only where some matrix is held in 16 bits: the names of other kernels stay as they
        // were.
        if !self.narrow.is_empty() {
            s.push_str(";narrow[");
            for (k, half) in &self.narrow.inputs {
                let _ = write!(s, "in{k}:{},", half.name());
            }
            for (k, half) in &self.narrow.outputs {
                let _ = write!(s, "out{k}:{},", half.name());
            }
            s.push(']');
        }
        s
    }

    /// The kernel's name: `pk_` and the 16 hex digits of the FNV-1a hash of its
    /// [identity](KernelSpec::identity). Deterministic across platforms and toolchains.
    ///
    /// ```
    /// use kernel_ir::{Access, Expr, Form, Input, KernelSpec, ScalarType};
    /// let spec = |input: &str| KernelSpec {
    ///     narrow: Default::default(),
    ///     dtype: ScalarType::F32,
    ///     inputs: vec![Input { name: input.into(), access: Access::Col }],
    ///     form: Form::Map { outputs: vec![Expr::Input(0)] },
    ///     provenance: vec![format!("y = copy({input})")],
    /// };
    /// assert_eq!(spec("a").name(), spec("b").name());
    /// assert!(spec("a").name().starts_with("pk_") && spec("a").name().len() == 19);
    /// ```
    pub fn name(&self) -> String {
        format!("pk_{:016x}", fnv1a64(self.identity().as_bytes()))
    }
}

fn access_code(access: Access) -> &'static str {
    match access {
        Access::Matrix { transposed: false } => "mat",
        Access::Matrix { transposed: true } => "matT",
        Access::LowerSymmetric => "lowsym",
        Access::Col => "col",
        Access::Row => "row",
        Access::Scalar => "scalar",
        Access::Broadcast => "bcast",
        Access::IndexCol => "idx",
        Access::IndexRow => "idxrow",
        Access::Left { transposed: false } => "left",
        Access::Left { transposed: true } => "leftT",
        Access::Right { transposed: false } => "right",
        Access::Right { transposed: true } => "rightT",
    }
}

fn exprs(s: &mut String, list: &[Expr]) {
    for (k, e) in list.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        expr(s, e);
    }
}

fn reductions_text(s: &mut String, list: &[Reduction]) {
    for (k, r) in list.iter().enumerate() {
        if k > 0 {
            s.push(',');
        }
        match r.kind {
            ReduceKind::Sum => s.push_str("sum("),
            ReduceKind::Min => s.push_str("min("),
            ReduceKind::Max => s.push_str("max("),
            ReduceKind::ArgMin => s.push_str("argmin("),
            ReduceKind::Pick { index_input } => {
                let _ = write!(s, "pick{index_input}(");
            }
            ReduceKind::Dot { weights } => {
                let _ = write!(s, "dot{weights}(");
            }
            ReduceKind::ByLabel { labels } => {
                let _ = write!(s, "bylabel{labels}(");
            }
        }
        expr(s, &r.expr);
        s.push(')');
    }
}

fn unary_code(op: UnaryOp) -> &'static str {
    match op {
        UnaryOp::Neg => "neg",
        UnaryOp::Exp => "exp",
        UnaryOp::Log => "log",
        UnaryOp::Sqrt => "sqrt",
        UnaryOp::Abs => "abs",
        UnaryOp::Tanh => "tanh",
    }
}

fn binary_code(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "add",
        BinaryOp::Sub => "sub",
        BinaryOp::Mul => "mul",
        BinaryOp::Div => "div",
        BinaryOp::Pow => "pow",
        BinaryOp::Max => "max",
        BinaryOp::Min => "min",
        BinaryOp::Lt => "lt",
        BinaryOp::Le => "le",
        BinaryOp::Gt => "gt",
        BinaryOp::Ge => "ge",
        BinaryOp::Eq => "eq",
        BinaryOp::Ne => "ne",
    }
}

fn expr(s: &mut String, e: &Expr) {
    match e {
        Expr::Input(k) => {
            let _ = write!(s, "i{k}");
        }
        Expr::Const(v) => {
            let _ = write!(s, "c{:016x}", v.to_bits());
        }
        Expr::Product => s.push('P'),
        Expr::Unary(op, a) => {
            s.push_str(unary_code(*op));
            s.push('(');
            expr(s, a);
            s.push(')');
        }
        Expr::Binary(op, a, b) => {
            s.push_str(binary_code(*op));
            s.push('(');
            expr(s, a);
            s.push(',');
            expr(s, b);
            s.push(')');
        }
        Expr::Select(c, a, b) => {
            s.push_str("sel(");
            expr(s, c);
            s.push(',');
            expr(s, a);
            s.push(',');
            expr(s, b);
            s.push(')');
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Access, BinaryOp, Expr, Form, Input, KernelSpec, ReduceKind, Reduction};
    use crate::{ScalarType, UnaryOp};

    fn spec(form: Form, access: Access) -> KernelSpec {
        KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F32,
            inputs: vec![Input {
                name: "x".into(),
                access,
            }],
            form,
            provenance: vec![],
        }
    }

    #[test]
    fn identity_spells_out_every_part() {
        let s = spec(
            Form::Rows {
                stores: vec![Expr::unary(UnaryOp::Exp, Expr::Input(0))],
                reductions: vec![Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: Expr::binary(BinaryOp::Sub, Expr::Input(0), Expr::Const(1.0)),
                }],
            },
            Access::Matrix { transposed: true },
        );
        assert_eq!(
            s.identity(),
            "f32;in[matT];rows[exp(i0)][argmin(sub(i0,c3ff0000000000000))]"
        );
    }

    #[test]
    fn names_separate_what_differs() {
        let map = |e: Expr| Form::Map { outputs: vec![e] };
        let a = spec(map(Expr::Const(f64::INFINITY)), Access::Col);
        let b = spec(map(Expr::Const(f64::NEG_INFINITY)), Access::Col);
        let c = spec(map(Expr::Const(f64::INFINITY)), Access::Row);
        let mut d = a.clone();
        d.dtype = ScalarType::F64;
        let names = [a.name(), b.name(), c.name(), d.name()];
        for i in 0..names.len() {
            for j in 0..i {
                assert_ne!(names[i], names[j]);
            }
        }
        let mut renamed = a.clone();
        renamed.inputs[0].name = "other".into();
        renamed.provenance = vec!["from somewhere else".into()];
        assert_eq!(renamed.name(), a.name());
    }
}
