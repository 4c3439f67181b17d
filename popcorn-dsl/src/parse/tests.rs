//! Tests of programs that parse: precedence, associativity, types, modules and spans.

use super::parse_str;
use crate::ast::{BinOp, Expr, ExprKind, Module, TypeKind};
use crate::types::Dim;

/// Renders an expression fully parenthesised, so tests can assert the tree's shape.
pub(super) fn sexpr(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Number(v) => format!("{v}"),
        ExprKind::Var(i) => i.name.clone(),
        ExprKind::Neg(x) => format!("(-{})", sexpr(x)),
        ExprKind::Transpose(x) => format!("{}^T", sexpr(x)),
        ExprKind::Binary { op, lhs, rhs, .. } => {
            format!("({} {} {})", sexpr(lhs), op.symbol(), sexpr(rhs))
        }
        ExprKind::Call { func, args } => {
            let args: Vec<String> = args.iter().map(sexpr).collect();
            format!("{}({})", func.name, args.join(", "))
        }
    }
}

fn parse_ok(src: &str) -> Module {
    match parse_str(src) {
        Ok(m) => m,
        Err(d) => panic!("{}", d.locate(src)),
    }
}

/// Wraps `x = <expr>;` in a program and returns the parsed expression.
fn expr_of(expr: &str) -> Expr {
    let src = format!("fn p(a: Scalar) -> (x: Scalar) {{ x = {expr}; }}");
    let m = parse_ok(&src);
    m.programs[0].body[0].value.clone()
}

fn shape(expr: &str) -> String {
    sexpr(&expr_of(expr))
}

#[test]
fn parse_precedence_and_associativity() {
    let cases = [
        ("a + b * c", "(a + (b * c))"),
        ("a * b + c", "((a * b) + c)"),
        ("a - b - c", "((a - b) - c)"),
        ("a / b / c", "((a / b) / c)"),
        ("a * b .* c / d", "(((a * b) .* c) / d)"),
        ("-V^T", "(-V^T)"),
        ("2 * K * V^T", "((2 * K) * V^T)"),
        ("-2 * K * V^T", "(((-2) * K) * V^T)"),
        ("a .* b + c", "((a .* b) + c)"),
        ("a + b .* c", "(a + (b .* c))"),
        ("(a+b)^T", "(a + b)^T"),
        ("V^T^T", "V^T^T"),
        ("-a * b", "((-a) * b)"),
        ("a * -b", "(a * (-b))"),
        ("a - -b", "(a - (-b))"),
        ("--a", "(-(-a))"),
        ("+a", "a"),
        ("a + +b", "(a + b)"),
        ("a < b", "(a < b)"),
        ("a + 1 < b * 2", "((a + 1) < (b * 2))"),
        ("a <= b", "(a <= b)"),
        ("a >= b", "(a >= b)"),
        ("a > b", "(a > b)"),
        ("a == b", "(a == b)"),
        ("a != b", "(a != b)"),
        ("a <-b", "(a < (-b))"),
        ("(a < b) < c", "((a < b) < c)"),
        ("a * (b + c)", "(a * (b + c))"),
        ("((a))", "a"),
        ("a * (1 - a) / n", "((a * (1 - a)) / n)"),
        ("gather(E, labels)", "gather(E, labels)"),
        ("f()", "f()"),
        ("f(a, b,)", "f(a, b)"),
        ("f(a + b, g(c)^T) * 2", "(f((a + b), g(c)^T) * 2)"),
        ("-f(x)^T", "(-f(x)^T)"),
        ("T", "T"),
        ("r#fn_like", "fn_like"),
    ];
    for (src, want) in cases {
        assert_eq!(shape(src), want, "parsing `{src}`");
    }
}

#[test]
fn parse_operators_by_kind() {
    let ops = [
        ("a + b", BinOp::Add),
        ("a - b", BinOp::Sub),
        ("a * b", BinOp::MatMul),
        ("a .* b", BinOp::ElemMul),
        ("a . * b", BinOp::ElemMul),
        ("a ./ b", BinOp::Div),
        ("a / b", BinOp::Div),
        ("a < b", BinOp::Lt),
        ("a <= b", BinOp::Le),
        ("a > b", BinOp::Gt),
        ("a >= b", BinOp::Ge),
        ("a == b", BinOp::Eq),
        ("a != b", BinOp::Ne),
    ];
    for (src, want) in ops {
        let ExprKind::Binary { op, .. } = expr_of(src).kind else {
            panic!("{src}: not binary")
        };
        assert_eq!(op, want, "{src}");
    }
}

