//! The type checker: turns a parsed program into a typed [`Graph`], reporting the first error
//! on the offending tokens. Scalar arithmetic (literals, scalar parameters, dimension sizes) is
//! folded into host scalar expressions as it goes.

use crate::ast::{self, BinOp, ExprKind, SpanRange, TypeKind};
use crate::diag::Diagnostic;
use crate::ir::{Graph, NodeId, Op, Reduce};
use crate::ops::{
    check_weights, Builtin, Counts, Diag, LabelSums, Monomials, Selection, SparseRowNorms,
};
use crate::program::{ParamSig, Program};
use crate::scalar::ScalarExpr;
use crate::types::TypeError;
use crate::types::{Dim, Storage, Type};
use crate::typing::result_type;
use kernel_ir::{BinaryOp, UnaryOp};
use std::collections::{BTreeSet, HashMap};

/// Functions of the language with their arity, for error messages.
pub const FUNCTIONS: &[(&str, usize, usize)] = &[
    ("pow", 2, 2),
    ("exp", 1, 1),
    ("log", 1, 1),
    ("sqrt", 1, 1),
    ("abs", 1, 1),
    ("tanh", 1, 1),
    ("max", 2, 2),
    ("min", 2, 2),
    ("where", 3, 3),
    ("diag", 1, 1),
    ("sum", 1, 1),
    ("sum_rows", 1, 1),
    ("sum_cols", 1, 1),
    ("min_rows", 1, 1),
    ("min_cols", 1, 1),
    ("max_rows", 1, 1),
    ("max_cols", 1, 1),
    ("argmin_rows", 1, 1),
    ("rownorms", 1, 1),
    ("gather", 2, 2),
    ("counts", 2, 3),
    ("selection", 2, 3),
    ("monomials", 4, 4),
];

/// Checks every program of a module; `source` is the text the programs are kept with (for a
/// macro, the re-stringified tokens).
pub fn check_module(module: &ast::Module, source: &str) -> Result<Vec<Program>, Diagnostic> {
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for p in &module.programs {
        if !names.insert(p.name.name.clone()) {
            return Err(Diagnostic::new(
                SpanRange::single(p.name.span),
                format!("a program named `{}` is already defined", p.name.name),
            ));
        }
        out.push(check_program(p, source)?);
    }
    Ok(out)
}

/// What a name refers to inside a program.
#[derive(Clone)]
enum Binding {
    Value(NodeId),
    Scalar(ScalarExpr),
    Dim(String),
}

struct Checker {
    graph: Graph,
    env: HashMap<String, Binding>,
    body_dims: BTreeSet<String>,
}

fn dim_of(d: &ast::DimAnn) -> Dim {
    d.dim.clone()
}

/// The type a signature annotation declares.
fn declared_type(ann: &ast::TypeAnn) -> Result<Type, Diagnostic> {
    let want = match ann.kind {
        TypeKind::Dense | TypeKind::Csr => 2,
        TypeKind::Col | TypeKind::Row | TypeKind::Index => 1,
        TypeKind::Scalar => 0,
    };
    if ann.dims.len() != want {
        return Err(Diagnostic::new(
            ann.span,
            format!(
                "{:?} takes {want} dimension(s), found {}",
                ann.kind,
                ann.dims.len()
            ),
        ));
    }
    let d = &ann.dims;
    Ok(match ann.kind {
        TypeKind::Dense => Type::dense(dim_of(&d[0]), dim_of(&d[1])),
        TypeKind::Csr => Type::csr(dim_of(&d[0]), dim_of(&d[1])),
        TypeKind::Col => Type::col(dim_of(&d[0])),
        TypeKind::Row => Type::row(dim_of(&d[0])),
        TypeKind::Index => Type::index(dim_of(&d[0])),
        TypeKind::Scalar => Type::scalar(),
    })
}

