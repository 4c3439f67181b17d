//! Sums by label of eight `f32` rows at once with AVX (x86-64, detected at run time).
//!
//! The rows' bins are kept transposed, `bins[label]` holding the eight rows' sums for that
//! label side by side. Eight columns of the eight rows are loaded and transposed in registers,
//! so each column becomes one vector of its eight rows, added to its label's bins with one
//! load, one add and one store: about one instruction per element, against four or five for
//! adding row by row. Each row still adds its values to each bin in column order, so the sums
//! are those of the row alone, bit for bit.

/// Whether [`sum_eight_rows`] can run on this processor.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Labels checked once to be below `k`.
#[derive(Clone, Copy)]
pub(super) struct Labels<'a> {
    labels: &'a [u32],
    k: usize,
}

impl<'a> Labels<'a> {
    /// `labels`, if every one is below `k`; else the position of the first that is not.
    pub(super) fn new(labels: &'a [u32], k: usize) -> Result<Self, usize> {
        match labels.iter().position(|&l| l as usize >= k) {
            Some(p) => Err(p),
            None => Ok(Labels { labels, k }),
        }
    }

    /// The labels.
    pub(super) fn as_slice(&self) -> &'a [u32] {
        self.labels
    }
}

/// Adds `rows[r][j]` to `bins[labels[j]][r]` for the eight rows and every column
/// `j < labels.len()`, in column order. Returns false, touching nothing, when AVX is missing
/// (see [`available`]), a row is shorter than the labels or there are fewer bins than `k`.
pub(super) fn sum_eight_rows(rows: [&[f32]; 8], labels: Labels<'_>, bins: &mut [[f32; 8]]) -> bool {
    let cols = labels.labels.len();
    if rows.iter().any(|r| r.len() < cols) || bins.len() < labels.k {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if available() {
            // SAFETY: AVX is present (checked just above); every row holds `cols` values and
            // every label is below k <= bins.len() (Labels::new and the check on entry),
            // which is all the function reads and writes.
            unsafe { eight_rows_avx(&rows, labels.labels, bins) };
            return true;
        }
    }
    false
}

/// The AVX body of [`sum_eight_rows`].
///
/// # Safety
/// The processor supports AVX; each of `rows` holds at least `labels.len()` values; every
/// label is below `bins.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn eight_rows_avx(rows: &[&[f32]; 8], labels: &[u32], bins: &mut [[f32; 8]]) {
    use std::arch::x86_64::*;
    let cols = labels.len();
    let whole = cols / 8 * 8;
    let mut j = 0;
    while j < whole {
        // SAFETY (loads): j + 8 <= cols <= each row's length.
        let load = |r: usize| _mm256_loadu_ps(rows[r].as_ptr().add(j));
        let (r0, r1, r2, r3) = (load(0), load(1), load(2), load(3));
        let (r4, r5, r6, r7) = (load(4), load(5), load(6), load(7));
        // Transpose 8 x 8: pairs of rows interleaved, then quadruples, then the 128-bit halves.
        let t0 = _mm256_unpacklo_ps(r0, r1);
        let t1 = _mm256_unpackhi_ps(r0, r1);
        let t2 = _mm256_unpacklo_ps(r2, r3);
        let t3 = _mm256_unpackhi_ps(r2, r3);
        let t4 = _mm256_unpacklo_ps(r4, r5);
        let t5 = _mm256_unpackhi_ps(r4, r5);
        let t6 = _mm256_unpacklo_ps(r6, r7);
        let t7 = _mm256_unpackhi_ps(r6, r7);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let columns = [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ];
        for (q, column) in columns.into_iter().enumerate() {
            // SAFETY (bins): the label is below bins.len(); each bin is 8 floats.
            let bin = bins
                .get_unchecked_mut(*labels.get_unchecked(j + q) as usize)
                .as_mut_ptr();
            _mm256_storeu_ps(bin, _mm256_add_ps(_mm256_loadu_ps(bin), column));
        }
        j += 8;
    }
    for j in whole..cols {
        let bin = &mut bins[labels[j] as usize];
        for (b, row) in bin.iter_mut().zip(rows) {
            *b += row[j];
        }
    }
}
