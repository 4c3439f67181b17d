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

/// The largest `n k` for which the label sums of a vector run the GPU's per-cluster kernel
/// (`pk_label_sums`: one block per cluster, reading the labels and `x` once per cluster);
/// beyond it the CUDA runtime sums the vector as an `n x 1` matrix with the one-pass kernel
/// of the label sums of rows (where its `k x 32` bins per warp fit a block's shared memory).
/// The CPU always sums in one pass.
pub const LABEL_SUMS_VECTOR_MAX_WORK: usize = 1 << 25;

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

    /// One pass over `x` and the labels, except for a vector with `n k` at most
    /// [`LABEL_SUMS_VECTOR_MAX_WORK`], which the GPU's per-cluster kernel reads once per
    /// cluster (`k` passes).
    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let x = inputs.first().map_or(0.0, Extent::elems);
        let labels = inputs.get(1).map_or(0.0, Extent::elems);
        let s = outputs.first().map_or(0.0, Extent::elems);
        let vector = inputs.first().is_some_and(|e| e.cols == 1);
        let (n, k) = (
            inputs.first().map_or(0, |e| e.rows),
            outputs.first().map_or(0, |e| e.rows),
        );
        let passes = if vector && n.saturating_mul(k) <= LABEL_SUMS_VECTOR_MAX_WORK {
            k.max(1) as f64
        } else {
            1.0
        };
        Cost {
            flops: x * passes,
            bytes: passes * (elem * x + 4.0 * labels) + elem * s,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(rows: usize, cols: usize) -> Extent {
        Extent {
            rows,
            cols,
            nnz: None,
        }
    }

    /// The cost follows the kernel the GPU runs: `k` passes over a vector up to the limit,
    /// one pass beyond it (n = 10^6, k = 1000: 12 MB in f64, not 12 GB), one for rows.
    #[test]
    fn the_cost_is_that_of_the_kernel_run() {
        let op = LabelSums { k: Dim::Fixed(0) };
        let cost = |n: usize, d: usize, k: usize| {
            op.cost(&[extent(n, d), extent(n, 1)], &[extent(k, d)], 8.0)
        };
        let small = cost(1000, 1, 10);
        assert_eq!(
            small.bytes,
            10.0 * (8.0 * 1000.0 + 4.0 * 1000.0) + 8.0 * 10.0
        );
        assert_eq!(small.flops, 10.0 * 1000.0);
        let large = cost(1_000_000, 1, 1000);
        assert_eq!(large.bytes, 8.0 * 1e6 + 4.0 * 1e6 + 8.0 * 1000.0);
        assert_eq!(large.flops, 1e6);
        // Just past the limit: one pass.
        let k = 64;
        let n = LABEL_SUMS_VECTOR_MAX_WORK / k + 1;
        assert_eq!(cost(n, 1, k).flops, n as f64);
        assert_eq!(cost(n - 1, 1, k).flops, (k * (n - 1)) as f64);
        let rows = cost(1000, 32, 10);
        assert_eq!(rows.bytes, 8.0 * 32_000.0 + 4.0 * 1000.0 + 8.0 * 320.0);
    }
}
