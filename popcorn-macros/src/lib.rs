//! The `program!` proc-macro of popcorn: parses and checks programs at compile time, reports
//! errors on the offending tokens, and expands each program to a module with a typed Rust API.
//!
//! This crate is thin: the language lives in `popcorn_dsl` (parser and checker, called here on
//! the invocation's tokens) and the execution in `popcorn_runtime`. Use it through the facade:
//! `popcorn::program! { ... }`; the expansion names items by absolute `::popcorn::...` paths.
#![warn(missing_docs)]

mod api;
mod codegen;
mod diagnostic;
mod expand;
mod names;
mod split;
mod stub;

/// Checks one or more popcorn programs at compile time and expands each to a module.
///
/// ```text
/// popcorn::program! {
///     fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) { Y = a * X; }
/// }
/// ```
///
/// expands to `pub mod scale` holding:
///
/// - `SOURCE: &str`, the program's text, and `program() -> &'static Program`, the checked
///   program (parsed once, on first use);
/// - `struct Outputs`, one public field per output: `Tensor` for tensors, `f64` for `Scalar`;
/// - `run(ctx, inputs..., free_dims...) -> Result<Outputs, RuntimeError>`: tensor parameters
///   are `&Tensor`, scalar parameters `f64`, and each dimension that no tensor input
///   determines (such as `k` in `selection(labels, k)`) is a trailing `usize` parameter, in
///   sorted order;
/// - `run_into(ctx, inputs..., free_dims..., out: &mut popcorn::Outputs)`, which reuses the
///   tensors already in `out` (no allocation in a loop);
/// - `args(inputs..., free_dims...) -> Args`, the arguments for `Context::run` by hand.
///
/// A parse or type error becomes a compile error on the offending tokens; stub modules with
/// the same signatures keep the rest of the crate (and IDEs) resolving meanwhile.
#[proc_macro]
pub fn program(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand::expand(input.into()).into()
}
