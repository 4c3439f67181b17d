//! A small, stable 64-bit hash (FNV-1a) for naming generated kernels.
//!
//! `std`'s `DefaultHasher` may change between Rust releases, so kernel names derived from it
//! would not be stable across toolchains. FNV-1a is fixed by its definition: the same bytes give
//! the same hash on every platform and every version.

/// The FNV-1a 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64-bit hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::fnv1a64;

    #[test]
    fn matches_published_test_vectors() {
        // Reference values of the FNV-1a 64-bit definition.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn differs_for_different_inputs() {
        assert_ne!(fnv1a64(b"ab"), fnv1a64(b"ba"));
    }
}
