//! Kernel K-means for the Python estimator: [`fit`] turns the estimator's parameters into a
//! [`KernelKMeans`], runs it with the GIL released (stopping on Ctrl-C between iterations)
//! and returns the results with a [`NativeModel`] that predicts and can be stored as parts.
//! Sparse points (scipy's CSR arrays) go through [`fit_sparse`] and
//! `NativeModel::predict_sparse`, never made dense.

use crate::arrays::{
    csr_matrix, dtype_name, dtype_named, float_array, floats, label_array, labels, matrix,
};
use crate::device::device_spec;
use crate::errors::{fit_error, runtime_error, value_error};
use crate::interrupt::SignalCheck;
use numpy::{PyArray1, PyUntypedArrayMethods};
use popcorn::kernel_ir::Half;
use popcorn::kkmeans::{
    Algorithm, FitError, FitResult, Init, Kernel, KernelKMeans, Model, ModelParts, Points,
    ProductPrecision, Scaling,
};
use popcorn::{Context, DType};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The estimator's parameters, as `popcorn.KernelKMeans.fit` passes them (a dict).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct FitOptions<'py> {
    n_clusters: i64,
    kernel: String,
    gamma: Option<f64>,
    coef0: f64,
    degree: f64,
    /// `"mod"`, `"random"`, `"k-means++"` or the initial labels.
    init: Bound<'py, PyAny>,
    /// The seed of random initialisations (drawn from `random_state`).
    seed: u64,
    n_init: i64,
    max_iter: i64,
    /// 0: iterate until no label changes.
    tol: f64,
    zscore: bool,
    device: String,
    dtype: String,
    /// How a stored kernel matrix is held: `None` or `"float32"` (the fit's type),
    /// `"bfloat16"` / `"bf16"`, `"float16"` / `"fp16"`.
    #[pyo3(default)]
    kernel_storage: Option<String>,
    /// The products' precision: `None` or `"float32"` (strict), `"tf32"`, `"bfloat16"` /
    /// `"bf16"`, `"float16"` / `"fp16"`.
    #[pyo3(default)]
    precision: Option<String>,
    /// `"auto"`, `"stored"`, `"recompute"` or `"features"`.
    #[pyo3(default)]
    algorithm: Option<String>,
    /// The most memory the fit plans to take: bytes, or a number with K, M, G or T (the
    /// Python side passes integers as their digits).
    #[pyo3(default)]
    memory_limit: Option<String>,
}

/// The memory limit `text` gives (`None`: none).
fn memory_limit_from(text: Option<&str>) -> PyResult<Option<u64>> {
    let Some(text) = text else { return Ok(None) };
    match popcorn::dsl::settings::parse_bytes(text) {
        Some(bytes) if bytes > 0 => Ok(Some(bytes)),
        _ => Err(value_error(format!(
            "memory_limit = {text:?}; give None, a positive number of bytes, or a string such \
             as \"2G\" or \"1536M\" (K, M, G, T: powers of 1024)"
        ))),
    }
}

/// The algorithm `name` names (`None`: auto).
fn algorithm_from(name: Option<&str>) -> PyResult<Algorithm> {
    match name {
        None => Ok(Algorithm::Auto),
        Some(n) => n.parse::<Algorithm>().map_err(|_| {
            value_error(format!(
                "algorithm = {n:?}; use \"auto\", \"stored\", \"recompute\" or \"features\""
            ))
        }),
    }
}

/// The 16-bit format `name` names for the kernel matrix, or `None` for the fit's type.
fn kernel_storage_from(name: Option<&str>) -> PyResult<Option<Half>> {
    match name {
        None | Some("float32") | Some("f32") => Ok(None),
        Some("bfloat16") => Ok(Some(Half::Bf16)),
        Some("float16") => Ok(Some(Half::F16)),
        Some(other) => other.parse::<Half>().map(Some).map_err(|_| {
            value_error(format!(
                "kernel_storage = {other:?}; use None, \"float32\", \"bfloat16\" or \"float16\""
            ))
        }),
    }
}

