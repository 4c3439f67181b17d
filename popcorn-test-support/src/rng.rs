//! Seeded random inputs: a small generator and the values, labels and sparse matrices the tests
//! draw from it (f32-representable, so f32 and f64 computations start from the same values).

use crate::reference::RefValue;

/// SplitMix64: a small, good-enough, seedable generator (no dependency).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`, rounded to the nearest `f32` so that the value is the same in
    /// f32 and f64 computations.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo + (hi - lo) * self.unit()) as f32 as f64
    }

    /// Uniform in `0..n` (`n >= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `len` values uniform in `[-1, 1)`, f32-representable.
pub fn random_values(rng: &mut SplitMix64, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// `n` labels uniform in `0..k`.
pub fn random_labels(rng: &mut SplitMix64, n: usize, k: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(k) as u32).collect()
}

/// A CSR matrix as the runtime takes it, with its dense form for hand-written loops.
#[derive(Clone, Debug)]
pub struct CsrData {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows + 1` offsets.
    pub row_ptr: Vec<i32>,
    /// Column of each entry (sorted within a row, no duplicates).
    pub col_idx: Vec<i32>,
    /// Value of each entry.
    pub values: Vec<f64>,
}

impl CsrData {
    /// The dense row-major form.
    pub fn dense(&self) -> Vec<f64> {
        let mut d = vec![0.0; self.rows * self.cols];
        for i in 0..self.rows {
            for p in self.row_ptr[i] as usize..self.row_ptr[i + 1] as usize {
                d[i * self.cols + self.col_idx[p] as usize] += self.values[p];
            }
        }
        d
    }

    /// The reference evaluator's value.
    pub fn to_ref(&self) -> RefValue {
        RefValue::Csr {
            rows: self.rows,
            cols: self.cols,
            row_ptr: self.row_ptr.iter().map(|v| *v as usize).collect(),
            col_idx: self.col_idx.iter().map(|v| *v as usize).collect(),
            values: self.values.clone(),
        }
    }
}

/// A random CSR matrix: each entry is stored with probability `density` (so some rows are
/// empty), values uniform in `[-1, 1)`, f32-representable.
pub fn random_csr(rng: &mut SplitMix64, rows: usize, cols: usize, density: f64) -> CsrData {
    let mut row_ptr = vec![0i32];
    let mut col_idx = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        for j in 0..cols {
            if rng.unit() < density {
                col_idx.push(j as i32);
                values.push(rng.uniform(-1.0, 1.0));
            }
        }
        row_ptr.push(values.len() as i32);
    }
    CsrData {
        rows,
        cols,
        row_ptr,
        col_idx,
        values,
    }
}
