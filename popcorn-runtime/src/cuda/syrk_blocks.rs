//! How the GPU computes the lower triangle of a SYRK as GEMMs (pure index arithmetic, tested on
//! the host).
//!
//! Row-major `C = op(A) op(A)^T` of order `n` is cut into block rows of `block_rows` rows.
//! Block row `[r0, r1)` needs the rectangle left of its diagonal block, `C[r0..r1, 0..r0]`: one
//! GEMM, at cuBLAS's full rate (and on tensor cores under TF32), with an event after it, so a
//! map can start on the block row while the next one is computed. Blocks of at least twice
//! [`SYRK_LEAF_ROWS`] rows have their diagonal blocks halved recursively down to the leaf size:
//! a diagonal block of `2s` rows is its lower-left `s x s` square plus two diagonal blocks of
//! `s` rows. All full-size diagonal blocks sit at equal strides along the diagonal, so each
//! level is one strided-batched GEMM, and the leaves (computed whole, their upper halves
//! included) are one more. Only the leaves' upper halves are computed beyond the triangle: a
//! fraction `leaf / n` of the work (0.9% at n = 60000), where one GEMM per block row computing
//! its whole diagonal block spends `block_rows / n` (6.8% with 4096-row blocks). Smaller blocks
//! (a few thousand rows, or a huge inner dimension, where a batch of small squares with a long
//! inner loop runs slower than one wide GEMM) keep their diagonal block in the block row's GEMM:
//! `C[r0..r1, 0..r1]`.

use crate::cuda::col_major::{col_major_gemm, ColMajorGemm};
use std::ops::Range;

/// Rows of the diagonal blocks that the recursion computes whole.
pub const SYRK_LEAF_ROWS: usize = 512;

/// One rectangle of a SYRK as a GEMM on sub-arrays: row-major `C[rows, cols] = op(A)[rows, :]
/// op(A)[cols, :]^T` as a column-major GEMM. Offsets are in elements from the start of A (for
/// the first and second operands) and of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyrkBlock {
    /// The GEMM, with the parent arrays' leading dimensions.
    pub gemm: ColMajorGemm,
    /// Offset of the first operand (the columns' rows of `op(A)`) in A.
    pub first_offset: usize,
    /// Offset of the second operand (the rows' rows of `op(A)`) in A.
    pub second_offset: usize,
    /// Offset of the rectangle in C.
    pub c_offset: usize,
}

/// Equal rectangles at equal strides: one strided-batched GEMM (`count == 1`: a plain GEMM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyrkPiece {
    /// The first rectangle.
    pub block: SyrkBlock,
    /// How many rectangles.
    pub count: usize,
    /// Element strides from one rectangle to the next: first operand, second operand, C.
    pub strides: (usize, usize, usize),
}

/// Row-major `C[rows, cols] = op(A)[rows, :] op(A)[cols, :]^T` for `C = A A^T` (A stored
/// `n x k`) or, with `trans`, `C = A^T A` (A stored `k x n`).
pub fn col_major_syrk_rect(
    trans: bool,
    n: usize,
    k: usize,
    rows: Range<usize>,
    cols: Range<usize>,
) -> SyrkBlock {
    let mut gemm = col_major_gemm(trans, !trans, rows.len(), cols.len(), k);
    // Sub-arrays keep their parent's leading dimensions.
    let ld_a = if trans { n } else { k }.max(1);
    gemm.ld_first = ld_a;
    gemm.ld_second = ld_a;
    gemm.ldc = n.max(1);
    let row_of_op_a = |r: usize| if trans { r } else { r * k };
    SyrkBlock {
        gemm,
        first_offset: row_of_op_a(cols.start),
        second_offset: row_of_op_a(rows.start),
        c_offset: rows.start * n + cols.start,
    }
}

/// Whether blocks of `block_rows` rows have their diagonal blocks halved down to `leaf` rows
/// ([`diagonal_pieces`]) rather than computed by their block row's GEMM.
pub fn splits_diagonal(block_rows: usize, leaf: usize) -> bool {
    block_rows.is_multiple_of(2) && block_rows / 2 >= leaf.max(1)
}

