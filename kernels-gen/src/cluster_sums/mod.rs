//! The cluster-sums kernel: `S[i, c] = sum over j with labels[j] == c of M[i, j]`, one
//! streaming pass over a dense row-major `M` (`rows x cols`, leading dimension `ld`) with `u32`
//! labels (one per column), into a row-major `S` (`rows x k`, leading dimension `k`).
//!
//! This is the step that turns Kernel K-means' distance product `-2 K V^T` (with the selection
//! matrix `V`) into one read of the kernel matrix, so it is written to run at memory bandwidth.
//!
//! # Design
//!
//! - **One warp, 32 rows.** Each warp is an independent worker with its own slice of shared
//!   memory (blocks are one warp). It owns *row groups* of (at most) 32 rows; lane `r` owns
//!   row `r` of the group. Walking the columns of a row group, every lane reads the same column,
//!   so the label is the same for the whole warp: the 32 lanes never collide on a bin, and no
//!   atomics or private copies of the bins are needed.
//! - **Staging.** The rows are streamed in tiles of `32 x tile_cols` through a ring of
//!   `stages` shared-memory buffers filled with 16-byte `cp.async` copies; the labels of the
//!   tile travel with it (4-byte copies, so they need no alignment). Each lane reads its row of
//!   the tile with 16-byte shared loads. Staged rows are not padded (a padded row, 16 bytes
//!   longer, made every warp-wide copy straddle a 128-byte line of shared memory and the
//!   staging 5% slower, BENCHMARKS.md run 50); instead chunk `q` of tile row `r` is stored as
//!   chunk `q ^ swizzle(r)` of its row, so that eight lanes reading the same chunk of eight
//!   consecutive rows meet eight different groups of banks. Two row modes (`TW = tile_cols`):
//!   - *aligned* (`m` 16-byte aligned and `ld` a multiple of 16 bytes): row group `g` is the 32
//!     consecutive rows from `32 g`, and column tile `t` the columns `[t TW, (t + 1) TW)`, which
//!     start on a 16-byte boundary in every row;
//!   - *strided* (any other `ld` or address, e.g. an odd `n`): tiles start on boundaries of
//!     `RA` elements, `min(TW * size_of::<T>(), 128)` bytes ([`ClusterSumsVariant::row_alignment`]:
//!     32 `f32` or 16 `f64` for the preferred tiles). Row `i` starts
//!     `sh(i) = (a + i ld) mod RA` elements past such a boundary (`a`: the element address of
//!     `m`), a function of `i mod RP` for the period `RP = RA / gcd(ld mod RA, RA)`
//!     ([`ClusterSumsVariant::row_period`]: 32 for an odd `ld` in f32, 2 for `ld = 50000`, 1
//!     when only `a` is off a boundary), so the rows are grouped by it: a *super group* of
//!     `32 RP` consecutive rows from `b` is split into `RP` row groups, row group `s` holding the
//!     rows `b + s + RP r` (`r = 0 .. 31`, those `< rows`; of the last, partial super group
//!     only the row groups that hold a row are enumerated). All rows of a row group have the
//!     same shift `sh`, so its column tile `t` covers the columns `[t TW - sh, (t + 1) TW - sh)`,
//!     which start on an `RA`-element boundary in every one of its rows: they are copied and
//!     laid out as aligned rows are (and a warp's copies of a tile row read whole aligned
//!     blocks), with `ceil((cols + RA - 1) / TW)` tiles per row group. The fewer than `RA`
//!     columns before column 0 (tile 0) lie in earlier rows or in the `RA`-element block that
//!     holds `m[0]`, so copying them is safe where that block lies in `M`'s allocation (`RA`
//!     elements at most 256 bytes); with 512-byte blocks, the chunks that lie wholly before `m`
//!     (in row 0, or in the first rows when `ld < RA`) are zero-filled instead (the kernel's
//!     `LEAD_GUARD`). They and the columns past `cols` (zero-filled) get the label `0xffffffff`
//!     (a plain shared store instead of a copy), which no cluster range holds, so they go to
//!     the dump row (below) and every tile is summed without a column bound.
//!
//!   The copy addresses are strength-reduced (one pointer step per copy), so staging costs a
//!   few instructions per 16 bytes.
//! - **Bins.** Each lane's running sums live in shared memory, `bins[c * 33 + lane]` (stride 33
//!   so both the per-column updates and the transposed write-out are conflict-free), plus one
//!   spare "dump" row that absorbs labels outside the current cluster range (labels `>= k` are
//!   skipped this way: they never touch `S`). Once a tile is staged, the warp turns its labels
//!   in place into their bins' byte offsets (each lane a share of the columns), so that summing
//!   an element costs no label arithmetic. A run of equal consecutive labels is summed in a
//!   register; the bin of a new label is loaded *before* the previous run is stored (the two
//!   differ), so the shared-memory read-modify-write chain overlaps two columns deep.
//! - **Balance.** The `row_groups x column_tiles` tiles ([`ClusterSumsVariant::row_groups`],
//!   [`ClusterSumsVariant::column_tiles`]) are split into `workers` contiguous,
//!   equal ranges (one per warp, a persistent grid of [`MIN_WARPS_PER_SM`] warps per SM, or
//!   all resident warps where fewer fit, and at most the number of row groups; or exactly
//!   twice that number where the device holds that many warps, so small matrices keep more
//!   warps busy; see [`ClusterSumsLaunch::workers`]; the tensor-core kernel's teams get
//!   exactly one or two blocks per row group, in waves where they do not all fit at once).
//!   A worker writes a row group it covers
//!   entirely with plain stores; a row group split between two workers is added into a zeroed
//!   `S` with `atomicAdd` by both.
//! - **Choice of kernel.** [`plan_cluster_sums`] takes 512-byte tile rows in two stages (the
//!   fastest measured), and smaller staging rings when the bins would leave fewer
//!   than [`MIN_WARPS_PER_SM`] resident warps. Up to `k = 835` (f32, 228 KiB of shared memory per SM) one pass still fits
//!   with [`MIN_WARPS_PER_SM_LARGE_K`] warps; beyond, the host launches several passes over
//!   disjoint cluster ranges (each pass reads `M` again).
//!
//! - **Tensor cores.** For a matrix held in 16 bits, [`tensor_cores`] replaces the bins by
//!   `mma.sync` products of each staged tile with its columns' one-hot selection (same tiles,
//!   row groups and launch ABI), for `k <= 128` in teams of four warps per block sharing each
//!   row group's tiles (one or two blocks per row group), or one warp per block for `k <= 64`
//!   where teams do not fit.
//!
//! The kernel's measurements on an H100 and an H200, and those of the alternatives measured
//! beside it, are in BENCHMARKS.md (runs 3 to 6, 35, and "Measurements moved from the code").
//!
//! # Summation order (determinism)
//!
//! Each lane adds its row's values in column order, runs of equal labels first summed in a
//! register (`bin + (v1 + v2 + ...)`), which differs from a plain sequential sum only in
//! rounding. A split row group has exactly two partial sums (each worker's range spans at least
//! one whole row group's worth of tiles when `workers <= row groups`, counting the empty row
//! groups of the strided mode; with `workers = 2 row groups`, worker `2 g` starts exactly at
//! row group `g`'s first tile and worker `2 g + 1` in its middle), added into zero: IEEE addition is
//! commutative, so the result does not depend on which atomic lands first. The result is
//! therefore **deterministic** for a given device and launch configuration (the number of
//! workers depends on the device's multiprocessor count and occupancy), and matches a
//! sequential CPU sum to rounding. Note that `atomicAdd` on `float` flushes subnormal results to
//! zero (PTX `atom.add.f32`).
//!
//! # Parameters (the launch ABI)
//!
//! ```text
//! (const long long rows, const long long cols, const long long ld,
//!  const T* m, const unsigned int* labels,
//!  const long long c_lo, const long long kb, const long long k,
//!  T* s, const long long workers)
//! ```
//!
//! One launch computes the columns `c_lo .. c_lo + kb` of `S` (`kb <= clusters_per_pass`).
//! Launch `workers` blocks of 32 threads ([`ClusterSumsLaunch::grid_block`]) with
//! [`ClusterSumsLaunch::shared_bytes`] of dynamic shared memory (raise the function's
//! dynamic-shared-memory limit first when that exceeds 48 KiB). When
//! [`ClusterSumsLaunch::needs_zeroed_output`] is true, `S` must be zeroed before the first pass.
//! Requirements: `ld >= cols`; `m` aligned to its element size, and for an aligned variant to
//! 16 bytes with `ld` a multiple of 16 bytes (the host takes it for rows on 512-byte blocks,
//! and for smaller matrices on 128-byte lines, [`ClusterSumsVariant::layout`]); `rows,
//! cols >= 1` (for `cols == 0` the host writes zeros); `k < 2^32` (labels are `u32`, and the
//! strided mode's label `0xffffffff` must lie outside every cluster range). Reads stay inside
//! the 16-byte blocks that hold `M`'s elements or lie between them (aligned mode), or in the
//! `RA`-element block that holds `m[0]` and after it (strided mode, where `RA` elements span at
//! most 256 bytes; with 512-byte blocks the chunks of a row's lead that lie wholly before `m`
//! are zero-filled), so they never leave `M`'s allocation (allocations start on 256-byte
//! boundaries).

pub mod tensor_cores;

use crate::emit::LaunchDims;
use crate::params::CType;
use kernel_ir::{Half, ScalarType};

/// Threads per warp: a block is one warp (the bins kernel) or a team of warps (the tensor-core
/// kernel, [`ClusterSumsVariant::team`]).
pub const CLUSTER_SUMS_THREADS: u32 = 32;
/// Rows per row group (one per lane).
pub const ROWS_PER_GROUP: u64 = 32;
/// Stride of the shared-memory bins, in elements per cluster.
pub const BIN_STRIDE: u32 = 33;
/// The resident warps per multiprocessor a launch plans for first: about the fewest that keep
/// an H100 near its memory bandwidth, and the workers per SM that stream a large matrix.
pub const MIN_WARPS_PER_SM: u32 = 4;
/// The resident warps per multiprocessor a launch over a matrix held in 16 bits plans for
/// first: twice the elements per byte make its loop issue-bound, so it needs more warps in
/// flight than an f32 one to stream at the memory's rate (BENCHMARKS.md, run 26).
pub const MIN_WARPS_PER_SM_HELD: u32 = 8;
/// For larger `k`, one pass with as few as this many resident warps per multiprocessor is
/// preferred to several passes (each pass reads `M` again); past that `k` is split into passes.
pub const MIN_WARPS_PER_SM_LARGE_K: u32 = 2;
/// Tile widths a variant may use, in bytes per row (16-byte multiples, powers of two).
const TILE_ROW_BYTES: [u32; 4] = [64, 128, 256, 512];

/// The strided mode's tile starts by default: 128-byte lines ([`ClusterSumsVariant::block_bytes`]).
pub const LINE_BYTES: u32 = 128;

/// The strided mode's tile starts for large matrices whose rows are not on such blocks: a
/// warp's copies of a 512-byte tile row then read one aligned 512-byte block, which streams
/// at the read ceiling, where rows on 128-byte lines read slower (BENCHMARKS.md, runs 50 to 52).
pub const BLOCK_BYTES: u32 = 512;

/// Row groups per super group of `32 RP` rows a matrix needs, at least, before its strided
/// rows take [`BLOCK_BYTES`] blocks: with fewer, the last super group's short row groups (as
/// many as `RP`, which grows fourfold from 128-byte lines to 512-byte blocks for an odd `ld`)
/// would cost more than the blocks save.
pub const MIN_SUPER_GROUPS_FOR_BLOCKS: u64 = 16;

