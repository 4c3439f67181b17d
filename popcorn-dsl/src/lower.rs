//! Lowering: the planned graph becomes a [`Plan`]. Fusion ([`fuse`]) groups element-wise work
//! into kernels; each group becomes a fused step, each library or builtin node a step of its
//! own, in dependency order, over values that the plan passes then place in buffers.

use crate::ir::{Graph, LibOp, NodeId, Op};
use crate::ops::Builtin;
use crate::passes::{fuse, PassContext, PlanError};
use crate::plan::dot::ViewNode;
use crate::plan::{
    FusedStep, GemmStep, GraphView, Home, Plan, Step, StepOp, Value, ValueId, ValueKind,
};
use crate::program::Program;
use crate::scalar::ScalarExpr;
use crate::types::Storage;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Fuses and lowers the planned graph `g` of `program` to a plan (without buffers). `nnz`
/// gives the number of stored entries of CSR inputs where known.
pub fn lower(
    program: &Program,
    g: &Graph,
    cx: &PassContext<'_>,
    nnz: &BTreeMap<String, usize>,
) -> Result<Plan, PlanError> {
    let fusion = fuse::fuse(g, cx)?;
    let mut lowering = Lowering::new(program, g, cx, nnz);
    lowering.lower(&fusion)?;
    Ok(lowering.finish())
}

/// A unit of scheduling: a fused group or a single opaque node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    Group(usize),
    Node(NodeId),
}

struct Lowering<'a> {
    program: &'a Program,
    g: &'a Graph,
    cx: &'a PassContext<'a>,
    nnz: &'a BTreeMap<String, usize>,
    values: Vec<Value>,
    value_of: HashMap<NodeId, ValueId>,
    steps: Vec<Step>,
    step_of: HashMap<NodeId, usize>,
    outputs: Vec<(String, ValueId)>,
    inputs: Vec<(String, ValueId)>,
}

impl<'a> Lowering<'a> {
    fn new(
        program: &'a Program,
        g: &'a Graph,
        cx: &'a PassContext<'a>,
        nnz: &'a BTreeMap<String, usize>,
    ) -> Self {
        Lowering {
            program,
            g,
            cx,
            nnz,
            values: Vec::new(),
            value_of: HashMap::new(),
            steps: Vec::new(),
            step_of: HashMap::new(),
            outputs: Vec::new(),
            inputs: Vec::new(),
        }
    }

    fn size(&self, n: NodeId) -> (usize, usize) {
        self.g
            .node(n)
            .ty
            .shape
            .resolve(self.cx.dims)
            .unwrap_or((0, 0))
    }

    fn name(&self, n: NodeId) -> String {
        self.g
            .node(n)
            .name
            .clone()
            .unwrap_or_else(|| format!("%{}", n.index()))
    }

    /// The value of node `n`, created on first use.
    fn value(&mut self, n: NodeId) -> ValueId {
        if let Some(v) = self.value_of.get(&n) {
            return *v;
        }
        let node = self.g.node(n);
        let (rows, cols) = self.size(n);
        let (kind, home) = match (&node.op, node.ty.storage) {
            (Op::Scalar(s), _) => (ValueKind::Scalar(s.clone()), Home::Host),
            (Op::Input { param }, st) => {
                (self.kind_of(st, Some(param), n), Home::Input(param.clone()))
            }
            (_, st) => (self.kind_of(st, None, n), Home::Temp(Vec::new())),
        };
        let mut name = self.name(n);
        while self.values.iter().any(|v| v.name == name) {
            name.push('\'');
        }
        let id = ValueId(self.values.len());
        let shape = Some(node.ty.shape.clone());
        self.values.push(Value {
            name,
            kind,
            rows,
            cols,
            home,
            shape,
            held: None,
        });
        self.value_of.insert(n, id);
        id
    }

