//! `exp` over a slice, four values at a time with AVX2 and FMA where the processor has them
//! (detected at run time), else one at a time with the platform's `exp`.
//!
//! The vector path computes in `f64` (an `f32` slice is widened four values at a time and the
//! result rounded back): `x = n ln 2 + r` with `n` the nearest integer to `x / ln 2` and
//! `|r| <= ln 2 / 2`, `ln 2` split in two parts so that `n ln 2` is subtracted without
//! rounding error (Cody and Waite), `e^r` by its Taylor polynomial of degree 13 (truncation
//! below 5e-18) evaluated with fused multiply-adds, and `2^n` set in the exponent bits. The
//! result is within 2 ulp of the exact `e^x` in `f64` (checked against the platform's `exp` by
//! the tests below), and as exact as the platform's `expf` in `f32`. Values outside
//! [-700, 700] and NaN (overflow, results below the normal range, infinities) take the
//! platform's `exp`. A value's result never depends on where it lies in the slice (the tail and
//! the vectors holding such values compute each value alone, with the same operations), so a
//! tile's or a rank's split of a matrix gives the same bits as the whole.
//!
//! The gaussian kernel's map (`exp(-gamma * d^2)` over every element of `K`) is the CPU's
//! heaviest use: 4 ns per element through the scalar `exp` on this project's machine.

use super::real::Real;
use kernel_ir::ScalarType;

/// `out[i] = exp(src[i])` (for the `i` both slices hold), or `out[i] = exp(out[i])` in place
/// where `src` is `None`.
pub(super) fn exp_slice<T: Real>(src: Option<&[T]>, out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    {
        if vector_available() {
            // As many values as both slices hold (the scalar path's zip).
            let len = src.map_or(out.len(), |s| s.len().min(out.len()));
            let src = src.map(|s| &s[..len]);
            match T::SCALAR_TYPE {
                // SAFETY (both arms): `Real` is sealed to f32 and f64 and SCALAR_TYPE names
                // which one `T` is, so the slices are reinterpreted as their own type; AVX2 and
                // FMA are present (checked above).
                ScalarType::F64 => unsafe {
                    let out = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f64>(), len);
                    let src =
                        src.map(|s| std::slice::from_raw_parts(s.as_ptr().cast::<f64>(), s.len()));
                    x86::exp_f64(src, out)
                },
                ScalarType::F32 => unsafe {
                    let out = std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<f32>(), len);
                    let src =
                        src.map(|s| std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()));
                    x86::exp_f32(src, out)
                },
            }
            return;
        }
    }
    scalar(src, out)
}

/// The platform's `exp`, one value at a time.
fn scalar<T: Real>(src: Option<&[T]>, out: &mut [T]) {
    match src {
        Some(xs) => out.iter_mut().zip(xs).for_each(|(o, &x)| *o = x.exp()),
        None => out.iter_mut().for_each(|o| *o = o.exp()),
    }
}

