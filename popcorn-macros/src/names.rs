//! Rust identifiers for the names of a popcorn program.

use proc_macro2::{Ident, Span};

/// Keywords that can be used as identifiers only in raw form (`r#type`), in any edition.
const RAW_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "do", "dyn",
    "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let",
    "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return",
    "static", "struct", "trait", "true", "try", "type", "typeof", "unsafe", "unsized", "use",
    "virtual", "where", "while", "yield",
];

/// Keywords that cannot be identifiers at all, not even raw.
const FORBIDDEN: &[&str] = &["self", "Self", "super", "crate", "_"];

/// The Rust identifier for a popcorn name, raw where the name is a Rust keyword; an error at
/// `span` for the few keywords Rust does not accept even in raw form.
pub(crate) fn rust_ident(name: &str, span: Span) -> syn::Result<Ident> {
    if FORBIDDEN.contains(&name) {
        return Err(syn::Error::new(
            span,
            format!("`{name}` is a Rust keyword and cannot name an item of the generated Rust API"),
        ));
    }
    if RAW_KEYWORDS.contains(&name) {
        return Ok(Ident::new_raw(name, span));
    }
    Ok(Ident::new(name, span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_plain() {
        let id = rust_ident("K", Span::call_site()).expect("valid");
        assert_eq!(id.to_string(), "K");
    }

    #[test]
    fn keywords_become_raw() {
        for kw in ["type", "in", "match", "gen", "async"] {
            let id = rust_ident(kw, Span::call_site()).expect("valid");
            assert_eq!(id.to_string(), format!("r#{kw}"));
        }
    }

    #[test]
    fn self_is_rejected() {
        for kw in FORBIDDEN {
            let err = rust_ident(kw, Span::call_site()).expect_err("must fail");
            assert!(err.to_string().contains("Rust keyword"), "{err}");
        }
    }
}
