//! Label sums: a vector's entries summed by label. Not in the language: the planner introduces
//! it for a selection matrix times a vector where `n k` is small, instead of building the
//! matrix ([`crate::passes::cluster_sums`]).

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{densify, sums_by_label, RefValue};
use serde::{Deserialize, Serialize};

/// `s[c] = sum over i with labels[i] == c of x[i]`; operands `(x, labels)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSums {
    /// Number of clusters.
    pub k: Dim,
}

impl OpFacts for LabelSums {
    fn label(&self) -> String {
        format!("label_sums(k={})", self.k)
    }

    fn step_name(&self) -> &'static str {
        "label sums"
    }

    fn details(&self) -> String {
        format!("k={}", self.k)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 2, "label_sums")?;
        let (x, labels) = (operands[0], operands[1]);
        require_dense(x, 0, "label_sums")?;
        require_index(labels, 1, "label_sums")?;
        if !x.shape.cols.is_one() || labels.shape.rows != x.shape.rows {
            return Err(TypeError::new(format!(
                "label_sums needs a column vector with one label per entry, found {x} and \
                 {labels}"
            ))
            .at(1));
        }
        Ok(Type::col(self.k.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let x = inputs.first().map_or(0.0, Extent::elems);
        let labels = inputs.get(1).map_or(0.0, Extent::elems);
        let s = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: x,
            bytes: elem * (x + s) + 4.0 * labels,
        }
    }

    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 2, "label_sums")?;
        let k = clusters(&self.k, dims)?;
        let x = densify(operands[0])?;
        let labels = operands[1].as_index("label_sums")?;
        if labels.len() != x.rows || x.cols != 1 {
            return Err(format!(
                "label_sums: {} labels for a {} x {} value",
                labels.len(),
                x.rows,
                x.cols
            ));
        }
        let s = sums_by_label(labels, k, "label_sums", |i| x.at(i, 0))?;
        Ok(RefValue::dense(k, 1, s))
    }
}
