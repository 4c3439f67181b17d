//! The CPU backend's compute primitives: the fallback where no GPU exists and the reference
//! every GPU result is tested against.
//!
//! Conventions shared by every primitive:
//! - matrices are ROW-MAJOR with an explicit leading dimension (row stride) `ld >= width`;
//! - slices must span the operand they hold and may be longer (the rest is ignored);
//! - `beta == 0` means the output is not read, so it may hold NaN poison;
//! - arguments are validated before anything is written; errors are [`CpuError`];
//! - work runs on the current rayon pool, and results do not depend on its size.
//!
//! Element types are `f32` and `f64` ([`Real`]).

mod by_label_simd;
mod clusters;
mod csr;
mod error;
mod fused;
mod half_matrix;
mod matmul;
mod matvec;
mod monomials;
mod real;
mod sparse_points;
mod sparse_products;
mod syrk;
mod vector_exp;

#[cfg(test)]
mod tests;

pub use self::clusters::{
    cluster_sums, counts, label_row_sums, permute_rows, selection, weigh_selection,
};
pub use self::csr::CsrRef;
pub use self::error::CpuError;
pub use self::fused::{
    reads_in_place, run_contraction, run_contraction_rows, run_fused, FusedArg, FusedOut,
};
pub use self::half_matrix::{cluster_sums_half, diag_half, narrow, widen};
pub use self::matmul::gemm;
pub use self::matvec::{diag, gemv, pad_cols};
pub use self::monomials::monomials;
pub use self::real::Real;
pub use self::sparse_points::{csr_densify, csr_row_norms, spgemm_abt};
pub use self::sparse_products::{spmm_dense_sparse, spmm_sparse_dense, spmv};
pub use self::syrk::{syrk, syrk_rows};
