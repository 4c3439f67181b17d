//! Launch geometry of generated kernels.

/// Grid dimensions, block dimensions and dynamic shared-memory bytes of one launch, as CUDA's
/// launch API takes them.
pub type LaunchDims = ((u32, u32, u32), (u32, u32, u32), u32);

/// Largest grid dimension the launch helpers use. Kernels loop (grid-stride) over any work
/// beyond `grid * block`, so capping the grid only bounds the number of blocks, never the size
/// of the problem.
pub const MAX_GRID_BLOCKS: u64 = 65_535;

/// Side of the square tiles of [`LaunchShape::TilePairs`] kernels. 64: a block moves 16 KiB
/// (f32) per staged tile and writes 256-byte row segments (32 x 32 tiles measured much slower:
/// BENCHMARKS.md, "Measurements moved from the code").
pub const PAIR_TILE: u32 = 64;
/// Rows of warps per block of [`LaunchShape::TilePairs`] kernels (blocks are `32 x rows`
/// threads; each thread handles `(PAIR_TILE / 32) * (PAIR_TILE / PAIR_BLOCK_ROWS)` elements of
/// a tile).
pub const PAIR_BLOCK_ROWS: u32 = 8;

/// Side, in tiles, of the square groups that [`LaunchShape::TilePairs`] kernels walk one after
/// another: consecutive blocks take the pairs of one `PAIR_GROUP x PAIR_GROUP` group of tiles,
/// so the mirrored writes of the blocks in flight cover whole `PAIR_GROUP * PAIR_TILE`-column
/// spans of each row rather than one tile's 256 bytes.
pub const PAIR_GROUP: u32 = 8;

/// Rows of the iteration space per block of [`LaunchShape::RowBlocks`] kernels (contractions).
pub const CONTRACTION_BLOCK_ROWS: u32 = 64;
/// Columns per tile of the product in [`LaunchShape::RowBlocks`] kernels.
pub const CONTRACTION_BLOCK_COLS: u32 = 64;
/// Threads per block of [`LaunchShape::RowBlocks`] kernels (four warps).
pub const CONTRACTION_THREADS: u32 = 128;

/// Rows per block of [`LaunchShape::Pipelined`] kernels (4 warps of 64 rows).
pub const PIPELINE_BLOCK_ROWS: u32 = 256;
/// Threads per block of [`LaunchShape::Pipelined`] kernels (eight warps, 4 x 2).
pub const PIPELINE_THREADS: u32 = 256;
/// Warps along the columns of a [`LaunchShape::Pipelined`] tile (each 64 columns).
pub const PIPELINE_COLUMN_WARPS: u32 = 2;
/// Depth (elements) of one staged chunk of [`LaunchShape::Pipelined`] kernels.
pub const PIPELINE_DEPTH_CHUNK: u32 = 32;
/// Slots of the `cp.async` ring of [`LaunchShape::Pipelined`] kernels.
pub const PIPELINE_STAGES: u32 = 3;
/// Bytes of one staged chunk of the left operand (256 rows x 32 floats).
pub const PIPELINE_A_CHUNK_BYTES: u32 = PIPELINE_BLOCK_ROWS * PIPELINE_DEPTH_CHUNK * 4;
/// Bytes of one staged chunk of the right operand (128 columns x 32 floats).
pub const PIPELINE_B_CHUNK_BYTES: u32 = PIPELINE_COLUMN_TILE * PIPELINE_DEPTH_CHUNK * 4;
/// Columns per tile of [`LaunchShape::Pipelined`] kernels (two column warps of 64).
pub const PIPELINE_COLUMN_TILE: u32 = 128;
/// Least depth at which a pipelined kernel whose one output is a mirrorable 16-bit value
/// ([`kernel_ir::KernelSpec::stores_a_mirrorable_value`]) of a matrix with itself, square,
/// computes only the tiles on and above the diagonal and writes each one's mirror image (the
/// kernel's `MIRROR_MIN_DEPTH`, on its `wgmma` body): shallower products are bound by their
/// stores, which the mirror's transposed stage slows (BENCHMARKS.md, run 42).
pub const PIPELINE_MIRROR_MIN_DEPTH: u32 = 256;
/// Threads per block of warp-specialised [`LaunchShape::Pipelined`] kernels: two consumer
/// warpgroups and a producer warpgroup.
pub const PIPELINE_WS_THREADS: u32 = 384;
/// Slots of the right operand's ring in warp-specialised pipelined kernels.
pub const PIPELINE_WS_STAGES: u32 = 6;
/// Most depth chunks a warp-specialised pipelined kernel takes (its left operand stays
/// resident beside the ring).
pub const PIPELINE_WS_MAX_DEPTH_CHUNKS: u32 = 2;
/// Bytes of a warp-specialised pipelined kernel's other shared memory: the column sums'
/// scratch (8 warps x 8 rows x 136 floats), the warpgroups' four meeting places (2,080 bytes
/// each) and 13 mbarriers.
pub const PIPELINE_WS_OTHER_BYTES: u32 = 8 * 8 * 136 * 4 + 4 * 2080 + 8 * 13;

