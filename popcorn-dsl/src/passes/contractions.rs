//! Contractions: a product whose result is consumed only by element-wise maps over its own
//! shape and by row reductions of them (`argmin_rows`, `min_rows`, `max_rows`, `sum_rows`,
//! `gather`, a product with a vector `M * y`, sums by label `M * selection(l, k)^T`; a
//! `diag` of them is derived from the operands, see [`super::diagonals`]) is
//! computed inside its consumers' kernel, tile by tile, and never stored: Lloyd's distances,
//! a kernel sum `K * y`, the cross kernel of Kernel K-means' prediction. The product becomes
//! [`Op::Contraction`]; fusion ([`super::fuse`]) then builds one kernel of it, its maps and its
//! reductions (a [`kernel_ir::Form::Contraction`]).
//!
//! Where the element-wise values are also needed whole (an output, a column reduction), they
//! are stored from the kernel. The product is kept a library call where its value is needed
//! whole, where nothing reduces it, where the target has no contraction kernels or a by-label
//! reduction has more clusters than they take, and, under [`ContractionPolicy::Auto`], where
//! the target's cost model finds the library product plus a pass over its result faster
//! (large inner dimensions: the library's GEMM runs faster than a fused kernel, and the bytes
//! saved matter less). `POPCORN_LOG=fusion` says which and why.

use super::diagonals::{Diagonals, GramProduct};
use super::label_order;
use super::{ContractionPolicy, GraphPass, PassContext, PlanError};
use crate::ir::{Graph, LibOp, NodeId, Op, ProductAttrs};
use crate::ops::Builtin;
use crate::scalar::ScalarExpr;
use crate::types::{Storage, Type};
use kernel_ir::BinaryOp;
use std::collections::BTreeSet;

/// The contractions pass.
pub struct Contractions;

/// How the consumers of a product use it.
#[derive(Debug, Default)]
struct Region {
    /// Element-wise nodes over the product's space, computed in the kernel.
    maps: BTreeSet<NodeId>,
    /// Reductions that read the product or a map (they become the kernel's outputs).
    reductions: Vec<NodeId>,
    /// Maps whose value is also needed whole.
    stored: usize,
    /// Clusters of by-label reductions, the largest.
    labels: Option<usize>,
    /// Number of by-label reductions.
    by_label: usize,
    /// Why the product cannot be fused, if it cannot.
    refusal: Option<String>,
    /// A map of the region that reads one of its reductions (as softmax reads the row max),
    /// with that reduction: one pass cannot compute both.
    feedback: Option<(NodeId, NodeId)>,
    /// `diag` nodes reading the product or a map, derived from the operands instead
    /// ([`super::diagonals`]).
    diagonals: Vec<NodeId>,
}

/// Whether `u` reduces its operand `at` (a member of the region) along the rows.
fn reduces(g: &Graph, u: NodeId, at: NodeId) -> bool {
    let ops = g.operands(u);
    let first = ops.first() == Some(&at) && !ops[1..].contains(&at);
    match &g.node(u).op {
        Op::RowReduce(_) => first,
        Op::Gather => first,
        Op::Library(LibOp::Gemv { trans: false, .. }) => first,
        Op::Builtin(Builtin::ClusterSums(_)) => first,
        _ => false,
    }
}

