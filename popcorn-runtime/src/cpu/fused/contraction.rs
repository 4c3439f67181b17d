//! The `Contraction` form on the CPU: the product computed in cache blocks, never whole.
//!
//! Blocks of [`BLOCK_ROWS`] rows run in parallel. A block walks the columns in chunks of
//! [`BLOCK_COLS`]: it multiplies its rows of `op(A)` by the chunk of `op(B)` into a
//! `BLOCK_ROWS x BLOCK_COLS` buffer (one thread, the `gemm` crate), then evaluates the epilogue
//! over that buffer tile by tile, as the `Rows` form does, with the buffer standing for
//! [`Expr::Product`]. Memory beyond the inputs and outputs is one buffer per thread, whatever
//! the size of the space. Row results depend only on their row and the chunking (never on the
//! thread count); sums over a row run chunk by chunk in column order.

use kernel_ir::{Expr, ReduceKind, Reduction};
use rayon::prelude::*;

use super::super::error::CpuError;
use super::super::matmul::gemm_serial;
use super::super::real::Real;
use super::eval::{eval, Operand, Source, Sources, Tile, TILE};
use super::reduce::RowAcc;
use super::rows::row_segment;
use super::FusedOut;

/// Rows per block.
pub(super) const BLOCK_ROWS: usize = 32;
/// Columns per chunk of the product.
pub(super) const BLOCK_COLS: usize = 256;

