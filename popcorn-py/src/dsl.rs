//! The DSL from Python: `popcorn.Program(source)` parses and checks a program (errors as
//! [`DslError`](crate::errors::DslError) with line and column), `program.plan(n=..., ...)`
//! plans it for a target, and the resulting `popcorn.Plan` prints as the plan table, draws as
//! DOT and shows its generated CUDA C.

use crate::arrays::dtype_named;
use crate::device::cpu_target;
use crate::errors::{located_error, runtime_error, value_error};
use popcorn::dsl::{DimBindings, PlannerConfig, Program, Target};
use popcorn::Plan;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A checked popcorn program.
#[pyclass(name = "Program", module = "popcorn", frozen)]
pub struct PyProgram {
    pub(crate) program: Arc<Program>,
}

impl PyProgram {
    fn wrap(program: Program) -> PyProgram {
        PyProgram {
            program: Arc::new(program),
        }
    }

    /// The dimension sizes in `dims` (a dict of `name=size`), checked against the program:
    /// every name is one of its dimensions, every size at least 1.
    pub(crate) fn dims_from(&self, dims: Option<&Bound<'_, PyDict>>) -> PyResult<DimBindings> {
        let known = self.program.dims();
        let mut out = DimBindings::new();
        for (name, size) in dims.into_iter().flat_map(|d| d.iter()) {
            let name: String = name.extract()?;
            if !known.contains(&name) {
                return Err(value_error(format!(
                    "`{}` has no dimension `{name}`; its dimensions are {}",
                    self.program.name,
                    list(&known)
                )));
            }
            let size = dim_size(&name, &size)?;
            out.insert(name, size);
        }
        Ok(out)
    }
}

/// The size given for dimension `name`: an integer of at least 1.
pub(crate) fn dim_size(name: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    let size: i64 = value.extract()?;
    usize::try_from(size)
        .ok()
        .filter(|s| *s >= 1)
        .ok_or_else(|| value_error(format!("dimension `{name}` = {size}; sizes are at least 1")))
}

/// Names separated by commas.
pub(crate) fn list<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parameters or outputs as `(name, type)` pairs.
fn signature_items(items: &[popcorn::dsl::ParamSig]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|p| (p.name.clone(), p.ty.to_string()))
        .collect()
}

#[pymethods]
impl PyProgram {
    /// Parses and checks `source`. A source with several programs needs `name` to pick one.
    #[new]
    #[pyo3(signature = (source, name = None))]
    fn new(source: &str, name: Option<&str>) -> PyResult<PyProgram> {
        let mut all = Program::parse_all(source).map_err(|e| located_error(&e))?;
        let names = |all: &[Program]| list(all.iter().map(|p| &p.name));
        let index = match name {
            Some(name) => all.iter().position(|p| p.name == name).ok_or_else(|| {
                value_error(format!(
                    "the source has no program `{name}`; it has {}",
                    names(&all)
                ))
            })?,
            None if all.len() == 1 => 0,
            None => {
                return Err(value_error(format!(
                    "the source holds {} programs ({}); pass name= to pick one, or use Program.parse_all",
                    all.len(),
                    names(&all)
                )))
            }
        };
        Ok(PyProgram::wrap(all.swap_remove(index)))
    }

    /// Every program of a source text (a `.pop` file).
    #[staticmethod]
    fn parse_all(source: &str) -> PyResult<Vec<PyProgram>> {
        let all = Program::parse_all(source).map_err(|e| located_error(&e))?;
        Ok(all.into_iter().map(PyProgram::wrap).collect())
    }

    /// The program's name.
    #[getter]
    fn name(&self) -> &str {
        &self.program.name
    }

    /// The signature as written: `fn name(K: Dense[n, n], ...) -> (D: Dense[n, k])`.
    #[getter]
    fn signature(&self) -> String {
        self.program.signature()
    }

    /// The parameters, as `(name, type)` pairs in signature order.
    #[getter]
    fn inputs(&self) -> Vec<(String, String)> {
        signature_items(&self.program.params)
    }

    /// The outputs, as `(name, type)` pairs in signature order.
    #[getter]
    fn outputs(&self) -> Vec<(String, String)> {
        signature_items(&self.program.outputs)
    }

