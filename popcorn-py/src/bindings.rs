//! A program's arguments from Python keywords, and its outputs back to Python: dense
//! parameters take array-likes (vectors 1-D or 2-D), `Index` parameters integer arrays, `Csr`
//! parameters scipy sparse matrices, scalars numbers, and dimensions no input determines
//! integers. Outputs come back as numpy arrays of the context's element type (vectors 1-D,
//! labels `int64`), scalar outputs as floats.

use crate::arrays::{float_array, floats, ints32, labels};
use crate::dsl::{dim_size, list};
use crate::errors::value_error;
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use popcorn::dsl::{ParamSig, Program, Storage};
use popcorn::{Args, Context, DType, Outputs, RuntimeError, Tensor};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One argument, its float values (if any) held apart in [`Inputs::arrays`] so that the
/// arguments can cross to a thread without the GIL.
enum Input {
    /// A dense matrix or vector: `rows x cols` values of `arrays[array]`.
    Dense {
        name: String,
        rows: usize,
        cols: usize,
        array: usize,
    },
    /// A CSR matrix, its entries in `arrays[array]`.
    Csr {
        name: String,
        rows: usize,
        cols: usize,
        row_ptr: Vec<i32>,
        col_idx: Vec<i32>,
        array: usize,
    },
    /// An index vector.
    Index { name: String, values: Vec<u32> },
    /// A scalar parameter.
    Scalar { name: String, value: f64 },
    /// The size of a dimension.
    Dim { name: String, size: usize },
}

/// A program's arguments, read from Python keywords.
pub struct Inputs<'py> {
    inputs: Vec<Input>,
    arrays: Vec<PyReadonlyArrayDyn<'py, f64>>,
}

/// The `rows x cols` a dense parameter takes from an array of `shape`: a vector parameter
/// (`Col[n]`, `Row[n]`) a 1-D array or a 2-D one, a matrix a 2-D array.
fn dense_shape(param: &ParamSig, shape: &[usize]) -> PyResult<(usize, usize)> {
    let ty = &param.ty.shape;
    let vector = ty.cols.is_one() || ty.rows.is_one();
    match *shape {
        [rows, cols] => Ok((rows, cols)),
        [len] if ty.cols.is_one() => Ok((len, 1)),
        [len] if ty.rows.is_one() => Ok((1, len)),
        _ => Err(value_error(format!(
            "`{}` is {}: pass a {} array, got shape {shape:?}",
            param.name,
            param.ty,
            if vector { "1-D" } else { "2-D" }
        ))),
    }
}

impl<'py> Inputs<'py> {
    /// The arguments of `program` in `kwargs`.
    pub fn read(program: &Program, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Inputs<'py>> {
        let mut out = Inputs {
            inputs: Vec::new(),
            arrays: Vec::new(),
        };
        let dims = program.dims();
        for (key, value) in kwargs.into_iter().flat_map(|d| d.iter()) {
            let name: String = key.extract()?;
            let input = match program.param(&name) {
                Some(p) if p.ty.storage == Storage::Scalar => Input::Scalar {
                    name,
                    value: value.extract()?,
                },
                Some(p) if p.ty.storage == Storage::Index => Input::Index {
                    values: labels(&value, &format!("`{name}`"))?,
                    name,
                },
                Some(p) if p.ty.storage == Storage::Csr => out.csr(name, &value)?,
                Some(p) => {
                    let values = floats(&value)?;
                    let (rows, cols) = dense_shape(p, values.shape())?;
                    out.arrays.push(values);
                    Input::Dense {
                        name,
                        rows,
                        cols,
                        array: out.arrays.len() - 1,
                    }
                }
                None if dims.contains(&name) => Input::Dim {
                    size: dim_size(&name, &value)?,
                    name,
                },
                None => {
                    return Err(value_error(format!(
                        "`{}` has no parameter or dimension `{name}`; it takes {}",
                        program.name,
                        list(
                            program
                                .params
                                .iter()
                                .map(|p| &p.name)
                                .chain(&program.free_dims())
                        )
                    )))
                }
            };
            out.inputs.push(input);
        }
        Ok(out)
    }

