//! Fusion: groups element-wise maps, broadcasts, transposed reads and reductions that share an
//! iteration space into one generated kernel each.
//!
//! A producer joins its consumer's group when both iterate over the same `rows x cols` space,
//! the merged group would not need its own result before it is computed (no cycle through a
//! node outside it), row and column reductions do not mix, and no transpose reads a value of
//! its own group. Inside a group, a node is *stored* (materialised) when it is an output of the
//! program or something outside the group uses it; everything else is recomputed in registers.
//! Groups of the program's last reductions (nothing else reads them) over the same space then
//! join into one kernel: an iteration's objective and its count of changed labels are one launch.
//! The result is a [`Fusion`]: groups of nodes, each turned into a [`KernelSpec`] by
//! [`Fusion::spec`].

use super::{PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op, Reduce};
use crate::ops::Builtin;
use crate::scalar::ScalarExpr;
use crate::types::Storage;
use kernel_ir::{Access, Expr, Form, Input, KernelSpec, ReduceKind, Reduction};
use std::collections::{BTreeSet, HashMap};

/// How the fusion pass sees a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// An element-wise map.
    Elementwise,
    /// A transposed read of a dense value.
    Transpose,
    /// A row reduction or a gather (one result per row).
    RowReduce,
    /// A column reduction (one result per column).
    ColReduce,
    /// A product computed in its consumers' kernel ([`Op::Contraction`]): the core of a
    /// contraction group.
    Contraction,
    /// A reduction only a contraction group computes: a product with a vector (`M * y`, a
    /// GEMV) or sums by label (cluster sums). Outside such a group it is an ordinary step.
    ContractionReduce,
    /// A host scalar (an argument of kernels).
    Scalar,
    /// A transposed vector read by fused consumers only: no step of its own, its consumers
    /// read the vector with the other orientation.
    View,
    /// Anything else: an input, a library call, a builtin.
    Opaque,
}

/// The class of node `n`.
pub fn classify(g: &Graph, n: NodeId) -> Class {
    let node = g.node(n);
    match &node.op {
        Op::Scalar(_) => Class::Scalar,
        _ if node.ty.storage != Storage::Dense && node.ty.storage != Storage::Index => {
            Class::Opaque
        }
        op if op.is_elementwise() => Class::Elementwise,
        Op::Contraction(_) => Class::Contraction,
        Op::Library(LibOp::Gemv { trans: false, .. }) | Op::Builtin(Builtin::ClusterSums(_)) => {
            Class::ContractionReduce
        }
        Op::Transpose if is_view(g, n) => Class::View,
        Op::Transpose => Class::Transpose,
        Op::RowReduce(_) | Op::Gather => Class::RowReduce,
        Op::ColReduce(_) => Class::ColReduce,
        _ => Class::Opaque,
    }
}

/// Whether transpose `n` is of a vector and only fused consumers read it.
fn is_view(g: &Graph, n: NodeId) -> bool {
    let t = &g.node(g.operands(n)[0]).ty;
    let vector = t.shape.rows.is_one() || t.shape.cols.is_one();
    vector
        && !g.is_output(n)
        && g.users(n).iter().all(|u| {
            let node = g.node(*u);
            node.op.is_elementwise() || matches!(node.op, Op::RowReduce(_) | Op::ColReduce(_))
        })
}

/// The fused groups of a graph.
#[derive(Clone, Debug, Default)]
pub struct Fusion {
    /// Each group's nodes, in topological order.
    pub groups: Vec<Vec<NodeId>>,
    /// The group of each fused node.
    pub group_of: HashMap<NodeId, usize>,
}

/// The iteration space of a fusible node: its own shape for maps and transposes, its operand's
/// for reductions.
fn space(g: &Graph, n: NodeId, cx: &PassContext<'_>) -> Option<(usize, usize)> {
    let shape_of = |m: NodeId| g.node(m).ty.shape.resolve(cx.dims);
    match classify(g, n) {
        Class::RowReduce | Class::ColReduce | Class::ContractionReduce => {
            shape_of(g.operands(n)[0])
        }
        _ => shape_of(n),
    }
}

struct UnionFind {
    parent: HashMap<NodeId, NodeId>,
}

impl UnionFind {
    fn find(&mut self, n: NodeId) -> NodeId {
        let p = *self.parent.get(&n).unwrap_or(&n);
        if p == n {
            return n;
        }
        let r = self.find(p);
        self.parent.insert(n, r);
        r
    }
}

