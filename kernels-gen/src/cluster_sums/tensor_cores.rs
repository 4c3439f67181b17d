//! The cluster-sums kernel on tensor cores, for a matrix held in 16 bits (bf16 or fp16):
//! `S = M * V^T` with `V` the one-hot selection of the labels, as `mma.sync` products.
//!
//! # Why
//!
//! The bins kernel ([`super`]) adds every element into its label's bin in shared memory: a load,
//! an add and a store per element and per lane, which a 16-bit element costs as much as a
//! 32-bit one for half the bytes. On small matrices, where a few warps per multiprocessor must
//! stream the whole matrix, that chain of shared-memory round trips rather than the memory
//! holds the sums back (BENCHMARKS.md, run 35: letter's bf16 sums at 0.60 of the DRAM
//! bandwidth, each warp issuing an instruction every 2.75 cycles). Here a warp's 32 rows of a
//! staged tile are the `A` operand of `m16n8k16` products read with `ldmatrix`, and the `B`
//! operand, 16 columns by 8 clusters of ones and zeros, is built in registers from the
//! columns' labels: per 16 columns a lane issues two `ldmatrix`, two label loads, a few
//! integer operations and two products per 8 clusters, for 512 elements.
//!
//! # Design
//!
//! The tiles, row groups, staging ring, workers and row modes (aligned or strided) are those of
//! the bins kernel, with its copy and queue functions; only the summing differs:
//!
//! - **Accumulators.** Lane `(g, t)` (`g = lane / 4`, `t = lane % 4`) holds the `m16n8`
//!   accumulator fragments of the warp's 32 rows (two 16-row tiles) by `8 NT` clusters
//!   (`NT = tensor_core_tiles`): element `(16 mt + g + 8 h, 8 nt + 2 t + e)` in
//!   `acc[mt][nt][2 h + e]`, in f32.
//! - **Operand loads.** The ring's rows are unpadded with swizzled 16-byte chunks (see
//!   [`super`]); a lane's `ldmatrix` row address for product step `kk` is its row's start plus
//!   chunk `2 kk ^ ((lane >> 4) ^ swizzle(r))`, conflict-free for each group of eight rows, and
//!   the same swizzle serves the second 16-row tile (it repeats every 16 rows).
//! - **Selection.** For the 16 columns of a product step a lane needs the labels of columns
//!   `2 t, 2 t + 1, 2 t + 8, 2 t + 9` (two 8-byte shared loads) against its cluster column `g`:
//!   the label `L` selects tile `nt` when `L - c_lo - g = 8 nt`. The hits of two columns form a
//!   mask of `NT` bits in each 16-bit half of a word, and the `B` register of tile `nt` is that
//!   word's bits `nt` and `16 + nt` times the format's 1.0 (`0x3f80` in bf16, `0x3c00` in fp16).
//!   Labels outside `[c_lo, c_lo + 8 NT)` select nothing; those in `[c_lo + kb, c_lo + 8 NT)`
//!   land in accumulator columns that are never written out.
//! - **Edges.** Copies zero-fill the columns past the matrix (their products add zeros) and the
//!   strided mode gives the columns before column 0 the label `OUTSIDE` and clears their
//!   elements in the operand registers of a row group's first tile (they may hold anything:
//!   another row's values, or memory outside the matrix), so no tile needs a column bound. A
//!   zero times an infinite or NaN element is NaN: where `M` itself holds a non-finite value,
//!   every sum of its row is NaN here, where the bins kernel spoils only the sum of that
//!   column's label.
//! - **Write-out.** At the end of a row group (or of the worker's range) each lane writes its
//!   fragments' elements of the rows inside the matrix and the clusters below `kb`: plain stores
//!   for a row group the worker covered whole, `atomicAdd` into a zeroed `S` for a split one.
//! - **Teams.** A block may be a team of `T` warps ([`ClusterSumsVariant::team`], the launcher's
//!   choice [`DEFAULT_TEAM`]): the launcher then gives each row group exactly one block, or
//!   two (halves of its tiles) where they all fit at once, and the block's tiles are shared
//!   out among its warps in contiguous ranges, each warp with its own staging ring. At the end
//!   each warp stores its accumulators into its idle ring as a `32 x 8 NT` block of f32, and
//!   after a barrier every thread adds the warps' sums of its elements in warp order and
//!   writes them. Small matrices thus keep four times as many warps streaming (letter's
//!   10,500 rows: 336 row groups, 1,344 warps instead of 672) and large ones stream each row
//!   group with four warps at once.
//!
//! # Summation order (determinism)
//!
//! The tensor cores add each product step's 16 columns into the accumulator in an order fixed
//! by the hardware, step after step in column order; a team adds its warps' sums in warp order,
//! and a split row group has two partial sums added into zero: the result is deterministic for a
//! device and launch configuration, as the bins kernel's, but rounds differently from it (f32
//! accumulation of exact products: each element times 1.0).
//!
//! The launch ABI (parameters, grid, shared memory, zeroed output) is the bins kernel's, with
//! blocks of `32 T` threads ([`ClusterSumsLaunch::grid_block`]).

