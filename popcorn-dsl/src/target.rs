//! The target description: what the planner may assume about the machine a plan runs on.
//!
//! One [`Target`] value per backend holds every device fact a pass reads (thresholds, block
//! sizes, tile sides, ceilings); no pass holds a device constant of its own. A backend supplies
//! its target (the CUDA backend from the device's properties and its kernels' constants), the
//! planner hands it to every pass, and the plan records the target it was made for. Plans can
//! also be made for a described machine without it ([`Target::reference_gpu`],
//! [`Target::cpu`]), e.g. to print them.
//!
//! The figures of the presets were measured on the reference machines (an H100 for the GPU,
//! the 2-core CI machine for the CPU); BENCHMARKS.md has the runs they come from.

use serde::{Deserialize, Serialize};

/// Which backend a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TargetKind {
    /// The multithreaded CPU backend.
    Cpu,
    /// A CUDA GPU.
    Cuda,
}

/// Rates the cost model may count on (measured, or the reference machine's).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Memory bandwidth, bytes read plus bytes written per second (a large device copy).
    pub copy_bytes_per_s: f64,
    /// Strict fp32 matrix products, flop/s (a large SGEMM).
    pub fp32_flops_per_s: f64,
    /// fp32 matrix products on TF32 tensor cores, flop/s (equal to `fp32_flops_per_s` where
    /// there are none).
    pub tf32_flops_per_s: f64,
    /// fp64 matrix products, flop/s.
    pub fp64_flops_per_s: f64,
}

impl Ceilings {
    /// The matrix-product rate for element type `dtype`, on TF32 tensor cores where `tf32`
    /// (f32 only).
    pub fn product_flops_per_s(&self, dtype: crate::types::DType, tf32: bool) -> f64 {
        match (dtype, tf32) {
            (crate::types::DType::F64, _) => self.fp64_flops_per_s,
            (_, true) => self.tf32_flops_per_s,
            (_, false) => self.fp32_flops_per_s,
        }
    }

    /// The rate of f32 products computed at `precision` by a generated contraction kernel: 16-bit
    /// operands at twice the TF32 rate, 3xTF32 at a third of it; the strict rate on a device
    /// without tensor cores, which computes them strictly.
    pub fn tensor_product_flops_per_s(&self, precision: kernel_ir::Precision) -> f64 {
        let tensor_cores = self.tf32_flops_per_s > self.fp32_flops_per_s;
        match precision {
            kernel_ir::Precision::Strict => self.fp32_flops_per_s,
            kernel_ir::Precision::Tf32 => self.tf32_flops_per_s,
            kernel_ir::Precision::Half(_) if tensor_cores => 2.0 * self.tf32_flops_per_s,
            kernel_ir::Precision::Tf32x3 if tensor_cores => self.tf32_flops_per_s / 3.0,
            _ => self.fp32_flops_per_s,
        }
    }
}

/// How a SYRK is computed as GEMMs over block rows (GPU): each block row's rectangle left of
/// its diagonal block, the diagonal blocks halved down to `leaf_rows`-row leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyrkBlocking {
    /// Rows of the smallest diagonal blocks, computed whole.
    pub leaf_rows: usize,
    /// The fewest block rows a strict-fp32 SYRK is cut into (every GEMM must still fill the
    /// device).
    pub min_block_rows: usize,
    /// The same under TF32, whose faster GEMMs leave more of a following map to overlap, which
    /// finer bands do better.
    pub min_block_rows_tf32: usize,
}

impl SyrkBlocking {
    /// Rows per block of a SYRK of order `n`: `leaf_rows` times the largest power of two that
    /// leaves at least the minimum number of block rows, so the diagonal blocks halve evenly
    /// down to the leaves and an overlapped map gets bands of whole leaves.
    pub fn block_rows(&self, n: usize, tf32: bool) -> usize {
        let min_blocks = if tf32 {
            self.min_block_rows_tf32
        } else {
            self.min_block_rows
        };
        let mut rows = self.leaf_rows.max(1);
        while rows.saturating_mul(2).saturating_mul(min_blocks) <= n {
            rows *= 2;
        }
        rows
    }
}

