//! Property tests over random shapes: GEMM and both SpMM orders against naive loops.

use proptest::prelude::*;

use super::super::gemm;
use super::reference::Rng;
use super::reference::*;
use super::sparse::{check_dense_sparse, check_sparse_dense};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn gemm_random_shapes(
        m in 0usize..40, n in 0usize..40, k in 0usize..40,
        ta: bool, tb: bool,
        pads in (0usize..4, 0usize..4, 0usize..4),
        alpha in prop::sample::select(vec![1.0, -0.5, 0.0, 2.0]),
        beta in prop::sample::select(vec![0.0, 1.0, -0.25]),
        seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        let (ar, ac) = if ta { (k, m) } else { (m, k) };
        let (br, bc) = if tb { (n, k) } else { (k, n) };
        let (lda, ldb, ldc) = (ac + pads.0, bc + pads.1, n + pads.2);
        let a = random_matrix::<f64>(&mut rng, ar, ac, lda);
        let b = random_matrix::<f64>(&mut rng, br, bc, ldb);
        let mut want = if beta == 0.0 {
            vec![f64::NAN; span(m, n, ldc) + 2]
        } else {
            random_matrix::<f64>(&mut rng, m, n, ldc)
        };
        let mut c = want.clone();
        gemm(ta, tb, m, n, k, alpha, &a, lda, &b, ldb, beta, &mut c, ldc).unwrap();
        // alpha == 0 means A and B are not read: the reference must not multiply NaN padding.
        let k_ref = if alpha == 0.0 { 0 } else { k };
        naive_gemm(ta, tb, m, n, k_ref, alpha, &a, lda, &b, ldb, beta, &mut want, ldc);
        assert_matrix(&c, &want, m, n, ldc, tol::<f64>(k), "proptest gemm");
    }

    #[test]
    fn spmm_random_shapes(
        s_rows in 1usize..30, s_cols in 1usize..30, other in 1usize..30,
        ts: bool, td: bool, density in 0usize..100, pad in 0usize..3,
        beta in prop::sample::select(vec![0.0, 1.0, 0.5]),
        seed: u64,
    ) {
        let mut rng = Rng::new(seed);
        check_sparse_dense::<f64>(&mut rng, ts, td, s_rows, s_cols, other, density, pad, beta);
        check_dense_sparse::<f64>(&mut rng, td, ts, other, s_rows, s_cols, density, pad, beta);
        check_sparse_dense::<f32>(&mut rng, ts, td, s_rows, s_cols, other, density, pad, beta);
    }
}
