//! The type system of the language: dimensions, shapes, storage kinds and element types.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A dimension: a symbolic name bound at call time (`n`, `k`, `d`) or a literal size.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dim {
    /// A symbolic dimension, bound when the program is called.
    Sym(String),
    /// A literal size.
    Fixed(usize),
}

impl Dim {
    /// The literal one, the size of a vector's other side.
    pub const ONE: Dim = Dim::Fixed(1);

    /// The concrete size under `dims`, if known.
    pub fn resolve(&self, dims: &DimBindings) -> Option<usize> {
        match self {
            Dim::Fixed(v) => Some(*v),
            Dim::Sym(s) => dims.get(s).copied(),
        }
    }

    /// Whether this is the literal 1.
    pub fn is_one(&self) -> bool {
        *self == Dim::Fixed(1)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Sym(s) => f.write_str(s),
            Dim::Fixed(v) => write!(f, "{v}"),
        }
    }
}

/// Concrete values of symbolic dimensions, by name.
pub type DimBindings = BTreeMap<String, usize>;

/// A two-dimensional shape `rows x cols`; vectors and scalars have a side of literal 1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Number of rows.
    pub rows: Dim,
    /// Number of columns.
    pub cols: Dim,
}

impl Shape {
    /// A `rows x cols` shape.
    pub fn new(rows: Dim, cols: Dim) -> Shape {
        Shape { rows, cols }
    }

    /// The 1 x 1 shape of a scalar.
    pub fn scalar() -> Shape {
        Shape::new(Dim::ONE, Dim::ONE)
    }

    /// The transposed shape.
    pub fn transposed(&self) -> Shape {
        Shape::new(self.cols.clone(), self.rows.clone())
    }

    /// Concrete `(rows, cols)` under `dims`, if every dimension is bound.
    pub fn resolve(&self, dims: &DimBindings) -> Option<(usize, usize)> {
        Some((self.rows.resolve(dims)?, self.cols.resolve(dims)?))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} x {}", self.rows, self.cols)
    }
}

/// How a value is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Storage {
    /// Dense, row-major. Matrices, column vectors (`cols = 1`) and row vectors (`rows = 1`).
    Dense,
    /// Compressed sparse rows.
    Csr,
    /// A vector of non-negative integer indices (cluster labels), shape `n x 1`.
    Index,
    /// A scalar known on the host: a literal, a Rust value passed in, or a dimension's size.
    Scalar,
}

/// The type of a value: storage and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Type {
    /// How the value is stored.
    pub storage: Storage,
    /// Its shape.
    pub shape: Shape,
}

impl Type {
    /// A dense `rows x cols` matrix.
    pub fn dense(rows: Dim, cols: Dim) -> Type {
        Type {
            storage: Storage::Dense,
            shape: Shape::new(rows, cols),
        }
    }

    /// A CSR `rows x cols` matrix.
    pub fn csr(rows: Dim, cols: Dim) -> Type {
        Type {
            storage: Storage::Csr,
            shape: Shape::new(rows, cols),
        }
    }

    /// A column vector of length `n` (dense `n x 1`).
    pub fn col(n: Dim) -> Type {
        Type::dense(n, Dim::ONE)
    }

    /// A row vector of length `n` (dense `1 x n`).
    pub fn row(n: Dim) -> Type {
        Type::dense(Dim::ONE, n)
    }

    /// An index vector of length `n`.
    pub fn index(n: Dim) -> Type {
        Type {
            storage: Storage::Index,
            shape: Shape::new(n, Dim::ONE),
        }
    }

    /// A host scalar.
    pub fn scalar() -> Type {
        Type {
            storage: Storage::Scalar,
            shape: Shape::scalar(),
        }
    }

    /// Whether this is a host scalar.
    pub fn is_scalar(&self) -> bool {
        self.storage == Storage::Scalar
    }

    /// Whether this is a dense column vector (`n x 1`).
    pub fn is_col(&self) -> bool {
        self.storage == Storage::Dense && self.shape.cols.is_one()
    }

    /// Whether this is a dense row vector (`1 x n`).
    pub fn is_row(&self) -> bool {
        self.storage == Storage::Dense && self.shape.rows.is_one()
    }
}

impl fmt::Display for Type {
    /// Prints the type the way a user writes it: `Dense[n, k]`, `Col[n]`, `Csr[k, n]`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        match self.storage {
            Storage::Scalar => f.write_str("Scalar"),
            Storage::Index => write!(f, "Index[{}]", s.rows),
            Storage::Csr => write!(f, "Csr[{}, {}]", s.rows, s.cols),
            Storage::Dense if s.rows.is_one() && s.cols.is_one() => f.write_str("Dense[1, 1]"),
            Storage::Dense if s.cols.is_one() => write!(f, "Col[{}]", s.rows),
            Storage::Dense if s.rows.is_one() => write!(f, "Row[{}]", s.cols),
            Storage::Dense => write!(f, "Dense[{}, {}]", s.rows, s.cols),
        }
    }
}

/// Element type of the values a plan computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum DType {
    /// 32-bit floats.
    #[default]
    F32,
    /// 64-bit floats.
    F64,
}

impl DType {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// The matching kernel scalar type.
    pub fn scalar_type(self) -> kernel_ir::ScalarType {
        match self {
            DType::F32 => kernel_ir::ScalarType::F32,
            DType::F64 => kernel_ir::ScalarType::F64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        })
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<DType, String> {
        match s {
            "f32" | "float32" => Ok(DType::F32),
            "f64" | "float64" => Ok(DType::F64),
            other => Err(format!("unknown dtype `{other}` (expected f32 or f64)")),
        }
    }
}

/// Why an operation does not type-check. `operand` says which operand is at fault, when one is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeError {
    /// What is wrong.
    pub message: String,
    /// Which operand (position) the error is about, if a single one.
    pub operand: Option<usize>,
    /// What to do about it.
    pub help: Option<String>,
}

impl TypeError {
    /// An error with a message only.
    pub fn new(message: impl Into<String>) -> TypeError {
        TypeError {
            message: message.into(),
            operand: None,
            help: None,
        }
    }

    /// The error is about operand `operand`.
    pub fn at(mut self, operand: usize) -> TypeError {
        self.operand = Some(operand);
        self
    }

    /// What to do about it.
    pub fn help(mut self, help: impl Into<String>) -> TypeError {
        self.help = Some(help.into());
        self
    }
}

/// Checks that operand `pos` of `func` is dense.
pub fn require_dense(t: &Type, pos: usize, func: &str) -> Result<(), TypeError> {
    if t.storage == Storage::Dense {
        Ok(())
    } else {
        Err(TypeError::new(format!("{func} needs a dense matrix or vector, found {t}")).at(pos))
    }
}

/// Checks that operand `pos` of `func` is an index vector.
pub fn require_index(t: &Type, pos: usize, func: &str) -> Result<(), TypeError> {
    if t.storage == Storage::Index {
        Ok(())
    } else {
        Err(TypeError::new(format!(
            "{func} needs an index vector (Index[n]), found {t}"
        ))
        .at(pos))
    }
}
