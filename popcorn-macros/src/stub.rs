//! Stand-in modules for an invocation with errors: the compile error comes with modules that
//! have each program's API, so code using them reports no second, misleading error.

use crate::api::ProgramApi;
use crate::codegen::{program_module, Body};
use crate::split::{header_only, program_chunks};
use proc_macro2::TokenStream;
use std::collections::BTreeSet;

/// Stub modules for every program of `tokens` whose signature parses, one per name.
pub(crate) fn stub_modules(tokens: TokenStream) -> TokenStream {
    let mut seen = BTreeSet::new();
    let mut out = TokenStream::new();
    for chunk in program_chunks(tokens) {
        let Some(header) = header_only(&chunk) else {
            continue;
        };
        let Ok(module) = popcorn_dsl::parse::parse_module(header) else {
            continue;
        };
        for ast in &module.programs {
            let Ok(api) = ProgramApi::from_header(ast) else {
                continue;
            };
            if seen.insert(api.name.clone()) {
                out.extend(program_module(&api, &Body::Stub));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_for_programs_whose_header_parses() {
        let tokens: TokenStream = "fn good(x: Col[n]) -> (y: Col[n]) { y = x + ; }
             fn bad(x: Coll[n]) -> (y: Col[n]) { y = x; }
             fn good(x: Col[n]) -> (y: Col[n]) { y = x; }"
            .parse()
            .expect("tokens");
        let text = stub_modules(tokens).to_string();
        assert_eq!(text.matches("pub mod good").count(), 1, "{text}");
        assert!(!text.contains("pub mod bad"), "{text}");
        assert!(text.contains("unreachable"), "{text}");
    }
}
