//! Planner passes: one list ([`PIPELINE`]) of small units, each one rewrite, run in order by
//! [`crate::planner::plan`]. Graph passes rewrite the typed graph; the lowering stage groups
//! element-wise work into kernels ([`fuse`]) and turns the graph into a [`Plan`]; plan passes
//! rewrite the plan.
//!
//! 1. [`infer`]: re-derives every node's type and checks that every dimension is bound;
//!    [`cse`] merges nodes that compute the same value;
//! 2. [`canonicalize`]: transposes become product flags, scalar factors become alpha;
//!    [`chains`]: `(A * B^T) * C` becomes `A * (B^T * C)` where that costs less (the linear
//!    kernel's Kernel K-means becomes Lloyd's algorithm);
//! 3. [`select`]: each product becomes a library operation (GEMM, SYRK, GEMV, SpMM, SpMV);
//! 4. patterns, each matched through [`pattern`]: [`cluster_sums`] (products with a selection
//!    matrix become sums by label), [`tf32_padding`] (a TF32 SYRK's operand padded to whole
//!    tensor-core rows) and [`contractions`] (a product consumed by element-wise maps and row
//!    reductions computed inside their kernel, never stored);
//! 5. lowering: [`fuse`] groups maps, broadcasts and reductions into kernels, and the graph
//!    becomes steps over values;
//! 6. [`half_storage`]: the values [`PlannerConfig::half_storage`] names are held in 16 bits,
//!    with conversions beside the steps that cannot hold them;
//!    [`lower_triangle`]: a SYRK read only by one map writes its lower triangle, the map
//!    mirrors it; [`pipelines`]: such a map runs band by band beside its SYRK;
//! 7. [`buffers`]: liveness and buffer reuse.
//!
//! A pass reads the device facts it needs from the [`Target`] in its [`PassContext`], and the
//! user's switches from the [`PlannerConfig`]; none holds a device constant.

pub mod buffers;
pub mod canonicalize;
pub mod chains;
pub mod cluster_sums;
pub mod contractions;
pub mod cse;
pub mod diagonals;
pub mod fuse;
pub mod half_storage;
pub mod infer;
pub mod label_order;
mod library_choice;
pub mod lower_triangle;
pub mod partition;
pub mod pattern;
pub mod pipelines;
pub mod select;
pub mod sparse_products;
pub mod tf32_padding;

pub use crate::contraction_policy::ContractionPolicy;
use crate::ir::Graph;
use crate::plan::collective::PartitionSpec;
use crate::plan::Plan;
pub use crate::plan_error::PlanError;
use crate::settings::Settings;
use crate::target::Target;
use crate::types::{DType, DimBindings};
use serde::{Deserialize, Serialize};

/// The user's switches for the planner. Device facts come from the [`Target`]; the `Option`
/// fields override them (for experiments and comparisons), `None` keeping the target's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannerConfig {
    /// Element type of the plan.
    pub dtype: DType,
    /// Group element-wise operations and reductions into generated kernels.
    pub fusion: bool,
    /// Let f32 dense products (GEMM, SYRK) use TF32 tensor cores: several times faster, with
    /// about 10 bits of mantissa per operand. Off: strict fp32.
    pub tf32: bool,
    /// Run a map that reads a lower-triangle SYRK band by band beside the product, where the
    /// target can (on by default).
    #[serde(default = "default_true")]
    pub overlap: bool,
    /// Overrides [`Target::syrk_gemm_ratio`].
    #[serde(default)]
    pub syrk_gemm_ratio: Option<f64>,
    /// Overrides [`Target::cluster_sums_max_k`] (0 turns the cluster-sums and label-sums
    /// patterns off).
    #[serde(default)]
    pub cluster_sums_max_k: Option<usize>,
    /// Rows per GEMM block row of SYRK steps instead of the target's rule (0: one library
    /// SYRK).
    #[serde(default)]
    pub syrk_block_rows: Option<usize>,
    /// Whether products are fused with their consumers into contraction kernels.
    #[serde(default)]
    pub contractions: ContractionPolicy,
    /// Split the plan along a dimension over several ranks ([`partition`]); `None`: one
    /// device, the plan as before. A CPU context under `POPCORN_CPU_RANKS=P` (P > 1) sets the
    /// points over P ranks.
    #[serde(default)]
    pub partition: Option<PartitionSpec>,
    /// Dense parameters and results held in 16 bits, by name ([`half_storage`]): a kernel
    /// matrix `K` in bf16 is written and read in half the bytes, every step still computing in
    /// f32. A name holds in every program that has a parameter or result of that name (a
    /// context's programs share its configuration); only in f32 plans.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub half_storage: std::collections::BTreeMap<String, kernel_ir::Half>,
    /// Products computed with 16-bit operands (bf16 or fp16; f32 plans only): the generated
    /// contraction kernels round both operands to this format and multiply on 16-bit tensor
    /// cores, accumulating in fp32 (8 or 11 significant bits per operand, against TF32's 11 and
    /// fp32's 24); the library's products (GEMM, SYRK) then use TF32, as if `tf32` were set. A
    /// backend without tensor cores (the CPU) computes every product strictly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_products: Option<kernel_ir::Half>,
    /// Generated contraction kernels compute their products as three TF32 products of split
    /// operands (3xTF32: about fp32's accuracy on tensor cores; f32 plans only, unless
    /// `half_products` is set); the library's products follow `tf32`. A backend or template
    /// without it computes strictly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tf32x3: bool,
}

