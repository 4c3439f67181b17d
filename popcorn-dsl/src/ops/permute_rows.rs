//! Rows in cluster order: a matrix's rows (or an index vector's entries) reordered as a
//! selection matrix lists the points, cluster by cluster, and back. Not in the language: the
//! planner sorts a contraction's columns by label with it, so that a tile of columns meets few
//! clusters ([`crate::passes::contractions`]); sums by label do not depend on the order.
//!
//! The order of a selection matrix `S` (`k x n`, each point at most once) is a permutation of
//! `0..n`: the points `S` lists (`S.col_idx[..nnz]`, cluster by cluster), then the points it
//! does not list (labels `>= k`), ascending.

use super::{arity, type_arity, Cost, Extent, OpFacts};
use crate::types::{DimBindings, Storage, Type, TypeError};
use crate::value::{densify, Mat, RefValue};
use serde::{Deserialize, Serialize};

/// Rows permuted by the order of a selection matrix; operands `(M, S)` with `S` a selection
/// matrix (`k x n`, each point at most once) and `M` `n` rows (a dense matrix or an index
/// vector). With `order` the order of `S` (its listed points, then the rest ascending; see the
/// module documentation):
/// - forward (`inverse: false`): `out[p, :] = M[order[p], :]` for `p < n` (rows by cluster);
/// - inverse (`inverse: true`): `out[order[p], :] = M[p, :]` (rows back in the points'
///   order), so the inverse of the forward result is `M` again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermuteRows {
    /// Puts rows back from cluster order into the points' order (the inverse permutation).
    #[serde(default)]
    pub inverse: bool,
}

/// The full order of a selection matrix with column indices `col_idx` over `cols` points: the
/// listed points, then the others ascending. Errors on a column out of range or listed twice.
pub(crate) fn selection_order(col_idx: &[usize], cols: usize) -> Result<Vec<usize>, String> {
    let mut listed = vec![false; cols];
    let mut order = Vec::with_capacity(cols);
    for &i in col_idx {
        match listed.get_mut(i) {
            Some(seen) if !*seen => *seen = true,
            Some(_) => return Err(format!("permute_rows: point {i} is listed twice")),
            None => return Err(format!("permute_rows: point {i} of {cols}")),
        }
        order.push(i);
    }
    order.extend((0..cols).filter(|i| !listed[*i]));
    Ok(order)
}

impl OpFacts for PermuteRows {
    fn label(&self) -> String {
        if self.inverse {
            "unpermute_rows".into()
        } else {
            "permute_rows".into()
        }
    }

