//! Planner passes. Each pass is a small unit over the typed graph, run in sequence by
//! [`crate::planner::plan`]:
//!
//! 1. [`infer`]: re-derives every node's type and checks that every dimension is bound;
//!    [`cse`] then merges nodes that compute the same value;
//! 2. [`canonicalize`]: transposes become product flags, scalar factors become alpha;
//! 3. [`select`]: each product becomes a library operation (GEMM, SYRK, GEMV, SpMM, SpMV);
//!    [`cluster_sums`] then turns products with a selection matrix into streaming cluster sums;
//! 4. [`fuse`]: element-wise maps, broadcasts and reductions are grouped into kernels;
//! 5. [`symmetric`] (on the lowered plan): a SYRK read only by one map writes its lower
//!    triangle and the map mirrors it;
//! 6. [`buffers`] (on the lowered plan): liveness and buffer reuse.
//!
//! Passes that recognise bigger patterns slot in between as further [`Pass`] values.

pub mod buffers;
pub mod canonicalize;
pub mod cluster_sums;
pub mod cse;
pub mod fuse;
pub mod infer;
pub mod select;
pub mod symmetric;

use crate::ir::Graph;
use crate::types::{DType, DimBindings};
use serde::{Deserialize, Serialize};

/// Settings that steer the planner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannerConfig {
    /// Element type of the plan.
    pub dtype: DType,
    /// `X * X^T` with `X: n x d` uses GEMM when `n / d` exceeds this, SYRK otherwise. SYRK does
    /// half the flops but needs a second pass to fill the other triangle, so for small `d`
    /// (writing K dominates) GEMM wins. Measured on an H100 (BENCHMARKS.md): 300, where
    /// Popcorn's reference uses 100.
    pub syrk_gemm_ratio: f64,
    /// Group element-wise operations and reductions into generated kernels.
    pub fusion: bool,
    /// Products `M * V^T` with a selection matrix `V = selection(labels, k)` become one
    /// streaming pass of cluster sums over `M` (instead of a general sparse product) when
    /// `k` is at most this, and products `V * x` become sums of `x` by label (where also
    /// `n k <= 2^25`); 0 turns both patterns off. The default, 1024, is where the measured
    /// cluster-sums kernel is still about 2x faster than cuSPARSE's SpMM on an H100
    /// (BENCHMARKS.md). `POPCORN_CLUSTER_SUMS_MAX_K` sets it.
    pub cluster_sums_max_k: usize,
    /// Let f32 dense products (GEMM, SYRK) use TF32 tensor cores: several times faster, with
    /// about 10 bits of mantissa per operand (`POPCORN_TF32=1`). Off: strict fp32.
    pub tf32: bool,
    /// How the GPU computes a SYRK step: `None` (the default) picks block rows by
    /// [`syrk_block_rows`]; `Some(0)` calls cuBLAS SYRK; `Some(b)` computes the lower triangle
    /// as GEMMs of `b`-row blocks (`POPCORN_SYRK_BLOCK_ROWS`).
    #[serde(default)]
    pub syrk_block_rows: Option<usize>,
    /// Run the map that reads a lower-triangle SYRK block row by block row, each band as soon
    /// as its block row is written, beside the next block row's GEMM (on the GPU, on a second
    /// stream), instead of after the whole product. On by default; `POPCORN_NO_OVERLAP=1`
    /// turns it off.
    #[serde(default = "default_true")]
    pub overlap_syrk_map: bool,
}

fn default_true() -> bool {
    true
}

/// Rows per block of a SYRK step of order `n` computed as GEMMs over block rows (each block
/// row's rectangle left of its diagonal block, the diagonal blocks of 1024 rows or more halved
/// down to 512-row leaves): 512 times the largest power of two that leaves at least 12 block
/// rows in strict fp32, 24 with `tf32` (at least 512), so the diagonal blocks halve evenly,
/// every GEMM still fills the GPU, and an overlapped map gets bands of whole 512-row groups of
/// its tile pairs. Unlike cuBLAS SYRK, the GEMMs run at the full GEMM rate and use tensor
/// cores under TF32. Measured on an H100 (n = 60000, d = 784): strict fp32 64.0 ms with 4096
/// rows against 65.2 with 2048; TF32 16.0 ms with 2048 against 16.2 with 4096 (its faster
/// GEMMs leave more of the map to overlap, which finer bands do better).
pub fn syrk_block_rows(n: usize, tf32: bool) -> usize {
    let min_block_rows: usize = if tf32 { 24 } else { 12 };
    let mut rows = 512usize;
    while rows.saturating_mul(2).saturating_mul(min_block_rows) <= n {
        rows *= 2;
    }
    rows
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            dtype: DType::F32,
            syrk_gemm_ratio: 300.0,
            fusion: true,
            cluster_sums_max_k: 1024,
            tf32: false,
            syrk_block_rows: None,
            overlap_syrk_map: true,
        }
    }
}