/// The products' precision `name` names (`None`: strict).
fn precision_from(name: Option<&str>) -> PyResult<ProductPrecision> {
    match name {
        None => Ok(ProductPrecision::Strict),
        Some(n) => n.parse::<ProductPrecision>().map_err(|_| {
            value_error(format!(
                "precision = {n:?}; use None, \"float32\", \"tf32\", \"bfloat16\", \"float16\" \
                 or \"3xtf32\""
            ))
        }),
    }
}

/// `value` of the parameter `name` as a count of at least 1.
fn at_least_one(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .ok()
        .filter(|v| *v >= 1)
        .ok_or_else(|| value_error(format!("{name} = {value}; it must be at least 1")))
}

/// The kernel named `name` (scikit-learn's names and popcorn's) with its parameters; `gamma`
/// `None` is `1/d`.
fn kernel_from(
    name: &str,
    gamma: Option<f64>,
    coef0: f64,
    degree: f64,
    d: usize,
) -> PyResult<Kernel> {
    Ok(match name {
        "linear" => Kernel::Linear,
        "poly" | "polynomial" => Kernel::Polynomial {
            gamma: gamma.unwrap_or(1.0 / d as f64),
            coef0,
            degree,
        },
        "rbf" | "gaussian" => Kernel::Gaussian { gamma },
        "sigmoid" => Kernel::Sigmoid { gamma, coef0 },
        "precomputed" => Kernel::Precomputed,
        other => {
            return Err(value_error(format!(
            "kernel = {other:?}; use \"linear\", \"poly\", \"rbf\", \"sigmoid\" or \"precomputed\""
        )))
        }
    })
}

/// A kernel's name and parameters, as [`kernel_from`] takes them.
fn kernel_fields(kernel: &Kernel) -> (&'static str, Option<f64>, f64, f64) {
    match *kernel {
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } => ("polynomial", Some(gamma), coef0, degree),
        Kernel::Gaussian { gamma } => ("gaussian", gamma, 0.0, 0.0),
        Kernel::Sigmoid { gamma, coef0 } => ("sigmoid", gamma, coef0, 0.0),
        Kernel::Linear | Kernel::Precomputed => (kernel.name(), None, 0.0, 0.0),
    }
}

/// The initialisation: a name, or labels.
fn init_from(init: &Bound<'_, PyAny>, seed: u64) -> PyResult<Init> {
    if let Ok(name) = init.extract::<String>() {
        return match name.as_str() {
            "mod" => Ok(Init::Mod),
            "random" => Ok(Init::Random { seed }),
            "k-means++" | "kmeans++" => Ok(Init::KMeansPlusPlus { seed }),
            other => Err(value_error(format!(
                "init = {other:?}; use \"mod\", \"random\", \"k-means++\" or an array of labels"
            ))),
        };
    }
    Ok(Init::Labels(labels(init, "init")?))
}

/// The builder for `options` on points of `d` features.
fn builder(o: &FitOptions<'_>, d: usize) -> PyResult<KernelKMeans> {
    let km = KernelKMeans::new(at_least_one("n_clusters", o.n_clusters)?)
        .kernel(kernel_from(&o.kernel, o.gamma, o.coef0, o.degree, d)?)
        .init(init_from(&o.init, o.seed)?)
        .n_init(at_least_one("n_init", o.n_init)?)
        .max_iter(at_least_one("max_iter", o.max_iter)?)
        .tol(o.tol)
        .check_convergence(o.tol > 0.0)
        .zscore(o.zscore)
        .device(device_spec(&o.device)?)
        .dtype(dtype_named(&o.dtype)?)
        .kernel_storage(kernel_storage_from(o.kernel_storage.as_deref())?)
        .precision(precision_from(o.precision.as_deref())?)
        .algorithm(algorithm_from(o.algorithm.as_deref())?)
        .memory_limit(memory_limit_from(o.memory_limit.as_deref())?);
    Ok(km)
}