    fn kind_of(&self, st: Storage, param: Option<&String>, n: NodeId) -> ValueKind {
        match st {
            Storage::Dense => ValueKind::Dense,
            Storage::Index => ValueKind::Index,
            Storage::Scalar => {
                ValueKind::Scalar(ScalarExpr::Param(param.cloned().unwrap_or_default()))
            }
            Storage::Csr => {
                let nnz = match (param, &self.g.node(n).op) {
                    (Some(p), _) => self.nnz.get(p).copied(),
                    // selection(labels, k): one entry per point.
                    (None, Op::Builtin(Builtin::Selection(_))) => Some(self.size(n).1),
                    _ => None,
                };
                ValueKind::Csr { nnz }
            }
        }
    }

    fn lower(&mut self, fusion: &fuse::Fusion) -> Result<(), PlanError> {
        // Inputs first, in signature order, so the plan lists them even if unused.
        for p in &self.program.params {
            if p.ty.storage == Storage::Scalar {
                continue;
            }
            let node =
                self.g.g.node_indices().find(
                    |n| matches!(&self.g.node(*n).op, Op::Input { param } if param == &p.name),
                );
            if let Some(n) = node {
                let v = self.value(n);
                self.inputs.push((p.name.clone(), v));
            }
        }
        for unit in self.schedule(fusion)? {
            match unit {
                Unit::Group(gi) => self.lower_group(fusion, gi)?,
                Unit::Node(n) => self.lower_node(n)?,
            }
        }
        self.bind_outputs()
    }

    /// Units in dependency order (deterministic: by the first topological position).
    fn schedule(&self, fusion: &fuse::Fusion) -> Result<Vec<Unit>, PlanError> {
        let order = self.g.topo_order();
        let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let unit_of = |n: NodeId| -> Option<Unit> {
            if let Some(gi) = fusion.group_of.get(&n) {
                return Some(Unit::Group(*gi));
            }
            match self.g.node(n).op {
                Op::Input { .. } | Op::Scalar(_) => None,
                _ if fuse::classify(self.g, n) == fuse::Class::View => None,
                _ => Some(Unit::Node(n)),
            }
        };
        let mut deps: BTreeMap<Unit, BTreeSet<Unit>> = BTreeMap::new();
        let mut first: BTreeMap<Unit, usize> = BTreeMap::new();
        for &n in &order {
            let Some(u) = unit_of(n) else { continue };
            let e = first.entry(u).or_insert(pos[&n]);
            *e = (*e).min(pos[&n]);
            let d = deps.entry(u).or_default();
            let mut operands = self.g.operands(n);
            while let Some(o) = operands.pop() {
                // A view has no step: depend on what it reads.
                if fuse::classify(self.g, o) == fuse::Class::View {
                    operands.extend(self.g.operands(o));
                    continue;
                }
                if let Some(ou) = unit_of(o) {
                    if ou != u {
                        d.insert(ou);
                    }
                }
            }
        }
        let mut done: BTreeSet<Unit> = BTreeSet::new();
        let mut out = Vec::new();
        while done.len() < deps.len() {
            let next = deps
                .iter()
                .filter(|(u, d)| !done.contains(*u) && d.iter().all(|x| done.contains(x)))
                .min_by_key(|(u, _)| first[*u])
                .map(|(u, _)| *u)
                .ok_or_else(|| PlanError::Internal {
                    pass: "schedule",
                    message: "fused groups form a cycle".into(),
                })?;
            done.insert(next);
            out.push(next);
        }
        Ok(out)
    }

    fn push_step(
        &mut self,
        op: StepOp,
        inputs: Vec<ValueId>,
        outputs: Vec<ValueId>,
        nodes: &[NodeId],
    ) {
        let provenance = nodes.iter().map(|n| self.g.describe(*n)).collect();
        let (flops, bytes) = crate::plan::cost::step_cost(
            &op,
            &self.values,
            &inputs,
            &outputs,
            self.cx.config.dtype,
        );
        for n in nodes {
            self.step_of.insert(*n, self.steps.len());
        }
        self.steps.push(Step {
            op,
            inputs,
            outputs,
            provenance,
            flops,
            bytes,
        });
    }

