//! The intermediate representation: a petgraph graph of semantic nodes (no CUDA, no buffers).
//!
//! Each node is an operation with its result [`Type`]; edges run from an operand to its user
//! and carry the operand's position. Passes (see [`crate::passes`]) rewrite the graph in place.

use crate::ops::{Builtin, OpFacts};
use crate::scalar::ScalarExpr;
use crate::types::Type;
use kernel_ir::{BinaryOp, UnaryOp};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A node of the graph.
pub type NodeId = NodeIndex<u32>;

/// A reduction along rows or columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reduce {
    /// Sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Index of the minimum, ties to the lowest index.
    ArgMin,
}

impl Reduce {
    /// The reduction's name in the language, for row reductions (`sum_rows`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Min => "min",
            Reduce::Max => "max",
            Reduce::ArgMin => "argmin",
        }
    }
}

/// A matrix product after canonicalisation: transposes are flags and scalar factors are alpha.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProductAttrs {
    /// The left operand is read transposed.
    pub trans_a: bool,
    /// The right operand is read transposed.
    pub trans_b: bool,
    /// Scalar factor.
    pub alpha: ScalarExpr,
    /// A contraction whose product is `A A^T` of one matrix and whose consumers are symmetric
    /// in the row and the column (see [`kernel_ir::Form::Contraction`]'s `symmetric`): the
    /// kernel may compute one triangle of tiles. Always false for a library product.
    #[serde(default)]
    pub symmetric: bool,
}

/// A library operation chosen for a product.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LibOp {
    /// Dense x dense: `alpha * op(A) * op(B)`.
    Gemm(ProductAttrs),
    /// `alpha * A * A^T` (trans = false) or `alpha * A^T * A` (trans = true), full output.
    Syrk {
        /// Which side is transposed.
        trans: bool,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// Dense matrix x vector: `alpha * op(A) * x`; the single operand order is (A, x).
    Gemv {
        /// Whether A is read transposed.
        trans: bool,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// Sparse x dense or dense x sparse with a dense (non-vector) result.
    SpMM {
        /// Whether the sparse operand is on the left.
        sparse_left: bool,
        /// Whether the sparse operand is read transposed.
        trans_sparse: bool,
        /// Whether the dense operand is read transposed.
        trans_dense: bool,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
    /// Sparse x sparse^T with a dense result: `alpha * A * B^T`, both CSR; operand order
    /// (A, B). Chosen by the cost model over densifying (see
    /// [`crate::passes::sparse_products`]), which says why in `why`.
    SpGemm {
        /// Scalar factor.
        alpha: ScalarExpr,
        /// The cost model's reason, for plans.
        why: String,
    },
    /// Sparse matrix x vector: `alpha * op(S) * x`; operand order (S, x).
    SpMV {
        /// Whether S is read transposed.
        trans: bool,
        /// Scalar factor.
        alpha: ScalarExpr,
    },
}

impl LibOp {
    /// Short name, as in plans.
    pub fn name(&self) -> &'static str {
        match self {
            LibOp::Gemm(_) => "gemm",
            LibOp::Syrk { .. } => "syrk",
            LibOp::Gemv { .. } => "gemv",
            LibOp::SpMM { .. } => "spmm",
            LibOp::SpGemm { .. } => "spgemm",
            LibOp::SpMV { .. } => "spmv",
        }
    }
}

/// Operations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// A tensor parameter (dense, CSR, vector or index) of the program.
    Input {
        /// The parameter's name.
        param: String,
    },
    /// A host scalar (literal, scalar parameter, dimension size, or arithmetic on them).
    Scalar(ScalarExpr),
    /// `x^T`.
    Transpose,
    /// `a * b` between matrices or vectors (before canonicalisation).
    MatMul,
    /// A canonical product (after canonicalisation), operands untransposed.
    Product(ProductAttrs),
    /// A library call (after selection).
    Library(LibOp),
    /// A product computed inside the kernel of its consumers, never stored (after the
    /// contractions pass): operands `(A, B)`, `alpha * op(A) * op(B)`.
    Contraction(ProductAttrs),
    /// Element-wise unary operation.
    Unary(UnaryOp),
    /// Element-wise binary operation with broadcasting.
    Binary(BinaryOp),
    /// `where(cond, a, b)`, element-wise with broadcasting.
    Select,
    /// Reduction of each row to one value (`sum_rows`, `min_rows`, `argmin_rows`, ...).
    RowReduce(Reduce),
    /// Reduction of each column to one value (`sum_cols`, ...).
    ColReduce(Reduce),
    /// `gather(M, idx)`: `z_i = M[i, idx_i]`.
    Gather,
    /// A builtin operation (see [`crate::ops`]): `diag`, `counts`, `selection`, and the
    /// operations the planner introduces.
    Builtin(Builtin),
}