/// Runs `work` (a fit) with the GIL released, stopping it if Ctrl-C (or any signal handler
/// that raises) comes between its phases and iterations; the handler's exception is raised.
fn detached_fit<T>(
    py: Python<'_>,
    work: impl FnOnce(&mut SignalCheck) -> Result<T, FitError> + Send,
) -> PyResult<T>
where
    T: Send,
{
    let mut check = SignalCheck::default();
    let result = py.detach(|| work(&mut check));
    match (result, check.take()) {
        (Err(_), Some(raised)) => Err(raised),
        (result, _) => result.map_err(fit_error),
    }
}

/// `obj` as the weights of `n` points: a 1-D array of `n` floats (the library checks that
/// they are finite and non-negative).
fn point_weights(obj: &Bound<'_, PyAny>, n: usize) -> PyResult<Vec<f64>> {
    let w = floats(obj)?;
    match *w.shape() {
        [len] if len == n => Ok(w.as_slice()?.to_vec()),
        ref other => Err(value_error(format!(
            "sample_weight has shape {other:?}; expected ({n},), one weight per point"
        ))),
    }
}

/// Fits Kernel K-means to `x` (`n x d` points, or an `n x n` kernel matrix for the
/// precomputed kernel) with the estimator's parameters, the points weighted by
/// `sample_weight` where given. Returns the results (a dict) and the model.
#[pyfunction]
#[pyo3(signature = (x, options, sample_weight = None))]
pub fn fit<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    options: FitOptions<'py>,
    sample_weight: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyDict>, NativeModel)> {
    let (x, n, d) = matrix(x, "points")?;
    // Checked here for the estimator and direct callers alike; the library sees only `n`.
    let precomputed = options.kernel == "precomputed";
    if precomputed && n != d {
        return Err(value_error(format!(
            "a precomputed kernel matrix is square, got {n} x {d}"
        )));
    }
    let km = weighted(builder(&options, d)?, sample_weight, n)?;
    let values = x.as_slice()?;
    let result = if precomputed {
        detached_fit(py, |check| {
            km.fit_precomputed_with_control(values, n, &mut check.control())
        })?
    } else {
        detached_fit(py, |check| {
            km.fit_with_control(Points::new(n, d, values)?, &mut check.control())
        })?
    };
    results(py, result)
}

/// `km` with the weights `sample_weight` of `n` points, where given.
fn weighted(
    km: KernelKMeans,
    sample_weight: Option<&Bound<'_, PyAny>>,
    n: usize,
) -> PyResult<KernelKMeans> {
    Ok(match sample_weight {
        Some(w) => km.sample_weight(&point_weights(w, n)?),
        None => km,
    })
}

/// The error for sparse points with a precomputed kernel.
fn precomputed_sparse_error() -> PyErr {
    value_error(
        "kernel = \"precomputed\" takes the kernel matrix as a dense array, not sparse points \
         (a scipy.sparse matrix); pass X.toarray()",
    )
}

/// Fits Kernel K-means to sparse points, an `n x d` CSR matrix given as scipy's arrays
/// (`indptr`, `indices`, `data`, `shape`; indices sorted, no duplicates), never made dense: the
/// kernel matrix is built from them as the planner chooses and stored. Otherwise as [`fit`];
/// `zscore` is an error (it would make the points dense), as is the precomputed kernel.
#[pyfunction]
#[pyo3(signature = (indptr, indices, data, shape, options, sample_weight = None))]
#[allow(clippy::too_many_arguments)]
pub fn fit_sparse<'py>(
    py: Python<'py>,
    indptr: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    shape: (usize, usize),
    options: FitOptions<'py>,
    sample_weight: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyDict>, NativeModel)> {
    if options.kernel == "precomputed" {
        return Err(precomputed_sparse_error());
    }
    let x = csr_matrix(indptr, indices, data, shape)?;
    let km = weighted(builder(&options, x.cols())?, sample_weight, x.rows())?;
    let result = detached_fit(py, |check| {
        km.fit_sparse_with_control(&x, &mut check.control())
    })?;
    results(py, result)
}