use super::{
    launch_within, with_shared_parts, worker_range, ClusterSumsError, ClusterSumsLaunch,
    ClusterSumsVariant, DeviceLimits, ALIGNED, ALIGNED_PARTS, MIN_WARPS_PER_SM_HELD,
    MIN_WARPS_PER_SM_LARGE_K, ROWS_PER_GROUP, STRIDED, STRIDED_PARTS,
};
use kernel_ir::{Half, ScalarType};

/// The most tiles of 8 clusters a warp's accumulators hold (128 clusters: 128 f32 registers
/// a lane).
pub const MAX_CLUSTER_TILES: u32 = 16;

/// The most tiles of 8 clusters the launcher gives the one-warp tensor-core kernel by itself
/// (64 clusters): beyond, its products of one-hot tiles cost more than the bins (BENCHMARKS.md,
/// run 35: at k = 100 the bins kernel was 1-9% faster on five shapes of six, at k = 10 to 50 up
/// to 24% slower). Teams ([`DEFAULT_TEAM`]) take the kernel up to [`MAX_CLUSTER_TILES`].
pub const PREFERRED_MAX_CLUSTER_TILES: u32 = 8;

/// Warps per block the launcher gives the tensor-core kernel where [`MIN_WARPS_PER_SM_HELD`]
/// of them stay resident: four warps sharing each row group's (or half row group's) tiles,
/// each with a ring of [`TEAM_TILE`] (BENCHMARKS.md, run 49: the fastest of teams of 1 to 8
/// warps and rings of 64 to 256 columns in 2 to 4 stages on n = 6400, 10500 and 60000 at
/// k = 10 to 100, and faster than the bins kernel at k = 100).
pub const DEFAULT_TEAM: u32 = 4;

/// The staging ring of a team's warps, `(tile columns, stages)`: 256-byte rows of 16-bit
/// values in two stages.
pub const TEAM_TILE: (u32, u32) = (128, 2);

/// The tensor-core launch for `k` clusters of a matrix held in `held`, or `None` where the
/// kernel does not apply (`k` above `8 * max_tiles`; `max_tiles` is capped at
/// [`MAX_CLUSTER_TILES`]).
///
/// `team`: warps per block (`Some(0)`: `None` is returned), or `None` for the launcher's
/// choice: [`DEFAULT_TEAM`] where a
/// team's blocks keep [`MIN_WARPS_PER_SM_HELD`] warps resident, else one warp. `forced`: a
/// tile width and pipeline depth to use (benchmarks and tests); otherwise [`TEAM_TILE`] for a
/// team, and for one warp the first of the bins kernel's fallbacks whose staging leaves
/// [`MIN_WARPS_PER_SM_HELD`] warps resident, else [`MIN_WARPS_PER_SM_LARGE_K`]. Without a
/// team of its own choosing (one warp), the launcher takes the kernel up to
/// [`PREFERRED_MAX_CLUSTER_TILES`] only.
pub fn plan_tensor_core_sums(
    k: u64,
    held: Half,
    aligned: bool,
    forced: Option<(u32, u32)>,
    team: Option<u32>,
    max_tiles: u32,
    limits: &DeviceLimits,
) -> Option<Result<ClusterSumsLaunch, ClusterSumsError>> {
    let k = k.max(1);
    let tiles = u32::try_from(k.div_ceil(8)).ok()?;
    if tiles > max_tiles.min(MAX_CLUSTER_TILES) {
        return None;
    }
    let per_block = u64::from(limits.shared_bytes_per_block_optin);
    let make = |(tile_cols, stages): (u32, u32), team: u32| {
        ClusterSumsVariant::new(ScalarType::F32, Some(held), tile_cols, stages, aligned)
            .map(|v| v.with_tensor_core_tiles(tiles).with_team(team))
    };
    // Every cluster fits in the registers (tiles >= k / 8), so a launch within a budget is one
    // pass over all k, made as the bins kernel's are.
    let team_tile = forced.unwrap_or(TEAM_TILE);
    match team {
        Some(0) => return None,
        Some(1) => {}
        // A team asked for: its ring, within what one block may have.
        Some(team) => {
            return Some(make(team_tile, team).and_then(|v| launch_within(v, k, per_block)))
        }
        None => {
            let team_fits = |v: &ClusterSumsVariant| {
                limits.blocks_per_sm(v.shared_bytes(k)) * v.warps_per_block()
                    >= MIN_WARPS_PER_SM_HELD
            };
            if let Ok(v) = make(team_tile, DEFAULT_TEAM) {
                if team_fits(&v) {
                    return Some(launch_within(v, k, per_block));
                }
            }
            if tiles > PREFERRED_MAX_CLUSTER_TILES {
                return None;
            }
        }
    }
    if let Some(tile) = forced {
        return Some(make(tile, 1).and_then(|v| launch_within(v, k, per_block)));
    }
    let candidates = ClusterSumsVariant::fallbacks(ScalarType::F32, Some(held), aligned);
    for warps in [MIN_WARPS_PER_SM_HELD, MIN_WARPS_PER_SM_LARGE_K] {
        let budget = limits.block_budget(warps);
        if let Some(launch) = candidates
            .iter()
            .find_map(|v| launch_within(v.with_tensor_core_tiles(tiles), k, budget).ok())
        {
            return Some(Ok(launch));
        }
    }
    let smallest = candidates.last().map(|v| v.with_tensor_core_tiles(tiles))?;
    Some(Err(ClusterSumsError::SharedMemory {
        name: smallest.name(),
        needed: smallest.shared_bytes(k),
        allowed: per_block,
    }))
}

