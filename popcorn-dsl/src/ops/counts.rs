//! `counts(labels, k)`: how many entries of an index vector equal each of `0..k`.

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{sums_by_label, RefValue};
use serde::{Deserialize, Serialize};

/// `counts(labels, k)`: `c[j]` = the number of `i` with `labels[i] == j`, as floats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Number of clusters.
    pub k: Dim,
}

impl OpFacts for Counts {
    fn label(&self) -> String {
        format!("counts(k={})", self.k)
    }

    fn step_name(&self) -> &'static str {
        "counts"
    }

    fn details(&self) -> String {
        format!("k={}", self.k)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "counts")?;
        require_index(operands[0], 0, "counts")?;
        Ok(Type::col(self.k.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let labels = inputs.first().map_or(0.0, Extent::elems);
        let k = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: 0.0,
            bytes: 4.0 * labels + elem * k,
        }
    }

    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "counts")?;
        let k = clusters(&self.k, dims)?;
        let labels = operands[0].as_index("counts")?;
        let counts = sums_by_label(labels, k, "counts", |_| 1.0)?;
        Ok(RefValue::dense(k, 1, counts))
    }
}
