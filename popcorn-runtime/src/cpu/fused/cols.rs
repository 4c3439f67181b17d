//! The `Cols` form: per-column reductions over rows. Work is split into fixed row blocks times
//! column groups (sizes derived from the problem shape only, never from the thread count); each
//! task folds its rows in order into partials, and the partials of the row blocks are combined
//! in block order, so results are identical on every machine.

use kernel_ir::Reduction;
use rayon::prelude::*;

use super::super::real::Real;
use super::eval::{eval, Source, Sources, Tile, TILE};
use super::reduce::{col_combine, col_feed, col_identity};
use super::rows::row_segment;
use super::FusedOut;

/// Columns per task.
const COL_GROUP: usize = 4096;
/// At most this many row blocks.
const MAX_ROW_BLOCKS: usize = 64;
/// At most this many partial values in flight (bounds memory for very wide problems).
const MAX_PARTIALS: usize = 1 << 24;

/// Runs column reductions over `rows x cols`; `outs` holds one validated `PerCol` output per
/// reduction and `slots` scratch slots suffice for every expression.
pub(super) fn run_cols<T: Real>(
    srcs: &[Source<'_, T>],
    reductions: &[Reduction],
    rows: usize,
    cols: usize,
    outs: &mut [FusedOut<'_, T>],
    slots: usize,
) {
    let nred = reductions.len();
    if cols == 0 || nred == 0 {
        return;
    }
    let by_memory = (MAX_PARTIALS / (cols * nred)).max(1);
    let nb_target = MAX_ROW_BLOCKS.min(rows).min(by_memory).max(1);
    let rb = rows.div_ceil(nb_target).max(1);
    let nb = rows.div_ceil(rb);
    let ng = cols.div_ceil(COL_GROUP);

    let partials: Vec<Vec<T>> = (0..nb * ng)
        .into_par_iter()
        .map_init(
            || vec![T::zero(); slots.max(1) * TILE],
            |scratch, task| {
                let (b, g) = (task / ng, task % ng);
                let r_begin = b * rb;
                let r_end = (r_begin + rb).min(rows);
                let c0 = g * COL_GROUP;
                let c1 = (c0 + COL_GROUP).min(cols);
                block_partials(srcs, reductions, r_begin, r_end, c0, c1, scratch)
            },
        )
        .collect();

    for (ri, (red, out)) in reductions.iter().zip(outs.iter_mut()).enumerate() {
        let FusedOut::Values(out) = out else {
            continue;
        };
        for g in 0..ng {
            let c0 = g * COL_GROUP;
            let gw = (c0 + COL_GROUP).min(cols) - c0;
            for jj in 0..gw {
                let mut acc = col_identity::<T>(red.kind);
                for b in 0..nb {
                    acc = col_combine(red.kind, acc, partials[b * ng + g][ri * gw + jj]);
                }
                out[c0 + jj] = acc;
            }
        }
    }
}

/// Partials of every reduction over rows `r_begin..r_end` and columns `c0..c1`, laid out as
/// `nred` consecutive runs of `c1 - c0` values.
fn block_partials<T: Real>(
    srcs: &[Source<'_, T>],
    reductions: &[Reduction],
    r_begin: usize,
    r_end: usize,
    c0: usize,
    c1: usize,
    scratch: &mut [T],
) -> Vec<T> {
    let gw = c1 - c0;
    let mut partial = Vec::with_capacity(reductions.len() * gw);
    for red in reductions {
        partial.extend(std::iter::repeat_n(col_identity::<T>(red.kind), gw));
    }
    if gw <= TILE {
        let nr_max = (TILE / gw).max(1);
        let mut r0 = r_begin;
        while r0 < r_end {
            let nr = nr_max.min(r_end - r0);
            let tile = Tile {
                r0,
                nr,
                j0: c0,
                w: gw,
            };
            for (ri, red) in reductions.iter().enumerate() {
                let v = eval(&red.expr, Sources::inputs(srcs), tile, scratch, 0);
                let part = &mut partial[ri * gw..(ri + 1) * gw];
                for q in 0..nr {
                    col_feed(red.kind, part, row_segment(&v, scratch, tile, q));
                }
            }
            r0 += nr;
        }
    } else {
        for i in r_begin..r_end {
            let mut j0 = c0;
            while j0 < c1 {
                let w = TILE.min(c1 - j0);
                let tile = Tile {
                    r0: i,
                    nr: 1,
                    j0,
                    w,
                };
                for (ri, red) in reductions.iter().enumerate() {
                    let v = eval(&red.expr, Sources::inputs(srcs), tile, scratch, 0);
                    let off = ri * gw + (j0 - c0);
                    col_feed(
                        red.kind,
                        &mut partial[off..off + w],
                        row_segment(&v, scratch, tile, 0),
                    );
                }
                j0 += w;
            }
        }
    }
    partial
}
