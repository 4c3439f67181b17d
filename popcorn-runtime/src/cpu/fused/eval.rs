//! Vectorised evaluation of an expression tree over a tile of the iteration space.
//!
//! A tile is `nr` consecutive rows by `w` consecutive columns, flattened row-major (`nr * w <=
//! TILE`). The tree is walked once per tile, not per element: every node is evaluated over the
//! whole tile into a scratch slot with a tight, monomorphised loop. Values that are the same over
//! the whole tile (constants, scalars, a column vector within one row) stay scalars, and inputs
//! that are already contiguous in memory are borrowed instead of copied.

use kernel_ir::{BinaryOp, Expr, UnaryOp};

use super::super::real::Real;

/// Elements per tile, and per scratch slot.
pub(super) const TILE: usize = 1024;

/// A rectangle of the iteration space: rows `r0..r0 + nr`, columns `j0..j0 + w`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tile {
    pub r0: usize,
    pub nr: usize,
    pub j0: usize,
    pub w: usize,
}

impl Tile {
    /// Number of elements.
    pub(super) fn len(&self) -> usize {
        self.nr * self.w
    }
}

/// An input resolved against its access mode, ready to be read.
#[derive(Clone, Copy)]
pub(super) enum Source<'a, T> {
    /// Element `(i, j)` is `data[i * ld + j]`.
    Matrix { data: &'a [T], ld: usize },
    /// Element `(i, j)` is `data[j * ld + i]`.
    MatrixT { data: &'a [T], ld: usize },
    /// A symmetric matrix stored as its lower triangle: element `(i, j)` is
    /// `data[max(i, j) * ld + min(i, j)]`.
    LowerSymmetric { data: &'a [T], ld: usize },
    /// Element `(i, j)` is `v[i]`.
    Col(&'a [T]),
    /// Element `(i, j)` is `v[j]`.
    Row(&'a [T]),
    /// The same value everywhere.
    Scalar(T),
    /// An index vector with one entry per row, read as a value `v[i]`.
    Index(&'a [u32]),
    /// An index vector with one entry per column, read as a value `v[j]`.
    IndexRow(&'a [u32]),
    /// The output's own buffer (a map computing in place): element `(i, j)` is read from the
    /// block of the output under evaluation ([`Sources::own`]) before the tile is written.
    InPlace,
    /// A contraction's product operand: read only by the product, never by an expression
    /// (validation rejects that).
    Operand,
    /// A block of a contraction's product: element `(i, j)` is
    /// `data[(i - r0) * ld + (j - j0)]` for the block's rows and columns.
    Block {
        /// The block, row-major.
        data: &'a [T],
        /// Its row stride.
        ld: usize,
        /// Its first row in the space.
        r0: usize,
        /// Its first column in the space.
        j0: usize,
    },
}

/// The value of a node over a tile.
pub(super) enum Val<'a, T> {
    /// The same value at every element of the tile.
    Uniform(T),
    /// Borrowed straight from an input, `tile.len()` elements.
    Borrowed(&'a [T]),
    /// In the scratch slot the node was evaluated into.
    Slot,
}

/// A read-only operand of an element-wise loop.
#[derive(Clone, Copy)]
pub(super) enum Operand<'x, T> {
    Uniform(T),
    Slice(&'x [T]),
}

impl<'a, T: Real> Val<'a, T> {
    /// The value as an operand, where `slot` is the scratch slot it was evaluated into.
    pub(super) fn operand<'x>(&self, slot: &'x [T]) -> Operand<'x, T>
    where
        'a: 'x,
    {
        match *self {
            Val::Uniform(x) => Operand::Uniform(x),
            Val::Borrowed(s) => Operand::Slice(s),
            Val::Slot => Operand::Slice(slot),
        }
    }
}

/// Number of scratch slots needed to evaluate `e` into slot `s` (slots `s..result`).
pub(super) fn slots_needed(e: &Expr, s: usize) -> usize {
    match e {
        Expr::Input(_) | Expr::Const(_) | Expr::Product => s + 1,
        Expr::Unary(_, a) => slots_needed(a, s),
        Expr::Binary(_, a, b) => slots_needed(a, s).max(slots_needed(b, s + 1)),
        Expr::Select(c, a, b) => slots_needed(c, s)
            .max(slots_needed(a, s + 1))
            .max(slots_needed(b, s + 2)),
    }
}

/// The values an expression reads: the inputs, and for a contraction the block of its product
/// under evaluation (`Expr::Product`; NaN elsewhere, which validation rules out).
#[derive(Clone, Copy)]
pub(super) struct Sources<'s, 'a, T> {
    /// Input `k` of the kernel.
    pub(super) inputs: &'s [Source<'a, T>],
    /// The product block (a [`Source::Block`]).
    pub(super) product: Option<Source<'a, T>>,
    /// For [`Source::InPlace`]: the rows of the output under evaluation, the first of them and
    /// their stride. Only copied from, never borrowed into a value, so a tile's value never
    /// holds on to the output it is about to be written to.
    pub(super) own: Option<(&'s [T], usize, usize)>,
}

impl<'s, 'a, T> Sources<'s, 'a, T> {
    /// The inputs alone.
    pub(super) fn inputs(inputs: &'s [Source<'a, T>]) -> Self {
        Sources {
            inputs,
            product: None,
            own: None,
        }
    }

    /// The inputs, with `own` (`rows`, their first row, their stride) for an in-place input.
    pub(super) fn reading_own(self, own: Option<(&'s [T], usize, usize)>) -> Self {
        Sources { own, ..self }
    }
}

/// Evaluates `e` over `tile`, using scratch slots `s..` (each `TILE` elements) of `scratch`.
/// Returns where the value is; `Val::Slot` means `scratch[s * TILE..][..tile.len()]`.
pub(super) fn eval<'a, T: Real>(
    e: &Expr,
    srcs: Sources<'_, 'a, T>,
    tile: Tile,
    scratch: &mut [T],
    s: usize,
) -> Val<'a, T> {
    let len = tile.len();
    match e {
        Expr::Const(v) => Val::Uniform(T::from_f64(*v)),
        Expr::Product => match srcs.product {
            Some(src) => load(src, tile, &mut scratch[s * TILE..s * TILE + len]),
            None => Val::Uniform(T::nan()),
        },
        Expr::Input(k) => match srcs.inputs.get(*k) {
            Some(Source::InPlace) => {
                let out = &mut scratch[s * TILE..s * TILE + len];
                match srcs.own {
                    Some((rows, r_begin, ld)) => {
                        let start = (tile.r0 - r_begin) * ld + tile.j0;
                        copy_rows(rows, start, ld, tile, out);
                        Val::Slot
                    }
                    // run_fused only passes InPlace with the output's rows; stay total anyway.
                    None => Val::Uniform(T::nan()),
                }
            }
            Some(src) => load(*src, tile, &mut scratch[s * TILE..s * TILE + len]),
            // Validation rejects out-of-range inputs; stay total anyway.
            None => Val::Uniform(T::nan()),
        },
        Expr::Unary(op, a) => {
            let va = eval(a, srcs, tile, scratch, s);
            let out = &mut scratch[s * TILE..s * TILE + len];
            match va {
                Val::Uniform(x) => Val::Uniform(unary_scalar(*op, x)),
                Val::Borrowed(xs) => {
                    map_unary(*op, Some(xs), out);
                    Val::Slot
                }
                Val::Slot => {
                    map_unary(*op, None, out);
                    Val::Slot
                }
            }
        }
        Expr::Binary(op, a, b) => {
            let va = eval(a, srcs, tile, scratch, s);
            let vb = eval(b, srcs, tile, scratch, s + 1);
            if let (Val::Uniform(x), Val::Uniform(y)) = (&va, &vb) {
                return Val::Uniform(binary_scalar(*op, *x, *y));
            }
            let (lo, hi) = scratch.split_at_mut((s + 1) * TILE);
            let out = &mut lo[s * TILE..s * TILE + len];
            let b_op = vb.operand(&hi[..len]);
            let a_op = match va {
                Val::Slot => None,
                Val::Uniform(x) => Some(Operand::Uniform(x)),
                Val::Borrowed(xs) => Some(Operand::Slice(xs)),
            };
            map_binary(*op, a_op, b_op, out);
            Val::Slot
        }
        Expr::Select(c, a, b) => {
            let vc = eval(c, srcs, tile, scratch, s);
            if let Val::Uniform(x) = vc {
                // The whole tile takes one branch: evaluate only that one, into slot `s`.
                let chosen = if x != T::zero() { a } else { b };
                return eval(chosen, srcs, tile, scratch, s);
            }
            let va = eval(a, srcs, tile, scratch, s + 1);
            let vb = eval(b, srcs, tile, scratch, s + 2);
            let (lo, hi) = scratch.split_at_mut((s + 1) * TILE);
            let out = &mut lo[s * TILE..s * TILE + len];
            let (slot_a, slot_b) = hi.split_at(TILE);
            let a_op = va.operand(&slot_a[..len]);
            let b_op = vb.operand(&slot_b[..len]);
            let cond = match vc {
                Val::Borrowed(cs) => Some(cs),
                _ => None,
            };
            map_select(cond, a_op, b_op, out);
            Val::Slot
        }
    }
}

/// Reads an input over a tile, borrowing when the memory is already laid out as the tile.
fn load<'a, T: Real>(src: Source<'a, T>, t: Tile, out: &mut [T]) -> Val<'a, T> {
    match src {
        Source::Scalar(v) => Val::Uniform(v),
        Source::Col(v) => {
            if t.nr == 1 {
                Val::Uniform(v[t.r0])
            } else {
                for (row, &x) in out.chunks_exact_mut(t.w).zip(&v[t.r0..t.r0 + t.nr]) {
                    row.fill(x);
                }
                Val::Slot
            }
        }
        Source::Row(v) => {
            let seg = &v[t.j0..t.j0 + t.w];
            if t.nr == 1 {
                Val::Borrowed(seg)
            } else {
                for row in out.chunks_exact_mut(t.w) {
                    row.copy_from_slice(seg);
                }
                Val::Slot
            }
        }
        Source::Matrix { data, ld } => rows_of(data, t.r0 * ld + t.j0, ld, t, out),
        Source::MatrixT { data, ld } => {
            // Stored column `j` of the tile is contiguous over the tile's rows.
            for jj in 0..t.w {
                let base = (t.j0 + jj) * ld + t.r0;
                for (q, &x) in data[base..base + t.nr].iter().enumerate() {
                    out[q * t.w + jj] = x;
                }
            }
            Val::Slot
        }
        Source::LowerSymmetric { data, ld } => {
            for q in 0..t.nr {
                let i = t.r0 + q;
                for jj in 0..t.w {
                    let j = t.j0 + jj;
                    let (hi, lo) = if j <= i { (i, j) } else { (j, i) };
                    out[q * t.w + jj] = data[hi * ld + lo];
                }
            }
            Val::Slot
        }
        Source::IndexRow(v) => {
            for (o, &x) in out
                .iter_mut()
                .zip(v[t.j0..t.j0 + t.w].iter().cycle().take(t.len()))
            {
                *o = T::from_f64(x as f64);
            }
            Val::Slot
        }
        Source::Operand | Source::InPlace => Val::Uniform(T::nan()),
        Source::Block { data, ld, r0, j0 } => {
            rows_of(data, (t.r0 - r0) * ld + (t.j0 - j0), ld, t, out)
        }
        // An index vector read as a value: the index, as a number, broadcast along the row.
        Source::Index(v) => {
            if t.nr == 1 {
                Val::Uniform(T::from_f64(v[t.r0] as f64))
            } else {
                for (row, &x) in out.chunks_exact_mut(t.w).zip(&v[t.r0..t.r0 + t.nr]) {
                    row.fill(T::from_f64(x as f64));
                }
                Val::Slot
            }
        }
    }
}

/// The tile's rows of a row-major matrix whose element for the tile's first one is
/// `data[start]`: borrowed where they are contiguous, else copied into `out`.
fn rows_of<'a, T: Real>(
    data: &'a [T],
    start: usize,
    ld: usize,
    t: Tile,
    out: &mut [T],
) -> Val<'a, T> {
    if t.nr == 1 || ld == t.w {
        Val::Borrowed(&data[start..start + t.len()])
    } else {
        copy_rows(data, start, ld, t, out);
        Val::Slot
    }
}