#[test]
fn parse_numbers() {
    let cases = [
        ("2", 2.0),
        ("0.5", 0.5),
        ("1e-3", 1e-3),
        ("1.5e3", 1500.0),
        ("1_000", 1000.0),
    ];
    for (src, want) in cases {
        let ExprKind::Number(v) = expr_of(src).kind else {
            panic!("{src}: not a number")
        };
        assert_eq!(v, want, "{src}");
    }
    // `-0.5` is negation of 0.5.
    let e = expr_of("-0.5");
    let ExprKind::Neg(inner) = e.kind else {
        panic!("not Neg")
    };
    assert!(matches!(inner.kind, ExprKind::Number(v) if v == 0.5));
    // Rust's tokenizer reads `2.*x` as `2.` then `*`: a scaling, the same value as `2 .* x`.
    assert_eq!(shape("2.*x"), "(2 * x)");
}

fn dims(d: &[crate::ast::DimAnn]) -> Vec<Dim> {
    d.iter().map(|d| d.dim.clone()).collect()
}

#[test]
fn parse_all_type_forms() {
    let src = "fn t(a: Dense[n, 3], b: Csr[k, n,], c: Col[n], d: Row[1], e: Index[m], f: Scalar,)
               -> (o: Dense[2, 2]) { o = a; }";
    let m = parse_ok(src);
    let p = &m.programs[0];
    let sym = |s: &str| Dim::Sym(s.into());
    let want = [
        ("a", TypeKind::Dense, vec![sym("n"), Dim::Fixed(3)]),
        ("b", TypeKind::Csr, vec![sym("k"), sym("n")]),
        ("c", TypeKind::Col, vec![sym("n")]),
        ("d", TypeKind::Row, vec![Dim::Fixed(1)]),
        ("e", TypeKind::Index, vec![sym("m")]),
        ("f", TypeKind::Scalar, vec![]),
    ];
    assert_eq!(p.params.len(), want.len());
    for (param, (name, kind, d)) in p.params.iter().zip(want) {
        assert_eq!(param.name.name, name);
        assert_eq!(param.ty.kind, kind, "{name}");
        assert_eq!(dims(&param.ty.dims), d, "{name}");
    }
    assert_eq!(p.outputs.len(), 1);
    assert_eq!(p.outputs[0].ty.kind, TypeKind::Dense);
    assert_eq!(
        dims(&p.outputs[0].ty.dims),
        vec![Dim::Fixed(2), Dim::Fixed(2)]
    );
}

const KMEANS: &str = "\
// comments are allowed anywhere
fn distances(K: Dense[n, n], V: Csr[k, n], labels: Index[n], pn: Col[n]) -> (D: Dense[n, k]) {
    E  = -2 * K * V^T;
    z  = gather(E, labels);        // z_i = E[i, labels_i]
    cn = -0.5 * V * z;
    /* block comment */
    D  = E + pn + cn^T;
}
fn pagerank(A: Csr[n, n], r: Col[n], a: Scalar) -> (r2: Col[n], s: Scalar) {
    r2 = a * A * r + (1 - a) / n;
    s = 1;
}
";

#[test]
fn parse_module_with_several_programs_and_comments() {
    let m = parse_ok(KMEANS);
    assert_eq!(m.programs.len(), 2);
    let d = &m.programs[0];
    assert_eq!(d.name.name, "distances");
    let names: Vec<&str> = d.params.iter().map(|p| p.name.name.as_str()).collect();
    assert_eq!(names, ["K", "V", "labels", "pn"]);
    assert_eq!(d.outputs[0].name.name, "D");
    let body: Vec<(String, String)> = d
        .body
        .iter()
        .map(|s| (s.target.name.clone(), sexpr(&s.value)))
        .collect();
    let want = [
        ("E", "(((-2) * K) * V^T)"),
        ("z", "gather(E, labels)"),
        ("cn", "(((-0.5) * V) * z)"),
        ("D", "((E + pn) + cn^T)"),
    ];
    assert_eq!(body.len(), want.len());
    for ((t, e), (wt, we)) in body.iter().zip(want) {
        assert_eq!((t.as_str(), e.as_str()), (wt, we));
    }
    let p = &m.programs[1];
    assert_eq!(p.name.name, "pagerank");
    assert_eq!(p.outputs.len(), 2);
    assert_eq!(sexpr(&p.body[0].value), "(((a * A) * r) + ((1 - a) / n))");
}

#[test]
fn parse_empty_body_and_no_params() {
    let m = parse_ok("fn f() -> (x: Scalar) {}");
    assert!(m.programs[0].params.is_empty());
    assert!(m.programs[0].body.is_empty());
}

/// (line, 0-based column) of a span's start and end.
fn at(span: proc_macro2::Span) -> ((usize, usize), (usize, usize)) {
    let (s, e) = (span.start(), span.end());
    ((s.line, s.column), (e.line, e.column))
}

