//! Builtin operations: the operations the planner introduces and every backend implements
//! directly (a diagonal, cluster sizes, sums by label, ...). Each has one unit here holding
//! everything the rest of popcorn needs to know about it: its names, its type rule, its cost
//! and its meaning on reference values ([`OpFacts`]). The graph holds them as
//! [`crate::ir::Op::Builtin`] and plans as [`crate::plan::StepOp::Builtin`]; a backend
//! implements each with a kernel or a loop of its own.
//!
//! Adding a builtin: a unit implementing [`OpFacts`], a variant of [`Builtin`], the pattern
//! pass that introduces it, and its implementation in each backend.

mod cluster_sums;
mod counts;
mod densify;
mod diag;
mod label_sums;
mod monomials;
mod pad_cols;
mod permute_rows;
pub mod products;
mod selection;
mod sparse_row_norms;

pub use cluster_sums::ClusterSums;
pub use counts::Counts;
pub use densify::Densify;
pub use diag::Diag;
pub use label_sums::{LabelSums, LABEL_ROW_SUMS_MAX_COLS, LABEL_SUMS_VECTOR_MAX_WORK};
pub use monomials::Monomials;
pub use pad_cols::PadCols;
pub use permute_rows::PermuteRows;
pub use selection::{check_weights, Selection};
pub use sparse_row_norms::SparseRowNorms;

use crate::types::{Dim, DimBindings, Type, TypeError};
use crate::value::RefValue;
use serde::{Deserialize, Serialize};

/// The size of one operand or result, for cost estimates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Rows (the length of a vector).
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Stored entries of a CSR matrix, where known.
    pub nnz: Option<usize>,
}

impl Extent {
    /// Number of elements of a dense value.
    pub fn elems(&self) -> f64 {
        (self.rows * self.cols) as f64
    }
}

/// Estimated work of one step: floating-point operations and bytes moved in memory (each
/// operand read once, each result written once).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
}

/// What every builtin says about itself.
pub trait OpFacts {
    /// The operation in the graph, with its parameters: `counts(k=10)`.
    fn label(&self) -> String;
    /// The step's name in plans: `counts`, `cluster sums`.
    fn step_name(&self) -> &'static str;
    /// The parameters shown beside a step in plans (`k=10`), if any.
    fn details(&self) -> String;
    /// The result type for operands of types `operands`.
    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError>;
    /// The work of a step with these operands and results; `elem` is the plan's element size
    /// in bytes (index vectors are 4 bytes per entry).
    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost;
    /// The result on reference values, sizes from `dims`.
    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String>;
    /// Whether the result is only a scratch copy that speeds up its consumer, kept in a
    /// transient buffer rather than with the plan.
    fn scratch_result(&self) -> bool {
        false
    }
}

/// A builtin operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Builtin {
    /// `diag(M)`.
    Diag(Diag),
    /// `counts(labels, k)`.
    Counts(Counts),
    /// `selection(labels, k)` and `selection(labels, k, w)`.
    Selection(Selection),
    /// Sums of each row of a matrix by the label of the column.
    ClusterSums(ClusterSums),
    /// Sums of a vector's entries by label.
    LabelSums(LabelSums),
    /// A dense matrix with zero columns appended.
    PadCols(PadCols),
    /// Rows in the order of a selection matrix (cluster by cluster, then the points it does
    /// not list), or back.
    PermuteRows(PermuteRows),
    /// A CSR matrix (or its transpose) written out dense.
    Densify(Densify),
    /// `rownorms(S)` of a CSR matrix.
    SparseRowNorms(SparseRowNorms),
    /// `monomials(X, a, b, c)`: scaled products of two columns of `[X, 1]`.
    Monomials(Monomials),
}

/// Calls `$call` on the unit inside a [`Builtin`].
macro_rules! each_builtin {
    ($self:expr, $b:ident => $call:expr) => {
        match $self {
            Builtin::Diag($b) => $call,
            Builtin::Counts($b) => $call,
            Builtin::Selection($b) => $call,
            Builtin::ClusterSums($b) => $call,
            Builtin::LabelSums($b) => $call,
            Builtin::PadCols($b) => $call,
            Builtin::PermuteRows($b) => $call,
            Builtin::Densify($b) => $call,
            Builtin::SparseRowNorms($b) => $call,
            Builtin::Monomials($b) => $call,
        }
    };
}

impl OpFacts for Builtin {
    fn label(&self) -> String {
        each_builtin!(self, b => b.label())
    }
    fn step_name(&self) -> &'static str {
        each_builtin!(self, b => b.step_name())
    }
    fn details(&self) -> String {
        each_builtin!(self, b => b.details())
    }
    fn result_type(&self, operands: &[&Type]) -> Result<Type, TypeError> {
        each_builtin!(self, b => b.result_type(operands))
    }
    fn cost(&self, inputs: &[Extent], outputs: &[Extent], elem: f64) -> Cost {
        each_builtin!(self, b => b.cost(inputs, outputs, elem))
    }
    fn eval(&self, operands: &[&RefValue], dims: &DimBindings) -> Result<RefValue, String> {
        each_builtin!(self, b => b.eval(operands, dims))
    }
    fn scratch_result(&self) -> bool {
        each_builtin!(self, b => b.scratch_result())
    }
}