fn default_true() -> bool {
    true
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            dtype: DType::F32,
            fusion: true,
            tf32: false,
            overlap: true,
            syrk_gemm_ratio: None,
            cluster_sums_max_k: None,
            syrk_block_rows: None,
            contractions: ContractionPolicy::Auto,
            partition: None,
            half_storage: Default::default(),
            half_products: None,
            tf32x3: false,
        }
    }
}

impl std::hash::Hash for PlannerConfig {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let PlannerConfig {
            dtype,
            fusion,
            tf32,
            overlap,
            syrk_gemm_ratio,
            cluster_sums_max_k,
            syrk_block_rows,
            contractions,
            partition,
            half_storage,
            half_products,
            tf32x3,
        } = self;
        dtype.hash(state);
        fusion.hash(state);
        tf32.hash(state);
        overlap.hash(state);
        syrk_gemm_ratio.map(f64::to_bits).hash(state);
        cluster_sums_max_k.hash(state);
        syrk_block_rows.hash(state);
        contractions.hash(state);
        partition.hash(state);
        half_storage.hash(state);
        half_products.hash(state);
        tf32x3.hash(state);
    }
}

impl PlannerConfig {
    /// Whether the library's f32 products (GEMM, SYRK) use TF32 tensor cores: asked for
    /// (`tf32`), or implied by 16-bit products (`half_products`).
    pub fn library_tf32(&self) -> bool {
        (self.tf32 || self.half_products.is_some()) && self.dtype == DType::F32
    }

    /// The precision of a generated contraction's product in this configuration.
    pub fn contraction_precision(&self) -> kernel_ir::Precision {
        match self.dtype {
            DType::F32 => {
                kernel_ir::Precision::from_settings(self.half_products, self.tf32x3, self.tf32)
            }
            DType::F64 => kernel_ir::Precision::Strict,
        }
    }

    /// The default configuration adjusted by the [settings](crate::settings): `POPCORN_NO_FUSION`,
    /// `POPCORN_CLUSTER_SUMS_MAX_K` / `POPCORN_NO_CLUSTER_SUMS`, `POPCORN_TF32`,
    /// `POPCORN_SYRK_BLOCK_ROWS`, `POPCORN_NO_OVERLAP`.
    pub fn from_settings(s: &Settings) -> PlannerConfig {
        PlannerConfig {
            fusion: !s.no_fusion,
            tf32: s.tf32,
            overlap: !s.no_overlap,
            cluster_sums_max_k: s.cluster_sums_max_k,
            syrk_block_rows: s.syrk_block_rows,
            contractions: s.contractions,
            ..PlannerConfig::default()
        }
    }

    /// [`PlannerConfig::from_settings`] with this process's settings.
    pub fn from_env() -> PlannerConfig {
        PlannerConfig::from_settings(crate::settings::settings())
    }

    /// The same configuration with the dense parameter or result `name` held in `half`.
    pub fn with_half_storage(mut self, name: &str, half: kernel_ir::Half) -> PlannerConfig {
        self.half_storage.insert(name.to_string(), half);
        self
    }

    /// The same configuration with another element type.
    pub fn with_dtype(mut self, dtype: DType) -> PlannerConfig {
        self.dtype = dtype;
        self
    }
}

/// What a pass sees besides the graph or plan.
pub struct PassContext<'a> {
    /// Concrete dimension sizes.
    pub dims: &'a DimBindings,
    /// The user's switches.
    pub config: &'a PlannerConfig,
    /// The machine the plan is for.
    pub target: &'a Target,
    /// Stored entries of the CSR inputs, by parameter name, where known.
    pub nnz: &'a std::collections::BTreeMap<String, usize>,
}

