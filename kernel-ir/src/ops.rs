//! Element-wise operations: the one definition of each operator, with its name in the
//! language and its value in `f64` (the reference semantics every backend is held to; the CPU
//! backend computes the same formulas in the plan's type, the CUDA emitter with C's functions).

use serde::{Deserialize, Serialize};

/// Unary element-wise operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// absolute value
    Abs,
    /// hyperbolic tangent
    Tanh,
}

/// Binary element-wise operations. Comparisons yield 1 or 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b` (element-wise)
    Mul,
    /// `a / b`
    Div,
    /// `a` raised to `b`
    Pow,
    /// larger of the two (NaN-propagating is not guaranteed; follows C `fmax`)
    Max,
    /// smaller of the two (follows C `fmin`)
    Min,
    /// `a < b` as 1 or 0
    Lt,
    /// `a <= b` as 1 or 0
    Le,
    /// `a > b` as 1 or 0
    Gt,
    /// `a >= b` as 1 or 0
    Ge,
    /// `a == b` as 1 or 0
    Eq,
    /// `a != b` as 1 or 0
    Ne,
}

impl UnaryOp {
    /// Every unary operation, in declaration order.
    pub const ALL: [UnaryOp; 6] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Abs,
        UnaryOp::Tanh,
    ];

    /// The name of the operation in the language (`-` for negation).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "-",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Tanh => "tanh",
        }
    }

    /// The value of the operation at `x`, in `f64`.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Tanh => x.tanh(),
        }
    }
}

impl BinaryOp {
    /// Every binary operation, in declaration order.
    pub const ALL: [BinaryOp; 13] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::Eq,
        BinaryOp::Ne,
    ];

    /// The symbol (or function name) of the operation in the language.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => ".*",
            BinaryOp::Div => "/",
            BinaryOp::Pow => "pow",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
        }
    }

    /// Whether the operation is a comparison (its value is 1 or 0).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne
        )
    }

    /// Whether the language writes the operation as a function (`pow(a, b)`), not infix.
    pub fn is_function(self) -> bool {
        matches!(self, BinaryOp::Pow | BinaryOp::Max | BinaryOp::Min)
    }

    /// The value of the operation at `(a, b)`, in `f64`.
    pub fn apply(self, a: f64, b: f64) -> f64 {
        let flag = |c: bool| if c { 1.0 } else { 0.0 };
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Pow => a.powf(b),
            BinaryOp::Max => a.max(b),
            BinaryOp::Min => a.min(b),
            BinaryOp::Lt => flag(a < b),
            BinaryOp::Le => flag(a <= b),
            BinaryOp::Gt => flag(a > b),
            BinaryOp::Ge => flag(a >= b),
            BinaryOp::Eq => flag(a == b),
            BinaryOp::Ne => flag(a != b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_are_flags_and_nan_compares_false() {
        assert_eq!(BinaryOp::Lt.apply(1.0, 2.0), 1.0);
        assert_eq!(BinaryOp::Ge.apply(1.0, 2.0), 0.0);
        assert_eq!(BinaryOp::Ne.apply(f64::NAN, f64::NAN), 1.0);
        assert_eq!(BinaryOp::Eq.apply(f64::NAN, 1.0), 0.0);
        assert!(BinaryOp::ALL.iter().filter(|o| o.is_comparison()).count() == 6);
    }

    #[test]
    fn names_are_distinct() {
        let mut names: Vec<&str> = BinaryOp::ALL.iter().map(|o| o.symbol()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), BinaryOp::ALL.len());
        assert_eq!(UnaryOp::Exp.apply(0.0), 1.0);
        assert_eq!(UnaryOp::Tanh.name(), "tanh");
    }
}
