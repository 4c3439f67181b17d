//! Label sums: the rows of a vector or a matrix summed by label. Not in the language: the
//! planner introduces it for a selection matrix times a vector (where `n k` is small) or times a
//! matrix (where `k` is small), instead of building the matrix
//! ([`crate::passes::cluster_sums`]).

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{densify, sums_by_label, RefValue};
use serde::{Deserialize, Serialize};

/// The widest matrix whose rows label sums add on the GPU: its kernel takes 32 columns per
/// block along the grid's second dimension (at most 65,535 blocks).
pub const LABEL_ROW_SUMS_MAX_COLS: usize = 32 * 65_535;

/// `S[c, :] = sum over i with labels[i] == c of X[i, :]`; operands `(X, labels)`: `X` an
/// `n x d` matrix (a column vector where `d = 1`), the result `k x d` (a column vector where
/// `d = 1`).
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
        if labels.shape.rows != x.shape.rows {
            return Err(TypeError::new(format!(
                "label_sums needs one label per row, found {x} and {labels}"
            ))
            .at(1));
        }
        if x.shape.cols.is_one() {
            Ok(Type::col(self.k.clone()))
        } else {
            Ok(Type::dense(self.k.clone(), x.shape.cols.clone()))
        }
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
        if labels.len() != x.rows {
            return Err(format!(
                "label_sums: {} labels for a {} x {} value",
                labels.len(),
                x.rows,
                x.cols
            ));
        }
        let mut s = vec![0.0; k * x.cols];
        for col in 0..x.cols {
            let sums = sums_by_label(labels, k, "label_sums", |i| x.at(i, col))?;
            for (c, v) in sums.into_iter().enumerate() {
                s[c * x.cols + col] = v;
            }
        }
        Ok(RefValue::dense(k, x.cols, s))
    }
}