    fn lower_group(&mut self, fusion: &fuse::Fusion, gi: usize) -> Result<(), PlanError> {
        let names = |n: NodeId| {
            self.g
                .node(n)
                .name
                .clone()
                .unwrap_or_else(|| format!("t{}", n.index()))
        };
        let k = fusion.spec(gi, self.g, self.cx, &names)?;
        k.spec.validate().map_err(|e| PlanError::Internal {
            pass: "fuse",
            message: format!("the fused kernel is malformed: {e}"),
        })?;
        let inputs = k.inputs.iter().map(|i| self.value(i.node)).collect();
        let outputs = k.outputs.iter().map(|n| self.value(*n)).collect();
        let step = FusedStep {
            name: k.spec.name(),
            spec: k.spec,
            rows: k.rows,
            cols: k.cols,
            depth: k.depth,
            width: k.width,
            share: None,
        };
        let members = fusion.groups[gi].clone();
        self.push_step(StepOp::Fused(step), inputs, outputs, &members);
        Ok(())
    }

    fn lower_node(&mut self, n: NodeId) -> Result<(), PlanError> {
        let ops = self.g.operands(n);
        let node = self.g.node(n).clone();
        let op = match &node.op {
            Op::Library(lib) => self.library_step(lib, &ops, n),
            // A contraction its consumers did not take in: a library product after all.
            Op::Contraction(p) => self.library_step(&LibOp::Gemm(p.clone()), &ops, n),
            Op::Builtin(b) => StepOp::Builtin(b.resolved(self.cx.dims).map_err(|message| {
                PlanError::Internal {
                    pass: "lower",
                    message,
                }
            })?),
            Op::Transpose if node.ty.storage == Storage::Csr => {
                return Err(PlanError::Unsupported(format!(
                    "`{}`: a transposed sparse matrix can only be used inside a product",
                    self.name(n)
                )))
            }
            Op::Binary(_) if node.ty.storage == Storage::Csr => {
                return Err(PlanError::Unsupported(format!(
                    "`{}`: a scaled sparse matrix can only be used inside a product; move the factor next to the product",
                    self.name(n)
                )))
            }
            other => {
                return Err(PlanError::Internal { pass: "lower", message: format!("unexpected {} outside a fused group", other.label()) })
            }
        };
        let inputs = ops.iter().map(|o| self.value(*o)).collect();
        let out = self.value(n);
        self.push_step(op, inputs, vec![out], &[n]);
        Ok(())
    }

    fn library_step(&self, lib: &LibOp, ops: &[NodeId], n: NodeId) -> StepOp {
        let (m, nn) = self.size(n);
        let dims_of = |x: NodeId| self.size(x);
        match lib {
            LibOp::Gemm(p) => {
                let (ar, ac) = dims_of(ops[0]);
                let k = if p.trans_a { ar } else { ac };
                StepOp::Gemm(GemmStep {
                    trans_a: p.trans_a,
                    trans_b: p.trans_b,
                    m,
                    n: nn,
                    k,
                    alpha: p.alpha.clone(),
                    tf32: self.cx.config.library_tf32(),
                })
            }
            LibOp::Syrk { trans, alpha } => {
                let (ar, ac) = dims_of(ops[0]);
                let (order, k) = if *trans { (ac, ar) } else { (ar, ac) };
                StepOp::Syrk {
                    trans: *trans,
                    n: order,
                    k,
                    alpha: alpha.clone(),
                    tf32: self.cx.config.library_tf32(),
                    lower_only: false,
                    block_rows: self.cx.syrk_block_rows(order),
                    row_block: None,
                }
            }
            LibOp::Gemv { trans, alpha } => {
                let (ar, ac) = dims_of(ops[0]);
                StepOp::Gemv {
                    trans: *trans,
                    m: ar,
                    n: ac,
                    alpha: alpha.clone(),
                }
            }
            LibOp::SpMM {
                sparse_left,
                trans_sparse,
                trans_dense,
                alpha,
            } => {
                let (ar, ac) = dims_of(ops[0]);
                let trans_left = if *sparse_left {
                    *trans_sparse
                } else {
                    *trans_dense
                };
                let k = if trans_left { ar } else { ac };
                StepOp::SpMM {
                    sparse_left: *sparse_left,
                    trans_sparse: *trans_sparse,
                    trans_dense: *trans_dense,
                    m,
                    n: nn,
                    k,
                    alpha: alpha.clone(),
                }
            }
            LibOp::SpGemm { alpha, why } => {
                let (_, k) = dims_of(ops[0]);
                StepOp::SpGemm {
                    m,
                    n: nn,
                    k,
                    alpha: alpha.clone(),
                    why: why.clone(),
                }
            }
            LibOp::SpMV { trans, alpha } => StepOp::SpMV {
                trans: *trans,
                alpha: alpha.clone(),
            },
        }
    }

