//! A cursor over a flattened token stream: groups become an opening token, their contents and a
//! closing token, so the parser can look ahead across delimiters with one index.

use crate::ast::{Ident, SpanRange};
use crate::diag::Diagnostic;
use proc_macro2::{Delimiter, Literal, Span, TokenStream, TokenTree};

/// What a flattened token is.
#[derive(Clone, Debug)]
pub(crate) enum TokenKind {
    /// An identifier or keyword, without any `r#` prefix.
    Ident(String),
    /// A single punctuation character.
    Punct(char),
    /// A literal, kept whole (numbers are read by [`super::literal`]).
    Literal(Literal),
    /// The opening delimiter of a group.
    Open(Delimiter),
    /// The closing delimiter of a group.
    Close(Delimiter),
}

/// One flattened token and its span.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// Where it was written.
    pub span: Span,
}

impl Token {
    /// Whether this is the punctuation character `c`.
    pub fn is_punct(&self, c: char) -> bool {
        matches!(self.kind, TokenKind::Punct(p) if p == c)
    }

    /// Whether this is the identifier `name`.
    pub fn is_ident(&self, name: &str) -> bool {
        matches!(&self.kind, TokenKind::Ident(s) if s == name)
    }

    /// Whether this opens a group delimited by `d`.
    pub fn is_open(&self, d: Delimiter) -> bool {
        matches!(self.kind, TokenKind::Open(o) if o == d)
    }

    /// Whether this closes a group delimited by `d`.
    pub fn is_close(&self, d: Delimiter) -> bool {
        matches!(self.kind, TokenKind::Close(c) if c == d)
    }

    /// The token as a user would quote it in a message: "`x`".
    pub fn describe(&self) -> String {
        match &self.kind {
            TokenKind::Ident(s) => format!("`{s}`"),
            TokenKind::Punct(c) => format!("`{c}`"),
            TokenKind::Literal(l) => {
                let text = l.to_string();
                if text.chars().count() > 40 {
                    let short: String = text.chars().take(37).collect();
                    format!("`{short}...`")
                } else {
                    format!("`{text}`")
                }
            }
            TokenKind::Open(d) => open_text(*d),
            TokenKind::Close(d) => close_text(*d),
        }
    }
}

fn open_text(d: Delimiter) -> String {
    match d {
        Delimiter::Parenthesis => "`(`".into(),
        Delimiter::Bracket => "`[`".into(),
        Delimiter::Brace => "`{`".into(),
        Delimiter::None => "a macro-substituted fragment".into(),
    }
}

fn close_text(d: Delimiter) -> String {
    match d {
        Delimiter::Parenthesis => "`)`".into(),
        Delimiter::Bracket => "`]`".into(),
        Delimiter::Brace => "`}`".into(),
        Delimiter::None => "the end of a macro-substituted fragment".into(),
    }
}

/// Flattens a token stream without recursion (deeply nested input cannot exhaust the stack).
pub(crate) fn flatten(stream: TokenStream) -> Vec<Token> {
    let mut out = Vec::new();
    // Each frame: the remaining trees of a group, and its closing token.
    let mut stack: Vec<(proc_macro2::token_stream::IntoIter, Option<Token>)> =
        vec![(stream.into_iter(), None)];
    while let Some((iter, _)) = stack.last_mut() {
        match iter.next() {
            Some(TokenTree::Ident(i)) => {
                let text = i.to_string();
                let name = text.strip_prefix("r#").map(str::to_string).unwrap_or(text);
                out.push(Token {
                    kind: TokenKind::Ident(name),
                    span: i.span(),
                });
            }
            Some(TokenTree::Punct(p)) => {
                out.push(Token {
                    kind: TokenKind::Punct(p.as_char()),
                    span: p.span(),
                });
            }
            Some(TokenTree::Literal(l)) => {
                let span = l.span();
                out.push(Token {
                    kind: TokenKind::Literal(l),
                    span,
                });
            }
            Some(TokenTree::Group(g)) => {
                let d = g.delimiter();
                out.push(Token {
                    kind: TokenKind::Open(d),
                    span: g.span_open(),
                });
                let close = Token {
                    kind: TokenKind::Close(d),
                    span: g.span_close(),
                };
                stack.push((g.stream().into_iter(), Some(close)));
            }
            None => {
                if let Some((_, Some(close))) = stack.pop() {
                    out.push(close);
                }
            }
        }
    }
    out
}