/// Copies the tile's rows of a row-major matrix whose element for the tile's first one is
/// `data[start]` into `out`.
fn copy_rows<T: Real>(data: &[T], start: usize, ld: usize, t: Tile, out: &mut [T]) {
    for (q, row) in out[..t.len()].chunks_exact_mut(t.w).enumerate() {
        row.copy_from_slice(&data[start + q * ld..start + q * ld + t.w]);
    }
}

#[inline(always)]
fn bool_val<T: Real>(b: bool) -> T {
    if b {
        T::one()
    } else {
        T::zero()
    }
}

#[inline(always)]
fn op_add<T: Real>(x: T, y: T) -> T {
    x + y
}
#[inline(always)]
fn op_sub<T: Real>(x: T, y: T) -> T {
    x - y
}
#[inline(always)]
fn op_mul<T: Real>(x: T, y: T) -> T {
    x * y
}
#[inline(always)]
fn op_div<T: Real>(x: T, y: T) -> T {
    x / y
}
#[inline(always)]
fn op_pow<T: Real>(x: T, y: T) -> T {
    x.powf(y)
}
#[inline(always)]
fn op_max<T: Real>(x: T, y: T) -> T {
    x.max(y)
}
#[inline(always)]
fn op_min<T: Real>(x: T, y: T) -> T {
    x.min(y)
}
#[inline(always)]
fn op_lt<T: Real>(x: T, y: T) -> T {
    bool_val(x < y)
}
#[inline(always)]
fn op_le<T: Real>(x: T, y: T) -> T {
    bool_val(x <= y)
}
#[inline(always)]
fn op_gt<T: Real>(x: T, y: T) -> T {
    bool_val(x > y)
}
#[inline(always)]
fn op_ge<T: Real>(x: T, y: T) -> T {
    bool_val(x >= y)
}
#[inline(always)]
fn op_eq<T: Real>(x: T, y: T) -> T {
    bool_val(x == y)
}
#[inline(always)]
fn op_ne<T: Real>(x: T, y: T) -> T {
    bool_val(x != y)
}

