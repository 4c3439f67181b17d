//! The CPU contraction against a naive f64 product and per-element reference: shapes with 1,
//! odd sizes and non-multiples of the block sizes, every operand orientation, every reduction.

use kernel_ir::{
    Access, Expr, Form, Input, KernelSpec, Precision, ReduceKind, Reduction, ScalarType,
};

use super::super::{run_contraction, run_fused, CpuError, FusedArg, FusedOut, Real};
use super::fused::{ref_eval, RefIn};
use super::reference::*;

fn input(name: &str, access: Access) -> Input {
    Input {
        name: name.into(),
        access,
    }
}

/// The shared mixed contraction (`kernel_ir::samples`), strict, with sums by label: stores
/// `[P, dist]`; reductions argmin, min, max of dist; sum of wgt; dot of wgt with y; wgt by
/// label; P at idx.
fn spec(dtype: ScalarType, ta: bool, tb: bool) -> KernelSpec {
    kernel_ir::samples::mixed_contraction(dtype, (ta, tb), Precision::Strict, true)
}

/// `e` with the product read as input `k`.
fn with_product(e: &Expr, k: usize) -> Expr {
    match e {
        Expr::Product => Expr::Input(k),
        Expr::Unary(op, a) => Expr::unary(*op, with_product(a, k)),
        Expr::Binary(op, a, b) => Expr::binary(*op, with_product(a, k), with_product(b, k)),
        Expr::Select(c, a, b) => {
            Expr::select(with_product(c, k), with_product(a, k), with_product(b, k))
        }
        other => other.clone(),
    }
}

fn check<T: Real>(rows: usize, cols: usize, depth: usize, ta: bool, tb: bool, seed: u64) {
    let what = format!(
        "{rows} x {cols} x {depth}, ta {ta}, tb {tb}, {:?}",
        T::SCALAR_TYPE
    );
    let mut rng = Rng::new(seed);
    let width = 5;
    let (ar, ac) = if ta { (depth, rows) } else { (rows, depth) };
    let (br, bc) = if tb { (cols, depth) } else { (depth, cols) };
    let (lda, ldb) = (ac + 2, bc + 1);
    let a = random_matrix::<T>(&mut rng, ar, ac, lda);
    let b = random_matrix::<T>(&mut rng, br, bc, ldb);
    let vec_of = |rng: &mut Rng, n: usize| -> Vec<f64> {
        (0..n)
            .map(|_| T::from_f64(rng.uniform()).to_f64())
            .collect()
    };
    let cn = vec_of(&mut rng, cols);
    let y = vec_of(&mut rng, cols);
    // Labels 0..=width: label `width` is out of range and must be skipped.
    let labels: Vec<u32> = (0..cols).map(|_| rng.below(width + 1) as u32).collect();
    let idx: Vec<u32> = (0..rows).map(|_| rng.below(cols.max(1)) as u32).collect();
    let g = 0.75;

    // Reference: the product in f64, then every element through the per-element evaluator.
    let mut p = vec![0.0; rows * cols];
    naive_gemm(
        ta,
        tb,
        rows,
        cols,
        depth,
        1.0,
        &a,
        lda,
        &b,
        ldb,
        0.0,
        &mut p,
        cols.max(1),
    );
    let s = spec(T::SCALAR_TYPE, ta, tb);
    let refs = vec![
        RefIn::Scalar(f64::NAN),
        RefIn::Scalar(f64::NAN),
        RefIn::Row(cn.clone()),
        RefIn::Row(y.clone()),
        RefIn::Scalar(f64::NAN),
        RefIn::Scalar(f64::NAN),
        RefIn::Scalar(g),
        RefIn::Mat {
            data: p.clone(),
            ld: cols.max(1),
            trans: false,
        },
    ];
    let Form::Contraction {
        stores, reductions, ..
    } = &s.form
    else {
        unreachable!()
    };
    let value = |e: &Expr, i: usize, j: usize| ref_eval(&with_product(e, 7), &refs, i, j);

    let (at, bt) = (to_t::<T>(&a), to_t::<T>(&b));
    let (cnt, yt) = (to_t::<T>(&cn), to_t::<T>(&y));
    let args = [
        FusedArg::Matrix { data: &at, ld: lda },
        FusedArg::Matrix { data: &bt, ld: ldb },
        FusedArg::Vector(&cnt),
        FusedArg::Vector(&yt),
        FusedArg::Index(&labels),
        FusedArg::Index(&idx),
        FusedArg::Scalar(T::from_f64(g)),
    ];
    let nan = T::nan();
    let mut p_out = vec![nan; rows * cols];
    let mut d_out = vec![nan; rows * cols];
    let mut am = vec![u32::MAX; rows];
    let mut mn = vec![nan; rows];
    let mut mx = vec![nan; rows];
    let mut sm = vec![nan; rows];
    let mut dt = vec![nan; rows];
    let mut bl = vec![nan; rows * width];
    let mut pk = vec![nan; rows];
    {
        let mut outs = [
            FusedOut::Values(&mut p_out[..]),
            FusedOut::Values(&mut d_out[..]),
            FusedOut::Indices(&mut am[..]),
            FusedOut::Values(&mut mn[..]),
            FusedOut::Values(&mut mx[..]),
            FusedOut::Values(&mut sm[..]),
            FusedOut::Values(&mut dt[..]),
            FusedOut::Values(&mut bl[..]),
            FusedOut::Values(&mut pk[..]),
        ];
        let ran = run_contraction(&s, (rows, cols), depth, width, &args, &mut outs);
        assert!(ran.is_ok(), "{what}: {ran:?}");
    }
    let tol = tol::<T>(depth.max(cols)) * 50.0;
    let close = |got: T, want: f64, scale: f64, label: &str| {
        let got = got.to_f64();
        assert!(
            (got - want).abs() <= tol * (scale + want.abs()),
            "{what}: {label}: got {got}, want {want}"
        );
    };
    for i in 0..rows {
        let mut want = (f64::INFINITY, 0usize, f64::NEG_INFINITY, 0.0, 0.0);
        let mut bins = vec![0.0; width];
        for j in 0..cols {
            close(p_out[i * cols + j], p[i * cols + j], 1.0, "store P");
            let d = value(&stores[1], i, j);
            close(d_out[i * cols + j], d, 1.0, "store dist");
            if d < want.0 {
                want.0 = d;
                want.1 = j;
            }
            want.2 = want.2.max(d);
            let w = value(&reductions[3].expr, i, j);
            want.3 += w;
            want.4 += w * y[j];
            if (labels[j] as usize) < width {
                bins[labels[j] as usize] += w;
            }
        }
        close(mn[i], want.0, 1.0, "min");
        close(mx[i], want.2, 1.0, "max");
        close(sm[i], want.3, cols as f64, "sum");
        close(dt[i], want.4, cols as f64, "dot");
        for (c, &bin) in bins.iter().enumerate() {
            close(bl[i * width + c], bin, cols as f64, "by label");
        }
        if cols > 0 {
            // The chosen column holds the minimum (up to rounding: near-ties may go either way).
            let chosen = am[i] as usize;
            assert!(chosen < cols, "{what}: argmin {chosen} of {cols} columns");
            close(d_out[i * cols + chosen], want.0, 1.0, "value at argmin");
            close(pk[i], p[i * cols + idx[i] as usize], 1.0, "pick");
        } else {
            assert_eq!(am[i], 0, "{what}: argmin of an empty row");
        }
    }
}