/// The product's operands and sizes.
#[derive(Clone, Copy)]
pub(super) struct Product<'a, T> {
    /// `op(A)`: stored data, leading dimension, transposed.
    pub a: (&'a [T], usize, bool),
    /// `op(B)`: stored data, leading dimension, transposed.
    pub b: (&'a [T], usize, bool),
    /// Inner dimension.
    pub depth: usize,
}

/// One block's share of an output.
enum BlockOut<'o, T> {
    /// Rows of a `rows x cols` store.
    Full(&'o mut [T]),
    /// Entries of a per-row value.
    Values(&'o mut [T]),
    /// Entries of a per-row index.
    Indices(&'o mut [u32]),
    /// Rows of a `rows x width` by-label output.
    Wide(&'o mut [T]),
}

/// What every block shares.
struct Job<'j, 'a, T> {
    srcs: &'j [Source<'a, T>],
    product: Product<'a, T>,
    stores: &'j [Expr],
    reductions: &'j [Reduction],
    cols: usize,
    width: usize,
    slots: usize,
}

/// Runs a contraction over `rows x cols` (outputs validated; each block evaluates
/// `Expr::Product` as its block of the product).
#[allow(clippy::too_many_arguments)]
pub(super) fn run<T: Real>(
    srcs: &[Source<'_, T>],
    product: Product<'_, T>,
    stores: &[Expr],
    reductions: &[Reduction],
    (rows, cols, width): (usize, usize, usize),
    outs: &mut [FusedOut<'_, T>],
    slots: usize,
) -> Result<(), CpuError> {
    if rows == 0 {
        return Ok(());
    }
    let rb = BLOCK_ROWS;
    let nblocks = rows.div_ceil(rb);
    let mut blocks: Vec<Vec<BlockOut<'_, T>>> = (0..nblocks)
        .map(|_| Vec::with_capacity(outs.len()))
        .collect();
    for (o, out) in outs.iter_mut().enumerate() {
        let by_label = o >= stores.len()
            && matches!(
                reductions[o - stores.len()].kind,
                ReduceKind::ByLabel { .. }
            );
        match out {
            FusedOut::Values(v) => {
                let per_row = if o < stores.len() {
                    cols
                } else if by_label {
                    width
                } else {
                    1
                };
                let used = &mut v[..rows * per_row];
                let mut parts: Vec<&mut [T]> = if per_row == 0 {
                    (0..nblocks).map(|_| <&mut [T]>::default()).collect()
                } else {
                    used.chunks_mut(rb * per_row).collect()
                };
                for (b, ch) in parts.drain(..).enumerate() {
                    blocks[b].push(if o < stores.len() {
                        BlockOut::Full(ch)
                    } else if by_label {
                        BlockOut::Wide(ch)
                    } else {
                        BlockOut::Values(ch)
                    });
                }
            }
            FusedOut::Indices(v) => {
                for (b, ch) in v[..rows].chunks_mut(rb).enumerate() {
                    blocks[b].push(BlockOut::Indices(ch));
                }
            }
        }
    }
    let job = Job {
        srcs,
        product,
        stores,
        reductions,
        cols,
        width,
        slots,
    };
    blocks.into_par_iter().enumerate().try_for_each_init(
        || {
            (
                vec![T::zero(); BLOCK_ROWS * BLOCK_COLS],
                vec![T::zero(); job.slots.max(1) * TILE],
            )
        },
        |(buffer, scratch), (b, mut bouts)| {
            let r_begin = b * rb;
            let r_end = (r_begin + rb).min(rows);
            run_block(&job, r_begin, r_end, &mut bouts, buffer, scratch)
        },
    )
}

/// Processes rows `r_begin..r_end`.
fn run_block<T: Real>(
    job: &Job<'_, '_, T>,
    r_begin: usize,
    r_end: usize,
    bouts: &mut [BlockOut<'_, T>],
    buffer: &mut [T],
    scratch: &mut [T],
) -> Result<(), CpuError> {
    let nr = r_end - r_begin;
    let n_stores = job.stores.len();
    let nred = job.reductions.len();
    let mut accs: Vec<RowAcc<T>> = (0..nr)
        .flat_map(|_| job.reductions.iter().map(|r| RowAcc::new(r.kind)))
        .collect();
    let mut picks = vec![T::nan(); nr * nred];
    for out in bouts[n_stores..].iter_mut() {
        if let BlockOut::Wide(v) = out {
            v.fill(T::zero());
        }
    }
    let mut j0 = 0;
    while j0 < job.cols {
        let w = BLOCK_COLS.min(job.cols - j0);
        let block = &mut buffer[..nr * w];
        multiply(&job.product, (r_begin, nr), (j0, w), block)?;
        let block: &[T] = block;
        // The chunk's columns as runs of one label (one run per cluster once the planner has
        // put the columns in cluster order), for the sums by label.
        let runs = label_runs(job, j0, w);
        let srcs = Sources {
            inputs: job.srcs,
            product: Some(Source::Block {
                data: block,
                ld: w,
                r0: r_begin,
                j0,
            }),
            own: None,
        };
        let tile_rows = (TILE / w).max(1);
        let mut q0 = 0;
        while q0 < nr {
            let tnr = tile_rows.min(nr - q0);
            let tile = Tile {
                r0: r_begin + q0,
                nr: tnr,
                j0,
                w,
            };
            for (s, e) in job.stores.iter().enumerate() {
                let v = eval(e, srcs, tile, scratch, 0);
                if let BlockOut::Full(out) = &mut bouts[s] {
                    for q in 0..tnr {
                        let dst = (q0 + q) * job.cols + j0;
                        write(&mut out[dst..dst + w], row_segment(&v, scratch, tile, q));
                    }
                }
            }
            for (ri, red) in job.reductions.iter().enumerate() {
                let v = eval(&red.expr, srcs, tile, scratch, 0);
                for q in 0..tnr {
                    let seg = row_segment(&v, scratch, tile, q);
                    let row = q0 + q;
                    let i = r_begin + row;
                    match red.kind {
                        ReduceKind::Sum
                        | ReduceKind::Min
                        | ReduceKind::Max
                        | ReduceKind::ArgMin => accs[row * nred + ri].feed(seg, w, j0),
                        ReduceKind::Dot { weights } => {
                            if let (RowAcc::Sum(acc), Some(Source::Row(wts))) =
                                (&mut accs[row * nred + ri], job.srcs.get(weights))
                            {
                                *acc += dot(seg, &wts[j0..j0 + w]);
                            }
                        }
                        ReduceKind::Pick { index_input } => {
                            if let Some(Source::Index(idx)) = job.srcs.get(index_input) {
                                let at = idx[i] as usize;
                                if (j0..j0 + w).contains(&at) {
                                    picks[row * nred + ri] = value_at(seg, at - j0);
                                }
                            }
                        }
                        ReduceKind::ByLabel { labels } => {
                            if let (BlockOut::Wide(out), Some((_, runs))) = (
                                &mut bouts[n_stores + ri],
                                runs.iter().find(|(l, _)| *l == labels),
                            ) {
                                let bins = &mut out[row * job.width..(row + 1) * job.width];
                                for run in runs {
                                    if let Some(bin) = bins.get_mut(run.label as usize) {
                                        *bin += run_sum(seg, run.start, run.end);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            q0 += tnr;
        }
        j0 += w;
    }
    for (ri, red) in job.reductions.iter().enumerate() {
        for row in 0..nr {
            let acc = &accs[row * nred + ri];
            match (&mut bouts[n_stores + ri], red.kind) {
                (BlockOut::Indices(v), _) => v[row] = acc.index(),
                (BlockOut::Values(v), ReduceKind::Pick { .. }) => v[row] = picks[row * nred + ri],
                (BlockOut::Values(v), _) => v[row] = acc.value(),
                _ => {}
            }
        }
    }
    Ok(())
}

/// `block = op(A)[rows] * op(B)[.., cols]`, `rows` and `cols` given as (first, count).
fn multiply<T: Real>(
    p: &Product<'_, T>,
    (r0, nr): (usize, usize),
    (j0, w): (usize, usize),
    block: &mut [T],
) -> Result<(), CpuError> {
    let (a, lda, ta) = p.a;
    let (b, ldb, tb) = p.b;
    // op(A) rows r0.. start at row r0 of A, or at column r0 of A stored transposed.
    let a_off = if p.depth == 0 {
        0
    } else if ta {
        r0
    } else {
        r0 * lda
    };
    let b_off = if p.depth == 0 {
        0
    } else if tb {
        j0 * ldb
    } else {
        j0
    };
    gemm_serial(
        (ta, tb),
        (nr, w, p.depth),
        T::one(),
        (&a[a_off.min(a.len())..], lda),
        (&b[b_off.min(b.len())..], ldb),
        T::zero(),
        (block, w),
    )
}

/// Columns `start..end` of a chunk (relative to its first column) share `label`.
struct LabelRun {
    start: usize,
    end: usize,
    label: u32,
}

/// For each labels input of the job's sums by label, the runs of equal labels among columns
/// `j0..j0 + w`.
fn label_runs<T: Real>(job: &Job<'_, '_, T>, j0: usize, w: usize) -> Vec<(usize, Vec<LabelRun>)> {
    let mut all: Vec<(usize, Vec<LabelRun>)> = Vec::new();
    for red in job.reductions {
        let ReduceKind::ByLabel { labels } = red.kind else {
            continue;
        };
        if all.iter().any(|(l, _)| *l == labels) {
            continue;
        }
        let Some(Source::IndexRow(lab)) = job.srcs.get(labels) else {
            continue;
        };
        let mut runs: Vec<LabelRun> = Vec::new();
        for (jj, &c) in lab[j0..j0 + w].iter().enumerate() {
            match runs.last_mut() {
                Some(run) if run.label == c => run.end = jj + 1,
                _ => runs.push(LabelRun {
                    start: jj,
                    end: jj + 1,
                    label: c,
                }),
            }
        }
        all.push((labels, runs));
    }
    all
}

/// `sum_k seg[k]` over `start..end`, in order.
fn run_sum<T: Real>(seg: Operand<'_, T>, start: usize, end: usize) -> T {
    let mut acc = T::zero();
    match seg {
        Operand::Uniform(x) => {
            for _ in start..end {
                acc += x;
            }
        }
        Operand::Slice(xs) => {
            for &x in &xs[start..end] {
                acc += x;
            }
        }
    }
    acc
}

/// Copies a row segment into `dst`.
fn write<T: Real>(dst: &mut [T], seg: Operand<'_, T>) {
    match seg {
        Operand::Uniform(x) => dst.fill(x),
        Operand::Slice(xs) => dst.copy_from_slice(&xs[..dst.len()]),
    }
}

/// Element `k` of a row segment.
fn value_at<T: Real>(seg: Operand<'_, T>, k: usize) -> T {
    match seg {
        Operand::Uniform(x) => x,
        Operand::Slice(xs) => xs[k],
    }
}

/// `sum_k seg[k] * w[k]`, in order.
fn dot<T: Real>(seg: Operand<'_, T>, w: &[T]) -> T {
    let mut acc = T::zero();
    match seg {
        Operand::Uniform(x) => {
            for &y in w {
                acc += x * y;
            }
        }
        Operand::Slice(xs) => {
            for (&x, &y) in xs.iter().zip(w) {
                acc += x * y;
            }
        }
    }
    acc
}