/// One unary operation on one value.
pub(super) fn unary_scalar<T: Real>(op: UnaryOp, x: T) -> T {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Tanh => x.tanh(),
    }
}

/// One binary operation on one pair of values.
pub(super) fn binary_scalar<T: Real>(op: BinaryOp, x: T, y: T) -> T {
    match op {
        BinaryOp::Add => op_add(x, y),
        BinaryOp::Sub => op_sub(x, y),
        BinaryOp::Mul => op_mul(x, y),
        BinaryOp::Div => op_div(x, y),
        BinaryOp::Pow => op_pow(x, y),
        BinaryOp::Max => op_max(x, y),
        BinaryOp::Min => op_min(x, y),
        BinaryOp::Lt => op_lt(x, y),
        BinaryOp::Le => op_le(x, y),
        BinaryOp::Gt => op_gt(x, y),
        BinaryOp::Ge => op_ge(x, y),
        BinaryOp::Eq => op_eq(x, y),
        BinaryOp::Ne => op_ne(x, y),
    }
}

/// `out = op(src)`, or `out = op(out)` in place when `src` is `None`.
fn map_unary<T: Real>(op: UnaryOp, src: Option<&[T]>, out: &mut [T]) {
    #[inline(always)]
    fn run<T: Copy>(src: Option<&[T]>, out: &mut [T], f: impl Fn(T) -> T) {
        match src {
            Some(xs) => {
                for (o, &x) in out.iter_mut().zip(xs) {
                    *o = f(x);
                }
            }
            None => {
                for o in out.iter_mut() {
                    *o = f(*o);
                }
            }
        }
    }
    match op {
        UnaryOp::Neg => run(src, out, |x: T| -x),
        UnaryOp::Exp => super::super::vector_exp::exp_slice(src, out),
        UnaryOp::Log => run(src, out, T::ln),
        UnaryOp::Sqrt => run(src, out, T::sqrt),
        UnaryOp::Abs => run(src, out, T::abs),
        UnaryOp::Tanh => run(src, out, T::tanh),
    }
}