    /// Gives every output its value, adding copies where an output is an input, a host scalar
    /// declared as a tensor, or the same value as an earlier output.
    fn bind_outputs(&mut self) -> Result<(), PlanError> {
        let outs = self.g.outputs.clone();
        for (name, n) in outs {
            let v = self.value(n);
            let value = &self.values[v.0];
            let needs_copy = match &value.home {
                Home::Input(_) | Home::Output(_) => true,
                Home::Host | Home::Temp(_) | Home::InOutput(_) => false,
            };
            if needs_copy {
                if matches!(value.kind, ValueKind::Csr { .. }) {
                    return Err(PlanError::Unsupported(format!(
                        "output `{name}` repeats a sparse input or output; sparse values cannot be copied"
                    )));
                }
                let mut copy = value.clone();
                copy.name = name.clone();
                copy.home = Home::Output(name.clone());
                let id = ValueId(self.values.len());
                self.values.push(copy);
                let bytes =
                    2.0 * (self.values[id.0].len() * self.cx.config.dtype.size_bytes()) as f64;
                self.steps.push(Step {
                    op: StepOp::Copy,
                    inputs: vec![v],
                    outputs: vec![id],
                    provenance: vec![format!("{name} = {}", self.values[v.0].name)],
                    flops: 0.0,
                    bytes,
                });
                self.outputs.push((name, id));
            } else {
                if !matches!(self.values[v.0].home, Home::Host) {
                    self.values[v.0].home = Home::Output(name.clone());
                }
                self.outputs.push((name, v));
            }
        }
        Ok(())
    }

    fn finish(self) -> Plan {
        let mut view = GraphView::default();
        let order = self.g.topo_order();
        let index: HashMap<NodeId, usize> =
            order.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        for &n in &order {
            let node = self.g.node(n);
            let style = match &node.op {
                Op::Input { .. } => "input",
                Op::Scalar(_) => "scalar",
                Op::Library(_) => "library",
                _ if self
                    .steps
                    .get(*self.step_of.get(&n).unwrap_or(&usize::MAX))
                    .is_some_and(|s| matches!(s.op, StepOp::Fused(_))) =>
                {
                    "fused"
                }
                _ => "builtin",
            };
            let style = if self.g.is_output(n) && style != "input" {
                "output"
            } else {
                style
            };
            let label = match &node.name {
                Some(name) => format!("{name} = {}\\n{}", node.op.label(), node.ty),
                None => format!("{}\\n{}", node.op.label(), node.ty),
            };
            view.nodes.push(ViewNode {
                label,
                step: self.step_of.get(&n).copied(),
                style: style.into(),
            });
            for o in self.g.operands(n) {
                view.edges.push((index[&o], index[&n]));
            }
        }
        view.steps = self.steps.iter().map(|s| s.op_name()).collect();
        Plan {
            program: self.program.name.clone(),
            signature: self.program.signature(),
            dtype: self.cx.config.dtype,
            dims: self
                .program
                .dims()
                .into_iter()
                .filter_map(|d| self.cx.dims.get(&d).map(|v| (d, *v)))
                .collect(),
            values: self.values,
            buffers: Vec::new(),
            steps: self.steps,
            inputs: self.inputs,
            outputs: self.outputs,
            graph: view,
            pipelines: Vec::new(),
            target: self.cx.target.clone(),
            partition: None,
        }
    }
}
