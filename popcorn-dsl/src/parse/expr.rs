//! Expressions, by precedence climbing. Binding, loosest first: comparisons (non-associative),
//! `+ -`, `* .* /` (all left-associative), unary `-`/`+`, postfix `^T`, then primaries (numbers,
//! names, calls, parenthesised expressions).

use super::cursor::{Cursor, TokenKind};
use super::literal::read_number;
use crate::ast::{BinOp, Expr, ExprKind, Ident, SpanRange};
use crate::diag::Diagnostic;
use proc_macro2::{Delimiter, Span};

/// Deepest nesting of parentheses, calls and unary operators the parser recurses into.
const MAX_NESTING: usize = 100;
/// Deepest expression tree accepted (later passes walk trees recursively).
const MAX_TREE_DEPTH: usize = 400;

const OPERATORS: &str = "+ - * .* / ^T < <= > >= == !=";

/// An expression and the depth of its tree.
struct Parsed {
    expr: Expr,
    depth: usize,
}

/// Parses one expression, stopping before the first token that cannot continue it.
pub(crate) fn parse_expr(c: &mut Cursor) -> Result<Expr, Diagnostic> {
    let mut parser = ExprParser { c, nesting: 0 };
    parser.expr().map(|p| p.expr)
}

/// The operator list, for help texts.
pub(crate) fn operator_list() -> &'static str {
    OPERATORS
}

struct ExprParser<'a> {
    c: &'a mut Cursor,
    nesting: usize,
}

fn is_comparison(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
    )
}

/// Left and right binding power of a binary operator.
fn binding_power(op: BinOp) -> (u8, u8) {
    match op {
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne => (1, 2),
        BinOp::Add | BinOp::Sub => (3, 4),
        BinOp::MatMul | BinOp::ElemMul | BinOp::Div => (5, 6),
    }
}