    fn step_name(&self) -> &'static str {
        if self.inverse {
            "rows back from cluster order"
        } else {
            "rows by cluster"
        }
    }

    fn details(&self) -> String {
        if self.inverse {
            "from the selection's order".into()
        } else {
            "in the selection's order".into()
        }
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        let name = self.label();
        type_arity(operands, 2, &name)?;
        let (m, s) = (operands[0], operands[1]);
        if !matches!(m.storage, Storage::Dense | Storage::Index) {
            return Err(TypeError::new(format!(
                "{name} reorders a dense matrix or an index vector, found {m}"
            ))
            .at(0));
        }
        if s.storage != Storage::Csr || s.shape.cols != m.shape.rows {
            return Err(TypeError::new(format!(
                "{name} needs a selection matrix with a column per row of {m}, found {s}"
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
        let name = self.label();
        arity(operands, 2, &name)?;
        let RefValue::Csr { col_idx, cols, .. } = operands[1] else {
            return Err(format!("{name}: the second operand is not a CSR matrix"));
        };
        let order = selection_order(col_idx, *cols)?;
        // (destination, source) row pairs.
        let pairs = order
            .iter()
            .enumerate()
            .map(|(p, &i)| if self.inverse { (i, p) } else { (p, i) });
        if let RefValue::Index(labels) = operands[0] {
            if labels.len() != *cols {
                return Err(format!(
                    "{name}: {} labels for a selection of {cols} points",
                    labels.len()
                ));
            }
            let mut out = vec![0; labels.len()];
            for (to, from) in pairs {
                out[to] = labels[from];
            }
            return Ok(RefValue::Index(out));
        }
        let m = densify(operands[0])?;
        if m.rows != *cols {
            return Err(format!(
                "{name}: a {} x {} matrix for a selection of {cols} points",
                m.rows, m.cols
            ));
        }
        let mut out = Mat::zeros(m.rows, m.cols);
        for (to, from) in pairs {
            for c in 0..m.cols {
                out.set(to, c, m.at(from, c));
            }
        }
        Ok(out.into_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::sparsify;

    /// A selection-like CSR `k x n` listing `rows[c]` in row `c` (values 1 / |c|).
    fn selection_listing(rows: &[&[usize]], n: usize) -> RefValue {
        let mut m = Mat::zeros(rows.len(), n);
        for (c, points) in rows.iter().enumerate() {
            for &p in *points {
                m.set(c, p, 1.0 / points.len() as f64);
            }
        }
        sparsify(&m)
    }

    fn forward() -> PermuteRows {
        PermuteRows { inverse: false }
    }

    fn inverse() -> PermuteRows {
        PermuteRows { inverse: true }
    }

    #[test]
    fn the_order_lists_the_unselected_points_last_ascending() {
        assert_eq!(selection_order(&[3, 1], 6), Ok(vec![3, 1, 0, 2, 4, 5]));
        assert_eq!(selection_order(&[], 3), Ok(vec![0, 1, 2]));
        assert_eq!(selection_order(&[0], 1), Ok(vec![0]));
        assert!(selection_order(&[1, 1], 2).unwrap_err().contains("twice"));
        assert!(selection_order(&[2], 2)
            .unwrap_err()
            .contains("point 2 of 2"));
    }

    #[test]
    fn both_directions_with_points_outside_the_clusters() {
        let dims = DimBindings::new();
        // Labels [2, 0, 2, 5, 0] with k = 3: the selection lists 1, 4 (cluster 0), then 0, 2
        // (cluster 2); point 3 (label 5) is not listed and comes last.
        let s = selection_listing(&[&[1, 4], &[], &[0, 2]], 5);
        let labels = RefValue::Index(vec![2, 0, 2, 5, 0]);
        let sorted = forward().eval(&[&labels, &s], &dims).unwrap();
        assert_eq!(sorted, RefValue::Index(vec![0, 0, 2, 2, 5]));
        assert_eq!(inverse().eval(&[&sorted, &s], &dims), Ok(labels.clone()));
        let m = RefValue::dense(5, 2, (0..10).map(f64::from).collect());
        let rows = forward().eval(&[&m, &s], &dims).unwrap();
        assert_eq!(
            rows,
            RefValue::dense(5, 2, vec![2.0, 3.0, 8.0, 9.0, 0.0, 1.0, 4.0, 5.0, 6.0, 7.0])
        );
        assert_eq!(inverse().eval(&[&rows, &s], &dims), Ok(m.clone()));
        // The inverse alone scatters: row p goes to order[p].
        assert_eq!(
            inverse().eval(&[&m, &s], &dims),
            Ok(RefValue::dense(
                5,
                2,
                vec![4.0, 5.0, 0.0, 1.0, 6.0, 7.0, 8.0, 9.0, 2.0, 3.0]
            ))
        );
    }

    #[test]
    fn single_points_and_odd_sizes_round_trip() {
        let dims = DimBindings::new();
        // n = 1, listed or not.
        for s in [selection_listing(&[&[0]], 1), selection_listing(&[&[]], 1)] {
            let one = RefValue::Index(vec![7]);
            assert_eq!(forward().eval(&[&one, &s], &dims), Ok(one.clone()));
            assert_eq!(inverse().eval(&[&one, &s], &dims), Ok(one.clone()));
            let row = RefValue::dense(1, 3, vec![1.0, 2.0, 3.0]);
            assert_eq!(forward().eval(&[&row, &s], &dims), Ok(row.clone()));
            assert_eq!(inverse().eval(&[&row, &s], &dims), Ok(row.clone()));
        }
        // n = 7, two clusters, points 1 and 5 outside.
        let s = selection_listing(&[&[2, 6], &[0, 3, 4]], 7);
        let labels = RefValue::Index(vec![1, 9, 0, 1, 1, 4, 0]);
        let sorted = forward().eval(&[&labels, &s], &dims).unwrap();
        assert_eq!(sorted, RefValue::Index(vec![0, 0, 1, 1, 1, 9, 4]));
        assert_eq!(inverse().eval(&[&sorted, &s], &dims), Ok(labels));
        let m = RefValue::dense(7, 3, (0..21).map(|x| f64::from(x) * 0.5).collect());
        let rows = forward().eval(&[&m, &s], &dims).unwrap();
        assert_eq!(inverse().eval(&[&rows, &s], &dims), Ok(m));
    }

    #[test]
    fn names_and_types_in_both_directions() {
        assert_eq!(forward().label(), "permute_rows");
        assert_eq!(inverse().label(), "unpermute_rows");
        assert_eq!(forward().step_name(), "rows by cluster");
        assert_eq!(inverse().step_name(), "rows back from cluster order");
        let m = Type::dense(crate::types::Dim::Fixed(4), crate::types::Dim::Fixed(2));
        let s = Type::csr(crate::types::Dim::Fixed(3), crate::types::Dim::Fixed(4));
        for op in [forward(), inverse()] {
            assert_eq!(op.result_type(&[&m, &s]), Ok(m.clone()));
            assert!(op.result_type(&[&s, &s]).is_err());
        }
        // A plan written before the field existed reads as the forward direction.
        let old: PermuteRows = serde_json::from_str("{}").unwrap();
        assert_eq!(old, forward());
    }

    #[test]
    fn a_malformed_selection_is_an_error() {
        let dims = DimBindings::new();
        let bad = RefValue::Csr {
            rows: 1,
            cols: 2,
            row_ptr: vec![0, 2],
            col_idx: vec![1, 1],
            values: vec![0.5, 0.5],
        };
        let labels = RefValue::Index(vec![0, 0]);
        let err = inverse().eval(&[&labels, &bad], &dims).unwrap_err();
        assert!(err.contains("listed twice"), "{err}");
    }
}
