//! Row-major operands on column-major cuBLAS (pure index arithmetic, tested on the host).
//!
//! popcorn stores matrices row-major; cuBLAS is column-major. A row-major `r x c` matrix with
//! leading dimension `c` is, byte for byte, the column-major `c x r` matrix with the same
//! leading dimension: its transpose. So row-major `C = op(A) op(B)` is computed as the
//! column-major `C^T = op(B)^T op(A)^T`: the operands swap places, `m` and `n` swap, and each
//! operand keeps its own transpose flag (the functions `col_major_*` do the mapping, and the
//! tests check it against naive loops by emulating cuBLAS's column-major definitions).

/// A cuBLAS call's arguments in column-major terms: `C = op(first) * op(second)`, `C` being
/// `m x n` with leading dimension `ldc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColMajorGemm {
    /// Whether the first operand is read transposed.
    pub trans_first: bool,
    /// Whether the second operand is read transposed.
    pub trans_second: bool,
    /// Rows of the column-major `C`.
    pub m: usize,
    /// Columns of the column-major `C`.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Leading dimension of the first operand.
    pub ld_first: usize,
    /// Leading dimension of the second operand.
    pub ld_second: usize,
    /// Leading dimension of `C`.
    pub ldc: usize,
}

/// Maps row-major `C (m x n) = op(A) op(B)` (A stored `m x k`, or `k x m` when `trans_a`; B
/// stored `k x n`, or `n x k` when `trans_b`) onto cuBLAS. The first operand is **B**, the
/// second **A**.
pub fn col_major_gemm(trans_a: bool, trans_b: bool, m: usize, n: usize, k: usize) -> ColMajorGemm {
    let ld_a = if trans_a { m } else { k };
    let ld_b = if trans_b { k } else { n };
    ColMajorGemm {
        trans_first: trans_b,
        trans_second: trans_a,
        m: n,
        n: m,
        k,
        ld_first: ld_b.max(1),
        ld_second: ld_a.max(1),
        ldc: n.max(1),
    }
}

/// A SYRK call in column-major terms: `C (n x n) = op(A) op(A)^T`, upper triangle written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColMajorSyrk {
    /// cuBLAS's `trans`: `C = A^T A` when set.
    pub trans: bool,
    /// Order of `C`.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Leading dimension of A.
    pub lda: usize,
}

/// Maps row-major `C = A A^T` (A stored `n x k`) or, with `trans`, `C = A^T A` (A stored
/// `k x n`) onto cuBLAS SYRK. The row-major A is the column-major `A^T`, so the flag flips.
/// cuBLAS fills the column-major upper triangle, which is the row-major lower triangle; the
/// backend mirrors it into the upper one on the device.
pub fn col_major_syrk(trans: bool, n: usize, k: usize) -> ColMajorSyrk {
    ColMajorSyrk {
        trans: !trans,
        n,
        k,
        lda: if trans { n.max(1) } else { k.max(1) },
    }
}

/// A GEMV call in column-major terms: `y = op(A) x` with A `m x n`, leading dimension `lda`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColMajorGemv {
    /// Whether A is read transposed.
    pub trans: bool,
    /// Rows of the column-major A.
    pub m: usize,
    /// Columns of the column-major A.
    pub n: usize,
    /// Leading dimension.
    pub lda: usize,
}

/// Maps row-major `y = op(A) x` (A stored `m x n`) onto cuBLAS GEMV: the row-major A is the
/// column-major `n x m` matrix `A^T`, so the flag flips.
pub fn col_major_gemv(trans: bool, m: usize, n: usize) -> ColMajorGemv {
    ColMajorGemv {
        trans: !trans,
        m: n,
        n: m,
        lda: n.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column-major element (i, j) of a matrix with leading dimension ld, read through op.
    fn at(data: &[f64], ld: usize, trans: bool, i: usize, j: usize) -> f64 {
        if trans {
            data[i * ld + j]
        } else {
            data[j * ld + i]
        }
    }

    /// cuBLAS's GEMM definition, column-major.
    fn emulate_gemm(g: &ColMajorGemm, first: &[f64], second: &[f64]) -> Vec<f64> {
        let mut c = vec![f64::NAN; g.ldc * g.n];
        for j in 0..g.n {
            for i in 0..g.m {
                let mut s = 0.0;
                for p in 0..g.k {
                    s += at(first, g.ld_first, g.trans_first, i, p)
                        * at(second, g.ld_second, g.trans_second, p, j);
                }
                c[j * g.ldc + i] = s;
            }
        }
        c
    }

    /// Naive row-major `op(A) op(B)`.
    fn row_major_product(
        ta: bool,
        tb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        b: &[f64],
    ) -> Vec<f64> {
        let a_at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
        let b_at = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a_at(i, p) * b_at(p, j)).sum();
            }
        }
        c
    }

    fn values(len: usize, seed: u64) -> Vec<f64> {
        (0..len)
            .map(|i| ((i as u64 * 7919 + seed * 104_729) % 97) as f64 / 13.0 - 3.0)
            .collect()
    }

    #[test]
    fn gemm_mapping_matches_row_major_products_in_all_transpose_combinations() {
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (5, 2, 1), (33, 17, 9)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let a = values(m * k, 1);
                    let b = values(k * n, 2);
                    let g = col_major_gemm(ta, tb, m, n, k);
                    // The first operand is B, the second A; column-major C^T is row-major C.
                    let got = emulate_gemm(&g, &b, &a);
                    let want = row_major_product(ta, tb, m, n, k, &a, &b);
                    assert_eq!(got, want, "m={m} n={n} k={k} ta={ta} tb={tb}");
                }
            }
        }
    }

    #[test]
    fn syrk_mapping_computes_the_gram_matrix() {
        for (n, k) in [(1, 1), (4, 3), (7, 10)] {
            for trans in [false, true] {
                let a = values(n * k, 3);
                let s = col_major_syrk(trans, n, k);
                // SYRK is GEMM with op(A) and op(A)^T.
                let g = ColMajorGemm {
                    trans_first: s.trans,
                    trans_second: !s.trans,
                    m: n,
                    n,
                    k,
                    ld_first: s.lda,
                    ld_second: s.lda,
                    ldc: n,
                };
                let got = emulate_gemm(&g, &a, &a);
                // Row-major reference: A A^T (A n x k) or A^T A (A k x n).
                let want = row_major_product(trans, !trans, n, n, k, &a, &a);
                assert_eq!(got, want, "n={n} k={k} trans={trans}");
            }
        }
    }

    #[test]
    fn gemv_mapping_matches_row_major_products() {
        for (m, n) in [(1, 1), (3, 5), (6, 2)] {
            for trans in [false, true] {
                let a = values(m * n, 4);
                let x = values(if trans { m } else { n }, 5);
                let g = col_major_gemv(trans, m, n);
                let rows = if g.trans { g.n } else { g.m };
                let inner = if g.trans { g.m } else { g.n };
                let got: Vec<f64> = (0..rows)
                    .map(|i| {
                        (0..inner)
                            .map(|p| at(&a, g.lda, g.trans, i, p) * x[p])
                            .sum()
                    })
                    .collect();
                let want: Vec<f64> = if trans {
                    (0..n)
                        .map(|j| (0..m).map(|i| a[i * n + j] * x[i]).sum())
                        .collect()
                } else {
                    (0..m)
                        .map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum())
                        .collect()
                };
                assert_eq!(got, want, "m={m} n={n} trans={trans}");
            }
        }
    }
}
