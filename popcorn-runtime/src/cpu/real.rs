//! The floating-point element types the CPU primitives compute in: `f32` and `f64`.

use std::fmt::{Debug, Display};
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub};

use kernel_ir::ScalarType;

mod sealed {
    /// Restricts [`super::Real`] to `f32` and `f64`, the only real types the `gemm` crate
    /// multiplies (it panics on any other).
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A real floating-point element type: implemented for `f32` and `f64` only (sealed).
pub trait Real:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + Debug
    + Display
    + Default
    + PartialOrd
    + PartialEq
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + MulAssign
{
    /// The kernel-spec scalar type this Rust type corresponds to.
    const SCALAR_TYPE: ScalarType;
    /// Converts from `f64` (rounding to nearest for `f32`).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` (exact).
    fn to_f64(self) -> f64;
    /// `0`.
    fn zero() -> Self;
    /// `1`.
    fn one() -> Self;
    /// `+inf`.
    fn infinity() -> Self;
    /// `-inf`.
    fn neg_infinity() -> Self;
    /// A quiet NaN.
    fn nan() -> Self;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// `self` raised to `e`; the exponents 1, 2, 3 and 4 by multiplication (`(x x) x`,
    /// `(x x)(x x)`), as the generated CUDA kernels do.
    fn powf(self, e: Self) -> Self;
    /// Larger of the two; if exactly one is NaN the other is returned (C `fmax`).
    fn max(self, other: Self) -> Self;
    /// Smaller of the two; if exactly one is NaN the other is returned (C `fmin`).
    fn min(self, other: Self) -> Self;
}

macro_rules! impl_real {
    ($t:ty, $st:expr) => {
        impl Real for $t {
            const SCALAR_TYPE: ScalarType = $st;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn zero() -> Self {
                0.0
            }
            #[inline(always)]
            fn one() -> Self {
                1.0
            }
            #[inline(always)]
            fn infinity() -> Self {
                <$t>::INFINITY
            }
            #[inline(always)]
            fn neg_infinity() -> Self {
                <$t>::NEG_INFINITY
            }
            #[inline(always)]
            fn nan() -> Self {
                <$t>::NAN
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn powf(self, e: Self) -> Self {
                // The exponents of polynomial kernels by multiplication, exactly as the
                // generated CUDA's `pk_pow_*` (kernels-gen's prelude) does, so both backends
                // round them alike; `x * x` is the correctly rounded square.
                if e == 2.0 {
                    self * self
                } else if e == 3.0 {
                    (self * self) * self
                } else if e == 4.0 {
                    let s = self * self;
                    s * s
                } else if e == 1.0 {
                    self
                } else {
                    <$t>::powf(self, e)
                }
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                // std's `max` ignores a NaN operand, exactly like C `fmax`.
                <$t>::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
        }
    };
}

impl_real!(f32, ScalarType::F32);
impl_real!(f64, ScalarType::F64);

/// Sum of a slice with eight interleaved accumulators (vectorisable, and a fixed order so the
/// result is deterministic).
#[inline]
pub(crate) fn sum_slice<T: Real>(v: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] += c[l];
        }
    }
    let mut t = T::zero();
    for &x in tail {
        t += x;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t
}

/// Dot product of two equally long slices with eight interleaved accumulators.
#[inline]
pub(crate) fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [T::zero(); 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut t = T::zero();
    for (&x, &y) in ta.iter().zip(tb) {
        t += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t
}

/// `alpha * value + beta * old`, where `beta == 0` means `old` is not read (it may be NaN).
#[inline(always)]
pub(crate) fn blend<T: Real>(alpha_value: T, beta: T, old: T) -> T {
    if beta == T::zero() {
        alpha_value
    } else {
        alpha_value + beta * old
    }
}

/// Scales `v` by `beta` in place; `beta == 0` writes zeros without reading (NaN-safe).
#[inline]
pub(crate) fn scale_in_place<T: Real>(v: &mut [T], beta: T) {
    if beta == T::zero() {
        v.fill(T::zero());
    } else if beta != T::one() {
        for x in v.iter_mut() {
            *x *= beta;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Real;

    #[test]
    fn small_integer_powers_are_the_products_the_gpu_computes() {
        for x in [
            1.1f32,
            -2.7,
            3.0e-20,
            7.5e12,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NAN,
        ] {
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            assert!(same(Real::powf(x, 1.0), x), "{x}");
            assert!(same(Real::powf(x, 2.0), x * x), "{x}");
            assert!(same(Real::powf(x, 3.0), (x * x) * x), "{x}");
            assert!(same(Real::powf(x, 4.0), (x * x) * (x * x)), "{x}");
            // Other exponents go to the library's pow.
            assert!(same(Real::powf(x, 2.5), f32::powf(x, 2.5)), "{x}");
        }
        assert_eq!(Real::powf(3.0f64, 3.0), 27.0);
        assert_eq!(Real::powf(-2.0f64, 0.0), 1.0);
    }
}