/// The most warps in a team ([`ClusterSumsVariant::team`]).
pub const MAX_TEAM: u32 = 8;

impl ClusterSumsVariant {
    /// This variant as the tensor-core kernel with `tiles` tiles of 8 clusters (0: the bins
    /// kernel).
    pub fn with_tensor_core_tiles(self, tiles: u32) -> Self {
        ClusterSumsVariant {
            tensor_core_tiles: tiles,
            ..self
        }
    }

    /// This tensor-core variant with `team` warps per block (1 to [`MAX_TEAM`]).
    pub fn with_team(self, team: u32) -> Self {
        ClusterSumsVariant {
            team: team.clamp(1, MAX_TEAM),
            ..self
        }
    }
}

/// Shared memory of one warp of the tensor-core kernel: its staging ring, and in a team of two
/// warps or more at least its `32 x 8 NT` f32 sums, which the ring holds at the end.
pub fn team_warp_bytes(variant: &ClusterSumsVariant) -> u64 {
    let staging = variant.ring_bytes();
    if variant.warps_per_block() <= 1 {
        return staging;
    }
    let sums = ROWS_PER_GROUP * 8 * 4 * u64::from(variant.tensor_core_tiles);
    staging.max(sums)
}

const TEMPLATE: &str = r#"// popcorn builtin kernel {NAME}: cluster sums over one range of clusters on tensor cores,
//   s[i * k + c_lo + c] = sum over j < cols with labels[j] == c_lo + c of m[i * ld + j],
// for 0 <= i < rows and 0 <= c < kb <= 8 * NT, M held in {HALF}. {WORKERS}; each warp streams a
// contiguous range of 32-row x {TW}-column tiles through its own {STAGES}-stage ring of 16-byte
// cp.async copies ({MODE} rows). Each tile is multiplied by the
// one-hot selection of its columns' labels (built in registers) with mma.sync m16n8k16 into
// f32 accumulators of the warp's 32 rows by 8 * NT clusters. Row groups split between two
// workers are added with atomicAdd into a zeroed s.
namespace {NAME}_impl {

typedef unsigned short mval;
typedef uint4 vec;
constexpr int TW = {TW};
constexpr int STAGES = {STAGES};
constexpr int VE = 8;
constexpr int CPR = TW / VE;
constexpr int RSTEP = 32 / CPR;
constexpr int TILE_BYTES = 32 * TW * (int)sizeof(mval);
constexpr int STAGE_BYTES = TILE_BYTES + TW * 4;
constexpr int NT = {NT};
// 1.0 in the held format, in the low half of a word.
constexpr unsigned ONE = {ONE};
static_assert(TW % 16 == 0, "product steps of 16 columns");
static_assert(NT >= 1 && NT <= 16, "a cluster tile's hits are one bit of a 16-bit half");

{COPY_HELPERS}{ROW_MODE}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{AB}.{AB}.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Bit nt set where label - c_lo - g (d) is 8 nt for a cluster tile nt < NT.
__device__ __forceinline__ unsigned hit(unsigned d)
{
    return ((d & 7u) == 0u && d < 8u * (unsigned)NT) ? (1u << (d >> 3)) : 0u;
}

// Zeroes the elements of a's columns below lead (their values lie before column 0 of the
// rows: another row's, or outside the matrix, and may be anything) so that the products, which
// select none of them, add exact zeros. c: the tile column of a[0]'s low half.
__device__ __forceinline__ void clear_lead(unsigned (&a)[4], unsigned c, unsigned lead)
{
    const unsigned lo = (c < lead ? 0u : 0xffffu) | (c + 1u < lead ? 0u : 0xffff0000u);
    const unsigned hi = (c + 8u < lead ? 0u : 0xffffu) | (c + 9u < lead ? 0u : 0xffff0000u);
    a[0] &= lo;
    a[1] &= lo;
    a[2] &= hi;
    a[3] &= hi;
}

// Adds one staged tile times its selection into acc. a_row: the start in the stage of this
// lane's ldmatrix row (tile row r = (lane & 7) + 8 ((lane >> 3) & 1), and r + 16 for the second
// product row tile, whose swizzle is the same); a_x: (lane >> 4) ^ swizzle(r), so that the
// lane's chunk of product step kk, chunk 2 kk + (lane >> 4), lies at chunk 2 kk ^ a_x; lab: the
// stage's labels; base: c_lo + g; t: lane % 4. LEAD: the tile's first `lead` columns lie before
// column 0 (the first tile of a strided row group).
template <bool LEAD>
__device__ __forceinline__ void consume(unsigned a_row, unsigned a_x, const unsigned int* lab,
    unsigned base, unsigned t, unsigned lead, float (&acc)[2][NT][4])
{
#pragma unroll
    for (int kk = 0; kk < TW / 16; ++kk) {
        unsigned a0[4], a1[4];
        const unsigned a_addr = a_row + ((2u * (unsigned)kk ^ a_x) << 4);
        ldsm_x4(a_addr, a0);
        ldsm_x4(a_addr + (unsigned)(16 * TW * (int)sizeof(mval)), a1);
        if (LEAD) {
            clear_lead(a0, (unsigned)(16 * kk) + 2u * t, lead);
            clear_lead(a1, (unsigned)(16 * kk) + 2u * t, lead);
        }
        const uint2 lo = *reinterpret_cast<const uint2*>(lab + 16 * kk + 2 * t);
        const uint2 hi = *reinterpret_cast<const uint2*>(lab + 16 * kk + 8 + 2 * t);
        const unsigned m0 = hit(lo.x - base) | (hit(lo.y - base) << 16);
        const unsigned m1 = hit(hi.x - base) | (hit(hi.y - base) << 16);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            // Bits nt and 16 + nt of the masks times 1.0: while 1.0's encoding is a multiple of
            // 2^nt the mask is not shifted down first (one instruction less).
            const unsigned b0 = (ONE % (1u << nt) == 0u) ? (m0 & (0x10001u << nt)) * (ONE >> nt)
                                                         : ((m0 >> nt) & 0x10001u) * ONE;
            const unsigned b1 = (ONE % (1u << nt) == 0u) ? (m1 & (0x10001u << nt)) * (ONE >> nt)
                                                         : ((m1 >> nt) & 0x10001u) * ONE;
            mma(acc[0][nt], a0, b0, b1);
            mma(acc[1][nt], a1, b0, b1);
        }
    }
}