fn check_program(p: &ast::ProgramAst, source: &str) -> Result<Program, Diagnostic> {
    let mut ck = Checker {
        graph: Graph::default(),
        env: HashMap::new(),
        body_dims: BTreeSet::new(),
    };
    let mut params = Vec::new();
    let mut dims = BTreeSet::new();
    let mut outputs = Vec::new();
    for (list, is_output) in [(&p.params, false), (&p.outputs, true)] {
        for prm in list.iter() {
            for d in &prm.ty.dims {
                if let Dim::Sym(s) = &d.dim {
                    dims.insert(s.clone());
                }
                if d.dim == Dim::Fixed(0) {
                    return Err(Diagnostic::new(
                        SpanRange::single(d.span),
                        "a dimension cannot be 0",
                    ));
                }
            }
            let ty = declared_type(&prm.ty)?;
            let sig = ParamSig {
                name: prm.name.name.clone(),
                ty,
            };
            if is_output {
                outputs.push((sig, prm.name.span));
            } else {
                params.push(sig);
            }
        }
    }
    // Names: parameters, then dimensions (which are also usable as scalars).
    let mut seen: HashMap<String, ()> = HashMap::new();
    for (prm, sig) in p.params.iter().zip(&params) {
        let name = &prm.name.name;
        check_new_name(&prm.name, &seen)?;
        seen.insert(name.clone(), ());
        let binding = if sig.ty.storage == Storage::Scalar {
            Binding::Scalar(ScalarExpr::Param(name.clone()))
        } else {
            let n = ck.graph.add(
                Op::Input {
                    param: name.clone(),
                },
                sig.ty.clone(),
                &[],
            );
            ck.graph.node_mut(n).name = Some(name.clone());
            Binding::Value(n)
        };
        ck.env.insert(name.clone(), binding);
    }
    for prm in &p.outputs {
        check_new_name(&prm.name, &seen)?;
        seen.insert(prm.name.name.clone(), ());
    }
    for d in &dims {
        if ck.env.contains_key(d) || p.outputs.iter().any(|o| &o.name.name == d) {
            let span = p
                .params
                .iter()
                .chain(&p.outputs)
                .find(|q| &q.name.name == d)
                .map(|q| q.name.span)
                .unwrap_or(p.name.span);
            return Err(Diagnostic::new(
                SpanRange::single(span),
                format!("`{d}` is both a dimension and a parameter name"),
            )
            .with_help("rename the parameter or the dimension"));
        }
        ck.env.insert(d.clone(), Binding::Dim(d.clone()));
    }

    for stmt in &p.body {
        let target = &stmt.target;
        if ck.env.contains_key(&target.name)
            || FUNCTIONS.iter().any(|(f, ..)| *f == target.name)
            || target.name == "inf"
        {
            let what = match ck.env.get(&target.name) {
                Some(Binding::Dim(_)) => "a dimension",
                Some(_) if params.iter().any(|q| q.name == target.name) => "a parameter",
                Some(_) => "already defined by an earlier statement",
                None => "a built-in name",
            };
            return Err(Diagnostic::new(
                SpanRange::single(target.span),
                format!("cannot assign to `{}`: it is {what}", target.name),
            )
            .with_help("every statement binds a new name; choose another one"));
        }
        let binding = ck.lower(&stmt.value)?;
        if let Binding::Value(n) = &binding {
            let node = ck.graph.node_mut(*n);
            if node.name.is_none() {
                node.name = Some(target.name.clone());
            }
        }
        ck.env.insert(target.name.clone(), binding);
    }

    let mut out_nodes = Vec::new();
    for (sig, span) in &outputs {
        let binding = ck.env.get(&sig.name).cloned().ok_or_else(|| {
            Diagnostic::new(
                SpanRange::single(*span),
                format!("output `{}` is never assigned", sig.name),
            )
            .with_help(format!("add a statement `{} = ...;`", sig.name))
        })?;
        let stmt_span = p
            .body
            .iter()
            .find(|s| s.target.name == sig.name)
            .map(|s| s.target.span.into_range())
            .unwrap_or(SpanRange::single(*span));
        let node = match binding {
            Binding::Value(n) => n,
            Binding::Scalar(s) => ck.graph.add(Op::Scalar(s), Type::scalar(), &[]),
            Binding::Dim(d) => ck
                .graph
                .add(Op::Scalar(ScalarExpr::Dim(d)), Type::scalar(), &[]),
        };
        let got = &ck.graph.node(node).ty;
        let scalar_ok = sig.ty.is_scalar()
            && (got.is_scalar()
                || (got.storage == Storage::Dense
                    && got.shape.rows.is_one()
                    && got.shape.cols.is_one()));
        if *got != sig.ty && !scalar_ok {
            return Err(Diagnostic::new(
                stmt_span,
                format!(
                    "output `{}` is declared {} but its value is {}",
                    sig.name, sig.ty, got
                ),
            ));
        }
        out_nodes.push((sig.name.clone(), node));
    }
    ck.graph.outputs = out_nodes;
    Ok(Program {
        name: p.name.name.clone(),
        params,
        outputs: outputs.into_iter().map(|(s, _)| s).collect(),
        graph: ck.graph,
        body_dims: ck.body_dims,
        source: source.to_string(),
        fingerprint: Program::fingerprint_of(&p.name.name, source),
    })
}

