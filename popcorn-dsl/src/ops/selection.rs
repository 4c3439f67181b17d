//! `selection(labels, k)`: the sparse `k x n` matrix that averages by cluster.

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{sparsify, sums_by_label, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// `selection(labels, k)`: the CSR matrix `V[c, i] = 1 / |c|` where `labels[i] == c` (an
/// empty cluster has an empty row). Row `c` lists its points ascending, so `col_idx[..nnz]`
/// lists the points cluster by cluster. Where a backend accepts labels `>= k` (the CUDA
/// backend; the CPU backend and the reference evaluator reject them), those points are in no
/// row, and the column-index buffer (`n` entries) holds them past `nnz`, ascending: all of
/// `col_idx[..n]` is then a permutation of `0..n` (the order [`super::PermuteRows`] uses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// Number of clusters.
    pub k: Dim,
}

impl OpFacts for Selection {
    fn label(&self) -> String {
        format!("selection(k={})", self.k)
    }

    fn step_name(&self) -> &'static str {
        "selection"
    }

    fn details(&self) -> String {
        format!("k={}", self.k)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, 1, "selection")?;
        let labels = operands[0];
        require_index(labels, 0, "selection")?;
        Ok(Type::csr(self.k.clone(), labels.shape.rows.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let n = inputs.first().map_or(0.0, Extent::elems);
        let k = outputs.first().map_or(0, |o| o.rows) as f64;
        // A histogram, a scan and a scatter: the labels twice, n entries of (column, value),
        // k + 1 row offsets.
        Cost {
            flops: n,
            bytes: 4.0 * n + n * (4.0 + elem) + (k + 1.0) * 8.0,
        }
    }

    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, 1, "selection")?;
        let k = clusters(&self.k, dims)?;
        let labels = operands[0].as_index("selection")?;
        let counts = sums_by_label(labels, k, "selection", |_| 1.0)?;
        let mut v = Mat::zeros(k, labels.len());
        for (i, &c) in labels.iter().enumerate() {
            v.set(c as usize, i, 1.0 / counts[c as usize]);
        }
        Ok(sparsify(&v))
    }
}
