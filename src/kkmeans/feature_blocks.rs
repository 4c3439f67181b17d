//! The features algorithm with its features never held whole: where `n x D` features do not
//! fit in memory, every iteration builds them block of rows by block (`poly_features`) and
//! runs `features_step` on each block against the centroids' features, `k x D` values. The
//! memory is the points, one block's features (two where the last block is smaller), the
//! plans' workspaces and every block's `k x D` sums until they are read back: linear in `n`
//! with a small factor (`d` values a point), whatever `D`.
//!
//! An iteration is Lloyd's algorithm in feature space: the centroids of the input labels come
//! from their clusters' feature sums (kept from the iteration before, which summed the
//! features by its new labels while it had them, or summed in a pass of their own), divided
//! by the clusters' sizes (weights) on the host in f64; each block then gives its new labels,
//! its parts of the objective and of the changed count, and its features summed by new label.
//! The outputs are the other algorithms', up to rounding.

use super::algorithm::{bytes_text, plan_of, recompute_config};
use super::features::{FeatureBuilder, FeatureMap};
use super::model::weighted_name;
use super::programs::program;
use super::FitError;
use crate::{Args, Context, Outputs, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;

/// The share of the free memory a fit's features may be planned in, whole or in blocks (the
/// rest for what the estimates leave out: the library's and the allocator's own).
pub(crate) const USABLE_SHARE: f64 = 0.9;

/// How a fit's features are built block by block: rows a block, and what that costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BlockLayout {
    /// Rows of every block but the last (which may be smaller).
    pub rows: usize,
    /// Estimated seconds of one iteration (every block built and stepped, and the host's
    /// exchanges), by the target's cost model.
    pub per_iteration_s: f64,
    /// Bytes the fit's values take on the device at most.
    pub bytes: u64,
}

/// The block layout of a fit of `n` points (`map`'s input dimension each) into `k` clusters
/// within `free` bytes (`None`: unknown, one block), or why there is none.
pub(crate) fn layout(
    ctx: &Context,
    map: &FeatureMap,
    (n, k): (usize, usize),
    weighted: bool,
    free: Option<u64>,
) -> Result<BlockLayout, String> {
    let (d, dim) = (map.input_dim(), map.dim());
    let size = ctx.dtype().size_bytes() as u64;
    let step_config = recompute_config(ctx.config());
    // A block program's plan (the step, or the first pass's sums) on m rows.
    let block_plan = |family: &str, m: usize| {
        let dims = [("m", m), ("f", dim), ("k", k)];
        plan_of(ctx, &step_config, &weighted_name(family, weighted), &dims)
            .map_err(|e| e.to_string())
    };
    let plans = |m: usize| -> Result<(crate::Plan, crate::Plan), String> {
        let build = plan_of(
            ctx,
            ctx.config(),
            "poly_features",
            &[("n", m), ("d", d), ("f", dim)],
        )
        .map_err(|e| e.to_string())?;
        Ok((build, block_plan("features_step", m)?))
    };
    // The first pass's plan, cached beside the others.
    let sums_workspace = |m: usize| -> Result<u64, String> {
        Ok(block_plan("features_sums", m)?.workspace_bytes() as u64)
    };
    // Bytes a block of m rows takes: the plans' workspaces, its features, and the kernel's
    // column and own values for k-means++ (two per row).
    let sums_bytes = k as u64 * dim as u64 * size;
    let block_bytes = |m: usize| -> Result<u64, String> {
        let (build, step) = plans(m)?;
        let m = m as u64;
        Ok((build.workspace_bytes() as u64)
            .saturating_add(step.workspace_bytes() as u64)
            .saturating_add(sums_workspace(m as usize)?)
            .saturating_add(m.saturating_mul(dim as u64 + 2).saturating_mul(size)))
    };
    // What every block shares: the points (in blocks) and their weights, the labels four
    // times over (the iteration's in and out, each block's in and out), the map's columns,
    // and the centroids' features and norms.
    let fixed = (n as u64)
        .saturating_mul(d as u64 * size + 16 + size)
        .saturating_add(map.build_bytes(size as usize))
        .saturating_add((k as u64 * dim as u64 + k as u64) * size);
    let probe = n.clamp(1, 4096);
    let per_row = block_bytes(probe)?.div_ceil(probe as u64);
    // Blocks of two sizes keep two sets of plans (the last block's may be smaller); every
    // block keeps its own sums until they are read back.
    let need = |rows: usize| {
        fixed
            .saturating_add((2 * per_row).saturating_mul(rows as u64))
            .saturating_add((n.div_ceil(rows) as u64).saturating_mul(sums_bytes))
    };
    // The rows a block that need least (more blocks keep more sums, fewer hold more rows).
    let thriftiest =
        ((n as f64 * sums_bytes as f64 / (2 * per_row) as f64).sqrt() as usize).clamp(1, n.max(1));
    let rows = match free {
        None => n,
        Some(free) => {
            // The same share of what is free as the whole features may take.
            let usable = (free as f64 * USABLE_SHARE) as u64;
            let most = usable.saturating_sub(fixed) / (2 * per_row).max(1);
            let most = usize::try_from(most)
                .unwrap_or(usize::MAX)
                .clamp(1, n.max(1));
            // As few blocks as fit, of equal sizes (each block's sums counted too).
            let mut blocks = n.div_ceil(most);
            while need(n.div_ceil(blocks)) > usable && n.div_ceil(blocks) > thriftiest {
                blocks += 1;
            }
            let rows = match n.div_ceil(blocks) {
                rows if need(rows) <= usable => rows,
                _ if need(thriftiest) <= usable => thriftiest,
                _ => {
                    return Err(format!(
                        "in blocks of rows the features need at least {} with the points \
                         (blocks of {thriftiest} rows), and {} may be planned ({:.0}% of {} \
                         free)",
                        bytes_text(need(thriftiest)),
                        bytes_text(usable),
                        USABLE_SHARE * 100.0,
                        bytes_text(free)
                    ))
                }
            };
            rows
        }
    };
    let blocks = n.div_ceil(rows);
    let last = n - (blocks - 1) * rows;
    let (build, step) = plans(rows)?;
    let mut per_iteration_s =
        (blocks - 1) as f64 * (build.estimated_seconds() + step.estimated_seconds());
    let (build_last, step_last) = plans(last)?;
    per_iteration_s += build_last.estimated_seconds() + step_last.estimated_seconds();
    // The host's exchanges: the labels down once and up twice (whole, and in blocks), every
    // block's sums back, and a read-back of each block's objective (about 20 us each on a
    // GPU).
    let host_bytes = 12.0 * n as f64 + blocks as f64 * k as f64 * dim as f64 * size as f64;
    per_iteration_s += host_bytes / 10e9 + blocks as f64 * 20e-6;
    let mut bytes = fixed
        .saturating_add(block_bytes(rows)?)
        .saturating_add(blocks as u64 * sums_bytes);
    if last != rows {
        bytes = bytes.saturating_add(block_bytes(last)?);
    }
    Ok(BlockLayout {
        rows,
        per_iteration_s,
        bytes,
    })
}

