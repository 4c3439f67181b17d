//! `selection(labels, k)` and `selection(labels, k, w)`: the sparse `k x n` matrix that
//! averages by cluster, plainly or weighted.

use super::{arity, clusters, type_arity, Cost, Extent, OpFacts};
use crate::types::{require_dense, require_index, Dim, DimBindings, Type, TypeError};
use crate::value::{densify, sums_by_label, RefValue};
use serde::{Deserialize, Serialize};

/// `selection(labels, k)`: the CSR matrix `V[c, i] = 1 / |c|` where `labels[i] == c` (an
/// empty cluster has an empty row). Row `c` lists its points ascending, so `col_idx[..nnz]`
/// lists the points cluster by cluster. Where a backend accepts labels `>= k` (the CUDA
/// backend; the CPU backend and the reference evaluator reject them), those points are in no
/// row, and the column-index buffer (`n` entries) holds them past `nnz`, ascending: all of
/// `col_idx[..n]` is then a permutation of `0..n` (the order [`super::PermuteRows`] uses).
///
/// Weighted (`selection(labels, k, w)`, operands `(labels, w)`): the same structure with
/// `V[c, i] = w[i] / W_c`, `W_c` the sum of the weights of cluster `c` (added in the order of
/// the points). A cluster whose weights sum to 0 keeps its entries, all 0, so its products are
/// 0 as an empty cluster's are. Then `(M * V^T)[r, c]` is the weighted mean of row `r` over
/// cluster `c`: weighted Kernel K-means' centroids in feature space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// Number of clusters.
    pub k: Dim,
    /// Whether the values are the points' weights over their cluster's total (a second
    /// operand, the weights `Col[n]`) rather than `1 / |c|`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weighted: bool,
}

impl Selection {
    /// `selection(labels, k)`.
    pub fn plain(k: Dim) -> Selection {
        Selection { k, weighted: false }
    }

    /// `selection(labels, k, w)`.
    pub fn weighted(k: Dim) -> Selection {
        Selection { k, weighted: true }
    }

    /// Number of operands: the labels, and the weights where weighted.
    pub fn operands(&self) -> usize {
        if self.weighted {
            2
        } else {
            1
        }
    }
}

/// Checks the weights `w` (operand 1) of `func(labels, k, w)`: a dense column with one weight
/// per label.
pub fn check_weights(labels: &Type, w: &Type, func: &str) -> Result<(), TypeError> {
    require_dense(w, 1, func)?;
    if !w.shape.cols.is_one() || w.shape.rows != labels.shape.rows {
        return Err(TypeError::new(format!(
            "{func}'s weights must be a column with one weight per label: the labels are \
             {labels}, the weights {w}"
        ))
        .at(1)
        .help(format!(
            "pass the weights as a `Col[{}]` for `{labels}` labels",
            labels.shape.rows
        )));
    }
    Ok(())
}

impl OpFacts for Selection {
    fn label(&self) -> String {
        if self.weighted {
            format!("selection(k={}, weighted)", self.k)
        } else {
            format!("selection(k={})", self.k)
        }
    }

