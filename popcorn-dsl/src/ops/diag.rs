//! `diag(M)`: the diagonal of a square dense matrix, as a column vector.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, DimBindings, Type, TypeError};
use crate::value::{densify, RefValue};
use serde::{Deserialize, Serialize};

/// `diag(M)`: `d[i] = M[i, i]`. On a block of rows of the square matrix (a rank's rows of a
/// [partitioned](crate::plan::collective) plan, starting at global row `offset`), the
/// entries `d[i] = M[i, offset + i]` of those rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diag {
    /// The column of the first row's diagonal entry: 0 for the whole matrix, the block's first
    /// row for a block of rows.
    #[serde(default)]
    pub offset: usize,
    /// Whether the input is a block of rows of the square matrix (a rank's rows), not the
    /// whole matrix.
    #[serde(default)]
    pub block: bool,
}

impl Diag {
    /// Checks that a `rows x cols` input is what this step reads: the whole square matrix, or
    /// a block of its rows starting at row `offset`.
    pub fn check_input(&self, rows: usize, cols: usize) -> Result<(), String> {
        let fits = if self.block {
            self.offset + rows <= cols
        } else {
            self.offset == 0 && rows == cols
        };
        if fits {
            Ok(())
        } else if self.block {
            Err(format!(
                "diag of a block of rows: a {rows} x {cols} matrix from column {} is not a \
                 block of rows of a square matrix",
                self.offset
            ))
        } else {
            Err(format!("diag needs a square matrix, found {rows} x {cols}"))
        }
    }
}

impl OpFacts for Diag {
    fn label(&self) -> String {
        "diag".into()
    }

    fn step_name(&self) -> &'static str {
        "diag"
    }

    fn details(&self) -> String {
        if self.block {
            format!("rows from {}", self.offset)
        } else {
            String::new()
        }
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "diag")?;
        let t = operands[0];
        require_dense(t, 0, "diag")?;
        if t.shape.rows != t.shape.cols {
            return Err(TypeError::new(format!("diag needs a square matrix, found {t}")).at(0));
        }
        Ok(Type::col(t.shape.rows.clone()))
    }

    fn cost(&self, _inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let n = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 0.0,
            bytes: 2.0 * elem * n,
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "diag")?;
        let m = densify(operands[0])?;
        self.check_input(m.rows, m.cols)?;
        Ok(RefValue::dense(
            m.rows,
            1,
            (0..m.rows).map(|i| m.at(i, self.offset + i)).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_rows_start_anywhere_and_whole_matrices_are_square() {
        let whole = Diag::default();
        assert!(whole.check_input(5, 5).is_ok());
        assert!(
            whole.check_input(3, 5).is_err(),
            "a whole diagonal needs a square"
        );
        // Rank 0's rows start at column 0 and are not square.
        let first = Diag {
            offset: 0,
            block: true,
        };
        assert!(first.check_input(3, 5).is_ok());
        let last = Diag {
            offset: 3,
            block: true,
        };
        assert!(last.check_input(2, 5).is_ok());
        let past = last
            .check_input(3, 5)
            .expect_err("rows 3..6 of a 5-column matrix");
        assert!(past.contains("from column 3"), "{past}");
        let m = RefValue::dense(2, 5, (0..10).map(f64::from).collect());
        let RefValue::Dense { data, .. } = last.eval(&[&m], &DimBindings::new()).unwrap() else {
            panic!("a dense column");
        };
        assert_eq!(data, vec![3.0, 9.0]);
    }
}
