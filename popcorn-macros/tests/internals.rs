//! The unit tests of the macro's modules, compiled into an ordinary test binary (see the note
//! in Cargo.toml): the same source files as the proc-macro, minus its entry point.
#![allow(dead_code)]

#[path = "../src/api.rs"]
mod api;
#[path = "../src/codegen.rs"]
mod codegen;
#[path = "../src/diagnostic.rs"]
mod diagnostic;
#[path = "../src/expand.rs"]
mod expand;
#[path = "../src/names.rs"]
mod names;
#[path = "../src/split.rs"]
mod split;
#[path = "../src/stub.rs"]
mod stub;
