//! `popcorn._native`, the compiled half of the Python package `popcorn`: Kernel K-means fits
//! and models ([`estimator`]), the DSL's programs and plans ([`dsl`]), contexts that run
//! programs on numpy arrays ([`context`]) and what popcorn finds of the GPU ([`device`]).
//!
//! Everything here calls the popcorn library; the Python half (`python/popcorn/`) adds the
//! scikit-learn estimator around [`estimator::fit`] and [`estimator::fit_sparse`]. Errors become Python exceptions with the
//! library's messages ([`errors`]); fits and program runs release the GIL, and a fit checks for
//! Ctrl-C between its phases and iterations ([`interrupt`]).
#![warn(missing_docs)]

use pyo3::prelude::*;

pub mod arrays;
pub mod bindings;
pub mod context;
pub mod device;
pub mod dsl;
pub mod errors;
pub mod estimator;
pub mod interrupt;

/// The module `popcorn._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<dsl::PyProgram>()?;
    m.add_class::<dsl::PyPlan>()?;
    m.add_class::<context::PyContext>()?;
    m.add_class::<estimator::NativeModel>()?;
    m.add_function(wrap_pyfunction!(estimator::fit, m)?)?;
    m.add_function(wrap_pyfunction!(estimator::fit_sparse, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_info, m)?)?;
    m.add("DslError", m.py().get_type::<errors::DslError>())?;
    Ok(())
}