/// Builds the fusion groups. With fusion disabled every fusible node is its own group.
pub fn fuse(g: &Graph, cx: &PassContext<'_>) -> Result<Fusion, PlanError> {
    let order = g.topo_order();
    let fusible: Vec<NodeId> = order
        .iter()
        .copied()
        .filter(|n| !matches!(classify(g, *n), Class::Scalar | Class::Opaque | Class::View))
        .collect();
    let mut uf = UnionFind {
        parent: HashMap::new(),
    };
    let mut members: HashMap<NodeId, BTreeSet<NodeId>> =
        fusible.iter().map(|n| (*n, BTreeSet::from([*n]))).collect();
    let log = crate::log::enabled("fusion");
    if cx.config.fusion {
        for &c in &fusible {
            let cclass = classify(g, c);
            if matches!(cclass, Class::Transpose | Class::Contraction) {
                // A transpose reads its operand from memory, and so does a product (tile by
                // tile): neither takes in its producers, whatever their iteration space.
                continue;
            }
            for (pos, p) in g.operands(c).into_iter().enumerate() {
                let pclass = classify(g, p);
                if !matches!(
                    pclass,
                    Class::Elementwise | Class::Transpose | Class::Contraction
                ) {
                    continue;
                }
                if matches!(
                    cclass,
                    Class::RowReduce | Class::ColReduce | Class::ContractionReduce
                ) && pos != 0
                {
                    continue;
                }
                let (rp, rc) = (uf.find(p), uf.find(c));
                if rp == rc {
                    continue;
                }
                if space(g, p, cx) != space(g, c, cx) {
                    if log {
                        eprintln!(
                            "[popcorn fusion] {} stays apart from {}: different iteration spaces",
                            g.describe(p),
                            g.describe(c)
                        );
                    }
                    continue;
                }
                let merged: BTreeSet<NodeId> = members[&rp].union(&members[&rc]).copied().collect();
                // The other groups as they stand: a path through any member of a group leaves
                // through all of them (the group runs as one step).
                let others: Vec<&BTreeSet<NodeId>> = members
                    .iter()
                    .filter(|(r, _)| **r != rp && **r != rc)
                    .map(|(_, m)| m)
                    .collect();
                if let Err(why) = can_form_group(g, &merged, &others) {
                    if log {
                        eprintln!(
                            "[popcorn fusion] {} stays apart from {}: {why}",
                            g.describe(p),
                            g.describe(c)
                        );
                    }
                    continue;
                }
                if log {
                    eprintln!(
                        "[popcorn fusion] {} fuses into {}",
                        g.describe(p),
                        g.describe(c)
                    );
                }
                uf.parent.insert(rp, rc);
                members.remove(&rp);
                members.insert(rc, merged);
            }
        }
    }
    // A plan partitioned over ranks keeps them apart: there a sum of indicators (the changed
    // labels) is a rank's own count added over the ranks, while a sum joined to it would
    // gather its operands to every rank.
    if cx.config.fusion && cx.config.partition.is_none() {
        merge_last_reductions(g, cx, &order, &mut members, log);
    }
    // Column reductions cannot store element-wise values: split them off such groups.
    // Products with a vector and sums by label left outside a contraction are ordinary steps.
    let mut groups: Vec<BTreeSet<NodeId>> = Vec::new();
    for (_, set) in members {
        if set.len() == 1
            && set
                .iter()
                .all(|n| classify(g, *n) == Class::ContractionReduce)
        {
            continue;
        }
        let has_col = set.iter().any(|n| classify(g, *n) == Class::ColReduce);
        let stores = set
            .iter()
            .any(|n| classify(g, *n) != Class::ColReduce && is_stored(g, *n, &set));
        if has_col && stores && set.len() > 1 {
            let (cols, rest): (BTreeSet<NodeId>, BTreeSet<NodeId>) = set
                .into_iter()
                .partition(|n| classify(g, *n) == Class::ColReduce);
            if log {
                eprintln!(
                    "[popcorn fusion] column reductions split from a group that stores values"
                );
            }
            groups.push(rest);
            groups.extend(cols.into_iter().map(|c| BTreeSet::from([c])));
        } else {
            groups.push(set);
        }
    }
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut groups: Vec<Vec<NodeId>> = groups
        .into_iter()
        .map(|s| {
            let mut v: Vec<NodeId> = s.into_iter().collect();
            v.sort_by_key(|n| pos[n]);
            v
        })
        .collect();
    groups.sort_by_key(|v| pos[&v[0]]);
    let group_of = groups
        .iter()
        .enumerate()
        .flat_map(|(i, v)| v.iter().map(move |n| (*n, i)))
        .collect();
    Ok(Fusion { groups, group_of })
}