/// Why a cluster-sums variant or launch cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterSumsError {
    /// The tile width is not one of the supported sizes.
    #[error(
        "cluster sums: a tile of {tile_cols} columns of {dtype:?} is {bytes} bytes per row; use 64, 128, 256 or 512 bytes"
    )]
    TileWidth {
        /// Requested columns per tile.
        tile_cols: u32,
        /// Element type of the sums.
        dtype: ScalarType,
        /// Bytes per tile row.
        bytes: u64,
    },
    /// The pipeline depth is out of range.
    #[error("cluster sums: {stages} pipeline stages requested; use 2 to 4")]
    Stages {
        /// Requested stages.
        stages: u32,
    },
    /// Not even one cluster fits in the device's shared memory next to the staging buffers.
    #[error(
        "cluster sums: the {name} kernel needs {needed} bytes of shared memory per block for one cluster, the device allows {allowed}; use a variant with fewer or narrower stages"
    )]
    SharedMemory {
        /// Kernel name.
        name: String,
        /// Bytes needed for one cluster per pass.
        needed: u64,
        /// Bytes the device allows per block.
        allowed: u64,
    },
}

/// The compile-time shape of a cluster-sums kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClusterSumsVariant {
    /// Element type of `S` (and of `M`, unless `held`).
    pub dtype: ScalarType,
    /// The 16-bit format `M` is held in (`dtype` must be `F32`), or `None` for `M` in `dtype`.
    pub held: Option<Half>,
    /// Columns per staged tile (64 to 512 bytes per row, a power of two).
    pub tile_cols: u32,
    /// Shared-memory buffers in the `cp.async` ring (2 to 4): `stages - 1` tiles are in flight
    /// while one is summed.
    pub stages: u32,
    /// Rows start on 16-byte boundaries (`m` 16-byte aligned and a leading dimension that is a
    /// multiple of 16 bytes): row groups of 32 consecutive rows. Otherwise the *strided* mode:
    /// row groups of rows [`Self::row_period`] apart (see the module documentation).
    pub aligned: bool,
    /// Strided mode: the rows of a row group lie this many rows apart, the period of the rows'
    /// shifts (see [`Self::with_leading_dimension`]); 1 in the aligned mode.
    pub row_period: u32,
    /// 0 for the bins kernel; else the tensor-core kernel ([`tensor_cores`], `M` held in 16
    /// bits only) with this many tiles of 8 clusters in registers (1 to
    /// [`tensor_cores::MAX_CLUSTER_TILES`]).
    pub tensor_core_tiles: u32,
    /// Warps per block (the tensor-core kernel only; 1 otherwise): a *team* of warps shares
    /// one worker's tiles, each warp a contiguous share with its own staging ring, and adds
    /// the team's sums in a fixed order at the end ([`tensor_cores`]). More than 1 only where
    /// every worker lies inside one row group ([`ClusterSumsLaunch::workers_per_sm`]).
    pub team: u32,
    /// Strided mode: tiles start on blocks of `min(tile row bytes, block_bytes)` bytes,
    /// [`LINE_BYTES`] or [`BLOCK_BYTES`] ([`Self::with_blocks`], [`Self::layout`]).
    pub block_bytes: u32,
}

impl ClusterSumsVariant {
    /// A checked variant.
    pub fn new(
        dtype: ScalarType,
        held: Option<Half>,
        tile_cols: u32,
        stages: u32,
        aligned: bool,
    ) -> Result<ClusterSumsVariant, ClusterSumsError> {
        let bytes = u64::from(tile_cols) * matrix_elem_bytes(dtype, held);
        if !TILE_ROW_BYTES.iter().any(|b| u64::from(*b) == bytes) {
            return Err(ClusterSumsError::TileWidth {
                tile_cols,
                dtype,
                bytes,
            });
        }
        if !(2..=4).contains(&stages) {
            return Err(ClusterSumsError::Stages { stages });
        }
        Ok(ClusterSumsVariant::unchecked(
            dtype, held, tile_cols, stages, aligned,
        ))
    }

    /// A variant of valid parameters, its strided rows a whole alignment block (`RA` rows)
    /// apart, which suits any leading dimension.
    fn unchecked(
        dtype: ScalarType,
        held: Option<Half>,
        tile_cols: u32,
        stages: u32,
        aligned: bool,
    ) -> Self {
        let mut v = ClusterSumsVariant {
            dtype,
            held,
            tile_cols,
            stages,
            aligned,
            row_period: 1,
            tensor_core_tiles: 0,
            team: 1,
            block_bytes: LINE_BYTES,
        };
        if !aligned {
            v.row_period = v.row_alignment();
        }
        v
    }

    /// This variant with strided tiles on blocks of `bytes` bytes ([`LINE_BYTES`] or
    /// [`BLOCK_BYTES`]), its strided rows a whole block (`RA` rows) apart until
    /// [`Self::with_leading_dimension`] narrows them. The aligned mode does not change.
    pub fn with_blocks(self, bytes: u32) -> Self {
        if self.aligned {
            return self;
        }
        let mut v = ClusterSumsVariant {
            block_bytes: bytes,
            ..self
        };
        v.row_period = v.row_alignment();
        v
    }

    /// How a matrix at `m_addr` with leading dimension `ld` (elements) and `rows` rows is best
    /// summed: `(aligned, block_bytes)`. Rows on [`BLOCK_BYTES`] blocks take the aligned mode;
    /// so do smaller matrices whose rows are on 128-byte lines
    /// ([`Self::prefers_aligned`]); other large matrices take strided tiles on
    /// [`BLOCK_BYTES`] blocks (at least [`MIN_SUPER_GROUPS_FOR_BLOCKS`] super groups of rows);
    /// the rest strided tiles on 128-byte lines.
    /// `blocks` forces the block size: [`LINE_BYTES`] gives the choice of the 128-byte rule
    /// alone (aligned on 128-byte lines, else strided on lines), [`BLOCK_BYTES`] strided tiles on
    /// blocks unless the rows are on blocks (aligned); any other size is treated as `None`.
    pub fn layout(
        dtype: ScalarType,
        held: Option<Half>,
        m_addr: u64,
        ld: u64,
        rows: u64,
        blocks: Option<u32>,
    ) -> (bool, u32) {
        let esz = matrix_elem_bytes(dtype, held);
        let block = u64::from(BLOCK_BYTES);
        let lines = (
            ClusterSumsVariant::prefers_aligned(dtype, held, m_addr, ld),
            LINE_BYTES,
        );
        if blocks == Some(LINE_BYTES) {
            return lines;
        }
        if m_addr.is_multiple_of(block) && (ld * esz).is_multiple_of(block) {
            return (true, LINE_BYTES);
        }
        if blocks == Some(BLOCK_BYTES) {
            return (false, BLOCK_BYTES);
        }
        // The period of the kernels' tiles on blocks: RA is a whole tile row, 128 elements for
        // f32 bins and 16-bit tensor-core tiles, 64 for f64 (wider 16-bit bins tiles have
        // longer periods, but few more short row groups).
        let ra = (block / esz).min(128);
        let period = ra / gcd(ld % ra, ra);
        if rows >= MIN_SUPER_GROUPS_FOR_BLOCKS * ROWS_PER_GROUP * period {
            return (false, BLOCK_BYTES);
        }
        lines
    }

    /// This variant for a matrix with leading dimension `ld` (elements): in the strided mode,
    /// rows `i` and `i + p` start equally far past an `RA`-element boundary for the period
    /// `p = RA / gcd(ld mod RA, RA)`, so a row group takes rows `p` apart rather than `RA`
    /// (rows two apart for n = 50000 or 70000 in f32, where the shift is 0 or 16 elements;
    /// consecutive rows where only the matrix address is off a boundary). The aligned mode
    /// does not change.
    pub fn with_leading_dimension(self, ld: u64) -> Self {
        if self.aligned {
            return self;
        }
        let ra = u64::from(self.row_alignment());
        ClusterSumsVariant {
            row_period: (ra / gcd(ld % ra, ra)) as u32,
            ..self
        }
    }

    /// The variant used by default: 512-byte tile rows, two stages (the fastest measured for
    /// k = 10 to 100, n = 50000 to 78823: BENCHMARKS.md; `bench_cluster_sums` times others).
    pub fn preferred(dtype: ScalarType, held: Option<Half>, aligned: bool) -> ClusterSumsVariant {
        let esz = matrix_elem_bytes(dtype, held) as u32;
        ClusterSumsVariant::unchecked(dtype, held, 512 / esz, 2, aligned)
    }

    /// The variants tried in order when the preferred one leaves too little room for the bins
    /// (see [`plan_cluster_sums`]): the preferred one, then ever smaller staging rings.
    pub fn fallbacks(
        dtype: ScalarType,
        held: Option<Half>,
        aligned: bool,
    ) -> Vec<ClusterSumsVariant> {
        let esz = matrix_elem_bytes(dtype, held) as u32;
        [(512, 2), (256, 3), (256, 2), (128, 2), (64, 2)]
            .into_iter()
            .map(|(row_bytes, stages)| {
                ClusterSumsVariant::unchecked(dtype, held, row_bytes / esz, stages, aligned)
            })
            .collect()
    }

    /// Whether the aligned mode should be used for a matrix at `m_addr` with leading dimension
    /// `ld` (elements): when every row starts on a 128-byte boundary (whole cache lines). Rows
    /// that are 16-byte but not 128-byte aligned (n = 50000 or 70000 in f32) are also summed
    /// correctly by the aligned mode, but its copies then straddle cache lines (measured slower:
    /// BENCHMARKS.md, run 3), while the strided mode starts every tile on a line.
    pub fn prefers_aligned(dtype: ScalarType, held: Option<Half>, m_addr: u64, ld: u64) -> bool {
        let esz = matrix_elem_bytes(dtype, held);
        m_addr.is_multiple_of(128) && (ld * esz).is_multiple_of(128)
    }

    /// The workers per multiprocessor that stream a large matrix: [`MIN_WARPS_PER_SM`], or
    /// [`MIN_WARPS_PER_SM_HELD`] for a matrix held in 16 bits.
    pub fn streaming_warps_per_sm(&self) -> u32 {
        if self.held.is_some() {
            MIN_WARPS_PER_SM_HELD
        } else {
            MIN_WARPS_PER_SM
        }
    }

    /// Warps per block: the team of the tensor-core kernel, 1 for the bins kernel.
    pub fn warps_per_block(&self) -> u32 {
        if self.tensor_core_tiles > 0 {
            self.team.max(1)
        } else {
            1
        }
    }

    /// Threads per block: [`CLUSTER_SUMS_THREADS`] a warp.
    pub fn threads_per_block(&self) -> u32 {
        CLUSTER_SUMS_THREADS * self.warps_per_block()
    }

    /// Bytes of one element of `M`.
    fn m_bytes(&self) -> u64 {
        matrix_elem_bytes(self.dtype, self.held)
    }

    /// Elements of `M` per 16 bytes (`VE`).
    fn vector_elems(&self) -> u32 {
        16 / self.m_bytes() as u32
    }

    /// The tile alignment of the strided mode, in elements (`RA`): tiles of strided rows start
    /// on `min(tile row bytes, 128)`-byte boundaries, so a warp's copies read whole 128-byte
    /// lines (whole 64-byte halves for 64-byte tile rows).
    pub fn row_alignment(&self) -> u32 {
        self.tile_cols.min(self.block_bytes / self.m_bytes() as u32)
    }

    /// The strided kernels' `LEAD_GUARD`: whether an `RA`-element block spans more than
    /// [`ALLOCATION_ALIGNMENT_BYTES`] (512-byte tile rows on 512-byte blocks), so that a row's
    /// lead (the columns before column 0 that its first tile reads) may lie before `M`'s
    /// allocation and its chunks wholly before `m` are zero-filled. Otherwise the lead lies in
    /// the `RA`-element block that holds `m[0]` and is read, with no test (the test slows small
    /// matrices whose workers each sum a whole row group: BENCHMARKS.md, run 52).
    fn guards_lead(&self) -> bool {
        u64::from(self.row_alignment()) * self.m_bytes() > ALLOCATION_ALIGNMENT_BYTES
    }

    /// Row groups (32 rows each at most, one per lane) of a matrix with `rows` rows: `rows / 32`
    /// rounded up for aligned rows; for strided rows `RP` ([`Self::row_period`]) per whole
    /// super group of `32 * RP` rows, and of the last, partial one the row groups that hold a
    /// row (its first `min(RP, rows left)`: row group `s` of it starts at its row `s`), so no
    /// row group is empty.
    pub fn row_groups(&self, rows: u64) -> u64 {
        if self.aligned {
            rows.div_ceil(ROWS_PER_GROUP)
        } else {
            let rp = u64::from(self.row_period.max(1));
            let span = ROWS_PER_GROUP * rp;
            rows / span * rp + (rows % span).min(rp)
        }
    }

