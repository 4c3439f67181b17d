//! The macro's pipeline: parse and check the invocation, then expand each program (or, on
//! error, a compile error on the offending tokens plus stand-in modules).

use crate::api::ProgramApi;
use crate::codegen::{program_module, Body};
use crate::diagnostic::{spanning, to_syn_error};
use crate::split::program_chunks;
use crate::stub::stub_modules;
use popcorn_dsl::ast::ProgramAst;
use popcorn_dsl::Program;
use proc_macro2::TokenStream;

/// Expands a `program!` invocation.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match checked_modules(input.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let mut out = err.to_compile_error();
            out.extend(stub_modules(input));
            out
        }
    }
}

/// The modules of a correct invocation, or the first error.
fn checked_modules(input: TokenStream) -> syn::Result<TokenStream> {
    let whole_source = input.to_string();
    let module = popcorn_dsl::parse::parse_module(input.clone()).map_err(|d| to_syn_error(&d))?;
    let programs =
        popcorn_dsl::check::check_module(&module, &whole_source).map_err(|d| to_syn_error(&d))?;
    let sources = program_sources(input, &module.programs, &whole_source);
    let mut out = TokenStream::new();
    for ((ast, program), source) in module.programs.iter().zip(&programs).zip(&sources) {
        verify_round_trip(ast, program, source)?;
        let api = ProgramApi::from_checked(ast, program)?;
        out.extend(program_module(&api, &Body::Checked { source }));
    }
    Ok(out)
}

/// The source text each program is kept as: its own tokens, re-stringified, or the whole
/// invocation when it cannot be cut into one piece per program.
fn program_sources(input: TokenStream, asts: &[ProgramAst], whole: &str) -> Vec<String> {
    let chunks = program_chunks(input);
    if chunks.len() == asts.len() {
        chunks.iter().map(TokenStream::to_string).collect()
    } else {
        vec![whole.to_string(); asts.len()]
    }
}

/// Checks that the text the runtime will parse yields the same program, so that the
/// generated `program()` cannot fail at run time.
fn verify_round_trip(ast: &ProgramAst, program: &Program, source: &str) -> syn::Result<()> {
    let internal = |why: String| {
        spanning(
            ast.span.start,
            ast.span.end,
            format!(
                "internal error in popcorn: program `{}` {why} once turned back into text; \
                 please report this with the program",
                program.name
            ),
        )
    };
    let reparsed = Program::parse_all(source)
        .map_err(|e| internal(format!("fails to parse ({})", e.message)))?;
    let again = reparsed
        .iter()
        .find(|p| p.name == program.name)
        .ok_or_else(|| internal("is missing".to_string()))?;
    if again.params != program.params
        || again.outputs != program.outputs
        || again.free_dims() != program.free_dims()
    {
        return Err(internal(format!(
            "has another signature ({})",
            again.signature()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(src: &str) -> String {
        expand(src.parse().expect("tokens")).to_string()
    }

    #[test]
    fn expands_each_program_to_a_module() {
        let text = expand_str(
            "fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) { Y = a * X; }
             fn total(X: Dense[n, d]) -> (s: Scalar) { s = sum(X); }",
        );
        assert!(text.contains("pub mod scale"), "{text}");
        assert!(text.contains("pub mod total"), "{text}");
        assert!(!text.contains("compile_error"), "{text}");
        assert!(text.contains(". tensor (\"X\" , X)"), "{text}");
        assert!(text.contains(". scalar (\"a\" , a)"), "{text}");
        assert!(text.contains("pub Y : :: popcorn :: Tensor"), "{text}");
        assert!(text.contains("pub s : f64"), "{text}");
        // Each module keeps its own program's text.
        assert!(
            text.contains("fn scale (X : Dense [n , d] , a : Scalar)"),
            "{text}"
        );
    }

    #[test]
    fn free_dims_become_trailing_usize_parameters() {
        let text = expand_str(
            "fn sel(labels: Index[n], w: Scalar) -> (V: Csr[k, n], c: Col[j]) {
                 V = w * selection(labels, k);
                 c = counts(labels, j);
             }",
        );
        assert!(text.contains("w : f64 , j : usize , k : usize"), "{text}");
        assert!(
            text.contains(". dim (\"j\" , j) . dim (\"k\" , k)"),
            "{text}"
        );
    }

    #[test]
    fn errors_become_compile_errors_with_stubs() {
        let text = expand_str("fn f(X: Dense[n, d]) -> (Y: Dense[n, d]) { Y = Xx; }");
        assert!(text.contains("compile_error"), "{text}");
        assert!(text.contains("unknown name `Xx`"), "{text}");
        assert!(text.contains("did you mean `X`?"), "{text}");
        assert!(text.contains("pub mod f"), "{text}");
    }

    #[test]
    fn empty_invocation_is_an_error() {
        let text = expand_str("");
        assert!(text.contains("expected at least one program"), "{text}");
    }

    #[test]
    fn round_trip_holds_for_operators_that_span_tokens() {
        let text = expand_str(
            "fn ops(A: Dense[n, n], B: Dense[n, n]) -> (C: Dense[n, n]) {
                 C = -A .* B^T + where(A <= B, A, B) / 2.5e0;
             }",
        );
        assert!(!text.contains("compile_error"), "{text}");
    }
}
