//! The fused-kernel interpreter against a naive per-element evaluator.

use kernel_ir::{
    Access, BinaryOp, Expr, Form, Input, KernelSpec, ReduceKind, Reduction, ScalarType, UnaryOp,
};

use super::super::{run_fused, CpuError, FusedArg, FusedOut, Real};
use super::reference::*;

/// Test-side data of one input, in f64.
#[derive(Clone)]
pub(super) enum RefIn {
    Mat {
        data: Vec<f64>,
        ld: usize,
        trans: bool,
    },
    /// A symmetric matrix stored as its lower triangle; the upper one is NaN.
    Sym {
        data: Vec<f64>,
        ld: usize,
    },
    Col(Vec<f64>),
    Row(Vec<f64>),
    Scalar(f64),
    /// A one-element device value (padded with NaN to catch reads past `[0]`).
    Broadcast(Vec<f64>),
    Index(Vec<u32>),
}

fn b(op: BinaryOp, x: Expr, y: Expr) -> Expr {
    Expr::binary(op, x, y)
}
fn u(op: UnaryOp, x: Expr) -> Expr {
    Expr::unary(op, x)
}
fn inp(k: usize) -> Expr {
    Expr::Input(k)
}
fn c(v: f64) -> Expr {
    Expr::Const(v)
}

fn bool_f(x: bool) -> f64 {
    if x {
        1.0
    } else {
        0.0
    }
}

/// Per-element reference, written independently of the interpreter.
pub(super) fn ref_eval(e: &Expr, ins: &[RefIn], i: usize, j: usize) -> f64 {
    match e {
        Expr::Input(k) => match &ins[*k] {
            RefIn::Mat { data, ld, trans } => at(data, *ld, *trans, i, j),
            RefIn::Sym { data, ld } => data[i.max(j) * ld + i.min(j)],
            RefIn::Col(v) => v[i],
            RefIn::Row(v) => v[j],
            RefIn::Scalar(x) => *x,
            RefIn::Broadcast(v) => v[0],
            RefIn::Index(_) => panic!("index read"),
        },
        Expr::Product => panic!("a product outside a contraction"),
        Expr::Const(v) => *v,
        Expr::Unary(op, a) => {
            let x = ref_eval(a, ins, i, j);
            match op {
                UnaryOp::Neg => -x,
                UnaryOp::Exp => x.exp(),
                UnaryOp::Log => x.ln(),
                UnaryOp::Sqrt => x.sqrt(),
                UnaryOp::Abs => x.abs(),
                UnaryOp::Tanh => x.tanh(),
            }
        }
        Expr::Binary(op, a, bb) => {
            let (x, y) = (ref_eval(a, ins, i, j), ref_eval(bb, ins, i, j));
            match op {
                BinaryOp::Add => x + y,
                BinaryOp::Sub => x - y,
                BinaryOp::Mul => x * y,
                BinaryOp::Div => x / y,
                BinaryOp::Pow => x.powf(y),
                BinaryOp::Max => {
                    if x.is_nan() {
                        y
                    } else if y.is_nan() || x > y {
                        x
                    } else {
                        y
                    }
                }
                BinaryOp::Min => {
                    if x.is_nan() {
                        y
                    } else if y.is_nan() || x < y {
                        x
                    } else {
                        y
                    }
                }
                BinaryOp::Lt => bool_f(x < y),
                BinaryOp::Le => bool_f(x <= y),
                BinaryOp::Gt => bool_f(x > y),
                BinaryOp::Ge => bool_f(x >= y),
                BinaryOp::Eq => bool_f(x == y),
                BinaryOp::Ne => bool_f(x != y),
            }
        }
        Expr::Select(cnd, a, bb) => {
            if ref_eval(cnd, ins, i, j) != 0.0 {
                ref_eval(a, ins, i, j)
            } else {
                ref_eval(bb, ins, i, j)
            }
        }
    }
}