/// Threads per block of [`LaunchShape::Linear`] kernels.
pub const LINEAR_BLOCK_THREADS: u32 = 256;
/// Warps per block of [`LaunchShape::WarpPerRow`] kernels.
pub const ROW_WARPS_PER_BLOCK: u32 = 8;
/// Threads per block of [`LaunchShape::ColumnGroups`] kernels.
pub const COLUMN_BLOCK_THREADS: u32 = 1024;
/// Widest column group (one warp of columns) of [`LaunchShape::ColumnGroups`] kernels.
pub const MAX_COLUMN_GROUP_WIDTH: u32 = 32;
/// Column groups narrow (down to 4 columns, a 16- or 32-byte segment per row) until there are
/// at least this many of them, to keep the GPU busy on tall matrices with few columns.
pub const COLUMN_TARGET_BLOCKS: u64 = 256;

/// Columns per block of a [`LaunchShape::ColumnGroups`] launch over `cols` columns: the widest
/// of 32, 16, 8, 4 that still gives [`COLUMN_TARGET_BLOCKS`] groups; failing that 4, or fewer
/// (the next power of two `>= cols`) when there are fewer than 4 columns.
pub fn column_group_width(cols: u64) -> u32 {
    for width in [32u32, 16, 8, 4] {
        if cols.div_ceil(u64::from(width)) >= COLUMN_TARGET_BLOCKS {
            return width;
        }
    }
    match cols {
        0 | 1 => 1,
        2 => 2,
        _ => 4,
    }
}

