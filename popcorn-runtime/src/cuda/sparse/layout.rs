//! Mapping popcorn's row-major sparse x dense products onto cuSPARSE's SpMM.
//!
//! cuSPARSE computes `C = op(A) op(B)` with the sparse operand `A` on the left. popcorn needs
//! `C = op(S) op(D)` (`sparse_left`) and `C = op(D) op(S)`; the second is computed as
//! `C^T = op(S)^T op(D)^T`. Two facts make this work without copies:
//! - a row-major `r x c` matrix with leading dimension `c` is the column-major `c x r` matrix
//!   with the same leading dimension, i.e. its transpose; so the row-major `C` (`m x n`) is
//!   described as the column-major `n x m` matrix `C^T`;
//! - the dense operand `X` (stored row-major `r x c`) can be described either as row-major
//!   (`X`) or column-major (`X^T`), and cuSPARSE's `opB` transposes what is described.
//!
//! By default `B` is described in the same order as `C` (`opB` picks the transpose), which
//! every cuSPARSE algorithm accepts; if cuSPARSE rejects a combination, the backend retries
//! with `B` described as exactly `op(B)` and `opB = N` (mixed orders).
//!
//! Kernel K-means' `C = K * V^T` (dense `K` `n x n`, CSR `V` `k x n`) becomes `C^T = V K^T`:
//! `opA = N` on the CSR `V`, and `K^T` described column-major with `opB = N`, into a
//! column-major `k x n` view of the row-major `n x k` output.

use super::safe::Order;

/// A dense operand as cuSPARSE sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseView {
    /// Rows as described.
    pub rows: usize,
    /// Columns as described.
    pub cols: usize,
    /// Leading dimension.
    pub ld: usize,
    /// Storage order.
    pub order: Order,
}

/// A cuSPARSE SpMM call for a popcorn product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpmmLayout {
    /// cuSPARSE's `opA` on the CSR operand.
    pub trans_a: bool,
    /// The dense operand's description.
    pub b: DenseView,
    /// cuSPARSE's `opB`.
    pub trans_b: bool,
    /// The output's description.
    pub c: DenseView,
}