impl ExprParser<'_> {
    /// Enters one level of recursion, failing past [`MAX_NESTING`].
    fn enter(&mut self) -> Result<(), Diagnostic> {
        if self.nesting >= MAX_NESTING {
            return Err(Diagnostic::new(
                SpanRange::single(self.c.here()),
                format!("expression nested too deeply (more than {MAX_NESTING} levels)"),
            )
            .with_help("split it into several statements"));
        }
        self.nesting += 1;
        Ok(())
    }

    /// A whole expression, with a nesting guard.
    fn expr(&mut self) -> Result<Parsed, Diagnostic> {
        self.enter()?;
        let result = self.binary(0);
        self.nesting -= 1;
        result
    }

    /// Binary operators binding at least as tightly as `min_bp`.
    fn binary(&mut self, min_bp: u8) -> Result<Parsed, Diagnostic> {
        let mut lhs = self.unary()?;
        let mut lhs_is_comparison = false;
        while let Some((op, op_span, len)) = self.peek_binop()? {
            let (left_bp, right_bp) = binding_power(op);
            if left_bp < min_bp {
                break;
            }
            if is_comparison(op) && lhs_is_comparison {
                let help = "`a < b < c` has no meaning here; \
                            compare two values at a time and parenthesise";
                return Err(
                    Diagnostic::new(op_span, "comparison operators cannot be chained")
                        .with_help(help),
                );
            }
            for _ in 0..len {
                self.c.next_token();
            }
            let rhs = self.binary(right_bp)?;
            let span = lhs.expr.span.to(rhs.expr.span);
            let depth = lhs.depth.max(rhs.depth);
            let kind = ExprKind::Binary {
                op,
                op_span,
                lhs: Box::new(lhs.expr),
                rhs: Box::new(rhs.expr),
            };
            lhs = node(kind, span, depth)?;
            lhs_is_comparison = is_comparison(op);
        }
        Ok(lhs)
    }

    /// The binary operator at the cursor, its span and its number of tokens, without consuming
    /// it. `None` when the next token cannot continue an expression.
    fn peek_binop(&self) -> Result<Option<(BinOp, SpanRange, usize)>, Diagnostic> {
        let Some(first) = self.c.peek() else {
            return Ok(None);
        };
        let TokenKind::Punct(ch) = first.kind else {
            return Ok(None);
        };
        let second = self.c.peek_nth(1);
        let followed_by_eq = second.is_some_and(|t| t.is_punct('='));
        let one = |op| Ok(Some((op, SpanRange::single(first.span), 1)));
        let two = |op, second: Span| {
            Ok(Some((
                op,
                SpanRange {
                    start: first.span,
                    end: second,
                },
                2,
            )))
        };
        match ch {
            '+' => one(BinOp::Add),
            '-' => one(BinOp::Sub),
            '*' => one(BinOp::MatMul),
            '/' => one(BinOp::Div),
            '.' => match second {
                Some(t) if t.is_punct('*') => two(BinOp::ElemMul, t.span),
                // `./` is `/` (already element-wise), spelled as in MATLAB for readers who
                // write `K * y ./ sum_rows(K)`.
                Some(t) if t.is_punct('/') => two(BinOp::Div, t.span),
                _ => {
                    let end = second.map(|t| t.span).unwrap_or(first.span);
                    Err(Diagnostic::new(
                        SpanRange {
                            start: first.span,
                            end,
                        },
                        format!("expected `*` or `/` after `.`, found {}", describe(second)),
                    )
                    .with_help(
                        "`.` is only used in `.*` (element-wise multiplication) and `./` \
                         (element-wise division, the same as `/`)",
                    ))
                }
            },
            '<' | '>' | '=' | '!' if followed_by_eq => {
                let op = match ch {
                    '<' => BinOp::Le,
                    '>' => BinOp::Ge,
                    '=' => BinOp::Eq,
                    _ => BinOp::Ne,
                };
                let end = second.map(|t| t.span).unwrap_or(first.span);
                two(op, end)
            }
            '<' => one(BinOp::Lt),
            '>' => one(BinOp::Gt),
            _ => Ok(None),
        }
    }

    /// Unary minus and plus (binding tighter than binary operators, looser than `^T`).
    fn unary(&mut self) -> Result<Parsed, Diagnostic> {
        let is_minus = self.c.peek().is_some_and(|t| t.is_punct('-'));
        let is_plus = self.c.peek().is_some_and(|t| t.is_punct('+'));
        if !is_minus && !is_plus {
            return self.postfix();
        }
        let sign = self.c.here();
        self.c.next_token();
        self.enter()?;
        let operand = self.unary();
        self.nesting -= 1;
        let operand = operand?;
        let span = SpanRange {
            start: sign,
            end: operand.expr.span.end,
        };
        if is_plus {
            let Parsed { expr, depth } = operand;
            return Ok(Parsed {
                expr: Expr {
                    kind: expr.kind,
                    span,
                },
                depth,
            });
        }
        node(ExprKind::Neg(Box::new(operand.expr)), span, operand.depth)
    }

    /// A primary followed by any number of `^T`.
    fn postfix(&mut self) -> Result<Parsed, Diagnostic> {
        let mut operand = self.primary()?;
        while let Some(caret) = self.c.eat_punct('^') {
            match self.c.peek() {
                Some(t) if t.is_ident("T") => {
                    let end = t.span;
                    self.c.next_token();
                    let span = SpanRange {
                        start: operand.expr.span.start,
                        end,
                    };
                    operand = node(
                        ExprKind::Transpose(Box::new(operand.expr)),
                        span,
                        operand.depth,
                    )?;
                }
                next => {
                    let end = next.map(|t| t.span).unwrap_or(caret);
                    return Err(Diagnostic::new(
                        SpanRange { start: caret, end },
                        format!("expected `T` after `^`, found {}", describe(next)),
                    )
                    .with_help(
                        "`^T` (transpose) is the only use of `^`; for powers write `pow(x, y)`",
                    ));
                }
            }
        }
        Ok(operand)
    }

    /// A number, a name, a call or a parenthesised expression.
    fn primary(&mut self) -> Result<Parsed, Diagnostic> {
        let Some(token) = self.c.peek().cloned() else {
            return Err(self.c.error_expected("expected an expression"));
        };
        let at = SpanRange::single(token.span);
        match token.kind {
            TokenKind::Literal(lit) => {
                let number = read_number(&lit, token.span)?;
                self.c.next_token();
                let value = Expr {
                    kind: ExprKind::Number(number.value),
                    span: at,
                };
                if number.negative {
                    return node(ExprKind::Neg(Box::new(value)), at, 1);
                }
                Ok(Parsed {
                    expr: value,
                    depth: 1,
                })
            }
            TokenKind::Ident(_) => {
                let name = self.c.expect_name("an expression")?;
                if self
                    .c
                    .peek()
                    .is_some_and(|t| t.is_open(Delimiter::Parenthesis))
                {
                    return self.call(name);
                }
                let span = SpanRange::single(name.span);
                Ok(Parsed {
                    expr: Expr {
                        kind: ExprKind::Var(name),
                        span,
                    },
                    depth: 1,
                })
            }
            TokenKind::Open(d @ (Delimiter::Parenthesis | Delimiter::None)) => self.group(d),
            TokenKind::Punct('.')
                if self
                    .c
                    .peek_nth(1)
                    .is_some_and(|t| matches!(t.kind, TokenKind::Literal(_))) =>
            {
                Err(self
                    .c
                    .error_expected("expected an expression")
                    .with_help("write a leading zero: `0.5`, not `.5`"))
            }
            _ => Err(self.c.error_expected("expected an expression")),
        }
    }

    /// `( expr )`, the opening delimiter next.
    fn group(&mut self, d: Delimiter) -> Result<Parsed, Diagnostic> {
        let open = self.c.here();
        self.c.next_token();
        if let Some(close) = self.c.eat_close(d) {
            return Err(Diagnostic::new(
                SpanRange {
                    start: open,
                    end: close,
                },
                "expected an expression inside the parentheses",
            ));
        }
        let inner = self.expr()?;
        let close = self.c.expect_close(d, "expected an operator or `)`")?;
        let Parsed { expr, depth } = inner;
        Ok(Parsed {
            expr: Expr {
                kind: expr.kind,
                span: SpanRange {
                    start: open,
                    end: close,
                },
            },
            depth,
        })
    }

    /// `func(arg, ...)`, the `(` next.
    fn call(&mut self, func: Ident) -> Result<Parsed, Diagnostic> {
        self.c.next_token();
        let mut args = Vec::new();
        let mut depth = 0;
        let close = loop {
            if let Some(close) = self.c.eat_close(Delimiter::Parenthesis) {
                break close;
            }
            let arg = self.expr()?;
            depth = depth.max(arg.depth);
            args.push(arg.expr);
            if self.c.eat_punct(',').is_none() {
                let expected = format!(
                    "expected an operator, `,` or `)` in the arguments of `{}`",
                    func.name
                );
                break self.c.expect_close(Delimiter::Parenthesis, &expected)?;
            }
        };
        let span = SpanRange {
            start: func.span,
            end: close,
        };
        node(ExprKind::Call { func, args }, span, depth)
    }
}

/// A node one level above children of depth `child_depth`, rejecting trees too deep.
fn node(kind: ExprKind, span: SpanRange, child_depth: usize) -> Result<Parsed, Diagnostic> {
    let depth = child_depth + 1;
    if depth > MAX_TREE_DEPTH {
        return Err(Diagnostic::new(
            span,
            format!("expression too large (more than {MAX_TREE_DEPTH} nested operations)"),
        )
        .with_help("split it into several statements"));
    }
    Ok(Parsed {
        expr: Expr { kind, span },
        depth,
    })
}

/// A token quoted for a message, or "end of input".
fn describe(token: Option<&super::cursor::Token>) -> String {
    token
        .map(|t| t.describe())
        .unwrap_or_else(|| "end of input".into())
}
