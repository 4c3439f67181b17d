//! Splitting a macro invocation into the token streams of its programs.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};

/// The invocation's top-level tokens cut before each `fn`: one stream per program (a program
/// cannot contain `fn` outside its groups). Tokens before the first `fn`, if any, form a
/// chunk of their own.
pub(crate) fn program_chunks(tokens: TokenStream) -> Vec<TokenStream> {
    let mut chunks: Vec<Vec<TokenTree>> = Vec::new();
    for tree in tokens {
        let starts_program = matches!(&tree, TokenTree::Ident(i) if i == "fn");
        match chunks.last_mut() {
            Some(chunk) if !starts_program => chunk.push(tree),
            _ => chunks.push(vec![tree]),
        }
    }
    chunks
        .into_iter()
        .map(|c| c.into_iter().collect())
        .collect()
}

/// The program's header alone: its tokens up to its body, followed by an empty body, so that
/// the signature can be parsed even when the body has errors. `None` when there is no body.
pub(crate) fn header_only(chunk: &TokenStream) -> Option<TokenStream> {
    let trees: Vec<TokenTree> = chunk.clone().into_iter().collect();
    let body = trees
        .iter()
        .position(|t| matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))?;
    let mut empty = Group::new(Delimiter::Brace, TokenStream::new());
    empty.set_span(trees[body].span());
    let mut header: Vec<TokenTree> = trees[..body].to_vec();
    header.push(TokenTree::Group(empty));
    Some(header.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(s: &str) -> TokenStream {
        s.parse().expect("valid tokens")
    }

    #[test]
    fn one_chunk_per_program() {
        let chunks = program_chunks(tokens(
            "fn a(x: Col[n]) -> (y: Col[n]) { y = x; }\n\
             fn b(x: Col[n]) -> (y: Col[n]) { y = 2 * x; }",
        ));
        assert_eq!(chunks.len(), 2);
        assert!(chunks[0].to_string().starts_with("fn a"));
        assert!(chunks[1].to_string().starts_with("fn b"));
        assert!(chunks[1].to_string().ends_with("}"));
    }

    #[test]
    fn leading_junk_is_its_own_chunk() {
        let chunks = program_chunks(tokens("pub fn a() -> () {}"));
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].to_string(), "pub");
    }

    #[test]
    fn empty_input_has_no_chunks() {
        assert!(program_chunks(TokenStream::new()).is_empty());
    }

    #[test]
    fn header_keeps_signature_and_drops_body() {
        let h = header_only(&tokens("fn a(x: Col[n]) -> (y: Col[n]) { y = x + ; }"))
            .expect("has a body");
        assert_eq!(
            h.to_string(),
            tokens("fn a(x: Col[n]) -> (y: Col[n]) {}").to_string()
        );
        assert!(header_only(&tokens("fn a(x: Col[n])")).is_none());
    }
}