/// The SpMM call for `C (m x n)` = `op(S) op(D)` (`sparse_left`) or `op(D) op(S)`, with `D`
/// stored row-major `dense_rows x dense_cols`. `matched_orders`: describe `B` in `C`'s order
/// (the default) rather than as `op(B)` itself.
#[allow(clippy::too_many_arguments)]
pub fn spmm_layout(
    sparse_left: bool,
    trans_sparse: bool,
    trans_dense: bool,
    m: usize,
    n: usize,
    dense_rows: usize,
    dense_cols: usize,
    matched_orders: bool,
) -> SpmmLayout {
    let c = if sparse_left {
        DenseView {
            rows: m,
            cols: n,
            ld: n.max(1),
            order: Order::Row,
        }
    } else {
        DenseView {
            rows: n,
            cols: m,
            ld: n.max(1),
            order: Order::Col,
        }
    };
    let trans_a = if sparse_left {
        trans_sparse
    } else {
        !trans_sparse
    };
    // Whether cuSPARSE's B (k x N) is the transpose of the stored D.
    let b_is_transpose = if sparse_left {
        trans_dense
    } else {
        !trans_dense
    };
    let as_stored = DenseView {
        rows: dense_rows,
        cols: dense_cols,
        ld: dense_cols.max(1),
        order: Order::Row,
    };
    let as_transpose = DenseView {
        rows: dense_cols,
        cols: dense_rows,
        ld: dense_cols.max(1),
        order: Order::Col,
    };
    let (b, trans_b) = if matched_orders {
        match c.order {
            Order::Row => (as_stored, b_is_transpose),
            Order::Col => (as_transpose, !b_is_transpose),
        }
    } else if b_is_transpose {
        (as_transpose, false)
    } else {
        (as_stored, false)
    };
    SpmmLayout {
        trans_a,
        b,
        trans_b,
        c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element (i, j) of a described dense matrix, through op.
    fn read(view: &DenseView, data: &[f64], trans: bool, i: usize, j: usize) -> f64 {
        let (i, j) = if trans { (j, i) } else { (i, j) };
        assert!(
            i < view.rows && j < view.cols,
            "read outside the described matrix"
        );
        match view.order {
            Order::Row => data[i * view.ld + j],
            Order::Col => data[j * view.ld + i],
        }
    }

    /// cuSPARSE's SpMM definition on a sparse matrix given densely (`sr x sc`, row-major).
    fn emulate(
        l: &SpmmLayout,
        s: &[f64],
        sr: usize,
        sc: usize,
        d: &[f64],
        out_len: usize,
    ) -> Vec<f64> {
        let (am, ak) = if l.trans_a { (sc, sr) } else { (sr, sc) };
        let a_at = |i: usize, p: usize| {
            if l.trans_a {
                s[p * sc + i]
            } else {
                s[i * sc + p]
            }
        };
        let (bk, bn) = if l.trans_b {
            (l.b.cols, l.b.rows)
        } else {
            (l.b.rows, l.b.cols)
        };
        assert_eq!(ak, bk, "inner dimensions of op(A) and op(B) differ");
        assert_eq!(
            (l.c.rows, l.c.cols),
            (am, bn),
            "C does not match op(A) op(B)"
        );
        let mut c = vec![f64::NAN; out_len];
        for i in 0..am {
            for j in 0..bn {
                let v: f64 = (0..ak)
                    .map(|p| a_at(i, p) * read(&l.b, d, l.trans_b, p, j))
                    .sum();
                match l.c.order {
                    Order::Row => c[i * l.c.ld + j] = v,
                    Order::Col => c[j * l.c.ld + i] = v,
                }
            }
        }
        c
    }

    #[allow(clippy::manual_is_multiple_of)]
    fn values(len: usize, seed: usize) -> Vec<f64> {
        (0..len)
            .map(|i| {
                if (i * 7 + seed) % 3 == 0 {
                    0.0
                } else {
                    ((i * 13 + seed * 5) % 11) as f64 - 5.0
                }
            })
            .collect()
    }

    #[test]
    fn every_flag_combination_computes_the_row_major_product() {
        let (m, n, k) = (5, 3, 4);
        for sparse_left in [true, false] {
            for ts in [false, true] {
                for td in [false, true] {
                    for matched in [true, false] {
                        // Stored shapes of S and D for this combination.
                        let (s_shape, d_shape) = if sparse_left {
                            (
                                if ts { (k, m) } else { (m, k) },
                                if td { (n, k) } else { (k, n) },
                            )
                        } else {
                            (
                                if ts { (n, k) } else { (k, n) },
                                if td { (k, m) } else { (m, k) },
                            )
                        };
                        let s = values(s_shape.0 * s_shape.1, 1);
                        let d = values(d_shape.0 * d_shape.1, 2);
                        let s_at = |i: usize, j: usize| {
                            if ts {
                                s[j * s_shape.1 + i]
                            } else {
                                s[i * s_shape.1 + j]
                            }
                        };
                        let d_at = |i: usize, j: usize| {
                            if td {
                                d[j * d_shape.1 + i]
                            } else {
                                d[i * d_shape.1 + j]
                            }
                        };
                        let mut want = vec![0.0; m * n];
                        for i in 0..m {
                            for j in 0..n {
                                want[i * n + j] = (0..k)
                                    .map(|p| {
                                        if sparse_left {
                                            s_at(i, p) * d_at(p, j)
                                        } else {
                                            d_at(i, p) * s_at(p, j)
                                        }
                                    })
                                    .sum();
                            }
                        }
                        let l =
                            spmm_layout(sparse_left, ts, td, m, n, d_shape.0, d_shape.1, matched);
                        if matched {
                            assert_eq!(l.b.order, l.c.order);
                        } else {
                            assert!(!l.trans_b);
                        }
                        let got = emulate(&l, &s, s_shape.0, s_shape.1, &d, m * n);
                        assert_eq!(
                            got, want,
                            "sparse_left={sparse_left} ts={ts} td={td} matched={matched}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn kernel_kmeans_product_uses_no_transposes() {
        // C (n x k) = K (n x n) * V^T, V CSR k x n.
        let (n, k) = (7, 3);
        let l = spmm_layout(false, true, false, n, k, n, n, true);
        assert!(!l.trans_a && !l.trans_b);
        assert_eq!(
            l.c,
            DenseView {
                rows: k,
                cols: n,
                ld: k,
                order: Order::Col
            }
        );
        assert_eq!(
            l.b,
            DenseView {
                rows: n,
                cols: n,
                ld: n,
                order: Order::Col
            }
        );
    }
}
