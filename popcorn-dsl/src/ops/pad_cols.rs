//! Column padding: a dense matrix with zero columns appended. Not in the language: the planner
//! pads a TF32 SYRK's operand to whole multiples of the target's row length
//! ([`crate::passes::tf32_padding`]), which leaves `A A^T` unchanged exactly.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, Dim, DimBindings, Type, TypeError};
use crate::value::{densify, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// `P[i, j] = A[i, j]` for `j < cols(A)`, `0` for `cols(A) <= j < cols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PadCols {
    /// Columns of the result (at least the operand's).
    pub cols: usize,
}

impl OpFacts for PadCols {
    fn label(&self) -> String {
        format!("pad_cols({})", self.cols)
    }

    fn step_name(&self) -> &'static str {
        "pad columns"
    }

    fn details(&self) -> String {
        format!("to {} columns with zeros", self.cols)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "pad_cols")?;
        let a = operands[0];
        require_dense(a, 0, "pad_cols")?;
        if let Dim::Fixed(c) = a.shape.cols {
            if c > self.cols {
                return Err(TypeError::new(format!(
                    "pad_cols to {} columns of a matrix of {c}",
                    self.cols
                ))
                .at(0));
            }
        }
        Ok(Type::dense(a.shape.rows.clone(), Dim::Fixed(self.cols)))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let a = inputs.first().map_or(0.0, Extent::elems);
        let p = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 0.0,
            bytes: elem * (a + p),
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "pad_cols")?;
        let a = densify(operands[0])?;
        if a.cols > self.cols {
            return Err(format!(
                "pad_cols to {} columns of a matrix of {}",
                self.cols, a.cols
            ));
        }
        let mut p = Mat::zeros(a.rows, self.cols);
        for i in 0..a.rows {
            for j in 0..a.cols {
                p.set(i, j, a.at(i, j));
            }
        }
        Ok(p.into_value())
    }

    fn scratch_result(&self) -> bool {
        true
    }
}