/// Random data for each access mode (matrices padded, `pad` extra columns).
fn make_inputs<T: Real>(
    rng: &mut Rng,
    inputs: &[Input],
    rows: usize,
    cols: usize,
    pad: usize,
) -> Vec<RefIn> {
    inputs
        .iter()
        .map(|input| match input.access {
            Access::Matrix { transposed } => {
                let (r, cc) = if transposed {
                    (cols, rows)
                } else {
                    (rows, cols)
                };
                let ld = cc + pad;
                RefIn::Mat {
                    data: random_matrix::<T>(rng, r, cc, ld),
                    ld,
                    trans: transposed,
                }
            }
            Access::LowerSymmetric => {
                let ld = cols + pad;
                let mut data = random_matrix::<T>(rng, rows, cols, ld);
                for i in 0..rows {
                    for j in (i + 1)..cols {
                        data[i * ld + j] = f64::NAN;
                    }
                }
                RefIn::Sym { data, ld }
            }
            Access::Col => RefIn::Col(
                (0..rows)
                    .map(|_| T::from_f64(rng.uniform()).to_f64())
                    .collect(),
            ),
            Access::Row => RefIn::Row(
                (0..cols)
                    .map(|_| T::from_f64(rng.uniform()).to_f64())
                    .collect(),
            ),
            Access::Scalar => RefIn::Scalar(T::from_f64(0.375).to_f64()),
            Access::Broadcast => RefIn::Broadcast(vec![T::from_f64(-0.625).to_f64(), f64::NAN]),
            Access::IndexCol => RefIn::Index((0..rows).map(|_| rng.below(cols) as u32).collect()),
            Access::IndexRow | Access::Left { .. } | Access::Right { .. } => {
                panic!(
                    "{:?} belongs to contractions (tests/contraction.rs)",
                    input.access
                )
            }
        })
        .collect()
}

/// Owned `T` copies of the inputs, and `FusedArg`s borrowing them.
struct Owned<T> {
    vals: Vec<Vec<T>>,
}

fn own<T: Real>(ins: &[RefIn]) -> Owned<T> {
    Owned {
        vals: ins
            .iter()
            .map(|x| match x {
                RefIn::Mat { data, .. } | RefIn::Sym { data, .. } => to_t(data),
                RefIn::Col(v) | RefIn::Row(v) | RefIn::Broadcast(v) => to_t(v),
                _ => Vec::new(),
            })
            .collect(),
    }
}

fn args<'a, T: Real>(ins: &'a [RefIn], owned: &'a Owned<T>) -> Vec<FusedArg<'a, T>> {
    ins.iter()
        .zip(&owned.vals)
        .map(|(x, v)| match x {
            RefIn::Mat { ld, .. } | RefIn::Sym { ld, .. } => FusedArg::Matrix { data: v, ld: *ld },
            RefIn::Col(_) | RefIn::Row(_) | RefIn::Broadcast(_) => FusedArg::Vector(v),
            RefIn::Scalar(s) => FusedArg::Scalar(T::from_f64(*s)),
            RefIn::Index(idx) => FusedArg::Index(idx),
        })
        .collect()
}

fn spec(dtype: ScalarType, accesses: &[Access], form: Form) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype,
        inputs: accesses
            .iter()
            .enumerate()
            .map(|(k, &access)| Input {
                name: format!("in{k}"),
                access,
            })
            .collect(),
        form,
        provenance: vec![],
    }
}

fn dtype<T: Real>() -> ScalarType {
    T::SCALAR_TYPE
}

/// Inputs: 0 matrix, 1 transposed matrix, 2 col vector, 3 row vector, 4 scalar, 5 broadcast.
const ACCESSES: [Access; 6] = [
    Access::Matrix { transposed: false },
    Access::Matrix { transposed: true },
    Access::Col,
    Access::Row,
    Access::Scalar,
    Access::Broadcast,
];

/// A handful of expressions exercising every operation and broadcast.
fn exprs() -> Vec<Expr> {
    vec![
        // Squared distance-like: x - 2 * y + col + row
        b(
            BinaryOp::Add,
            b(BinaryOp::Sub, inp(0), b(BinaryOp::Mul, c(2.0), inp(1))),
            b(BinaryOp::Add, inp(2), inp(3)),
        ),
        // exp(-|x|) * scalar / (1 + sqrt(|y|))
        b(
            BinaryOp::Div,
            b(
                BinaryOp::Mul,
                u(UnaryOp::Exp, u(UnaryOp::Neg, u(UnaryOp::Abs, inp(0)))),
                inp(4),
            ),
            b(
                BinaryOp::Add,
                c(1.0),
                u(UnaryOp::Sqrt, u(UnaryOp::Abs, inp(1))),
            ),
        ),
        // select(x < y, tanh(col), log(1 + row^2)) + (x >= 0) - (y == y) + (x != y)
        b(
            BinaryOp::Add,
            Expr::select(
                b(BinaryOp::Lt, inp(0), inp(1)),
                u(UnaryOp::Tanh, inp(2)),
                u(
                    UnaryOp::Log,
                    b(BinaryOp::Add, c(1.0), b(BinaryOp::Pow, inp(3), c(2.0))),
                ),
            ),
            b(
                BinaryOp::Add,
                b(
                    BinaryOp::Sub,
                    b(BinaryOp::Ge, inp(0), c(0.0)),
                    b(BinaryOp::Eq, inp(1), inp(1)),
                ),
                b(BinaryOp::Ne, inp(0), inp(1)),
            ),
        ),
        // max(x, col) - min(row, scalar) + (x <= row) * (y > col)
        b(
            BinaryOp::Add,
            b(
                BinaryOp::Sub,
                b(BinaryOp::Max, inp(0), inp(2)),
                b(BinaryOp::Min, inp(3), inp(4)),
            ),
            b(
                BinaryOp::Mul,
                b(BinaryOp::Le, inp(0), inp(3)),
                b(BinaryOp::Gt, inp(1), inp(2)),
            ),
        ),
        // uniform select per row (condition from the col vector only), and constants only
        Expr::select(
            b(BinaryOp::Gt, inp(2), c(0.0)),
            inp(3),
            b(BinaryOp::Mul, inp(4), inp(5)),
        ),
        b(BinaryOp::Add, c(1.5), inp(4)),
    ]
}