trait IntoRange {
    fn into_range(self) -> SpanRange;
}

impl IntoRange for proc_macro2::Span {
    fn into_range(self) -> SpanRange {
        SpanRange::single(self)
    }
}

fn check_new_name(id: &ast::Ident, seen: &HashMap<String, ()>) -> Result<(), Diagnostic> {
    if seen.contains_key(&id.name) {
        return Err(Diagnostic::new(
            SpanRange::single(id.span),
            format!("`{}` is declared twice in the signature", id.name),
        ));
    }
    if id.name == "inf" || FUNCTIONS.iter().any(|(f, ..)| *f == id.name) {
        return Err(Diagnostic::new(
            SpanRange::single(id.span),
            format!("`{}` is a built-in name and cannot be a parameter", id.name),
        ));
    }
    Ok(())
}

fn type_error(err: TypeError, whole: SpanRange, operand_spans: &[SpanRange]) -> Diagnostic {
    let span = err
        .operand
        .and_then(|i| operand_spans.get(i).copied())
        .unwrap_or(whole);
    let d = Diagnostic::new(span, err.message);
    match err.help {
        Some(h) => d.with_help(h),
        None => d,
    }
}

/// Edit distance, for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

impl Checker {
    /// Adds a node after checking its type; errors point at `whole` or at the faulty operand.
    fn node(
        &mut self,
        op: Op,
        operands: &[NodeId],
        whole: SpanRange,
        spans: &[SpanRange],
    ) -> Result<NodeId, Diagnostic> {
        let tys: Vec<Type> = operands
            .iter()
            .map(|o| self.graph.node(*o).ty.clone())
            .collect();
        let refs: Vec<&Type> = tys.iter().collect();
        let ty = result_type(&op, &refs).map_err(|e| type_error(e, whole, spans))?;
        Ok(self.graph.add(op, ty, operands))
    }

    /// A value node for a binding (scalars become scalar nodes).
    fn value(&mut self, b: Binding) -> NodeId {
        match b {
            Binding::Value(n) => n,
            Binding::Scalar(s) => self.graph.add(Op::Scalar(s), Type::scalar(), &[]),
            Binding::Dim(d) => self
                .graph
                .add(Op::Scalar(ScalarExpr::Dim(d)), Type::scalar(), &[]),
        }
    }

    fn as_scalar(b: &Binding) -> Option<ScalarExpr> {
        match b {
            Binding::Scalar(s) => Some(s.clone()),
            Binding::Dim(d) => Some(ScalarExpr::Dim(d.clone())),
            Binding::Value(_) => None,
        }
    }

    /// An element-wise binary operation, folded on the host when both sides are scalars.
    fn binary(
        &mut self,
        op: BinaryOp,
        a: Binding,
        b: Binding,
        whole: SpanRange,
        spans: [SpanRange; 2],
    ) -> Result<Binding, Diagnostic> {
        if let (Some(x), Some(y)) = (Self::as_scalar(&a), Self::as_scalar(&b)) {
            return Ok(Binding::Scalar(ScalarExpr::binary(op, x, y)));
        }
        let (x, y) = (self.value(a), self.value(b));
        Ok(Binding::Value(self.node(
            Op::Binary(op),
            &[x, y],
            whole,
            &spans,
        )?))
    }