impl Builtin {
    /// The same operation with its dimensions at their sizes under `dims` (for plans); an
    /// unbound dimension is named in the error.
    pub fn resolved(&self, dims: &DimBindings) -> Result<Builtin, String> {
        let fix = |k: &Dim| {
            k.resolve(dims)
                .map(Dim::Fixed)
                .ok_or_else(|| format!("dimension `{k}` has no size"))
        };
        Ok(match self {
            Builtin::Counts(c) => Builtin::Counts(Counts { k: fix(&c.k)? }),
            Builtin::Selection(s) => Builtin::Selection(Selection {
                k: fix(&s.k)?,
                weighted: s.weighted,
            }),
            Builtin::ClusterSums(c) => Builtin::ClusterSums(ClusterSums { k: fix(&c.k)? }),
            Builtin::LabelSums(l) => Builtin::LabelSums(LabelSums { k: fix(&l.k)? }),
            other => other.clone(),
        })
    }
}

/// The number of clusters `k` under `dims`.
fn clusters(k: &Dim, dims: &DimBindings) -> Result<usize, String> {
    k.resolve(dims)
        .ok_or_else(|| format!("dimension `{k}` has no size; pass it in `dims`"))
}

/// Checks the operand count.
fn arity<T>(operands: &[T], n: usize, what: &str) -> Result<(), String> {
    if operands.len() == n {
        Ok(())
    } else {
        Err(format!(
            "{what} takes {n} operand(s), found {}",
            operands.len()
        ))
    }
}

/// [`arity`] as a type error.
fn type_arity(operands: &[&Type], n: usize, what: &str) -> Result<(), TypeError> {
    arity(operands, n, what).map_err(TypeError::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::RefValue;

    #[test]
    fn builtins_evaluate_from_their_definitions() {
        let dims: DimBindings = [("k".to_string(), 3)].into_iter().collect();
        let labels = RefValue::Index(vec![2, 0, 2, 2]);
        let k = Dim::Sym("k".into());
        let counts = Builtin::Counts(Counts { k: k.clone() });
        assert_eq!(
            counts.eval(&[&labels], &dims),
            Ok(RefValue::dense(3, 1, vec![1.0, 0.0, 3.0]))
        );
        let m = RefValue::dense(2, 4, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let sums = Builtin::ClusterSums(ClusterSums { k: k.clone() });
        assert_eq!(
            sums.eval(&[&m, &labels], &dims),
            Ok(RefValue::dense(2, 3, vec![2.0, 0.0, 8.0, 6.0, 0.0, 20.0]))
        );
        let x = RefValue::dense(4, 1, vec![1.0, 2.0, 3.0, 4.0]);
        let label_sums = Builtin::LabelSums(LabelSums { k: k.clone() });
        assert_eq!(
            label_sums.eval(&[&x, &labels], &dims),
            Ok(RefValue::dense(3, 1, vec![2.0, 0.0, 8.0]))
        );
        let sel = Builtin::Selection(Selection::plain(k));
        let v = crate::value::densify(&sel.eval(&[&labels], &dims).unwrap()).unwrap();
        assert_eq!(v.at(0, 1), 1.0);
        assert_eq!(v.at(2, 0), 1.0 / 3.0);
        assert!(v.data.iter().filter(|x| **x != 0.0).count() == 4);
        let square = RefValue::dense(2, 2, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            Builtin::Diag(Diag::default()).eval(&[&square], &dims),
            Ok(RefValue::dense(2, 1, vec![1.0, 4.0]))
        );
        let pad = Builtin::PadCols(PadCols { cols: 3 });
        assert_eq!(
            pad.eval(&[&square], &dims),
            Ok(RefValue::dense(2, 3, vec![1.0, 2.0, 0.0, 3.0, 4.0, 0.0]))
        );
        // Rows in cluster order: labels [2, 0, 2, 2] list points 1, then 0, 2, 3.
        let selection = sel.eval(&[&labels], &dims).unwrap();
        let rows = RefValue::dense(4, 2, vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
        let permute = Builtin::PermuteRows(PermuteRows { inverse: false });
        assert_eq!(
            permute.eval(&[&rows, &selection], &dims),
            Ok(RefValue::dense(
                4,
                2,
                vec![1.0, 1.5, 0.0, 0.5, 2.0, 2.5, 3.0, 3.5]
            ))
        );
        assert_eq!(
            permute.eval(&[&labels, &selection], &dims),
            Ok(RefValue::Index(vec![0, 2, 2, 2]))
        );
    }

    #[test]
    fn labels_beyond_k_are_errors() {
        let dims: DimBindings = [("k".to_string(), 2)].into_iter().collect();
        let labels = RefValue::Index(vec![0, 5]);
        let counts = Builtin::Counts(Counts {
            k: Dim::Sym("k".into()),
        });
        let err = counts.eval(&[&labels], &dims).unwrap_err();
        assert!(err.contains("label 5 at 1 is not below k = 2"), "{err}");
    }

    #[test]
    fn resolving_fixes_the_cluster_count() {
        let dims: DimBindings = [("k".to_string(), 7)].into_iter().collect();
        let c = Builtin::Counts(Counts {
            k: Dim::Sym("k".into()),
        });
        assert_eq!(
            c.resolved(&dims),
            Ok(Builtin::Counts(Counts { k: Dim::Fixed(7) }))
        );
        assert_eq!(
            c.resolved(&DimBindings::new()).unwrap_err(),
            "dimension `k` has no size"
        );
        assert_eq!(c.label(), "counts(k=k)");
        assert_eq!(c.step_name(), "counts");
    }
}