const SIZES: &[(usize, usize)] = &[
    (1, 1),
    (3, 17),
    (17, 3),
    (33, 1),
    (1, 1500),
    (5, 2100),
    (100, 257),
    (257, 100),
];

fn map_case<T: Real>(rng: &mut Rng, rows: usize, cols: usize, pad: usize, tol: f64) {
    let es = exprs();
    let sp = spec(
        dtype::<T>(),
        &ACCESSES,
        Form::Map {
            outputs: es.clone(),
        },
    );
    let ins = make_inputs::<T>(rng, &sp.inputs, rows, cols, pad);
    let owned = own::<T>(&ins);
    let a = args(&ins, &owned);
    let mut bufs: Vec<Vec<T>> = es.iter().map(|_| vec![T::nan(); rows * cols + 1]).collect();
    {
        let mut outs: Vec<FusedOut<'_, T>> = bufs.iter_mut().map(|v| FusedOut::Values(v)).collect();
        run_fused(&sp, rows, cols, &a, &mut outs).unwrap();
    }
    for (k, e) in es.iter().enumerate() {
        let want: Vec<f64> = (0..rows * cols)
            .map(|p| ref_eval(e, &ins, p / cols, p % cols))
            .collect();
        assert_vec(
            &bufs[k][..rows * cols],
            &want,
            tol,
            &format!("map expr {k} {rows}x{cols}"),
        );
        assert!(bufs[k][rows * cols].is_nan(), "wrote past the output");
    }
}

#[test]
fn map_matches_reference_with_broadcasts_and_transposes() {
    let mut rng = Rng::new(21);
    for &(r, cc) in SIZES {
        for pad in [0, 3] {
            map_case::<f64>(&mut rng, r, cc, pad, 1e-13);
            map_case::<f32>(&mut rng, r, cc, pad, 1e-5);
        }
    }
}

/// A map and a row kernel reading a symmetric matrix stored as its lower triangle (the upper
/// one NaN), with a column vector and a scalar.
fn symmetric_case<T: Real>(rng: &mut Rng, n: usize, pad: usize, tol: f64) {
    let accesses = [Access::LowerSymmetric, Access::Col, Access::Scalar];
    // pow(scalar * s + col, 2), and s itself
    let e = b(
        BinaryOp::Pow,
        b(BinaryOp::Add, b(BinaryOp::Mul, inp(2), inp(0)), inp(1)),
        c(2.0),
    );
    for form in [
        Form::Map {
            outputs: vec![e.clone(), inp(0)],
        },
        Form::Rows {
            stores: vec![e.clone(), inp(0)],
            reductions: vec![],
        },
    ] {
        let sp = spec(dtype::<T>(), &accesses, form);
        let ins = make_inputs::<T>(rng, &sp.inputs, n, n, pad);
        let owned = own::<T>(&ins);
        let a = args(&ins, &owned);
        let mut bufs: Vec<Vec<T>> = (0..2).map(|_| vec![T::nan(); n * n]).collect();
        {
            let mut outs: Vec<FusedOut<'_, T>> =
                bufs.iter_mut().map(|v| FusedOut::Values(v)).collect();
            run_fused(&sp, n, n, &a, &mut outs).unwrap();
        }
        for (k, want_expr) in [e.clone(), inp(0)].iter().enumerate() {
            let want: Vec<f64> = (0..n * n)
                .map(|p| ref_eval(want_expr, &ins, p / n, p % n))
                .collect();
            assert!(
                want.iter().all(|x| !x.is_nan()),
                "the reference read the upper half"
            );
            assert_vec(&bufs[k], &want, tol, &format!("symmetric output {k} n={n}"));
        }
        // Both halves agree exactly.
        for i in 0..n {
            for j in 0..i {
                assert_eq!(bufs[1][i * n + j].to_f64(), bufs[1][j * n + i].to_f64());
            }
        }
    }
    // A non-square space is refused.
    let sp = spec(
        dtype::<T>(),
        &accesses,
        Form::Map {
            outputs: vec![inp(0)],
        },
    );
    let ins = make_inputs::<T>(rng, &sp.inputs, n + 1, n + 1, pad);
    let owned = own::<T>(&ins);
    let a = args(&ins, &owned);
    let mut out = vec![T::nan(); (n + 1) * n];
    let err = run_fused(&sp, n + 1, n, &a, &mut [FusedOut::Values(&mut out)]).unwrap_err();
    assert!(err.to_string().contains("square"), "{err}");
}