/// Whether `set` is a group of the program's last reductions: maps and reductions of one
/// orientation whose results nothing outside the group reads (only the program's outputs are
/// stored, and those are reductions), so that running it later costs no other step its start.
fn is_last_reduction_group(g: &Graph, set: &BTreeSet<NodeId>) -> bool {
    let mut reductions = 0;
    for &n in set {
        let read_outside = g.users(n).iter().any(|u| !set.contains(u));
        match classify(g, n) {
            Class::RowReduce | Class::ColReduce if !read_outside => reductions += 1,
            // Stored: an output, or read outside the group.
            Class::Elementwise if !is_stored(g, n, set) => {}
            _ => return false,
        }
    }
    reductions > 0
}

/// Joins groups of the program's last reductions that share an iteration space into one kernel
/// (an iteration's objective and its count of changed labels, both column sums over the
/// points): one launch instead of several on the path every iteration waits for. Only groups
/// that nothing else reads join, so no step waits for their results; the joined kernel waits
/// for the later of their inputs, and the scheduler may queue it ahead of a step that used to
/// run between them (the order on the stream, never a result, changes).
fn merge_last_reductions(
    g: &Graph,
    cx: &PassContext<'_>,
    order: &[NodeId],
    members: &mut HashMap<NodeId, BTreeSet<NodeId>>,
    log: bool,
) {
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let first = |set: &BTreeSet<NodeId>| set.iter().map(|n| pos[n]).min().unwrap_or(usize::MAX);
    loop {
        // The candidates in program order, so that the result does not depend on hashing.
        let mut roots: Vec<NodeId> = members
            .iter()
            .filter(|(_, set)| is_last_reduction_group(g, set))
            .map(|(r, _)| *r)
            .collect();
        roots.sort_by_key(|r| first(&members[r]));
        let mut pair = None;
        'search: for (i, a) in roots.iter().enumerate() {
            let space_a = members[a].iter().next().and_then(|n| space(g, *n, cx));
            for b in &roots[i + 1..] {
                let space_b = members[b].iter().next().and_then(|n| space(g, *n, cx));
                if space_a.is_none() || space_a != space_b {
                    continue;
                }
                let merged: BTreeSet<NodeId> = members[a].union(&members[b]).copied().collect();
                let others: Vec<&BTreeSet<NodeId>> = members
                    .iter()
                    .filter(|(r, _)| *r != a && *r != b)
                    .map(|(_, m)| m)
                    .collect();
                match can_form_group(g, &merged, &others) {
                    Ok(()) => {
                        pair = Some((*a, *b, merged));
                        break 'search;
                    }
                    Err(why) if log => eprintln!(
                        "[popcorn fusion] last reductions {} and {} stay apart: {why}",
                        g.describe(*a),
                        g.describe(*b),
                    ),
                    Err(_) => {}
                }
            }
        }
        let Some((a, b, merged)) = pair else {
            return;
        };
        if log {
            eprintln!(
                "[popcorn fusion] last reductions {} and {} share a kernel",
                g.describe(a),
                g.describe(b)
            );
        }
        members.remove(&b);
        members.insert(a, merged);
    }
}

/// Whether `n` must be written to memory: an output, a reduction, or used outside `group`.
pub fn is_stored(g: &Graph, n: NodeId, group: &BTreeSet<NodeId>) -> bool {
    g.is_output(n)
        || matches!(
            classify(g, n),
            Class::RowReduce | Class::ColReduce | Class::ContractionReduce
        )
        || g.users(n).iter().any(|u| !group.contains(u))
}

