//! Independent references for the tests: a deterministic generator, padded random matrices,
//! naive f64 loops and closeness checks.

use super::super::Real;

/// A small xorshift generator (deterministic, no dependency).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Elements spanned by a `rows x cols` matrix with leading dimension `ld`.
pub fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * ld + cols
    }
}

/// A random `rows x cols` matrix with leading dimension `ld`; padding holds NaN so that any read
/// of it poisons the result. Values are rounded to `T` so references see exactly the inputs.
pub fn random_matrix<T: Real>(rng: &mut Rng, rows: usize, cols: usize, ld: usize) -> Vec<f64> {
    let mut v = vec![f64::NAN; span(rows, cols, ld) + 2];
    for i in 0..rows {
        for j in 0..cols {
            v[i * ld + j] = T::from_f64(rng.uniform()).to_f64();
        }
    }
    v
}

pub fn to_t<T: Real>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// Element `(i, j)` of `op(M)` where `M` is stored row-major with leading dimension `ld`.
pub fn at(m: &[f64], ld: usize, trans: bool, i: usize, j: usize) -> f64 {
    if trans {
        m[j * ld + i]
    } else {
        m[i * ld + j]
    }
}

/// Naive `C = alpha op(A) op(B) + beta C` in f64 on row-major storage (only the `m x n` block).
#[allow(clippy::too_many_arguments)]
pub fn naive_gemm(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    beta: f64,
    c: &mut [f64],
    ldc: usize,
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for p in 0..k {
                s += at(a, lda, ta, i, p) * at(b, ldb, tb, p, j);
            }
            let old = if beta == 0.0 {
                0.0
            } else {
                beta * c[i * ldc + j]
            };
            c[i * ldc + j] = alpha * s + old;
        }
    }
}

/// Tolerance for a sum of `k` products of values in [-1, 1].
pub fn tol<T: Real>(k: usize) -> f64 {
    let eps = if T::SCALAR_TYPE == kernel_ir::ScalarType::F32 {
        2e-6
    } else {
        1e-13
    };
    eps * (k as f64 + 1.0)
}

/// Asserts `got` matches `want` on the `rows x cols` block (leading dimension `ld`) within `tol`
/// (relative to `1 + |want|`) and that every padding element of `got` is still NaN.
#[track_caller]
pub fn assert_matrix<T: Real>(
    got: &[T],
    want: &[f64],
    rows: usize,
    cols: usize,
    ld: usize,
    tol: f64,
    what: &str,
) {
    for (p, g) in got.iter().enumerate() {
        let (i, j) = match p.checked_div(ld) {
            Some(i) => (i, p % ld),
            None => (0, p),
        };
        let inside = i < rows && j < cols;
        let g = g.to_f64();
        if inside {
            let w = want[p];
            let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
            assert!(
                ok,
                "{what}: element ({i}, {j}) is {g}, expected {w} (tol {tol})"
            );
        } else {
            assert!(
                g.is_nan(),
                "{what}: padding element {p} ({i}, {j}) was written: {g}"
            );
        }
    }
}

/// Asserts two vectors agree within `tol` (relative to `1 + |want|`).
#[track_caller]
pub fn assert_vec<T: Real>(got: &[T], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (p, (g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
        assert!(ok, "{what}: element {p} is {g}, expected {w} (tol {tol})");
    }
}

/// A random CSR matrix (f64 values rounded to `T`), with empty rows and unsorted columns.
pub struct RandomCsr {
    pub rows: usize,
    pub cols: usize,
    pub row_ptr: Vec<i32>,
    pub col_idx: Vec<i32>,
    pub values: Vec<f64>,
}

impl RandomCsr {
    pub fn new<T: Real>(rng: &mut Rng, rows: usize, cols: usize, density_pct: usize) -> Self {
        let mut row_ptr = vec![0i32];
        let mut col_idx = Vec::new();
        let mut values = Vec::new();
        for _ in 0..rows {
            if cols > 0 {
                // Columns visited in a scrambled order: unsorted indices.
                let start = rng.below(cols);
                for t in 0..cols {
                    let c = (start + t * 7) % cols;
                    if rng.below(100) < density_pct {
                        col_idx.push(c as i32);
                        values.push(T::from_f64(rng.uniform()).to_f64());
                    }
                }
            }
            row_ptr.push(col_idx.len() as i32);
        }
        RandomCsr {
            rows,
            cols,
            row_ptr,
            col_idx,
            values,
        }
    }

    /// The dense `rows x cols` equivalent (duplicates add up).
    pub fn dense(&self) -> Vec<f64> {
        let mut d = vec![0.0; self.rows * self.cols];
        for r in 0..self.rows {
            for p in self.row_ptr[r] as usize..self.row_ptr[r + 1] as usize {
                d[r * self.cols + self.col_idx[p] as usize] += self.values[p];
            }
        }
        d
    }
}