    /// Column tiles each row group is streamed in: `cols / tile_cols` rounded up, and for
    /// strided rows enough to cover the up to `RA - 1` columns a row group's tiles start before
    /// column 0.
    pub fn column_tiles(&self, cols: u64) -> u64 {
        let lead = if self.aligned {
            0
        } else {
            u64::from(self.row_alignment()) - 1
        };
        (cols + lead).div_ceil(u64::from(self.tile_cols))
    }

    /// Bytes of one stage: the `32 x tile_cols` tile (rows unpadded, their 16-byte chunks
    /// swizzled) and its labels.
    pub fn stage_bytes(&self) -> u64 {
        let row = u64::from(self.tile_cols) * self.m_bytes();
        ROWS_PER_GROUP * row + u64::from(self.tile_cols) * 4
    }

    /// Dynamic shared memory of one block (one warp for the bins kernel) whose bins hold `clusters` clusters
    /// (plus the dump row); for the tensor-core kernel, whose sums live in registers, the
    /// staging ring of each warp of its team ([`tensor_cores::team_warp_bytes`]).
    pub fn shared_bytes(&self, clusters: u64) -> u64 {
        if self.tensor_core_tiles > 0 {
            return u64::from(self.warps_per_block()) * tensor_cores::team_warp_bytes(self);
        }
        let esz = self.dtype.size_bytes() as u64;
        self.ring_bytes() + (clusters + 1) * u64::from(BIN_STRIDE) * esz
    }

    /// Bytes of one warp's staging ring: `stages` stages.
    pub(crate) fn ring_bytes(&self) -> u64 {
        u64::from(self.stages) * self.stage_bytes()
    }

    /// The most clusters one pass can hold when a block may use `bytes` of shared memory
    /// (for the tensor-core kernel: its register tiles' clusters where its staging fits).
    pub fn clusters_within(&self, bytes: u64) -> u64 {
        if self.tensor_core_tiles > 0 {
            return if self.shared_bytes(0) <= bytes {
                8 * u64::from(self.tensor_core_tiles)
            } else {
                0
            };
        }
        let esz = self.dtype.size_bytes() as u64;
        (bytes.saturating_sub(self.ring_bytes()) / (u64::from(BIN_STRIDE) * esz)).saturating_sub(1)
    }

    /// The kernel's entry-point name, e.g. `pk_cluster_sums_f32_t64_s3_a` (`_r2` for strided
    /// rows two apart; `bf16_f32_mma4_...` for the tensor-core kernel with 4 cluster tiles).
    pub fn name(&self) -> String {
        let ty = match (self.held, self.dtype) {
            (Some(half), _) => format!("{}_f32", half.name()),
            (None, ScalarType::F32) => "f32".to_string(),
            (None, ScalarType::F64) => "f64".to_string(),
        };
        let rows = if self.aligned {
            "a".to_string()
        } else if self.block_bytes == LINE_BYTES {
            format!("r{}", self.row_period)
        } else {
            format!("r{}b{}", self.row_period, self.block_bytes)
        };
        let mma = match self.tensor_core_tiles {
            0 => String::new(),
            tiles => format!("_mma{tiles}"),
        };
        let team = match self.warps_per_block() {
            1 => String::new(),
            warps => format!("_w{warps}"),
        };
        format!(
            "pk_cluster_sums_{ty}{mma}_t{}_s{}_{rows}{team}",
            self.tile_cols, self.stages
        )
    }
}

/// Bytes that device allocations (and so `M`'s) are aligned to, at least.
const ALLOCATION_ALIGNMENT_BYTES: u64 = 256;

/// `source` with the row mode's constants of `variant` filled in (`{RA}`, `{RP}` and
/// `{LEAD_GUARD}`, [`ClusterSumsVariant::guards_lead`]): shared by the bins kernel and the
/// tensor-core kernel.
fn with_row_mode_constants(source: String, variant: &ClusterSumsVariant) -> String {
    source
        .replace("{RA}", &variant.row_alignment().to_string())
        .replace("{RP}", &variant.row_period.to_string())
        .replace("{LEAD_GUARD}", &variant.guards_lead().to_string())
}

/// The greatest common divisor of `a` and `b` (`b > 0`).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while a != 0 {
        (a, b) = (b % a, a);
    }
    b
}

/// Bytes of one element of `M` held in `held` (16 bits) or else in `dtype`.
fn matrix_elem_bytes(dtype: ScalarType, held: Option<Half>) -> u64 {
    match held {
        Some(_) => 2,
        None => dtype.size_bytes() as u64,
    }
}

/// Shared-memory limits of a device (the CUDA device attributes of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Multiprocessors.
    pub multiprocessors: u32,
    /// Shared memory per multiprocessor, bytes.
    pub shared_bytes_per_sm: u32,
    /// The largest dynamic shared memory a block may opt into, bytes.
    pub shared_bytes_per_block_optin: u32,
    /// Shared memory the system reserves per resident block, bytes.
    pub reserved_shared_bytes_per_block: u32,
    /// Resident blocks per multiprocessor at most.
    pub max_blocks_per_sm: u32,
}

impl DeviceLimits {
    /// An NVIDIA H100 (SXM): 132 multiprocessors, 228 KiB of shared memory each.
    pub const H100: DeviceLimits = DeviceLimits {
        multiprocessors: 132,
        shared_bytes_per_sm: 233_472,
        shared_bytes_per_block_optin: 232_448,
        reserved_shared_bytes_per_block: 1024,
        max_blocks_per_sm: 32,
    };

    /// The shared memory one block may take for `warps` one-warp blocks to stay resident per
    /// multiprocessor (at most what a block may opt into).
    pub fn block_budget(&self, warps: u32) -> u64 {
        (u64::from(self.shared_bytes_per_sm) / u64::from(warps.max(1)))
            .saturating_sub(u64::from(self.reserved_shared_bytes_per_block))
            .min(u64::from(self.shared_bytes_per_block_optin))
    }

    /// Resident blocks per multiprocessor with `shared` bytes each (shared memory and
    /// the block limit only; the runtime also asks the driver's occupancy calculator).
    pub fn blocks_per_sm(&self, shared: u64) -> u32 {
        let per_block = shared + u64::from(self.reserved_shared_bytes_per_block);
        let fit = u64::from(self.shared_bytes_per_sm) / per_block.max(1);
        fit.min(u64::from(self.max_blocks_per_sm)) as u32
    }
}

/// How to compute cluster sums for one `k` on one device: the kernel, its passes over cluster
/// ranges and its shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterSumsLaunch {
    /// The kernel.
    pub variant: ClusterSumsVariant,
    /// Number of clusters `k`.
    pub k: u64,
    /// Clusters per pass (the bins of one launch).
    pub clusters_per_pass: u64,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

impl ClusterSumsLaunch {
    /// Number of launches (each reads `M` once).
    pub fn passes(&self) -> u64 {
        self.k.div_ceil(self.clusters_per_pass.max(1))
    }

    /// The cluster range `(c_lo, kb)` of pass `p`.
    pub fn pass_range(&self, p: u64) -> (u64, u64) {
        let lo = p * self.clusters_per_pass;
        (lo, self.clusters_per_pass.min(self.k.saturating_sub(lo)))
    }

    /// Workers (blocks: one warp, or a team of the tensor-core kernel) for a `rows x cols` matrix when `resident_blocks` blocks
    /// fit at once on a device of `multiprocessors` SMs: [`MIN_WARPS_PER_SM`] per SM (all
    /// resident blocks where fewer fit), but at most one per row group of the variant's row
    /// mode ([`ClusterSumsVariant::row_groups`]), and at least one. When the device holds
    /// twice as many warps as there are row groups (small `rows`: otherwise most warps would
    /// idle) and a row group has two column tiles or more, two per row group, each summing
    /// one half of its tiles. A team of warps per block ([`ClusterSumsVariant::team`]) gets
    /// exactly one or two workers per row group: two where it has two column tiles or more a
    /// warp and they all fit at once, else one.
    ///
    /// Streaming a large matrix, more warps per SM do not read faster, and an uneven number
    /// per SM reads slower (BENCHMARKS.md, run 6).
    pub fn workers(&self, rows: u64, cols: u64, resident_blocks: u64, multiprocessors: u64) -> u64 {
        self.workers_per_sm(
            rows,
            cols,
            resident_blocks,
            multiprocessors,
            self.variant.streaming_warps_per_sm(),
        )
    }

    /// [`Self::workers`] with `per_sm` streaming workers per multiprocessor instead of the
    /// variant's own number (for benchmarks).
    pub fn workers_per_sm(
        &self,
        rows: u64,
        cols: u64,
        resident_blocks: u64,
        multiprocessors: u64,
        per_sm: u32,
    ) -> u64 {
        let groups = self.variant.row_groups(rows);
        if groups == 0 || cols == 0 {
            return 0;
        }
        let team = u64::from(self.variant.warps_per_block());
        if self.variant.column_tiles(cols) >= 2 * team && 2 * groups <= resident_blocks {
            return 2 * groups;
        }
        if team > 1 {
            // A team's tiles must lie in one row group: one worker per row group, in waves if
            // they do not all fit at once.
            return groups;
        }
        let streaming = multiprocessors.saturating_mul(u64::from(per_sm));
        resident_blocks.min(streaming).clamp(1, groups)
    }

    /// Whether some row group may be split between two of `workers` workers, so `S` must be
    /// zeroed first.
    pub fn needs_zeroed_output(&self, rows: u64, workers: u64) -> bool {
        workers != self.variant.row_groups(rows)
    }

    /// Grid, block and dynamic shared memory for `workers` workers (blocks of
    /// [`ClusterSumsVariant::team`] warps).
    pub fn grid_block(&self, workers: u64) -> LaunchDims {
        let grid = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
        (
            (grid, 1, 1),
            (self.variant.threads_per_block(), 1, 1),
            self.shared_bytes,
        )
    }
}

/// The launch of `variant` for `k` clusters (`k >= 1`) when a block may use `budget` bytes
/// of shared memory: as many clusters per pass as fit, or the error naming what one cluster
/// needs. Shared by [`plan_cluster_sums`] and [`tensor_cores::plan_tensor_core_sums`].
fn launch_within(
    variant: ClusterSumsVariant,
    k: u64,
    budget: u64,
) -> Result<ClusterSumsLaunch, ClusterSumsError> {
    let fit = variant.clusters_within(budget);
    if fit == 0 {
        return Err(ClusterSumsError::SharedMemory {
            name: variant.name(),
            needed: variant.shared_bytes(1),
            allowed: budget,
        });
    }
    let per_pass = fit.min(k);
    Ok(ClusterSumsLaunch {
        variant,
        k,
        clusters_per_pass: per_pass,
        shared_bytes: u32::try_from(variant.shared_bytes(per_pass)).unwrap_or(u32::MAX),
    })
}