/// A fit's results as a dict, and its model.
fn results(py: Python<'_>, mut r: FitResult) -> PyResult<(Bound<'_, PyDict>, NativeModel)> {
    let model = r
        .model
        .take()
        .ok_or_else(|| PyRuntimeError::new_err("the fit returned no model (a bug in popcorn)"))?;
    let out = PyDict::new(py);
    out.set_item("labels", label_array(py, &r.labels)?)?;
    out.set_item("objective", r.objective)?;
    out.set_item(
        "objective_history",
        PyArray1::from_slice(py, &r.objective_history),
    )?;
    out.set_item("n_iter", r.iterations)?;
    out.set_item("converged", r.converged)?;
    out.set_item("empty_clusters", r.empty_clusters)?;
    out.set_item("best_run", r.best_run)?;
    out.set_item("device", &r.device)?;
    out.set_item("dtype", dtype_name(r.dtype))?;
    out.set_item("algorithm", r.algorithm.algorithm.name())?;
    out.set_item("algorithm_reason", &r.algorithm.reason)?;
    out.set_item("feature_block_rows", r.algorithm.feature_block_rows)?;
    out.set_item("weighted", r.weights.is_some())?;
    let t = &r.timings;
    let timings = PyDict::new(py);
    timings.set_item("upload", t.upload_s)?;
    timings.set_item("kernel_matrix", t.kernel_matrix_s)?;
    timings.set_item("init", t.init_s)?;
    timings.set_item("iterations", t.iterations_s)?;
    timings.set_item("per_iteration", &t.per_iteration_s)?;
    timings.set_item("total", t.total_s)?;
    out.set_item("timings", timings)?;
    Ok((
        out,
        NativeModel {
            model,
            dtype: r.dtype,
            precomputed: r.params.kernel == Kernel::Precomputed,
        },
    ))
}

/// A fitted model: predicts the nearest feature-space centroid of new points (or, for a
/// precomputed kernel, of new kernel rows), and can be taken apart and rebuilt (pickling).
#[pyclass(module = "popcorn._native", frozen)]
pub struct NativeModel {
    model: Model,
    dtype: DType,
    /// The kernel is precomputed: the model predicts from kernel values.
    precomputed: bool,
}

