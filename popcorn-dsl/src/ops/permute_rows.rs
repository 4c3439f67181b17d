//! Rows in cluster order: a matrix's rows (or an index vector's entries) reordered as a
//! selection matrix lists the points, cluster by cluster. Not in the language: the planner
//! sorts a contraction's columns by label with it, so that a tile of columns meets few
//! clusters ([`crate::passes::contractions`]); sums by label do not depend on the order.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{DimBindings, Storage, Type, TypeError};
use crate::value::{densify, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// `out[p, :] = M[S.col_idx[p], :]` for `p < nnz(S)`; operands `(M, S)` with `S` a selection
/// matrix (`k x n`, each point at most once). Rows past `nnz(S)` (points whose label is not
/// below `k`) are zero, or `u32::MAX` (no cluster) in an index vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermuteRows;

impl OpFacts for PermuteRows {
    fn label(&self) -> String {
        "permute_rows".into()
    }

    fn step_name(&self) -> &'static str {
        "rows by cluster"
    }

    fn details(&self) -> String {
        "in the selection's order".into()
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 2, "permute_rows")?;
        let (m, s) = (operands[0], operands[1]);
        if !matches!(m.storage, Storage::Dense | Storage::Index) {
            return Err(TypeError::new(format!(
                "permute_rows reorders a dense matrix or an index vector, found {m}"
            ))
            .at(0));
        }
        if s.storage != Storage::Csr || s.shape.cols != m.shape.rows {
            return Err(TypeError::new(format!(
                "permute_rows needs a selection matrix with a column per row of {m}, found {s}"
            ))
            .at(1));
        }
        Ok(m.clone())
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let m = inputs.first().map_or(0.0, Extent::elems);
        let out = outputs.first().map_or(0.0, Extent::elems);
        let n = inputs.first().map_or(0, |e| e.rows) as f64;
        Cost {
            flops: 0.0,
            bytes: elem * (m + out) + 4.0 * n,
        }
    }

    fn eval(&self, operands: &[&RefValue], _dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 2, "permute_rows")?;
        let RefValue::Csr { col_idx, cols, .. } = operands[1] else {
            return Err("permute_rows: the second operand is not a CSR matrix".into());
        };
        if let RefValue::Index(labels) = operands[0] {
            if labels.len() != *cols {
                return Err(format!(
                    "permute_rows: {} labels for a selection of {cols} points",
                    labels.len()
                ));
            }
            let mut out = vec![u32::MAX; labels.len()];
            for (p, &i) in col_idx.iter().enumerate() {
                out[p] = labels[i];
            }
            return Ok(RefValue::Index(out));
        }
        let m = densify(operands[0])?;
        if m.rows != *cols {
            return Err(format!(
                "permute_rows: a {} x {} matrix for a selection of {cols} points",
                m.rows, m.cols
            ));
        }
        let mut out = Mat::zeros(m.rows, m.cols);
        for (p, &i) in col_idx.iter().enumerate() {
            for c in 0..m.cols {
                out.set(p, c, m.at(i, c));
            }
        }
        Ok(out.into_value())
    }
}