// Writes (whole) or adds (split row group) the accumulators of the row group whose tile row r
// is row {TILE_ROW} (rows past the matrix and clusters from kb on are skipped), and zeroes them.
__device__ __forceinline__ void flush(float (&acc)[2][NT][4], float* __restrict__ s, long long rows,
    long long k, long long c_lo, unsigned kb, long long r0, bool whole, unsigned lane)
{
    const unsigned g = lane >> 2, t = lane & 3u;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long r = (long long)(16 * mt + 8 * h) + (long long)g;
            const long long i = {TILE_ROW};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const unsigned c = (unsigned)(8 * nt + e) + 2u * t;
                    const float v = acc[mt][nt][2 * h + e];
                    acc[mt][nt][2 * h + e] = 0.0f;
                    if (i < rows && c < kb) {
                        float* out = s + i * k + c_lo + (long long)c;
                        if (whole) {
                            *out = v;
                        } else {
                            atomicAdd(out, v);
                        }
                    }
                }
            }
        }
    }
}

} // namespace {NAME}_impl

extern "C" __global__ void __launch_bounds__({THREADS}) {NAME}(
    const long long rows,
    const long long cols,
    const long long ld,
    const unsigned short* __restrict__ m,
    const unsigned int* __restrict__ labels,
    const long long c_lo,
    const long long kb,
    const long long k,
    float* __restrict__ s,
    const long long workers)
{
    using namespace {NAME}_impl;
    extern __shared__ __align__(16) unsigned char pk_smem[];
{WORKER_RANGE}    const unsigned ukb = (unsigned)kb;
    // Element offset of m inside its 16-byte block (0 for aligned rows).
    const unsigned moff = (unsigned)((unsigned long long)m / sizeof(mval)) & (unsigned)(VE - 1);
    const unsigned sbase = (unsigned)__cvta_generic_to_shared({RING});
    const unsigned a_r = (lane & 7u) + 8u * ((lane >> 3) & 1u);
    const unsigned a_off = a_r * (unsigned)TW * (unsigned)sizeof(mval);
    const unsigned a_x = (lane >> 4) ^ swizzle(a_r);
    const unsigned base = (unsigned)c_lo + (lane >> 2);
    const unsigned t4 = lane & 3u;
    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                acc[mt][nt][e] = 0.0f;
            }
        }
    }