/// How a generated kernel must be launched. The kernel is compiled for exactly this block
/// shape (`__launch_bounds__`, and for column groups a shared-memory array sized by it), so the
/// runtime must use [`LaunchShape::grid_block`] rather than a block shape of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaunchShape {
    /// One thread per element of the `rows x cols` space, 1-D blocks of `block_threads`,
    /// grid-stride over the linear index `i * cols + j` ([`kernel_ir::Form::Map`]).
    Linear {
        /// Threads per block.
        block_threads: u32,
    },
    /// One warp per row, 1-D blocks of `warps_per_block` warps, grid-stride over rows
    /// ([`kernel_ir::Form::Rows`]).
    WarpPerRow {
        /// Warps (rows in flight) per block.
        warps_per_block: u32,
    },
    /// Blocks of `(32, block_rows)` threads, grid-stride over the pairs of mirrored
    /// `tile x tile` tiles `(I, J), J <= I` of a square `rows x rows` space (`T (T + 1) / 2`
    /// pairs for `T` tiles per side): a map reading a [`kernel_ir::Access::LowerSymmetric`] input
    /// stages tile `(I, J)` of it in shared memory and writes output tiles `(I, J)` and
    /// `(J, I)` ([`kernel_ir::Form::Map`]).
    TilePairs {
        /// Side of a tile.
        tile: u32,
        /// Rows of threads per block.
        block_rows: u32,
        /// Side, in tiles, of the groups of tiles walked one after another: the grid strides
        /// over `G (G + 1) / 2 * group^2` slots for `G = ceil(T / group)` groups per side
        /// (slots above the diagonal or past the edge hold no pair and are skipped).
        group: u32,
    },
    /// Blocks of `block_threads` threads shaped `(W, block_threads / W)` by
    /// [`column_group_width`]: each block handles `W` consecutive columns, its rows of threads
    /// walking the rows `ty, ty + R, ...` of its slice of rows; grid-stride over column
    /// groups (`grid.x`); dynamic shared memory of `block_threads * elem_bytes`
    /// ([`kernel_ir::Form::Cols`]). Few column groups split the rows into `grid.y` slices
    /// (see [`column_row_slices`]) whose partials meet in device scratch
    /// ([`LaunchShape::column_scratch`]).
    ColumnGroups {
        /// Threads per block (`W * R`).
        block_threads: u32,
        /// Size of one element of the kernel's type, for the shared-memory size.
        elem_bytes: u32,
    },
    /// 1-D blocks of `threads` threads, each owning `block_rows` rows of the space at a time
    /// (grid-stride over blocks of rows) and walking all of its columns, tile by tile
    /// ([`kernel_ir::Form::Contraction`]): every row reduction completes inside one block.
    /// Dynamic shared memory holds the by-label sums of the block's rows:
    /// `block_rows * width * bin_bytes` bytes for an output width given at launch
    /// ([`LaunchShape::grid_block_wide`]).
    RowBlocks {
        /// Rows per block.
        block_rows: u32,
        /// Threads per block.
        threads: u32,
        /// Bytes of by-label bins per row and output column: the element size times the
        /// number of by-label reductions (0 without one).
        bin_bytes: u32,
    },
    /// Pipelined contractions: blocks of `threads` threads, each `block_rows` rows at a time
    /// across all columns, or, with `split_columns`, across a run of the columns (each row's
    /// columns split into as many runs as give every block about eight work units), on a
    /// persistent grid (at most one block per multiprocessor, grid-stride over the work
    /// units). Dynamic shared memory holds `stages` chunks of the right
    /// operand, the left operand's chunks (`max(ceil(depth / depth_chunk), stages)` of them
    /// when the whole depth of a block's rows fits, so they are read once per block of rows;
    /// `stages` otherwise) and `exchange_bytes` for merging the rows' partials. See
    /// [`LaunchShape::pipelined_grid_block`].
    Pipelined {
        /// Rows per block.
        block_rows: u32,
        /// Threads per block.
        threads: u32,
        /// Depth of one staged chunk (elements).
        depth_chunk: u32,
        /// Slots of the staging ring.
        stages: u32,
        /// Bytes of one staged chunk of the left operand.
        a_chunk_bytes: u32,
        /// Bytes of one staged chunk of the right operand.
        b_chunk_bytes: u32,
        /// Bytes of the row exchange.
        exchange_bytes: u32,
        /// Bytes of the mirror images' stage, which takes the row exchange's place where it is
        /// larger in launches at least [`PIPELINE_MIRROR_MIN_DEPTH`] deep (0: the kernel
        /// writes no mirror images).
        mirror_stage_bytes: u32,
        /// Whether a row's columns may be split over blocks (the only reductions are sums by
        /// label, which the launcher zeroes first: see [`crate::zeroed_outputs`]).
        split_columns: bool,
        /// The warp-specialised body ([`LaunchShape::warp_specialised`]): a producer
        /// warpgroup feeding the consumers through the tensor memory accelerator.
        warp_specialised: bool,
    },
}

/// Number of blocks of `per_block` work items needed for `work` items, at least 1 (a launch
/// with an empty grid is an error; the kernels do nothing when there is no work) and at most
/// [`MAX_GRID_BLOCKS`].
pub fn blocks_for(work: u64, per_block: u64) -> u32 {
    let per_block = per_block.max(1);
    let blocks = work.div_ceil(per_block).clamp(1, MAX_GRID_BLOCKS);
    // The clamp keeps the value within u32.
    u32::try_from(blocks).unwrap_or(u32::MAX)
}

/// Fewest rows each thread of a column kernel folds before its rows are split over more
/// blocks.
pub const COLUMN_MIN_ROWS_PER_THREAD: u64 = 8;

/// Slices of rows (`grid.y`) of a [`LaunchShape::ColumnGroups`] launch of `groups` column
/// groups whose blocks have `depth` rows of threads: enough to bring the grid to
/// [`COLUMN_TARGET_BLOCKS`] blocks, as long as each thread keeps at least
/// [`COLUMN_MIN_ROWS_PER_THREAD`] rows; 1 for many column groups or few rows.
pub fn column_row_slices(rows: u64, groups: u32, depth: u32) -> u32 {
    let groups = u64::from(groups.max(1));
    if groups >= COLUMN_TARGET_BLOCKS {
        return 1;
    }
    let wanted = COLUMN_TARGET_BLOCKS.div_ceil(groups);
    let useful = rows / (u64::from(depth.max(1)) * COLUMN_MIN_ROWS_PER_THREAD);
    u32::try_from(wanted.min(useful).clamp(1, MAX_GRID_BLOCKS)).unwrap_or(1)
}

