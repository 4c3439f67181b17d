//! The `Map` and `Rows` forms: element-wise stores and per-row reductions, parallel over blocks
//! of rows. Each row's result depends only on the row (never on the blocking or thread count).

use kernel_ir::{Expr, ReduceKind, Reduction};
use rayon::prelude::*;

use super::super::real::Real;
use super::eval::{eval, Operand, Source, Sources, Tile, Val, TILE};
use super::reduce::RowAcc;
use super::FusedOut;

/// One block's share of an output.
enum BlockOut<'o, T> {
    /// Rows of a `rows x cols` output (leading dimension `cols`).
    Full(&'o mut [T]),
    /// Entries of a per-row value output.
    Values(&'o mut [T]),
    /// Entries of a per-row index output.
    Indices(&'o mut [u32]),
}

/// The part of a tile's value that belongs to tile row `q`.
#[inline]
pub(super) fn row_segment<'x, T: Real>(
    v: &Val<'x, T>,
    slot: &'x [T],
    tile: Tile,
    q: usize,
) -> Operand<'x, T> {
    let range = q * tile.w..(q + 1) * tile.w;
    match *v {
        Val::Uniform(x) => Operand::Uniform(x),
        Val::Borrowed(s) => Operand::Slice(&s[range]),
        Val::Slot => Operand::Slice(&slot[range]),
    }
}

/// What a block needs to know, shared by all blocks.
struct Job<'j, 'a, T> {
    srcs: &'j [Source<'a, T>],
    stores: &'j [Expr],
    reductions: &'j [Reduction],
    cols: usize,
    /// Whether an input is the (one) output itself ([`Source::InPlace`]).
    in_place: bool,
}