/// Whether the vector path can run on this processor.
fn vector_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `ln 2` in two parts: the first with its low 21 bits zero, so that `n * LN2_HI` is exact
    /// for `|n| < 2^21`.
    const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
    /// Where the vector path is used: `2^n` stays a normal number and `e^x` finite.
    const LIMIT: f64 = 700.0;
    /// `1 / i!` for `i = 0 ..= 13`.
    const TAYLOR: [f64; 14] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362880.0,
        1.0 / 3628800.0,
        1.0 / 39916800.0,
        1.0 / 479001600.0,
        1.0 / 6227020800.0,
    ];

    /// `e^x` for four values in [-LIMIT, LIMIT].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn exp4(x: __m256d) -> __m256d {
        let n = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_pd(x, _mm256_set1_pd(std::f64::consts::LOG2_E)),
        );
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_HI), x);
        let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_LO), r);
        let mut p = _mm256_set1_pd(TAYLOR[13]);
        for c in TAYLOR[..13].iter().rev() {
            p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(*c));
        }
        // 2^n: n + 1023 in the exponent field (|n| <= 1010 here).
        let n64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
        let two_n = _mm256_slli_epi64::<52>(_mm256_add_epi64(n64, _mm256_set1_epi64x(1023)));
        _mm256_mul_pd(p, _mm256_castsi256_pd(two_n))
    }

    /// Which of the four values are in [-LIMIT, LIMIT] (bit i for value i; not NaN).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn in_range(x: __m256d) -> i32 {
        let low = _mm256_cmp_pd::<_CMP_GE_OQ>(x, _mm256_set1_pd(-LIMIT));
        let high = _mm256_cmp_pd::<_CMP_LE_OQ>(x, _mm256_set1_pd(LIMIT));
        _mm256_movemask_pd(_mm256_and_pd(low, high))
    }

    /// `e^x` one value at a time, the same bits as the vector path: [`exp4`]'s operations in
    /// the same order with the same single roundings for `x` in [-LIMIT, LIMIT] (`mul_add`
    /// is the fused multiply-add), the platform's `exp` elsewhere.
    fn exp1(x: f64) -> f64 {
        if !(-LIMIT..=LIMIT).contains(&x) {
            return x.exp();
        }
        let n = (x * std::f64::consts::LOG2_E).round_ties_even();
        let r = (-n).mul_add(LN2_HI, x);
        let r = (-n).mul_add(LN2_LO, r);
        let mut p = TAYLOR[13];
        for c in TAYLOR[..13].iter().rev() {
            p = p.mul_add(r, *c);
        }
        p * f64::from_bits(((n as i64 + 1023) as u64) << 52)
    }

    /// [`super::exp_slice`] in `f64`.
    ///
    /// # Safety
    /// The processor supports AVX2 and FMA; `src`, where given, is at least as long as `out`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_f64(src: Option<&[f64]>, out: &mut [f64]) {
        let len = out.len();
        let whole = len / 4 * 4;
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 4 <= len <= the length of `out` and of `src`.
            let from = src.map_or(out.as_ptr().add(i), |s| s.as_ptr().add(i));
            let x = _mm256_loadu_pd(from);
            let ok = in_range(x);
            let to = out.as_mut_ptr().add(i);
            if ok == 0xF {
                _mm256_storeu_pd(to, exp4(x));
            } else {
                // Each value by itself (the result of a value never depends on its neighbours).
                for q in 0..4 {
                    *to.add(q) = exp1(*from.add(q));
                }
            }
            i += 4;
        }
        for j in whole..len {
            out[j] = exp1(src.map_or(out[j], |s| s[j]));
        }
    }

    /// [`super::exp_slice`] in `f32`: widened to `f64`, rounded back.
    ///
    /// # Safety
    /// As [`exp_f64`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_f32(src: Option<&[f32]>, out: &mut [f32]) {
        let len = out.len();
        let whole = len / 4 * 4;
        let mut i = 0;
        while i < whole {
            // SAFETY: as in exp_f64.
            let from = src.map_or(out.as_ptr().add(i), |s| s.as_ptr().add(i));
            let x = _mm256_cvtps_pd(_mm_loadu_ps(from));
            let to = out.as_mut_ptr().add(i);
            if in_range(x) == 0xF {
                _mm_storeu_ps(to, _mm256_cvtpd_ps(exp4(x)));
            } else {
                for q in 0..4 {
                    *to.add(q) = exp1_f32(*from.add(q));
                }
            }
            i += 4;
        }
        for j in whole..len {
            out[j] = exp1_f32(src.map_or(out[j], |s| s[j]));
        }
    }

    /// [`exp1`] for an `f32`: widened, rounded back (as the vector path converts), or the
    /// platform's `expf` outside [-LIMIT, LIMIT].
    fn exp1_f32(x: f32) -> f32 {
        let w = f64::from(x);
        if (-LIMIT..=LIMIT).contains(&w) {
            exp1(w) as f32
        } else {
            x.exp()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exp_slice;

    /// Units in the last place between two finite f64 of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    fn values() -> Vec<f64> {
        let mut v: Vec<f64> = (0..20_000)
            .map(|i| {
                // A deterministic sweep of [-760, 760] with irregular steps.
                let u = ((i as u64).wrapping_mul(2_654_435_761) % 1_000_003) as f64 / 1_000_003.0;
                -760.0 + 1520.0 * u
            })
            .collect();
        v.extend((0..2000).map(|i| (i as f64 - 1000.0) * 1e-3));
        v.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            700.0,
            -700.0,
            709.78,
            -708.5,
            -745.2,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            1e-300,
            -1e-300,
        ]);
        v
    }

    #[test]
    fn f64_is_within_two_ulp_of_the_platforms_exp() {
        let xs = values();
        let mut out = vec![f64::NAN; xs.len()];
        exp_slice(Some(&xs), &mut out);
        let mut in_place = xs.clone();
        exp_slice(None, &mut in_place);
        for ((x, got), again) in xs.iter().zip(&out).zip(&in_place) {
            let want = x.exp();
            assert_eq!(got.to_bits(), again.to_bits(), "exp({x}) in place");
            if want.is_nan() {
                assert!(got.is_nan(), "exp({x}) = {got}");
            } else if want == 0.0 || want.is_infinite() || want < f64::MIN_POSITIVE {
                assert_eq!(got.to_bits(), want.to_bits(), "exp({x})");
            } else {
                assert!(ulps(*got, want) <= 2, "exp({x}) = {got}, platform {want}");
            }
        }
    }

    #[test]
    fn f32_is_within_one_ulp_of_the_platforms_expf() {
        let xs: Vec<f32> = values()
            .into_iter()
            .map(|x| (x / 8.0) as f32)
            .chain([f32::NAN, f32::INFINITY, -f32::INFINITY, 88.7, -103.9])
            .collect();
        let mut out = vec![f32::NAN; xs.len()];
        exp_slice(Some(&xs), &mut out);
        for (x, got) in xs.iter().zip(&out) {
            let want = x.exp();
            if want.is_nan() {
                assert!(got.is_nan(), "exp({x}) = {got}");
            } else if want == 0.0 || want.is_infinite() {
                assert_eq!(*got, want, "exp({x})");
            } else {
                let d = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs();
                assert!(d <= 1, "exp({x}) = {got}, platform {want}");
            }
        }
    }

    /// A value's result is the same wherever it lies: in a vector of four, in the tail, or
    /// beside values outside the vector path's range (so a split of a matrix into tiles or
    /// ranks gives the same bits).
    #[test]
    fn results_do_not_depend_on_position() {
        let xs: Vec<f64> = values()
            .into_iter()
            .take(4000)
            .chain([800.0, f64::NAN, -1.5])
            .collect();
        let mut whole = vec![0.0; xs.len()];
        exp_slice(Some(&xs), &mut whole);
        for start in 0..7 {
            for (i, x) in xs.iter().enumerate().skip(start).step_by(5) {
                let mut one = [0.0];
                exp_slice(Some(&[*x]), &mut one);
                let mut part = vec![0.0; xs.len() - start];
                exp_slice(Some(&xs[start..]), &mut part);
                let (a, b, c) = (whole[i], one[0], part[i - start]);
                assert!(
                    (a.to_bits() == b.to_bits() && b.to_bits() == c.to_bits())
                        || (a.is_nan() && b.is_nan() && c.is_nan()),
                    "exp({x}): {a} whole, {b} alone, {c} from offset {start}"
                );
            }
        }
        let xf: Vec<f32> = xs.iter().map(|x| (*x / 8.0) as f32).collect();
        let mut wf = vec![0.0f32; xf.len()];
        exp_slice(Some(&xf), &mut wf);
        for (i, x) in xf.iter().enumerate().step_by(3) {
            let mut one = [0.0f32];
            exp_slice(Some(&[*x]), &mut one);
            assert!(
                wf[i].to_bits() == one[0].to_bits() || (wf[i].is_nan() && one[0].is_nan()),
                "expf({x})"
            );
        }
    }
}
