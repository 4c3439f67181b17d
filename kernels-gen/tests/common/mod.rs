//! Sample kernel specs shared by the tests and the `dump_kernels` example.
#![allow(dead_code)]

use kernel_ir::{
    Access, BinaryOp, Expr, Form, Input, KernelSpec, Precision, ReduceKind, Reduction, ScalarType,
    UnaryOp,
};

/// An input named `name` read as `access`.
pub fn input(name: &str, access: Access) -> Input {
    Input {
        name: name.to_string(),
        access,
    }
}

/// A non-transposed matrix access.
pub const MATRIX: Access = Access::Matrix { transposed: false };
/// A transposed matrix access.
pub const MATRIX_T: Access = Access::Matrix { transposed: true };

/// `a op b`.
pub fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

/// `op(a)`.
pub fn un(op: UnaryOp, a: Expr) -> Expr {
    Expr::unary(op, a)
}

/// `Input(k)`.
pub fn inp(k: usize) -> Expr {
    Expr::Input(k)
}

/// A constant.
pub fn c(v: f64) -> Expr {
    Expr::Const(v)
}

/// Map: inputs X (matrix), b (row), c (col), s (scalar), Y (matrix read transposed),
/// g (broadcast); outputs
/// `out0 = X * s + b`, `out1 = exp(-|X - c|)`, `out2 = Y^T + g`.
pub fn map_affine(dtype: ScalarType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![
            input("X", MATRIX),
            input("b", Access::Row),
            input("c", Access::Col),
            input("s", Access::Scalar),
            input("Y", MATRIX_T),
            input("g", Access::Broadcast),
        ],
        form: Form::Map {
            outputs: vec![
                bin(BinaryOp::Add, bin(BinaryOp::Mul, inp(0), inp(3)), inp(1)),
                un(
                    UnaryOp::Exp,
                    un(
                        UnaryOp::Neg,
                        un(UnaryOp::Abs, bin(BinaryOp::Sub, inp(0), inp(2))),
                    ),
                ),
                bin(BinaryOp::Add, inp(4), inp(5)),
            ],
        },
        provenance: vec!["affine".to_string(), "gauss".to_string()],
    }
}

/// Map exercising every operation on one matrix X (positive entries); outputs:
/// - `out0 = sqrt(X) + log(X) + tanh(X) + pow(X, 2.5)`
/// - `out1 = max(X, 0.5) - min(X, 0.5)`
/// - `out2 = select(X < 0.5, X, -X)`
/// - `out3 = (X <= 0.5) + 2 (X > 0.5) + 4 (X >= 0.5) + 8 (X == 0.5) + 16 (X != 0.5)`
/// - `out4 = X / 3`
/// - `out5 = min(X, +inf) + max(X, -inf)`
pub fn map_all_ops(dtype: ScalarType) -> KernelSpec {
    let x = || inp(0);
    let half = || c(0.5);
    let flag = |op: BinaryOp, weight: f64| bin(BinaryOp::Mul, bin(op, x(), half()), c(weight));
    let sum = |terms: Vec<Expr>| {
        terms
            .into_iter()
            .reduce(|a, b| bin(BinaryOp::Add, a, b))
            .unwrap_or(c(0.0))
    };
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![input("X", MATRIX)],
        form: Form::Map {
            outputs: vec![
                sum(vec![
                    un(UnaryOp::Sqrt, x()),
                    un(UnaryOp::Log, x()),
                    un(UnaryOp::Tanh, x()),
                    bin(BinaryOp::Pow, x(), c(2.5)),
                ]),
                bin(
                    BinaryOp::Sub,
                    bin(BinaryOp::Max, x(), half()),
                    bin(BinaryOp::Min, x(), half()),
                ),
                Expr::select(bin(BinaryOp::Lt, x(), half()), x(), un(UnaryOp::Neg, x())),
                sum(vec![
                    flag(BinaryOp::Le, 1.0),
                    flag(BinaryOp::Gt, 2.0),
                    flag(BinaryOp::Ge, 4.0),
                    flag(BinaryOp::Eq, 8.0),
                    flag(BinaryOp::Ne, 16.0),
                ]),
                bin(BinaryOp::Div, x(), c(3.0)),
                bin(
                    BinaryOp::Add,
                    bin(BinaryOp::Min, x(), c(f64::INFINITY)),
                    bin(BinaryOp::Max, x(), c(f64::NEG_INFINITY)),
                ),
            ],
        },
        provenance: vec!["all_ops".to_string()],
    }
}