{QUEUE_FIRST_TILES}
    long long g = (long long)(t0 / ucts);
    long long ct = (long long)(t0 - (unsigned long long)g * ucts);
{WHOLE_START}    int stage = 0;
    for (unsigned long long t = t0; t < t1; ++t) {
{QUEUE_NEXT_TILE}        const unsigned st = sbase + (unsigned)(stage * STAGE_BYTES);
        const unsigned int* lab =
            reinterpret_cast<const unsigned int*>({RING} + stage * STAGE_BYTES + TILE_BYTES);
        {CONSUME}
{LOOP_FLUSH}        if (++ct == cts) {
            ct = 0;
            ++g;
        }
        __syncwarp();
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
{TEAM_FLUSH}}
"#;

/// One warp's flush at the end of each row group it covers (a block of one warp).
const LOOP_FLUSH: &str = "        const bool last_tile = ct == cts - 1;
        if (last_tile || t + 1 == t1) {
            flush(acc, s, rows, k, c_lo, ukb, {GROUP_ROW}, whole_start && last_tile, lane);
            whole_start = true;
        }
";

/// Whether a one-warp worker's first row group is its own from its first tile.
const WHOLE_START: &str = "    bool whole_start = ct == 0;
";

/// A team's shares of its block's tiles `[b0, b1)` (inside one row group: the launcher gives
/// each row group one or two blocks): contiguous ranges `[t0, t1)`, one per warp, each warp
/// with its own staging ring (`team_ring`).
const TEAM_SHARES: &str = r#"    constexpr unsigned TEAM = {TEAM};
    constexpr unsigned WARP_BYTES = {WARP_BYTES};
    const unsigned team_q = threadIdx.x >> 5;
    unsigned char* const team_ring = pk_smem + team_q * WARP_BYTES;
    // This warp's share (empty where the block has fewer tiles than warps).
    const unsigned long long t0 = b0 + (b1 - b0) * team_q / TEAM;
    const unsigned long long t1 = b0 + (b1 - b0) * (team_q + 1u) / TEAM;
"#;

/// A team's write-out, after its warps' loops: each warp's accumulators into its (idle) ring
/// as a `32 x 8 NT` row-major block, then every thread adds the warps' sums of its elements in
/// warp order, the same whichever warp finished first, and writes them (or adds them into the
/// zeroed `s` where two blocks share the row group).
const TEAM_FLUSH: &str = r#"    __syncthreads();
    {
        float* part = reinterpret_cast<float*>(team_ring);
        const unsigned gq = lane >> 2, tq = lane & 3u;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        part[(16u * mt + 8u * h + gq) * (8u * NT) + 8u * nt + 2u * tq + e] =
                            acc[mt][nt][2 * h + e];
                    }
                }
            }
        }
    }
    __syncthreads();
    {
        const long long g = (long long)(b0 / ucts);
        const bool whole = b0 % ucts == 0 && b1 - b0 == ucts;
        const long long r0 = {GROUP_ROW};
        for (unsigned e = threadIdx.x; e < 32u * ukb; e += 32u * TEAM) {
            const unsigned rr = e / ukb;
            const unsigned c = e - rr * ukb;
            const unsigned at = rr * (8u * NT) + c;
            float v = reinterpret_cast<const float*>(pk_smem)[at];
            for (unsigned q = 1; q < TEAM; ++q) {
                v += reinterpret_cast<const float*>(pk_smem + q * WARP_BYTES)[at];
            }
            const long long r = (long long)rr;
            const long long i = {TILE_ROW};
            if (i < rows) {
                float* out = s + i * k + c_lo + (long long)c;
                if (whole) {
                    *out = v;
                } else {
                    atomicAdd(out, v);
                }
            }
        }
    }