impl Op {
    /// Whether the operation is element-wise (fusible into a generated kernel as a map).
    pub fn is_elementwise(&self) -> bool {
        matches!(self, Op::Unary(_) | Op::Binary(_) | Op::Select)
    }

    /// A short label for plans, DOT and kernel provenance.
    pub fn label(&self) -> String {
        match self {
            Op::Input { param } => format!("input {param}"),
            Op::Scalar(s) => format!("scalar {s}"),
            Op::Transpose => "transpose".into(),
            Op::MatMul => "matmul".into(),
            Op::Product(p) => format!(
                "product{}{} alpha={}",
                if p.trans_a { " A^T" } else { "" },
                if p.trans_b { " B^T" } else { "" },
                p.alpha
            ),
            Op::Library(l) => l.name().into(),
            Op::Contraction(p) => format!(
                "contraction{}{}{} alpha={}",
                if p.trans_a { " A^T" } else { "" },
                if p.trans_b { " B^T" } else { "" },
                if p.symmetric { " symmetric" } else { "" },
                p.alpha
            ),
            Op::Unary(u) => u.name().into(),
            Op::Binary(b) => b.symbol().into(),
            Op::Select => "where".into(),
            Op::RowReduce(r) => format!("{}_rows", r.name()),
            Op::ColReduce(r) => format!("{}_cols", r.name()),
            Op::Gather => "gather".into(),
            Op::Builtin(b) => b.label(),
        }
    }
}

/// A node: an operation, its result type, and the program name bound to it, if any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The type of its result.
    pub ty: Type,
    /// The statement target (or parameter) this node is bound to, if any.
    pub name: Option<String>,
}

/// A typed graph of one program.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Nodes and operand edges (edge weight: operand position).
    pub g: StableDiGraph<Node, usize>,
    /// Outputs, in signature order: name and node.
    pub outputs: Vec<(String, NodeId)>,
}

impl Graph {
    /// Adds a node with its operands, in order.
    pub fn add(&mut self, op: Op, ty: Type, operands: &[NodeId]) -> NodeId {
        let n = self.g.add_node(Node { op, ty, name: None });
        for (pos, &o) in operands.iter().enumerate() {
            self.g.add_edge(o, n, pos);
        }
        n
    }

    /// Whether `n` is still a node of the graph (a rewrite may have removed it).
    pub fn contains(&self, n: NodeId) -> bool {
        self.g.node_weight(n).is_some()
    }

