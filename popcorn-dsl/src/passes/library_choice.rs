//! The library operation for one dense or sparse product, from the storage and shapes of its
//! operands (GEMM, SYRK, GEMV, SpMM, SpMV): shared by library selection ([`super::select`]) and
//! the sparse products' plans ([`super::sparse_products`]).

use super::PassContext;
use crate::ir::{Graph, LibOp, NodeId, ProductAttrs};
use crate::types::{Storage, Type};

/// Whether a type is a dense vector (one side of size 1) once resolved.
fn is_vector(t: &Type, cx: &PassContext<'_>) -> bool {
    t.storage == Storage::Dense
        && matches!(t.shape.resolve(cx.dims), Some((r, c)) if r == 1 || c == 1)
}

/// Chooses the library operation for a product `op(a) * op(b)` with result type `out`;
/// returns it with its operands in library order. `feeds_map`: the product's only use is an
/// element-wise map that can take over the mirror image of a SYRK (see
/// [`super::lower_triangle`]); SYRK then does half the flops and writes half the bytes of GEMM,
/// whatever the `n/d` ratio.
pub fn choose(
    g: &Graph,
    a: NodeId,
    b: NodeId,
    p: &ProductAttrs,
    out: &Type,
    feeds_map: bool,
    cx: &PassContext<'_>,
) -> (LibOp, [NodeId; 2]) {
    let ta = &g.node(a).ty;
    let tb = &g.node(b).ty;
    let alpha = p.alpha.clone();
    let (out_rows, out_cols) = out.shape.resolve(cx.dims).unwrap_or((2, 2));
    match (ta.storage, tb.storage) {
        (Storage::Csr, _) => {
            if out_cols == 1 {
                (
                    LibOp::SpMV {
                        trans: p.trans_a,
                        alpha,
                    },
                    [a, b],
                )
            } else {
                (
                    LibOp::SpMM {
                        sparse_left: true,
                        trans_sparse: p.trans_a,
                        trans_dense: p.trans_b,
                        alpha,
                    },
                    [a, b],
                )
            }
        }
        (_, Storage::Csr) => {
            if out_rows == 1 {
                // y^T = x^T op(S)  <=>  y = op(S)^T x
                (
                    LibOp::SpMV {
                        trans: !p.trans_b,
                        alpha,
                    },
                    [b, a],
                )
            } else {
                (
                    LibOp::SpMM {
                        sparse_left: false,
                        trans_sparse: p.trans_b,
                        trans_dense: p.trans_a,
                        alpha,
                    },
                    [a, b],
                )
            }
        }
        _ => {
            if a == b && p.trans_a != p.trans_b {
                // X * X^T (or X^T * X): n is the output order, d the inner dimension.
                let n = out_rows as f64;
                let (r, c) = ta.shape.resolve(cx.dims).unwrap_or((1, 1));
                let d = if p.trans_a { r } else { c } as f64;
                if feeds_map || n / d <= cx.syrk_gemm_ratio() {
                    return (
                        LibOp::Syrk {
                            trans: p.trans_a,
                            alpha,
                        },
                        [a, a],
                    );
                }
                return (LibOp::Gemm(p.clone()), [a, b]);
            }
            let a_vec = is_vector(ta, cx);
            let b_vec = is_vector(tb, cx);
            if out_cols == 1 && b_vec && !a_vec {
                (
                    LibOp::Gemv {
                        trans: p.trans_a,
                        alpha,
                    },
                    [a, b],
                )
            } else if out_rows == 1 && a_vec && !b_vec {
                // y^T = x^T op(B)  <=>  y = op(B)^T x
                (
                    LibOp::Gemv {
                        trans: !p.trans_b,
                        alpha,
                    },
                    [b, a],
                )
            } else {
                (LibOp::Gemm(p.clone()), [a, b])
            }
        }
    }
}