    /// A CSR argument from a scipy sparse matrix (any format; converted, indices sorted).
    fn csr(&mut self, name: String, value: &Bound<'py, PyAny>) -> PyResult<Input> {
        if !value.hasattr("tocsr")? {
            return Err(value_error(format!(
                "`{name}` is a CSR matrix: pass a scipy.sparse matrix or array"
            )));
        }
        let csr = value
            .call_method0("tocsr")?
            .call_method0("sorted_indices")?;
        let (rows, cols): (usize, usize) = csr.getattr("shape")?.extract()?;
        self.arrays.push(floats(&csr.getattr("data")?)?);
        Ok(Input::Csr {
            row_ptr: ints32(&csr.getattr("indptr")?)?,
            col_idx: ints32(&csr.getattr("indices")?)?,
            name,
            rows,
            cols,
            array: self.arrays.len() - 1,
        })
    }

    /// Runs `program` on `ctx` with these arguments, the GIL released; returns its outputs
    /// read back to the host.
    pub fn run(
        &self,
        py: Python<'py>,
        ctx: &Context,
        program: &Program,
    ) -> PyResult<Vec<(String, HostOutput)>> {
        let arrays = self
            .arrays
            .iter()
            .map(|a| a.as_slice())
            .collect::<Result<Vec<&[f64]>, _>>()?;
        let inputs = &self.inputs;
        py.detach(|| run_host(ctx, program, inputs, &arrays))
            .map_err(crate::errors::runtime_error)
    }
}

/// Uploads the arguments, runs the program and reads its outputs back.
fn run_host(
    ctx: &Context,
    program: &Program,
    inputs: &[Input],
    arrays: &[&[f64]],
) -> Result<Vec<(String, HostOutput)>, RuntimeError> {
    let tensors = inputs
        .iter()
        .filter_map(|input| {
            let (name, t) = match input {
                Input::Dense {
                    name,
                    rows,
                    cols,
                    array,
                } => (name, ctx.dense(*rows, *cols, arrays[*array])),
                Input::Csr {
                    name,
                    rows,
                    cols,
                    row_ptr,
                    col_idx,
                    array,
                } => (
                    name,
                    ctx.csr(*rows, *cols, row_ptr, col_idx, arrays[*array]),
                ),
                Input::Index { name, values } => (name, ctx.index(values)),
                Input::Scalar { .. } | Input::Dim { .. } => return None,
            };
            Some(t.map(|t| (name.as_str(), t)))
        })
        .collect::<Result<Vec<(&str, Tensor)>, _>>()?;
    let mut args = Args::new();
    for (name, t) in &tensors {
        args = args.tensor(name, t);
    }
    for input in inputs {
        match input {
            Input::Scalar { name, value } => args = args.scalar(name, *value),
            Input::Dim { name, size } => args = args.dim(name, *size),
            _ => {}
        }
    }
    let out = ctx.run(program, &args)?;
    program
        .outputs
        .iter()
        .map(|o| Ok((o.name.clone(), HostOutput::read(ctx, &out, o)?)))
        .collect()
}

/// An output read back to the host.
pub enum HostOutput {
    /// Float values and the array shape they take.
    Floats {
        /// The values, row-major.
        values: Vec<f64>,
        /// The array's shape: `[len]` for a vector, `[rows, cols]` for a matrix.
        shape: Vec<usize>,
    },
    /// Labels.
    Index(Vec<u32>),
    /// A scalar.
    Scalar(f64),
}

impl HostOutput {
    /// Output `o` of `out`: vectors as 1-D arrays, matrices 2-D.
    fn read(ctx: &Context, out: &Outputs, o: &ParamSig) -> Result<HostOutput, RuntimeError> {
        Ok(match o.ty.storage {
            Storage::Scalar => HostOutput::Scalar(out.scalar(&o.name)?),
            Storage::Index => HostOutput::Index(ctx.to_u32(out.tensor(&o.name)?)?),
            Storage::Dense | Storage::Csr => {
                let t = out.tensor(&o.name)?;
                let (rows, cols) = t.dims();
                let shape = if o.ty.shape.cols.is_one() {
                    vec![rows]
                } else if o.ty.shape.rows.is_one() {
                    vec![cols]
                } else {
                    vec![rows, cols]
                };
                HostOutput::Floats {
                    values: ctx.to_f64(t)?,
                    shape,
                }
            }
        })
    }

    /// As a Python value: an array of `dtype` (labels `int64`) or a float.
    pub fn into_py(self, py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
        match self {
            HostOutput::Floats { values, shape } => float_array(py, values, dtype, &shape),
            HostOutput::Index(values) => {
                let wide: Vec<i64> = values.into_iter().map(i64::from).collect();
                Ok(numpy::IntoPyArray::into_pyarray(wide, py).into_any())
            }
            HostOutput::Scalar(v) => Ok(v.into_pyobject(py)?.into_any()),
        }
    }
}
