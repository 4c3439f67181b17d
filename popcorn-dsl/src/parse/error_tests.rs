//! Tests of every parse error: message, help and position (`Diagnostic::locate`).

use super::parse_str;
use crate::diag::LocatedError;

/// 1-based (line, column) of the character `offset` chars into the first occurrence of `needle`.
fn position(src: &str, needle: &str, offset: usize) -> (usize, usize) {
    let byte = src
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in `{src}`"));
    let before = &src[..byte];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = src[line_start..byte].chars().count() + 1 + offset;
    (line, column)
}

fn error(src: &str) -> LocatedError {
    match parse_str(src) {
        Ok(_) => panic!("`{src}` parsed but should not"),
        Err(d) => d.locate(src),
    }
}

/// Asserts the error of `src`: message contains `message`, position at `needle` + `offset`.
fn check(src: &str, message: &str, needle: &str, offset: usize) -> LocatedError {
    let e = error(src);
    assert!(
        e.message.contains(message),
        "`{src}`: message `{}` lacks `{message}`",
        e.message
    );
    assert_eq!(
        (e.line, e.column),
        position(src, needle, offset),
        "`{src}`: {e}"
    );
    e
}

fn help(e: &LocatedError) -> &str {
    e.help.as_deref().unwrap_or("")
}

/// A program whose body is `body`.
fn prog(body: &str) -> String {
    format!("fn p(a: Scalar, b: Scalar) -> (x: Scalar) {{\n{body}\n}}")
}

#[test]
fn parse_error_missing_semicolon() {
    // Before `}`: at the statement's last token.
    let src = prog("    x = a + 1\n");
    check(&src, "expected `;` after the statement", "1\n", 0);
    // Before the next statement on another line: at the end of the unfinished one.
    let src = prog("    y = a\n    x = y;");
    let e = check(
        &src,
        "expected `;` after the statement, found `x`",
        "a\n",
        0,
    );
    assert!(help(&e).contains("missing"));
    // Two operands side by side on one line: at the second.
    let src = prog("x = a b;");
    let e = check(&src, "found `b`", "b;", 0);
    assert!(help(&e).contains("operator"));
    // An unknown operator.
    let src = prog("x = a % b;");
    let e = check(&src, "found `%`", "%", 0);
    assert!(help(&e).contains(".*"));
    // `=` twice.
    let src = prog("x = a = b;");
    check(&src, "found `=`", "= b", 0);
}

#[test]
fn parse_error_types() {
    let sig = |ty: &str| format!("fn p(m: {ty}) -> (x: Scalar) {{ x = m; }}");
    let src = sig("Foo[n]");
    let e = check(
        &src,
        "expected a type (Dense, Csr, Col, Row, Index or Scalar), found `Foo`",
        "Foo",
        0,
    );
    assert!(e.help.is_none());
    let e = check(&sig("dense[n, n]"), "found `dense`", "dense", 0);
    assert!(help(&e).contains("`Dense`"));
    let e = check(
        &sig("Dense[n]"),
        "`Dense` takes 2 dimensions, found 1",
        "Dense",
        0,
    );
    assert_eq!(e.width, "Dense[n]".len());
    assert!(help(&e).contains("Dense[rows, cols]"));
    check(
        &sig("Csr[a, b, c]"),
        "`Csr` takes 2 dimensions, found 3",
        "Csr",
        0,
    );
    check(
        &sig("Col[n, m]"),
        "`Col` takes 1 dimension, found 2",
        "Col",
        0,
    );
    check(&sig("Row[]"), "`Row` takes 1 dimension, found 0", "Row", 0);
    check(&sig("Index[n, n]"), "`Index` takes 1 dimension", "Index", 0);
    check(&sig("Scalar[n]"), "`Scalar` takes no dimensions", "[n]", 0);
    let e = check(
        &sig("Dense n"),
        "expected `[` and the dimensions after `Dense`, found `n`",
        "n)",
        0,
    );
    assert!(help(&e).contains("Dense[rows, cols]"));
    check(&sig("Dense<n, n>"), "found `<`", "<", 0);
    check(
        &sig("Col"),
        "expected `[` and the dimensions after `Col`, found `)`",
        ")",
        0,
    );
    check(
        &sig("Dense[2.5, n]"),
        "a dimension must be a name or a whole number, found `2.5`",
        "2.5",
        0,
    );
    check(&sig("Col[3usize]"), "suffix `usize`", "3usize", 0);
    check(
        &sig("Col[n m]"),
        "expected `,` or `]` after the dimension, found `m`",
        "m]",
        0,
    );
    check(
        &sig("Col[-]"),
        "expected a dimension (a name or a whole number), found `-`",
        "-]",
        0,
    );
    check(&sig("Col[fn]"), "found the keyword `fn`", "fn]", 0);
    check(
        &sig(""),
        "expected a type (Dense, Csr, Col, Row, Index or Scalar), found `)`",
        ")",
        0,
    );
    check(&sig("3"), "expected a type", "3", 0);
}