    fn lower(&mut self, e: &ast::Expr) -> Result<Binding, Diagnostic> {
        match &e.kind {
            ExprKind::Number(v) => Ok(Binding::Scalar(ScalarExpr::Lit(*v))),
            ExprKind::Var(id) => {
                if let Some(b) = self.env.get(&id.name) {
                    return Ok(b.clone());
                }
                if id.name == "inf" {
                    return Ok(Binding::Scalar(ScalarExpr::Lit(f64::INFINITY)));
                }
                let mut d = Diagnostic::new(e.span, format!("unknown name `{}`", id.name));
                if let Some(c) = closest(&id.name, self.env.keys().map(|s| s.as_str())) {
                    d = d.with_help(format!("did you mean `{c}`?"));
                } else {
                    d = d.with_help(
                        "names are parameters, dimensions, or targets of earlier statements",
                    );
                }
                Err(d)
            }
            ExprKind::Neg(inner) => {
                let b = self.lower(inner)?;
                if let Some(s) = Self::as_scalar(&b) {
                    return Ok(Binding::Scalar(-s));
                }
                let x = self.value(b);
                Ok(Binding::Value(self.node(
                    Op::Unary(UnaryOp::Neg),
                    &[x],
                    e.span,
                    &[inner.span],
                )?))
            }
            ExprKind::Transpose(inner) => {
                let b = self.lower(inner)?;
                if Self::as_scalar(&b).is_some() {
                    return Ok(b);
                }
                let x = self.value(b);
                Ok(Binding::Value(self.node(
                    Op::Transpose,
                    &[x],
                    e.span,
                    &[inner.span],
                )?))
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                let a = self.lower(lhs)?;
                let b = self.lower(rhs)?;
                let spans = [lhs.span, rhs.span];
                let ew = |op: BinOp| match op {
                    BinOp::Add => BinaryOp::Add,
                    BinOp::Sub => BinaryOp::Sub,
                    BinOp::ElemMul | BinOp::MatMul => BinaryOp::Mul,
                    BinOp::Div => BinaryOp::Div,
                    BinOp::Lt => BinaryOp::Lt,
                    BinOp::Le => BinaryOp::Le,
                    BinOp::Gt => BinaryOp::Gt,
                    BinOp::Ge => BinaryOp::Ge,
                    BinOp::Eq => BinaryOp::Eq,
                    BinOp::Ne => BinaryOp::Ne,
                };
                if *op == BinOp::MatMul
                    && Self::as_scalar(&a).is_none()
                    && Self::as_scalar(&b).is_none()
                {
                    let (x, y) = (self.value(a), self.value(b));
                    return Ok(Binding::Value(self.node(
                        Op::MatMul,
                        &[x, y],
                        e.span,
                        &spans,
                    )?));
                }
                self.binary(ew(*op), a, b, e.span, spans)
            }
            ExprKind::Call { func, args } => self.call(func, args, e.span),
        }
    }

