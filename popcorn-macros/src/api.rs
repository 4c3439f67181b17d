//! The Rust API of one program: what the generated module exposes, with the spans of the
//! names the user wrote (so that IDEs and errors lead back to the invocation).

use crate::names::rust_ident;
use popcorn_dsl::ast::{Expr, ExprKind, Param, ProgramAst, TypeAnn, TypeKind};
use popcorn_dsl::{Dim, Program};
use proc_macro2::{Ident, Span};
use std::collections::BTreeSet;

/// Whether a parameter or output is a tensor or a host scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// `&Tensor` as a parameter, `Tensor` as an output.
    Tensor,
    /// `f64`.
    Scalar,
}

/// A named parameter, output or dimension of the generated API.
#[derive(Clone, Debug)]
pub(crate) struct Value {
    /// Its Rust identifier (raw for keywords), spanned at the user's token.
    pub ident: Ident,
    /// The popcorn name, for `Args` and `Outputs` look-ups.
    pub name: String,
    /// Tensor or scalar (dimensions are `usize` and use `Scalar` here).
    pub kind: ValueKind,
}

/// What the module generated for one program exposes.
#[derive(Clone, Debug)]
pub(crate) struct ProgramApi {
    /// The module's identifier (the program's name).
    pub module: Ident,
    /// The program's name.
    pub name: String,
    /// The signature as written, for doc comments.
    pub signature: String,
    /// Parameters, in signature order.
    pub inputs: Vec<Value>,
    /// Outputs, in signature order.
    pub outputs: Vec<Value>,
    /// Dimensions the inputs do not determine, sorted.
    pub free_dims: Vec<Value>,
}

impl ProgramApi {
    /// The API of a checked program; `ast` is the same program's syntax (for spans).
    pub(crate) fn from_checked(ast: &ProgramAst, program: &Program) -> syn::Result<ProgramApi> {
        let value = |list: &[Param], name: &str, scalar: bool| -> syn::Result<Value> {
            let span = list
                .iter()
                .find(|p| p.name.name == name)
                .map_or(ast.name.span, |p| p.name.span);
            Ok(Value {
                ident: rust_ident(name, span)?,
                name: name.to_string(),
                kind: if scalar {
                    ValueKind::Scalar
                } else {
                    ValueKind::Tensor
                },
            })
        };
        let inputs = program
            .params
            .iter()
            .map(|p| value(&ast.params, &p.name, p.ty.is_scalar()))
            .collect::<syn::Result<_>>()?;
        let outputs = program
            .outputs
            .iter()
            .map(|p| value(&ast.outputs, &p.name, p.ty.is_scalar()))
            .collect::<syn::Result<_>>()?;
        Ok(ProgramApi {
            module: rust_ident(&program.name, ast.name.span)?,
            name: program.name.clone(),
            signature: program.signature(),
            inputs,
            outputs,
            free_dims: dim_values(ast, &program.free_dims())?,
        })
    }