#[test]
fn contractions_match_the_reference_on_awkward_shapes() {
    let shapes = [
        (1, 1, 1),
        (1, 7, 3),
        (7, 1, 3),
        (3, 5, 0),
        (33, 257, 5),
        (70, 300, 17),
        (65, 513, 40),
    ];
    let mut seed = 1;
    for &(r, c, d) in &shapes {
        for (ta, tb) in [(false, true), (false, false), (true, false), (true, true)] {
            seed += 1;
            check::<f64>(r, c, d, ta, tb, seed);
            check::<f32>(r, c, d, ta, tb, seed);
        }
    }
}

#[test]
fn ties_go_to_the_lowest_column_across_blocks() {
    // Every column of row 0 has the same product (A = 1, B = 1): the argmin is column 0 even
    // though the columns span several chunks.
    let (rows, cols, depth) = (2, 700, 3);
    let s = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F64,
        inputs: vec![
            input("A", Access::Left { transposed: false }),
            input("B", Access::Right { transposed: false }),
        ],
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision: Precision::Tf32,
            symmetric: false,
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::ArgMin,
                expr: Expr::Product,
            }],
        },
        provenance: vec![],
    };
    let a = vec![1.0; rows * depth];
    let b = vec![1.0; depth * cols];
    let mut out = vec![u32::MAX; rows];
    let args = [
        FusedArg::Matrix {
            data: &a,
            ld: depth,
        },
        FusedArg::Matrix { data: &b, ld: cols },
    ];
    let ran = run_contraction(
        &s,
        (rows, cols),
        depth,
        0,
        &args,
        &mut [FusedOut::Indices(&mut out)],
    );
    assert!(ran.is_ok(), "{ran:?}");
    assert_eq!(out, vec![0, 0]);
}

#[test]
fn bad_calls_are_errors_that_say_what_to_do() {
    let s = spec(ScalarType::F64, false, true);
    let a = vec![0.0; 4];
    let args: [FusedArg<'_, f64>; 2] = [
        FusedArg::Matrix { data: &a, ld: 2 },
        FusedArg::Matrix { data: &a, ld: 2 },
    ];
    // Through run_fused: pointed at run_contraction.
    let err = run_fused(&s, 2, 2, &args, &mut []).unwrap_err();
    assert!(err.to_string().contains("run_contraction"), "{err}");
    // Too few arguments.
    let err = run_contraction(&s, (2, 2), 2, 1, &args, &mut []).unwrap_err();
    assert!(matches!(err, CpuError::Fused(_)), "{err}");
    // An operand too small for the depth.
    let small = spec(ScalarType::F64, false, false);
    let Form::Contraction { .. } = &small.form else {
        unreachable!()
    };
    let only_product = KernelSpec {
        narrow: Default::default(),
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision: Precision::Strict,
            symmetric: false,
            stores: vec![Expr::Product],
            reductions: vec![],
        },
        inputs: small.inputs[..2].to_vec(),
        ..small
    };
    let mut out = vec![0.0; 4];
    let err = run_contraction(
        &only_product,
        (2, 2),
        3,
        0,
        &args,
        &mut [FusedOut::Values(&mut out)],
    )
    .unwrap_err();
    assert!(matches!(err, CpuError::Shape { .. }), "{err}");
}
