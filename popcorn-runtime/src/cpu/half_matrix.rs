//! Matrices held in 16 bits (bf16 or fp16, as their bits) on the CPU: widened to `f32` a few
//! rows at a time, so that the steps that stream a kernel matrix read half the bytes without
//! an `f32` copy of the whole matrix.

use super::clusters::{check_sums_shapes, cluster_sums};
use super::error::CpuError;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use kernel_ir::Half;

/// Rows widened together by [`cluster_sums_half`]: the eight-row groups of the `f32` sums.
const ROWS_PER_GROUP: usize = 8;

/// `bits` (16-bit values of `half`) widened into `out` (same length).
pub fn widen(half: Half, bits: &[u16], out: &mut [f32]) {
    match half {
        Half::Bf16 => {
            let values: &[half::bf16] = bytemuck_bf16(bits);
            values.convert_to_f32_slice(out);
        }
        Half::F16 => {
            let values: &[half::f16] = bytemuck_f16(bits);
            values.convert_to_f32_slice(out);
        }
    }
}

/// `values` rounded to `half` (to nearest even) into `out` (same length), as bits.
pub fn narrow(half: Half, values: &[f32], out: &mut [u16]) {
    match half {
        Half::Bf16 => out
            .reinterpret_cast_mut::<half::bf16>()
            .convert_from_f32_slice(values),
        Half::F16 => out
            .reinterpret_cast_mut::<half::f16>()
            .convert_from_f32_slice(values),
    }
}

/// The bits as `bf16` values (the same 16-bit layout).
fn bytemuck_bf16(bits: &[u16]) -> &[half::bf16] {
    bits.reinterpret_cast()
}

/// The bits as `f16` values (the same 16-bit layout).
fn bytemuck_f16(bits: &[u16]) -> &[half::f16] {
    bits.reinterpret_cast()
}

/// [`cluster_sums`] of a matrix held in 16 bits: `out[i * k + c]` = the `f32` sum of the widened
/// `m[i * ldm + j]` over the `j` with `labels[j] == c`. Groups of eight rows are widened into a
/// per-thread buffer and summed as `f32` rows are (in column order per row): the result equals
/// that of the widened matrix, whatever the thread count.
///
/// # Errors
/// As [`cluster_sums`]: a label `>= k`, or slices too short.
#[allow(clippy::too_many_arguments)]
pub fn cluster_sums_half(
    rows: usize,
    cols: usize,
    m: &[u16],
    ldm: usize,
    half: Half,
    labels: &[u32],
    k: usize,
    out: &mut [f32],
) -> Result<(), CpuError> {
    use rayon::prelude::*;
    check_sums_shapes(rows, cols, m.len(), ldm, k, out.len())?;
    if k == 0 || rows == 0 {
        // The checks of labels and shapes, on nothing.
        return cluster_sums::<f32>(0, cols, &[], ldm.max(cols), labels, k, out);
    }
    out[..rows * k]
        .par_chunks_mut(ROWS_PER_GROUP * k)
        .enumerate()
        .try_for_each_init(Vec::new, |wide: &mut Vec<f32>, (g, acc)| {
            let i0 = g * ROWS_PER_GROUP;
            let n = acc.len() / k;
            wide.resize(n * cols, 0.0);
            for (r, row) in wide.chunks_mut(cols.max(1)).enumerate().take(n) {
                let start = (i0 + r) * ldm;
                widen(half, &m[start..start + cols], row);
            }
            cluster_sums::<f32>(n, cols, wide, cols, labels, k, acc)
        })
}

/// The diagonal, widened, of a matrix held in 16 bits: `out[i] = a[i * lda + offset + i]`.
///
/// # Errors
/// [`CpuError::Shape`] for slices too short.
pub fn diag_half(
    n: usize,
    offset: usize,
    a: &[u16],
    lda: usize,
    half: Half,
    out: &mut [f32],
) -> Result<(), CpuError> {
    if n > 0 && (lda < n + offset || a.len() < (n - 1) * lda + offset + n) {
        return Err(CpuError::Shape {
            operand: "A".into(),
            detail: format!("{} values for {n} rows of {lda}", a.len()),
        });
    }
    if out.len() < n {
        return Err(CpuError::Shape {
            operand: "out".into(),
            detail: format!("{} values for {n}", out.len()),
        });
    }
    for (i, o) in out[..n].iter_mut().enumerate() {
        *o = crate::backend::from_half_bits(half, a[i * lda + offset + i]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(half: Half, v: &[f32]) -> Vec<u16> {
        v.iter()
            .map(|x| crate::backend::to_half_bits(half, *x))
            .collect()
    }

    #[test]
    fn sums_of_widened_rows_equal_those_of_the_f32_matrix() {
        for half in [Half::Bf16, Half::F16] {
            for &(rows, cols, k) in &[(1, 1, 1), (9, 13, 3), (17, 100, 7), (33, 5, 40)] {
                let ld = cols + 3;
                let m: Vec<f32> = (0..rows * ld)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 8.0)
                    .collect();
                let labels: Vec<u32> = (0..cols).map(|j| (j * 5 % k) as u32).collect();
                let held = bits(half, &m);
                let mut wide = vec![0.0f32; held.len()];
                widen(half, &held, &mut wide);
                let mut want = vec![0.0f32; rows * k];
                cluster_sums::<f32>(rows, cols, &wide, ld, &labels, k, &mut want).unwrap();
                let mut got = vec![f32::NAN; rows * k];
                cluster_sums_half(rows, cols, &held, ld, half, &labels, k, &mut got).unwrap();
                assert_eq!(got, want, "{half} {rows}x{cols} k {k}");
                let mut d = vec![0.0f32; rows.min(cols)];
                let n = rows.min(cols);
                diag_half(n, 0, &held, ld, half, &mut d).unwrap();
                for (i, v) in d.iter().enumerate() {
                    assert_eq!(*v, wide[i * ld + i]);
                }
            }
        }
    }

    #[test]
    fn narrowing_rounds_each_value_as_the_scalar_conversion_does() {
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 1.37e-3).collect();
        for half in [Half::Bf16, Half::F16] {
            let mut bits = vec![0u16; values.len()];
            narrow(half, &values, &mut bits);
            let want: Vec<u16> = values
                .iter()
                .map(|v| crate::backend::to_half_bits(half, *v))
                .collect();
            assert_eq!(bits, want);
        }
    }

    #[test]
    fn bad_labels_and_short_slices_are_errors() {
        let held = bits(Half::Bf16, &[1.0; 6]);
        let mut out = vec![0.0f32; 4];
        assert!(matches!(
            cluster_sums_half(2, 3, &held, 3, Half::Bf16, &[0, 1, 2], 2, &mut out),
            Err(CpuError::LabelOutOfRange { .. })
        ));
        assert!(cluster_sums_half(3, 3, &held, 3, Half::Bf16, &[0, 1, 1], 2, &mut out).is_err());
        assert!(diag_half(3, 0, &held, 3, Half::Bf16, &mut out).is_err());
    }
}
