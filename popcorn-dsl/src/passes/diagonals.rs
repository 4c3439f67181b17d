//! Diagonals of a contraction's region, derived without the product: `diag(f(alpha * A *
//! B^T, ...))` is `f(alpha * sum_rows(A .* B), ...)` with every row broadcast kept, every
//! column broadcast transposed and every scalar unchanged. The contractions pass uses it so that
//! a `diag` (Kernel K-means' `diag(K)`) does not force the product to be stored: the diagonal
//! costs `n * d` flops where the product costs `n * n * d`.

use crate::ir::{Graph, NodeId, Op, Reduce};
use crate::ops::{Builtin, Diag};
use crate::scalar::ScalarExpr;
use crate::types::{Dim, Storage, Type};
use kernel_ir::BinaryOp;
use std::collections::{BTreeSet, HashMap};

/// The product of a region, in the one form whose diagonal is a row reduction: `alpha * A *
/// B^T` of row-major operands.
pub struct GramProduct {
    /// The product node.
    pub node: NodeId,
    /// `A`.
    pub a: NodeId,
    /// `B`.
    pub b: NodeId,
    /// The scale factor.
    pub alpha: ScalarExpr,
}

/// Builds the diagonal of region nodes (the product and the maps over its space) as new nodes.
pub struct Diagonals<'r> {
    product: GramProduct,
    maps: &'r BTreeSet<NodeId>,
    rows: Dim,
    memo: HashMap<NodeId, NodeId>,
}

impl<'r> Diagonals<'r> {
    /// A builder for the region of `product` whose maps are `maps`; `rows` is the product's
    /// (square) dimension.
    pub fn new(product: GramProduct, maps: &'r BTreeSet<NodeId>, rows: Dim) -> Diagonals<'r> {
        Diagonals {
            product,
            maps,
            rows,
            memo: HashMap::new(),
        }
    }

    /// Replaces every use of the `diag` node `diag` (whose operand is a region node) by the
    /// derived diagonal; the new node takes over its name.
    pub fn replace(&mut self, g: &mut Graph, diag: NodeId) {
        let Some(&source) = g.operands(diag).first() else {
            return;
        };
        let value = self.of(g, source);
        g.replace_uses(diag, value);
        if g.node(value).name.is_none() {
            g.node_mut(value).name = g.node_mut(diag).name.take();
        }
        // Nothing uses it any more; it must not count as a reader of the region either.
        g.g.remove_node(diag);
    }

    /// The diagonal of `n` (the product, or a map over its space), as a column.
    fn of(&mut self, g: &mut Graph, n: NodeId) -> NodeId {
        if let Some(&d) = self.memo.get(&n) {
            return d;
        }
        let col = Type::col(self.rows.clone());
        let d = if n == self.product.node {
            let (a, b) = (self.product.a, self.product.b);
            let terms = g.add(Op::Binary(BinaryOp::Mul), g.node(a).ty.clone(), &[a, b]);
            let sums = g.add(Op::RowReduce(Reduce::Sum), col.clone(), &[terms]);
            if self.product.alpha.as_lit() == Some(1.0) {
                sums
            } else {
                let alpha = g.add(Op::Scalar(self.product.alpha.clone()), Type::scalar(), &[]);
                g.add(Op::Binary(BinaryOp::Mul), col, &[alpha, sums])
            }
        } else {
            let operands: Vec<NodeId> = g
                .operands(n)
                .into_iter()
                .map(|o| self.operand(g, o))
                .collect();
            let op = g.node(n).op.clone();
            g.add(op, col, &operands)
        };
        self.memo.insert(n, d);
        d
    }

    /// The value an operand of a map takes on the diagonal, as a column or a scalar.
    fn operand(&mut self, g: &mut Graph, o: NodeId) -> NodeId {
        if o == self.product.node || self.maps.contains(&o) {
            return self.of(g, o);
        }
        let ty = g.node(o).ty.clone();
        if ty.storage == Storage::Scalar || (ty.shape.rows.is_one() && ty.shape.cols.is_one()) {
            return o;
        }
        let col = Type::col(self.rows.clone());
        if ty.shape.cols.is_one() {
            // A row broadcast: entry i is the value of row i, on the diagonal too.
            return o;
        }
        if ty.shape.rows.is_one() {
            // A column broadcast `v^T`: entry (i, i) is v[i].
            if let Op::Transpose = g.node(o).op {
                let inner = g.operands(o)[0];
                if g.node(inner).ty.shape.cols.is_one() {
                    return inner;
                }
            }
            return g.add(Op::Transpose, col, &[o]);
        }
        if g.node(o).op.is_elementwise() {
            // A map over the same space outside the region (of broadcasts, as `b + b^T`):
            // its diagonal from its operands' too.
            return self.of(g, o);
        }
        // A full matrix over the same space, computed elsewhere: its own diagonal.
        g.add(Op::Builtin(Builtin::Diag(Diag::default())), col, &[o])
    }
}