#[test]
fn parse_error_signature() {
    check(
        "fn p(a: Scalar) { a = a; }",
        "expected `->` and the outputs after the parameters, found `{`",
        "{",
        0,
    );
    let src = "fn p(a: Scalar) -> x: Scalar { x = a; }";
    let e = check(
        src,
        "expected `(` after `->`: the outputs are written in parentheses",
        "x:",
        0,
    );
    assert!(help(&e).contains("-> (x: Type, ...)"));
    check(
        "fn p(a: Scalar) -> () { }",
        "a program must have at least one output",
        "()",
        0,
    );
    check(
        "fn p(a Scalar) -> (x: Scalar) {}",
        "expected `:` and a type after `a`, found `Scalar`",
        "Scalar",
        0,
    );
    check(
        "fn p(a: Scalar b: Scalar) -> (x: Scalar) {}",
        "expected `,` or `)` after the parameter, found `b`",
        "b:",
        0,
    );
    check(
        "fn p(a: Scalar) -> (x: Scalar y: Scalar) {}",
        "expected `,` or `)` after the output, found `y`",
        "y:",
        0,
    );
    check(
        "fn p(1: Scalar) -> (x: Scalar) {}",
        "expected a parameter name, found `1`",
        "1",
        0,
    );
    check(
        "fn p(a: Scalar) -> (x: Scalar) a",
        "expected `{` and the statements after the outputs, found `a`",
        ") a",
        2,
    );
    check(
        "fn p a: Scalar",
        "expected `(` and the parameters after `fn p`, found `a`",
        "a:",
        0,
    );
    check(
        "fn (a: Scalar)",
        "expected the program's name, found `(`",
        "(",
        0,
    );
    let e = check(
        "fn fn() -> (x: Scalar) {}",
        "found the keyword `fn`",
        "fn(",
        0,
    );
    assert!(help(&e).contains("cannot be used as a name"));
}

#[test]
fn parse_error_end_of_input_points_at_last_token() {
    check("fn p(a: Scalar) ->", "expected `(` after `->`", ">", 0);
    check(
        "fn",
        "expected the program's name, found end of input",
        "fn",
        0,
    );
    let src = "fn p(a: Scalar) -> (x: Scalar)";
    let expected = "expected `{` and the statements after the outputs, found end of input";
    check(src, expected, src, src.len() - 1);
    check(
        "fn p(a: Scalar) -> (x: Scalar) {} fn q",
        "found end of input",
        "q",
        0,
    );
}

#[test]
fn parse_error_module_level() {
    for src in ["", "   ", "// only a comment\n"] {
        let e = error(src);
        assert!(
            e.message.contains("expected at least one program"),
            "{src:?}: {e}"
        );
        assert_eq!((e.line, e.column), (1, 1));
    }
    let e = check(
        "pub fn p() -> (x: Scalar) {}",
        "expected `fn` to start a program, found `pub`",
        "pub",
        0,
    );
    assert!(help(&e).contains("remove `pub`"));
    check(
        "fn p() -> (x: Scalar) {} ;",
        "expected `fn` to start a program, found `;`",
        ";",
        0,
    );
}

#[test]
fn parse_error_lexing() {
    let src = "fn p() -> (x: Scalar) {\n  x = \"abc;\n}";
    check(src, "cannot split the source into tokens", "\"", 0);
    check(
        "fn p(a: Scalar",
        "cannot split the source into tokens",
        "(",
        0,
    );
    check(
        "fn p() -> (x: Scalar) {}\n/* open",
        "cannot split the source into tokens",
        "/*",
        0,
    );
}