#[test]
fn parse_spans_cover_tokens() {
    let m = parse_ok(KMEANS);
    let d = &m.programs[0];
    // `fn` at line 2 col 0, `}` at line 8 col 0.
    assert_eq!(at(d.span.start).0, (2, 0));
    assert_eq!(at(d.span.end), ((8, 0), (8, 1)));
    // Line 3: `    E  = -2 * K * V^T;`: the value spans `-` (col 9) to `T` (col 20).
    let e = &d.body[0].value;
    assert_eq!(at(e.span.start).0, (3, 9));
    assert_eq!(at(e.span.end), ((3, 20), (3, 21)));
    let ExprKind::Binary { op_span, rhs, .. } = &e.kind else {
        panic!()
    };
    assert_eq!(at(op_span.start).0, (3, 16));
    assert_eq!(at(rhs.span.start).0, (3, 18));
    // Line 4: the call spans `gather` to `)`.
    let z = &d.body[1].value;
    assert_eq!(at(z.span.start).0, (4, 9));
    assert_eq!(at(z.span.end).1, (4, 26));
    // Type annotation `Dense[n, n]` on line 2.
    let ty = &d.params[0].ty;
    assert_eq!(at(ty.span.start).0, (2, 16));
    assert_eq!(at(ty.span.end).1, (2, 27));
    assert_eq!(at(ty.dims[1].span).0, (2, 25));
    // Two-token operators span both tokens; parentheses are part of a group's span.
    let src = "fn p(a: Scalar) -> (x: Scalar) {\nx = (a + 1) <= a .* b;\n}";
    let m = parse_ok(src);
    let v = &m.programs[0].body[0].value;
    let ExprKind::Binary {
        op_span, lhs, rhs, ..
    } = &v.kind
    else {
        panic!()
    };
    assert_eq!((at(op_span.start).0, at(op_span.end).1), ((2, 12), (2, 14)));
    assert_eq!(
        (at(lhs.span.start).0, at(lhs.span.end).1),
        ((2, 4), (2, 11))
    );
    let ExprKind::Binary { op_span, .. } = &rhs.kind else {
        panic!()
    };
    assert_eq!((at(op_span.start).0, at(op_span.end).1), ((2, 17), (2, 19)));
}

#[test]
fn parse_module_from_token_stream() {
    let tokens: proc_macro2::TokenStream =
        KMEANS.parse().unwrap_or_else(|e| panic!("tokenizing: {e}"));
    let m = super::parse_module(tokens).unwrap_or_else(|d| panic!("{}", d.message));
    assert_eq!(m.programs.len(), 2);
    // Re-stringified tokens (Joint spacing lost) still parse the same.
    let again: proc_macro2::TokenStream = m_to_string(KMEANS)
        .parse()
        .unwrap_or_else(|e| panic!("re-tokenizing: {e}"));
    let m2 = super::parse_module(again).unwrap_or_else(|d| panic!("{}", d.message));
    let a: Vec<String> = m.programs[0].body.iter().map(|s| sexpr(&s.value)).collect();
    let b: Vec<String> = m2.programs[0]
        .body
        .iter()
        .map(|s| sexpr(&s.value))
        .collect();
    assert_eq!(a, b);
}

/// Puts spaces between all tokens, the way a macro's `to_string` may.
fn m_to_string(src: &str) -> String {
    let tokens: proc_macro2::TokenStream = src.parse().unwrap_or_default();
    fn spaced(ts: proc_macro2::TokenStream, out: &mut String) {
        use proc_macro2::{Delimiter, TokenTree};
        for t in ts {
            match t {
                TokenTree::Group(g) => {
                    let (o, c) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{", "}"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(o);
                    out.push(' ');
                    spaced(g.stream(), out);
                    out.push_str(c);
                    out.push(' ');
                }
                other => {
                    out.push_str(&other.to_string());
                    out.push(' ');
                }
            }
        }
    }
    let mut out = String::new();
    spaced(tokens, &mut out);
    out
}

#[test]
fn parse_nesting_at_the_limit() {
    // 90 nested parentheses are fine.
    let src = format!("{}a{}", "(".repeat(90), ")".repeat(90));
    assert_eq!(shape(&src), "a");
    // A long chain of additions is fine up to the tree limit.
    let chain = vec!["a"; 300].join(" + ");
    let tree = shape(&chain);
    assert!(
        tree.starts_with("(((")
            && tree.ends_with("+ a) + a) + a)")
            && tree.contains("((a + a) + a)"),
        "{tree}"
    );
    assert_eq!(tree.matches('(').count(), 299);
}
