//! `rownorms(S)` of a CSR matrix: the sum of each row's squared stored values.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{DimBindings, Storage, Type, TypeError};
use crate::value::{densify, RefValue};
use serde::{Deserialize, Serialize};

/// `n[i] = sum_j S[i, j]^2` over the stored entries of row `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SparseRowNorms;

impl OpFacts for SparseRowNorms {
    fn label(&self) -> String {
        "rownorms (csr)".into()
    }

    fn step_name(&self) -> &'static str {
        "csr rownorms"
    }

    fn details(&self) -> String {
        String::new()
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "rownorms")?;
        let t = operands[0];
        if t.storage != Storage::Csr {
            return Err(TypeError::new(format!(
                "the sparse rownorms needs a CSR matrix, found {t}"
            ))
            .at(0));
        }
        Ok(Type::col(t.shape.rows.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let nnz = inputs.first().and_then(|e| e.nnz).unwrap_or(0) as f64;
        let rows = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 2.0 * nnz,
            bytes: nnz * elem + 4.0 * (rows + 1.0) + elem * rows,
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "rownorms")?;
        let m = densify(operands[0])?;
        Ok(RefValue::dense(
            m.rows,
            1,
            (0..m.rows)
                .map(|i| (0..m.cols).map(|j| m.at(i, j) * m.at(i, j)).sum())
                .collect(),
        ))
    }
}
