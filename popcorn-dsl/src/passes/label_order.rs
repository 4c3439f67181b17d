//! Columns in cluster order: a contraction whose only reductions are sums by label
//! (`M * selection(l, k)^T`) gives the same sums whatever the order of its columns, so the
//! planner reorders them by label: the rows of `B` (the columns of `A * B^T`), the labels and
//! every column broadcast of the epilogue go through [`PermuteRows`] in the order of
//! `selection(l, k)`. A tile of columns then meets one or two clusters, and the kernel adds
//! each row's running sum to its bin once per cluster instead of once per element.

use crate::ir::{Graph, NodeId, Op};
use crate::ops::{Builtin, PermuteRows, Selection};
use crate::types::{Storage, Type};
use std::collections::{BTreeSet, HashMap};

/// The region of a contraction, as the contractions pass found it.
pub struct Region<'r> {
    /// The product node.
    pub product: NodeId,
    /// Its right operand `B` (read transposed: its rows are the columns).
    pub b: NodeId,
    /// Element-wise nodes over the product's space computed in the kernel.
    pub maps: &'r BTreeSet<NodeId>,
    /// The reductions reading the region.
    pub reductions: &'r [NodeId],
}

/// How each operand of the region's maps reads the columns.
enum Column {
    /// The same for every column (a scalar, a row broadcast, a region node).
    Same,
    /// A column broadcast `c^T` of the column vector `c`: permuted.
    Broadcast(NodeId),
    /// An element-wise node over the same space outside the region (`b + b^T`): rebuilt over
    /// permuted operands.
    Map(NodeId),
}

/// Reorders the region's columns by label where that leaves its results unchanged: every
/// reduction a sum by label over the same labels, no element stored, every column-indexed
/// operand a column broadcast `c^T` (or a map of such). Returns the new right operand, or
/// `None` (nothing changed) where the region does not qualify.
pub fn sort_columns_by_label(g: &mut Graph, region: &Region<'_>) -> Option<NodeId> {
    let (labels, k) = common_labels(g, region.reductions)?;
    let mut plan: Vec<(NodeId, Vec<Column>)> = Vec::new();
    let mut outside: BTreeSet<NodeId> = BTreeSet::new();
    let mut stack: Vec<NodeId> = region.maps.iter().copied().collect();
    while let Some(m) = stack.pop() {
        let columns = g
            .operands(m)
            .into_iter()
            .map(|o| classify(g, region, o))
            .collect::<Option<Vec<Column>>>()?;
        for c in &columns {
            if let Column::Map(o) = c {
                if outside.insert(*o) {
                    stack.push(*o);
                }
            }
        }
        plan.push((m, columns));
    }
    // Nothing of the region may be needed outside it (an output, a user that is neither a map
    // nor a reduction): those would see the columns in the new order.
    for &m in region.maps {
        if g.is_output(m)
            || g.users(m)
                .iter()
                .any(|u| !region.maps.contains(u) && !region.reductions.contains(u))
        {
            return None;
        }
    }

    let n = g.node(region.b).ty.shape.rows.clone();
    let order = g.add(
        Op::Builtin(Builtin::Selection(Selection { k: k.clone() })),
        Type::csr(k, n),
        &[labels],
    );
    let permute = |g: &mut Graph, x: NodeId| {
        let ty = g.node(x).ty.clone();
        g.add(
            Op::Builtin(Builtin::PermuteRows(PermuteRows { inverse: false })),
            ty,
            &[x, order],
        )
    };
    let sorted_labels = permute(g, labels);
    for &r in region.reductions {
        let mut ops = g.operands(r);
        ops[1] = sorted_labels;
        g.set_operands(r, &ops);
    }
    // Maps outside the region are copied (their other users keep the original order).
    let mut copies: HashMap<NodeId, NodeId> = HashMap::new();
    for &o in &outside {
        let node = g.node(o).clone();
        let copy = g.add(node.op, node.ty, &g.operands(o));
        copies.insert(o, copy);
    }
    let mut broadcasts: HashMap<NodeId, NodeId> = HashMap::new();
    for (m, columns) in plan {
        let target = copies.get(&m).copied().unwrap_or(m);
        let mut ops = g.operands(target);
        for (slot, column) in ops.iter_mut().zip(columns) {
            match column {
                Column::Same => {}
                Column::Map(o) => *slot = copies[&o],
                Column::Broadcast(c) => {
                    let t = match broadcasts.get(&c) {
                        Some(t) => *t,
                        None => {
                            let sorted = permute(g, c);
                            let ty = g.node(*slot).ty.clone();
                            let t = g.add(Op::Transpose, ty, &[sorted]);
                            broadcasts.insert(c, t);
                            t
                        }
                    };
                    *slot = t;
                }
            }
        }
        g.set_operands(target, &ops);
    }
    Some(permute(g, region.b))
}

/// The labels and clusters shared by every reduction, all sums by label.
fn common_labels(g: &Graph, reductions: &[NodeId]) -> Option<(NodeId, crate::types::Dim)> {
    let mut common = None;
    for &r in reductions {
        let Op::Builtin(Builtin::ClusterSums(c)) = &g.node(r).op else {
            return None;
        };
        let labels = *g.operands(r).get(1)?;
        match &common {
            None => common = Some((labels, c.k.clone())),
            Some((l, k)) if *l == labels && *k == c.k => {}
            Some(_) => return None,
        }
    }
    common
}

/// How operand `o` of a map reads the columns; `None` where it cannot be reordered.
fn classify(g: &Graph, region: &Region<'_>, o: NodeId) -> Option<Column> {
    if o == region.product || region.maps.contains(&o) {
        return Some(Column::Same);
    }
    let space = &g.node(region.product).ty.shape;
    let ty = &g.node(o).ty;
    if ty.storage == Storage::Scalar || (ty.shape.rows.is_one() && ty.shape.cols.is_one()) {
        return Some(Column::Same);
    }
    if ty.shape.cols.is_one() && ty.shape.rows == space.rows {
        return Some(Column::Same);
    }
    if ty.shape.rows.is_one() && ty.shape.cols == space.cols {
        if let Op::Transpose = g.node(o).op {
            let c = g.operands(o)[0];
            if g.node(c).ty.storage == Storage::Dense && g.node(c).ty.shape.cols.is_one() {
                return Some(Column::Broadcast(c));
            }
        }
        return None;
    }
    if ty.shape == *space && g.node(o).op.is_elementwise() {
        return Some(Column::Map(o));
    }
    None
}