/// Rows of a dense operand padded with zero columns before a TF32 product (GPU): the
/// tensor-core GEMMs run faster on rows of whole `multiple`s of elements, and `A A^T` is
/// unchanged exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowPadding {
    /// Rows are padded to a multiple of this many elements.
    pub multiple: usize,
    /// Only rows of at least this many elements (shorter ones: the product is bound by
    /// writing its result, and the copy would not pay).
    pub min_cols: usize,
}

/// What the planner may assume about the machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// The backend.
    pub kind: TargetKind,
    /// The device in words (`cpu (2 threads)`, `NVIDIA H100 80GB HBM3 (sm_90)`).
    pub device: String,
    /// Threads (CPU) or multiprocessors (GPU).
    pub parallelism: usize,
    /// Memory the plan's data must fit in, bytes, where known.
    pub memory_bytes: Option<u64>,
    /// The rates of the cost model.
    pub ceilings: Ceilings,
    /// `X * X^T` with `X: n x d` whose result is used as it is takes GEMM when `n / d` exceeds
    /// this, SYRK otherwise (SYRK does half the flops but needs a second pass to fill the other
    /// triangle, so for small `d`, where writing the result dominates, GEMM wins).
    pub syrk_gemm_ratio: f64,
    /// How SYRK steps are cut into GEMMs; `None`: one library SYRK.
    pub syrk_blocking: Option<SyrkBlocking>,
    /// The largest number of clusters for which products with a selection matrix become cluster
    /// sums and label sums (beyond it the general sparse product is faster).
    pub cluster_sums_max_k: usize,
    /// The largest `n k` for which `V * x` (V a selection matrix of `n` points, `k` clusters)
    /// becomes label sums: its kernel reads the labels once per cluster. (The label sums the
    /// planner adds regardless, the weights' totals `counts(labels, k, w)`, run one pass past
    /// [`LABEL_SUMS_VECTOR_MAX_WORK`](crate::ops::LABEL_SUMS_VECTOR_MAX_WORK) on the GPU.)
    pub label_sums_max_work: usize,
    /// The largest `k` for which `V * X` (V a selection matrix of `k` clusters, X a matrix)
    /// becomes label sums of X's rows: its kernel keeps `k` partial rows per warp in shared
    /// memory; beyond it the selection matrix and an SpMM.
    #[serde(default = "default_label_row_sums_max_k")]
    pub label_row_sums_max_k: usize,
    /// Where the backend can run a map beside the product it reads, band by band on a second
    /// queue of work: band boundaries fall on multiples of this many rows. `None`: steps run
    /// one after the other.
    pub band_rows_multiple: Option<usize>,
    /// Zero columns appended to a TF32 SYRK's operand; `None`: never.
    pub tf32_row_padding: Option<RowPadding>,
    /// Products fused with their consumers into one kernel (contractions), where the backend
    /// has them; `None`: every product is a library call.
    #[serde(default)]
    pub contractions: Option<ContractionTarget>,
    /// Rates of the sparse products, for choosing how `A * B^T` of two CSR matrices is
    /// computed; `None`: such products densify their operands.
    #[serde(default)]
    pub sparse: Option<SparseTarget>,
}

/// How fast the backend's sparse products run (see [`crate::passes::sparse_products`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SparseTarget {
    /// flop/s of the backend's sparse x sparse^T product written dense (each entry of `A`
    /// against the entries of `B` in its column); `None`: the backend has none.
    pub gram_flops_per_s: Option<f64>,
    /// flop/s of a CSR matrix times a dense row-major one (SpMM), the other way to a sparse
    /// `A * B^T`: against `B^T` written dense.
    pub spmm_flops_per_s: f64,
}

