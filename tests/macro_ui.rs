//! Compile-fail tests of `popcorn::program!`: each `tests/ui/*.rs` must fail to compile with
//! the error pinned in its `.stderr` (regenerate with `TRYBUILD=overwrite`, then read them).
//!
//! They need a Rust toolchain; where none is installed (the GPU machine runs prebuilt test
//! binaries) the test says so and skips.

#[test]
fn program_macro_errors_point_at_the_offending_tokens() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if std::process::Command::new(&cargo)
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: no cargo here to compile the UI cases");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