#[test]
fn lower_symmetric_inputs_read_only_the_lower_triangle() {
    let mut rng = Rng::new(29);
    for n in [1, 2, 5, 33, 70] {
        for pad in [0, 3] {
            symmetric_case::<f64>(&mut rng, n, pad, 1e-13);
            symmetric_case::<f32>(&mut rng, n, pad, 1e-5);
        }
    }
}

fn rows_case<T: Real>(rng: &mut Rng, rows: usize, cols: usize, pad: usize, tol: f64) {
    let es = exprs();
    let mut accesses = ACCESSES.to_vec();
    accesses.push(Access::IndexCol);
    let reductions = vec![
        Reduction {
            kind: ReduceKind::Sum,
            expr: es[0].clone(),
        },
        Reduction {
            kind: ReduceKind::Min,
            expr: es[1].clone(),
        },
        Reduction {
            kind: ReduceKind::Max,
            expr: es[3].clone(),
        },
        Reduction {
            kind: ReduceKind::ArgMin,
            expr: es[0].clone(),
        },
        Reduction {
            kind: ReduceKind::Pick { index_input: 6 },
            expr: es[2].clone(),
        },
        Reduction {
            kind: ReduceKind::Sum,
            expr: es[5].clone(),
        },
    ];
    let stores = vec![es[2].clone(), es[4].clone()];
    let sp = spec(
        dtype::<T>(),
        &accesses,
        Form::Rows {
            stores: stores.clone(),
            reductions: reductions.clone(),
        },
    );
    let ins = make_inputs::<T>(rng, &sp.inputs, rows, cols, pad);
    let owned = own::<T>(&ins);
    let a = args(&ins, &owned);
    let mut st: Vec<Vec<T>> = stores.iter().map(|_| vec![T::nan(); rows * cols]).collect();
    let mut vals: Vec<Vec<T>> = (0..5).map(|_| vec![T::nan(); rows]).collect();
    let mut idx = vec![u32::MAX; rows];
    {
        let (v0, rest) = vals.split_at_mut(1);
        let (v1, rest) = rest.split_at_mut(1);
        let (v2, rest) = rest.split_at_mut(1);
        let (v4, v5) = rest.split_at_mut(1);
        let mut outs: Vec<FusedOut<'_, T>> = st.iter_mut().map(|v| FusedOut::Values(v)).collect();
        outs.push(FusedOut::Values(&mut v0[0]));
        outs.push(FusedOut::Values(&mut v1[0]));
        outs.push(FusedOut::Values(&mut v2[0]));
        outs.push(FusedOut::Indices(&mut idx));
        outs.push(FusedOut::Values(&mut v4[0]));
        outs.push(FusedOut::Values(&mut v5[0]));
        run_fused(&sp, rows, cols, &a, &mut outs).unwrap();
    }
    let what = format!("rows {rows}x{cols} pad {pad}");
    for (k, e) in stores.iter().enumerate() {
        let want: Vec<f64> = (0..rows * cols)
            .map(|p| ref_eval(e, &ins, p / cols, p % cols))
            .collect();
        assert_vec(&st[k], &want, tol, &format!("{what}: store {k}"));
    }
    let row_vals =
        |e: &Expr, i: usize| -> Vec<f64> { (0..cols).map(|j| ref_eval(e, &ins, i, j)).collect() };
    let sums: Vec<f64> = (0..rows)
        .map(|i| row_vals(&es[0], i).iter().sum())
        .collect();
    assert_vec(&vals[0], &sums, tol * cols as f64, &format!("{what}: sum"));
    let mins: Vec<f64> = (0..rows)
        .map(|i| {
            row_vals(&es[1], i)
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    assert_vec(&vals[1], &mins, tol, &format!("{what}: min"));
    let maxs: Vec<f64> = (0..rows)
        .map(|i| {
            row_vals(&es[3], i)
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    assert_vec(&vals[2], &maxs, tol, &format!("{what}: max"));
    let RefIn::Index(pick_idx) = &ins[6] else {
        unreachable!()
    };
    let picks: Vec<f64> = (0..rows)
        .map(|i| ref_eval(&es[2], &ins, i, pick_idx[i] as usize))
        .collect();
    assert_vec(&vals[3], &picks, tol, &format!("{what}: pick"));
    let const_sums: Vec<f64> = (0..rows).map(|_| (1.5 + 0.375) * cols as f64).collect();
    assert_vec(&vals[4], &const_sums, tol, &format!("{what}: uniform sum"));
    for (i, &got) in idx.iter().enumerate() {
        // The interpreter's argmin must point at a minimum of its own computed values; check
        // against the reference values within tolerance, and ties to the lowest index.
        let v = row_vals(&es[0], i);
        let got = got as usize;
        let best = v.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(
            got < cols && (v[got] - best).abs() <= tol * 4.0,
            "{what}: argmin row {i}: {got}"
        );
        if T::SCALAR_TYPE == ScalarType::F64 {
            let first = v.iter().position(|&x| x == best).unwrap();
            assert_eq!(got, first, "{what}: argmin row {i}");
        }
    }
}

#[test]
fn rows_matches_reference_with_all_reductions() {
    let mut rng = Rng::new(22);
    for &(r, cc) in SIZES {
        rows_case::<f64>(&mut rng, r, cc, 2, 1e-12);
        rows_case::<f32>(&mut rng, r, cc, 0, 2e-5);
    }
}

fn cols_case<T: Real>(rng: &mut Rng, rows: usize, cols: usize, pad: usize, tol: f64) {
    let es = exprs();
    let reductions = vec![
        Reduction {
            kind: ReduceKind::Sum,
            expr: es[0].clone(),
        },
        Reduction {
            kind: ReduceKind::Min,
            expr: es[2].clone(),
        },
        Reduction {
            kind: ReduceKind::Max,
            expr: es[1].clone(),
        },
        Reduction {
            kind: ReduceKind::Sum,
            expr: inp(4),
        },
    ];
    let sp = spec(
        dtype::<T>(),
        &ACCESSES,
        Form::Cols {
            reductions: reductions.clone(),
        },
    );
    let ins = make_inputs::<T>(rng, &sp.inputs, rows, cols, pad);
    let owned = own::<T>(&ins);
    let a = args(&ins, &owned);
    let mut bufs: Vec<Vec<T>> = reductions.iter().map(|_| vec![T::nan(); cols]).collect();
    {
        let mut outs: Vec<FusedOut<'_, T>> = bufs.iter_mut().map(|v| FusedOut::Values(v)).collect();
        run_fused(&sp, rows, cols, &a, &mut outs).unwrap();
    }
    let what = format!("cols {rows}x{cols}");
    for (k, red) in reductions.iter().enumerate() {
        let want: Vec<f64> = (0..cols)
            .map(|j| {
                let it = (0..rows).map(|i| ref_eval(&red.expr, &ins, i, j));
                match red.kind {
                    ReduceKind::Sum => it.sum(),
                    ReduceKind::Min => it.fold(f64::INFINITY, f64::min),
                    _ => it.fold(f64::NEG_INFINITY, f64::max),
                }
            })
            .collect();
        assert_vec(
            &bufs[k],
            &want,
            tol * (rows as f64 + 1.0),
            &format!("{what}: reduction {k}"),
        );
    }
}

#[test]
fn cols_matches_reference() {
    let mut rng = Rng::new(23);
    for &(r, cc) in SIZES.iter().chain(&[(300, 5000), (5000, 3), (0, 4)]) {
        cols_case::<f64>(&mut rng, r, cc, 1, 1e-13);
        cols_case::<f32>(&mut rng, r, cc, 0, 2e-6);
    }
}

#[test]
fn cols_results_do_not_depend_on_thread_count() {
    let mut rng = Rng::new(24);
    let (rows, cols) = (3000, 37);
    let sp = spec(
        ScalarType::F32,
        &ACCESSES,
        Form::Cols {
            reductions: vec![Reduction {
                kind: ReduceKind::Sum,
                expr: exprs()[1].clone(),
            }],
        },
    );
    let ins = make_inputs::<f32>(&mut rng, &sp.inputs, rows, cols, 0);
    let owned = own::<f32>(&ins);
    let a = args(&ins, &owned);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut out = vec![0.0f32; cols];
        pool.install(|| run_fused(&sp, rows, cols, &a, &mut [FusedOut::Values(&mut out)]))
            .unwrap();
        out
    };
    let one = run(1);
    for t in [2, 3, 5] {
        let other = run(t);
        assert!(
            one.iter()
                .zip(&other)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "threads {t}"
        );
    }
}

fn argmin_of(values: &[f64]) -> u32 {
    let rows = 1;
    let cols = values.len();
    let sp = spec(
        ScalarType::F64,
        &[Access::Matrix { transposed: false }],
        Form::Rows {
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::ArgMin,
                expr: inp(0),
            }],
        },
    );
    let mut idx = [u32::MAX];
    run_fused(
        &sp,
        rows,
        cols,
        &[FusedArg::Matrix {
            data: values,
            ld: cols,
        }],
        &mut [FusedOut::Indices(&mut idx)],
    )
    .unwrap();
    idx[0]
}

#[test]
fn argmin_ties_and_nans() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    assert_eq!(argmin_of(&[3.0, 1.0, 1.0, 2.0]), 1);
    assert_eq!(argmin_of(&[nan, 2.0, nan, 2.0]), 1);
    assert_eq!(argmin_of(&[nan, nan]), 0);
    assert_eq!(argmin_of(&[inf, inf]), 0);
    assert_eq!(argmin_of(&[nan, inf]), 1);
    assert_eq!(argmin_of(&[5.0]), 0);
    assert_eq!(argmin_of(&[0.0, -0.0]), 0);
    // Across chunk boundaries (rows longer than a tile).
    let mut long = vec![1.0; 3000];
    long[1500] = -1.0;
    long[2999] = -1.0;
    assert_eq!(argmin_of(&long), 1500);
    long[5] = -1.0;
    assert_eq!(argmin_of(&long), 5);
    let mut nans = vec![nan; 3000];
    assert_eq!(argmin_of(&nans), 0);
    nans[2500] = 7.0;
    assert_eq!(argmin_of(&nans), 2500);
    // Several short rows in one tile, with a column vector broadcast and NaN-skipping.
    let sp = spec(
        ScalarType::F32,
        &[Access::Matrix { transposed: true }, Access::Col],
        Form::Rows {
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::ArgMin,
                expr: b(BinaryOp::Add, inp(0), inp(1)),
            }],
        },
    );
    // Stored transposed: 3 columns x 2 rows; element (i, j) = data[j * 2 + i].
    let data = [4.0f32, f32::NAN, 1.0, f32::NAN, 1.0, 0.5];
    let mut idx = [9u32; 2];
    run_fused(
        &sp,
        2,
        3,
        &[
            FusedArg::Matrix { data: &data, ld: 2 },
            FusedArg::Vector(&[0.0, 1.0]),
        ],
        &mut [FusedOut::Indices(&mut idx)],
    )
    .unwrap();
    assert_eq!(idx, [1, 2]);
}