/// `out = op(a, b)`, with `a = None` meaning `out` itself (in place).
fn map_binary<T: Real>(op: BinaryOp, a: Option<Operand<'_, T>>, b: Operand<'_, T>, out: &mut [T]) {
    #[inline(always)]
    fn run<T: Copy>(
        a: Option<Operand<'_, T>>,
        b: Operand<'_, T>,
        out: &mut [T],
        f: impl Fn(T, T) -> T,
    ) {
        match (a, b) {
            (None, Operand::Uniform(y)) => {
                for o in out.iter_mut() {
                    *o = f(*o, y);
                }
            }
            (None, Operand::Slice(ys)) => {
                for (o, &y) in out.iter_mut().zip(ys) {
                    *o = f(*o, y);
                }
            }
            (Some(Operand::Uniform(x)), Operand::Uniform(y)) => out.fill(f(x, y)),
            (Some(Operand::Uniform(x)), Operand::Slice(ys)) => {
                for (o, &y) in out.iter_mut().zip(ys) {
                    *o = f(x, y);
                }
            }
            (Some(Operand::Slice(xs)), Operand::Uniform(y)) => {
                for (o, &x) in out.iter_mut().zip(xs) {
                    *o = f(x, y);
                }
            }
            (Some(Operand::Slice(xs)), Operand::Slice(ys)) => {
                for ((o, &x), &y) in out.iter_mut().zip(xs).zip(ys) {
                    *o = f(x, y);
                }
            }
        }
    }
    match op {
        BinaryOp::Add => run(a, b, out, op_add::<T>),
        BinaryOp::Sub => run(a, b, out, op_sub::<T>),
        BinaryOp::Mul => run(a, b, out, op_mul::<T>),
        BinaryOp::Div => run(a, b, out, op_div::<T>),
        // A uniform exponent of 2, 3 or 4 (the polynomial kernel's degree) by multiplication,
        // as the GPU's kernels do: a pow per element costs more than the rest of the epilogue.
        BinaryOp::Pow => match b {
            Operand::Uniform(y) if y == T::from_f64(2.0) => run(a, b, out, |x: T, _| x * x),
            Operand::Uniform(y) if y == T::from_f64(3.0) => run(a, b, out, |x: T, _| x * x * x),
            Operand::Uniform(y) if y == T::from_f64(4.0) => run(a, b, out, |x: T, _| {
                let x2 = x * x;
                x2 * x2
            }),
            _ => run(a, b, out, op_pow::<T>),
        },
        BinaryOp::Max => run(a, b, out, op_max::<T>),
        BinaryOp::Min => run(a, b, out, op_min::<T>),
        BinaryOp::Lt => run(a, b, out, op_lt::<T>),
        BinaryOp::Le => run(a, b, out, op_le::<T>),
        BinaryOp::Gt => run(a, b, out, op_gt::<T>),
        BinaryOp::Ge => run(a, b, out, op_ge::<T>),
        BinaryOp::Eq => run(a, b, out, op_eq::<T>),
        BinaryOp::Ne => run(a, b, out, op_ne::<T>),
    }
}

