//! Cluster sums: each row of a matrix summed by the label of its columns. Not in the language:
//! the planner introduces it for products with a selection matrix (one nonzero per column),
//! which it then computes in one streaming pass over the matrix
//! ([`crate::passes::cluster_sums`]).

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{densify, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// `S[i, c] = sum over j with labels[j] == c of M[i, j]`; operands `(M, labels)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSums {
    /// Number of clusters: the columns of `S`.
    pub k: Dim,
}

impl OpFacts for ClusterSums {
    fn label(&self) -> String {
        format!("cluster_sums(k={})", self.k)
    }

    fn step_name(&self) -> &'static str {
        "cluster sums"
    }

    fn details(&self) -> String {
        format!("k={}", self.k)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 2, "cluster_sums")?;
        let (m, labels) = (operands[0], operands[1]);
        require_dense(m, 0, "cluster_sums")?;
        require_index(labels, 1, "cluster_sums")?;
        if labels.shape.rows != m.shape.cols {
            return Err(TypeError::new(format!(
                "cluster_sums needs one label per column of {m}, found {labels}"
            ))
            .at(1));
        }
        Ok(Type::dense(m.shape.rows.clone(), self.k.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let m = inputs.first().map_or(0.0, Extent::elems);
        let labels = inputs.get(1).map_or(0.0, Extent::elems);
        let s = outputs.first().map_or(0.0, Extent::elems);
        Cost {
            flops: m,
            bytes: elem * (m + s) + 4.0 * labels,
        }
    }

    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 2, "cluster_sums")?;
        let k = clusters(&self.k, dims)?;
        let m = densify(operands[0])?;
        let labels = operands[1].as_index("cluster_sums")?;
        if labels.len() != m.cols {
            return Err(format!(
                "cluster_sums: {} labels for {} columns",
                labels.len(),
                m.cols
            ));
        }
        let mut s = Mat::zeros(m.rows, k);
        for i in 0..m.rows {
            for (j, &c) in labels.iter().enumerate() {
                if c as usize >= k {
                    return Err(format!(
                        "cluster_sums: label {c} at {j} is not below k = {k}"
                    ));
                }
                s.set(i, c as usize, s.at(i, c as usize) + m.at(i, j));
            }
        }
        Ok(s.into_value())
    }
}
