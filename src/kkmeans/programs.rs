//! The Kernel K-means programs, written in the DSL in `examples/programs/kernel_kmeans.pop`
//! (the same file the `plan` example prints), parsed and checked once.

use popcorn_dsl::Program;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The source of the Kernel K-means programs.
pub const SOURCE: &str = include_str!("../../examples/programs/kernel_kmeans.pop");

/// A program of `kernel_kmeans.pop` by name.
pub fn program(name: &str) -> &'static Program {
    static PROGRAMS: OnceLock<HashMap<String, Program>> = OnceLock::new();
    let all = PROGRAMS.get_or_init(|| {
        Program::parse_all(SOURCE)
            .unwrap_or_else(|e| panic!("kernel_kmeans.pop does not check (a bug in popcorn): {e}"))
            .into_iter()
            .map(|p| (p.name.clone(), p))
            .collect()
    });
    all.get(name)
        .unwrap_or_else(|| panic!("kernel_kmeans.pop has no program `{name}` (a bug in popcorn)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_program_parses() {
        for name in [
            "kernel_linear",
            "kernel_polynomial",
            "kernel_gaussian",
            "kernel_sigmoid",
            "kkmeans_iteration",
            "kkmeans_centroid_norms",
            "cross_linear",
            "cross_polynomial",
            "cross_gaussian",
            "cross_sigmoid",
            "kkmeans_assign",
            "kernel_column",
            "kkmeans_iteration_weighted",
            "kkmeans_recompute_linear_weighted",
            "kkmeans_recompute_polynomial_weighted",
            "kkmeans_recompute_gaussian_weighted",
            "kkmeans_recompute_sigmoid_weighted",
            "kkmeans_centroid_norms_weighted",
            "kkmeans_assign_weighted",
            "kkmeans_predict_linear_weighted",
            "kkmeans_predict_polynomial_weighted",
            "kkmeans_predict_gaussian_weighted",
            "kkmeans_predict_sigmoid_weighted",
            "kernel_linear_sparse",
            "kernel_polynomial_sparse",
            "kernel_gaussian_sparse",
            "kernel_sigmoid_sparse",
            "cross_linear_sparse",
            "cross_polynomial_sparse",
            "cross_gaussian_sparse",
            "cross_sigmoid_sparse",
            "poly_features",
            "features_step",
            "features_step_weighted",
            "features_sums",
            "features_sums_weighted",
        ] {
            assert_eq!(super::program(name).name, name);
        }
    }
}
