//! The parsed program, before type checking. Every node keeps the source span of its tokens so
//! that errors point at them: in the proc-macro, as compiler spans; at run time, as line and
//! column (proc-macro2's `span-locations`).

use crate::types::Dim;
use proc_macro2::Span;

/// The first and last token of a construct; errors underline everything between.
#[derive(Clone, Copy, Debug)]
pub struct SpanRange {
    /// Span of the first token.
    pub start: Span,
    /// Span of the last token.
    pub end: Span,
}

impl SpanRange {
    /// A range of a single token.
    pub fn single(span: Span) -> SpanRange {
        SpanRange {
            start: span,
            end: span,
        }
    }

    /// From the start of `self` to the end of `other`.
    pub fn to(self, other: SpanRange) -> SpanRange {
        SpanRange {
            start: self.start,
            end: other.end,
        }
    }
}

/// A name with its span.
#[derive(Clone, Debug)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it was written.
    pub span: Span,
}

/// A file or macro invocation: one or more programs.
#[derive(Clone, Debug)]
pub struct Module {
    /// The programs, in source order.
    pub programs: Vec<ProgramAst>,
}

/// `fn name(params) -> (outputs) { statements }`.
#[derive(Clone, Debug)]
pub struct ProgramAst {
    /// The program's name.
    pub name: Ident,
    /// Inputs, in order.
    pub params: Vec<Param>,
    /// Outputs, in order; each must be assigned by a statement.
    pub outputs: Vec<Param>,
    /// Statements, in order.
    pub body: Vec<Stmt>,
    /// The whole program, `fn` to closing brace.
    pub span: SpanRange,
}

/// `name: Type`.
#[derive(Clone, Debug)]
pub struct Param {
    /// The parameter's name.
    pub name: Ident,
    /// Its declared type.
    pub ty: TypeAnn,
}

/// The kind keyword of a type annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeKind {
    /// `Dense[r, c]`
    Dense,
    /// `Csr[r, c]`
    Csr,
    /// `Col[n]`
    Col,
    /// `Row[n]`
    Row,
    /// `Index[n]`
    Index,
    /// `Scalar`
    Scalar,
}

/// A type annotation such as `Dense[n, k]`.
#[derive(Clone, Debug)]
pub struct TypeAnn {
    /// The kind keyword.
    pub kind: TypeKind,
    /// Dimensions inside the brackets (two for matrices, one for vectors, none for scalars).
    pub dims: Vec<DimAnn>,
    /// The whole annotation.
    pub span: SpanRange,
}

/// One dimension in a type annotation.
#[derive(Clone, Debug)]
pub struct DimAnn {
    /// The dimension.
    pub dim: Dim,
    /// Where it was written.
    pub span: Span,
}

/// `target = value;`
#[derive(Clone, Debug)]
pub struct Stmt {
    /// The name bound.
    pub target: Ident,
    /// The expression.
    pub value: Expr,
}

/// An expression with its span.
#[derive(Clone, Debug)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Its tokens.
    pub span: SpanRange,
}

/// Binary operators, by precedence (lowest first): comparisons; `+ -`; `* .* /`.
/// Postfix `^T` binds tighter than all of them, unary minus tighter than binary operators
/// but looser than `^T` (`-V^T` is `-(V^T)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+` (element-wise, with broadcasting)
    Add,
    /// `-` (element-wise, with broadcasting)
    Sub,
    /// `*`: matrix product between matrices and vectors, scaling when one side is a scalar
    MatMul,
    /// `.*`: element-wise product (with broadcasting)
    ElemMul,
    /// `/`: element-wise division (with broadcasting)
    Div,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::MatMul => "*",
            BinOp::ElemMul => ".*",
            BinOp::Div => "/",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
        }
    }
}

/// Expression forms.
#[derive(Clone, Debug)]
pub enum ExprKind {
    /// A numeric literal.
    Number(f64),
    /// A name: a parameter, an earlier statement's target, a dimension (used as a scalar), or
    /// `inf`.
    Var(Ident),
    /// Unary minus.
    Neg(Box<Expr>),
    /// A binary operation; `op_span` is the operator token (errors about the operation point
    /// there).
    Binary {
        /// The operator.
        op: BinOp,
        /// The operator's token(s).
        op_span: SpanRange,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// Postfix `^T`.
    Transpose(Box<Expr>),
    /// `name(args...)`.
    Call {
        /// The function name.
        func: Ident,
        /// Arguments.
        args: Vec<Expr>,
    },
}
