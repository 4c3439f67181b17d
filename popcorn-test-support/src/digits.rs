//! scikit-learn's digits (`tests/data/digits.csv` of the main crate, copied from shared/data:
//! 1797 points of 64 features, the class in the first column) and the agreement of two
//! labelings, for the accuracy tests of reduced precisions.

/// The digits' points as stored (features 0 to 16): `(n, d, values)`, row-major.
pub fn digits() -> (usize, usize, Vec<f64>) {
    let ds = popcorn_io::load(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/digits.csv"),
        &popcorn_io::LoadOptions::default(),
    )
    .expect("tests/data/digits.csv");
    (ds.n, ds.d, ds.x)
}

/// The fraction of positions where `a` and `b` hold the same label.
pub fn label_agreement(a: &[u32], b: &[u32]) -> f64 {
    assert_eq!(a.len(), b.len(), "labelings of different lengths");
    if a.is_empty() {
        return 1.0;
    }
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_digits_load_and_agreement_counts_equal_labels() {
        let (n, d, x) = super::digits();
        assert_eq!((n, d, x.len()), (1797, 64, 1797 * 64));
        assert_eq!(super::label_agreement(&[1, 2, 3, 4], &[1, 2, 0, 4]), 0.75);
    }
}
