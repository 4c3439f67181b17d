//! Densify: a CSR matrix written out dense (or its transpose), where the planner found a dense
//! product on it cheaper than a sparse one (see [`crate::passes::sparse_products`]).

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{DimBindings, Storage, Type, TypeError};
use crate::value::{densify, RefValue};
use serde::{Deserialize, Serialize};

/// `dense(S)` (or `dense(S)^T` with `transpose`): row-major, zeros where `S` stores nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Densify {
    /// Write the transpose (`cols x rows`).
    pub transpose: bool,
    /// Why the planner chose it, for plans.
    #[serde(default)]
    pub why: String,
}

impl OpFacts for Densify {
    fn label(&self) -> String {
        if self.transpose {
            "densify^T".into()
        } else {
            "densify".into()
        }
    }

    fn step_name(&self) -> &'static str {
        "densify"
    }

    fn details(&self) -> String {
        let t = if self.transpose { "transposed, " } else { "" };
        format!("{t}{}", self.why)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "densify")?;
        let t = operands[0];
        if t.storage != Storage::Csr {
            return Err(TypeError::new(format!("densify needs a CSR matrix, found {t}")).at(0));
        }
        let shape = if self.transpose {
            t.shape.transposed()
        } else {
            t.shape.clone()
        };
        Ok(Type::dense(shape.rows, shape.cols))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let nnz = inputs.first().and_then(|e| e.nnz).unwrap_or(0) as f64;
        let rows = inputs.first().map_or(0.0, |e| e.rows as f64);
        let out = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 0.0,
            bytes: elem * out + nnz * (elem + 4.0) + 4.0 * (rows + 1.0),
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "densify")?;
        if !matches!(operands[0], RefValue::Csr { .. }) {
            return Err(format!(
                "densify needs a CSR matrix, found {}",
                operands[0].describe()
            ));
        }
        let m = densify(operands[0])?;
        Ok(if self.transpose { m.transposed() } else { m }.into_value())
    }
}