/// The K-means assignment shape. Inputs: K (matrix), d (col), r (row), idx (index col).
/// `dist = d - 2 K + r`; stores `[dist]`; reductions (outputs 1..=5):
/// sum, min, max, argmin of dist, and dist picked at `idx[i]`.
pub fn rows_kmeans(dtype: ScalarType) -> KernelSpec {
    let dist = bin(
        BinaryOp::Add,
        bin(BinaryOp::Sub, inp(1), bin(BinaryOp::Mul, c(2.0), inp(0))),
        inp(2),
    );
    let reduce = |kind| Reduction {
        kind,
        expr: dist.clone(),
    };
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![
            input("K", MATRIX),
            input("d", Access::Col),
            input("r", Access::Row),
            input("idx", Access::IndexCol),
        ],
        form: Form::Rows {
            stores: vec![dist.clone()],
            reductions: vec![
                reduce(ReduceKind::Sum),
                reduce(ReduceKind::Min),
                reduce(ReduceKind::Max),
                reduce(ReduceKind::ArgMin),
                reduce(ReduceKind::Pick { index_input: 3 }),
            ],
        },
        provenance: vec!["distances".to_string(), "assign".to_string()],
    }
}

/// Rows without stores: `out0 = sum_j X[i, j]`, `out1 = argmin_j X[i, j]`,
/// `out2 = X[i, idx[i]]` (inputs X, idx).
pub fn rows_reduce_only(dtype: ScalarType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![input("X", MATRIX), input("idx", Access::IndexCol)],
        form: Form::Rows {
            stores: vec![],
            reductions: vec![
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::Pick { index_input: 1 },
                    expr: inp(0),
                },
            ],
        },
        provenance: vec!["row_sums".to_string()],
    }
}

/// Columns: inputs X (matrix), b (row); `v = X * X - b`; outputs sum, min, max of v over i.
pub fn cols_stats(dtype: ScalarType) -> KernelSpec {
    let v = bin(BinaryOp::Sub, bin(BinaryOp::Mul, inp(0), inp(0)), inp(1));
    let reduce = |kind| Reduction {
        kind,
        expr: v.clone(),
    };
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![input("X", MATRIX), input("b", Access::Row)],
        form: Form::Cols {
            reductions: vec![
                reduce(ReduceKind::Sum),
                reduce(ReduceKind::Min),
                reduce(ReduceKind::Max),
            ],
        },
        provenance: vec!["col_stats".to_string()],
    }
}

/// The shared mixed contraction (`kernel_ir::samples`), `A * B^T`: with sums by label it
/// takes the tiled template, without them (`float`) the pipelined one.
pub fn contraction_mixed(dtype: ScalarType, tf32: bool, by_label: bool) -> KernelSpec {
    let precision = if tf32 {
        Precision::Tf32
    } else {
        Precision::Strict
    };
    kernel_ir::samples::mixed_contraction(dtype, (false, true), precision, by_label)
}

/// A contraction with both operands the other way round (A transposed, B not) and one store.
pub fn contraction_transposed(dtype: ScalarType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: vec![
            input("A", Access::Left { transposed: true }),
            input("B", Access::Right { transposed: false }),
        ],
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision: Precision::Strict,
            symmetric: false,
            stores: vec![un(UnaryOp::Tanh, Expr::Product)],
            reductions: vec![],
        },
        provenance: vec!["tanh_of_product".to_string()],
    }
}

/// Every sample, named, for both dtypes.
pub fn all_samples() -> Vec<(String, KernelSpec)> {
    type Builder = fn(ScalarType) -> KernelSpec;
    let builders: [(&str, Builder); 5] = [
        ("map_affine", map_affine),
        ("map_all_ops", map_all_ops),
        ("rows_kmeans", rows_kmeans),
        ("rows_reduce_only", rows_reduce_only),
        ("cols_stats", cols_stats),
    ];
    let mut out = Vec::new();
    for dtype in [ScalarType::F32, ScalarType::F64] {
        let suffix = match dtype {
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        };
        for (name, build) in builders {
            out.push((format!("{name}_{suffix}"), build(dtype)));
        }
        out.push((
            format!("contraction_strict_{suffix}"),
            contraction_mixed(dtype, false, true),
        ));
        out.push((
            format!("contraction_transposed_{suffix}"),
            contraction_transposed(dtype),
        ));
    }
    out.push((
        "contraction_tf32_f32".to_string(),
        contraction_mixed(ScalarType::F32, true, true),
    ));
    out.push((
        "contraction_pipelined_strict_f32".to_string(),
        contraction_mixed(ScalarType::F32, false, false),
    ));
    out.push((
        "contraction_pipelined_tf32_f32".to_string(),
        contraction_mixed(ScalarType::F32, true, false),
    ));
    out.push((
        "contraction_symmetric_3xtf32_f32".to_string(),
        kernel_ir::samples::symmetric_kernel_sums(ScalarType::F32, kernel_ir::Precision::Tf32x3),
    ));
    for half in [kernel_ir::Half::Bf16, kernel_ir::Half::F16] {
        let precision = kernel_ir::Precision::Half(half);
        out.push((
            format!("contraction_pipelined_{}_f32", half.name()),
            kernel_ir::samples::mixed_contraction(ScalarType::F32, (false, true), precision, true),
        ));
        out.push((
            format!("contraction_symmetric_{}_f32", half.name()),
            kernel_ir::samples::symmetric_kernel_sums(ScalarType::F32, precision),
        ));
        out.push((
            format!("contraction_tiled_{}_f32", half.name()),
            kernel_ir::samples::mixed_contraction(ScalarType::F32, (true, true), precision, true),
        ));
    }
    out
}
