//! popcorn's errors as Python exceptions, with the library's messages: bad input is a
//! `ValueError`, memory a `MemoryError`, the device a `RuntimeError`, a DSL source error a
//! [`DslError`] (a `SyntaxError` with line and column), an interrupted fit a
//! `KeyboardInterrupt`.

use popcorn::dsl::diag::LocatedError;
use popcorn::kkmeans::FitError;
use popcorn::runtime::cpu::CpuError;
use popcorn::RuntimeError;
use pyo3::exceptions::{
    PyKeyboardInterrupt, PyMemoryError, PyRuntimeError, PySyntaxError, PyValueError,
};
use pyo3::PyErr;

pyo3::create_exception!(
    popcorn,
    DslError,
    PySyntaxError,
    "A popcorn program that does not parse or check; `lineno`, `offset` and `text` locate it."
);

/// The Python exception class an error belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Bad input: `ValueError`.
    Value,
    /// Not enough memory: `MemoryError`.
    Memory,
    /// The device or the library failed: `RuntimeError`.
    Runtime,
}

/// The class of a runtime error; a failed step has the class of its cause.
fn class_of(e: &RuntimeError) -> Class {
    match e {
        RuntimeError::OutOfMemory { .. } => Class::Memory,
        RuntimeError::Step { source, .. } => class_of(source),
        RuntimeError::Program(_)
        | RuntimeError::Plan(_)
        | RuntimeError::Binding(_)
        | RuntimeError::DimensionMismatch { .. }
        | RuntimeError::InvalidData(_) => Class::Value,
        RuntimeError::Cpu(CpuError::Fused(_)) => Class::Runtime,
        RuntimeError::Cpu(_) => Class::Value,
        _ => Class::Runtime,
    }
}

/// A DSL source error as a [`DslError`]: the message (with its help) and the position, as
/// Python's `SyntaxError` takes them.
pub fn located_error(e: &LocatedError) -> PyErr {
    let msg = match &e.help {
        Some(help) => format!("{}; help: {help}", e.message),
        None => e.message.clone(),
    };
    DslError::new_err((msg, ("<popcorn>", e.line, e.column, e.line_text.clone())))
}

/// A runtime error as its Python exception.
pub fn runtime_error(e: RuntimeError) -> PyErr {
    if let RuntimeError::Program(located) = &e {
        return located_error(located);
    }
    let msg = e.to_string();
    match class_of(&e) {
        Class::Value => PyValueError::new_err(msg),
        Class::Memory => PyMemoryError::new_err(msg),
        Class::Runtime => PyRuntimeError::new_err(msg),
    }
}

/// A fit's error as its Python exception.
pub fn fit_error(e: FitError) -> PyErr {
    match e {
        FitError::Runtime(e) => runtime_error(e),
        FitError::Interrupted(_) => PyKeyboardInterrupt::new_err(e.to_string()),
        FitError::Input(_) | FitError::K(_) | FitError::InitLabels(_) | FitError::Parameter(_) => {
            PyValueError::new_err(e.to_string())
        }
    }
}

/// A `ValueError` with `msg`.
pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