"#;

/// Aligned rows: every tile starts at or after column 0 (columns past the matrix are zeros).
const ALIGNED_CONSUME: &str = "consume<false>(st + a_off, a_x, lab, base, t4, 0u, acc);";

/// Strided rows: the first tile of a row group starts `row_shift` columns before column 0.
const STRIDED_CONSUME: &str = "if (ct == 0) {
            const unsigned m_elem = (unsigned)((unsigned long long)m / sizeof(mval));
            consume<true>(st + a_off, a_x, lab, base, t4, row_shift(group_row(g), ld, m_elem), acc);
        } else {
            consume<false>(st + a_off, a_x, lab, base, t4, 0u, acc);
        }";

/// The tensor-core cluster-sums kernel of `variant` (`tensor_core_tiles > 0`, `M` held in 16
/// bits).
pub(super) fn source(variant: &ClusterSumsVariant) -> crate::builtin_kernel::BuiltinKernel {
    let half = variant.held.unwrap_or(Half::Bf16);
    let (ab, one) = match half {
        Half::Bf16 => ("bf16", "0x3f80u"),
        Half::F16 => ("f16", "0x3c00u"),
    };
    let (mode, functions, parts, tile_row, consume) = if variant.aligned {
        ("aligned", ALIGNED, ALIGNED_PARTS, "r0 + r", ALIGNED_CONSUME)
    } else {
        (
            "strided",
            STRIDED,
            STRIDED_PARTS,
            "r0 + (long long)RP * r",
            STRIDED_CONSUME,
        )
    };
    let name = variant.name();
    let team = variant.warps_per_block();
    let template = if team > 1 {
        let workers = format!(
            "A team of {team} warps per block over one row group's tiles or half of\n// them, its warps' sums added in warp order through shared memory"
        );
        TEMPLATE
            .replace("{WORKERS}", &workers)
            .replace("{LOOP_FLUSH}", "")
            .replace("{WHOLE_START}", "")
            .replace("{TEAM_FLUSH}", TEAM_FLUSH)
            .replace("{RING}", "team_ring")
    } else {
        TEMPLATE
            .replace("{WORKERS}", "One warp per block, an independent worker")
            .replace("{LOOP_FLUSH}", LOOP_FLUSH)
            .replace("{WHOLE_START}", WHOLE_START)
            .replace("{TEAM_FLUSH}", "")
            .replace("{RING}", "pk_smem")
    };
    let shares = if team > 1 { TEAM_SHARES } else { "" };
    let mut source = with_shared_parts(&template, functions, &(worker_range(team) + shares));
    for (placeholder, text) in parts {
        if placeholder != "{CONSUME}" {
            source = source.replace(placeholder, text);
        }
    }
    let source = source
        .replace("{CONSUME}", consume)
        .replace("{TILE_ROW}", tile_row)
        .replace("{MODE}", mode)
        .replace("{HALF}", half.name())
        .replace("{NAME}", &name)
        .replace("{TW}", &variant.tile_cols.to_string())
        .replace("{STAGES}", &variant.stages.to_string())
        .replace("{NT}", &variant.tensor_core_tiles.to_string())
        .replace("{THREADS}", &variant.threads_per_block().to_string())
        .replace("{TEAM}", &team.to_string())
        .replace("{WARP_BYTES}", &team_warp_bytes(variant).to_string())
        .replace("{AB}", ab)
        .replace("{ONE}", one);
    let source = super::with_row_mode_constants(source, variant);
    crate::builtin_kernel::BuiltinKernel { name, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster_sums::cluster_sums;
    use crate::cluster_sums::tests::assert_no_placeholder_left;

    #[test]
    fn tensor_core_plans_cover_up_to_128_clusters_in_teams_of_four() {
        let h = DeviceLimits::H100;
        for k in [1u64, 7, 8, 9, 26, 100, 128] {
            for aligned in [true, false] {
                let l = plan_tensor_core_sums(k, Half::Bf16, aligned, None, None, 16, &h)
                    .unwrap()
                    .unwrap();
                assert_eq!(l.variant.tensor_core_tiles as u64, k.div_ceil(8), "k {k}");
                assert_eq!((l.passes(), l.pass_range(0)), (1, (0, k)));
                assert_eq!(l.variant.team, DEFAULT_TEAM);
                assert_eq!((l.variant.tile_cols, l.variant.stages), TEAM_TILE);
                let blocks = h.blocks_per_sm(u64::from(l.shared_bytes));
                assert!(blocks * DEFAULT_TEAM >= MIN_WARPS_PER_SM_HELD, "k {k}");
                // No bins: four warps' staging rings (which hold their sums at the end).
                assert_eq!(
                    u64::from(l.shared_bytes),
                    4 * (2 * l.variant.stage_bytes()).max(32 * 32 * l.k.div_ceil(8))
                );
                // One warp a block: the staging ring, 8 warps per SM, up to 64 clusters.
                let one = plan_tensor_core_sums(k, Half::Bf16, aligned, None, Some(1), 16, &h)
                    .unwrap()
                    .unwrap();
                assert_eq!(one.variant.warps_per_block(), 1);
                assert!(h.blocks_per_sm(u64::from(one.shared_bytes)) >= MIN_WARPS_PER_SM_HELD);
                assert_eq!(
                    u64::from(one.shared_bytes),
                    u64::from(one.variant.stages) * one.variant.stage_bytes()
                );
            }
        }
        assert!(plan_tensor_core_sums(129, Half::F16, true, None, None, 99, &h).is_none());
        // A device whose shared memory holds too few teams: one warp, up to 64 clusters.
        let small = DeviceLimits {
            shared_bytes_per_sm: 120_000,
            ..h
        };
        let l = plan_tensor_core_sums(64, Half::F16, true, None, None, 16, &small)
            .unwrap()
            .unwrap();
        assert_eq!(l.variant.warps_per_block(), 1);
        assert!(plan_tensor_core_sums(65, Half::F16, true, None, None, 16, &small).is_none());
        // Forced tiles and teams are kept; a tile that does not exist is an error, and so is a
        // team that does not fit.
        let f = plan_tensor_core_sums(10, Half::F16, false, Some((64, 4)), Some(2), 16, &h)
            .unwrap()
            .unwrap();
        assert_eq!(
            (f.variant.tile_cols, f.variant.stages, f.variant.team),
            (64, 4, 2)
        );
        let f = plan_tensor_core_sums(10, Half::F16, false, Some((64, 4)), None, 16, &h)
            .unwrap()
            .unwrap();
        assert_eq!((f.variant.tile_cols, f.variant.team), (64, DEFAULT_TEAM));
        assert!(
            plan_tensor_core_sums(10, Half::F16, false, Some((100, 2)), Some(1), 16, &h)
                .unwrap()
                .is_err()
        );
        assert!(
            plan_tensor_core_sums(10, Half::F16, false, Some((256, 2)), Some(8), 16, &h)
                .unwrap()
                .is_err()
        );
        // A team of eight for 128 clusters: eight rings of 16 KiB of sums, within one block.
        let eight = plan_tensor_core_sums(128, Half::Bf16, false, None, Some(8), 16, &h)
            .unwrap()
            .unwrap();
        assert_eq!(
            (eight.variant.team, eight.shared_bytes),
            (8, 8 * 2 * (32 * 128 * 2 + 512))
        );
    }

    #[test]
    fn sources_fill_every_placeholder_and_name_the_products() {
        let mut names = std::collections::BTreeSet::new();
        for half in [Half::Bf16, Half::F16] {
            for aligned in [true, false] {
                for (cols, stages) in [(32u32, 2u32), (128, 3), (256, 2)] {
                    for tiles in [1u32, 4, 16] {
                        let v = ClusterSumsVariant::new(
                            ScalarType::F32,
                            Some(half),
                            cols,
                            stages,
                            aligned,
                        )
                        .unwrap()
                        .with_leading_dimension(10_500)
                        .with_tensor_core_tiles(tiles);
                        let k = cluster_sums(&v);
                        assert_no_placeholder_left(&k);
                        assert!(k.name.contains(&format!("_mma{tiles}_t{cols}_s{stages}_")));
                        assert!(k.source.contains(&format!("constexpr int NT = {tiles};")));
                        let ab = if half == Half::Bf16 { "bf16" } else { "f16" };
                        assert!(k.source.contains(&format!(
                            "mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32"
                        )));
                        // The bins kernel's summing is not there.
                        assert!(!k.source.contains("push("), "{}", k.name);
                        assert_eq!(k.source.contains("queue_tile("), !aligned);
                        assert!(names.insert(k.name.clone()), "duplicate {}", k.name);
                    }
                }
            }
        }
    }

    #[test]
    fn teams_share_a_block_and_add_their_sums_in_warp_order() {
        let one = ClusterSumsVariant::new(ScalarType::F32, Some(Half::Bf16), 64, 2, false)
            .unwrap()
            .with_leading_dimension(10_501)
            .with_tensor_core_tiles(13);
        let alone = cluster_sums(&one);
        assert!(alone.source.contains("__launch_bounds__(32)"));
        assert!(!alone.source.contains("__syncthreads"));
        for team in [2u32, 4, 8] {
            let v = one.with_team(team);
            let k = cluster_sums(&v);
            assert_no_placeholder_left(&k);
            assert!(k.name.ends_with(&format!("_r64_w{team}")), "{}", k.name);
            assert!(k
                .source
                .contains(&format!("__launch_bounds__({})", 32 * team)));
            assert!(k
                .source
                .contains(&format!("constexpr unsigned TEAM = {team};")));
            // The sums leave through the team's write-out only, after two block barriers.
            assert_eq!(k.source.matches("__syncthreads();").count(), 2);
            assert!(!k.source.contains("flush(acc, s"));
            // Each warp's ring holds its 32 x 104 sums (13 KiB) where the staging is smaller.
            let staging = 2 * v.stage_bytes();
            assert!(staging < 32 * 104 * 4);
            assert_eq!(team_warp_bytes(&v), 32 * 104 * 4);
            assert_eq!(v.shared_bytes(100), u64::from(team) * 32 * 104 * 4);
            assert_eq!(v.clusters_within(v.shared_bytes(100)), 104);
            assert_eq!(v.clusters_within(v.shared_bytes(100) - 1), 0);
        }
        // The strided team's write-out maps rows as the loads do.
        let strided = cluster_sums(&one.with_team(4)).source;
        let out = &strided[strided.find("__syncthreads").unwrap()..];
        assert!(out.contains("const long long r0 = group_row(g);"));
        assert!(out.contains("const long long i = r0 + (long long)RP * r;"));
        // A team of one is the one-warp kernel, and teams are capped.
        assert_eq!(cluster_sums(&one.with_team(1)).source, alone.source);
        assert_eq!(one.with_team(99).team, MAX_TEAM);
        let h = DeviceLimits::H100;
        assert!(plan_tensor_core_sums(10, Half::Bf16, true, None, Some(0), 16, &h).is_none());
    }

    #[test]
    fn teams_get_one_or_two_blocks_per_row_group() {
        let h = DeviceLimits::H100;
        let team = plan_tensor_core_sums(26, Half::Bf16, true, Some((128, 2)), Some(4), 16, &h)
            .unwrap()
            .unwrap();
        // 10,496 rows: 328 row groups of 82 column tiles.
        let (rows, cols) = (10_496, 10_496);
        assert_eq!(team.workers_per_sm(rows, cols, 1_000, 132, 8), 656);
        // Not all fit at once: one block per row group, in waves.
        assert_eq!(team.workers_per_sm(rows, cols, 400, 132, 8), 328);
        // Fewer than two column tiles a warp when halved: one block per row group.
        assert_eq!(team.workers_per_sm(rows, 7 * 128, 1_000, 132, 8), 328);
        assert_eq!(team.grid_block(328).1, (128, 1, 1));
        assert!(!team.needs_zeroed_output(rows, 328));
        assert!(team.needs_zeroed_output(rows, 656));
    }

    #[test]
    fn the_bins_kernel_keeps_its_name_and_its_shared_memory() {
        let v = ClusterSumsVariant::preferred(ScalarType::F32, Some(Half::Bf16), true);
        assert_eq!(v.tensor_core_tiles, 0);
        assert_eq!(v.name(), "pk_cluster_sums_bf16_f32_t256_s2_a");
        assert!(v.shared_bytes(10) > v.with_tensor_core_tiles(2).shared_bytes(10));
        assert_eq!(v.with_tensor_core_tiles(2).clusters_within(1 << 20), 16);
        assert_eq!(v.with_tensor_core_tiles(2).clusters_within(100), 0);
    }
}