/// One block of rows: its points on the device and their weights (divided by the fit's
/// weight scale) where the fit is weighted.
struct Block {
    rows: Range<usize>,
    x: Tensor,
    w: Option<Tensor>,
}

/// The iterations' state between steps.
#[derive(Default)]
struct State {
    /// Labels and their clusters' feature sums (`k x D`, row-major), from the last step.
    sums: Option<(Vec<u32>, Vec<f64>)>,
    /// The centroid norms of the last step's input labels.
    centroid_norms: Vec<f64>,
    /// Each block size's features, reused block after block.
    features: HashMap<usize, Outputs>,
    /// Each block's step outputs, read back (but for their scalars) once every block ran.
    stepped: Vec<Outputs>,
}

/// A fit's points in blocks on the device, their feature map's selections and the iterations'
/// state (see the module documentation).
pub(crate) struct FeatureBlocks {
    builder: FeatureBuilder,
    blocks: Vec<Block>,
    n: usize,
    dim: usize,
    k: usize,
    /// The points' weights divided by the fit's weight scale, where weighted.
    weights: Option<Vec<f64>>,
    state: RefCell<State>,
}

impl FeatureBlocks {
    /// `n` points (`x`, row-major, `map`'s input dimension each) in blocks of `rows` on `ctx`,
    /// weighted by `weights` (divided by the fit's weight scale) where given, for `k` clusters.
    pub(crate) fn new(
        ctx: &Context,
        map: &FeatureMap,
        x: &[f64],
        (n, k): (usize, usize),
        rows: usize,
        weights: Option<Vec<f64>>,
    ) -> Result<FeatureBlocks, FitError> {
        let d = map.input_dim();
        let rows = rows.clamp(1, n.max(1));
        let blocks = (0..n)
            .step_by(rows)
            .map(|start| {
                let range = start..(start + rows).min(n);
                let w = match &weights {
                    Some(w) => Some(ctx.col(&w[range.clone()])?),
                    None => None,
                };
                Ok(Block {
                    x: ctx.dense(range.len(), d, &x[range.start * d..range.end * d])?,
                    rows: range,
                    w,
                })
            })
            .collect::<Result<Vec<_>, FitError>>()?;
        Ok(FeatureBlocks {
            builder: map.builder(ctx)?,
            blocks,
            n,
            dim: map.dim(),
            k,
            weights,
            state: RefCell::default(),
        })
    }

    /// The points of every block on the device, in order.
    pub(crate) fn points(&self) -> impl Iterator<Item = &Tensor> {
        self.blocks.iter().map(|b| &b.x)
    }