/// Checks that a set of nodes can be one kernel, given the other groups formed so far.
fn can_form_group(
    g: &Graph,
    set: &BTreeSet<NodeId>,
    others: &[&BTreeSet<NodeId>],
) -> Result<(), &'static str> {
    let rows = set.iter().any(|n| classify(g, *n) == Class::RowReduce);
    let cols = set.iter().any(|n| classify(g, *n) == Class::ColReduce);
    if rows && cols {
        return Err("row and column reductions cannot share a kernel");
    }
    let products = set
        .iter()
        .filter(|n| classify(g, **n) == Class::Contraction)
        .count();
    if products > 1 {
        return Err("a kernel computes one product");
    }
    if products == 1 && cols {
        return Err("a contraction reduces along its rows only");
    }
    let special = set
        .iter()
        .any(|n| classify(g, *n) == Class::ContractionReduce);
    if special && products == 0 {
        return Err("products with a vector and sums by label fuse only with a product");
    }
    for n in set {
        if classify(g, *n) == Class::Transpose && set.contains(&g.operands(*n)[0]) {
            return Err("a transpose must read its operand from memory");
        }
        // A reduction is complete only at the end of the kernel: nothing in the same kernel
        // can read it (not a map, not a gather's index).
        for o in g.operands(*n) {
            if set.contains(&o) && matches!(classify(g, o), Class::RowReduce | Class::ColReduce) {
                return Err("it would read a reduction computed by the same kernel");
            }
            // Through a view too: `r = x^T` read where `x` is a reduction of this group.
            if classify(g, o) == Class::View {
                let x = g.operands(o)[0];
                if set.contains(&x) && matches!(classify(g, x), Class::RowReduce | Class::ColReduce)
                {
                    return Err("it would read a reduction computed by the same kernel");
                }
            }
        }
    }
    // A path leaving the group and coming back would need the group's result before it exists.
    let mut stack: Vec<NodeId> = Vec::new();
    let mut seen: BTreeSet<NodeId> = BTreeSet::new();
    for n in set {
        for u in g.users(*n) {
            if !set.contains(&u) {
                stack.push(u);
            }
        }
    }
    while let Some(m) = stack.pop() {
        if !seen.insert(m) {
            continue;
        }
        // A node of another group stands for that whole group: the step runs after all of
        // its inputs, so every member's users depend on it.
        let group = others.iter().find(|o| o.contains(&m));
        let from: Vec<NodeId> = match group {
            Some(o) => o.iter().copied().collect(),
            None => vec![m],
        };
        for x in from {
            seen.insert(x);
            for u in g.users(x) {
                if set.contains(&u) {
                    return Err("it would depend on its own result through another step");
                }
                stack.push(u);
            }
        }
    }
    Ok(())
}

/// The kernel inputs a group reads: the node read and how.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupInput {
    /// The value read (a node outside the group, or a host scalar).
    pub node: NodeId,
    /// How it is read.
    pub access: Access,
}

/// A group turned into a kernel description.
#[derive(Clone, Debug)]
pub struct GroupKernel {
    /// The kernel.
    pub spec: KernelSpec,
    /// What each kernel input reads, in `spec.inputs` order.
    pub inputs: Vec<GroupInput>,
    /// The nodes each kernel output holds, in `spec.outputs()` order.
    pub outputs: Vec<NodeId>,
    /// Iteration space.
    pub rows: usize,
    /// Iteration space.
    pub cols: usize,
    /// The inner dimension of a contraction's product (0 for other kernels).
    pub depth: usize,
    /// The clusters of a contraction's by-label reductions (0 without one).
    pub width: usize,
}