    fn step_name(&self) -> &'static str {
        if self.weighted {
            "weighted selection"
        } else {
            "selection"
        }
    }

    fn details(&self) -> String {
        format!("k={}", self.k)
    }

    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        type_arity(operands, self.operands(), "selection")?;
        let labels = operands[0];
        require_index(labels, 0, "selection")?;
        if let Some(w) = operands.get(1) {
            check_weights(labels, w, "selection")?;
        }
        Ok(Type::csr(self.k.clone(), labels.shape.rows.clone()))
    }

    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        let n = inputs.first().map_or(0.0, Extent::elems);
        let k = outputs.first().map_or(0, |o| o.rows) as f64;
        // A histogram, a scan and a scatter: the labels twice, n entries of (column, value),
        // k + 1 row offsets; weighted, a pass over the entries reading their weights and
        // rewriting the values.
        let weigh = if self.weighted {
            n * (4.0 + 3.0 * elem)
        } else {
            0.0
        };
        Cost {
            flops: if self.weighted { 3.0 * n } else { n },
            bytes: 4.0 * n + n * (4.0 + elem) + (k + 1.0) * 8.0 + weigh,
        }
    }

    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        arity(operands, self.operands(), "selection")?;
        let k = clusters(&self.k, dims)?;
        let labels = operands[0].as_index("selection")?;
        let n = labels.len();
        let weights = match operands.get(1) {
            Some(w) => {
                let w = densify(w)?;
                if w.cols != 1 || w.rows != n {
                    return Err(format!(
                        "selection: {} x {} weights for {n} labels",
                        w.rows, w.cols
                    ));
                }
                Some(w.data)
            }
            None => None,
        };
        let weight = |i: usize| weights.as_ref().map_or(1.0, |w| w[i]);
        let totals = sums_by_label(labels, k, "selection", weight)?;
        // Row c: its points ascending, each `weight / total` (0 where the total is 0).
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); k];
        for (i, &c) in labels.iter().enumerate() {
            rows[c as usize].push(i);
        }
        let mut row_ptr = vec![0];
        let mut col_idx = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        for (c, points) in rows.iter().enumerate() {
            for &i in points {
                col_idx.push(i);
                values.push(if totals[c] != 0.0 {
                    weight(i) / totals[c]
                } else {
                    0.0
                });
            }
            row_ptr.push(col_idx.len());
        }
        Ok(RefValue::Csr {
            rows: k,
            cols: n,
            row_ptr,
            col_idx,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Type;

    fn dims(k: usize) -> DimBindings {
        [("k".to_string(), k)].into_iter().collect()
    }

    fn weighted(labels: Vec<u32>, w: Vec<f64>, k: usize) -> Result<RefValue, String> {
        let n = w.len();
        Selection::weighted(Dim::Sym("k".into())).eval(
            &[&RefValue::Index(labels), &RefValue::dense(n, 1, w)],
            &dims(k),
        )
    }

    #[test]
    fn weighted_values_are_weights_over_their_clusters_total() {
        // Cluster 0: points 1 (w 1) and 3 (w 3), total 4; cluster 1: point 0 (w 2);
        // cluster 2: point 2 (w 0), total 0; cluster 3 empty.
        let v = weighted(vec![1, 0, 2, 0], vec![2.0, 1.0, 0.0, 3.0], 4).unwrap();
        assert_eq!(
            v,
            RefValue::Csr {
                rows: 4,
                cols: 4,
                row_ptr: vec![0, 2, 3, 4, 4],
                col_idx: vec![1, 3, 0, 2],
                values: vec![0.25, 0.75, 1.0, 0.0],
            }
        );
    }

    #[test]
    fn equal_weights_give_the_plain_selection() {
        let labels = vec![2, 0, 2, 2, 1];
        let plain = Selection::plain(Dim::Sym("k".into()))
            .eval(&[&RefValue::Index(labels.clone())], &dims(3))
            .unwrap();
        assert_eq!(weighted(labels, vec![0.5; 5], 3).unwrap(), plain);
    }

    #[test]
    fn weights_of_the_wrong_length_are_errors() {
        let err = weighted(vec![0, 1], vec![1.0, 1.0, 1.0], 2).unwrap_err();
        assert_eq!(err, "selection: 3 x 1 weights for 2 labels");
        let err = Selection::weighted(Dim::Fixed(2))
            .eval(&[&RefValue::Index(vec![0])], &dims(2))
            .unwrap_err();
        assert!(err.contains("takes 2 operand(s), found 1"), "{err}");
    }

    #[test]
    fn weighted_types_need_one_weight_column_per_label() {
        let s = Selection::weighted(Dim::Sym("k".into()));
        let labels = Type::index(Dim::Sym("n".into()));
        let w = Type::col(Dim::Sym("n".into()));
        assert_eq!(
            s.result_type(&[&labels, &w]),
            Ok(Type::csr(Dim::Sym("k".into()), Dim::Sym("n".into())))
        );
        let short = Type::col(Dim::Sym("m".into()));
        let err = s.result_type(&[&labels, &short]).unwrap_err();
        assert!(err.message.contains("one weight per label"), "{err:?}");
        let err = s.result_type(&[&labels, &labels]).unwrap_err();
        assert!(err.message.contains("needs a dense"), "{err:?}");
    }

    /// The line and column of an error of `src`, and its message and help.
    fn error_of(src: &str) -> (usize, usize, String, String) {
        let e = crate::Program::parse(src).unwrap_err();
        (e.line, e.column, e.message, e.help.unwrap_or_default())
    }

    #[test]
    fn weighted_forms_check_in_programs() {
        let p = crate::Program::parse(
            "fn f(l: Index[n], w: Col[n]) -> (V: Csr[k, n], W: Col[k]) { V = selection(l, k, w); W = counts(l, k, w); }",
        )
        .unwrap();
        let labels: Vec<String> = p
            .graph
            .topo_order()
            .into_iter()
            .map(|n| p.graph.node(n).op.label())
            .collect();
        assert!(
            labels.contains(&"selection(k=k, weighted)".to_string()),
            "{labels:?}"
        );
        // counts(l, k, w) is the weights summed by label.
        assert!(
            labels.contains(&"label_sums(k=k)".to_string()),
            "{labels:?}"
        );
    }

    #[test]
    fn weighted_forms_report_bad_arguments_where_they_are() {
        // Too few or too many arguments: the whole call.
        let (line, col, msg, _) =
            error_of("fn f(l: Index[n]) -> (V: Csr[k, n]) {\n    V = selection(l);\n}");
        assert_eq!((line, col), (2, 9));
        assert_eq!(msg, "`selection` takes 2 or 3 argument(s), found 1");
        let (_, _, msg, _) =
            error_of("fn f(l: Index[n], w: Col[n]) -> (c: Col[k]) { c = counts(l, k, w, w); }");
        assert_eq!(msg, "`counts` takes 2 or 3 argument(s), found 4");
        // Weights of another length: the weights.
        let (line, col, msg, help) = error_of(
            "fn f(l: Index[n], w: Col[m]) -> (V: Csr[k, n]) {\n    V = selection(l, k, w);\n}",
        );
        assert_eq!((line, col), (2, 25), "{msg}");
        assert!(msg.contains("one weight per label"), "{msg}");
        assert!(help.contains("Col[n]"), "{help}");
        // Labels as weights: not dense.
        let (line, col, msg, _) =
            error_of("fn f(l: Index[n]) -> (V: Csr[k, n]) {\n    V = selection(l, k, l);\n}");
        assert_eq!((line, col), (2, 25), "{msg}");
        assert!(msg.contains("needs a dense"), "{msg}");
        // counts' weights: one per label too.
        let (line, col, msg, _) =
            error_of("fn f(l: Index[n], w: Row[n]) -> (c: Col[k]) {\n    c = counts(l, k, w);\n}");
        assert_eq!((line, col), (2, 22), "{msg}");
        assert!(msg.contains("the weights Row[n]"), "{msg}");
        assert!(msg.contains("counts's weights must be a column"), "{msg}");
    }
}
