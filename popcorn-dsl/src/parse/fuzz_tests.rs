//! Property tests: the parser never panics, whatever the tokens, and every error it returns can
//! be located in the source.

use super::parse_str;
use proptest::prelude::*;

/// Tokens of the language and around it.
const WORDS: &[&str] = &[
    "fn", "x", "a", "T", "Dense", "Csr", "Col", "Row", "Index", "Scalar", "gather", "let", "pub",
    "n", "k", "1", "0", "2.5", "1e-3", "2f32", "0x1", "\"s\"", "'c'", "=", ";", ",", ":", "-", ">",
    "->", "+", "*", ".", ".*", "/", "^", "<", "<=", "==", "!=", "!", "%", "&", "#", "?", "@",
    "// c\n", "/* c */", "\n",
];

/// A balanced token soup: words, and groups of soups in any delimiter.
fn soup() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(WORDS).prop_map(str::to_string);
    leaf.prop_recursive(4, 64, 8, |inner| {
        (prop::collection::vec(inner, 0..8), 0..4usize).prop_map(|(parts, delim)| {
            let body = parts.join(" ");
            match delim {
                0 => format!("({body})"),
                1 => format!("[{body}]"),
                2 => format!("{{{body}}}"),
                _ => body,
            }
        })
    })
}

const VALID: &str = "fn distances(K: Dense[n, n], V: Csr[k, n], labels: Index[n], pn: Col[n]) \
                     -> (D: Dense[n, k]) { E = -2 * K * V^T; z = gather(E, labels); \
                     cn = -0.5 * V * z; D = E + pn + cn^T; m = (D .* D) <= 1e-3 / n; }";

fn checked_parse(src: &str) {
    if let Err(d) = parse_str(src) {
        let located = d.locate(src);
        assert!(located.line >= 1 && located.column >= 1, "{src}: {located}");
        assert!(!located.message.is_empty());
        let _ = located.to_string();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parse_never_panics_on_token_soup(parts in prop::collection::vec(soup(), 0..24)) {
        checked_parse(&parts.join(" "));
    }

    #[test]
    fn parse_never_panics_on_program_shaped_soup(
        params in soup(), outputs in soup(), body in soup(),
    ) {
        checked_parse(&format!("fn p({params}) -> ({outputs}) {{ {body} }}"));
        checked_parse(&format!("fn p(a: Scalar) -> (x: Scalar) {{ x = {body}; }}"));
    }

    #[test]
    fn parse_never_panics_on_mutated_programs(
        edits in prop::collection::vec((0usize..200, 0usize..3, prop::sample::select(WORDS)), 1..4),
    ) {
        let mut tokens: Vec<String> = VALID
            .split_whitespace()
            .map(str::to_string)
            .collect();
        for (at, what, word) in edits {
            let i = at % (tokens.len() + 1);
            match what {
                0 if i < tokens.len() => { tokens.remove(i); }
                1 if i < tokens.len() => tokens[i] = word.to_string(),
                _ => tokens.insert(i, word.to_string()),
            }
        }
        checked_parse(&tokens.join(" "));
    }

    #[test]
    fn parse_never_panics_on_arbitrary_text(text in ".{0,80}") {
        checked_parse(&text);
    }
}

#[test]
fn parse_valid_program_for_mutations() {
    let m = parse_str(VALID).unwrap_or_else(|d| panic!("{}", d.locate(VALID)));
    assert_eq!(m.programs[0].body.len(), 5);
}
