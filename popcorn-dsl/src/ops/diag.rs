//! `diag(M)`: the diagonal of a square dense matrix, as a column vector.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, DimBindings, Type, TypeError};
use crate::value::{densify, RefValue};
use serde::{Deserialize, Serialize};

/// `diag(M)`: `d[i] = M[i, i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diag;

impl OpFacts for Diag {
    fn label(&self) -> String {
        "diag".into()
    }

    fn step_name(&self) -> &'static str {
        "diag"
    }

    fn details(&self) -> String {
        String::new()
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
        if m.rows != m.cols {
            return Err(format!("diag of a {} x {} matrix", m.rows, m.cols));
        }
        Ok(RefValue::dense(
            m.rows,
            1,
            (0..m.rows).map(|i| m.at(i, i)).collect(),
        ))
    }
}
