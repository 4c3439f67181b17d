//! Program signatures: parameter lists, the output list and type annotations.

use super::cursor::{Cursor, TokenKind};
use super::literal::read_dim;
use crate::ast::{DimAnn, Param, SpanRange, TypeAnn, TypeKind};
use crate::diag::Diagnostic;
use crate::types::Dim;
use proc_macro2::Delimiter;

const TYPE_LIST: &str = "Dense, Csr, Col, Row, Index or Scalar";

/// The kind keyword `name` names, if any.
fn type_kind(name: &str) -> Option<TypeKind> {
    Some(match name {
        "Dense" => TypeKind::Dense,
        "Csr" => TypeKind::Csr,
        "Col" => TypeKind::Col,
        "Row" => TypeKind::Row,
        "Index" => TypeKind::Index,
        "Scalar" => TypeKind::Scalar,
        _ => return None,
    })
}

/// How a kind is written with its dimensions, for messages.
fn usage(kind: TypeKind) -> (&'static str, usize, &'static str) {
    match kind {
        TypeKind::Dense => ("Dense", 2, "Dense[rows, cols]"),
        TypeKind::Csr => ("Csr", 2, "Csr[rows, cols]"),
        TypeKind::Col => ("Col", 1, "Col[n]"),
        TypeKind::Row => ("Row", 1, "Row[n]"),
        TypeKind::Index => ("Index", 1, "Index[n]"),
        TypeKind::Scalar => ("Scalar", 0, "Scalar"),
    }
}

/// Parses `name: Type, ...` up to and including the closing `)`; the `(` is already consumed.
/// `what` names the list in messages ("parameter", "output").
pub(crate) fn parse_param_list(c: &mut Cursor, what: &str) -> Result<Vec<Param>, Diagnostic> {
    let mut params = Vec::new();
    loop {
        if c.eat_close(Delimiter::Parenthesis).is_some() {
            return Ok(params);
        }
        params.push(parse_param(c, what)?);
        if c.eat_punct(',').is_none() {
            c.expect_close(
                Delimiter::Parenthesis,
                &format!("expected `,` or `)` after the {what}"),
            )?;
            return Ok(params);
        }
    }
}

/// Parses `name: Type`.
fn parse_param(c: &mut Cursor, what: &str) -> Result<Param, Diagnostic> {
    let name = c.expect_name(&format!("a {what} name"))?;
    c.expect_punct(
        ':',
        &format!("expected `:` and a type after `{}`", name.name),
    )?;
    let ty = parse_type(c)?;
    Ok(Param { name, ty })
}

/// Parses `-> (name: Type, ...)`.
pub(crate) fn parse_outputs(c: &mut Cursor) -> Result<Vec<Param>, Diagnostic> {
    let is_arrow =
        c.peek().is_some_and(|t| t.is_punct('-')) && c.peek_nth(1).is_some_and(|t| t.is_punct('>'));
    if !is_arrow {
        return Err(c
            .error_expected("expected `->` and the outputs after the parameters")
            .with_help("every program declares its outputs: `-> (name: Type, ...)`"));
    }
    c.next_token();
    c.next_token();
    let Some(open) = c.eat_open(Delimiter::Parenthesis) else {
        let mut err =
            c.error_expected("expected `(` after `->`: the outputs are written in parentheses");
        if let Some(TokenKind::Ident(name)) = c.peek().map(|t| &t.kind) {
            err = err.with_help(format!(
                "write `-> ({name}: Type, ...)`, even for a single output"
            ));
        }
        return Err(err);
    };
    let outputs = parse_param_list(c, "output")?;
    if outputs.is_empty() {
        return Err(Diagnostic::new(
            SpanRange {
                start: open,
                end: c.last_span(),
            },
            "a program must have at least one output",
        ));
    }
    Ok(outputs)
}

/// Parses a type annotation: `Dense[r, c]`, `Csr[r, c]`, `Col[n]`, `Row[n]`, `Index[n]` or
/// `Scalar`.
pub(crate) fn parse_type(c: &mut Cursor) -> Result<TypeAnn, Diagnostic> {
    let expected = format!("expected a type ({TYPE_LIST})");
    let Some(TokenKind::Ident(name)) = c.peek().map(|t| t.kind.clone()) else {
        return Err(c.error_expected(&expected));
    };
    let Some(kind) = type_kind(&name) else {
        let mut err = c.error_expected(&expected);
        let close = ["Dense", "Csr", "Col", "Row", "Index", "Scalar"]
            .into_iter()
            .find(|k| k.eq_ignore_ascii_case(&name));
        if let Some(k) = close {
            err = err.with_help(format!("type names are capitalised: `{k}`"));
        }
        return Err(err);
    };
    let kind_span = c.here();
    c.next_token();
    let (word, arity, form) = usage(kind);
    if kind == TypeKind::Scalar {
        if c.peek().is_some_and(|t| t.is_open(Delimiter::Bracket)) {
            return Err(Diagnostic::new(
                SpanRange::single(c.here()),
                "`Scalar` takes no dimensions",
            )
            .with_help("write `Scalar` alone"));
        }
        return Ok(TypeAnn {
            kind,
            dims: Vec::new(),
            span: SpanRange::single(kind_span),
        });
    }
    if c.eat_open(Delimiter::Bracket).is_none() {
        return Err(c
            .error_expected(&format!("expected `[` and the dimensions after `{word}`"))
            .with_help(format!("write `{form}`")));
    }
    let mut dims = Vec::new();
    let close = loop {
        if let Some(close) = c.eat_close(Delimiter::Bracket) {
            break close;
        }
        dims.push(parse_dim(c)?);
        if c.eat_punct(',').is_none() {
            break c.expect_close(
                Delimiter::Bracket,
                "expected `,` or `]` after the dimension",
            )?;
        }
    };
    let span = SpanRange {
        start: kind_span,
        end: close,
    };
    if dims.len() != arity {
        let plural = if arity == 1 {
            "dimension"
        } else {
            "dimensions"
        };
        return Err(Diagnostic::new(
            span,
            format!("`{word}` takes {arity} {plural}, found {}", dims.len()),
        )
        .with_help(format!("write `{form}`")));
    }
    Ok(TypeAnn { kind, dims, span })
}

/// Parses one dimension: a name or a whole number.
fn parse_dim(c: &mut Cursor) -> Result<DimAnn, Diagnostic> {
    let span = c.here();
    match c.peek().map(|t| t.kind.clone()) {
        Some(TokenKind::Ident(_)) => {
            let ident = c.expect_name("a dimension")?;
            Ok(DimAnn {
                dim: Dim::Sym(ident.name),
                span,
            })
        }
        Some(TokenKind::Literal(lit)) => {
            let size = read_dim(&lit, span)?;
            c.next_token();
            Ok(DimAnn {
                dim: Dim::Fixed(size),
                span,
            })
        }
        _ => Err(c.error_expected("expected a dimension (a name or a whole number)")),
    }
}