#[test]
fn parse_error_comparisons_and_caret() {
    let src = prog("x = a < b < a;");
    let e = check(&src, "comparison operators cannot be chained", "< a;", 0);
    assert!(help(&e).contains("parenthesise"));
    check(&prog("x = a == b != a;"), "cannot be chained", "!=", 0);
    check(
        &prog("x = a + 1 <= b + 1 > a;"),
        "cannot be chained",
        "> a",
        0,
    );
    for (body, found) in [
        ("x = a^2;", "`2`"),
        ("x = a^t;", "`t`"),
        ("x = a^;", "`;`"),
        ("x = a^T^(b);", "`(`"),
    ] {
        let src = prog(body);
        let caret = body.rfind('^').unwrap_or(0);
        let e = check(
            &src,
            &format!("expected `T` after `^`, found {found}"),
            body,
            caret,
        );
        assert!(help(&e).contains("pow(x, y)"), "{body}");
        assert!(help(&e).contains("`^T`"), "{body}");
        assert_eq!(e.width, 2, "{body}: the caret and the next token");
    }
}

#[test]
fn parse_error_expressions() {
    let cases = [
        (
            "x = 2f32 * a;",
            "numeric literal `2f32` has a suffix `f32`",
            "2f32",
            0,
        ),
        ("x = 1.5e3f64;", "suffix `f64`", "1.5e3f64", 0),
        (
            "x = \"a\";",
            "expected a number, found the literal `\"a\"`",
            "\"a\"",
            0,
        ),
        ("x = 0x1F;", "hexadecimal", "0x1F", 0),
        ("x = 1e999;", "too large", "1e999", 0),
        (
            "x = ();",
            "expected an expression inside the parentheses",
            "()",
            0,
        ),
        ("x = ;", "expected an expression, found `;`", ";", 0),
        ("x = a +;", "expected an expression, found `;`", ";", 0),
        (
            "x = a * (b + );",
            "expected an expression, found `)`",
            " );",
            1,
        ),
        (
            "x = (a b);",
            "expected an operator or `)`, found `b`",
            "b)",
            0,
        ),
        (
            "x = f(a b);",
            "expected an operator, `,` or `)` in the arguments of `f`, found `b`",
            "b)",
            0,
        ),
        ("x = f(a,,b);", "expected an expression, found `,`", ",b", 0),
        (
            "x = a . b;",
            "expected `*` or `/` after `.`, found `b`",
            ".",
            0,
        ),
        (
            "x = a.;",
            "expected `*` or `/` after `.`, found `;`",
            ".",
            0,
        ),
        ("x = [a];", "expected an expression, found `[`", "[", 0),
        ("x = {a};", "expected an expression, found `{`", "{a", 0),
        (
            "x = fn;",
            "expected an expression, found the keyword `fn`",
            "fn;",
            0,
        ),
        ("x = ->a;", "expected an expression, found `>`", "->a", 1),
    ];
    for (body, message, needle, offset) in cases {
        check(&prog(body), message, needle, offset);
    }
    let e = check(
        &prog("x = .5;"),
        "expected an expression, found `.`",
        ".5",
        0,
    );
    assert!(help(&e).contains("0.5"));
}

#[test]
fn parse_error_statements() {
    let e = check(&prog("let x = a;"), "unexpected `let`", "let", 0);
    assert!(help(&e).contains("no `let`"));
    let e = check(
        &prog("x += a;"),
        "expected `=` after `x`, found `+`",
        "+",
        0,
    );
    assert!(help(&e).contains("x = x <op>"));
    check(
        &prog("x == a;"),
        "expected `=` after `x`, found `=`",
        "==",
        0,
    );
    check(&prog("x a;"), "expected `=` after `x`, found `a`", "a;", 0);
    check(
        &prog("1 = a;"),
        "expected a statement `name = expression;`, found `1`",
        "1 =",
        0,
    );
    check(
        &prog("x = a;;"),
        "expected a statement `name = expression;`, found `;`",
        ";;",
        1,
    );
    check(&prog("x"), "expected `=` after `x`, found `}`", "}", 0);
}

#[test]
fn parse_error_size_limits() {
    let deep = format!("x = {}a{};", "(".repeat(200), ")".repeat(200));
    check(&prog(&deep), "nested too deeply", "((", 100);
    let negs = format!("x = {}a;", "- ".repeat(150));
    check(&prog(&negs), "nested too deeply", "- ", 200);
    let chain = format!("x = {};", vec!["a"; 500].join(" + "));
    let e = error(&prog(&chain));
    assert!(e.message.contains("expression too large"), "{e}");
    assert!(help(&e).contains("several statements"));
    // Thousands of unmatched-by-the-grammar brackets stay an error, not a crash.
    let brackets = format!("fn p{}{}", "[".repeat(5000), "]".repeat(5000));
    check(
        &brackets,
        "expected `(` and the parameters after `fn p`, found `[`",
        "[",
        0,
    );
}
