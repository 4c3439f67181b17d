//! Turning a popcorn diagnostic into a compile error on the offending tokens.

use popcorn_dsl::Diagnostic;
use proc_macro2::{Punct, Spacing, Span, TokenStream, TokenTree};

/// A `syn::Error` spanning the diagnostic's first to last token, with its message and help.
pub(crate) fn to_syn_error(diag: &Diagnostic) -> syn::Error {
    spanning(diag.span.start, diag.span.end, diag.full_message())
}

/// An error underlining everything from `start` to `end`: rustc joins the spans of the first
/// and last token of the `compile_error!` invocation that `syn` builds.
pub(crate) fn spanning(start: Span, end: Span, message: impl std::fmt::Display) -> syn::Error {
    let marker = |span: Span| {
        let mut p = Punct::new('.', Spacing::Alone);
        p.set_span(span);
        TokenTree::Punct(p)
    };
    let tokens: TokenStream = [marker(start), marker(end)].into_iter().collect();
    syn::Error::new_spanned(tokens, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use popcorn_dsl::ast::SpanRange;

    #[test]
    fn message_includes_help() {
        let d = Diagnostic::new(SpanRange::single(Span::call_site()), "unknown name `x`")
            .with_help("did you mean `X`?");
        let text = to_syn_error(&d).to_compile_error().to_string();
        assert!(text.contains("compile_error"), "{text}");
        assert!(text.contains("unknown name `x`"), "{text}");
        assert!(text.contains("help: did you mean `X`?"), "{text}");
    }
}