#[pymethods]
impl NativeModel {
    /// The cluster of each row of `x`: `m x d` points, or for a precomputed kernel the
    /// `m x n` kernel values against the training points. Runs with the GIL released.
    fn predict<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let (x, m, cols) = matrix(x, "points (or kernel rows)")?;
        let values = x.as_slice()?;
        let predicted = py
            .detach(|| {
                if self.precomputed {
                    // A point's own similarity shifts its distances to every centroid alike.
                    self.model.predict_precomputed(values, &vec![0.0; m])
                } else {
                    self.model.predict(Points::new(m, cols, values)?)
                }
            })
            .map_err(fit_error)?;
        label_array(py, &predicted)
    }

    /// The cluster of each row of the sparse points given as scipy's CSR arrays (`indptr`,
    /// `indices`, `data`, `shape`; indices sorted, no duplicates): from both sides kept sparse
    /// on a model of sparse points, made dense on a model of dense points. Runs with the GIL
    /// released.
    fn predict_sparse<'py>(
        &self,
        py: Python<'py>,
        indptr: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
        shape: (usize, usize),
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.precomputed {
            return Err(precomputed_sparse_error());
        }
        let y = csr_matrix(indptr, indices, data, shape)?;
        let predicted = py
            .detach(|| self.model.predict_sparse(&y))
            .map_err(fit_error)?;
        label_array(py, &predicted)
    }

    /// Squared feature-space norms of the centroids (`inf` for an empty cluster).
    #[getter]
    fn centroid_norms<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_slice(py, self.model.centroid_norms())
    }

    /// What the model holds, as a dict of numbers and arrays ([`NativeModel::from_parts`]
    /// builds it again).
    fn parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self.model.parts();
        let (name, gamma, coef0, degree) = kernel_fields(&p.kernel);
        let out = PyDict::new(py);
        out.set_item("kernel", name)?;
        out.set_item("gamma", gamma)?;
        out.set_item("coef0", coef0)?;
        out.set_item("degree", degree)?;
        out.set_item("d", p.d)?;
        let rows = p.x.len() / p.d;
        out.set_item("x", float_array(py, p.x, DType::F64, &[rows, p.d])?)?;
        // A model of sparse points keeps them sparse: scipy's CSR arrays (x is then empty).
        match &p.x_sparse {
            Some(xs) => {
                let ints = |v: &[usize]| -> PyResult<Vec<i64>> {
                    v.iter()
                        .map(|&i| {
                            i64::try_from(i).map_err(|_| {
                                value_error(format!("model parts: index {i} exceeds int64"))
                            })
                        })
                        .collect()
                };
                out.set_item("indptr", PyArray1::from_vec(py, ints(xs.row_ptr())?))?;
                out.set_item("indices", PyArray1::from_vec(py, ints(xs.col_idx())?))?;
                out.set_item("data", PyArray1::from_slice(py, xs.values()))?;
            }
            None => {
                out.set_item("indptr", py.None())?;
                out.set_item("indices", py.None())?;
                out.set_item("data", py.None())?;
            }
        }
        match &p.scaling {
            Some(s) => {
                out.set_item("mean", s.mean().to_vec())?;
                out.set_item("scale", s.scale().to_vec())?;
            }
            None => {
                out.set_item("mean", py.None())?;
                out.set_item("scale", py.None())?;
            }
        }
        out.set_item("labels", label_array(py, &p.labels)?)?;
        out.set_item("k", p.k)?;
        out.set_item("centroid_norms", p.centroid_norms)?;
        match &p.weights {
            Some(w) => out.set_item("weights", PyArray1::from_slice(py, w))?,
            None => out.set_item("weights", py.None())?,
        }
        out.set_item("dtype", dtype_name(self.dtype))?;
        Ok(out)
    }

    /// A model from [`NativeModel::parts`], predicting on `device`. The parts are checked.
    #[staticmethod]
    fn from_parts(parts: &Bound<'_, PyDict>, device: &str) -> PyResult<NativeModel> {
        let item = |name: &str| -> PyResult<Bound<'_, PyAny>> {
            parts
                .get_item(name)?
                .ok_or_else(|| value_error(format!("model parts: no `{name}`")))
        };
        let d: usize = item("d")?.extract()?;
        let kernel = kernel_from(
            &item("kernel")?.extract::<String>()?,
            item("gamma")?.extract()?,
            item("coef0")?.extract()?,
            item("degree")?.extract()?,
            d,
        )?;
        let scaling = match (
            item("mean")?.extract::<Option<Vec<f64>>>()?,
            item("scale")?.extract::<Option<Vec<f64>>>()?,
        ) {
            (Some(mean), Some(scale)) => Some(Scaling::new(mean, scale).map_err(fit_error)?),
            _ => None,
        };
        let x = floats(&item("x")?)?.as_slice()?.to_vec();
        let dtype = dtype_named(&item("dtype")?.extract::<String>()?)?;
        let ctx = Context::new(device_spec(device)?)
            .map_err(runtime_error)?
            .with_dtype(dtype);
        let precomputed = kernel == Kernel::Precomputed;
        let labels = labels(&item("labels")?, "labels")?;
        // Absent (or None) for a model of dense points and in parts pickled before sparse
        // models kept their points sparse.
        let x_sparse = match parts.get_item("indptr")? {
            Some(indptr) if !indptr.is_none() => Some(csr_matrix(
                &indptr,
                &item("indices")?,
                &item("data")?,
                (labels.len(), d),
            )?),
            _ => None,
        };
        let parts = ModelParts {
            kernel,
            d,
            x,
            x_sparse,
            scaling,
            labels,
            k: item("k")?.extract()?,
            centroid_norms: item("centroid_norms")?.extract()?,
            // Absent from the parts of models pickled before weights existed.
            weights: match parts.get_item("weights")? {
                Some(w) if !w.is_none() => Some(floats(&w)?.as_slice()?.to_vec()),
                _ => None,
            },
        };
        Ok(NativeModel {
            model: Model::from_parts(ctx, parts).map_err(fit_error)?,
            dtype,
            precomputed,
        })
    }
}
