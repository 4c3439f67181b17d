//! Compile-fail tests of `popcorn::program!`: each `tests/ui/*.rs` must fail to compile with
//! the error pinned in its `.stderr` (regenerate with `TRYBUILD=overwrite`, then read them).

#[test]
fn program_macro_errors_point_at_the_offending_tokens() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