#[test]
fn fmax_fmin_ignore_nan_and_comparisons_give_one_or_zero() {
    let sp = spec(
        ScalarType::F64,
        &[Access::Row],
        Form::Map {
            outputs: vec![
                b(BinaryOp::Max, inp(0), c(1.0)),
                b(BinaryOp::Min, c(1.0), inp(0)),
                b(BinaryOp::Lt, inp(0), c(1.0)),
                b(BinaryOp::Ne, inp(0), inp(0)),
                Expr::select(inp(0), c(10.0), c(20.0)),
            ],
        },
    );
    let row = [f64::NAN, 0.0, 2.0];
    let mut o: Vec<Vec<f64>> = (0..5).map(|_| vec![0.0; 3]).collect();
    let mut outs: Vec<FusedOut<'_, f64>> = o.iter_mut().map(|v| FusedOut::Values(v)).collect();
    run_fused(&sp, 1, 3, &[FusedArg::Vector(&row)], &mut outs).unwrap();
    assert_eq!(o[0], [1.0, 1.0, 2.0]);
    assert_eq!(o[1], [1.0, 0.0, 1.0]);
    assert_eq!(o[2], [0.0, 1.0, 0.0]);
    assert_eq!(o[3], [1.0, 0.0, 0.0]);
    assert_eq!(o[4], [10.0, 20.0, 10.0]);
}

