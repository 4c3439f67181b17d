//! Diagnostics: an error message attached to source tokens, and its rendering with line and
//! column for programs parsed at run time.

use crate::ast::SpanRange;
use std::fmt;

/// An error found while parsing or checking, attached to the offending tokens. It holds
/// compiler spans, so it is neither `Send` nor `Sync`: the proc-macro turns it into a
/// `syn::Error`, [`Diagnostic::locate`] into a [`LocatedError`].
#[derive(Clone, Debug)]
pub struct Diagnostic {
    /// What is wrong, in one sentence.
    pub message: String,
    /// The tokens it is about.
    pub span: SpanRange,
    /// What to do about it, when there is something to say.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A diagnostic without help text.
    pub fn new(span: SpanRange, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            help: None,
        }
    }

    /// Adds help text.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The message followed by the help text, as one string (what the proc-macro reports).
    pub fn full_message(&self) -> String {
        match &self.help {
            Some(h) => format!("{}\n  help: {}", self.message, h),
            None => self.message.clone(),
        }
    }

    /// Line and column of the span's start (1-based line, 1-based column) plus the source line,
    /// for a program parsed from `source` at run time.
    pub fn locate(&self, source: &str) -> LocatedError {
        let start = self.span.start.start();
        let end = self.span.end.end();
        let line_text = source
            .lines()
            .nth(start.line.saturating_sub(1))
            .unwrap_or("")
            .to_string();
        let width = if end.line == start.line && end.column > start.column {
            end.column - start.column
        } else {
            1
        };
        LocatedError {
            line: start.line,
            column: start.column + 1,
            width,
            message: self.message.clone(),
            help: self.help.clone(),
            line_text,
        }
    }
}

/// A parse or check error with its position in a source text. Displays like a compiler
/// message: the error, `--> line:column`, the source line and a caret under the tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatedError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// Number of characters underlined.
    pub width: usize,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: Option<String>,
    /// The source line the error is on.
    pub line_text: String,
}

impl fmt::Display for LocatedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} at line {}, column {}",
            self.message, self.line, self.column
        )?;
        writeln!(f, "  |")?;
        writeln!(f, "{:>3} | {}", self.line, self.line_text)?;
        write!(
            f,
            "  | {}{}",
            " ".repeat(self.column - 1),
            "^".repeat(self.width.max(1))
        )?;
        if let Some(h) = &self.help {
            write!(f, "\n  = help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LocatedError {}
