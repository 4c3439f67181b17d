//! Values of the reference semantics: what every operation means, in `f64`, on plain dense,
//! CSR, index and scalar values. Each operation's unit defines its meaning on these values
//! (the builtins in [`crate::ops`], the element-wise operators in [`kernel_ir::ops`]); the
//! reference evaluator of the tests walks a program's graph with them. Speed is not a goal:
//! everything is written out from its definition with the simplest loops.

/// A value of the reference semantics.
#[derive(Clone, Debug, PartialEq)]
pub enum RefValue {
    /// A dense row-major matrix (vectors are `n x 1` or `1 x n`).
    Dense {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// `rows * cols` values, row-major.
        data: Vec<f64>,
    },
    /// A compressed-sparse-rows matrix.
    Csr {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// `rows + 1` offsets into `col_idx` and `values`.
        row_ptr: Vec<usize>,
        /// Column of each stored entry.
        col_idx: Vec<usize>,
        /// Value of each stored entry.
        values: Vec<f64>,
    },
    /// An index vector (cluster labels).
    Index(Vec<u32>),
    /// A host scalar.
    Scalar(f64),
}

impl RefValue {
    /// A dense `rows x cols` matrix from row-major values.
    pub fn dense(rows: usize, cols: usize, data: Vec<f64>) -> RefValue {
        RefValue::Dense { rows, cols, data }
    }

    /// A short description of the value's kind and shape, for error messages.
    pub fn describe(&self) -> String {
        match self {
            RefValue::Dense { rows, cols, .. } => format!("dense {rows} x {cols}"),
            RefValue::Csr {
                rows, cols, values, ..
            } => {
                format!("CSR {rows} x {cols} ({} entries)", values.len())
            }
            RefValue::Index(v) => format!("index vector of {}", v.len()),
            RefValue::Scalar(_) => "scalar".to_string(),
        }
    }

    /// The dense values (row-major) of a dense value, a densified CSR matrix, or a scalar.
    pub fn to_dense_values(&self) -> Option<Vec<f64>> {
        match self {
            RefValue::Dense { data, .. } => Some(data.clone()),
            RefValue::Csr { .. } => densify(self).ok().map(|m| m.data),
            RefValue::Scalar(v) => Some(vec![*v]),
            RefValue::Index(_) => None,
        }
    }

    /// The entries of an index vector; `what` names the operation in the error otherwise.
    pub fn as_index(&self, what: &str) -> Result<&[u32], String> {
        match self {
            RefValue::Index(idx) => Ok(idx),
            other => Err(format!(
                "{what} needs an index vector, found {}",
                other.describe()
            )),
        }
    }
}

/// A dense matrix of the reference semantics.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows * cols` values, row-major.
    pub data: Vec<f64>,
}

impl Mat {
    /// A `rows x cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Mat {
        Mat {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// Element `(i, j)`.
    pub fn at(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.cols + j]
    }

    /// Sets element `(i, j)`.
    pub fn set(&mut self, i: usize, j: usize, v: f64) {
        self.data[i * self.cols + j] = v;
    }

    /// The transpose.
    pub fn transposed(&self) -> Mat {
        let mut t = Mat::zeros(self.cols, self.rows);
        for i in 0..self.rows {
            for j in 0..self.cols {
                t.set(j, i, self.at(i, j));
            }
        }
        t
    }

    /// As a dense value.
    pub fn into_value(self) -> RefValue {
        RefValue::Dense {
            rows: self.rows,
            cols: self.cols,
            data: self.data,
        }
    }
}

