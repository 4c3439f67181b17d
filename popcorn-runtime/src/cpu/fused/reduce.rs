//! Reductions over tile segments: per-row accumulators (Rows form) and per-column partials
//! (Cols form).

use kernel_ir::ReduceKind;

use super::super::real::{sum_slice, Real};
use super::eval::Operand;

/// Folds a slice with eight independent lanes (vectorisable), then the lanes in a fixed order.
#[inline]
fn fold8<T: Real>(v: &[T], init: T, f: impl Fn(T, T) -> T + Copy) -> T {
    let mut acc = [init; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..8 {
            acc[l] = f(acc[l], c[l]);
        }
    }
    let mut r = f(
        f(f(acc[0], acc[4]), f(acc[1], acc[5])),
        f(f(acc[2], acc[6]), f(acc[3], acc[7])),
    );
    for &x in tail {
        r = f(r, x);
    }
    r
}

/// The running value of one row reduction.
#[derive(Clone, Copy, Debug)]
pub(super) enum RowAcc<T> {
    /// Running sum.
    Sum(T),
    /// Running minimum (`+inf` when empty).
    Min(T),
    /// Running maximum (`-inf` when empty).
    Max(T),
    /// Smallest non-NaN value so far and its column (`None` until one is seen).
    ArgMin { best: T, index: Option<usize> },
}

impl<T: Real> RowAcc<T> {
    /// The empty accumulator for `kind` (`Pick`, `Dot` and `ByLabel` are handled elsewhere and
    /// start as a sum).
    pub(super) fn new(kind: ReduceKind) -> Self {
        match kind {
            ReduceKind::Sum
            | ReduceKind::Pick { .. }
            | ReduceKind::Dot { .. }
            | ReduceKind::ByLabel { .. } => RowAcc::Sum(T::zero()),
            ReduceKind::Min => RowAcc::Min(T::infinity()),
            ReduceKind::Max => RowAcc::Max(T::neg_infinity()),
            ReduceKind::ArgMin => RowAcc::ArgMin {
                best: T::infinity(),
                index: None,
            },
        }
    }

    /// Adds the `len` values of columns `j0..j0 + len` (in increasing column order across calls).
    pub(super) fn feed(&mut self, seg: Operand<'_, T>, len: usize, j0: usize) {
        match (self, seg) {
            (RowAcc::Sum(s), Operand::Uniform(x)) => *s += x * T::from_f64(len as f64),
            (RowAcc::Sum(s), Operand::Slice(xs)) => *s += sum_slice(xs),
            (RowAcc::Min(m), Operand::Uniform(x)) => *m = m.min(x),
            (RowAcc::Min(m), Operand::Slice(xs)) => *m = m.min(fold8(xs, T::infinity(), T::min)),
            (RowAcc::Max(m), Operand::Uniform(x)) => *m = m.max(x),
            (RowAcc::Max(m), Operand::Slice(xs)) => {
                *m = m.max(fold8(xs, T::neg_infinity(), T::max))
            }
            (RowAcc::ArgMin { best, index }, seg) => {
                let candidate = match seg {
                    Operand::Uniform(x) => (!x.is_nan()).then_some((x, j0)),
                    Operand::Slice(xs) => {
                        // NaNs are ignored by `min`; the first position equal to the minimum is
                        // the lowest index among ties. An all-NaN segment yields +inf, which is
                        // found only if a real +inf is present.
                        let m = fold8(xs, T::infinity(), T::min);
                        xs.iter().position(|&x| x == m).map(|p| (m, j0 + p))
                    }
                };
                if let Some((v, j)) = candidate {
                    if index.is_none() || v < *best {
                        *best = v;
                        *index = Some(j);
                    }
                }
            }
        }
    }

    /// The reduced value (for value-yielding reductions).
    pub(super) fn value(&self) -> T {
        match *self {
            RowAcc::Sum(v) | RowAcc::Min(v) | RowAcc::Max(v) => v,
            RowAcc::ArgMin { best, .. } => best,
        }
    }

    /// The reduced index (ArgMin; 0 when every value was NaN or the row was empty).
    pub(super) fn index(&self) -> u32 {
        match *self {
            RowAcc::ArgMin { index, .. } => index.unwrap_or(0) as u32,
            _ => 0,
        }
    }
}

/// The identity of a column reduction (`Sum`, `Min` or `Max`).
pub(super) fn col_identity<T: Real>(kind: ReduceKind) -> T {
    match kind {
        ReduceKind::Min => T::infinity(),
        ReduceKind::Max => T::neg_infinity(),
        _ => T::zero(),
    }
}

/// Combines two partial column results.
#[inline(always)]
pub(super) fn col_combine<T: Real>(kind: ReduceKind, a: T, b: T) -> T {
    match kind {
        ReduceKind::Min => a.min(b),
        ReduceKind::Max => a.max(b),
        _ => a + b,
    }
}

/// Folds one row segment into per-column partials: `partial[j] = combine(partial[j], seg[j])`.
pub(super) fn col_feed<T: Real>(kind: ReduceKind, partial: &mut [T], seg: Operand<'_, T>) {
    #[inline(always)]
    fn run<T: Real>(partial: &mut [T], seg: Operand<'_, T>, f: impl Fn(T, T) -> T) {
        match seg {
            Operand::Uniform(x) => {
                for p in partial.iter_mut() {
                    *p = f(*p, x);
                }
            }
            Operand::Slice(xs) => {
                for (p, &x) in partial.iter_mut().zip(xs) {
                    *p = f(*p, x);
                }
            }
        }
    }
    match kind {
        ReduceKind::Min => run(partial, seg, T::min),
        ReduceKind::Max => run(partial, seg, T::max),
        _ => run(partial, seg, |a: T, b: T| a + b),
    }
}
