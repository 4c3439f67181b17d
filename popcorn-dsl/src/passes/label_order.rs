//! Columns in cluster order: a contraction whose only reductions are sums by label
//! (`M * selection(l, k)^T`) gives the same sums whatever the order of its columns, so the
//! planner reorders them by label: the rows of `B` (the columns of `A * B^T`), the labels and
//! every column broadcast of the epilogue go through [`PermuteRows`] in the order of
//! `selection(l, k)`. A tile of columns then meets one or two clusters, and the kernel adds
//! each row's running sum to its bin once per cluster instead of once per element.
//!
//! Where the product is `X * X^T` and its epilogue symmetric in the row and the column (the
//! kernel matrices of Kernel K-means: `pow(g * X X^T + c, r)`, `exp(-g * (n + n^T - 2 X X^T))`),
//! the rows go in the same order too (`X`, the row broadcasts), the sums by label come back
//! to the points' order through the inverse permutation, and the contraction is marked
//! symmetric: its kernel may then compute one triangle of tiles and add each tile's mirror
//! image to its columns (see [`kernel_ir::Form::Contraction`]).

use crate::ir::{Graph, NodeId, Op};
use crate::ops::{Builtin, PermuteRows, Selection};
use crate::types::{Storage, Type};
use kernel_ir::BinaryOp;
use std::collections::{BTreeSet, HashMap};

/// The region of a contraction, as the contractions pass found it.
pub struct Region<'r> {
    /// The product node.
    pub product: NodeId,
    /// Its left operand `A` (its rows are the rows).
    pub a: NodeId,
    /// Its right operand `B` (read transposed: its rows are the columns).
    pub b: NodeId,
    /// Whether the product is `A * B^T` with neither operand otherwise transposed, as a
    /// symmetric product must be.
    pub gram: bool,
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

/// The operands of a contraction after [`sort_by_label`].
pub struct Sorted {
    /// The new left operand (the rows in cluster order), where they were sorted too.
    pub a: Option<NodeId>,
    /// The new right operand (the columns in cluster order).
    pub b: NodeId,
    /// Whether the contraction is symmetric (`A` and `B` the same matrix, the epilogue
    /// symmetric, the rows' labels those of the columns).
    pub symmetric: bool,
}

/// Reorders the region's columns by label where that leaves its results unchanged: every
/// reduction a sum by label over the same labels, no element stored, every column-indexed
/// operand a column broadcast `c^T` (or a map of such). A symmetric region (see the module's
/// documentation) has its rows reordered too. Returns the new operands, or `None` (nothing
/// changed) where the region does not qualify.
pub fn sort_by_label(g: &mut Graph, region: &Region<'_>) -> Option<Sorted> {
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
        Op::Builtin(Builtin::Selection(Selection::plain(k.clone()))),
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
    let symmetric = region.gram
        && region.a == region.b
        && region
            .reductions
            .iter()
            .all(|r| is_symmetric(g, region, &outside, g.operands(*r)[0]));
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
    let mut sorted_vectors: HashMap<NodeId, NodeId> = HashMap::new();
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
                            let sorted = *sorted_vectors.entry(c).or_insert_with(|| permute(g, c));
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
        if symmetric {
            // The rows in cluster order too: every row broadcast read in the new order.
            for slot in ops.iter_mut() {
                if is_row_vector(g, region, *slot) {
                    let v = *slot;
                    *slot = *sorted_vectors.entry(v).or_insert_with(|| permute(g, v));
                }
            }
        }
        g.set_operands(target, &ops);
    }
    let b = permute(g, region.b);
    if !symmetric {
        return Some(Sorted {
            a: None,
            b,
            symmetric: false,
        });
    }
    // The sums come out in the rows' (cluster) order: back to the points' order.
    for &r in region.reductions {
        let ty = g.node(r).ty.clone();
        let back = g.add(
            Op::Builtin(Builtin::PermuteRows(PermuteRows { inverse: true })),
            ty,
            &[r, order],
        );
        g.replace_uses(r, back);
        g.set_operands(back, &[r, order]);
        g.node_mut(back).name = g.node_mut(r).name.take();
    }
    Some(Sorted {
        a: Some(b),
        b,
        symmetric: true,
    })
}

/// Whether `o`, an operand of a region map, is a vector indexed by the row (a row broadcast).
fn is_row_vector(g: &Graph, region: &Region<'_>, o: NodeId) -> bool {
    if o == region.product || region.maps.contains(&o) {
        return false;
    }
    let space = &g.node(region.product).ty.shape;
    let ty = &g.node(o).ty;
    ty.storage == Storage::Dense
        && ty.shape.cols.is_one()
        && ty.shape.rows == space.rows
        && !ty.shape.rows.is_one()
}

/// Whether the value of region node `n` is the same at `(i, j)` and `(j, i)`: its expression
/// with every row broadcast `v` and column broadcast `v^T` swapped is the same expression, up
/// to the order of the operands of commutative operations (exact in floating point).
fn is_symmetric(g: &Graph, region: &Region<'_>, outside: &BTreeSet<NodeId>, n: NodeId) -> bool {
    match (
        term(g, region, outside, n, false),
        term(g, region, outside, n, true),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A canonical text of the expression of `n` over the region and the element-wise nodes
/// `outside` it that its maps read (`swap`: rows and columns exchanged); `None` for what the
/// check does not know (it then says "not symmetric").
fn term(
    g: &Graph,
    region: &Region<'_>,
    outside: &BTreeSet<NodeId>,
    n: NodeId,
    swap: bool,
) -> Option<String> {
    if n == region.product {
        return Some("P".into());
    }
    let node = g.node(n);
    if !region.maps.contains(&n) && !outside.contains(&n) {
        // A leaf: a scalar (the same everywhere), a row broadcast or a column broadcast.
        let ty = &node.ty;
        if ty.storage == Storage::Scalar || (ty.shape.rows.is_one() && ty.shape.cols.is_one()) {
            return Some(format!("s{}", n.index()));
        }
        let (row, col) = if swap { ("c", "r") } else { ("r", "c") };
        if is_row_vector(g, region, n) {
            return Some(format!("{row}{}", n.index()));
        }
        if let (Op::Transpose, Some(v)) = (&node.op, g.operands(n).first()) {
            if g.node(*v).ty.shape.cols.is_one() {
                return Some(format!("{col}{}", v.index()));
            }
        }
        return None;
    }
    let operands = g
        .operands(n)
        .into_iter()
        .map(|o| term(g, region, outside, o, swap))
        .collect::<Option<Vec<String>>>()?;
    Some(match &node.op {
        Op::Binary(op) => {
            let mut ops = operands;
            if matches!(
                op,
                BinaryOp::Add
                    | BinaryOp::Mul
                    | BinaryOp::Max
                    | BinaryOp::Min
                    | BinaryOp::Eq
                    | BinaryOp::Ne
            ) {
                ops.sort();
            }
            format!("{op:?}({})", ops.join(","))
        }
        Op::Unary(op) => format!("{op:?}({})", operands.join(",")),
        Op::Select => format!("select({})", operands.join(",")),
        _ => return None,
    })
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
