//! Programs the benchmark needs besides the library's own (`kernel_polynomial` and
//! `kkmeans_iteration` from `examples/programs/kernel_kmeans.pop`).

use popcorn::Program;
use std::sync::OnceLock;

/// The benchmark's programs.
const SOURCE: &str = "
// The naive baseline's kernel matrix: always GEMM (X and Y are the same points, which the
// planner cannot know, so it does not choose SYRK), then the fused polynomial map.
fn kernel_polynomial_gemm(X: Dense[n, d], Y: Dense[n, d], gamma: Scalar, coef0: Scalar, degree: Scalar) -> (K: Dense[n, n]) {
    K = pow(gamma * X * Y^T + coef0, degree);
}

// The distance step of an iteration alone: the selection matrix and E = -2 K V^T.
fn distances_only(K: Dense[n, n], labels: Index[n]) -> (E: Dense[n, k]) {
    V = selection(labels, k);
    E = -2 * K * V^T;
}

// The same products with the sparse operand on the left: E^T = -2 V K, equal to (-2 K V^T)^T
// because K is symmetric. Not what the iteration runs; measured to show what the other
// cuSPARSE layout (CSR times a row-major dense matrix, rows of K read contiguously) reaches.
fn distances_sparse_left(K: Dense[n, n], labels: Index[n]) -> (Et: Dense[k, n]) {
    V = selection(labels, k);
    Et = -2 * V * K;
}

// A device-to-device copy (the bandwidth ceiling).
fn copy(x: Dense[n, m]) -> (y: Dense[n, m]) {
    y = x;
}

// One read of a matrix, summed (the read bandwidth ceiling: what one read of K can take).
fn read(x: Dense[n, m]) -> (s: Scalar) {
    s = sum(x);
}

// A plain matrix product (the SGEMM ceiling).
fn sgemm(A: Dense[m, p], B: Dense[p, q]) -> (C: Dense[m, q]) {
    C = A * B;
}
";

/// A benchmark program by name.
pub fn program(name: &str) -> &'static Program {
    static ALL: OnceLock<Vec<Program>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        Program::parse_all(SOURCE)
            .unwrap_or_else(|e| panic!("the benchmark's programs do not check (a bug): {e}"))
    });
    all.iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("the benchmark has no program `{name}` (a bug)"))
}
