//! numpy arrays in and out: anything array-like as contiguous `float64` values or as labels,
//! scipy's CSR arrays as a [`CsrMatrix`], and results back as arrays of the computation's
//! element type.

use crate::errors::value_error;
use numpy::{IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use popcorn::io::CsrMatrix;
use popcorn::DType;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The element type named `name` (`"float32"` or `"float64"`, as numpy names them).
pub fn dtype_named(name: &str) -> PyResult<DType> {
    match name {
        "float32" => Ok(DType::F32),
        "float64" => Ok(DType::F64),
        other => Err(value_error(format!(
            "dtype = {other:?}; use \"float32\" or \"float64\""
        ))),
    }
}

/// numpy's name of an element type, as [`dtype_named`] takes it.
pub fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// `obj` as a C-contiguous numpy array of `dtype` (`"float64"`, `"int64"`), converted by
/// `numpy.ascontiguousarray` (so lists, Fortran-ordered and read-only arrays are accepted).
fn contiguous<'py>(obj: &Bound<'py, PyAny>, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", dtype)?;
    py.import("numpy")?
        .call_method("ascontiguousarray", (obj,), Some(&kwargs))
}

/// `obj` as read-only contiguous `float64` values.
pub fn floats<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArrayDyn<'py, f64>> {
    Ok(contiguous(obj, "float64")?
        .cast_into::<PyArrayDyn<f64>>()?
        .readonly())
}

/// `obj` as a matrix of `float64` values, with its rows and columns; `what` names its rows in
/// the error for an array of another dimension.
pub fn matrix<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<(PyReadonlyArrayDyn<'py, f64>, usize, usize)> {
    let values = floats(obj)?;
    match *values.shape() {
        [rows, cols] => Ok((values, rows, cols)),
        ref other => Err(value_error(format!(
            "expected a 2-D array of {what}, got shape {other:?}"
        ))),
    }
}

/// `obj` as labels (`what` names them in errors): a 1-D array of integers from 0 to 2^32 - 1.
pub fn labels(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u32>> {
    let py = obj.py();
    let array = py.import("numpy")?.call_method1("asarray", (obj,))?;
    let kind: String = array.getattr("dtype")?.getattr("kind")?.extract()?;
    if !matches!(kind.as_str(), "i" | "u") {
        return Err(value_error(format!(
            "{what} must be integers, got an array of dtype {}",
            array.getattr("dtype")?.str()?
        )));
    }
    let values = contiguous(&array, "int64")?.cast_into::<PyArrayDyn<i64>>()?;
    let values = values.readonly();
    if values.ndim() != 1 {
        return Err(value_error(format!(
            "{what} must be a 1-D array, got shape {:?}",
            values.shape()
        )));
    }
    let slice = values.as_slice()?;
    slice
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u32::try_from(v).map_err(|_| {
                value_error(format!(
                    "{what}: entry {i} is {v}; labels are from 0 to {}",
                    u32::MAX
                ))
            })
        })
        .collect()
}

/// Values of the computation's element type (`f32` or `f64`) as an array of `shape`.
pub fn float_array<'py>(
    py: Python<'py>,
    values: Vec<f64>,
    dtype: DType,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat = match dtype {
        DType::F32 => values
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<_>>()
            .into_pyarray(py)
            .into_any(),
        DType::F64 => values.into_pyarray(py).into_any(),
    };
    flat.call_method1("reshape", (shape.to_vec(),))
}

/// Labels as an `int32` array (scikit-learn's type for cluster labels).
pub fn label_array<'py>(py: Python<'py>, labels: &[u32]) -> PyResult<Bound<'py, PyAny>> {
    labels
        .iter()
        .map(|&l| i32::try_from(l).map_err(|_| value_error(format!("label {l} exceeds int32"))))
        .collect::<PyResult<Vec<i32>>>()
        .map(|v| v.into_pyarray(py).into_any())
}

/// `obj` as `int32` values (CSR offsets and column indices).
pub fn ints32(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i32>> {
    let values = contiguous(obj, "int32")?.cast_into::<PyArrayDyn<i32>>()?;
    let values = values.readonly();
    Ok(values.as_slice()?.to_vec())
}

/// `obj` as a 1-D array of non-negative integers (CSR offsets or column indices, named `what`
/// in errors).
fn csr_indices(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<usize>> {
    let values = contiguous(obj, "int64")?.cast_into::<PyArrayDyn<i64>>()?;
    let values = values.readonly();
    if values.ndim() != 1 {
        return Err(value_error(format!(
            "sparse points: {what} must be a 1-D array, got shape {:?}",
            values.shape()
        )));
    }
    values
        .as_slice()?
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            usize::try_from(v).map_err(|_| {
                value_error(format!(
                    "sparse points: {what}[{i}] is {v}; it cannot be negative"
                ))
            })
        })
        .collect()
}

/// A CSR matrix from scipy's arrays (`indptr`, `indices`, `data` and `shape` of a
/// `csr_matrix`), checked by [`CsrMatrix::new`]: the caller sorts the indices and sums
/// duplicates first (scipy's `sum_duplicates`).
pub fn csr_matrix(
    indptr: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    data: &Bound<'_, PyAny>,
    (rows, cols): (usize, usize),
) -> PyResult<CsrMatrix> {
    let values = floats(data)?;
    if values.ndim() != 1 {
        return Err(value_error(format!(
            "sparse points: data must be a 1-D array, got shape {:?}",
            values.shape()
        )));
    }
    CsrMatrix::new(
        rows,
        cols,
        csr_indices(indptr, "indptr")?,
        csr_indices(indices, "indices")?,
        values.as_slice()?.to_vec(),
    )
    .map_err(|e| value_error(format!("sparse points: {e}")))
}