impl Fusion {
    /// Builds the kernel of group `gi`; `names` gives each node's display name.
    pub fn spec(
        &self,
        gi: usize,
        g: &Graph,
        cx: &PassContext<'_>,
        names: &dyn Fn(NodeId) -> String,
    ) -> Result<GroupKernel, PlanError> {
        let members = &self.groups[gi];
        let set: BTreeSet<NodeId> = members.iter().copied().collect();
        let (rows, cols) = space(g, members[0], cx).ok_or_else(|| PlanError::Internal {
            pass: "fuse",
            message: "unbound iteration space".into(),
        })?;
        let mut b = SpecBuilder {
            g,
            cx,
            set: &set,
            rows,
            cols,
            inputs: Vec::new(),
            names,
            product: None,
        };
        let mut stores = Vec::new();
        let mut reductions = Vec::new();
        let mut outputs = Vec::new();
        let mut reduction_nodes = Vec::new();
        let mut col_form = false;
        let mut width = 0;
        for &n in members {
            match classify(g, n) {
                Class::Elementwise | Class::Transpose | Class::Contraction
                    if is_stored(g, n, &set) =>
                {
                    stores.push(b.expr(n)?);
                    outputs.push(n);
                }
                Class::ContractionReduce => {
                    let ops = g.operands(n);
                    let expr = b.expr(ops[0])?;
                    let kind = match &g.node(n).op {
                        Op::Library(LibOp::Gemv { alpha, .. }) if alpha.as_lit() == Some(1.0) => {
                            ReduceKind::Dot {
                                weights: b.input(ops[1], Access::Row),
                            }
                        }
                        Op::Builtin(Builtin::ClusterSums(c)) => {
                            width = width.max(c.k.resolve(cx.dims).unwrap_or(0));
                            ReduceKind::ByLabel {
                                labels: b.input(ops[1], Access::IndexRow),
                            }
                        }
                        other => {
                            return Err(PlanError::Internal {
                                pass: "fuse",
                                message: format!(
                                    "{} cannot reduce a contraction (a scaled product with a vector is rewritten first)",
                                    other.label()
                                ),
                            })
                        }
                    };
                    reductions.push(Reduction { kind, expr });
                    reduction_nodes.push(n);
                }
                Class::RowReduce | Class::ColReduce => {
                    col_form |= classify(g, n) == Class::ColReduce;
                    let ops = g.operands(n);
                    let expr = b.expr(ops[0])?;
                    let kind = match &g.node(n).op {
                        Op::RowReduce(r) | Op::ColReduce(r) => match r {
                            Reduce::Sum => ReduceKind::Sum,
                            Reduce::Min => ReduceKind::Min,
                            Reduce::Max => ReduceKind::Max,
                            Reduce::ArgMin => ReduceKind::ArgMin,
                        },
                        Op::Gather => ReduceKind::Pick {
                            index_input: b.input(ops[1], Access::IndexCol),
                        },
                        other => {
                            return Err(PlanError::Internal {
                                pass: "fuse",
                                message: format!("{} classified as a reduction", other.label()),
                            })
                        }
                    };
                    reductions.push(Reduction { kind, expr });
                    reduction_nodes.push(n);
                }
                _ => {}
            }
        }
        outputs.extend(reduction_nodes);
        let mut depth = 0;
        let form = if let Some(p) = b.product {
            depth = p.depth;
            Form::Contraction {
                a: p.a,
                b: p.b,
                precision: cx.config.contraction_precision(),
                symmetric: p.symmetric && stores.is_empty(),
                stores,
                reductions,
            }
        } else if reductions.is_empty() {
            Form::Map { outputs: stores }
        } else if col_form {
            Form::Cols { reductions }
        } else {
            Form::Rows { stores, reductions }
        };
        let provenance = members.iter().map(|n| g.describe(*n)).collect();
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: cx.config.dtype.scalar_type(),
            inputs: b.inputs.iter().map(|(i, _)| i.clone()).collect(),
            form,
            provenance,
        };
        let inputs = b.inputs.into_iter().map(|(_, gi)| gi).collect();
        Ok(GroupKernel {
            spec,
            inputs,
            outputs,
            rows,
            cols,
            depth,
            width,
        })
    }
}

/// The product of a contraction group: its operands' kernel inputs and inner dimension.
#[derive(Clone, Copy, Debug)]
struct ProductInputs {
    a: usize,
    b: usize,
    depth: usize,
    symmetric: bool,
}

struct SpecBuilder<'a> {
    g: &'a Graph,
    cx: &'a PassContext<'a>,
    set: &'a BTreeSet<NodeId>,
    rows: usize,
    cols: usize,
    inputs: Vec<(Input, GroupInput)>,
    names: &'a dyn Fn(NodeId) -> String,
    /// The group's product, once read.
    product: Option<ProductInputs>,
}

/// A C identifier from a value name.
fn c_ident(name: &str, index: usize) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("v{index}_{}", clean.trim_matches('_'))
}