/// What the backend's contraction kernels can do and how fast they run.
///
/// Rates are fractions of the library's GEMM rate for the same product, for the cost model (a
/// product is fused where that is faster than storing its result). Backends may have a faster
/// kernel for the common shape, `float` products `A * B^T` of row-major operands with at most
/// one sum by label (every distance and kernel matrix, and Kernel K-means from the points):
/// `efficiency` and `tf32_efficiency` are for it; the `general_` rates for the rest (`double`,
/// transposed operands, several sums by label). A sum by label's epilogue is bounded apart
/// (`by_label_elements_per_s`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContractionTarget {
    /// Strict (fp32) rate of the common shape, against the library's GEMM.
    pub efficiency: f64,
    /// TF32 rate of the common shape, against the library's TF32 GEMM.
    #[serde(default = "default_tf32_efficiency")]
    pub tf32_efficiency: f64,
    /// Strict (fp32 or fp64) rate of other contractions.
    #[serde(default = "default_general_efficiency")]
    pub general_efficiency: f64,
    /// TF32 rate of other contractions.
    #[serde(default = "default_tf32_efficiency")]
    pub general_tf32_efficiency: f64,
    /// The most clusters of a by-label reduction the tiled contraction kernel takes (its bins
    /// live in fast on-chip memory: `double` values, or operands not stored as rows of the
    /// depth). The pipelined kernel (`float`, `A * B^T` of row-major operands) adds running
    /// sums to the output and takes any number.
    pub max_labels: usize,
    /// Elements (entries of the product) per second a contraction with a by-label reduction
    /// gets through at best, whatever its depth: its epilogue and its sums by label bound it
    /// where the product is shallow.
    #[serde(default = "default_by_label_elements_per_s")]
    pub by_label_elements_per_s: f64,
    /// Bytes per second a contraction writes the values it stores (its elements leave in the
    /// accumulators' fragments, a few bytes per row and lane, rather than in whole rows), on
    /// top of its product's time.
    #[serde(default = "default_store_bytes_per_s")]
    pub store_bytes_per_s: f64,
    /// The same for TF32 contractions whose stores are all 16-bit (a kernel matrix held in
    /// bf16 or fp16): where the backend writes them in whole 16-byte pieces of rows.
    #[serde(default = "default_store_bytes_per_s")]
    pub half_store_bytes_per_s: f64,
    /// TF32 rate of a contraction that only stores (a kernel matrix written from the product's
    /// tiles), against the library's TF32 GEMM: its epilogue writes every element.
    #[serde(default = "default_tf32_efficiency")]
    pub stores_only_tf32_efficiency: f64,
    /// Where set, the least depth at which a TF32 contraction of a matrix with itself into a
    /// square output whose one output is a mirrorable 16-bit value
    /// ([`KernelSpec::stores_a_mirrorable_value`](kernel_ir::KernelSpec::stores_a_mirrorable_value))
    /// computes only the tiles on and above the diagonal and writes each one's mirror image
    /// too: half the product, its stores at `mirror_store_bytes_per_s`. `None`: every tile.
    #[serde(default)]
    pub mirror_min_depth: Option<usize>,
    /// Bytes per second such a mirroring contraction writes its values and their mirror
    /// images (both counted).
    #[serde(default = "default_store_bytes_per_s")]
    pub mirror_store_bytes_per_s: f64,
}

/// Store rate of a target description that does not state it.
fn default_store_bytes_per_s() -> f64 {
    1e11
}

/// By-label element rate of a target description that does not state it.
fn default_by_label_elements_per_s() -> f64 {
    1e11
}

impl ContractionTarget {
    /// The rate fraction of a contraction: `common` for the common shape (see the type's
    /// documentation), `tf32` for TF32 products.
    pub fn efficiency_of(&self, common: bool, tf32: bool) -> f64 {
        match (common, tf32) {
            (true, false) => self.efficiency,
            (true, true) => self.tf32_efficiency,
            (false, false) => self.general_efficiency,
            (false, true) => self.general_tf32_efficiency,
        }
    }
}

/// TF32 efficiency of a target description that does not state it.
fn default_tf32_efficiency() -> f64 {
    0.2
}

/// Strict efficiency of other contractions, for a target description that does not state it.
fn default_general_efficiency() -> f64 {
    0.5
}

/// Clusters up to which `V * X` becomes label sums of rows on both targets: at 256 the CUDA
/// kernel still keeps seven warps of `k x 32` f32 partials (three in f64) in an H100's shared
/// memory.
const DEFAULT_LABEL_ROW_SUMS_MAX_K: usize = 256;

