//! Graphs with a known partition, for the normalized cut's tests.

use crate::rng::SplitMix64;
use popcorn_io::CsrMatrix;

/// A stochastic block model: `n` nodes in `blocks` planted communities (node `i` in block
/// `i mod blocks`), each pair joined with probability `p_in` inside a block and `p_out`
/// across, weight 1, no self-loops; seeded. Returns the symmetric adjacency matrix and the
/// planted blocks.
pub fn stochastic_block_model(
    n: usize,
    blocks: usize,
    p_in: f64,
    p_out: f64,
    seed: u64,
) -> (CsrMatrix, Vec<i64>) {
    let mut rng = SplitMix64::new(seed);
    let truth: Vec<i64> = (0..n).map(|i| (i % blocks) as i64).collect();
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for j in i + 1..n {
            let p = if truth[i] == truth[j] { p_in } else { p_out };
            if rng.unit() < p {
                rows[i].push(j);
                rows[j].push(i);
            }
        }
    }
    let mut row_ptr = vec![0];
    let mut col_idx = Vec::new();
    for mut r in rows {
        r.sort_unstable();
        col_idx.extend(r);
        row_ptr.push(col_idx.len());
    }
    let values = vec![1.0; col_idx.len()];
    let a = CsrMatrix::new(n, n, row_ptr, col_idx, values).expect("a valid CSR matrix");
    (a, truth)
}

/// `a` (a symmetric adjacency matrix) with each edge `{i, j}` weighing a value in [0.5, 1.5)
/// drawn for the pair, the same both ways, seeded: no two nodes' degrees or distances are then
/// equal by construction, as they are with unit weights on a small graph (where rounding may
/// break such a tie one way on one device and the other on another).
pub fn with_distinct_weights(a: &CsrMatrix, seed: u64) -> CsrMatrix {
    let mut values = Vec::with_capacity(a.nnz());
    for i in 0..a.rows() {
        for &j in a.row(i).map_or(&[][..], |(cols, _)| cols) {
            let (lo, hi) = (i.min(j) as u64, i.max(j) as u64);
            let pair = SplitMix64::new(lo.wrapping_mul(0x1_0000_0001) ^ hi).next_u64();
            values.push(0.5 + SplitMix64::new(seed ^ pair).unit());
        }
    }
    CsrMatrix::new(
        a.rows(),
        a.cols(),
        a.row_ptr().to_vec(),
        a.col_idx().to_vec(),
        values,
    )
    .expect("the same valid structure")
}