    /// One iteration from `labels` (on `ctx`): the objective and the number of labels that
    /// changed; the new labels go into `out` as `new_labels`.
    pub(crate) fn step(
        &self,
        ctx: &mut Context,
        labels: &Tensor,
        out: &mut Outputs,
    ) -> Result<(f64, f64), FitError> {
        let labels = ctx.to_u32(labels)?;
        let kept = self.state.borrow_mut().sums.take();
        let sums = match kept {
            Some((l, sums)) if l == labels => sums,
            _ => self.sums(ctx, &labels)?,
        };
        let (centroids, norms) = self.centroids(&labels, &sums);
        let c = ctx.dense(self.k, self.dim, &centroids)?;
        let cn = ctx.col(&norms)?;
        let step = weighted_name("features_step", self.weights.is_some());
        self.run_blocks(ctx, &labels, &step, &[("C", &c), ("cn", &cn)])?;
        let mut state = self.state.borrow_mut();
        let mut new_labels = vec![0u32; self.n];
        let mut next = vec![0.0; self.k * self.dim];
        let (mut objective, mut changed) = (0.0, 0.0);
        for (block, stepped) in self.blocks.iter().zip(&state.stepped) {
            objective += stepped.scalar("objective")?;
            changed += stepped.scalar("changed")?;
            new_labels[block.rows.clone()]
                .copy_from_slice(&ctx.to_u32(stepped.tensor("new_labels")?)?);
            add(&mut next, &ctx.to_f64(stepped.tensor("S")?)?);
        }
        out.insert("new_labels", ctx.index(&new_labels)?);
        state.sums = Some((new_labels, next));
        state.centroid_norms = norms;
        Ok((objective, changed))
    }

    /// Builds every block's features and runs program `name` on each block (with its labels,
    /// its weights and the `shared` tensors) into the block's own outputs: the labels go up
    /// first, and only a block's scalars (the objective) are waited for before the next is
    /// queued; its labels and sums are read back after the last.
    fn run_blocks(
        &self,
        ctx: &mut Context,
        labels: &[u32],
        name: &str,
        shared: &[(&str, &Tensor)],
    ) -> Result<(), FitError> {
        let block_labels = self.upload_labels(ctx, labels)?;
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        state
            .stepped
            .resize_with(self.blocks.len(), Outputs::default);
        let blocks = self.blocks.iter().zip(&block_labels);
        for ((block, labels), out) in blocks.zip(&mut state.stepped) {
            let features = state.features.entry(block.rows.len()).or_default();
            self.builder.build_into(ctx, &block.x, features)?;
            let mut args = Args::new()
                .tensor("Phi", features.tensor("Phi")?)
                .tensor("labels", labels)
                .dim("k", self.k);
            for (shared_name, t) in shared {
                args = args.tensor(shared_name, t);
            }
            if let Some(w) = &block.w {
                args = args.tensor("w", w);
            }
            ctx.run_into(program(name), &args, out)?;
        }
        Ok(())
    }

    /// `labels` of every block on the device.
    fn upload_labels(&self, ctx: &Context, labels: &[u32]) -> Result<Vec<Tensor>, FitError> {
        self.blocks
            .iter()
            .map(|b| Ok(ctx.index(&labels[b.rows.clone()])?))
            .collect()
    }

    /// The centroid norms of the last step's input labels.
    pub(crate) fn centroid_norms(&self) -> Vec<f64> {
        self.state.borrow().centroid_norms.clone()
    }

    /// The features summed by `labels`' clusters (weighted), `k x D`, a pass over the blocks.
    fn sums(&self, ctx: &mut Context, labels: &[u32]) -> Result<Vec<f64>, FitError> {
        let name = weighted_name("features_sums", self.weights.is_some());
        self.run_blocks(ctx, labels, &name, &[])?;
        let state = self.state.borrow();
        let mut sums = vec![0.0; self.k * self.dim];
        for out in &state.stepped {
            add(&mut sums, &ctx.to_f64(out.tensor("S")?)?);
        }
        Ok(sums)
    }

    /// The centroids' features (the clusters' sums over their sizes or weights) and squared
    /// norms (`+inf` for an empty cluster, whose features are 0), in f64.
    fn centroids(&self, labels: &[u32], sums: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let sizes = super::weights::cluster_sizes(labels, self.weights.as_deref(), self.k);
        let mut centroids = sums.to_vec();
        let norms = centroids
            .chunks_mut(self.dim)
            .zip(&sizes)
            .map(|(row, &size)| {
                if size > 0.0 {
                    row.iter_mut().for_each(|v| *v /= size);
                    row.iter().map(|v| v * v).sum()
                } else {
                    row.fill(0.0);
                    f64::INFINITY
                }
            })
            .collect();
        (centroids, norms)
    }
}

/// `acc += values`, element by element.
fn add(acc: &mut [f64], values: &[f64]) {
    for (a, v) in acc.iter_mut().zip(values) {
        *a += v;
    }
}