impl PassContext<'_> {
    /// The GEMM/SYRK threshold in force.
    pub fn syrk_gemm_ratio(&self) -> f64 {
        self.config
            .syrk_gemm_ratio
            .unwrap_or(self.target.syrk_gemm_ratio)
    }

    /// The largest number of clusters for the cluster-sums patterns.
    pub fn cluster_sums_max_k(&self) -> usize {
        self.config
            .cluster_sums_max_k
            .unwrap_or(self.target.cluster_sums_max_k)
    }

    /// Rows per GEMM block row of a SYRK of order `n` (0: one library SYRK).
    pub fn syrk_block_rows(&self, n: usize) -> usize {
        self.config.syrk_block_rows.unwrap_or_else(|| {
            self.target
                .syrk_blocking
                .map_or(0, |b| b.block_rows(n, self.config.library_tf32()))
        })
    }
}

/// A rewrite of the typed graph.
pub trait GraphPass: Sync {
    /// Name for logs and errors.
    fn name(&self) -> &'static str;
    /// Rewrites the graph in place; returns whether anything changed.
    fn run(&self, graph: &mut Graph, cx: &PassContext<'_>) -> Result<bool, PlanError>;
}

/// A rewrite of a lowered plan.
pub trait PlanPass: Sync {
    /// Name for logs and errors.
    fn name(&self) -> &'static str;
    /// Rewrites the plan in place; returns whether anything changed.
    fn run(&self, plan: &mut Plan, cx: &PassContext<'_>) -> Result<bool, PlanError>;
}

/// One stage of the planner.
#[derive(Clone, Copy)]
pub enum Stage {
    /// A graph pass.
    Graph(&'static dyn GraphPass),
    /// Fusion and lowering: the graph becomes a plan.
    Lower,
    /// A plan pass.
    Plan(&'static dyn PlanPass),
}

impl Stage {
    /// The stage's name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Stage::Graph(p) => p.name(),
            Stage::Lower => "lower",
            Stage::Plan(p) => p.name(),
        }
    }
}

/// The planner's passes, in order.
pub const PIPELINE: &[Stage] = &[
    Stage::Graph(&infer::Infer),
    Stage::Graph(&cse::Cse),
    Stage::Graph(&canonicalize::Canonicalize),
    Stage::Graph(&chains::Chains),
    Stage::Graph(&select::Select),
    Stage::Graph(&cluster_sums::ClusterSumsPattern),
    Stage::Graph(&cluster_sums::LabelSumsPattern),
    Stage::Graph(&tf32_padding::Tf32Padding),
    Stage::Graph(&contractions::Contractions),
    Stage::Graph(&cse::Cse),
    Stage::Graph(&infer::Infer),
    Stage::Lower,
    Stage::Plan(&half_storage::HalfStorage),
    Stage::Plan(&lower_triangle::LowerTriangle),
    Stage::Plan(&pipelines::Pipelines),
    Stage::Plan(&partition::Partitioning),
    Stage::Plan(&buffers::Buffers),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_over_the_target() {
        let dims = DimBindings::new();
        let target = Target::reference_gpu();
        let mut config = PlannerConfig::default();
        let cx = PassContext {
            dims: &dims,
            config: &config,
            target: &target,
            nnz: &std::collections::BTreeMap::new(),
        };
        assert_eq!(cx.syrk_gemm_ratio(), 300.0);
        assert_eq!(cx.cluster_sums_max_k(), 1024);
        assert_eq!(cx.syrk_block_rows(60_000), 4096);
        config.syrk_gemm_ratio = Some(10.0);
        config.cluster_sums_max_k = Some(0);
        config.syrk_block_rows = Some(0);
        let cx = PassContext {
            dims: &dims,
            config: &config,
            target: &target,
            nnz: &std::collections::BTreeMap::new(),
        };
        assert_eq!(cx.syrk_gemm_ratio(), 10.0);
        assert_eq!(cx.cluster_sums_max_k(), 0);
        assert_eq!(cx.syrk_block_rows(60_000), 0);
        let cpu = Target::cpu(2);
        let cx = PassContext {
            dims: &dims,
            config: &PlannerConfig::default(),
            target: &cpu,
            nnz: &std::collections::BTreeMap::new(),
        };
        assert_eq!(cx.syrk_block_rows(60_000), 0);
    }

    #[test]
    fn the_pipeline_names_each_pass_once_per_run() {
        let names: Vec<&str> = PIPELINE.iter().map(Stage::name).collect();
        assert_eq!(names.first(), Some(&"infer"));
        assert_eq!(names.last(), Some(&"buffers"));
        let lower = names.iter().position(|n| *n == "lower");
        assert!(lower.is_some_and(|l| names[l + 1..].iter().all(|n| *n != "select")));
    }
}
