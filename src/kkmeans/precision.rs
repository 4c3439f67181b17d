//! The precision of the kernel's products ([`ProductPrecision`]) and the range check of fp16
//! operands.

use super::{FitError, Kernel};
use kernel_ir::{Half, Precision};
use serde::Serialize;

/// How the kernel's products multiply their f32 operands on a GPU
/// ([`KernelKMeans::precision`](super::KernelKMeans::precision)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum ProductPrecision {
    /// Strict fp32 (fused multiply-adds on the ordinary cores).
    #[default]
    Strict,
    /// Operands rounded to TF32 (11 significant bits) on tensor cores.
    Tf32,
    /// Operands rounded to bf16 (8 significant bits, the range of f32) on 16-bit tensor cores.
    Bf16,
    /// Operands rounded to fp16 (11 significant bits, at most 65504 in magnitude) on 16-bit
    /// tensor cores.
    Fp16,
    /// Each operand split into a TF32 part and the TF32 rounding of the rest, three TF32
    /// products accumulated in f32 (3xTF32): about fp32's accuracy on tensor cores.
    Tf32x3,
}

impl ProductPrecision {
    /// The name the CLI takes and reports print: `strict`, `tf32`, `bf16`, `fp16` or `3xtf32`
    /// (the plans' name of the same precision).
    pub fn name(self) -> &'static str {
        Precision::from(self).name()
    }
}

impl From<ProductPrecision> for Precision {
    fn from(p: ProductPrecision) -> Precision {
        match p {
            ProductPrecision::Strict => Precision::Strict,
            ProductPrecision::Tf32 => Precision::Tf32,
            ProductPrecision::Bf16 => Precision::Half(Half::Bf16),
            ProductPrecision::Fp16 => Precision::Half(Half::F16),
            ProductPrecision::Tf32x3 => Precision::Tf32x3,
        }
    }
}

impl From<Precision> for ProductPrecision {
    fn from(p: Precision) -> ProductPrecision {
        match p {
            Precision::Strict => ProductPrecision::Strict,
            Precision::Tf32 => ProductPrecision::Tf32,
            Precision::Half(Half::Bf16) => ProductPrecision::Bf16,
            Precision::Half(Half::F16) => ProductPrecision::Fp16,
            Precision::Tf32x3 => ProductPrecision::Tf32x3,
        }
    }
}

impl std::fmt::Display for ProductPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ProductPrecision {
    type Err = String;

    /// `strict` (or `fp32`, `f32`), `tf32`, `bf16` (or `bfloat16`), `fp16` (or `f16`,
    /// `float16`), `3xtf32` (or `tf32x3`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "strict" | "fp32" | "f32" | "float32" => Ok(ProductPrecision::Strict),
            "tf32" => Ok(ProductPrecision::Tf32),
            "bf16" | "bfloat16" => Ok(ProductPrecision::Bf16),
            "fp16" | "f16" | "float16" => Ok(ProductPrecision::Fp16),
            "3xtf32" | "tf32x3" => Ok(ProductPrecision::Tf32x3),
            other => Err(format!(
                "unknown precision {other:?}; use strict, tf32, bf16, fp16 or 3xtf32"
            )),
        }
    }
}

/// Checks that the operands of fp16 products stay within fp16's range: the points
/// (`x`, as the fit computes with them) or, for the features algorithm, the kernel's features
/// (degree 1: `sqrt(gamma) |x|` and `sqrt(coef0)`; degree 2: at most `max(1, |x|)^2` times the
/// largest feature coefficient). An operand beyond 65504 would become infinite; the error
/// names the fixes.
pub(crate) fn check_fp16_range(
    half_products: Option<Half>,
    kernel: &Kernel,
    x: &[f64],
    features: bool,
) -> Result<(), FitError> {
    if half_products != Some(Half::F16) {
        return Ok(());
    }
    let largest = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let operand = match *kernel {
        // Degree 1: sqrt(gamma) x and sqrt(coef0).
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } if features && degree == 1.0 => (gamma.abs().sqrt() * largest).max(coef0.abs().sqrt()),
        // Degree 2: gamma x_a x_b (times sqrt(2) off the diagonal), sqrt(2 gamma coef0) x_a and
        // coef0, each at most max(1, |x|)^2 times the largest coefficient.
        Kernel::Polynomial { gamma, coef0, .. } if features => {
            let coefficient = (gamma.abs() * std::f64::consts::SQRT_2)
                .max((2.0 * gamma.abs() * coef0.abs()).sqrt())
                .max(coef0.abs());
            largest.max(1.0).powi(2) * coefficient
        }
        _ => largest,
    };
    let limit = Half::F16.max_finite();
    if operand > limit {
        let what = if features {
            "the kernel's features reach"
        } else {
            "the points reach"
        };
        return Err(FitError::Input(format!(
            "fp16 products: {what} {operand:.6e} in magnitude and fp16 holds at most {limit:.0}; \
             z-score the points (zscore), scale them, or use bf16 products (the range of f32)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for p in [
            ProductPrecision::Strict,
            ProductPrecision::Tf32,
            ProductPrecision::Bf16,
            ProductPrecision::Fp16,
            ProductPrecision::Tf32x3,
        ] {
            assert_eq!(p.name().parse::<ProductPrecision>(), Ok(p));
        }
        assert_eq!("BFloat16".parse(), Ok(ProductPrecision::Bf16));
        assert!("fp8"
            .parse::<ProductPrecision>()
            .unwrap_err()
            .contains("fp8"));
    }

    #[test]
    fn fp16_operands_beyond_its_range_are_refused_by_name() {
        let poly = Kernel::Polynomial {
            gamma: 1.0,
            coef0: 1.0,
            degree: 2.0,
        };
        let big = [1.0, -70_000.0];
        assert!(check_fp16_range(Some(Half::Bf16), &poly, &big, false).is_ok());
        assert!(check_fp16_range(None, &poly, &big, true).is_ok());
        let err = check_fp16_range(Some(Half::F16), &poly, &big, false).unwrap_err();
        assert!(err.to_string().contains("65504"), "{err}");
        assert!(err.to_string().contains("zscore"), "{err}");
        // 300^2 * sqrt(2) passes 65504 as a feature, not as a point.
        let mid = [300.0, 0.5];
        assert!(check_fp16_range(Some(Half::F16), &poly, &mid, false).is_ok());
        let err = check_fp16_range(Some(Half::F16), &poly, &mid, true).unwrap_err();
        assert!(err.to_string().contains("features"), "{err}");
        // Degree 1: the features are sqrt(gamma) x and sqrt(coef0), 300 at most.
        let linear_poly = Kernel::Polynomial {
            gamma: 1.0,
            coef0: 1.0,
            degree: 1.0,
        };
        assert!(check_fp16_range(Some(Half::F16), &linear_poly, &mid, true).is_ok());
    }
}
