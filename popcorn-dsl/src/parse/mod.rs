//! The parser: tokens (from the proc-macro or from source text) to a [`Module`].
//!
//! ```text
//! module    := program+
//! program   := "fn" name "(" params ")" "->" "(" params ")" "{" stmt* "}"
//! params    := (name ":" type ("," name ":" type)* ","?)?
//! type      := ("Dense" | "Csr") "[" dim "," dim "]" | ("Col" | "Row" | "Index") "[" dim "]"
//!            | "Scalar"
//! stmt      := name "=" expr ";"
//! expr      := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
//! sum       := product (("+" | "-") product)*
//! product   := unary (("*" | ".*" | "/" | "./") unary)*
//! unary     := ("-" | "+") unary | postfix
//! postfix   := primary ("^" "T")*
//! primary   := number | name | name "(" (expr ("," expr)* ","?)? ")" | "(" expr ")"
//! ```

mod cursor;
mod expr;
mod literal;
mod signature;

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

use crate::ast::{Module, ProgramAst, SpanRange, Stmt};
use crate::diag::Diagnostic;
use cursor::{Cursor, TokenKind};
use proc_macro2::{Delimiter, Span, TokenStream};

/// Parses a module (one or more programs) from tokens.
pub fn parse_module(tokens: TokenStream) -> Result<Module, Diagnostic> {
    let mut c = Cursor::new(cursor::flatten(tokens));
    if c.at_end() {
        return Err(Diagnostic::new(
            SpanRange::single(Span::call_site()),
            "expected at least one program, found nothing",
        )
        .with_help("write `fn name(inputs) -> (outputs) { statements }`"));
    }
    let mut programs = Vec::new();
    while !c.at_end() {
        programs.push(parse_program(&mut c)?);
    }
    Ok(Module { programs })
}

/// Tokenizes source text and parses it; a lexing error (e.g. an unterminated string) becomes a
/// Diagnostic at line 1 or the best position available.
pub fn parse_str(source: &str) -> Result<Module, Diagnostic> {
    let tokens: TokenStream = source.parse().map_err(|e: proc_macro2::LexError| {
        Diagnostic::new(
            SpanRange::single(e.span()),
            "cannot split the source into tokens here",
        )
        .with_help(
            "look for an unbalanced bracket, an unterminated string or block comment, \
             or a character that is not allowed",
        )
    })?;
    parse_module(tokens)
}

/// `fn name(params) -> (outputs) { statements }`.
fn parse_program(c: &mut Cursor) -> Result<ProgramAst, Diagnostic> {
    if !c.peek().is_some_and(|t| t.is_ident("fn")) {
        let mut err = c.error_expected("expected `fn` to start a program");
        if c.peek().is_some_and(|t| t.is_ident("pub")) {
            err = err.with_help("programs take no visibility: remove `pub`");
        }
        return Err(err);
    }
    let start = c.here();
    c.next_token();
    let name = c.expect_name("the program's name")?;
    c.expect_open(
        Delimiter::Parenthesis,
        &format!("expected `(` and the parameters after `fn {}`", name.name),
    )?;
    let params = signature::parse_param_list(c, "parameter")?;
    let outputs = signature::parse_outputs(c)?;
    c.expect_open(
        Delimiter::Brace,
        "expected `{` and the statements after the outputs",
    )?;
    let mut body = Vec::new();
    let end = loop {
        if let Some(close) = c.eat_close(Delimiter::Brace) {
            break close;
        }
        body.push(parse_stmt(c)?);
    };
    Ok(ProgramAst {
        name,
        params,
        outputs,
        body,
        span: SpanRange { start, end },
    })
}

/// `name = expr ;`.
fn parse_stmt(c: &mut Cursor) -> Result<Stmt, Diagnostic> {
    let is_let = c.peek().is_some_and(|t| t.is_ident("let"))
        && c.peek_nth(1)
            .is_some_and(|t| matches!(t.kind, TokenKind::Ident(_)));
    if is_let {
        return Err(
            Diagnostic::new(SpanRange::single(c.here()), "unexpected `let`")
                .with_help("statements need no `let`: write `name = expression;`"),
        );
    }
    let target = c.expect_name("a statement `name = expression;`")?;
    let next_is_eq = |n: usize| c.peek_nth(n).is_some_and(|t| t.is_punct('='));
    if !next_is_eq(0) || next_is_eq(1) {
        let mut err = c.error_expected(&format!("expected `=` after `{}`", target.name));
        let compound = c
            .peek()
            .is_some_and(|t| "+-*/".chars().any(|op| t.is_punct(op)));
        if compound && next_is_eq(1) {
            err = err.with_help(format!(
                "compound assignments are not supported: write `{0} = {0} <op> ...;`",
                target.name
            ));
        }
        return Err(err);
    }
    c.next_token();
    let value = expr::parse_expr(c)?;
    if c.eat_punct(';').is_none() {
        return Err(missing_semicolon(c, value.span.end));
    }
    Ok(Stmt { target, value })
}

/// The error for a statement not followed by `;`: at the found token when it is on the
/// statement's line, otherwise at the statement's last token (where the `;` belongs).
fn missing_semicolon(c: &Cursor, stmt_end: Span) -> Diagnostic {
    let message = "expected `;` after the statement";
    let Some(next) = c.peek() else {
        return Diagnostic::new(SpanRange::single(stmt_end), message);
    };
    if next.is_close(Delimiter::Brace) {
        return Diagnostic::new(SpanRange::single(stmt_end), message);
    }
    let found = format!("{message}, found {}", next.describe());
    if next.span.start().line != stmt_end.end().line {
        return Diagnostic::new(SpanRange::single(stmt_end), found)
            .with_help("the `;` ending this statement is missing");
    }
    let help = match next.kind {
        TokenKind::Punct(_) => {
            format!("the operators are {}", expr::operator_list())
        }
        _ => "an operator or a `;` is missing before it".to_string(),
    };
    Diagnostic::new(SpanRange::single(next.span), found).with_help(help)
}