/// Checks a CSR value's structure.
pub fn check_csr(
    rows: usize,
    cols: usize,
    row_ptr: &[usize],
    col_idx: &[usize],
    values: &[f64],
) -> Result<(), String> {
    if row_ptr.len() != rows + 1 {
        return Err(format!(
            "CSR {rows} x {cols}: row_ptr has {} entries, expected {}",
            row_ptr.len(),
            rows + 1
        ));
    }
    if col_idx.len() != values.len() {
        return Err(format!(
            "CSR {rows} x {cols}: {} column indices but {} values",
            col_idx.len(),
            values.len()
        ));
    }
    if row_ptr[0] != 0 || row_ptr[rows] != values.len() {
        return Err(format!(
            "CSR {rows} x {cols}: row_ptr must run from 0 to nnz = {}",
            values.len()
        ));
    }
    if row_ptr.windows(2).any(|w| w[1] < w[0]) {
        return Err(format!("CSR {rows} x {cols}: row_ptr decreases"));
    }
    if col_idx.iter().any(|c| *c >= cols) {
        return Err(format!(
            "CSR {rows} x {cols}: a column index is out of range"
        ));
    }
    Ok(())
}

/// The dense form of a dense or CSR value (duplicate CSR entries add up).
pub fn densify(v: &RefValue) -> Result<Mat, String> {
    match v {
        RefValue::Dense { rows, cols, data } => {
            if data.len() != rows * cols {
                return Err(format!("dense {rows} x {cols} holds {} values", data.len()));
            }
            Ok(Mat {
                rows: *rows,
                cols: *cols,
                data: data.clone(),
            })
        }
        RefValue::Csr {
            rows,
            cols,
            row_ptr,
            col_idx,
            values,
        } => {
            check_csr(*rows, *cols, row_ptr, col_idx, values)?;
            let mut m = Mat::zeros(*rows, *cols);
            for i in 0..*rows {
                for p in row_ptr[i]..row_ptr[i + 1] {
                    let j = col_idx[p];
                    m.set(i, j, m.at(i, j) + values[p]);
                }
            }
            Ok(m)
        }
        other => Err(format!("expected a matrix, found {}", other.describe())),
    }
}

/// The CSR form of a dense matrix, keeping only nonzero entries.
pub fn sparsify(m: &Mat) -> RefValue {
    let mut row_ptr = vec![0];
    let mut col_idx = Vec::new();
    let mut values = Vec::new();
    for i in 0..m.rows {
        for j in 0..m.cols {
            if m.at(i, j) != 0.0 {
                col_idx.push(j);
                values.push(m.at(i, j));
            }
        }
        row_ptr.push(values.len());
    }
    RefValue::Csr {
        rows: m.rows,
        cols: m.cols,
        row_ptr,
        col_idx,
        values,
    }
}

/// `alpha * op(a) * op(b)` by the textbook triple loop.
pub fn matmul(a: &Mat, b: &Mat, trans_a: bool, trans_b: bool, alpha: f64) -> Result<Mat, String> {
    let a = if trans_a { a.transposed() } else { a.clone() };
    let b = if trans_b { b.transposed() } else { b.clone() };
    if a.cols != b.rows {
        return Err(format!(
            "product of {} x {} and {} x {}: inner dimensions differ",
            a.rows, a.cols, b.rows, b.cols
        ));
    }
    let mut c = Mat::zeros(a.rows, b.cols);
    for i in 0..a.rows {
        for j in 0..b.cols {
            let mut s = 0.0;
            for l in 0..a.cols {
                s += a.at(i, l) * b.at(l, j);
            }
            c.set(i, j, alpha * s);
        }
    }
    Ok(c)
}

/// `s[c]` = the sum of `weight(i)` over the `i` with `labels[i] == c`, for `c < k`; a label
/// `>= k` is an error naming `what`.
pub fn sums_by_label(
    labels: &[u32],
    k: usize,
    what: &str,
    weight: impl Fn(usize) -> f64,
) -> Result<Vec<f64>, String> {
    let mut s = vec![0.0; k];
    for (i, &c) in labels.iter().enumerate() {
        let slot = s
            .get_mut(c as usize)
            .ok_or_else(|| format!("{what}: label {c} at {i} is not below k = {k}"))?;
        *slot += weight(i);
    }
    Ok(s)
}