/// The device scratch a [`LaunchShape::ColumnGroups`] launch with several slices of rows
/// needs: each block's partials (`slices x cols x reductions` values), then one `u32` ticket
/// per column group, which must be zero at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnScratch {
    /// Total bytes.
    pub bytes: u64,
    /// Byte offset of the tickets (a multiple of 16).
    pub tickets_offset: u64,
    /// Number of tickets (column groups).
    pub tickets: u64,
}

impl LaunchShape {
    /// Grid, block and dynamic shared bytes for an iteration space of `rows x cols`.
    /// Always at least one block, so zero-sized problems launch (and do nothing) too.
    pub fn grid_block(&self, rows: u64, cols: u64) -> LaunchDims {
        match *self {
            LaunchShape::Linear { block_threads } => {
                let elements = rows.saturating_mul(cols);
                let grid = blocks_for(elements, u64::from(block_threads));
                ((grid, 1, 1), (block_threads, 1, 1), 0)
            }
            LaunchShape::WarpPerRow { warps_per_block } => {
                let grid = blocks_for(rows, u64::from(warps_per_block));
                ((grid, 1, 1), (warps_per_block * 32, 1, 1), 0)
            }
            LaunchShape::TilePairs { .. } => {
                let side = rows.max(cols);
                self.band_grid_block(side, 0, side)
            }
            LaunchShape::ColumnGroups {
                block_threads,
                elem_bytes,
            } => {
                let width = column_group_width(cols);
                let grid = blocks_for(cols, u64::from(width));
                let depth = block_threads / width;
                let slices = column_row_slices(rows, grid, depth);
                let shared = block_threads.saturating_mul(elem_bytes);
                ((grid, slices, 1), (width, depth, 1), shared)
            }
            LaunchShape::RowBlocks { .. } => self.grid_block_wide(rows, cols, 0),
            LaunchShape::Pipelined {
                block_rows,
                threads,
                ..
            } => {
                // Without the device's figures: one block per block of rows, the streaming
                // shared-memory plan of any depth (the same from the mirror's least depth on;
                // always valid for the lock-step bodies, which grid-stride).
                let grid = blocks_for(rows, u64::from(block_rows));
                (
                    (grid, 1, 1),
                    (threads, 1, 1),
                    self.pipelined_shared_bytes(u64::from(PIPELINE_MIRROR_MIN_DEPTH), false),
                )
            }
        }
    }