impl SpecBuilder<'_> {
    /// The index of the kernel input reading `node` with `access`, added if new.
    fn input(&mut self, node: NodeId, access: Access) -> usize {
        if let Some(i) = self
            .inputs
            .iter()
            .position(|(_, gi)| gi.node == node && gi.access == access)
        {
            return i;
        }
        let i = self.inputs.len();
        let name = c_ident(&(self.names)(node), i);
        self.inputs
            .push((Input { name, access }, GroupInput { node, access }));
        i
    }

    /// How a value of shape `(r, c)`, possibly read transposed, is read over the space.
    fn access_for(&self, node: NodeId, transposed: bool) -> Result<Access, PlanError> {
        let (r, c) = self
            .g
            .node(node)
            .ty
            .shape
            .resolve(self.cx.dims)
            .ok_or_else(|| PlanError::Internal {
                pass: "fuse",
                message: "unbound operand shape".into(),
            })?;
        // Index vectors (labels compared as values) are read one entry per row.
        if self.g.node(node).ty.storage == Storage::Index {
            return if r == self.rows && !transposed {
                Ok(Access::IndexCol)
            } else {
                Err(PlanError::Unsupported(format!(
                    "an index vector of length {r} compared over a {} x {} space; compare index vectors of the same length",
                    self.rows, self.cols
                )))
            };
        }
        let (vr, vc) = if transposed { (c, r) } else { (r, c) };
        let access = if (vr, vc) == (self.rows, self.cols) {
            if transposed && r != 1 && c != 1 {
                Access::Matrix { transposed: true }
            } else if transposed {
                // A transposed vector has the same memory as the vector.
                if vr == 1 {
                    Access::Row
                } else {
                    Access::Col
                }
            } else {
                Access::Matrix { transposed: false }
            }
        } else if vr == self.rows && vc == 1 {
            Access::Col
        } else if vr == 1 && vc == self.cols {
            Access::Row
        } else if vr == 1 && vc == 1 {
            Access::Broadcast
        } else {
            return Err(PlanError::Internal {
                pass: "fuse",
                message: format!(
                    "cannot read a {vr} x {vc} value over a {} x {} space",
                    self.rows, self.cols
                ),
            });
        };
        Ok(access)
    }

    /// The expression of `n` inside the group (or a read of it, if it comes from outside).
    fn expr(&mut self, n: NodeId) -> Result<Expr, PlanError> {
        let g = self.g;
        match &g.node(n).op {
            Op::Scalar(ScalarExpr::Lit(v)) => return Ok(Expr::Const(*v)),
            Op::Scalar(_) => return Ok(Expr::Input(self.input(n, Access::Scalar))),
            Op::Transpose if classify(g, n) == Class::View => {
                let x = g.operands(n)[0];
                let access = self.access_for(x, true)?;
                return Ok(Expr::Input(self.input(x, access)));
            }
            _ => {}
        }
        if !self.set.contains(&n) {
            let access = self.access_for(n, false)?;
            return Ok(Expr::Input(self.input(n, access)));
        }
        let ops = g.operands(n);
        Ok(match &g.node(n).op {
            Op::Unary(u) => Expr::unary(*u, self.expr(ops[0])?),
            Op::Binary(b) => {
                let a = self.expr(ops[0])?;
                let c = self.expr(ops[1])?;
                Expr::binary(*b, a, c)
            }
            Op::Select => {
                let c = self.expr(ops[0])?;
                let a = self.expr(ops[1])?;
                let e = self.expr(ops[2])?;
                Expr::select(c, a, e)
            }
            Op::Transpose => {
                let access = self.access_for(ops[0], true)?;
                Expr::Input(self.input(ops[0], access))
            }
            Op::Contraction(p) => {
                if p.alpha.as_lit() != Some(1.0) {
                    return Err(PlanError::Internal {
                        pass: "fuse",
                        message: "a contraction's scale factor must be a multiplication around it"
                            .into(),
                    });
                }
                let a = self.input(
                    ops[0],
                    Access::Left {
                        transposed: p.trans_a,
                    },
                );
                let b = self.input(
                    ops[1],
                    Access::Right {
                        transposed: p.trans_b,
                    },
                );
                let shape = &g.node(ops[0]).ty.shape;
                let depth = if p.trans_a { &shape.rows } else { &shape.cols };
                let depth = depth
                    .resolve(self.cx.dims)
                    .ok_or_else(|| PlanError::Internal {
                        pass: "fuse",
                        message: "unbound inner dimension".into(),
                    })?;
                self.product = Some(ProductInputs {
                    a,
                    b,
                    depth,
                    symmetric: p.symmetric,
                });
                Expr::Product
            }
            other => {
                return Err(PlanError::Internal {
                    pass: "fuse",
                    message: format!("{} inside a fused group", other.label()),
                })
            }
        })
    }
}
