//! Label sums of a matrix's rows, `S[c, :] = sum over i with labels[i] == c of X[i, :]`
//! (Lloyd's centroids `selection(labels, k) * X` before their scaling), in two deterministic
//! kernels: blocks of consecutive points summed into per-warp bins in shared memory, then the
//! blocks' partial sums added in block order. No atomics: the result is the same from run to
//! run on one device (the number of blocks depends on the device, the shape and `k`).

use crate::builtin_kernel::{typed, BuiltinKernel};
use crate::cluster_sums::DeviceLimits;
use crate::emit::LaunchDims;
use kernel_ir::ScalarType;

/// Threads per block of [`partial_kernel`] at most (eight warps).
pub const MAX_WARPS: u32 = 8;
/// Consecutive rows a warp loads before adding them to its bins.
const UNROLL: u32 = 16;
/// Fewest rows per block worth a block of their own.
const MIN_ROWS_PER_BLOCK: u64 = 512;
/// Blocks along a grid's second dimension at most (the column chunks).
const MAX_GRID_Y: u32 = 65_535;
/// Threads per block of [`reduce_kernel`] (one warp per output element).
pub const REDUCE_THREADS: u32 = 256;

const PARTIAL: &str = r#"// popcorn builtin kernel {NAME}: label sums of the rows of x (n x d, row-major), first pass.
// Block (b, y) takes the rows [b * rows_per_block, (b + 1) * rows_per_block) and the columns
// [32 y, 32 y + 32): warp w adds rows r0 + w, r0 + w + W, ... (W warps) in ascending order to
// its own k x 32 bins in shared memory, lane l to column 32 y + l (so no two lanes share a
// bin); then the block adds its warps' bins in warp order and writes
// partial[(c * d + f) * gridDim.x + b]. Labels >= k are skipped.
extern "C" __global__ void __launch_bounds__({THREADS}) {NAME}(
    const long long n,
    const long long d,
    const long long k,
    const long long rows_per_block,
    const {T}* __restrict__ x,
    const unsigned int* __restrict__ labels,
    {T}* __restrict__ partial)
{
    extern __shared__ __align__(16) unsigned char pk_shared[];
    {T}* bins = reinterpret_cast<{T}*>(pk_shared);
    const int lane = (int)(threadIdx.x & 31);
    const int warp = (int)(threadIdx.x >> 5);
    const int warps = (int)(blockDim.x >> 5);
    const long long f = 32LL * blockIdx.y + lane;
    const bool in_cols = f < d;
    const long long k32 = 32 * k;
    for (long long e = threadIdx.x; e < warps * k32; e += blockDim.x) {
        bins[e] = ({T})0;
    }
    __syncthreads();
    {T}* mine = bins + warp * k32;
    const long long r0 = (long long)blockIdx.x * rows_per_block;
    const long long r1 = r0 + rows_per_block < n ? r0 + rows_per_block : n;
    // Software-pipelined: the next {UNROLL} rows are loaded before this batch is added, so the
    // loads stay in flight while the bins are updated.
    const long long step = (long long)warps * {UNROLL};
    unsigned int lab[{UNROLL}];
    {T} v[{UNROLL}];
    long long r = r0 + warp;
#pragma unroll
    for (int u = 0; u < {UNROLL}; ++u) {
        const long long i = r + (long long)u * warps;
        const bool row = i < r1;
        lab[u] = row ? labels[i] : 0xffffffffu;
        v[u] = (row && in_cols) ? x[i * d + f] : ({T})0;
    }
    for (; r < r1; r += step) {
        unsigned int next_lab[{UNROLL}];
        {T} next_v[{UNROLL}];
#pragma unroll
        for (int u = 0; u < {UNROLL}; ++u) {
            const long long i = r + step + (long long)u * warps;
            const bool row = i < r1;
            next_lab[u] = row ? labels[i] : 0xffffffffu;
            next_v[u] = (row && in_cols) ? x[i * d + f] : ({T})0;
        }
#pragma unroll
        for (int u = 0; u < {UNROLL}; ++u) {
            if ((long long)lab[u] < k) {
                mine[(long long)lab[u] * 32 + lane] += v[u];
            }
        }
#pragma unroll
        for (int u = 0; u < {UNROLL}; ++u) {
            lab[u] = next_lab[u];
            v[u] = next_v[u];
        }
    }
    __syncthreads();
    for (long long e = threadIdx.x; e < k32; e += blockDim.x) {
        {T} s = ({T})0;
        for (int w = 0; w < warps; ++w) {
            s += bins[w * k32 + e];
        }
        const long long c = e >> 5;
        const long long col = 32LL * blockIdx.y + (e & 31);
        if (col < d) {
            partial[(c * d + col) * (long long)gridDim.x + blockIdx.x] = s;
        }
    }
}
"#;