    fn call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Expr],
        whole: SpanRange,
    ) -> Result<Binding, Diagnostic> {
        let name = func.name.as_str();
        let Some(&(_, least, most)) = FUNCTIONS.iter().find(|(f, ..)| *f == name) else {
            let mut d = Diagnostic::new(
                SpanRange::single(func.span),
                format!("unknown function `{name}`"),
            );
            d = match closest(name, FUNCTIONS.iter().map(|(f, ..)| *f)) {
                Some(c) => d.with_help(format!("did you mean `{c}`?")),
                None => d.with_help(format!(
                    "the functions are: {}",
                    FUNCTIONS
                        .iter()
                        .map(|(f, ..)| *f)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            return Err(d);
        };
        if !(least..=most).contains(&args.len()) {
            let takes = if least == most {
                format!("{least}")
            } else {
                format!("{least} or {most}")
            };
            return Err(Diagnostic::new(
                whole,
                format!("`{name}` takes {takes} argument(s), found {}", args.len()),
            ));
        }
        // counts and selection take a dimension as their second argument, and optionally
        // the points' weights as their third.
        if name == "counts" || name == "selection" {
            return self.by_label(name, args, whole).map(Binding::Value);
        }
        let mut vals = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.lower(a)?);
        }
        let spans: Vec<SpanRange> = args.iter().map(|a| a.span).collect();
        let unary = |n: &str| match n {
            "exp" => Some(UnaryOp::Exp),
            "log" => Some(UnaryOp::Log),
            "sqrt" => Some(UnaryOp::Sqrt),
            "abs" => Some(UnaryOp::Abs),
            "tanh" => Some(UnaryOp::Tanh),
            _ => None,
        };
        if let Some(u) = unary(name) {
            let b = vals.remove(0);
            if let Some(s) = Self::as_scalar(&b) {
                return Ok(Binding::Scalar(ScalarExpr::unary(u, s)));
            }
            let x = self.value(b);
            return Ok(Binding::Value(self.node(
                Op::Unary(u),
                &[x],
                whole,
                &spans,
            )?));
        }
        let binary = match name {
            "pow" => Some(BinaryOp::Pow),
            "max" => Some(BinaryOp::Max),
            "min" => Some(BinaryOp::Min),
            _ => None,
        };
        if let Some(op) = binary {
            let b = vals.pop().expect("arity checked");
            let a = vals.pop().expect("arity checked");
            return self.binary(op, a, b, whole, [spans[0], spans[1]]);
        }
        let nodes: Vec<NodeId> = vals.into_iter().map(|v| self.value(v)).collect();
        let node = match name {
            "where" => self.node(Op::Select, &nodes, whole, &spans)?,
            "diag" => self.node(
                Op::Builtin(Builtin::Diag(Diag::default())),
                &nodes,
                whole,
                &spans,
            )?,
            "sum_rows" => self.node(Op::RowReduce(Reduce::Sum), &nodes, whole, &spans)?,
            "min_rows" => self.node(Op::RowReduce(Reduce::Min), &nodes, whole, &spans)?,
            "max_rows" => self.node(Op::RowReduce(Reduce::Max), &nodes, whole, &spans)?,
            "argmin_rows" => self.node(Op::RowReduce(Reduce::ArgMin), &nodes, whole, &spans)?,
            "sum_cols" => self.node(Op::ColReduce(Reduce::Sum), &nodes, whole, &spans)?,
            "min_cols" => self.node(Op::ColReduce(Reduce::Min), &nodes, whole, &spans)?,
            "max_cols" => self.node(Op::ColReduce(Reduce::Max), &nodes, whole, &spans)?,
            "sum" => {
                let rows = self.node(Op::RowReduce(Reduce::Sum), &nodes, whole, &spans)?;
                self.node(Op::ColReduce(Reduce::Sum), &[rows], whole, &spans)?
            }
            "rownorms" if self.graph.node(nodes[0]).ty.storage == Storage::Csr => self.node(
                Op::Builtin(Builtin::SparseRowNorms(SparseRowNorms)),
                &nodes,
                whole,
                &spans,
            )?,
            "rownorms" => {
                let x = nodes[0];
                let sq = self.node(
                    Op::Binary(BinaryOp::Mul),
                    &[x, x],
                    whole,
                    &[spans[0], spans[0]],
                )?;
                self.node(Op::RowReduce(Reduce::Sum), &[sq], whole, &spans)?
            }
            "gather" => self.node(Op::Gather, &nodes, whole, &spans)?,
            "monomials" => self.node(
                Op::Builtin(Builtin::Monomials(Monomials)),
                &nodes,
                whole,
                &spans,
            )?,
            other => unreachable!("function `{other}` is listed but not lowered"),
        };
        Ok(Binding::Value(node))
    }

    /// `counts(labels, k)`, `selection(labels, k)` and their weighted forms (a third
    /// argument, the weights): `counts(labels, k, w)` is the weights summed by label
    /// ([`LabelSums`]), `selection(labels, k, w)` the weighted selection matrix.
    fn by_label(
        &mut self,
        name: &str,
        args: &[ast::Expr],
        whole: SpanRange,
    ) -> Result<NodeId, Diagnostic> {
        let k = self.dim_argument(&args[1])?;
        let labels = self.lower(&args[0])?;
        let labels = self.value(labels);
        let Some(w) = args.get(2) else {
            let op = Op::Builtin(if name == "counts" {
                Builtin::Counts(Counts { k })
            } else {
                Builtin::Selection(Selection::plain(k))
            });
            return self.node(op, &[labels], whole, &[args[0].span]);
        };
        let weights = self.lower(w)?;
        let weights = self.value(weights);
        if name == "counts" {
            let (lt, wt) = (&self.graph.node(labels).ty, &self.graph.node(weights).ty);
            check_weights(lt, wt, "counts")
                .map_err(|e| type_error(e, whole, &[args[0].span, w.span]))?;
            // LabelSums takes (x, labels): its operand spans in that order.
            self.node(
                Op::Builtin(Builtin::LabelSums(LabelSums { k })),
                &[weights, labels],
                whole,
                &[w.span, args[0].span],
            )
        } else {
            self.node(
                Op::Builtin(Builtin::Selection(Selection::weighted(k))),
                &[labels, weights],
                whole,
                &[args[0].span, w.span],
            )
        }
    }

    /// The `k` of `counts(labels, k)`: a dimension name or an integer literal. A name not
    /// bound to anything introduces a new dimension (given when the program is called).
    fn dim_argument(&mut self, e: &ast::Expr) -> Result<Dim, Diagnostic> {
        match &e.kind {
            ExprKind::Var(id) => match self.env.get(&id.name) {
                Some(Binding::Dim(d)) => Ok(Dim::Sym(d.clone())),
                None if id.name != "inf" => {
                    self.env.insert(id.name.clone(), Binding::Dim(id.name.clone()));
                    self.body_dims.insert(id.name.clone());
                    Ok(Dim::Sym(id.name.clone()))
                }
                _ => Err(Diagnostic::new(e.span, format!("`{}` is not a dimension", id.name))
                    .with_help("the number of clusters must be a dimension of the signature, such as `k`, or an integer")),
            },
            ExprKind::Number(v) if *v >= 1.0 && v.fract() == 0.0 => Ok(Dim::Fixed(*v as usize)),
            _ => Err(Diagnostic::new(e.span, "expected a dimension (such as `k`) or a positive integer")),
        }
    }
}
