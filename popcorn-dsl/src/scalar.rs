//! Host scalar expressions: literals, scalar parameters, dimension sizes and arithmetic on
//! them. They are folded at build time and evaluated on the host when a plan runs (library
//! alpha factors, kernel scalar arguments).

use kernel_ir::{BinaryOp, UnaryOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

use crate::types::DimBindings;

/// A scalar computed on the host from literals, parameters and dimension sizes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ScalarExpr {
    /// A literal value.
    Lit(f64),
    /// A scalar parameter of the program, by name.
    Param(String),
    /// The size of a dimension, by name.
    Dim(String),
    /// A unary operation.
    Unary(UnaryOp, Box<ScalarExpr>),
    /// A binary operation.
    Binary(BinaryOp, Box<ScalarExpr>, Box<ScalarExpr>),
}

impl std::ops::Neg for ScalarExpr {
    type Output = ScalarExpr;

    /// Negation, folding literals and double negations.
    fn neg(self) -> ScalarExpr {
        match self {
            ScalarExpr::Lit(v) => ScalarExpr::Lit(-v),
            ScalarExpr::Unary(UnaryOp::Neg, inner) => *inner,
            other => ScalarExpr::Unary(UnaryOp::Neg, Box::new(other)),
        }
    }
}

/// Values of scalar parameters, by name.
pub type ScalarBindings = BTreeMap<String, f64>;

/// A scalar that could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScalarError {
    /// A scalar parameter has no value.
    #[error("scalar parameter `{0}` has no value; pass it when calling the program")]
    MissingParam(String),
    /// A dimension has no value.
    #[error("dimension `{0}` is not bound")]
    MissingDim(String),
}

impl ScalarExpr {
    /// A binary operation, folding two literals and the identities `1 * x`, `x * 1`, `x / 1`.
    pub fn binary(op: BinaryOp, a: ScalarExpr, b: ScalarExpr) -> ScalarExpr {
        match (op, &a, &b) {
            (_, ScalarExpr::Lit(x), ScalarExpr::Lit(y)) => ScalarExpr::Lit(op.apply(*x, *y)),
            (BinaryOp::Mul, ScalarExpr::Lit(one), _) if *one == 1.0 => b,
            (BinaryOp::Mul | BinaryOp::Div, _, ScalarExpr::Lit(one)) if *one == 1.0 => a,
            (BinaryOp::Mul, ScalarExpr::Lit(m), _) if *m == -1.0 => -b,
            (BinaryOp::Mul, _, ScalarExpr::Lit(m)) if *m == -1.0 => -a,
            _ => ScalarExpr::Binary(op, Box::new(a), Box::new(b)),
        }
    }

    /// A unary operation, folding a literal.
    pub fn unary(op: UnaryOp, a: ScalarExpr) -> ScalarExpr {
        match (op, a) {
            (UnaryOp::Neg, a) => -a,
            (op, ScalarExpr::Lit(x)) => ScalarExpr::Lit(op.apply(x)),
            (op, a) => ScalarExpr::Unary(op, Box::new(a)),
        }
    }

    /// The literal value, if this is one.
    pub fn as_lit(&self) -> Option<f64> {
        match self {
            ScalarExpr::Lit(v) => Some(*v),
            _ => None,
        }
    }

    /// Evaluates the expression.
    pub fn eval(&self, scalars: &ScalarBindings, dims: &DimBindings) -> Result<f64, ScalarError> {
        Ok(match self {
            ScalarExpr::Lit(v) => *v,
            ScalarExpr::Param(p) => *scalars
                .get(p)
                .ok_or_else(|| ScalarError::MissingParam(p.clone()))?,
            ScalarExpr::Dim(d) => *dims
                .get(d)
                .ok_or_else(|| ScalarError::MissingDim(d.clone()))?
                as f64,
            ScalarExpr::Unary(op, a) => op.apply(a.eval(scalars, dims)?),
            ScalarExpr::Binary(op, a, b) => {
                op.apply(a.eval(scalars, dims)?, b.eval(scalars, dims)?)
            }
        })
    }
}

impl fmt::Display for ScalarExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarExpr::Lit(v) => write!(f, "{v}"),
            ScalarExpr::Param(p) => f.write_str(p),
            ScalarExpr::Dim(d) => f.write_str(d),
            ScalarExpr::Unary(UnaryOp::Neg, a) => write!(f, "-{a}"),
            ScalarExpr::Unary(op, a) => write!(f, "{}({a})", op.name()),
            ScalarExpr::Binary(op @ (BinaryOp::Pow | BinaryOp::Max | BinaryOp::Min), a, b) => {
                write!(f, "{}({a}, {b})", op.symbol())
            }
            ScalarExpr::Binary(BinaryOp::Mul, a, b) => write!(f, "({a} * {b})"),
            ScalarExpr::Binary(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
        }
    }
}