#[test]
fn empty_iteration_spaces() {
    let sp = spec(
        ScalarType::F64,
        &[Access::Row],
        Form::Rows {
            stores: vec![inp(0)],
            reductions: vec![
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::Min,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::Max,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: inp(0),
                },
            ],
        },
    );
    let (mut s, mut mi, mut ma, mut am) = ([7.0], [7.0], [7.0], [7u32]);
    run_fused(
        &sp,
        1,
        0,
        &[FusedArg::Vector(&[])],
        &mut [
            FusedOut::Values(&mut []),
            FusedOut::Values(&mut s),
            FusedOut::Values(&mut mi),
            FusedOut::Values(&mut ma),
            FusedOut::Indices(&mut am),
        ],
    )
    .unwrap();
    assert_eq!(
        (s, mi, ma, am),
        ([0.0], [f64::INFINITY], [f64::NEG_INFINITY], [0])
    );
    let sp = spec(
        ScalarType::F64,
        &[Access::Col],
        Form::Cols {
            reductions: vec![
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::Min,
                    expr: inp(0),
                },
            ],
        },
    );
    let (mut s, mut mi) = ([7.0; 2], [7.0; 2]);
    run_fused(
        &sp,
        0,
        2,
        &[FusedArg::Vector(&[])],
        &mut [FusedOut::Values(&mut s), FusedOut::Values(&mut mi)],
    )
    .unwrap();
    assert_eq!((s, mi), ([0.0; 2], [f64::INFINITY; 2]));
}

