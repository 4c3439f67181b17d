//! `popcorn.Context`: a device and an element type on which programs run, planned once per
//! shape and cached as in Rust.

use crate::arrays::{dtype_name, dtype_named};
use crate::bindings::Inputs;
use crate::device::device_spec;
use crate::dsl::{PyPlan, PyProgram};
use crate::errors::runtime_error;
use popcorn::Context;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Where programs run: `device` is `"auto"` (the first usable GPU, else the CPU), `"cpu"`,
/// `"cuda"` or `"cuda:N"`; `dtype` is `"float32"` or `"float64"`.
#[pyclass(name = "Context", module = "popcorn", frozen)]
pub struct PyContext {
    ctx: Context,
}

#[pymethods]
impl PyContext {
    #[new]
    #[pyo3(signature = (device = "auto", dtype = "float32"))]
    fn new(py: Python<'_>, device: &str, dtype: &str) -> PyResult<PyContext> {
        let spec = device_spec(device)?;
        let dtype = dtype_named(dtype)?;
        let ctx = py
            .detach(|| Context::new(spec))
            .map_err(runtime_error)?
            .with_dtype(dtype);
        Ok(PyContext { ctx })
    }

    /// The device, in words.
    #[getter]
    fn device(&self) -> String {
        self.ctx.describe()
    }

    /// Whether programs run on a GPU.
    #[getter]
    fn is_gpu(&self) -> bool {
        self.ctx.is_gpu()
    }

    /// The element type: `"float32"` or `"float64"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.ctx.dtype())
    }

    fn __repr__(&self) -> String {
        format!(
            "Context(device={:?}, dtype={:?})",
            self.device(),
            self.dtype()
        )
    }

    /// Runs `program` with its parameters and the dimensions no input determines as keywords;
    /// returns a dict of its outputs (numpy arrays, floats for scalar outputs). The GIL is
    /// released while it runs.
    #[pyo3(signature = (program, **args))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        program: &PyProgram,
        args: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inputs = Inputs::read(&program.program, args)?;
        let outputs = inputs.run(py, &self.ctx, &program.program)?;
        let dict = PyDict::new(py);
        for (name, value) in outputs {
            dict.set_item(name, value.into_py(py, self.ctx.dtype())?)?;
        }
        Ok(dict)
    }

    /// The plan this context runs for `program` at the sizes in `dims` (planned for its own
    /// device and element type, and cached).
    #[pyo3(signature = (program, **dims))]
    fn plan(
        &self,
        py: Python<'_>,
        program: &PyProgram,
        dims: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPlan> {
        let dims = program.dims_from(dims)?;
        let plan = py
            .detach(|| self.ctx.plan(&program.program, &dims))
            .map_err(runtime_error)?;
        Ok(PyPlan { plan })
    }
}