const REDUCE: &str = r#"// popcorn builtin kernel {NAME}: label sums of rows, second pass: out[e] = the sum over
// b < blocks of partial[e * blocks + b], for e < kd. One warp per output: lane l adds
// b = l, l + 32, ... in order, then a fixed shuffle tree.
extern "C" __global__ void __launch_bounds__({THREADS}) {NAME}(
    const long long kd,
    const long long blocks,
    const {T}* __restrict__ partial,
    {T}* __restrict__ out)
{
    const long long e = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = (int)(threadIdx.x & 31);
    if (e >= kd) {
        return;  // e is the same for the whole warp: the warp leaves together
    }
    {T} s = ({T})0;
    for (long long b = lane; b < blocks; b += 32) {
        s += partial[e * blocks + b];
    }
    for (int off = 16; off > 0; off >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, off);
    }
    if (lane == 0) {
        out[e] = s;
    }
}
"#;

/// The entry point of [`partial_kernel`]`(dtype)`, without building its source.
pub fn partial_name(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "pk_label_row_sums_f32",
        ScalarType::F64 => "pk_label_row_sums_f64",
    }
}

/// The entry point of [`reduce_kernel`]`(dtype)`, without building its source.
pub fn reduce_name(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "pk_label_row_sums_reduce_f32",
        ScalarType::F64 => "pk_label_row_sums_reduce_f64",
    }
}

/// The first pass: parameters `(const long long n, const long long d, const long long k,
/// const long long rows_per_block, const T* x, const unsigned int* labels, T* partial)`;
/// entry point `pk_label_row_sums_{f32|f64}`. Launch: [`LabelRowSumsLayout::partial_dims`].
pub fn partial_kernel(dtype: ScalarType) -> BuiltinKernel {
    let template = PARTIAL
        .replace("{THREADS}", &(32 * MAX_WARPS).to_string())
        .replace("{UNROLL}", &UNROLL.to_string());
    typed("label_row_sums", dtype, &template)
}

/// The second pass: parameters `(const long long kd, const long long blocks, const T* partial,
/// T* out)`; entry point `pk_label_row_sums_reduce_{f32|f64}`. Launch:
/// [`LabelRowSumsLayout::reduce_dims`].
pub fn reduce_kernel(dtype: ScalarType) -> BuiltinKernel {
    let template = REDUCE.replace("{THREADS}", &REDUCE_THREADS.to_string());
    typed("label_row_sums_reduce", dtype, &template)
}

/// How the two passes cover `n` points of `d` features and `k` clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelRowSumsLayout {
    /// Warps per block of the first pass (each with `k x 32` bins).
    pub warps: u32,
    /// Blocks along the points (the partial sums per output element).
    pub blocks: u64,
    /// Column chunks of 32 (the grid's second dimension).
    pub col_chunks: u64,
    /// Rows per block (the last block may have fewer).
    pub rows_per_block: u64,
    /// Dynamic shared memory of a first-pass block, bytes.
    pub shared_bytes: u32,
    /// Elements of the partial sums, `k d blocks`.
    pub partial_elems: u64,
    /// `k d`: the outputs.
    pub outputs: u64,
}

impl LabelRowSumsLayout {
    /// The layout for `n x d` points and `k` clusters of `elem_bytes`-byte elements on a device
    /// with `limits`, where `blocks_per_sm` first-pass blocks fit a multiprocessor
    /// (`blocks_per_sm(shared_bytes)` gives the shared-memory bound). `None` where one warp's
    /// `k x 32` bins exceed a block's shared memory, `d` needs more than 65,535 chunks of 32
    /// columns, or `n`, `d` or `k` is 0.
    pub fn new(
        n: u64,
        d: u64,
        k: u64,
        elem_bytes: u64,
        limits: &DeviceLimits,
        blocks_per_sm: impl Fn(u32) -> u32,
    ) -> Option<LabelRowSumsLayout> {
        if n == 0 || d == 0 || k == 0 {
            return None;
        }
        let per_warp = k.checked_mul(32 * elem_bytes)?;
        let fit = u64::from(limits.shared_bytes_per_block_optin) / per_warp;
        let warps = fit.min(u64::from(MAX_WARPS)) as u32;
        if warps == 0 {
            return None;
        }
        let shared_bytes = u32::try_from(per_warp * u64::from(warps)).ok()?;
        let col_chunks = d.div_ceil(32);
        if col_chunks > u64::from(MAX_GRID_Y) {
            return None;
        }
        let resident = u64::from(limits.multiprocessors.max(1))
            * u64::from(blocks_per_sm(shared_bytes).max(1));
        let blocks = (resident / col_chunks)
            .max(1)
            .min(n.div_ceil(MIN_ROWS_PER_BLOCK));
        let rows_per_block = n.div_ceil(blocks);
        let blocks = n.div_ceil(rows_per_block);
        Some(LabelRowSumsLayout {
            warps,
            blocks,
            col_chunks,
            rows_per_block,
            shared_bytes,
            partial_elems: k * d * blocks,
            outputs: k * d,
        })
    }

