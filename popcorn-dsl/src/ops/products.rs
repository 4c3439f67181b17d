//! Library products (GEMM, SYRK, GEMV, SpMM, SpMV): their meaning on reference values and their
//! cost. The graph holds them as [`LibOp`]s after selection; plans as the product steps.

use super::Cost;
use crate::ir::LibOp;
use crate::scalar::{ScalarBindings, ScalarExpr};
use crate::types::DimBindings;
use crate::value::{densify, matmul, RefValue};

impl LibOp {
    /// The result on reference values (sparse operands densified), scalars and sizes from
    /// `scalars` and `dims`.
    pub fn eval(
        &self,
        operands: &[&RefValue],
        scalars: &ScalarBindings,
        dims: &DimBindings,
    ) -> Result<RefValue, String> {
        let scalar = |e: &ScalarExpr| e.eval(scalars, dims).map_err(|e| e.to_string());
        let operand = |i: usize| {
            operands
                .get(i)
                .ok_or_else(|| format!("{} takes more operands", self.name()))
                .and_then(|v| densify(v))
        };
        let m = match self {
            LibOp::Gemm(p) => matmul(
                &operand(0)?,
                &operand(1)?,
                p.trans_a,
                p.trans_b,
                scalar(&p.alpha)?,
            )?,
            LibOp::Syrk { trans, alpha } => {
                let a = operand(0)?;
                // trans = false: A A^T; trans = true: A^T A.
                matmul(&a, &a, *trans, !*trans, scalar(alpha)?)?
            }
            LibOp::Gemv { trans, alpha } | LibOp::SpMV { trans, alpha } => {
                matmul(&operand(0)?, &operand(1)?, *trans, false, scalar(alpha)?)?
            }
            LibOp::SpGemm { alpha, .. } => {
                matmul(&operand(0)?, &operand(1)?, false, true, scalar(alpha)?)?
            }
            LibOp::SpMM {
                sparse_left,
                trans_sparse,
                trans_dense,
                alpha,
            } => {
                let (ta, tb) = if *sparse_left {
                    (*trans_sparse, *trans_dense)
                } else {
                    (*trans_dense, *trans_sparse)
                };
                matmul(&operand(0)?, &operand(1)?, ta, tb, scalar(alpha)?)?
            }
        };
        Ok(m.into_value())
    }
}

/// `C (m x n) = op(A) op(B)` with inner dimension `k`, elements of `elem` bytes.
pub fn gemm_cost(m: usize, n: usize, k: usize, elem: f64) -> Cost {
    let (m, n, k) = (m as f64, n as f64, k as f64);
    Cost {
        flops: 2.0 * m * n * k,
        bytes: elem * (m * k + k * n + m * n),
    }
}

/// A SYRK of order `n`, inner dimension `k`, writing the lower triangle only or all of it.
pub fn syrk_cost(n: usize, k: usize, lower_only: bool, elem: f64) -> Cost {
    let (n, k) = (n as f64, k as f64);
    let written = if lower_only {
        n * (n + 1.0) / 2.0
    } else {
        n * n
    };
    Cost {
        flops: n * (n + 1.0) * k,
        bytes: elem * (n * k + written),
    }
}

/// `y = op(A) x` with A stored `m x n`.
pub fn gemv_cost(m: usize, n: usize, elem: f64) -> Cost {
    let (m, n) = (m as f64, n as f64);
    Cost {
        flops: 2.0 * m * n,
        bytes: elem * (m * n + m + n),
    }
}

/// A sparse matrix of `nnz` entries and `rows` rows times `width` dense columns (SpMM), or a
/// vector (`width` 1: SpMV), reading `dense` elements and writing `out`.
pub fn sparse_product_cost(
    nnz: usize,
    rows: usize,
    width: usize,
    dense: usize,
    out: usize,
    elem: f64,
) -> Cost {
    let csr = nnz as f64 * (elem + 4.0) + (rows as f64 + 1.0) * 4.0;
    Cost {
        flops: 2.0 * nnz as f64 * width as f64,
        bytes: elem * (dense as f64 + out as f64) + csr,
    }
}

/// `C (m x n) = A * B^T` of two CSR matrices of `nnz_a` and `nnz_b` entries over `inner`
/// columns, written dense: each entry of A meets the entries of B in its column, `nnz_b /
/// inner` of them on average, so `2 nnz_a nnz_b / inner` flops.
pub fn sparse_gram_cost(
    nnz_a: usize,
    nnz_b: usize,
    inner: usize,
    m: usize,
    n: usize,
    elem: f64,
) -> Cost {
    let (za, zb) = (nnz_a as f64, nnz_b as f64);
    Cost {
        flops: 2.0 * za * zb / inner.max(1) as f64,
        bytes: (za + zb) * (elem + 4.0) + 4.0 * (m + n + 2) as f64 + elem * (m * n) as f64,
    }
}