/// The region of product `p` over the `rows x cols` space.
fn region(g: &Graph, p: NodeId, cx: &PassContext<'_>) -> Region {
    let mut r = Region::default();
    let space = g.node(p).ty.shape.clone();
    if g.is_output(p) {
        r.refusal = Some("the product is an output".into());
        return r;
    }
    let gram = product_of(g, p).is_some_and(|(a, _)| !a.trans_a && a.trans_b);
    let mut stored_nodes = Vec::new();
    let mut stack = vec![p];
    let mut seen = BTreeSet::from([p]);
    while let Some(n) = stack.pop() {
        let mut needed_whole = n != p && g.is_output(n);
        for u in g.users(n) {
            let node = g.node(u);
            if node.op.is_elementwise()
                && node.ty.shape == space
                && node.ty.storage == Storage::Dense
            {
                if seen.insert(u) {
                    r.maps.insert(u);
                    stack.push(u);
                }
            } else if gram && matches!(node.op, Op::Builtin(Builtin::Diag(_))) {
                if !r.diagonals.contains(&u) {
                    r.diagonals.push(u);
                }
            } else if reduces(g, u, n) {
                if !r.reductions.contains(&u) {
                    r.reductions.push(u);
                }
                if let Op::Builtin(Builtin::ClusterSums(c)) = &node.op {
                    let k = c.k.resolve(cx.dims).unwrap_or(usize::MAX);
                    r.labels = Some(r.labels.map_or(k, |l| l.max(k)));
                    r.by_label += 1;
                }
            } else {
                needed_whole = true;
            }
        }
        if needed_whole {
            if n == p {
                r.refusal = Some(format!(
                    "the product itself is needed whole (by {})",
                    g.users(p)
                        .iter()
                        .filter(|u| !r.maps.contains(u)
                            && !reduces(g, **u, p)
                            && !r.diagonals.contains(u))
                        .map(|u| g.node(*u).op.label())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                return r;
            }
            r.stored += 1;
            stored_nodes.push(n);
        }
    }
    // Outputs held in 16 bits that only a map of the product writes: fused when contractions
    // are asked for everywhere, the product is then never stored in f32 (an `n x n` f32
    // temporary would take twice the 16-bit output's memory).
    let held_outputs = !stored_nodes.is_empty()
        && stored_nodes.iter().all(|s| {
            g.outputs
                .iter()
                .any(|(name, o)| o == s && cx.config.half_storage.contains_key(name))
        });
    if r.reductions.is_empty()
        && !(held_outputs && cx.config.contractions == ContractionPolicy::Always)
    {
        r.refusal =
            Some("nothing reduces it (a library product and a map write it as fast)".into());
    }
    r.feedback = r.maps.iter().find_map(|m| {
        g.operands(*m)
            .into_iter()
            .find(|o| r.reductions.contains(o))
            .map(|red| (*m, red))
    });
    r
}

/// The product attributes and operands of a library product node that can be a contraction:
/// a GEMM of two matrices, or a SYRK (`A A^T` as `A` times `A` transposed).
fn product_of(g: &Graph, n: NodeId) -> Option<(ProductAttrs, Vec<NodeId>)> {
    let ops = g.operands(n);
    match &g.node(n).op {
        Op::Library(LibOp::Gemm(p)) => Some((p.clone(), ops)),
        Op::Library(LibOp::Syrk { trans, alpha }) => Some((
            ProductAttrs {
                trans_a: *trans,
                trans_b: !*trans,
                alpha: alpha.clone(),
                symmetric: false,
            },
            vec![ops[0], ops[0]],
        )),
        _ => None,
    }
}

/// Makes the scale factor `alpha` of node `n` a multiplication after it (in the kernel: an
/// element-wise map, or a scaling of a reduction's result), taking `n`'s place for its users
/// and among the outputs.
fn scale_after(g: &mut Graph, n: NodeId, alpha: ScalarExpr) {
    if alpha.as_lit() == Some(1.0) {
        return;
    }
    let ty = g.node(n).ty.clone();
    let a = g.add(Op::Scalar(alpha), Type::scalar(), &[]);
    let scaled = g.add(Op::Binary(BinaryOp::Mul), ty, &[a, n]);
    let users: Vec<NodeId> = g.users(n).into_iter().filter(|u| *u != scaled).collect();
    for u in users {
        let ops: Vec<NodeId> = g
            .operands(u)
            .into_iter()
            .map(|o| if o == n { scaled } else { o })
            .collect();
        g.set_operands(u, &ops);
    }
    for (_, o) in g.outputs.iter_mut() {
        if *o == n {
            *o = scaled;
        }
    }
    g.node_mut(scaled).name = g.node_mut(n).name.take();
}

/// Whether the region's kernel will be the pipelined one (kernels-gen: `float` values,
/// `A * B^T` of operands stored as rows of the depth, at most one sum by label), which adds
/// each row's running sums by label to the output and so takes any number of clusters; the
/// other contraction kernel keeps its bins on chip ([`crate::target::ContractionTarget`]'s
/// `max_labels`).
fn pipelined(cx: &PassContext<'_>, attrs: &ProductAttrs, r: &Region) -> bool {
    cx.config.dtype == crate::types::DType::F32
        && !attrs.trans_a
        && attrs.trans_b
        && r.by_label <= 1
}

/// Estimated seconds of the product stored (library rate, then its result written and read
/// once more) and fused (the contraction kernel's rate for `precision`, the precision its
/// template computes), for a `rows x cols` product of inner dimension `depth`.
fn times(
    cx: &PassContext<'_>,
    (rows, cols, depth): (f64, f64, f64),
    precision: kernel_ir::Precision,
    efficiency: f64,
) -> (f64, f64) {
    let c = &cx.target.ceilings;
    let rate = c.product_flops_per_s(cx.config.dtype, cx.config.library_tf32());
    // A contraction kernel multiplies at its precision's rate; the library, in TF32 or
    // strictly.
    let fused_rate = match cx.config.dtype {
        crate::types::DType::F32 => c.tensor_product_flops_per_s(precision),
        _ => rate,
    };
    let flops = 2.0 * rows * cols * depth;
    let bytes = 2.0 * rows * cols * cx.config.dtype.size_bytes() as f64;
    let stored = flops / rate + bytes / c.copy_bytes_per_s;
    let fused = flops / (fused_rate * efficiency.max(1e-3));
    (stored, fused)
}

impl GraphPass for Contractions {
    fn name(&self) -> &'static str {
        "contractions"
    }

    fn run(&self, g: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError> {
        let policy = cx.config.contractions;
        let log = crate::log::enabled("fusion");
        let Some(target) = cx.target.contractions else {
            return Ok(false);
        };
        if policy == ContractionPolicy::Never || !cx.config.fusion {
            return Ok(false);
        }
        let mut changed = false;
        for n in g.topo_order() {
            // An earlier rewrite (a diagonal derived from the operands) may have removed it.
            if !g.contains(n) {
                continue;
            }
            let Some((attrs, operands)) = product_of(g, n) else {
                continue;
            };
            let dense = |x: NodeId| {
                let t: &Type = &g.node(x).ty;
                t.storage == Storage::Dense && !t.shape.rows.is_one() && !t.shape.cols.is_one()
            };
            if !operands.iter().all(|o| dense(*o)) {
                continue;
            }
            let r = region(g, n, cx);
            let why_not = if let Some(refusal) = r.refusal {
                Some(refusal)
            } else if !pipelined(cx, &attrs, &r) && r.labels.is_some_and(|k| k > target.max_labels)
            {
                Some(format!(
                    "its sums by label have {} clusters; the target's contraction kernels take at most {}",
                    r.labels.unwrap_or(0),
                    target.max_labels
                ))
            } else if policy == ContractionPolicy::Auto {
                let (rows, cols) = g.node(n).ty.shape.resolve(cx.dims).unwrap_or((0, 0));
                let a = &g.node(operands[0]).ty.shape;
                let depth = if attrs.trans_a { &a.rows } else { &a.cols };
                let depth = depth.resolve(cx.dims).unwrap_or(0);
                // The common shape: `float` values, A * B^T of row-major operands, no sums by
                // label (see ContractionTarget).
                let common = pipelined(cx, &attrs, &r) && r.labels.is_none();
                // The precision the kernel's template computes: the tiled template has no
                // packed or split operands.
                let precision = if pipelined(cx, &attrs, &r) {
                    cx.config.contraction_precision()
                } else {
                    cx.config.contraction_precision().on_general_template()
                };
                let (stored, fused) = times(
                    cx,
                    (rows as f64, cols as f64, depth as f64),
                    precision,
                    target.efficiency_of(common, precision.on_tensor_cores()),
                );
                (fused >= stored).then(|| {
                    format!(
                        "the library product and a pass over its result are estimated faster ({:.3} ms against {:.3} ms fused, inner dimension {depth})",
                        stored * 1e3,
                        fused * 1e3
                    )
                })
            } else {
                None
            };
            if let Some(why) = why_not {
                if log {
                    eprintln!(
                        "[popcorn fusion] {} stays a library product: {why}",
                        g.describe(n)
                    );
                }
                continue;
            }
            if log {
                eprintln!(
                    "[popcorn fusion] {} becomes a contraction with {} map(s) ({} stored) and {} reduction(s){}",
                    g.describe(n),
                    r.maps.len(),
                    r.stored,
                    r.reductions.len(),
                    match r.diagonals.len() {
                        0 => String::new(),
                        d => format!("; {d} diagonal(s) derived from the operands (sum_rows(A .* B))"),
                    }
                );
                if let Some((map, red)) = r.feedback {
                    eprintln!(
                        "[popcorn fusion]   but {} reads {} of the same rows: computing both in \
                         one pass needs the online rescaling of a running row maximum (as in \
                         FlashAttention), which the planner does not derive; the values before \
                         it are stored and the maps from it on run in a second kernel",
                        g.describe(map),
                        g.describe(red)
                    );
                }
            }
            if !r.diagonals.is_empty() {
                let rows = g.node(n).ty.shape.rows.clone();
                let product = GramProduct {
                    node: n,
                    a: operands[0],
                    b: operands[1],
                    alpha: attrs.alpha.clone(),
                };
                let mut diagonals = Diagonals::new(product, &r.maps, rows);
                for dg in &r.diagonals {
                    diagonals.replace(g, *dg);
                }
            }
            let mut operands = operands;
            let mut symmetric = false;
            // Partitioned over the points, the permutation runs replicated over the whole
            // points and the symmetric contraction shared (see the partitioning pass).
            if attrs.trans_b {
                let region = label_order::Region {
                    product: n,
                    a: operands[0],
                    b: operands[1],
                    gram: !attrs.trans_a,
                    maps: &r.maps,
                    reductions: &r.reductions,
                };
                if let Some(sorted) = label_order::sort_by_label(g, &region) {
                    operands[1] = sorted.b;
                    if let Some(a) = sorted.a {
                        operands[0] = a;
                    }
                    symmetric = sorted.symmetric;
                    if log {
                        eprintln!(
                            "[popcorn fusion]   its columns are sorted by label (B's rows, the labels and the column broadcasts in cluster order), so a tile meets few clusters{}",
                            if symmetric {
                                "; the product and its epilogue are symmetric, so its rows are too and its kernel may compute one triangle of tiles"
                            } else {
                                ""
                            }
                        );
                    }
                }
            }
            let alpha = attrs.alpha.clone();
            g.node_mut(n).op = Op::Contraction(ProductAttrs {
                alpha: ScalarExpr::Lit(1.0),
                symmetric,
                ..attrs
            });
            g.set_operands(n, &operands);
            scale_after(g, n, alpha);
            for red in r.reductions {
                if let Op::Library(LibOp::Gemv { trans, alpha }) = g.node(red).op.clone() {
                    g.node_mut(red).op = Op::Library(LibOp::Gemv {
                        trans,
                        alpha: ScalarExpr::Lit(1.0),
                    });
                    scale_after(g, red, alpha);
                }
            }
            changed = true;
        }
        Ok(changed)
    }
}