/// Block row `[r0, r1)`'s GEMM: the rectangle left of its diagonal block, `C[r0..r1, 0..r0]`
/// (none for the first block row), or where the diagonal blocks are not split
/// ([`splits_diagonal`]) `C[r0..r1, 0..r1]`, its diagonal block included.
pub fn block_row_gemm(
    trans: bool,
    n: usize,
    k: usize,
    (r0, r1): (usize, usize),
    block_rows: usize,
    leaf: usize,
) -> Option<SyrkBlock> {
    let cols = if splits_diagonal(block_rows, leaf) {
        r0
    } else {
        r1
    };
    (cols > 0 && r1 > r0).then(|| col_major_syrk_rect(trans, n, k, r0..r1, 0..cols))
}

/// Every diagonal block of an order-`n` SYRK cut into block rows of `block_rows` rows, as
/// strided batches: the full-size blocks halved down to at most `leaf` rows (while they halve
/// evenly), a batch per level plus one of leaves, and the last, shorter block row's diagonal
/// block whole. Nothing where the diagonal blocks are not split ([`splits_diagonal`]): the
/// block rows' GEMMs compute them.
pub fn diagonal_pieces(
    trans: bool,
    n: usize,
    k: usize,
    block_rows: usize,
    leaf: usize,
) -> Vec<SyrkPiece> {
    let b = block_rows.max(1);
    if !splits_diagonal(b, leaf) {
        return Vec::new();
    }
    let full = n / b;
    let row_of_op_a = |r: usize| if trans { r } else { r * k };
    let mut pieces = Vec::new();
    let mut size = b;
    if full > 0 {
        // Halve while the halves are whole and not below the leaf size.
        while size.is_multiple_of(2) && size / 2 >= leaf.max(1) {
            let s = size / 2;
            let count = full * b / size;
            let step = size;
            pieces.push(SyrkPiece {
                block: col_major_syrk_rect(trans, n, k, s..2 * s, 0..s),
                count,
                strides: (row_of_op_a(step), row_of_op_a(step), step * n + step),
            });
            size = s;
        }
        pieces.push(SyrkPiece {
            block: col_major_syrk_rect(trans, n, k, 0..size, 0..size),
            count: full * b / size,
            strides: (row_of_op_a(size), row_of_op_a(size), size * n + size),
        });
    }
    let tail = full * b;
    if tail < n {
        pieces.push(SyrkPiece {
            block: col_major_syrk_rect(trans, n, k, tail..n, tail..n),
            count: 1,
            strides: (0, 0, 0),
        });
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use popcorn_dsl::plan::block_row_ranges;

    /// Element `(i, j)` of `op(A)`: row `i` of A (stored `n x k`) or, with `trans`, column `i`
    /// of A (stored `k x n`).
    fn op_a(a: &[f64], trans: bool, n: usize, k: usize, i: usize, p: usize) -> f64 {
        if trans {
            a[p * n + i]
        } else {
            a[i * k + p]
        }
    }

    /// Runs a rectangle on the host the way cuBLAS would: through the column-major GEMM's
    /// operands, offsets and leading dimensions, into row-major `c`.
    fn emulate(blk: &SyrkBlock, a: &[f64], c: &mut [f64], shift: (usize, usize, usize)) {
        let g = blk.gemm;
        let at = |off: usize, ld: usize, t: bool, i: usize, j: usize| {
            if t {
                a[off + i * ld + j]
            } else {
                a[off + j * ld + i]
            }
        };
        for j in 0..g.n {
            for i in 0..g.m {
                let s: f64 = (0..g.k)
                    .map(|p| {
                        at(blk.first_offset + shift.0, g.ld_first, g.trans_first, i, p)
                            * at(
                                blk.second_offset + shift.1,
                                g.ld_second,
                                g.trans_second,
                                p,
                                j,
                            )
                    })
                    .sum();
                let slot = &mut c[blk.c_offset + shift.2 + j * g.ldc + i];
                assert!(slot.is_nan(), "element written twice");
                *slot = s;
            }
        }
    }

    fn values(len: usize) -> Vec<f64> {
        (0..len).map(|i| ((i * 7 + 3) % 11) as f64 - 5.0).collect()
    }

    #[test]
    fn pieces_cover_the_lower_triangle_exactly_once() {
        // (n, k, block rows, leaf): uneven tails, blocks that halve to the leaf, blocks that
        // stop halving early (odd), a leaf larger than the block, one block row.
        let cases = [
            (1, 1, 1, 1),
            (7, 3, 2, 1),
            (10, 4, 4, 1),
            (37, 2, 8, 2),
            (40, 3, 8, 2),
            (45, 2, 12, 2),
            (50, 2, 12, 4),
            (33, 5, 64, 2),
            (64, 2, 16, 16),
            (70, 2, 16, 32),
        ];
        for (n, k, b, leaf) in cases {
            for trans in [false, true] {
                let a = values(n * k);
                let mut c = vec![f64::NAN; n * n];
                for piece in diagonal_pieces(trans, n, k, b, leaf) {
                    for q in 0..piece.count {
                        let (s1, s2, sc) = piece.strides;
                        emulate(&piece.block, &a, &mut c, (q * s1, q * s2, q * sc));
                    }
                }
                for rows in block_row_ranges(n, b) {
                    if let Some(blk) = block_row_gemm(trans, n, k, rows, b, leaf) {
                        emulate(&blk, &a, &mut c, (0, 0, 0));
                    }
                }
                let what = format!("n={n} k={k} b={b} leaf={leaf} trans={trans}");
                for i in 0..n {
                    for j in 0..=i {
                        let want: f64 = (0..k)
                            .map(|p| op_a(&a, trans, n, k, i, p) * op_a(&a, trans, n, k, j, p))
                            .sum();
                        assert_eq!(c[i * n + j], want, "{what}: ({i}, {j})");
                    }
                }
                // Above the diagonal only the squares on it (leaves and the last block) are
                // written, each element once.
                let written_above = (0..n)
                    .flat_map(|i| ((i + 1)..n).map(move |j| (i, j)))
                    .filter(|&(i, j)| !c[i * n + j].is_nan())
                    .count();
                let squares: usize = if splits_diagonal(b, leaf) {
                    diagonal_pieces(trans, n, k, b, leaf)
                        .iter()
                        .filter(|p| p.block.first_offset == p.block.second_offset)
                        .map(|p| p.count * p.block.gemm.m * (p.block.gemm.m - 1) / 2)
                        .sum()
                } else {
                    block_row_ranges(n, b)
                        .map(|(r0, r1)| (r1 - r0) * (r1 - r0 - 1) / 2)
                        .sum()
                };
                assert_eq!(written_above, squares, "{what}");
            }
        }
    }

    #[test]
    fn full_blocks_halve_in_one_batch_per_level() {
        // n = 60000 in blocks of 2048: 29 full blocks, halved to 1024 and 512 (2 levels), then
        // 116 leaves of 512, and the last 608 rows whole.
        let pieces = diagonal_pieces(false, 60_000, 780, 2048, SYRK_LEAF_ROWS);
        let counts: Vec<(usize, usize)> =
            pieces.iter().map(|p| (p.count, p.block.gemm.m)).collect();
        assert_eq!(counts, [(29, 1024), (58, 512), (116, 512), (1, 608)]);
        // The leaves lie on the diagonal: C moves by 512 rows and 512 columns.
        assert_eq!(pieces[2].strides, (512 * 780, 512 * 780, 512 * 60_001));
        let leaf = SYRK_LEAF_ROWS;
        assert_eq!(
            block_row_gemm(false, 60_000, 780, (0, 2048), 2048, leaf),
            None
        );
        let last = block_row_gemm(false, 60_000, 780, (59_392, 60_000), 2048, leaf)
            .map(|b| (b.gemm.m, b.gemm.n));
        // Column-major: m is C's columns (0..59392), n its rows (608).
        assert_eq!(last, Some((59_392, 608)));
        // 512-row blocks (n = 6400, d = 126405) keep the diagonal in each block row's GEMM.
        assert!(diagonal_pieces(false, 6400, 126_405, 512, leaf).is_empty());
        let first =
            block_row_gemm(false, 6400, 126_405, (0, 512), 512, leaf).map(|b| (b.gemm.m, b.gemm.n));
        assert_eq!(first, Some((512, 512)));
    }
}