fn default_label_row_sums_max_k() -> usize {
    DEFAULT_LABEL_ROW_SUMS_MAX_K
}

/// SGEMM rate of the reference H100 (BENCHMARKS.md, run 6: 51.2 TFLOP/s).
const H100_FP32_FLOPS: f64 = 51.2e12;
/// Copy bandwidth of the reference H100 (BENCHMARKS.md, run 6: 2990 GB/s).
const H100_COPY_BYTES: f64 = 2.99e12;

impl Target {
    /// The CPU backend with `threads` worker threads. Its rates are those of one core of the
    /// 2-core CI machine (BENCHMARKS.md) times the threads.
    pub fn cpu(threads: usize) -> Target {
        let threads = threads.max(1);
        let per_thread_flops = 32e9;
        Target {
            kind: TargetKind::Cpu,
            device: format!("cpu ({threads} threads)"),
            parallelism: threads,
            memory_bytes: None,
            ceilings: Ceilings {
                copy_bytes_per_s: 15e9 * threads as f64,
                fp32_flops_per_s: per_thread_flops * threads as f64,
                tf32_flops_per_s: per_thread_flops * threads as f64,
                fp64_flops_per_s: per_thread_flops / 2.0 * threads as f64,
            },
            syrk_gemm_ratio: 300.0,
            syrk_blocking: None,
            cluster_sums_max_k: 1024,
            label_sums_max_work: crate::ops::LABEL_SUMS_VECTOR_MAX_WORK,
            label_row_sums_max_k: DEFAULT_LABEL_ROW_SUMS_MAX_K,
            band_rows_multiple: None,
            tf32_row_padding: None,
            contractions: Some(ContractionTarget {
                efficiency: 0.8,
                tf32_efficiency: 0.8,
                general_efficiency: 0.8,
                general_tf32_efficiency: 0.8,
                max_labels: usize::MAX,
                // Kernel K-means from the points at n = 100,000, d = 2, k = 2 on 2 threads
                // (BENCHMARKS.md, run 13): 3.8e8 per thread with the gaussian kernel (an exp
                // per entry), 1.0e9 with the polynomial one; the slower.
                by_label_elements_per_s: 3.8e8 * threads as f64,
                // The CPU's contraction writes whole rows of its blocks: a copy's rate.
                store_bytes_per_s: 15e9 * threads as f64,
                half_store_bytes_per_s: 15e9 * threads as f64,
                stores_only_tf32_efficiency: 0.8,
                // The CPU's contraction computes every tile.
                mirror_min_depth: None,
                mirror_store_bytes_per_s: 15e9 * threads as f64,
            }),
            // The row-by-row sparse product scatters into a dense row held in cache: an
            // estimate of 1e9 flop/s per thread for its multiply-adds (writing the result is
            // counted at the copy rate); SpMM's row-by-row accumulation at 2e9.
            sparse: Some(SparseTarget {
                gram_flops_per_s: Some(1e9 * threads as f64),
                spmm_flops_per_s: 2e9 * threads as f64,
            }),
        }
    }