    /// Dynamic shared bytes of a [`LaunchShape::Pipelined`] launch over `depth`: with the left
    /// operand resident (`max(ceil(depth / depth_chunk), stages)` chunks of it) or streamed
    /// (`stages` chunks), and the row exchange or, from [`PIPELINE_MIRROR_MIN_DEPTH`] deep,
    /// the mirror images' stage. Zero for other shapes.
    pub fn pipelined_shared_bytes(&self, depth: u64, resident: bool) -> u32 {
        let LaunchShape::Pipelined {
            depth_chunk,
            stages,
            a_chunk_bytes,
            b_chunk_bytes,
            exchange_bytes,
            mirror_stage_bytes,
            warp_specialised,
            ..
        } = *self
        else {
            return 0;
        };
        let exchange_bytes = if depth >= u64::from(PIPELINE_MIRROR_MIN_DEPTH) {
            exchange_bytes.max(mirror_stage_bytes)
        } else {
            exchange_bytes
        };
        if warp_specialised {
            // The left operand always resident, the ring, scratch and barriers.
            let bytes = depth
                .div_ceil(u64::from(depth_chunk.max(1)))
                .max(1)
                .saturating_mul(u64::from(a_chunk_bytes))
                .saturating_add(u64::from(PIPELINE_WS_STAGES) * u64::from(b_chunk_bytes))
                .saturating_add(u64::from(PIPELINE_WS_OTHER_BYTES));
            return u32::try_from(bytes).unwrap_or(u32::MAX);
        }
        let a_chunks = if resident {
            depth
                .div_ceil(u64::from(depth_chunk.max(1)))
                .max(u64::from(stages))
        } else {
            u64::from(stages)
        };
        let bytes = a_chunks
            .saturating_mul(u64::from(a_chunk_bytes))
            .saturating_add(u64::from(stages) * u64::from(b_chunk_bytes))
            .saturating_add(u64::from(exchange_bytes));
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// Grid, block and dynamic shared bytes of a [`LaunchShape::Pipelined`] launch on a device
    /// with `multiprocessors` and `shared_limit` bytes of shared memory a block may opt in
    /// to: at most one block per multiprocessor, the left operand resident when it fits.
    /// `Err(bytes)` when even the streaming plan needs more than the device has. Other shapes
    /// get [`LaunchShape::grid_block`].
    pub fn pipelined_grid_block(
        &self,
        (rows, cols, depth): (u64, u64, u64),
        multiprocessors: u32,
        shared_limit: u32,
    ) -> Result<LaunchDims, u32> {
        let LaunchShape::Pipelined {
            block_rows,
            threads,
            split_columns,
            warp_specialised,
            ..
        } = *self
        else {
            return Ok(self.grid_block(rows, cols));
        };
        let resident = self.pipelined_shared_bytes(depth, true);
        let streaming = self.pipelined_shared_bytes(depth, false);
        let shared = if warp_specialised {
            if resident > shared_limit {
                return Err(resident);
            }
            resident
        } else if resident <= shared_limit {
            resident
        } else if streaming <= shared_limit {
            streaming
        } else {
            return Err(streaming);
        };
        // The kernel splits columns only as far as every run keeps a column tile.
        let units = if split_columns {
            rows.div_ceil(u64::from(block_rows).max(1))
                .saturating_mul(cols.div_ceil(u64::from(PIPELINE_COLUMN_TILE)))
        } else {
            rows.div_ceil(u64::from(block_rows).max(1))
        };
        let grid = blocks_for(units, 1).min(multiprocessors.max(1));
        Ok(((grid, 1, 1), (threads, 1, 1), shared))
    }

    /// This shape without the mirror images' stage (for a device whose kernels do not run the
    /// `wgmma` body, the only one that writes mirror images); other shapes unchanged.
    pub fn without_mirror_stage(self) -> LaunchShape {
        let mut shape = self;
        if let LaunchShape::Pipelined {
            mirror_stage_bytes, ..
        } = &mut shape
        {
            *mirror_stage_bytes = 0;
        }
        shape
    }

    /// The warp-specialised variant of a [`LaunchShape::Pipelined`] shape
    /// ([`PIPELINE_WS_THREADS`] threads, see [`crate::ContractionVariant`]); other shapes
    /// unchanged.
    pub fn warp_specialised(self) -> LaunchShape {
        let mut shape = self;
        if let LaunchShape::Pipelined {
            threads,
            warp_specialised,
            ..
        } = &mut shape
        {
            *threads = PIPELINE_WS_THREADS;
            *warp_specialised = true;
        }
        shape
    }

    /// Like [`LaunchShape::grid_block`], for by-label outputs `width` columns wide: a
    /// [`LaunchShape::RowBlocks`] launch then needs `block_rows * width * bin_bytes` bytes of
    /// dynamic shared memory (saturating at `u32::MAX`, which no device grants). Other shapes
    /// ignore `width`.
    pub fn grid_block_wide(&self, rows: u64, cols: u64, width: u64) -> LaunchDims {
        match *self {
            LaunchShape::RowBlocks {
                block_rows,
                threads,
                bin_bytes,
            } => {
                let grid = blocks_for(rows, u64::from(block_rows));
                let shared = u64::from(block_rows)
                    .saturating_mul(width)
                    .saturating_mul(u64::from(bin_bytes));
                let shared = u32::try_from(shared).unwrap_or(u32::MAX);
                ((grid, 1, 1), (threads, 1, 1), shared)
            }
            _ => self.grid_block(rows, cols),
        }
    }

    /// The scratch of a [`LaunchShape::ColumnGroups`] launch over `rows x cols` with
    /// `reductions` reductions, or `None` when its rows are not split (one slice), for other
    /// shapes, or without reductions. The kernel finds the tickets at the same offset.
    pub fn column_scratch(&self, rows: u64, cols: u64, reductions: usize) -> Option<ColumnScratch> {
        let LaunchShape::ColumnGroups { elem_bytes, .. } = *self else {
            return None;
        };
        let ((_, slices, _), (width, _, _), _) = self.grid_block(rows, cols);
        if slices <= 1 || reductions == 0 {
            return None;
        }
        let partials = u64::from(slices)
            .saturating_mul(cols)
            .saturating_mul(reductions as u64)
            .saturating_mul(u64::from(elem_bytes));
        let tickets_offset = partials.div_ceil(16).saturating_mul(16);
        let tickets = cols.div_ceil(u64::from(width.max(1)));
        Some(ColumnScratch {
            bytes: tickets_offset.saturating_add(tickets.saturating_mul(4)),
            tickets_offset,
            tickets,
        })
    }

    /// Grid, block and dynamic shared bytes of a [`LaunchShape::TilePairs`] launch over the band
    /// of rows `[band_start, band_end)` of a `side x side` space: one block per slot of the
    /// groups of tiles the band meets (capped at [`MAX_GRID_BLOCKS`]). Other shapes have no
    /// bands: they get their whole-space geometry.
    pub fn band_grid_block(&self, side: u64, band_start: u64, band_end: u64) -> LaunchDims {
        let LaunchShape::TilePairs {
            tile,
            block_rows,
            group,
        } = *self
        else {
            return self.grid_block(side, side);
        };
        let (tile, group) = (u64::from(tile.max(1)), u64::from(group.max(1)));
        let tiles = side.div_ceil(tile);
        let first_group = (band_start / tile).min(tiles) / group;
        let end_group = (band_end.div_ceil(tile).min(tiles)).div_ceil(group);
        let slots_before =
            |g: u64| (g.saturating_mul(g.saturating_add(1)) / 2).saturating_mul(group * group);
        let slots = slots_before(end_group).saturating_sub(slots_before(first_group));
        ((blocks_for(slots, 1), 1, 1), (32, block_rows, 1), 0)
    }

    /// The minimum resident blocks per multiprocessor the kernel's `__launch_bounds__` asks
    /// for: `Some(1)` for pipelined contractions (which may then use up to 255 registers a
    /// thread), none otherwise.
    pub fn min_blocks_per_multiprocessor(&self) -> Option<u32> {
        match self {
            LaunchShape::Pipelined { .. } => Some(1),
            _ => None,
        }
    }

    /// Threads per block, the value of the kernel's `__launch_bounds__`.
    pub fn threads_per_block(&self) -> u32 {
        match *self {
            LaunchShape::Linear { block_threads } => block_threads,
            LaunchShape::WarpPerRow { warps_per_block } => warps_per_block * 32,
            LaunchShape::TilePairs { block_rows, .. } => 32 * block_rows,
            LaunchShape::ColumnGroups { block_threads, .. } => block_threads,
            LaunchShape::RowBlocks { threads, .. } => threads,
            LaunchShape::Pipelined { threads, .. } => threads,
        }
    }

    /// A one-line description for the kernel's header comment.
    pub(crate) fn describe(&self) -> String {
        match *self {
            LaunchShape::Linear { block_threads } => format!(
                "1-D blocks of {block_threads} threads, grid-stride over rows*cols elements"
            ),
            LaunchShape::WarpPerRow { warps_per_block } => format!(
                "1-D blocks of {} threads (one warp per row), grid-stride over rows",
                warps_per_block * 32
            ),
            LaunchShape::TilePairs {
                tile,
                block_rows,
                group,
            } => format!(
                "blocks of (32, {block_rows}) threads, grid-stride over the pairs of \
                 mirrored {tile} x {tile} tiles (I, J), J <= I, in groups of {group} x {group} \
                 tiles"
            ),
            LaunchShape::ColumnGroups {
                block_threads,
                elem_bytes,
            } => format!(
                "blocks of {block_threads} threads shaped (W, {block_threads} / W), W columns \
                 per block (32 down to 1 for few columns), grid-stride over column groups, \
                 the rows split into grid.y slices when there are few groups (partials \
                 combined in scratch by the last block of each group), {} bytes of dynamic \
                 shared memory",
                block_threads * elem_bytes
            ),
            LaunchShape::Pipelined {
                block_rows,
                threads,
                depth_chunk,
                stages,
                a_chunk_bytes,
                b_chunk_bytes,
                exchange_bytes,
                mirror_stage_bytes,
                split_columns,
                warp_specialised,
            } => {
                let across = if split_columns {
                    "a run of the columns (the runs of a row over several blocks)"
                } else {
                    "all columns"
                };
                if warp_specialised {
                    format!(
                        "1-D blocks of {threads} threads (two consumer warpgroups, one producer \
                         thread copying through the tensor memory accelerator), each block \
                         {block_rows} rows at a time across {across}, at most one block per \
                         multiprocessor (grid-stride over work units); dynamic shared memory: \
                         {PIPELINE_WS_STAGES} x {b_chunk_bytes} bytes of right operand, \
                         {a_chunk_bytes} bytes per {depth_chunk}-deep chunk of left operand (all \
                         of the depth), {PIPELINE_WS_OTHER_BYTES} bytes of column-sum scratch and \
                         barriers"
                    )
                } else {
                    format!(
                        "1-D blocks of {threads} threads, each block {block_rows} rows at a time \
                         across {across}, at most one block per multiprocessor (grid-stride over \
                         work units); dynamic shared memory: {stages} x {b_chunk_bytes} bytes of \
                         right operand, {a_chunk_bytes} bytes per {depth_chunk}-deep chunk of left \
                         operand (all chunks of the depth when they fit, else {stages}), \
                         {exchange_bytes} bytes of row exchange{}",
                        if mirror_stage_bytes > 0 {
                            format!(
                                " ({mirror_stage_bytes} bytes, the mirror images' stage, from \
                                 {PIPELINE_MIRROR_MIN_DEPTH} deep)"
                            )
                        } else {
                            String::new()
                        }
                    )
                }
            }
            LaunchShape::RowBlocks {
                block_rows,
                threads,
                bin_bytes,
            } => {
                let bins = if bin_bytes == 0 {
                    String::new()
                } else {
                    format!(
                        ", {block_rows} * width * {bin_bytes} bytes of dynamic shared memory \
                         for the by-label sums"
                    )
                };
                format!(
                    "1-D blocks of {threads} threads, each block {block_rows} rows at a time \
                     (grid-stride over blocks of rows) across all columns{bins}"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_grid_covers_small_problems_exactly() {
        let shape = LaunchShape::Linear { block_threads: 256 };
        assert_eq!(shape.grid_block(1, 1), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(shape.grid_block(3, 100), ((2, 1, 1), (256, 1, 1), 0));
        assert_eq!(shape.grid_block(256, 1), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(shape.grid_block(257, 1), ((2, 1, 1), (256, 1, 1), 0));
    }

    #[test]
    fn grids_are_capped_and_never_empty() {
        let shape = LaunchShape::Linear { block_threads: 256 };
        // 10^10 elements would need 39 million blocks; the kernel grid-strides instead.
        assert_eq!(shape.grid_block(100_000, 100_000).0, (65_535, 1, 1));
        assert_eq!(shape.grid_block(u64::MAX, u64::MAX).0, (65_535, 1, 1));
        assert_eq!(shape.grid_block(0, 7).0, (1, 1, 1));
    }

    #[test]
    fn warp_per_row_uses_one_warp_per_row() {
        let shape = LaunchShape::WarpPerRow { warps_per_block: 8 };
        assert_eq!(shape.grid_block(1, 5), ((1, 1, 1), (256, 1, 1), 0));
        assert_eq!(shape.grid_block(17, 5), ((3, 1, 1), (256, 1, 1), 0));
        assert_eq!(shape.grid_block(1_000_000, 5).0, (65_535, 1, 1));
        assert_eq!(shape.threads_per_block(), 256);
    }

    #[test]
    fn tile_pairs_cover_the_lower_triangle_of_tiles() {
        let shape = LaunchShape::TilePairs {
            tile: 64,
            block_rows: 8,
            group: 1,
        };
        assert_eq!(shape.grid_block(1, 1), ((1, 1, 1), (32, 8, 1), 0));
        assert_eq!(shape.grid_block(64, 64), ((1, 1, 1), (32, 8, 1), 0));
        // 65 rows: 2 tiles per side, pairs (0,0), (1,0), (1,1).
        assert_eq!(shape.grid_block(65, 65).0, (3, 1, 1));
        // 100 tiles per side: 5050 pairs.
        assert_eq!(shape.grid_block(6400, 6400).0, (5050, 1, 1));
        // In groups of 8 x 8 tiles: 100 tiles are 13 groups per side, 91 group pairs of 64
        // slots; one tile is one group.
        let grouped = LaunchShape::TilePairs {
            tile: 64,
            block_rows: 8,
            group: 8,
        };
        assert_eq!(grouped.grid_block(6400, 6400).0, (91 * 64, 1, 1));
        assert_eq!(grouped.grid_block(1, 1).0, (64, 1, 1));
        // Bands: rows [512, 1024) are group row 1 (2 group pairs); [0, 6400) is everything;
        // [6144, 6400) is the last group row (13 group pairs).
        assert_eq!(grouped.band_grid_block(6400, 512, 1024).0, (2 * 64, 1, 1));
        assert_eq!(grouped.band_grid_block(6400, 0, 6400).0, (91 * 64, 1, 1));
        assert_eq!(grouped.band_grid_block(6400, 6144, 6400).0, (13 * 64, 1, 1));
        // A band inside one group row still launches that group row's slots.
        assert_eq!(grouped.band_grid_block(6400, 640, 768).0, (2 * 64, 1, 1));
        assert_eq!(shape.grid_block(60_000, 60_000).0, (65_535, 1, 1));
        assert_eq!(shape.grid_block(0, 0).0, (1, 1, 1));
        assert_eq!(shape.threads_per_block(), 256);
    }

    #[test]
    fn column_groups_narrow_for_few_columns() {
        let shape = LaunchShape::ColumnGroups {
            block_threads: 1024,
            elem_bytes: 4,
        };
        assert_eq!(shape.grid_block(1000, 1), ((1, 1, 1), (1, 1024, 1), 4096));
        assert_eq!(shape.grid_block(1000, 2), ((1, 1, 1), (2, 512, 1), 4096));
        assert_eq!(shape.grid_block(1000, 3), ((1, 1, 1), (4, 256, 1), 4096));
        assert_eq!(shape.grid_block(1000, 100), ((25, 1, 1), (4, 256, 1), 4096));
        assert_eq!(shape.column_scratch(1000, 100, 1), None);
        assert_eq!(shape.grid_block(10, 2048), ((256, 1, 1), (8, 128, 1), 4096));
        assert_eq!(shape.grid_block(10, 8192), ((256, 1, 1), (32, 32, 1), 4096));
        assert_eq!(shape.grid_block(10, 8193), ((257, 1, 1), (32, 32, 1), 4096));
        assert_eq!(shape.grid_block(0, 0), ((1, 1, 1), (1, 1024, 1), 4096));
        assert_eq!(shape.threads_per_block(), 1024);
        let wide = LaunchShape::ColumnGroups {
            block_threads: 1024,
            elem_bytes: 8,
        };
        assert_eq!(
            wide.grid_block(5, 10_000_000),
            ((65_535, 1, 1), (32, 32, 1), 8192)
        );
    }

    #[test]
    fn tall_narrow_column_reductions_split_their_rows() {
        let shape = LaunchShape::ColumnGroups {
            block_threads: 1024,
            elem_bytes: 4,
        };
        // One column of 10^6 rows: 1024 threads of 8 rows per slice would allow 122 slices;
        // 256 blocks are the target.
        assert_eq!(
            shape.grid_block(1_000_000, 1),
            ((1, 122, 1), (1, 1024, 1), 4096)
        );
        let scratch = shape.column_scratch(1_000_000, 1, 2);
        assert_eq!(
            scratch,
            Some(ColumnScratch {
                bytes: 976 + 4,
                tickets_offset: 976,
                tickets: 1
            })
        );
        // 100 columns of 10^6 rows: 25 groups of 4 columns, 11 slices each.
        assert_eq!(
            shape.grid_block(1_000_000, 100),
            ((25, 11, 1), (4, 256, 1), 4096)
        );
        assert_eq!(column_row_slices(1_000_000, 300, 32), 1);
        assert_eq!(column_row_slices(0, 1, 1024), 1);
        assert_eq!(shape.column_scratch(1_000_000, 1, 0), None);
    }

    #[test]
    fn row_blocks_take_shared_memory_for_their_bins() {
        let shape = LaunchShape::RowBlocks {
            block_rows: 64,
            threads: 128,
            bin_bytes: 8,
        };
        assert_eq!(shape.grid_block(1, 1), ((1, 1, 1), (128, 1, 1), 0));
        assert_eq!(
            shape.grid_block_wide(65, 3, 10),
            ((2, 1, 1), (128, 1, 1), 5120)
        );
        assert_eq!(shape.grid_block_wide(1 << 40, 3, 10).0, (65_535, 1, 1));
        assert_eq!(shape.grid_block_wide(1, 1, u64::MAX).2, u32::MAX);
        assert_eq!(shape.threads_per_block(), 128);
        // Other shapes ignore the width.
        let linear = LaunchShape::Linear { block_threads: 256 };
        assert_eq!(linear.grid_block_wide(3, 100, 7), linear.grid_block(3, 100));
    }

    #[test]
    fn column_group_shapes_are_powers_of_two() {
        for cols in 0..20_000u64 {
            let width = column_group_width(cols);
            assert!(width.is_power_of_two() && width <= MAX_COLUMN_GROUP_WIDTH);
            assert!((COLUMN_BLOCK_THREADS / width).is_power_of_two());
        }
    }
}