    /// The node's data.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.g[n]
    }

    /// The node's data, mutably.
    pub fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.g[n]
    }

    /// The operands of `n`, in position order.
    pub fn operands(&self, n: NodeId) -> Vec<NodeId> {
        let mut v: Vec<(usize, NodeId)> = self
            .g
            .edges_directed(n, Direction::Incoming)
            .map(|e| (*e.weight(), e.source()))
            .collect();
        v.sort_by_key(|(p, _)| *p);
        v.into_iter().map(|(_, s)| s).collect()
    }

    /// The nodes that use `n` (each once, in a deterministic order).
    pub fn users(&self, n: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.g.neighbors_directed(n, Direction::Outgoing).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Replaces the operands of `n`.
    pub fn set_operands(&mut self, n: NodeId, operands: &[NodeId]) {
        let old: Vec<_> = self
            .g
            .edges_directed(n, Direction::Incoming)
            .map(|e| e.id())
            .collect();
        for e in old {
            self.g.remove_edge(e);
        }
        for (pos, &o) in operands.iter().enumerate() {
            self.g.add_edge(o, n, pos);
        }
    }

    /// Makes every user of `old` (and every output bound to it) use `new` instead.
    pub fn replace_uses(&mut self, old: NodeId, new: NodeId) {
        for user in self.users(old) {
            let ops: Vec<NodeId> = self
                .operands(user)
                .into_iter()
                .map(|o| if o == old { new } else { o })
                .collect();
            self.set_operands(user, &ops);
        }
        for (_, o) in self.outputs.iter_mut() {
            if *o == old {
                *o = new;
            }
        }
    }

    /// Whether `n` is an output of the program.
    pub fn is_output(&self, n: NodeId) -> bool {
        self.outputs.iter().any(|(_, o)| *o == n)
    }

    /// Nodes in a topological order (operands before users), ties broken by node index so the
    /// order is deterministic.
    pub fn topo_order(&self) -> Vec<NodeId> {
        let mut indeg: std::collections::BTreeMap<NodeId, usize> =
            std::collections::BTreeMap::new();
        for n in self.g.node_indices() {
            indeg.insert(n, self.operands(n).len());
        }
        let mut ready: std::collections::BTreeSet<NodeId> = indeg
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(n, _)| *n)
            .collect();
        let mut order = Vec::with_capacity(indeg.len());
        while let Some(n) = ready.pop_first() {
            order.push(n);
            for e in self.g.edges_directed(n, Direction::Outgoing) {
                let t = e.target();
                if let Some(d) = indeg.get_mut(&t) {
                    *d -= 1;
                    if *d == 0 {
                        ready.insert(t);
                    }
                }
            }
        }
        order
    }

    /// Removes nodes that no output depends on.
    pub fn remove_dead(&mut self) {
        let mut live = std::collections::HashSet::new();
        let mut stack: Vec<NodeId> = self.outputs.iter().map(|(_, n)| *n).collect();
        while let Some(n) = stack.pop() {
            if live.insert(n) {
                stack.extend(self.operands(n));
            }
        }
        let dead: Vec<NodeId> = self
            .g
            .node_indices()
            .filter(|n| !live.contains(n))
            .collect();
        for n in dead {
            self.g.remove_node(n);
        }
    }

    /// A short description of a node for provenance: `E = spmm` or `#7 +`.
    pub fn describe(&self, n: NodeId) -> String {
        let node = &self.g[n];
        match &node.name {
            Some(name) => format!("{name} = {} : {}", node.op.label(), node.ty),
            None => format!("%{} = {} : {}", n.index(), node.op.label(), node.ty),
        }
    }
}

impl fmt::Display for Graph {
    /// One line per node in topological order: `%3 E = gemm(%1, %2) : Dense[n, k]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in self.topo_order() {
            let node = &self.g[n];
            let ops: Vec<String> = self
                .operands(n)
                .iter()
                .map(|o| format!("%{}", o.index()))
                .collect();
            let name = node
                .name
                .as_deref()
                .map(|s| format!(" {s} ="))
                .unwrap_or_default();
            writeln!(
                f,
                "%{}{} {}({}) : {}",
                n.index(),
                name,
                node.op.label(),
                ops.join(", "),
                node.ty
            )?;
        }
        for (name, n) in &self.outputs {
            writeln!(f, "output {name} = %{}", n.index())?;
        }
        Ok(())
    }
}
