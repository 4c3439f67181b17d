//! Reading numeric literals: decimal integers and floats (`2`, `0.5`, `1e-3`, `1_000`), without
//! type suffixes.

use crate::ast::SpanRange;
use crate::diag::Diagnostic;
use proc_macro2::{Literal, Span};

/// A numeric literal's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Number {
    /// The value, always finite and non-negative unless `negative`.
    pub value: f64,
    /// Whether it was written as a whole number (no `.`, no exponent).
    pub integer: bool,
    /// Whether the literal itself carried a minus sign (only in token streams built by code).
    pub negative: bool,
}

/// The pieces of a decimal literal's text.
struct Split<'a> {
    /// Digits, `.` and exponent, with `_` separators removed.
    number: String,
    /// Whatever follows the number (a type suffix such as `f32`).
    suffix: &'a str,
    integer: bool,
}

/// Reads the number at the start of `text` (which starts with a digit).
fn split_decimal(text: &str) -> Split<'_> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut number = String::new();
    let mut integer = true;
    let digits = |i: &mut usize, number: &mut String| {
        while *i < bytes.len() && (bytes[*i].is_ascii_digit() || bytes[*i] == b'_') {
            if bytes[*i] != b'_' {
                number.push(bytes[*i] as char);
            }
            *i += 1;
        }
    };
    digits(&mut i, &mut number);
    // A fraction: `.` not followed by an identifier character (Rust's `2.` is a float too).
    if i < bytes.len() && bytes[i] == b'.' {
        let after = bytes.get(i + 1).copied();
        if !after.is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'.') {
            integer = false;
            number.push('.');
            i += 1;
            digits(&mut i, &mut number);
        }
    }
    // An exponent: `e`/`E`, an optional sign, then at least one digit.
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        let mut k = j;
        while k < bytes.len() && bytes[k] == b'_' {
            k += 1;
        }
        if k < bytes.len() && bytes[k].is_ascii_digit() {
            integer = false;
            number.push('e');
            number.push_str(&text[i + 1..j]);
            i = j;
            digits(&mut i, &mut number);
        }
    }
    Split {
        number,
        suffix: &text[i..],
        integer,
    }
}

/// Reads a numeric literal, rejecting suffixes, non-decimal bases, non-numbers and overflow.
pub(crate) fn read_number(lit: &Literal, span: Span) -> Result<Number, Diagnostic> {
    let text = lit.to_string();
    let at = SpanRange::single(span);
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    if !body.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(
            Diagnostic::new(at, format!("expected a number, found the literal `{text}`"))
                .with_help(
                "popcorn programs only use numbers; strings and characters have no meaning here",
            ),
        );
    }
    if body.len() > 1 && body.starts_with('0') && body[1..].starts_with(['x', 'o', 'b']) {
        return Err(Diagnostic::new(
            at,
            format!("hexadecimal, octal and binary literals are not supported, found `{text}`"),
        )
        .with_help("write the number in decimal"));
    }
    let split = split_decimal(body);
    if !split.suffix.is_empty() {
        let plain = &body[..body.len() - split.suffix.len()];
        return Err(Diagnostic::new(
            at,
            format!(
                "numeric literal `{text}` has a suffix `{}`; popcorn numbers take no suffix",
                split.suffix
            ),
        )
        .with_help(format!(
            "write `{plain}`: the element type is chosen when the program is compiled"
        )));
    }
    let value: f64 = split
        .number
        .parse()
        .map_err(|_| Diagnostic::new(at, format!("cannot read the number `{text}`")))?;
    if !value.is_finite() {
        return Err(
            Diagnostic::new(at, format!("the number `{text}` is too large"))
                .with_help("write `inf` for infinity"),
        );
    }
    Ok(Number {
        value,
        integer: split.integer,
        negative,
    })
}

/// Reads a literal dimension: a whole, unsuffixed, non-negative number.
pub(crate) fn read_dim(lit: &Literal, span: Span) -> Result<usize, Diagnostic> {
    let text = lit.to_string();
    let number = read_number(lit, span)?;
    let at = SpanRange::single(span);
    if !number.integer || number.negative {
        return Err(Diagnostic::new(
            at,
            format!("a dimension must be a name or a whole number, found `{text}`"),
        ));
    }
    let digits: String = text.chars().filter(|c| *c != '_').collect();
    digits
        .parse::<usize>()
        .map_err(|_| Diagnostic::new(at, format!("the dimension `{text}` is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(text: &str) -> Result<Number, String> {
        let lit: Literal = match text
            .parse::<proc_macro2::TokenStream>()
            .ok()
            .and_then(|ts| ts.into_iter().next())
        {
            Some(proc_macro2::TokenTree::Literal(l)) => l,
            other => panic!("not a literal: {other:?}"),
        };
        read_number(&lit, Span::call_site()).map_err(|d| d.message)
    }

    #[test]
    fn parse_literal_decimal_forms() {
        let cases = [
            ("2", 2.0, true),
            ("0", 0.0, true),
            ("0.5", 0.5, false),
            ("2.", 2.0, false),
            ("1e-3", 1e-3, false),
            ("1.5e3", 1500.0, false),
            ("1E+2", 100.0, false),
            ("1_000", 1000.0, true),
            ("1_000.25", 1000.25, false),
        ];
        for (text, value, integer) in cases {
            let n = num(text).unwrap();
            assert_eq!(n.value, value, "{text}");
            assert_eq!(n.integer, integer, "{text}");
            assert!(!n.negative);
        }
    }

    #[test]
    fn parse_literal_rejects_suffixes_and_others() {
        assert!(num("2f32").unwrap_err().contains("suffix `f32`"));
        assert!(num("1.5e3f64").unwrap_err().contains("suffix `f64`"));
        assert!(num("7usize").unwrap_err().contains("suffix `usize`"));
        assert!(num("1e").unwrap_err().contains("suffix `e`"));
        assert!(num("0x1F").unwrap_err().contains("hexadecimal"));
        assert!(num("\"abc\"").unwrap_err().contains("expected a number"));
        assert!(num("'c'").unwrap_err().contains("expected a number"));
        assert!(num("1e999").unwrap_err().contains("too large"));
    }

    #[test]
    fn parse_literal_negative_from_code() {
        let lit = Literal::f64_unsuffixed(-0.5);
        let n = read_number(&lit, Span::call_site()).unwrap();
        assert_eq!((n.value, n.negative), (0.5, true));
    }
}