/// Runs stores and row reductions over `rows x cols` (`cols > 0`). `outs` holds the store outputs
/// then one output per reduction, all validated; `slots` scratch slots suffice for every
/// expression. With `in_place`, an input is the one store output's own buffer (a map
/// computing in place, see `reads_in_place`): each tile reads it before writing it.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_rows<T: Real>(
    srcs: &[Source<'_, T>],
    stores: &[Expr],
    reductions: &[Reduction],
    rows: usize,
    cols: usize,
    outs: &mut [FusedOut<'_, T>],
    slots: usize,
    in_place: bool,
) {
    if rows == 0 {
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // About 16K elements per block, but at least 8 blocks per thread when rows allow.
    let by_work = (16 * 1024 / cols).max(1);
    let by_balance = rows.div_ceil(8 * threads).max(1);
    let rb = by_work.min(by_balance);
    let nblocks = rows.div_ceil(rb);

    let mut blocks: Vec<Vec<BlockOut<'_, T>>> = (0..nblocks)
        .map(|_| Vec::with_capacity(outs.len()))
        .collect();
    for (o, out) in outs.iter_mut().enumerate() {
        match out {
            FusedOut::Values(v) => {
                if o < stores.len() {
                    for (b, ch) in v[..rows * cols].chunks_mut(rb * cols).enumerate() {
                        blocks[b].push(BlockOut::Full(ch));
                    }
                } else {
                    for (b, ch) in v[..rows].chunks_mut(rb).enumerate() {
                        blocks[b].push(BlockOut::Values(ch));
                    }
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
        stores,
        reductions,
        cols,
        in_place,
    };
    blocks.into_par_iter().enumerate().for_each_init(
        || {
            (
                vec![T::zero(); slots.max(1) * TILE],
                Vec::<RowAcc<T>>::with_capacity(reductions.len()),
            )
        },
        |(scratch, accs), (b, mut bouts)| {
            let r_begin = b * rb;
            let r_end = (r_begin + rb).min(rows);
            run_block(&job, r_begin, r_end, &mut bouts, scratch, accs);
        },
    );
}

/// Writes a tile's value into a full output block whose first row is `r_begin`.
fn store_tile<T: Real>(
    out: &mut [T],
    r_begin: usize,
    cols: usize,
    tile: Tile,
    v: &Val<'_, T>,
    slot: &[T],
) {
    // Either the tile is one row or it spans whole rows: its elements are contiguous.
    let start = (tile.r0 - r_begin) * cols + tile.j0;
    let dst = &mut out[start..start + tile.len()];
    match *v {
        Val::Uniform(x) => dst.fill(x),
        Val::Borrowed(s) => dst.copy_from_slice(s),
        Val::Slot => dst.copy_from_slice(&slot[..tile.len()]),
    }
}

/// Stores a finished row accumulator at block-relative row `r`.
fn store_acc<T: Real>(out: &mut BlockOut<'_, T>, r: usize, acc: &RowAcc<T>) {
    match out {
        BlockOut::Values(v) => v[r] = acc.value(),
        BlockOut::Indices(v) => v[r] = acc.index(),
        BlockOut::Full(_) => {}
    }
}

/// Evaluates the stores and non-pick reductions of one tile, feeding `accs` (one per reduction).
fn run_tile<T: Real>(
    job: &Job<'_, '_, T>,
    tile: Tile,
    r_begin: usize,
    bouts: &mut [BlockOut<'_, T>],
    scratch: &mut [T],
    mut per_row: impl FnMut(usize, usize, Operand<'_, T>),
) {
    for (s, e) in job.stores.iter().enumerate() {
        // An in-place input reads the block's rows of the output it is about to overwrite.
        let own = match bouts.get(s) {
            Some(BlockOut::Full(rows)) if job.in_place => Some((&**rows, r_begin, job.cols)),
            _ => None,
        };
        let v = eval(
            e,
            Sources::inputs(job.srcs).reading_own(own),
            tile,
            scratch,
            0,
        );
        if let BlockOut::Full(out) = &mut bouts[s] {
            store_tile(out, r_begin, job.cols, tile, &v, scratch);
        }
    }
    for (ri, red) in job.reductions.iter().enumerate() {
        if matches!(red.kind, ReduceKind::Pick { .. }) {
            continue;
        }
        let v = eval(&red.expr, Sources::inputs(job.srcs), tile, scratch, 0);
        for q in 0..tile.nr {
            per_row(ri, q, row_segment(&v, scratch, tile, q));
        }
    }
}

/// Processes rows `r_begin..r_end`.
fn run_block<T: Real>(
    job: &Job<'_, '_, T>,
    r_begin: usize,
    r_end: usize,
    bouts: &mut [BlockOut<'_, T>],
    scratch: &mut [T],
    accs: &mut Vec<RowAcc<T>>,
) {
    let cols = job.cols;
    let n_stores = job.stores.len();
    if cols <= TILE {
        // Whole rows per tile; each row's reductions complete within the tile.
        let nr_max = (TILE / cols).max(1);
        let mut r0 = r_begin;
        while r0 < r_end {
            let nr = nr_max.min(r_end - r0);
            let tile = Tile {
                r0,
                nr,
                j0: 0,
                w: cols,
            };
            let (store_outs, red_outs) = bouts.split_at_mut(n_stores);
            run_tile(job, tile, r_begin, store_outs, scratch, |ri, q, seg| {
                let mut acc = RowAcc::new(job.reductions[ri].kind);
                acc.feed(seg, cols, 0);
                store_acc(&mut red_outs[ri], r0 + q - r_begin, &acc);
            });
            r0 += nr;
        }
    } else {
        // Long rows: chunks of one row, accumulated in column order.
        for i in r_begin..r_end {
            accs.clear();
            accs.extend(job.reductions.iter().map(|r| RowAcc::new(r.kind)));
            let mut j0 = 0;
            while j0 < cols {
                let w = TILE.min(cols - j0);
                let tile = Tile {
                    r0: i,
                    nr: 1,
                    j0,
                    w,
                };
                run_tile(
                    job,
                    tile,
                    r_begin,
                    &mut bouts[..n_stores],
                    scratch,
                    |ri, _, seg| accs[ri].feed(seg, w, j0),
                );
                j0 += w;
            }
            for (ri, acc) in accs.iter().enumerate() {
                if !matches!(job.reductions[ri].kind, ReduceKind::Pick { .. }) {
                    store_acc(&mut bouts[n_stores + ri], i - r_begin, acc);
                }
            }
        }
    }
    run_picks(job, r_begin, r_end, &mut bouts[n_stores..], scratch);
}

/// `Pick` reductions: the expression at the single element `(i, idx[i])` of each row (indices
/// were validated to be `< cols`).
fn run_picks<T: Real>(
    job: &Job<'_, '_, T>,
    r_begin: usize,
    r_end: usize,
    red_outs: &mut [BlockOut<'_, T>],
    scratch: &mut [T],
) {
    for (ri, red) in job.reductions.iter().enumerate() {
        let ReduceKind::Pick { index_input } = red.kind else {
            continue;
        };
        let Some(Source::Index(idx)) = job.srcs.get(index_input) else {
            continue;
        };
        for i in r_begin..r_end {
            let tile = Tile {
                r0: i,
                nr: 1,
                j0: idx[i] as usize,
                w: 1,
            };
            let value = match eval(&red.expr, Sources::inputs(job.srcs), tile, scratch, 0) {
                Val::Uniform(x) => x,
                Val::Borrowed(s) => s[0],
                Val::Slot => scratch[0],
            };
            if let BlockOut::Values(v) = &mut red_outs[ri] {
                v[i - r_begin] = value;
            }
        }
    }
}