    /// The API a program's signature promises, for a stand-in module while the invocation has
    /// errors (the body may not even parse). Dimensions introduced in the body are unknown.
    pub(crate) fn from_header(ast: &ProgramAst) -> syn::Result<ProgramApi> {
        let value = |p: &Param| -> syn::Result<Value> {
            Ok(Value {
                ident: rust_ident(&p.name.name, p.name.span)?,
                name: p.name.name.clone(),
                kind: if p.ty.kind == TypeKind::Scalar {
                    ValueKind::Scalar
                } else {
                    ValueKind::Tensor
                },
            })
        };
        let sym_dims = |list: &[Param], tensors_only: bool| -> BTreeSet<String> {
            list.iter()
                .filter(|p| !tensors_only || p.ty.kind != TypeKind::Scalar)
                .flat_map(|p| p.ty.dims.iter())
                .filter_map(|d| match &d.dim {
                    Dim::Sym(s) => Some(s.clone()),
                    Dim::Fixed(_) => None,
                })
                .collect()
        };
        let bound = sym_dims(&ast.params, true);
        let mut all = sym_dims(&ast.params, false);
        all.extend(sym_dims(&ast.outputs, false));
        let free: BTreeSet<String> = all.difference(&bound).cloned().collect();
        let list = |v: &[Param]| {
            v.iter()
                .map(|p| format!("{}: {}", p.name.name, type_text(&p.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Ok(ProgramApi {
            module: rust_ident(&ast.name.name, ast.name.span)?,
            name: ast.name.name.clone(),
            signature: format!(
                "fn {}({}) -> ({})",
                ast.name.name,
                list(&ast.params),
                list(&ast.outputs)
            ),
            inputs: ast.params.iter().map(value).collect::<syn::Result<_>>()?,
            outputs: ast.outputs.iter().map(value).collect::<syn::Result<_>>()?,
            free_dims: dim_values(ast, &free)?,
        })
    }

    /// Inputs followed by free dimensions: the parameters of `run` after the context.
    pub(crate) fn call_params(&self) -> impl Iterator<Item = &Value> {
        self.inputs.iter().chain(&self.free_dims)
    }
}

/// A type annotation as written.
fn type_text(ty: &TypeAnn) -> String {
    if ty.kind == TypeKind::Scalar {
        return "Scalar".to_string();
    }
    let dims: Vec<String> = ty.dims.iter().map(|d| d.dim.to_string()).collect();
    format!("{:?}[{}]", ty.kind, dims.join(", "))
}

/// The values for dimension parameters, spanned where the dimension is first written.
fn dim_values(ast: &ProgramAst, dims: &BTreeSet<String>) -> syn::Result<Vec<Value>> {
    dims.iter()
        .map(|d| {
            Ok(Value {
                ident: rust_ident(d, dim_span(ast, d).unwrap_or(ast.name.span))?,
                name: d.clone(),
                kind: ValueKind::Scalar,
            })
        })
        .collect()
}

/// Where dimension `name` is first written: in the signature, or as the second argument of
/// `counts` / `selection` in the body.
fn dim_span(ast: &ProgramAst, name: &str) -> Option<Span> {
    let in_signature = ast
        .params
        .iter()
        .chain(&ast.outputs)
        .flat_map(|p| p.ty.dims.iter())
        .find(|d| matches!(&d.dim, Dim::Sym(s) if s == name))
        .map(|d| d.span);
    in_signature.or_else(|| {
        ast.body
            .iter()
            .find_map(|s| dim_argument_span(&s.value, name))
    })
}

/// The span of `name` as a dimension argument anywhere inside `root` (walked without
/// recursion: expressions may nest deeply).
fn dim_argument_span(root: &Expr, name: &str) -> Option<Span> {
    let mut stack = vec![root];
    while let Some(e) = stack.pop() {
        match &e.kind {
            ExprKind::Number(_) | ExprKind::Var(_) => {}
            ExprKind::Neg(inner) | ExprKind::Transpose(inner) => stack.push(inner),
            ExprKind::Binary { lhs, rhs, .. } => {
                stack.push(rhs);
                stack.push(lhs);
            }
            ExprKind::Call { func, args } => {
                let takes_dim = func.name == "counts" || func.name == "selection";
                if let (true, Some(ExprKind::Var(id))) = (takes_dim, args.get(1).map(|a| &a.kind)) {
                    if id.name == name {
                        return Some(id.span);
                    }
                }
                stack.extend(args.iter().rev());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ast_and_program(src: &str) -> (ProgramAst, Program) {
        let module = popcorn_dsl::parse::parse_str(src).expect("parses");
        let program = Program::parse(src).expect("checks");
        (module.programs[0].clone(), program)
    }

    fn names(v: &[Value]) -> Vec<String> {
        v.iter().map(|x| x.ident.to_string()).collect()
    }

    #[test]
    fn checked_api_lists_inputs_outputs_and_free_dims() {
        let (ast, p) = ast_and_program(
            "fn f(K: Dense[n, n], labels: Index[n], gamma: Scalar) -> (D: Dense[n, k], obj: Scalar) {
                V = selection(labels, k);
                D = gamma * K * V^T;
                obj = sum(D);
            }",
        );
        let api = ProgramApi::from_checked(&ast, &p).expect("api");
        assert_eq!(api.module.to_string(), "f");
        assert_eq!(names(&api.inputs), ["K", "labels", "gamma"]);
        let kinds: Vec<ValueKind> = api.inputs.iter().map(|v| v.kind).collect();
        assert_eq!(
            kinds,
            [ValueKind::Tensor, ValueKind::Tensor, ValueKind::Scalar]
        );
        assert_eq!(names(&api.outputs), ["D", "obj"]);
        assert_eq!(api.outputs[1].kind, ValueKind::Scalar);
        assert_eq!(names(&api.free_dims), ["k"]);
        assert_eq!(api.signature, p.signature());
    }

    #[test]
    fn body_dims_are_found_in_calls() {
        let (ast, p) = ast_and_program(
            "fn c(labels: Index[n]) -> (sizes: Col[m]) { s = counts(labels, m); sizes = s; }",
        );
        assert!(dim_span(&ast, "m").is_some());
        assert!(dim_span(&ast, "q").is_none());
        let api = ProgramApi::from_checked(&ast, &p).expect("api");
        assert_eq!(names(&api.free_dims), ["m"]);
    }

    #[test]
    fn header_api_matches_checked_api_for_signature_dims() {
        let src = "fn g(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, k]) { Y = X; }";
        let module = popcorn_dsl::parse::parse_str(src).expect("parses");
        let api = ProgramApi::from_header(&module.programs[0]).expect("api");
        assert_eq!(names(&api.inputs), ["X", "a"]);
        assert_eq!(names(&api.free_dims), ["k"]);
        assert_eq!(
            api.signature,
            "fn g(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, k])"
        );
    }

    #[test]
    fn keyword_names_become_raw_identifiers() {
        let (ast, p) =
            ast_and_program("fn r#match(r#type: Col[n]) -> (r#in: Col[n]) { r#in = r#type; }");
        let api = ProgramApi::from_checked(&ast, &p).expect("api");
        assert_eq!(api.module.to_string(), "r#match");
        assert_eq!(names(&api.inputs), ["r#type"]);
        assert_eq!(api.inputs[0].name, "type");
        assert_eq!(names(&api.outputs), ["r#in"]);
    }
}