impl std::hash::Hash for PlannerConfig {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let PlannerConfig {
            dtype,
            syrk_gemm_ratio,
            fusion,
            cluster_sums_max_k,
            tf32,
            syrk_block_rows,
            overlap_syrk_map,
        } = self;
        dtype.hash(state);
        syrk_gemm_ratio.to_bits().hash(state);
        fusion.hash(state);
        cluster_sums_max_k.hash(state);
        tf32.hash(state);
        syrk_block_rows.hash(state);
        overlap_syrk_map.hash(state);
    }
}

impl PlannerConfig {
    /// The default configuration adjusted by the environment: `POPCORN_NO_FUSION=1` turns
    /// fusion off; `POPCORN_CLUSTER_SUMS_MAX_K=N` turns the cluster-sums pattern on up to N
    /// clusters and `POPCORN_NO_CLUSTER_SUMS=1` off (products with a selection matrix then go to
    /// the general sparse product); `POPCORN_TF32=1` lets dense products use TF32;
    /// `POPCORN_SYRK_BLOCK_ROWS=B` sets [`PlannerConfig::syrk_block_rows`] (0: cuBLAS SYRK);
    /// `POPCORN_NO_OVERLAP=1` turns [`PlannerConfig::overlap_syrk_map`] off.
    pub fn from_env() -> PlannerConfig {
        let set = |name: &str| std::env::var(name).is_ok_and(|v| v != "0" && !v.is_empty());
        let mut c = PlannerConfig::default();
        if set("POPCORN_NO_FUSION") {
            c.fusion = false;
        }
        if let Some(k) = std::env::var("POPCORN_CLUSTER_SUMS_MAX_K")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.cluster_sums_max_k = k;
        }
        if set("POPCORN_NO_CLUSTER_SUMS") {
            c.cluster_sums_max_k = 0;
        }
        if set("POPCORN_TF32") {
            c.tf32 = true;
        }
        if let Some(b) = std::env::var("POPCORN_SYRK_BLOCK_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            c.syrk_block_rows = Some(b);
        }
        if set("POPCORN_NO_OVERLAP") {
            c.overlap_syrk_map = false;
        }
        c
    }

    /// The same configuration with another element type.
    pub fn with_dtype(mut self, dtype: DType) -> PlannerConfig {
        self.dtype = dtype;
        self
    }
}

/// Why planning failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A dimension of the program has no size.
    #[error("dimension `{0}` has no size; give it (for example --dim {0}=100) or bind an input that has it")]
    UnboundDim(String),
    /// A dimension was given the size 0.
    #[error("dimension `{0}` is 0; every dimension must be at least 1")]
    ZeroDim(String),
    /// A rewritten graph no longer type-checks (a planner bug).
    #[error("internal planner error in pass `{pass}`: {message}")]
    Internal {
        /// The pass.
        pass: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The program uses something the planner cannot lower.
    #[error("{0}")]
    Unsupported(String),
}

/// What a pass sees besides the graph.
pub struct PassContext<'a> {
    /// Concrete dimension sizes.
    pub dims: &'a DimBindings,
    /// Planner settings.
    pub config: &'a PlannerConfig,
}

/// A graph rewrite.
pub trait Pass {
    /// Name for logs and errors.
    fn name(&self) -> &'static str;
    /// Rewrites the graph in place; returns whether anything changed.
    fn run(&self, graph: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError>;
}

/// Runs passes in order, logging the graph after each when `POPCORN_LOG` includes `plan`.
pub fn run_passes(
    passes: &[&dyn Pass],
    graph: &mut Graph,
    cx: &PassContext<'_>,
) -> Result<(), PlanError> {
    let log = crate::log::enabled("plan");
    for p in passes {
        let changed = p.run(graph, cx)?;
        if log {
            eprintln!(
                "[popcorn plan] after pass `{}` (changed: {changed}):\n{graph}",
                p.name()
            );
        }
    }
    Ok(())
}