/// A position in a flattened token list.
pub(crate) struct Cursor {
    tokens: Vec<Token>,
    pos: usize,
}

impl Cursor {
    /// A cursor at the first token.
    pub fn new(tokens: Vec<Token>) -> Cursor {
        Cursor { tokens, pos: 0 }
    }

    /// The next token, if any.
    pub fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    /// The token `n` places after the next one (`peek_nth(0)` is `peek()`).
    pub fn peek_nth(&self, n: usize) -> Option<&Token> {
        self.tokens.get(self.pos.checked_add(n)?)
    }

    /// Consumes and returns the next token.
    pub fn next_token(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Whether every token has been consumed.
    pub fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    /// The span of the last consumed token (the first token if none was, the call site if the
    /// input is empty).
    pub fn last_span(&self) -> Span {
        let i = self.pos.saturating_sub(1);
        self.tokens
            .get(i)
            .map(|t| t.span)
            .unwrap_or_else(Span::call_site)
    }

    /// The span of the next token, or of the last one at end of input.
    pub fn here(&self) -> Span {
        self.peek()
            .map(|t| t.span)
            .unwrap_or_else(|| self.last_span())
    }

    /// The next token quoted for a message, or "end of input".
    pub fn describe_next(&self) -> String {
        self.peek()
            .map(Token::describe)
            .unwrap_or_else(|| "end of input".into())
    }

    /// "`expected`, found `next`", pointing at the next token (or the last one at end of input).
    pub fn error_expected(&self, expected: &str) -> Diagnostic {
        Diagnostic::new(
            SpanRange::single(self.here()),
            format!("{expected}, found {}", self.describe_next()),
        )
    }

    /// Consumes the punctuation `c` if it is next.
    pub fn eat_punct(&mut self, c: char) -> Option<Span> {
        if self.peek().is_some_and(|t| t.is_punct(c)) {
            return self.next_token().map(|t| t.span);
        }
        None
    }

    /// Consumes the punctuation `c` or fails with "`expected`, found ...".
    pub fn expect_punct(&mut self, c: char, expected: &str) -> Result<Span, Diagnostic> {
        self.eat_punct(c)
            .ok_or_else(|| self.error_expected(expected))
    }

    /// Consumes an opening delimiter `d` if it is next.
    pub fn eat_open(&mut self, d: Delimiter) -> Option<Span> {
        if self.peek().is_some_and(|t| t.is_open(d)) {
            return self.next_token().map(|t| t.span);
        }
        None
    }

    /// Consumes a closing delimiter `d` if it is next.
    pub fn eat_close(&mut self, d: Delimiter) -> Option<Span> {
        if self.peek().is_some_and(|t| t.is_close(d)) {
            return self.next_token().map(|t| t.span);
        }
        None
    }

    /// Consumes an opening delimiter `d` or fails with "`expected`, found ...".
    pub fn expect_open(&mut self, d: Delimiter, expected: &str) -> Result<Span, Diagnostic> {
        self.eat_open(d)
            .ok_or_else(|| self.error_expected(expected))
    }

    /// Consumes a closing delimiter `d` or fails with "`expected`, found ...".
    pub fn expect_close(&mut self, d: Delimiter, expected: &str) -> Result<Span, Diagnostic> {
        self.eat_close(d)
            .ok_or_else(|| self.error_expected(expected))
    }

    /// Consumes a name (an identifier other than the keyword `fn`) or fails with
    /// "expected `what`, found ...".
    pub fn expect_name(&mut self, what: &str) -> Result<Ident, Diagnostic> {
        match self.peek().map(|t| &t.kind) {
            Some(TokenKind::Ident(name)) if name == "fn" => Err(Diagnostic::new(
                SpanRange::single(self.here()),
                format!("expected {what}, found the keyword `fn`"),
            )
            .with_help("`fn` starts a program and cannot be used as a name")),
            Some(TokenKind::Ident(name)) => {
                let ident = Ident {
                    name: name.clone(),
                    span: self.here(),
                };
                self.pos += 1;
                Ok(ident)
            }
            _ => Err(self.error_expected(&format!("expected {what}"))),
        }
    }
}