/// Chooses the kernel and the clusters per pass for `k` clusters.
///
/// With `forced`, that variant is used, its bins as large as one block may have (so it may run
/// with fewer resident warps; for benchmarks and tests). Otherwise the first variant of
/// [`ClusterSumsVariant::fallbacks`] whose bins hold all `k` clusters while
/// [`MIN_WARPS_PER_SM`] warps stay resident; else the first that does so with
/// [`MIN_WARPS_PER_SM_LARGE_K`] warps; else the one that needs the fewest passes at that
/// occupancy.
pub fn plan_cluster_sums(
    k: u64,
    dtype: ScalarType,
    held: Option<Half>,
    aligned: bool,
    forced: Option<ClusterSumsVariant>,
    limits: &DeviceLimits,
) -> Result<ClusterSumsLaunch, ClusterSumsError> {
    let k = k.max(1);
    let make = |variant: ClusterSumsVariant, budget: u64| launch_within(variant, k, budget);
    let per_block = u64::from(limits.shared_bytes_per_block_optin);
    if let Some(variant) = forced {
        return make(variant, per_block);
    }
    let budget = |warps: u32| limits.block_budget(warps);
    let mut best: Option<ClusterSumsLaunch> = None;
    let mut first_error = None;
    let first = if held.is_some() {
        MIN_WARPS_PER_SM_HELD
    } else {
        MIN_WARPS_PER_SM
    };
    for warps in [first, MIN_WARPS_PER_SM_LARGE_K] {
        for variant in ClusterSumsVariant::fallbacks(dtype, held, aligned) {
            match make(variant, budget(warps)) {
                Ok(launch) if launch.passes() == 1 => return Ok(launch),
                Ok(launch) => {
                    if warps == MIN_WARPS_PER_SM_LARGE_K
                        && best.is_none_or(|b| launch.passes() < b.passes())
                    {
                        best = Some(launch);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    match (best, first_error) {
        (Some(b), _) => Ok(b),
        (None, Some(e)) => Err(e),
        (None, None) => make(
            ClusterSumsVariant::preferred(dtype, held, aligned),
            budget(MIN_WARPS_PER_SM_LARGE_K),
        ),
    }
}

const TEMPLATE: &str = r#"// popcorn builtin kernel {NAME}: cluster sums over one range of clusters,
//   s[i * k + c_lo + c] = sum over j < cols with labels[j] == c_lo + c of m[i * ld + j],
// for 0 <= i < rows and 0 <= c < kb. Labels outside [c_lo, c_lo + kb) are skipped.
// One warp per block, each an independent worker over a contiguous range of 32-row x {TW}-column
// tiles; lane r owns row r of its row group. Tiles stream through a {STAGES}-stage ring of
// 16-byte cp.async copies ({MODE} rows); per-lane bins live in shared memory at
// bins[c * 33 + lane], plus a dump row kb. Row groups split between two workers are added with
// atomicAdd into a zeroed s.
namespace {NAME}_impl {

typedef {T} real;
typedef {MT} mval;
typedef {VT} vec;
typedef {LT} lvec;
constexpr int TW = {TW};
constexpr int STAGES = {STAGES};
constexpr int VE = {VE};
constexpr int CPR = TW / VE;
constexpr int RSTEP = 32 / CPR;
constexpr int TILE_BYTES = 32 * TW * (int)sizeof(mval);
constexpr int STAGE_BYTES = TILE_BYTES + TW * 4;
constexpr unsigned BIN_BYTES = 33u * (unsigned)sizeof(real);

{COPY_HELPERS}{ROW_MODE}

// Adds v to the bin at shared byte address p (bin c, already mapped into [0, kb], kb = dump).
// The run of the current bin `cur` is kept as base (its value before the run) + acc (the run's
// sum); the new bin is loaded before the old run is stored, which is safe because they differ
// when p != cur (when p == cur the load is discarded and the store writes an intermediate
// value that a later store overwrites).
__device__ __forceinline__ void push(real v, real* p, real*& cur, real& base, real& acc)
{
    const real nb = *p;
    *cur = base + acc;
    const bool same = p == cur;
    base = same ? base : nb;
    acc = same ? acc + v : v;
    cur = p;
}

// Turns the staged tile's labels, in place, into the byte offsets of their bins past the
// lane's own (bin c at c * BIN_BYTES; the dump row kb for labels outside [c_lo, c_lo + kb) and
// for columns >= jn), each lane a share of the columns: done once for the warp, instead of by
// every lane for every element. The warp syncs before the tile is summed.
__device__ __forceinline__ void label_offsets(unsigned int* lab, int jn, unsigned c_lo,
    unsigned kb, unsigned lane)
{
#pragma unroll
    for (int j0 = 0; j0 < TW; j0 += 32) {
        const int j = j0 + (int)lane;
        if (j < TW) {
            unsigned c = lab[j] - c_lo;
            c = c < kb ? c : kb;
            lab[j] = (j < jn ? c : kb) * BIN_BYTES;
        }
    }
    __syncwarp();
}

// Sums one staged tile into the lane's bins: `row` is the lane's row in the stage (its chunks
// swizzled by `sw`, swizzle(lane)), `lab` the tile's bin offsets (label_offsets).
__device__ __forceinline__ void consume(const mval* row, unsigned sw, const unsigned int* lab,
    unsigned char* bins_lane, real*& cur, real& base, real& acc)
{
    vec v = load_vec(row + sw * (unsigned)VE);
    lvec l = *reinterpret_cast<const lvec*>(lab);
#pragma unroll
    for (int q = 0; q < TW / VE; ++q) {
        vec vn = v;
        lvec ln = l;
        if (q + 1 < TW / VE) {
            vn = load_vec(row + (((unsigned)(q + 1) ^ sw) * (unsigned)VE));
            ln = *reinterpret_cast<const lvec*>(lab + (q + 1) * VE);
        }
{PUSHES}
        v = vn;
        l = ln;
    }
}

{FLUSH}

} // namespace {NAME}_impl

extern "C" __global__ void __launch_bounds__(32) {NAME}(
    const long long rows,
    const long long cols,
    const long long ld,
    const {MT}* __restrict__ m,
    const unsigned int* __restrict__ labels,
    const long long c_lo,
    const long long kb,
    const long long k,
    {T}* __restrict__ s,
    const long long workers)
{
    using namespace {NAME}_impl;
    extern __shared__ __align__(16) unsigned char pk_smem[];
{WORKER_RANGE}    const unsigned ukb = (unsigned)kb;
    const unsigned uclo = (unsigned)c_lo;
    // Element offset of m inside its 16-byte block (0 for aligned rows).
    const unsigned moff = (unsigned)((unsigned long long)m / sizeof(mval)) & (unsigned)(VE - 1);
    const unsigned sbase = (unsigned)__cvta_generic_to_shared(pk_smem);
    real* bins = reinterpret_cast<real*>(pk_smem + STAGES * STAGE_BYTES);
    unsigned char* bins_lane = reinterpret_cast<unsigned char*>(bins + lane);
    for (unsigned c = 0; c <= ukb; ++c) {
        *reinterpret_cast<real*>(bins_lane + c * BIN_BYTES) = (real)0;
    }

{QUEUE_FIRST_TILES}
    long long g = (long long)(t0 / ucts);
    long long ct = (long long)(t0 - (unsigned long long)g * ucts);
    bool whole_start = ct == 0;
    unsigned row_off = row_offset(lane, {GROUP_ROW}, ld, moff);
    const unsigned sw = swizzle(lane);
    real* dump = reinterpret_cast<real*>(bins_lane + ukb * BIN_BYTES);
    real* cur = dump;
    real base = (real)0;
    real acc = (real)0;
    int stage = 0;
    for (unsigned long long t = t0; t < t1; ++t) {
{QUEUE_NEXT_TILE}        const unsigned char* st = pk_smem + stage * STAGE_BYTES;
        const mval* row = reinterpret_cast<const mval*>(st) + row_off;
        unsigned int* lab = reinterpret_cast<unsigned int*>(pk_smem + stage * STAGE_BYTES + TILE_BYTES);
        {CONSUME}
        const bool last_tile = ct == cts - 1;
        if (last_tile || t + 1 == t1) {
            *cur = base + acc;
            cur = dump;
            base = (real)0;
            acc = (real)0;
            __syncwarp();
            flush(bins, s, rows, k, c_lo, ukb, {GROUP_ROW}, whole_start && last_tile, lane);
            __syncwarp();
            for (unsigned c = 0; c <= ukb; ++c) {
                *reinterpret_cast<real*>(bins_lane + c * BIN_BYTES) = (real)0;
            }
            whole_start = true;
        }
        if (++ct == cts) {
            ct = 0;
            ++g;
            row_off = row_offset(lane, {GROUP_ROW}, ld, moff);
        }
        __syncwarp();
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
"#;

/// The start of both kernels' bodies: the worker's lane and its block's contiguous range
/// `[{FIRST}, {LAST})` of the `row groups x column tiles` tiles (shared by [`TEMPLATE`] and
/// [`tensor_cores`]; see [`worker_range`]).
const WORKER_RANGE: &str = r#"    const unsigned lane = {LANE};
    const long long w = (long long)blockIdx.x;
    if (w >= workers || rows <= 0 || cols <= 0 || kb <= 0) {
        return;
    }
    const long long cts = {COL_TILES};
    const unsigned long long ucts = (unsigned long long)cts;
    const unsigned long long total = (unsigned long long)({ROW_GROUPS}) * ucts;
    const unsigned long long {FIRST} = (unsigned long long)w * total / (unsigned long long)workers;
    const unsigned long long {LAST} = (unsigned long long)(w + 1) * total / (unsigned long long)workers;
    if ({FIRST} >= {LAST}) {
        return;
    }
"#;

/// [`WORKER_RANGE`] for blocks of `team` warps: a one-warp block's range is its warp's
/// `[t0, t1)`; a team's is `[b0, b1)`, which the tensor-core kernel then shares out among its
/// warps as their `[t0, t1)`.
fn worker_range(team: u32) -> String {
    if team > 1 {
        WORKER_RANGE
            .replace("{LANE}", "threadIdx.x & 31u")
            .replace("{FIRST}", "b0")
            .replace("{LAST}", "b1")
    } else {
        WORKER_RANGE
            .replace("{LANE}", "threadIdx.x")
            .replace("{FIRST}", "t0")
            .replace("{LAST}", "t1")
    }
}

/// The ring's first `STAGES - 1` tiles queued from the worker's first tile, with the copy
/// cursor `(tl, lg, lct)` (shared by [`TEMPLATE`] and [`tensor_cores`]).
const QUEUE_FIRST_TILES: &str = r#"    // Copy cursor: the next tile to queue, as (row group, column tile).
    unsigned long long tl = t0;
    long long lg = (long long)(t0 / ucts);
    long long lct = (long long)(t0 - (unsigned long long)lg * ucts);
#pragma unroll
    for (int p = 0; p < STAGES - 1; ++p) {
        if (tl < t1) {
            const unsigned st = sbase + (unsigned)(p * STAGE_BYTES);
            {QUEUE_TILE}
            ++tl;
            if (++lct == cts) {
                lct = 0;
                ++lg;
            }
        }
        commit();
    }
"#;

/// In the tile loop: the next tile queued into the slot freed last, then the wait for the
/// current tile's copies (shared by [`TEMPLATE`] and [`tensor_cores`]).
const QUEUE_NEXT_TILE: &str = r#"        int refill = stage + STAGES - 1;
        if (refill >= STAGES) {
            refill -= STAGES;
        }
        if (tl < t1) {
            const unsigned st = sbase + (unsigned)(refill * STAGE_BYTES);
            {QUEUE_TILE}
            ++tl;
            if (++lct == cts) {
                lct = 0;
                ++lg;
            }
        }
        commit();
        wait_oldest();
        __syncwarp();
"#;

/// The `cp.async` copies, their groups and the bytes of a chunk inside a row: shared by
/// [`TEMPLATE`] and the tensor-core kernel ([`tensor_cores`]).
const COPY_HELPERS: &str = r#"__device__ __forceinline__ void copy16(unsigned dst, const void* src, unsigned bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void copy4(unsigned dst, const void* src, unsigned bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}

// Copies of chunks known to lie inside the matrix (no bounds, no zero-fill).
__device__ __forceinline__ void copy16_full(unsigned dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void copy4_full(unsigned dst, const void* src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void wait_oldest()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 1) : "memory");
}

// Bytes of the 16-byte chunk starting at column col that lie inside the matrix row.
__device__ __forceinline__ unsigned chunk_bytes(long long cols, long long col)
{
    const long long avail = cols - col;
    return avail >= VE ? 16u : (avail > 0 ? (unsigned)avail * (unsigned)sizeof(mval) : 0u);
}

// Staged rows are not padded: each warp-wide copy of a tile row fills whole 128-byte lines of
// shared memory, which the copies need to stream at the read ceiling. Instead, chunk q of tile
// row r is stored as chunk q ^ swizzle(r) of its row, so that eight lanes reading the same chunk
// of eight consecutive rows (16 bytes each) meet eight different groups of banks. The swizzle
// repeats every 16 rows.
__device__ __forceinline__ unsigned swizzle(unsigned r)
{
    return CPR >= 8 ? (r & 7u) : ((r / (8u / (unsigned)CPR)) & (unsigned)(CPR - 1));
}

// Byte offset in a stage of chunk q of tile row r.
__device__ __forceinline__ unsigned chunk_at(unsigned r, unsigned q)
{
    return (r * (unsigned)TW + (q ^ swizzle(r)) * (unsigned)VE) * (unsigned)sizeof(mval);
}

"#;

/// Labels, tile loading, row placement and shared loads of aligned rows.
const ALIGNED: &str = r#"// Queues the labels of the tile at column c0 (zero-filled past the matrix).
__device__ __forceinline__ void load_labels(unsigned stage, const unsigned int* __restrict__ labels,
    long long cols, long long c0, unsigned lane)
{
    if (c0 + TW <= cols) {
#pragma unroll
        for (int i = 0; i < (TW + 31) / 32; ++i) {
            const unsigned idx = (unsigned)i * 32u + lane;
            if (idx < (unsigned)TW) {
                copy4_full(stage + (unsigned)TILE_BYTES + idx * 4u, labels + c0 + (long long)idx);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < (TW + 31) / 32; ++i) {
        const unsigned idx = (unsigned)i * 32u + lane;
        if (idx < (unsigned)TW) {
            const long long col = c0 + (long long)idx;
            const unsigned bytes = col < cols ? 4u : 0u;
            copy4(stage + (unsigned)TILE_BYTES + idx * 4u, bytes != 0u ? labels + col : labels, bytes);
        }
    }
}

// Aligned rows: lane copies chunk q = lane % CPR of rows lane / CPR + i * RSTEP.
__device__ __forceinline__ void load_tile(unsigned stage, const mval* __restrict__ m,
    long long rows, long long cols, long long ld, unsigned moff, long long r0, long long c0,
    unsigned lane)
{
    const unsigned q = lane % (unsigned)CPR;
    const unsigned rf = lane / (unsigned)CPR;
    const long long row0 = r0 + (long long)rf;
    const mval* p = m + row0 * ld + c0 + (long long)(q * VE);
    const long long step = (long long)RSTEP * ld;
    if (r0 + 32 <= rows && c0 + TW <= cols) {
        // Interior tile: every chunk is whole.
#pragma unroll
        for (int i = 0; i < CPR; ++i) {
            copy16_full(stage + chunk_at(rf + (unsigned)(i * RSTEP), q), p);
            p += step;
        }
        return;
    }
    const unsigned colbytes = chunk_bytes(cols, c0 + (long long)(q * VE));
    const long long vr = rows - row0;
    const int nv = vr < 0 ? 0 : (vr > 32 ? 32 : (int)vr);
#pragma unroll
    for (int i = 0; i < CPR; ++i) {
        // A chunk with no bytes inside the matrix reads nothing; it gets m as a safe address.
        const unsigned bytes = i * RSTEP < nv ? colbytes : 0u;
        copy16(stage + chunk_at(rf + (unsigned)(i * RSTEP), q), bytes != 0u ? p : m, bytes);
        p += step;
    }
}

__device__ __forceinline__ unsigned row_offset(unsigned lane, long long r0, long long ld, unsigned moff)
{
    return lane * (unsigned)TW;
}

__device__ __forceinline__ vec load_vec(const mval* p)
{
    return *reinterpret_cast<const vec*>(p);
}"#;

/// Write-out of aligned row groups (32 consecutive rows).
const ALIGNED_FLUSH: &str = r#"// Writes (whole) or adds (split row group) the lane-transposed bins of row group r0.
__device__ __forceinline__ void flush(const real* bins, real* __restrict__ s, long long rows,
    long long k, long long c_lo, unsigned kb, long long r0, bool whole, unsigned lane)
{
    const long long left = rows - r0;
    const int nr = left < 32 ? (int)left : 32;
    for (int r = 0; r < nr; ++r) {
        real* out = s + (r0 + r) * k + c_lo;
        for (unsigned c = lane; c < kb; c += 32u) {
            const real v = bins[c * 33u + (unsigned)r];
            if (whole) {
                out[c] = v;
            } else {
                atomicAdd(out + c, v);
            }
        }
    }
}"#;

/// The aligned mode's parts of [`TEMPLATE`] that are not whole functions, as
/// `(placeholder, text)` pairs.
const ALIGNED_PARTS: [(&str, &str); 5] = [
    ("{COL_TILES}", "(cols + TW - 1) / TW"),
    ("{ROW_GROUPS}", "(rows + 31) / 32"),
    (
        "{QUEUE_TILE}",
        "load_tile(st, m, rows, cols, ld, moff, lg * 32, lct * TW, lane);\n            load_labels(st, labels, cols, lct * TW, lane);",
    ),
    ("{GROUP_ROW}", "g * 32"),
    (
        "{CONSUME}",
        "const long long left = cols - ct * TW;
        label_offsets(lab, left >= TW ? TW : (int)left, uclo, ukb, lane);
        consume(row, sw, lab, bins_lane, cur, base, acc);",
    ),
];

/// Row groups, tile loading, labels and shared loads of strided rows.
const STRIDED: &str = r#"// Strided rows. RA elements (RA * sizeof(mval) = min(TW * sizeof(mval), 128 or 512) bytes) is the
// alignment of tile starts; RP (a power of two, at most RA) is the period of the rows' shifts
// past such boundaries. Row group g is phase g % RP of super group g / RP (32 * RP consecutive
// rows): tile row r (lane r's row) is row group_row(g) + RP * r. All its rows start the same
// number sh < RA of elements past an RA-element boundary (row_shift), so its column tile ct
// covers the columns [ct * TW - sh, (ct + 1) * TW - sh), which start on such a boundary in
// every one of its rows: they are copied and laid out as aligned rows are, and a warp's copy
// of a tile row reads whole aligned blocks. Columns < 0 (fewer than RA, in tile 0: they lie in
// earlier rows, and where wholly before m are zero-filled, not read) and columns >= cols get the label
// OUTSIDE, which no cluster range holds, so they go to the dump row and no tile needs a column
// bound. Only row groups that hold a row are enumerated.
constexpr int RA = {RA};
constexpr int RP = {RP};
// Whether a row's lead may reach before M's allocation: RA elements span more than the 256 bytes
// allocations are aligned to (512-byte blocks). Then chunks wholly before m are zero-filled;
// otherwise the lead lies in the RA-element block that holds m[0] and is read whole.
constexpr bool LEAD_GUARD = {LEAD_GUARD};

// A label outside every cluster range [c_lo, c_lo + kb) (the host keeps k below 2^32).
constexpr unsigned OUTSIDE = 0xffffffffu;

// First row of row group g.
__device__ __forceinline__ long long group_row(long long g)
{
    const unsigned long long ug = (unsigned long long)g;
    return (long long)((ug / (unsigned)RP) * (unsigned long long)(32 * RP) + ug % (unsigned)RP);
}

// Elements from the RA-element boundary at or below the start of row `row` to that start, for
// m at element address m_elem: a function of row % RP, so the same for every row of a row group.
__device__ __forceinline__ unsigned row_shift(long long row, long long ld, unsigned m_elem)
{
    return (m_elem + (unsigned)row * (unsigned)ld) & (unsigned)(RA - 1);
}

// Queues the labels of the tile at column c0 (c0 > -RA). A column outside [0, cols) reads
// nothing: its label is set to OUTSIDE with a plain store.
__device__ __forceinline__ void load_labels(unsigned stage, const unsigned int* __restrict__ labels,
    long long cols, long long c0, unsigned lane)
{
    if (c0 >= 0 && c0 + TW <= cols) {
#pragma unroll
        for (int i = 0; i < (TW + 31) / 32; ++i) {
            const unsigned idx = (unsigned)i * 32u + lane;
            if (idx < (unsigned)TW) {
                copy4_full(stage + (unsigned)TILE_BYTES + idx * 4u, labels + c0 + (long long)idx);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < (TW + 31) / 32; ++i) {
        const unsigned idx = (unsigned)i * 32u + lane;
        if (idx < (unsigned)TW) {
            const long long col = c0 + (long long)idx;
            const unsigned dst = stage + (unsigned)TILE_BYTES + idx * 4u;
            if (col >= 0 && col < cols) {
                copy4_full(dst, labels + col);
            } else {
                asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(dst), "r"(OUTSIDE) : "memory");
            }
        }
    }
}

// Queues tile rows r (rows r0 + RP * r) from column c0, which starts on an RA-element boundary
// in each of them: lane copies chunk q = lane % CPR of tile rows lane / CPR + i * RSTEP. A chunk
// that starts before column 0 is read whole (it lies in the rows before) unless it lies wholly
// before m; chunks past cols are zero-filled.
__device__ __forceinline__ void load_tile(unsigned stage, const mval* __restrict__ m,
    long long rows, long long cols, long long ld, long long r0, long long c0, unsigned lane)
{
    const unsigned q = lane % (unsigned)CPR;
    const unsigned rf = lane / (unsigned)CPR;
    const long long row0 = r0 + (long long)(rf * (unsigned)RP);
    const mval* p = m + row0 * ld + c0 + (long long)(q * VE);
    const long long step = (long long)(RSTEP * RP) * ld;
    if (r0 + (long long)(31 * RP) < rows && c0 + TW <= cols && (!LEAD_GUARD || r0 * ld + c0 >= 0)) {
        // Interior tile: all 32 rows exist, every chunk is whole, and none starts before m.
#pragma unroll
        for (int i = 0; i < CPR; ++i) {
            copy16_full(stage + chunk_at(rf + (unsigned)(i * RSTEP), q), p);
            p += step;
        }
        return;
    }
    const unsigned colbytes = chunk_bytes(cols, c0 + (long long)(q * VE));
    // The lane's copy i is of row row0 + RP * i * RSTEP: it exists when i * RSTEP < nv.
    const long long vr = rows - row0;
    const int nv = vr <= 0 ? 0 : (vr >= 32 * RP ? 32 : (int)((vr + RP - 1) / RP));
    // With LEAD_GUARD, chunks wholly before m (a row's lead columns reach back past m[0] in the
    // first rows, in more rows than row 0 when ld is below RA) would lie outside its allocation
    // where m starts it off an RA-element block: they are zero-filled instead of read. (A chunk
    // that holds m[0] lies in its own 16-byte block and is read.)
    const long long lead = c0 + (long long)((q + 1u) * VE);
#pragma unroll
    for (int i = 0; i < CPR; ++i) {
        // A chunk with no bytes inside the matrix reads nothing; it gets m as a safe address.
        const bool before_m =
            LEAD_GUARD && (row0 + (long long)(i * RSTEP * RP)) * ld + lead <= 0;
        const unsigned bytes = i * RSTEP < nv && !before_m ? colbytes : 0u;
        copy16(stage + chunk_at(rf + (unsigned)(i * RSTEP), q), bytes != 0u ? p : m, bytes);
        p += step;
    }
}

// Queues column tile ct of row group g: its rows and its labels.
__device__ __forceinline__ void queue_tile(unsigned stage, const mval* __restrict__ m,
    const unsigned int* __restrict__ labels, long long rows, long long cols, long long ld,
    long long g, long long ct, unsigned lane)
{
    const long long r0 = group_row(g);
    const unsigned m_elem = (unsigned)((unsigned long long)m / sizeof(mval));
    const long long c0 = ct * TW - (long long)row_shift(r0, ld, m_elem);
    load_tile(stage, m, rows, cols, ld, r0, c0, lane);
    load_labels(stage, labels, cols, c0, lane);
}

// Lane r's row starts at r * TW in every stage (the copy has taken care of the shift).
__device__ __forceinline__ unsigned row_offset(unsigned lane, long long, long long, unsigned)
{
    return lane * (unsigned)TW;
}

__device__ __forceinline__ vec load_vec(const mval* p)
{
    return *reinterpret_cast<const vec*>(p);
}"#;

/// Write-out of strided row groups (rows `r0 + RP * r`).
const STRIDED_FLUSH: &str = r#"// Writes (whole) or adds (split row group) the lane-transposed bins of the row group whose tile
// row r is row r0 + RP * r (rows past the matrix are skipped; a row group may have none).
__device__ __forceinline__ void flush(const real* bins, real* __restrict__ s, long long rows,
    long long k, long long c_lo, unsigned kb, long long r0, bool whole, unsigned lane)
{
    const long long left = rows - r0;
    const int nr = left <= 0 ? 0 : (left >= 32 * RP ? 32 : (int)((left + RP - 1) / RP));
    for (int r = 0; r < nr; ++r) {
        real* out = s + (r0 + (long long)(r * RP)) * k + c_lo;
        for (unsigned c = lane; c < kb; c += 32u) {
            const real v = bins[c * 33u + (unsigned)r];
            if (whole) {
                out[c] = v;
            } else {
                atomicAdd(out + c, v);
            }
        }
    }
}"#;

/// The strided mode's parts of [`TEMPLATE`] that are not whole functions, as
/// `(placeholder, text)` pairs.
const STRIDED_PARTS: [(&str, &str); 5] = [
    ("{COL_TILES}", "(cols + (RA - 1) + (TW - 1)) / TW"),
    (
        "{ROW_GROUPS}",
        "rows / (32 * RP) * RP + (rows % (32 * RP) < RP ? rows % (32 * RP) : RP)",
    ),
    (
        "{QUEUE_TILE}",
        "queue_tile(st, m, labels, rows, cols, ld, lg, lct, lane);",
    ),
    ("{GROUP_ROW}", "group_row(g)"),
    (
        "{CONSUME}",
        "// Columns outside the matrix carry the label OUTSIDE: every tile is summed unmasked.
        label_offsets(lab, TW, uclo, ukb, lane);
        consume(row, sw, lab, bins_lane, cur, base, acc);",
    ),
];

/// The elements of one 16-byte vector of `M` as `(value, bin offset)` C expressions: the
/// vector `v` and its columns' bin offsets `l`, the staged labels after `label_offsets`.
/// 16-bit elements are widened; two of them share a 32-bit field, the lower address in the
/// low half.
fn elements(variant: &ClusterSumsVariant) -> Vec<(String, String)> {
    let fields = ["x", "y", "z", "w"];
    match (variant.held, variant.dtype) {
        (Some(half), _) => {
            let widen = crate::emit::from_half_fn(half);
            (0..8)
                .map(|e| {
                    let word = fields[e / 2];
                    let bits = if e % 2 == 0 {
                        format!("(unsigned short)(v.{word} & 0xffffu)")
                    } else {
                        format!("(unsigned short)(v.{word} >> 16)")
                    };
                    let half_vec = if e < 4 { "a" } else { "b" };
                    (
                        format!("{widen}({bits})"),
                        format!("l.{half_vec}.{}", fields[e % 4]),
                    )
                })
                .collect()
        }
        (None, ScalarType::F32) => fields
            .iter()
            .map(|f| (format!("v.{f}"), format!("l.{f}")))
            .collect(),
        (None, ScalarType::F64) => fields[..2]
            .iter()
            .map(|f| (format!("v.{f}"), format!("l.{f}")))
            .collect(),
    }
}

/// The per-element statements of [`TEMPLATE`]'s `consume` for one 16-byte vector.
fn pushes(variant: &ClusterSumsVariant) -> String {
    let mut out = String::new();
    for (value, offset) in elements(variant) {
        out.push_str(&format!(
            "        push({value}, reinterpret_cast<real*>(bins_lane + {offset}), cur, base, acc);\n"
        ));
    }
    out
}

/// `template` with the parts both kernels share filled in: the worker's range, the queueing of
/// tiles, the copy helpers and the row mode's `functions` ([`ALIGNED`] or [`STRIDED`]).
fn with_shared_parts(template: &str, functions: &str, worker_range: &str) -> String {
    template
        .replace("{WORKER_RANGE}", worker_range)
        .replace("{QUEUE_FIRST_TILES}", QUEUE_FIRST_TILES)
        .replace("{QUEUE_NEXT_TILE}", QUEUE_NEXT_TILE)
        .replace("{COPY_HELPERS}", COPY_HELPERS)
        .replace("{ROW_MODE}", functions)
}

/// The cluster-sums kernel of `variant` (see the module documentation for the parameters and
/// the launch).
pub fn cluster_sums(variant: &ClusterSumsVariant) -> crate::builtin_kernel::BuiltinKernel {
    if variant.tensor_core_tiles > 0 {
        return tensor_cores::source(variant);
    }
    let ve = variant.vector_elems();
    let (mt, vt, lt) = match (variant.held, variant.dtype) {
        (Some(_), _) => (
            "unsigned short",
            "uint4",
            "struct {\n    uint4 a;\n    uint4 b;\n}",
        ),
        (None, ScalarType::F32) => ("float", "float4", "uint4"),
        (None, ScalarType::F64) => ("double", "double2", "uint2"),
    };
    let (mode, functions, flush, parts) = if variant.aligned {
        ("aligned", ALIGNED, ALIGNED_FLUSH, ALIGNED_PARTS)
    } else {
        ("strided", STRIDED, STRIDED_FLUSH, STRIDED_PARTS)
    };
    let name = variant.name();
    let mut source =
        with_shared_parts(TEMPLATE, functions, &worker_range(1)).replace("{FLUSH}", flush);
    for (placeholder, text) in parts {
        source = source.replace(placeholder, text);
    }
    let source = source
        .replace("{PUSHES}", &pushes(variant))
        .replace("{MODE}", mode)
        .replace("{NAME}", &name)
        .replace("{T}", variant.dtype.c_name())
        .replace("{MT}", mt)
        .replace("{TW}", &variant.tile_cols.to_string())
        .replace("{STAGES}", &variant.stages.to_string())
        .replace("{VE}", &ve.to_string())
        .replace("{VT}", vt)
        .replace("{LT}", lt);
    let source = with_row_mode_constants(source, variant);
    let source = match variant.held {
        Some(_) => source.replacen(
            "namespace ",
            &format!("{}namespace ", crate::emit::HALF_CONVERSIONS),
            1,
        ),
        None => source,
    };
    crate::builtin_kernel::BuiltinKernel { name, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No placeholder of any name is left in `k`'s source: `{` followed by capitals and `}`.
    pub(super) fn assert_no_placeholder_left(k: &crate::builtin_kernel::BuiltinKernel) {
        for (i, _) in k.source.match_indices('{') {
            let rest = &k.source[i + 1..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            assert!(
                word.is_empty() || !rest[word.len()..].starts_with('}'),
                "{{{word}}} left in {}",
                k.name
            );
        }
    }

    fn all_variants() -> Vec<ClusterSumsVariant> {
        let mut v = Vec::new();
        let types = [
            (ScalarType::F32, None),
            (ScalarType::F64, None),
            (ScalarType::F32, Some(Half::Bf16)),
            (ScalarType::F32, Some(Half::F16)),
        ];
        for (dtype, held) in types {
            for aligned in [true, false] {
                for row_bytes in TILE_ROW_BYTES {
                    for stages in 2..=4 {
                        let cols = row_bytes / matrix_elem_bytes(dtype, held) as u32;
                        let base =
                            ClusterSumsVariant::new(dtype, held, cols, stages, aligned).unwrap();
                        // Leading dimensions whose shifts repeat every 1, 2, 4, ... RA rows.
                        let mut periods = std::collections::BTreeSet::new();
                        for ld in [64u64, 32, 16, 8, 4, 2, 1] {
                            let w = base.with_leading_dimension(ld);
                            if periods.insert(w.row_period) {
                                v.push(w);
                            }
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn every_placeholder_is_filled_and_names_are_distinct() {
        let mut names = std::collections::BTreeSet::new();
        for v in all_variants() {
            let k = cluster_sums(&v);
            for p in [
                "{NAME}",
                "{T}",
                "{TW}",
                "{STAGES}",
                "{VE}",
                "{VT}",
                "{LT}",
                "{PUSHES}",
                "{MODE}",
                "{ROW_MODE}",
                "{FLUSH}",
                "{COL_TILES}",
                "{ROW_GROUPS}",
                "{QUEUE_TILE}",
                "{GROUP_ROW}",
                "{CONSUME}",
            ] {
                assert!(!k.source.contains(p), "{p} left in {}", k.name);
            }
            assert_no_placeholder_left(&k);
            assert!(k
                .source
                .contains(&format!("void __launch_bounds__(32) {}(", k.name)));
            assert!(names.insert(k.name.clone()), "duplicate {}", k.name);
        }
    }

    #[test]
    fn sources_pick_the_row_mode_and_vector_types() {
        let v = ClusterSumsVariant::new(ScalarType::F32, None, 64, 3, true).unwrap();
        let k = cluster_sums(&v);
        assert_eq!(k.name, "pk_cluster_sums_f32_t64_s3_a");
        assert!(k
            .source
            .contains("cp.async.cg.shared.global [%0], [%1], 16, %2;"));
        assert!(k.source.contains("typedef float4 vec;"));
        assert!(k
            .source
            .contains("return *reinterpret_cast<const vec*>(p);"));
        assert!(k.source.contains("(aligned rows)"));
        assert_eq!(k.source.matches("push(v.").count(), 4);
        // The aligned kernel: 32 consecutive rows per row group, column bounds in consume.
        assert!(k
            .source
            .contains("(unsigned long long)((rows + 31) / 32) * ucts"));
        assert!(k
            .source
            .contains("const long long cts = (cols + TW - 1) / TW;"));
        // Column bounds in the labels' offsets: past the matrix, the dump row.
        assert!(k
            .source
            .contains("label_offsets(lab, left >= TW ? TW : (int)left, uclo, ukb, lane);"));
        assert!(k.source.contains(
            "flush(bins, s, rows, k, c_lo, ukb, g * 32, whole_start && last_tile, lane);"
        ));
        for strided_only in [
            "queue_tile",
            "group_row",
            "row_shift",
            "OUTSIDE",
            "st.shared",
        ] {
            assert!(!k.source.contains(strided_only), "{strided_only}");
        }
        let e = ClusterSumsVariant::new(ScalarType::F64, None, 32, 2, false).unwrap();
        let k = cluster_sums(&e);
        assert_eq!(k.name, "pk_cluster_sums_f64_t32_s2_r16");
        assert!(k.source.contains("(strided rows)"));
        assert!(k.source.contains("typedef double2 vec;"));
        // 16-byte shared loads in both modes.
        assert!(k
            .source
            .contains("return *reinterpret_cast<const vec*>(p);"));
        assert_eq!(k.source.matches("push(v.").count(), 2);
        // Tiles start on 128-byte boundaries: 16 doubles.
        assert!(k.source.contains("constexpr int RA = 16;"));
        assert_eq!(e.row_alignment(), 16);
        // Row groups of a super group of 32 * RP rows (RP = RA for any leading dimension), the
        // last super group's only where they hold a row, RA - 1 more columns per row group.
        assert!(k.source.contains("constexpr int RP = 16;"));
        assert!(k.source.contains(
            "(unsigned long long)(rows / (32 * RP) * RP + (rows % (32 * RP) < RP ? rows % (32 * RP) : RP)) * ucts"
        ));
        assert!(k
            .source
            .contains("const long long cts = (cols + (RA - 1) + (TW - 1)) / TW;"));
        assert_eq!(
            k.source
                .matches("queue_tile(st, m, labels, rows, cols, ld, lg, lct, lane);")
                .count(),
            2
        );
        assert_eq!(
            k.source
                .matches("row_offset(lane, group_row(g), ld, moff)")
                .count(),
            2
        );
        assert!(k.source.contains(
            "flush(bins, s, rows, k, c_lo, ukb, group_row(g), whole_start && last_tile, lane);"
        ));
        // The shift is subtracted as a signed number: tile 0 starts at a negative column.
        assert!(k
            .source
            .contains("const long long c0 = ct * TW - (long long)row_shift(r0, ld, m_elem);"));
        // Every tile is summed unmasked; columns outside the matrix get the label OUTSIDE.
        assert!(k
            .source
            .contains("label_offsets(lab, TW, uclo, ukb, lane);"));
        assert!(k.source.contains("if (col >= 0 && col < cols) {"));
        assert!(k.source.contains("\"r\"(OUTSIDE)"));
        // The shifted mode's row permutation and scalar shared loads are gone; the staged
        // chunks are swizzled instead.
        assert!(!k.source.contains("slot("));
        assert!(k
            .source
            .contains("copy16_full(stage + chunk_at(rf + (unsigned)(i * RSTEP), q), p);"));
        // Chunks wholly before m, in whatever row, are zero-filled where an RA-element block
        // spans more than 256 bytes (LEAD_GUARD); these tiles start on 128-byte lines.
        assert!(k
            .source
            .contains("LEAD_GUARD && (row0 + (long long)(i * RSTEP * RP)) * ld + lead <= 0;"));
        assert!(k.source.contains("constexpr bool LEAD_GUARD = false;"));
        // On 512-byte blocks: 32 doubles (256 bytes) need no guard, 128 floats do.
        let on_blocks = cluster_sums(&e.with_blocks(BLOCK_BYTES));
        assert!(on_blocks
            .source
            .contains("constexpr bool LEAD_GUARD = false;"));
        let wide = ClusterSumsVariant::new(ScalarType::F32, None, 128, 2, false).unwrap();
        let on_blocks = cluster_sums(&wide.with_blocks(BLOCK_BYTES));
        assert!(on_blocks
            .source
            .contains("constexpr bool LEAD_GUARD = true;"));
        assert!(!k.source.contains("v.x = p[0];"));
        let f = ClusterSumsVariant::new(ScalarType::F32, None, 64, 2, false).unwrap();
        let k = cluster_sums(&f);
        assert_eq!(k.name, "pk_cluster_sums_f32_t64_s2_r32");
        assert!(k.source.contains("constexpr int VE = 4;"));
        assert!(k.source.contains("constexpr int RA = 32;"));
        assert_eq!(k.source.matches("push(v.").count(), 4);
        // 64-byte tile rows: tiles start on 64-byte boundaries.
        let t = ClusterSumsVariant::new(ScalarType::F32, None, 16, 2, false).unwrap();
        assert_eq!(t.row_alignment(), 16);
        assert!(cluster_sums(&t).source.contains("constexpr int RA = 16;"));
        let t = ClusterSumsVariant::new(ScalarType::F64, None, 8, 2, false).unwrap();
        assert_eq!(t.row_alignment(), 8);
    }

    #[test]
    fn sixteen_bit_matrices_are_staged_eight_to_a_vector_and_widened() {
        for (half, widen) in [(Half::Bf16, "pk_from_bf16"), (Half::F16, "pk_from_f16")] {
            let v = ClusterSumsVariant::preferred(ScalarType::F32, Some(half), true);
            assert_eq!(v.tile_cols, 256, "512-byte tile rows of 2-byte elements");
            let k = cluster_sums(&v);
            assert_eq!(
                k.name,
                format!("pk_cluster_sums_{}_f32_t256_s2_a", half.name())
            );
            assert!(k.source.contains("typedef unsigned short mval;"));
            assert!(k.source.contains("typedef float real;"));
            assert!(k.source.contains("constexpr int VE = 8;"));
            assert!(k.source.contains("const unsigned short* __restrict__ m,"));
            // Eight elements per 16-byte vector: low halves first, labels from two vectors.
            assert_eq!(k.source.matches(&format!("push({widen}(")).count(), 8);
            assert!(k
                .source
                .contains(&format!("push({widen}((unsigned short)(v.x & 0xffffu))")));
            assert!(k.source.contains(&format!(
                "push({widen}((unsigned short)(v.w >> 16)), reinterpret_cast<real*>(bins_lane + l.b.w)"
            )));
            assert!(k.source.contains("#define PK_HALF_CONVERSIONS"));
            let s = ClusterSumsVariant::preferred(ScalarType::F32, Some(half), false);
            assert_eq!(s.row_alignment(), 64, "tiles start on 128-byte boundaries");
            // A stage: 32 rows of 256 two-byte elements and the tile's 256 labels.
            assert_eq!(v.stage_bytes(), 32 * 256 * 2 + 256 * 4);
        }
        assert!(ClusterSumsVariant::new(ScalarType::F32, Some(Half::Bf16), 100, 2, true).is_err());
    }

    #[test]
    fn strided_row_groups_and_column_tiles_cover_the_matrix_once() {
        // Model of the strided mode's index arithmetic: every row < rows lies in exactly one
        // row group, all rows of a row group share their shift, tile starts lie on RA-element
        // boundaries, and a row group's tiles cover its columns 0 .. cols, starting fewer than
        // RA columns before column 0.
        let strided = all_variants().into_iter().filter(|v| !v.aligned);
        for base in strided.flat_map(|v| [v, v.with_blocks(BLOCK_BYTES)]) {
            let ra = u64::from(base.row_alignment());
            let tw = u64::from(base.tile_cols);
            assert_eq!(tw % ra, 0);
            assert_eq!(
                ra * base.m_bytes(),
                (tw * base.m_bytes()).min(u64::from(base.block_bytes))
            );
            for ld in [1u64, 3, 6, 33, 78823, 1002, 50_000, 70_000, 1024, 4, 12] {
                let v = base.with_leading_dimension(ld);
                let rp = u64::from(v.row_period);
                assert!(rp.is_power_of_two() && rp <= ra, "{v:?} ld {ld}");
                let base_row = |g: u64| (g / rp) * ROWS_PER_GROUP * rp + g % rp;
                for rows in [1u64, 5, 127, 128, 129, 1023, 1024, 1025, 3000, 5000] {
                    let groups = v.row_groups(rows);
                    let mut seen = vec![0u32; rows as usize];
                    for g in 0..groups {
                        for r in 0..ROWS_PER_GROUP {
                            let row = base_row(g) + rp * r;
                            if row < rows {
                                seen[row as usize] += 1;
                            }
                        }
                    }
                    assert!(seen.iter().all(|&n| n == 1), "{v:?} rows {rows}");
                    // Every row group holds a row (the last one too), and the next would not.
                    assert!(base_row(groups - 1) < rows, "{v:?} rows {rows}");
                    assert!(base_row(groups) >= rows, "{v:?} rows {rows}");
                }
                for a in [0u64, 1, 2, 3, 5, 17, 31, 1_000_003] {
                    for cols in [1u64, 2, 3, tw - 1, tw, tw + 1, 2 * tw - 3, 1000] {
                        let cts = v.column_tiles(cols);
                        assert_eq!(cts, (cols + ra - 1).div_ceil(tw));
                        for g in 0..2 * ra {
                            let b = base_row(g);
                            let sh = (a + b * ld) % ra;
                            // Every row of the row group has this shift.
                            for r in 0..ROWS_PER_GROUP {
                                assert_eq!((a + (b + rp * r) * ld) % ra, sh);
                            }
                            // Tile ct starts at column ct TW - sh, element a + row ld + ct TW - sh
                            // (for every row): on an RA-element boundary.
                            let c0 = -(sh as i64);
                            assert_eq!((a as i64 + (b * ld) as i64 + c0).rem_euclid(ra as i64), 0);
                            assert!(c0 > -(ra as i64));
                            // Of the first tile's chunks (VE elements each), every one that
                            // is read of every row of the row group starts at or after the
                            // RA-element block holding m[0] (element a), and with LEAD_GUARD
                            // (chunks wholly before m not read: the kernel's before_m) at or
                            // after the 16-byte block holding it. An allocation starts on a
                            // 256-byte boundary, so no read leaves M's allocation. (Only the
                            // lead's chunks of the first rows can reach back.)
                            let ve = 16 / base.m_bytes() as i64;
                            let guard = v.guards_lead();
                            assert_eq!(guard, ra * base.m_bytes() > ALLOCATION_ALIGNMENT_BYTES);
                            let lowest = if guard { ve } else { ra as i64 };
                            for r in 0..3 {
                                let row = (b + rp * r) as i64;
                                for q in 0..(ra as i64 / ve) {
                                    let start = row * ld as i64 + c0 + q * ve;
                                    if !guard || start + ve > 0 {
                                        let at = a as i64 + start;
                                        assert!(at >= (a as i64) - (a as i64) % lowest, "{v:?}");
                                    }
                                }
                            }
                            let end = cts as i64 * tw as i64 - sh as i64;
                            assert!(end >= cols as i64, "{v:?} cols {cols} sh {sh}");
                            // The last tile starts before cols + RA - 1 (no tile is wasted
                            // beyond the one the shift may need).
                            assert!(end - (tw as i64) < (cols + ra - 1) as i64);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn large_matrices_off_512_byte_blocks_take_blocks() {
        let f32_layout =
            |m, ld, rows| ClusterSumsVariant::layout(ScalarType::F32, None, m, ld, rows, None);
        // Rows on 512-byte blocks: aligned, whatever the size.
        assert_eq!(f32_layout(0, 78_848, 78_823), (true, LINE_BYTES));
        assert_eq!(f32_layout(0, 128, 5), (true, LINE_BYTES));
        // acoustic: an odd ld needs rows 128 apart on blocks, so 16 super groups of 4096 rows.
        assert_eq!(f32_layout(0, 78_823, 78_823), (false, BLOCK_BYTES));
        assert_eq!(f32_layout(0, 78_823, 65_535), (false, LINE_BYTES));
        assert_eq!(f32_layout(0, 78_823, 65_536), (false, BLOCK_BYTES));
        // mnist, cifar10, ledgar: rows on 128-byte lines (60000) or 64-byte steps: periods 4
        // and 8 on blocks.
        assert_eq!(f32_layout(0, 60_000, 60_000), (false, BLOCK_BYTES));
        assert_eq!(f32_layout(0, 50_000, 50_000), (false, BLOCK_BYTES));
        assert_eq!(f32_layout(0, 70_000, 70_000), (false, BLOCK_BYTES));
        // Small matrices keep the old rule: aligned on 128-byte lines, else strided on lines
        // (letter: 10500 rows, period 32 on blocks, fewer than 16 super groups of 1024).
        assert_eq!(f32_layout(0, 60_000, 1_000), (true, LINE_BYTES));
        assert_eq!(f32_layout(0, 10_500, 10_500), (false, LINE_BYTES));
        assert_eq!(f32_layout(4, 128, 100), (false, LINE_BYTES));
        // 16-bit matrices: tensor-core tiles of 128 columns, 128-element blocks. letter (period
        // 32, fewer than 16 super groups): lines; acoustic (period 128, 19 super groups): blocks.
        let bf16_layout = |ld, rows| {
            ClusterSumsVariant::layout(ScalarType::F32, Some(Half::Bf16), 0, ld, rows, None)
        };
        assert_eq!(bf16_layout(10_500, 10_500), (false, LINE_BYTES));
        assert_eq!(bf16_layout(78_823, 78_823), (false, BLOCK_BYTES));
        assert_eq!(bf16_layout(78_848, 78_823), (true, LINE_BYTES));
        // Forced sizes: lines give the 128-byte rule alone (mnist's rows on lines: aligned);
        // blocks give strided blocks unless the rows are on blocks.
        let forced = |m, ld, rows, b| {
            ClusterSumsVariant::layout(ScalarType::F32, None, m, ld, rows, Some(b))
        };
        assert_eq!(forced(0, 60_000, 60_000, LINE_BYTES), (true, LINE_BYTES));
        assert_eq!(forced(0, 78_823, 78_823, LINE_BYTES), (false, LINE_BYTES));
        assert_eq!(forced(0, 10_500, 10_500, BLOCK_BYTES), (false, BLOCK_BYTES));
        assert_eq!(forced(0, 78_848, 5, BLOCK_BYTES), (true, LINE_BYTES));
        // Blocks change a strided variant only, and reset its period to a whole block.
        let s = ClusterSumsVariant::preferred(ScalarType::F32, None, false);
        assert_eq!(s.row_alignment(), 32);
        let b = s.with_blocks(BLOCK_BYTES);
        assert_eq!((b.row_alignment(), b.row_period), (128, 128));
        assert_eq!(b.with_leading_dimension(60_000).row_period, 4);
        let a = ClusterSumsVariant::preferred(ScalarType::F32, None, true);
        assert_eq!(a.with_blocks(BLOCK_BYTES), a);
        // Narrow tiles: RA is the whole tile row either way (64 bytes: 16 floats).
        let t = ClusterSumsVariant::new(ScalarType::F32, None, 16, 2, false).unwrap();
        assert_eq!(t.with_blocks(BLOCK_BYTES).row_alignment(), 16);
    }

    #[test]
    fn strided_rows_lie_one_shift_period_apart() {
        let f = ClusterSumsVariant::preferred(ScalarType::F32, None, false);
        assert_eq!(f.row_alignment(), 32);
        // Every row has its own shift (odd ld), every other row (ld = 16 mod 32), all the same
        // (ld = 0 mod 32: only the matrix address is off a line), and in between.
        for (ld, period) in [(78_823, 32), (50_000, 2), (70_000, 2), (1024, 1), (12, 8)] {
            let v = f.with_leading_dimension(ld);
            assert_eq!(v.row_period, period, "ld {ld}");
            assert_eq!(v.row_groups(32 * period as u64), u64::from(period));
            assert!(cluster_sums(&v)
                .source
                .contains(&format!("constexpr int RP = {period};")));
        }
        assert_eq!(
            f.with_leading_dimension(50_000).name(),
            "pk_cluster_sums_f32_t128_s2_r2"
        );
        // f64 tiles start on 16-element boundaries; aligned variants do not change.
        let d = ClusterSumsVariant::preferred(ScalarType::F64, None, false);
        assert_eq!(d.with_leading_dimension(50_008).row_period, 2);
        assert_eq!(d.with_leading_dimension(50_000).row_period, 1);
        assert_eq!(d.with_leading_dimension(50_001).row_period, 16);
        let a = ClusterSumsVariant::preferred(ScalarType::F32, None, true);
        assert_eq!(a.with_leading_dimension(50_001), a);
    }

    #[test]
    fn bad_variants_are_refused() {
        assert!(matches!(
            ClusterSumsVariant::new(ScalarType::F32, None, 48, 3, true),
            Err(ClusterSumsError::TileWidth { bytes: 192, .. })
        ));
        assert!(ClusterSumsVariant::new(ScalarType::F64, None, 8, 3, true).is_ok());
        assert!(matches!(
            ClusterSumsVariant::new(ScalarType::F64, None, 128, 3, true),
            Err(ClusterSumsError::TileWidth { bytes: 1024, .. })
        ));
        assert_eq!(
            ClusterSumsVariant::new(ScalarType::F32, None, 64, 5, true),
            Err(ClusterSumsError::Stages { stages: 5 })
        );
        assert_eq!(
            ClusterSumsVariant::new(ScalarType::F32, None, 64, 1, true),
            Err(ClusterSumsError::Stages { stages: 1 })
        );
        let msg = ClusterSumsVariant::new(ScalarType::F32, None, 3, 2, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("12 bytes per row"), "{msg}");
    }

    #[test]
    fn shared_memory_sizes_by_hand() {
        // f32, 64 columns: rows of 64 floats (256 bytes, unpadded) x 32 + 256 bytes of labels.
        let v = ClusterSumsVariant::new(ScalarType::F32, None, 64, 3, true).unwrap();
        assert_eq!(v.stage_bytes(), 32 * 256 + 256);
        // k = 10: 11 bins of 33 floats.
        assert_eq!(v.shared_bytes(10), 3 * 8448 + 11 * 33 * 4);
        assert_eq!(v.clusters_within(v.shared_bytes(10)), 10);
        assert_eq!(v.clusters_within(v.shared_bytes(10) + 131), 10);
        assert_eq!(v.clusters_within(v.shared_bytes(10) + 132), 11);
        assert_eq!(v.clusters_within(100), 0);
        // f64, 32 columns: rows of 32 doubles (256 bytes) x 32 + 128 bytes of labels.
        let d = ClusterSumsVariant::new(ScalarType::F64, None, 32, 2, false).unwrap();
        assert_eq!(d.stage_bytes(), 32 * 256 + 128);
        assert_eq!(d.shared_bytes(1), 2 * 8320 + 2 * 33 * 8);
    }

    #[test]
    fn plans_fit_the_h100_and_split_large_k_into_passes() {
        let h = DeviceLimits::H100;
        for k in [1u64, 10, 50, 100] {
            let l = plan_cluster_sums(k, ScalarType::F32, None, true, None, &h).unwrap();
            assert_eq!(l.passes(), 1, "k = {k}");
            assert_eq!(
                l.variant,
                ClusterSumsVariant::preferred(ScalarType::F32, None, true)
            );
            assert!(h.blocks_per_sm(u64::from(l.shared_bytes)) >= MIN_WARPS_PER_SM);
            assert_eq!(l.pass_range(0), (0, k));
        }
        // k = 100 on the H100: 2 stages of 32 x 128 floats + 512 bytes of labels, 101 x 33
        // floats of bins: 4 warps per SM.
        let l = plan_cluster_sums(100, ScalarType::F32, None, true, None, &h).unwrap();
        assert_eq!(l.shared_bytes, 2 * (32 * 128 * 4 + 512) + 101 * 132);
        assert_eq!(h.blocks_per_sm(u64::from(l.shared_bytes)), 4);
        // k = 200: the 512-byte rows leave room for 169 clusters at 4 warps per SM, so the
        // planner falls back to 256-byte rows in three stages.
        let l = plan_cluster_sums(200, ScalarType::F32, None, true, None, &h).unwrap();
        assert_eq!(
            (l.variant.tile_cols, l.variant.stages, l.passes()),
            (64, 3, 1)
        );
        // k = 500: one pass with 2 warps per SM.
        let l = plan_cluster_sums(500, ScalarType::F32, None, false, None, &h).unwrap();
        assert_eq!(l.passes(), 1);
        assert!(h.blocks_per_sm(u64::from(l.shared_bytes)) >= MIN_WARPS_PER_SM_LARGE_K);
        // k = 1000 does not fit in one pass: several passes cover 0..1000.
        for dtype in [ScalarType::F32, ScalarType::F64] {
            let l = plan_cluster_sums(1000, dtype, None, false, None, &h).unwrap();
            assert!(l.passes() > 1);
            assert!(h.blocks_per_sm(u64::from(l.shared_bytes)) >= MIN_WARPS_PER_SM_LARGE_K);
            let mut next = 0;
            for p in 0..l.passes() {
                let (lo, kb) = l.pass_range(p);
                assert_eq!(lo, next);
                assert!(kb >= 1 && kb <= l.clusters_per_pass);
                next = lo + kb;
            }
            assert_eq!(next, 1000);
        }
    }

    #[test]
    fn forced_variants_are_kept_and_may_use_a_whole_block() {
        let h = DeviceLimits::H100;
        let v = ClusterSumsVariant::new(ScalarType::F32, None, 128, 3, true).unwrap();
        let l = plan_cluster_sums(100, ScalarType::F32, None, true, Some(v), &h).unwrap();
        assert_eq!(l.variant, v);
        assert_eq!(l.passes(), 1);
        // 3 stages of 32 x 128 floats + 512 bytes of labels, 101 x 33 floats of bins.
        assert_eq!(
            u64::from(l.shared_bytes),
            3 * (32 * 128 * 4 + 512) + 101 * 132
        );
        assert_eq!(h.blocks_per_sm(u64::from(l.shared_bytes)), 3);
    }

    #[test]
    fn tiny_devices_get_an_error_not_a_panic() {
        let tiny = DeviceLimits {
            multiprocessors: 1,
            shared_bytes_per_sm: 8 * 1024,
            shared_bytes_per_block_optin: 8 * 1024,
            reserved_shared_bytes_per_block: 0,
            max_blocks_per_sm: 32,
        };
        let e = plan_cluster_sums(10, ScalarType::F64, None, true, None, &tiny).unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
    }

    #[test]
    fn workers_are_four_per_sm_and_one_or_two_per_row_group() {
        let h = DeviceLimits::H100;
        let a = plan_cluster_sums(7, ScalarType::F32, None, true, None, &h).unwrap();
        assert_eq!(a.workers(1, 1, 660, 132), 1);
        assert_eq!(a.workers(33, 5, 660, 132), 2);
        assert_eq!(a.workers(60_000, 60_000, 660, 132), 528);
        // Where fewer than 4 warps per SM fit, all of them.
        assert_eq!(a.workers(60_000, 60_000, 264, 132), 264);
        assert_eq!(a.workers(60_000, 0, 660, 132), 0);
        assert_eq!(a.workers(0, 10, 660, 132), 0);
        assert_eq!(a.workers(100, 10, 0, 132), 1);
        assert!(!a.needs_zeroed_output(64, 2));
        assert!(a.needs_zeroed_output(65, 2));
        // Few row groups with two column tiles or more: two workers per row group, each
        // half of its tiles (S zeroed first); not when the device cannot hold them all.
        assert_eq!(a.variant.row_groups(6400), 200);
        assert_eq!(a.workers(6400, 6400, 660, 132), 400);
        assert!(a.needs_zeroed_output(6400, 400));
        assert_eq!(a.workers(6400, 6400, 399, 132), 200);
        assert_eq!(a.workers(6400, 128, 660, 132), 200);
        // Strided rows, f32 tiles of 128 columns: RA = 32 row groups per super group of 1024
        // rows; of a partial last super group only those that hold a row (row group s of it
        // starts at its row s).
        let f = plan_cluster_sums(7, ScalarType::F32, None, false, None, &h).unwrap();
        assert_eq!(f.variant.tile_cols, 128);
        assert_eq!(f.variant.row_groups(1), 1);
        assert_eq!(f.variant.row_groups(31), 31);
        assert_eq!(f.variant.row_groups(1024), 32);
        assert_eq!(f.variant.row_groups(1025), 33);
        assert_eq!(f.variant.row_groups(78_823), 77 * 32);
        assert_eq!(f.workers(1, 1, 660, 132), 1);
        assert_eq!(f.workers(1025, 5, 660, 132), 33);
        assert_eq!(f.workers(129, 5, 3, 132), 3);
        assert_eq!(f.workers(78_823, 78_823, 660, 132), 528);
        assert_eq!(f.workers(129, 0, 660, 132), 0);
        assert!(!f.needs_zeroed_output(1025, 33));
        assert!(f.needs_zeroed_output(1025, 32));
        assert!(f.needs_zeroed_output(100, 3));
        // f64 tiles of 64 columns: RA = 16, super groups of 512 rows.
        let d = plan_cluster_sums(7, ScalarType::F64, None, false, None, &h).unwrap();
        assert_eq!(d.variant.row_groups(1), 1);
        assert_eq!(d.variant.row_groups(513), 17);
        assert_eq!(d.workers(513, 3, 660, 132), 17);
        assert!(!d.needs_zeroed_output(513, 17));
        // On 512-byte blocks an odd leading dimension needs rows 128 apart (f32), super
        // groups of 4096 rows: acoustic's 78,823 rows in 19 whole ones and 128 row groups of
        // 7 or 8 rows.
        let b = f
            .variant
            .with_blocks(BLOCK_BYTES)
            .with_leading_dimension(78_823);
        assert_eq!((b.row_alignment(), b.row_period), (128, 128));
        assert_eq!(b.row_groups(78_823), 20 * 128);
        assert_eq!(b.name(), "pk_cluster_sums_f32_t128_s2_r128b512");
        // Column tiles: strided rows need RA - 1 columns more.
        assert_eq!(a.variant.column_tiles(128), 1);
        assert_eq!(f.variant.column_tiles(97), 1);
        assert_eq!(f.variant.column_tiles(98), 2);
        assert_eq!(f.variant.column_tiles(1), 1);
        assert_eq!(d.variant.column_tiles(49), 1);
        assert_eq!(d.variant.column_tiles(50), 2);
        let l = a;
        let ((gx, gy, gz), block, shared) = l.grid_block(660);
        assert_eq!(
            (gx, gy, gz, block, shared),
            (660, 1, 1, (32, 1, 1), l.shared_bytes)
        );
    }

    #[test]
    fn the_same_variant_gives_the_same_source() {
        let v = ClusterSumsVariant::preferred(ScalarType::F64, None, true);
        assert_eq!(cluster_sums(&v), cluster_sums(&v));
        assert_ne!(
            cluster_sums(&v).source,
            cluster_sums(&ClusterSumsVariant::preferred(ScalarType::F32, None, true)).source
        );
    }
}
