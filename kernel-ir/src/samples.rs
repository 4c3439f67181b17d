//! Sample specs for the tests of the crates that generate and run kernels (feature
//! `samples`): one contraction that exercises every part of the form at once.

use crate::{
    Access, BinaryOp, Expr, Form, Input, KernelSpec, Precision, ReduceKind, Reduction, ScalarType,
    UnaryOp,
};

/// A contraction in the shape of a Lloyd step and a kernel smoother.
///
/// Inputs: 0 `A` (left operand, transposed when `ta`), 1 `B` (right operand, transposed when
/// `tb`), 2 `cn` (row), 3 `y` (row), 4 `labels` (index row), 5 `idx` (index col), 6 `g`
/// (scalar). With `P` the product, `dist = cn[j] - 2 P` and `wgt = exp(-g * max(dist, 0))`:
/// stores `[P, dist]`; reductions argmin, min and max of `dist`, sum of `wgt`, dot of `wgt`
/// with `y`, sums of `wgt` by label (when `by_label`), `P` picked at `idx[i]`.
pub fn mixed_contraction(
    dtype: ScalarType,
    (ta, tb): (bool, bool),
    precision: Precision,
    by_label: bool,
) -> KernelSpec {
    let dist = Expr::binary(
        BinaryOp::Sub,
        Expr::Input(2),
        Expr::binary(BinaryOp::Mul, Expr::Const(2.0), Expr::Product),
    );
    let wgt = Expr::unary(
        UnaryOp::Exp,
        Expr::binary(
            BinaryOp::Mul,
            Expr::unary(UnaryOp::Neg, Expr::Input(6)),
            Expr::binary(BinaryOp::Max, dist.clone(), Expr::Const(0.0)),
        ),
    );
    let reduce = |kind, expr: &Expr| Reduction {
        kind,
        expr: expr.clone(),
    };
    let input = |name: &str, access| Input {
        name: name.into(),
        access,
    };
    let mut reductions = vec![
        reduce(ReduceKind::ArgMin, &dist),
        reduce(ReduceKind::Min, &dist),
        reduce(ReduceKind::Max, &dist),
        reduce(ReduceKind::Sum, &wgt),
        reduce(ReduceKind::Dot { weights: 3 }, &wgt),
    ];
    if by_label {
        reductions.push(reduce(ReduceKind::ByLabel { labels: 4 }, &wgt));
    }
    reductions.push(reduce(ReduceKind::Pick { index_input: 5 }, &Expr::Product));
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![
            input("A", Access::Left { transposed: ta }),
            input("B", Access::Right { transposed: tb }),
            input("cn", Access::Row),
            input("y", Access::Row),
            input("labels", Access::IndexRow),
            input("idx", Access::IndexCol),
            input("g", Access::Scalar),
        ],
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision,
            symmetric: false,
            stores: vec![Expr::Product, dist],
            reductions,
        },
        provenance: vec!["mixed contraction".to_string()],
    }
}

/// Kernel K-means' sums of a polynomial kernel by label, as the recomputing plans fuse them:
/// `K = (g P + 1)^2` with `P = A A^T`, summed by the labels of the columns, the symmetric form
/// (one triangle of tiles where the backend has it).
///
/// Inputs: 0 `A` (left operand), 1 `B` (right operand, transposed: the same matrix as `A`),
/// 2 `labels` (index row), 3 `g` (scalar).
pub fn symmetric_kernel_sums(dtype: ScalarType, precision: Precision) -> KernelSpec {
    let scaled = Expr::binary(
        BinaryOp::Add,
        Expr::binary(BinaryOp::Mul, Expr::Input(3), Expr::Product),
        Expr::Const(1.0),
    );
    let kernel = Expr::binary(BinaryOp::Mul, scaled.clone(), scaled);
    let input = |name: &str, access| Input {
        name: name.into(),
        access,
    };
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![
            input("A", Access::Left { transposed: false }),
            input("B", Access::Right { transposed: true }),
            input("labels", Access::IndexRow),
            input("g", Access::Scalar),
        ],
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision,
            symmetric: true,
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::ByLabel { labels: 2 },
                expr: kernel,
            }],
        },
        provenance: vec!["symmetric kernel sums".to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Half;

    #[test]
    fn the_symmetric_kernel_sums_are_valid() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            for precision in [
                Precision::Strict,
                Precision::Tf32,
                Precision::Half(Half::Bf16),
                Precision::Half(Half::F16),
            ] {
                let spec = symmetric_kernel_sums(dtype, precision);
                assert!(spec.validate().is_ok(), "{:?}", spec.problems());
            }
        }
    }

    #[test]
    fn the_mixed_contraction_is_valid_with_and_without_sums_by_label() {
        for by_label in [false, true] {
            for dtype in [ScalarType::F32, ScalarType::F64] {
                let spec = mixed_contraction(dtype, (false, true), Precision::Strict, by_label);
                assert!(spec.validate().is_ok(), "{:?}", spec.problems());
            }
        }
    }

    /// A kernel matrix stored in 16 bits from the product and scalars alone may be mirrored;
    /// not in 32 bits, nor beside a reduction, nor where its value reads a row of points.
    #[test]
    fn only_one_sixteen_bit_store_of_the_product_and_scalars_is_mirrorable() {
        let kernel_matrix = |narrow: bool, extra_reduction: bool, reads_a_row: bool| {
            let mut spec = symmetric_kernel_sums(ScalarType::F32, Precision::Tf32);
            let Form::Contraction {
                symmetric,
                stores,
                reductions,
                ..
            } = &mut spec.form
            else {
                unreachable!("a contraction sample")
            };
            *symmetric = false;
            let mut value = reductions.remove(0).expr;
            if reads_a_row {
                spec.inputs.push(Input {
                    name: "w".into(),
                    access: Access::Row,
                });
                value = Expr::binary(BinaryOp::Mul, value, Expr::Input(4));
            }
            if extra_reduction {
                reductions.push(Reduction {
                    kind: ReduceKind::Sum,
                    expr: Expr::Product,
                });
            }
            stores.push(value);
            if narrow {
                spec.narrow.outputs.push((0, Half::Bf16));
            }
            assert!(spec.validate().is_ok(), "{:?}", spec.problems());
            spec.stores_a_mirrorable_value()
        };
        assert!(kernel_matrix(true, false, false));
        assert!(!kernel_matrix(false, false, false));
        assert!(!kernel_matrix(true, true, false));
        assert!(!kernel_matrix(true, false, true));
        assert!(
            !symmetric_kernel_sums(ScalarType::F32, Precision::Tf32).stores_a_mirrorable_value()
        );
    }
}