    /// Launch dimensions of [`partial_kernel`].
    pub fn partial_dims(&self) -> LaunchDims {
        (
            (self.blocks as u32, self.col_chunks as u32, 1),
            (32 * self.warps, 1, 1),
            self.shared_bytes,
        )
    }

    /// Launch dimensions of [`reduce_kernel`].
    pub fn reduce_dims(&self) -> LaunchDims {
        let warps_per_block = u64::from(REDUCE_THREADS / 32);
        (
            (self.outputs.div_ceil(warps_per_block) as u32, 1, 1),
            (REDUCE_THREADS, 1, 1),
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100(n: u64, d: u64, k: u64, elem: u64) -> Option<LabelRowSumsLayout> {
        let limits = DeviceLimits::H100;
        LabelRowSumsLayout::new(n, d, k, elem, &limits, |s| {
            limits.blocks_per_sm(u64::from(s))
        })
    }

    #[test]
    fn lloyds_shape_fills_the_device_with_eight_warps_per_block() {
        let l = h100(1 << 20, 32, 100, 4).unwrap();
        assert_eq!(l.warps, 8);
        assert_eq!(l.shared_bytes, 8 * 100 * 32 * 4);
        // Two such blocks fit an H100 multiprocessor.
        assert_eq!(l.blocks, 264);
        assert_eq!(l.col_chunks, 1);
        assert!(l.rows_per_block * l.blocks >= 1 << 20);
        assert!(l.rows_per_block * (l.blocks - 1) < 1 << 20);
        assert_eq!(l.partial_elems, 100 * 32 * 264);
        assert_eq!(l.partial_dims(), ((264, 1, 1), (256, 1, 1), 102_400));
        // 3200 outputs, eight per block.
        assert_eq!(l.reduce_dims(), ((400, 1, 1), (256, 1, 1), 0));
    }

    #[test]
    fn wide_points_split_the_columns_and_keep_every_block_busy() {
        let l = h100(100_000, 130, 7, 8).unwrap();
        assert_eq!(l.col_chunks, 5);
        assert!(l.blocks * l.col_chunks <= 132 * DeviceLimits::H100.max_blocks_per_sm as u64);
        assert_eq!(l.blocks, 100_000u64.div_ceil(l.rows_per_block));
    }

    #[test]
    fn many_clusters_take_fewer_warps_and_too_many_none() {
        let l = h100(1 << 20, 32, 256, 4).unwrap();
        assert_eq!(l.warps, 7);
        assert!(u64::from(l.shared_bytes) <= 232_448);
        let f64_bins = h100(1 << 20, 32, 256, 8).unwrap();
        assert_eq!(f64_bins.warps, 3);
        assert!(h100(1 << 20, 32, 1000, 8).is_none());
        assert!(h100(0, 32, 10, 4).is_none());
        assert!(h100(10, 32 * 65_535, 10, 4).is_some());
        assert!(h100(10, 32 * 65_535 + 1, 10, 4).is_none());
    }

    #[test]
    fn few_points_take_one_block() {
        let l = h100(3, 1, 1, 4).unwrap();
        assert_eq!((l.blocks, l.rows_per_block, l.col_chunks), (1, 3, 1));
    }

    #[test]
    fn sources_name_their_entry_points() {
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let p = partial_kernel(dtype);
            assert!(p
                .source
                .contains(&format!("void __launch_bounds__(256) {}(", p.name)));
            assert!(!p.source.contains("{UNROLL}") && !p.source.contains("{T}"));
            let r = reduce_kernel(dtype);
            assert!(r.source.contains(&format!("{}(", r.name)));
        }
        for dtype in [ScalarType::F32, ScalarType::F64] {
            assert_eq!(partial_kernel(dtype).name, partial_name(dtype));
            assert_eq!(reduce_kernel(dtype).name, reduce_name(dtype));
        }
        assert_eq!(
            partial_kernel(ScalarType::F32).name,
            "pk_label_row_sums_f32"
        );
        assert_eq!(
            reduce_kernel(ScalarType::F64).name,
            "pk_label_row_sums_reduce_f64"
        );
    }
}