/// `out = cond != 0 ? a : b`, with `cond = None` meaning `out` itself holds the condition.
fn map_select<T: Real>(cond: Option<&[T]>, a: Operand<'_, T>, b: Operand<'_, T>, out: &mut [T]) {
    #[inline(always)]
    fn run<T: Real>(
        cond: Option<&[T]>,
        out: &mut [T],
        a: impl Iterator<Item = T>,
        b: impl Iterator<Item = T>,
    ) {
        let zero = T::zero();
        match cond {
            Some(cs) => {
                for (((o, &c), x), y) in out.iter_mut().zip(cs).zip(a).zip(b) {
                    *o = if c != zero { x } else { y };
                }
            }
            None => {
                for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
                    *o = if *o != zero { x } else { y };
                }
            }
        }
    }
    use std::iter::repeat;
    match (a, b) {
        (Operand::Uniform(x), Operand::Uniform(y)) => run(cond, out, repeat(x), repeat(y)),
        (Operand::Uniform(x), Operand::Slice(ys)) => run(cond, out, repeat(x), ys.iter().copied()),
        (Operand::Slice(xs), Operand::Uniform(y)) => run(cond, out, xs.iter().copied(), repeat(y)),
        (Operand::Slice(xs), Operand::Slice(ys)) => {
            run(cond, out, xs.iter().copied(), ys.iter().copied())
        }
    }
}