#[test]
fn fused_errors_are_reported_before_writing() {
    let pick = spec(
        ScalarType::F64,
        &[Access::Row, Access::IndexCol],
        Form::Rows {
            stores: vec![inp(0)],
            reductions: vec![Reduction {
                kind: ReduceKind::Pick { index_input: 1 },
                expr: inp(0),
            }],
        },
    );
    let row = [1.0, 2.0, 3.0];
    let mut st = [9.0; 6];
    let mut pv = [9.0; 2];
    let err = run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Vector(&row), FusedArg::Index(&[2, 3])],
        &mut [FusedOut::Values(&mut st), FusedOut::Values(&mut pv)],
    )
    .unwrap_err();
    assert_eq!(
        err,
        CpuError::PickOutOfRange {
            row: 1,
            index: 3,
            cols: 3
        }
    );
    assert!(err.to_string().contains("row 1"), "{err}");
    assert_eq!((st, pv), ([9.0; 6], [9.0; 2]));
    // The same call with valid indices picks.
    run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Vector(&row), FusedArg::Index(&[2, 0])],
        &mut [FusedOut::Values(&mut st), FusedOut::Values(&mut pv)],
    )
    .unwrap();
    assert_eq!(pv, [3.0, 1.0]);

    // Wrong element type.
    let err = run_fused::<f32>(&pick, 1, 1, &[], &mut []).unwrap_err();
    assert!(err.to_string().contains("F64"), "{err}");
    // Wrong argument count / kind.
    let err = run_fused(&pick, 2, 3, &[FusedArg::Vector(&row)], &mut []).unwrap_err();
    assert!(err.to_string().contains("2 inputs"), "{err}");
    let err = run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Scalar(1.0), FusedArg::Index(&[0, 0])],
        &mut [FusedOut::Values(&mut st), FusedOut::Values(&mut pv)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("input 0 (`in0`)"), "{err}");
    // Short input and output.
    let err = run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Vector(&row[..2]), FusedArg::Index(&[0, 0])],
        &mut [FusedOut::Values(&mut st), FusedOut::Values(&mut pv)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand.contains("in0")),
        "{err}"
    );
    let err = run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Vector(&row), FusedArg::Index(&[0, 0])],
        &mut [FusedOut::Values(&mut st[..5]), FusedOut::Values(&mut pv)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, CpuError::Shape { operand, .. } if operand == "output 0"),
        "{err}"
    );
    // Index output where values are expected.
    let mut ix = [0u32; 2];
    let err = run_fused(
        &pick,
        2,
        3,
        &[FusedArg::Vector(&row), FusedArg::Index(&[0, 0])],
        &mut [FusedOut::Values(&mut st), FusedOut::Indices(&mut ix)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("output 1"), "{err}");
    // An expression reading an index vector gets the index as a value (labels compared as
    // numbers); a missing input is an error.
    let labels = spec(
        ScalarType::F64,
        &[Access::IndexCol],
        Form::Map {
            outputs: vec![inp(0)],
        },
    );
    let mut got = [f64::NAN; 3];
    run_fused(
        &labels,
        3,
        1,
        &[FusedArg::Index(&[4, 0, 7])],
        &mut [FusedOut::Values(&mut got)],
    )
    .unwrap();
    assert_eq!(got, [4.0, 0.0, 7.0]);
    let bad = spec(
        ScalarType::F64,
        &[],
        Form::Map {
            outputs: vec![inp(3)],
        },
    );
    let err = run_fused(&bad, 1, 1, &[], &mut [FusedOut::Values(&mut [0.0])]).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    // ArgMin is not a column reduction.
    let bad = spec(
        ScalarType::F64,
        &[Access::Row],
        Form::Cols {
            reductions: vec![Reduction {
                kind: ReduceKind::ArgMin,
                expr: inp(0),
            }],
        },
    );
    let err = run_fused(
        &bad,
        1,
        1,
        &[FusedArg::Vector(&[0.0])],
        &mut [FusedOut::Values(&mut [0.0])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("only Sum, Min and Max"), "{err}");
}

/// `K = exp(-g * max(b + b^T - 2 B, 0))` (the gaussian kernel's map) with `B` read in place
/// from the output's own buffer gives exactly what it gives from a separate copy, over
/// shapes with short rows (whole rows per tile), long rows (chunks of one row), one row and
/// odd sizes.
#[test]
fn maps_read_their_output_in_place_as_from_a_copy() {
    let mut rng = Rng::new(23);
    let g = b(
        BinaryOp::Sub,
        b(BinaryOp::Add, inp(1), inp(2)),
        b(BinaryOp::Mul, c(2.0), inp(0)),
    );
    let map = u(
        UnaryOp::Exp,
        b(
            BinaryOp::Mul,
            u(UnaryOp::Neg, inp(3)),
            b(BinaryOp::Max, g, c(0.0)),
        ),
    );
    let s = spec(
        ScalarType::F64,
        &[
            Access::Matrix { transposed: false },
            Access::Col,
            Access::Row,
            Access::Scalar,
        ],
        Form::Map { outputs: vec![map] },
    );
    for (rows, cols) in [(1, 1), (7, 33), (40, 1500), (3, 1025), (129, 8)] {
        let m: Vec<f64> = (0..rows * cols)
            .map(|_| rng.uniform() * 4.0 - 2.0)
            .collect();
        let col: Vec<f64> = (0..rows).map(|_| rng.uniform()).collect();
        let row: Vec<f64> = (0..cols).map(|_| rng.uniform()).collect();
        let mut copied = vec![f64::NAN; rows * cols];
        run_fused(
            &s,
            rows,
            cols,
            &[
                FusedArg::Matrix { data: &m, ld: cols },
                FusedArg::Vector(&col),
                FusedArg::Vector(&row),
                FusedArg::Scalar(0.7),
            ],
            &mut [FusedOut::Values(&mut copied)],
        )
        .unwrap();
        let mut own = m.clone();
        run_fused(
            &s,
            rows,
            cols,
            &[
                FusedArg::InPlace,
                FusedArg::Vector(&col),
                FusedArg::Vector(&row),
                FusedArg::Scalar(0.7),
            ],
            &mut [FusedOut::Values(&mut own)],
        )
        .unwrap();
        assert_eq!(own, copied, "{rows} x {cols}");
    }
}

/// Only a map with one output may read it in place: a kernel with a reduction, or two
/// outputs, or a transposed read, is refused before anything is written.
#[test]
fn in_place_reads_are_refused_where_they_would_not_be_safe() {
    let rows_form = spec(
        ScalarType::F64,
        &[Access::Matrix { transposed: false }],
        Form::Rows {
            stores: vec![inp(0)],
            reductions: vec![Reduction {
                kind: ReduceKind::Sum,
                expr: inp(0),
            }],
        },
    );
    let mut st = [5.0; 6];
    let mut sums = [9.0; 2];
    let err = run_fused(
        &rows_form,
        2,
        3,
        &[FusedArg::InPlace],
        &mut [FusedOut::Values(&mut st), FusedOut::Values(&mut sums)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("own buffer"), "{err}");
    assert_eq!((st, sums), ([5.0; 6], [9.0; 2]));
    let two = spec(
        ScalarType::F64,
        &[Access::Matrix { transposed: false }],
        Form::Map {
            outputs: vec![inp(0), inp(0)],
        },
    );
    let (mut a, mut b2) = ([5.0; 6], [5.0; 6]);
    let err = run_fused(
        &two,
        2,
        3,
        &[FusedArg::InPlace],
        &mut [FusedOut::Values(&mut a), FusedOut::Values(&mut b2)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("own buffer"), "{err}");
    let transposed = spec(
        ScalarType::F64,
        &[Access::Matrix { transposed: true }],
        Form::Map {
            outputs: vec![inp(0)],
        },
    );
    let err = run_fused(
        &transposed,
        3,
        3,
        &[FusedArg::InPlace],
        &mut [FusedOut::Values(&mut [5.0; 9])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("own buffer"), "{err}");
}