    /// Every symbolic dimension, sorted.
    #[getter]
    fn dims(&self) -> Vec<String> {
        self.program.dims().into_iter().collect()
    }

    /// The dimensions that the inputs' shapes do not determine (given when running).
    #[getter]
    fn free_dims(&self) -> Vec<String> {
        self.program.free_dims().into_iter().collect()
    }

    fn __repr__(&self) -> String {
        format!("Program({})", self.program.signature())
    }

    /// The plan at the sizes in `dims` for `target` (`"gpu"`: the reference GPU, an H100;
    /// `"cpu"`: the CPU backend on this machine's threads), computing in `dtype`, with dense
    /// products on TF32 tensor cores if `tf32`.
    #[pyo3(signature = (*, target = "gpu", dtype = "float32", tf32 = false, **dims))]
    fn plan(
        &self,
        py: Python<'_>,
        target: &str,
        dtype: &str,
        tf32: bool,
        dims: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPlan> {
        let dims = self.dims_from(dims)?;
        let missing: Vec<String> = self
            .program
            .dims()
            .into_iter()
            .filter(|d| !dims.contains_key(d))
            .collect();
        if !missing.is_empty() {
            return Err(value_error(format!(
                "planning `{}` needs the size of {}",
                self.program.name,
                list(&missing)
            )));
        }
        let target = match target {
            "gpu" => Target::reference_gpu(),
            "cpu" => cpu_target(),
            other => {
                return Err(value_error(format!(
                    "target = {other:?}; use \"gpu\" (the reference GPU) or \"cpu\""
                )))
            }
        };
        let mut config = PlannerConfig::from_env().with_dtype(dtype_named(dtype)?);
        config.tf32 |= tf32;
        let program = &self.program;
        let plan = py
            .detach(|| popcorn::dsl::plan(program, &dims, &config, &target, &BTreeMap::new()))
            .map_err(|e| runtime_error(e.into()))?;
        Ok(PyPlan {
            plan: Arc::new(plan),
        })
    }
}

/// A plan: `str(plan)` is the step table, `plan.dot()` the graph in Graphviz DOT,
/// `plan.cuda()` the generated CUDA C of its fused kernels.
#[pyclass(name = "Plan", module = "popcorn", frozen)]
pub struct PyPlan {
    pub(crate) plan: Arc<Plan>,
}

#[pymethods]
impl PyPlan {
    fn __str__(&self) -> String {
        self.plan.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Plan({}: {} steps, {} fused kernels)",
            self.plan.program,
            self.plan.steps.len(),
            self.plan.kernels().count()
        )
    }

    /// The planned graph in Graphviz DOT (fused groups as clusters).
    fn dot(&self) -> String {
        self.plan.to_dot()
    }

    /// The generated CUDA C of every fused kernel, each headed by `// ---- name.cu ----`.
    fn cuda(&self) -> String {
        self.kernels()
            .into_iter()
            .map(|(name, source)| format!("// ---- {name}.cu ----\n{source}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The fused kernels as `(name, CUDA C source)` pairs, in step order.
    fn kernels(&self) -> Vec<(String, String)> {
        self.plan
            .kernels()
            .map(|k| (k.name.clone(), popcorn::kernels::emit(&k.spec).source))
            .collect()
    }

    /// The plan as JSON.
    fn json(&self) -> String {
        self.plan.to_json()
    }

    /// The program's name.
    #[getter]
    fn program(&self) -> &str {
        &self.plan.program
    }

    /// The number of steps.
    #[getter]
    fn steps(&self) -> usize {
        self.plan.steps.len()
    }

    /// Estimated floating-point operations of one run.
    #[getter]
    fn flops(&self) -> f64 {
        self.plan.total_flops()
    }

    /// Estimated bytes moved by one run.
    #[getter]
    fn bytes(&self) -> f64 {
        self.plan.total_bytes()
    }

    /// Bytes of the plan's own buffers.
    #[getter]
    fn workspace_bytes(&self) -> usize {
        self.plan.workspace_bytes()
    }

    /// Seconds one run is estimated to take on the plan's target.
    #[getter]
    fn estimated_seconds(&self) -> f64 {
        self.plan.estimated_seconds()
    }
}
