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