    /// The reference GPU, an NVIDIA H100 80GB HBM3, on which the GPU figures were measured
    /// (BENCHMARKS.md): SYRK in block rows of 512-row leaves (at least 12 block rows, 24 under
    /// TF32), maps overlapped in bands of 64-row tiles, TF32 operands padded to 16 columns from
    /// 128, cluster sums up to k = 1024, the GEMM/SYRK threshold at n/d = 300.
    pub fn reference_gpu() -> Target {
        Target {
            kind: TargetKind::Cuda,
            device: "NVIDIA H100 80GB HBM3 (sm_90)".into(),
            parallelism: 132,
            memory_bytes: Some(85_017_755_648),
            ceilings: Ceilings {
                copy_bytes_per_s: H100_COPY_BYTES,
                fp32_flops_per_s: H100_FP32_FLOPS,
                tf32_flops_per_s: 8.0 * H100_FP32_FLOPS,
                fp64_flops_per_s: H100_FP32_FLOPS,
            },
            syrk_gemm_ratio: 300.0,
            syrk_blocking: Some(SyrkBlocking {
                leaf_rows: 512,
                min_block_rows: 12,
                min_block_rows_tf32: 24,
            }),
            cluster_sums_max_k: 1024,
            label_sums_max_work: crate::ops::LABEL_SUMS_VECTOR_MAX_WORK,
            label_row_sums_max_k: DEFAULT_LABEL_ROW_SUMS_MAX_K,
            band_rows_multiple: Some(64),
            tf32_row_padding: Some(RowPadding {
                multiple: 16,
                min_cols: 128,
            }),
            contractions: Some(ContractionTarget {
                // From the H100's measurements in BENCHMARKS.md: run 9 for the pipelined
                // kernel (strict FFMA, TF32 wgmma), run 8 for the 64 x 64 tile.
                efficiency: 0.9,
                tf32_efficiency: 1.0,
                general_efficiency: 0.5,
                general_tf32_efficiency: 0.2,
                max_labels: 256,
                // Kernel K-means from the points, whole iterations of the symmetric
                // contraction (one triangle of tiles computed), counted over the whole
                // product (BENCHMARKS.md, run 38): 1.8e12 at n = 78823, 2.8e12 at 10^6
                // (d = 50, k = 100, TF32); the slower.
                by_label_elements_per_s: 1.8e12,
                // A kernel matrix written by the contraction kernel (TF32, n = 78823, d = 50):
                // in f32 fragments a few bytes per row and lane, 12.4 GB of bf16 in 51.3 ms
                // (BENCHMARKS.md, run 40); in 16-byte pieces of rows, 12.4 GB in 21.2 ms
                // (run 41).
                store_bytes_per_s: 2.4e11,
                half_store_bytes_per_s: 5.8e11,
                // Kernel matrices written by the contraction kernel at depths 780 and 3072
                // (BENCHMARKS.md, run 43: 60000 x 780 in 20.6-21.1 ms, 50000 x 3072 in
                // 37.5-39.1 ms, both one triangle of tiles): this efficiency and the mirror's
                // store rate below are the two that fit both.
                stores_only_tf32_efficiency: 0.59,
                // One triangle of tiles and the mirror images from 256 deep, where the product
                // outweighs the mirror's slower stores (run 42: at d = 50 and 26 the mirror
                // was slower).
                mirror_min_depth: Some(256),
                mirror_store_bytes_per_s: 8.0e11,
            }),
            // No sparse x sparse kernel on the GPU yet: a sparse Gram matrix is cuSPARSE's SpMM
            // against the transpose written dense. Its rate is an estimate for CSR rows of a
            // few hundred entries (bench_contractions --sparse-gram measures it).
            sparse: Some(SparseTarget {
                gram_flops_per_s: None,
                spmm_flops_per_s: 2e12,
            }),
        }
    }

    /// One line for plans: `cuda: NVIDIA H100 80GB HBM3 (sm_90)`.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            TargetKind::Cpu => "cpu",
            TargetKind::Cuda => "cuda",
        };
        if self.device.starts_with(kind) {
            self.device.clone()
        } else {
            format!("{kind}: {}", self.device)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_rows_leave_enough_block_rows() {
        let b = Target::reference_gpu().syrk_blocking.unwrap();
        assert_eq!(b.block_rows(60_000, false), 4096);
        assert_eq!(b.block_rows(60_000, true), 2048);
        assert_eq!(b.block_rows(1000, false), 512);
        assert_eq!(b.block_rows(0, true), 512);
        for n in [1, 511, 512, 6144, 12_288, 50_000, 78_823, 1_000_000] {
            for tf32 in [false, true] {
                let rows = b.block_rows(n, tf32);
                assert!(rows.is_power_of_two() && rows >= 512, "{n} {tf32}");
                let min = if tf32 { 24 } else { 12 };
                assert!(rows == 512 || n / rows >= min, "{n} {tf32} {rows}");
            }
        }
    }

    #[test]
    fn descriptions_name_the_backend() {
        assert_eq!(Target::cpu(2).describe(), "cpu (2 threads)");
        assert!(Target::reference_gpu()
            .describe()
            .starts_with("cuda: NVIDIA H100"));
    }
}
