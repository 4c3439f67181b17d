// How fast an H100 reads one large row-major f32 matrix in the access patterns a cluster-sums
// kernel can use, against a plain sequential read of the same bytes: the bound an access
// pattern puts on the stored-K iteration, apart from the kernel's arithmetic.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 read_patterns.cu -o read_patterns
//   ./read_patterns [n] [reps]        (n x n f32, n a multiple of 256; default 79872: 25.5 GB)
//
// Patterns (every one reads each element once and folds it into a per-thread sum, written out
// so that no load is dead):
//   sequential      each thread reads 16-byte pieces, grid-stride over the whole matrix;
//   groups TB wW    the cluster-sums kernel's pattern read with plain loads: a worker (one
//                   warp) owns row groups of 32 rows and walks their column tiles of TB bytes a
//                   row in order (a lane reads 16 bytes of each row of the tile; the compiler
//                   keeps about four such loads a lane in flight, 2 KB a warp); a persistent
//                   grid of W warps per SM, each worker a contiguous range of tiles;
//   groups TB wW L2+A  the same, each lane first asking the L2 cache (a bulk prefetch, which
//                   holds none of the SM's resources) for its row of the tile A tiles on;
//   rows TB wW sS   the bins kernel's layout without staging: lane r loads row r's pieces of
//                   the tile itself (each load instruction touches 32 rows, the lines' other
//                   pieces come from L1), one warp per block, S bytes of shared memory per
//                   block standing for its bins;
//   staged TBxS wW sX  the cluster-sums kernels' staging without their sums: 16-byte cp.async
//                   copies of each tile into a ring of S shared-memory stages (S - 1 tiles in
//                   flight), X more bytes per block standing for the bins;
//   shared TB wW cC C workers of a block share each row group, worker c taking the column
//                   tiles c, c + C, ...: at any moment they read C adjacent tiles of the same
//                   rows, C x TB contiguous bytes of each.
// Each figure is the median of `reps` timed runs (CUDA events) after one warm-up.
#include "probe_common.cuh"

// A 16-byte load as inline PTX. (ptxas 13.0 still interleaves such loads with the sums that
// use them: about four of them a lane in flight, as with plain loads.)
__device__ __forceinline__ float4 load_in_order(const float* p)
{
    float4 v;
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
}

// One tile: 32 rows x TB bytes from (row0, col0); lane l reads the 16-byte pieces l, l + 32, ...
// of every row, in batches of 32 loads written before their sums; the compiler interleaves
// them (about four 16-byte loads a lane in flight, in the SASS of CUDA 13.0), so a warp has
// about 2 KB in flight.
template <int TB>
__device__ __forceinline__ float read_tile(const float* m, long long ld, long long row0,
                                           long long col0, int lane)
{
    static_assert(TB >= 512 && TB % 512 == 0, "a lane reads whole 16-byte pieces of every row");
    constexpr int PER_ROW = TB / 16 / 32;  // pieces a lane reads of each row
    constexpr int ROWS = 32 / PER_ROW;     // rows per batch of 32 loads
    float s = 0.f;
#pragma unroll
    for (int r0 = 0; r0 < 32; r0 += ROWS) {
        float4 v[32];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int p = 0; p < PER_ROW; ++p) {
                const float* q = m + (row0 + r0 + r) * ld + col0 + 4 * (lane + 32 * p);
                v[r * PER_ROW + p] = *reinterpret_cast<const float4*>(q);
            }
#pragma unroll
        for (int i = 0; i < 32; ++i) s += v[i].x + v[i].y + v[i].z + v[i].w;
    }
    return s;
}

// Asks the L2 cache to fetch `bytes` (a multiple of 16) from the 16-byte aligned `p`; a hint
// that holds nothing of the SM's.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

// A worker's contiguous range [begin, end) of the n x n matrix's 32-row x TB-byte tiles, row
// group after row group (tile t: row group t / tiles_per_group, column tile t % tiles_per_group).
template <int TB>
struct WorkerTiles {
    static constexpr long long cols_per_tile = TB / 4;
    long long tiles_per_group, begin, end;
    __device__ WorkerTiles(long long n, long long worker, long long workers)
    {
        tiles_per_group = n / cols_per_tile;
        const long long total = (n / 32) * tiles_per_group;
        begin = total * worker / workers;
        end = total * (worker + 1) / workers;
    }
};

// Worker and worker count of this thread's warp (every warp of the grid a worker).
__device__ __forceinline__ long long warp_worker() { return ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; }
__device__ __forceinline__ long long warp_workers() { return ((long long)gridDim.x * blockDim.x) >> 5; }

template <int TB>
__global__ void groups(const float* __restrict__ m, long long n, float* out, int ahead)
{
    const int lane = threadIdx.x & 31;
    const WorkerTiles<TB> w(n, warp_worker(), warp_workers());
    const long long tiles_per_group = w.tiles_per_group, cols_per_tile = w.cols_per_tile;
    const long long begin = w.begin, end = w.end;
    float s = 0.f;
    for (long long t = begin; t < end; ++t) {
        if (ahead > 0 && t + ahead < end) {
            // Lane r: row r of the tile `ahead` tiles on.
            const long long pg = (t + ahead) / tiles_per_group, pc = (t + ahead) % tiles_per_group;
            prefetch_l2(m + (32 * pg + lane) * n + pc * cols_per_tile, TB);
        }
        const long long g = t / tiles_per_group, c = t % tiles_per_group;
        s += read_tile<TB>(m, n, 32 * g, c * cols_per_tile, lane);
    }
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// The bins kernel's layout without staging: lane r reads row r of the tile itself, its TB / 16
// pieces in order (each load instruction touches 32 rows; the rest of each line is read by the
// lane's next loads, from L1 when it keeps them). The block's dynamic shared memory (at least
// 128 bytes) stands for the bins (touched once).
template <int TB>
__global__ void lane_rows(const float* __restrict__ m, long long n, float* out)
{
    extern __shared__ float bins_stand_in[];
    const int lane = threadIdx.x & 31;
    const WorkerTiles<TB> w(n, warp_worker(), warp_workers());
    const long long tiles_per_group = w.tiles_per_group, cols_per_tile = w.cols_per_tile;
    const long long begin = w.begin, end = w.end;
    constexpr int PIECES = TB / 16;
    float s = 0.f;
    for (long long t = begin; t < end; ++t) {
        const long long g = t / tiles_per_group, c = t % tiles_per_group;
        const float4* row = reinterpret_cast<const float4*>(m + (32 * g + lane) * n + c * cols_per_tile);
        float4 v[PIECES];
#pragma unroll
        for (int p = 0; p < PIECES; ++p) v[p] = load_in_order(reinterpret_cast<const float*>(row + p));
#pragma unroll
        for (int p = 0; p < PIECES; ++p) s += v[p].x + v[p].y + v[p].z + v[p].w;
    }
    bins_stand_in[threadIdx.x] = s;
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s + bins_stand_in[threadIdx.x ^ 1];
}

// The cluster-sums kernels' staging without their sums: a worker (one warp, one block) copies
// its tiles (32 rows x TB bytes) with 16-byte cp.async into a ring of STAGES shared-memory
// stages, STAGES - 1 tiles in flight while it reads the oldest back (16 bytes a lane a row)
// and sums it; `extra` bytes of shared memory per block stand for the bins.
__device__ __forceinline__ void copy16_async(unsigned dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

template <int TB, int STAGES>
__global__ void staged(const float* __restrict__ m, long long n, float* out)
{
    static_assert(TB >= 512 && TB % 512 == 0, "a lane copies whole 16-byte pieces of every row");
    extern __shared__ __align__(16) unsigned char ring[];
    constexpr int PER_ROW = TB / 16 / 32;  // pieces a lane copies of each row
    constexpr int TILE = 32 * TB;
    const int lane = threadIdx.x & 31;
    const WorkerTiles<TB> w(n, warp_worker(), warp_workers());  // one warp a block
    const long long tiles_per_group = w.tiles_per_group, cols_per_tile = w.cols_per_tile;
    const long long begin = w.begin, end = w.end;
    const unsigned base = (unsigned)__cvta_generic_to_shared(ring);
    auto queue = [&](long long t, int slot) {
        if (t < end) {
            const long long g = t / tiles_per_group, c = t % tiles_per_group;
#pragma unroll
            for (int r = 0; r < 32; ++r)
#pragma unroll
                for (int p = 0; p < PER_ROW; ++p) {
                    const int piece = lane + 32 * p;
                    copy16_async(base + slot * TILE + r * TB + 16 * piece,
                                 m + (32 * g + r) * n + c * cols_per_tile + 4 * piece);
                }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    for (int p = 0; p < STAGES - 1; ++p) queue(begin + p, p);
    float s = 0.f;
    int slot = 0;
    for (long long t = begin; t < end; ++t) {
        int refill = slot + STAGES - 1;
        refill -= refill >= STAGES ? STAGES : 0;
        queue(t + STAGES - 1, refill);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1) : "memory");
        __syncwarp();
        const float4* tile = reinterpret_cast<const float4*>(ring + slot * TILE);
#pragma unroll 8
        for (int i = 0; i < 32 * PER_ROW; ++i) {
            const float4 v = tile[lane + 32 * i];
            s += v.x + v.y + v.z + v.w;
        }
        __syncwarp();
        slot = slot + 1 == STAGES ? 0 : slot + 1;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <int TB, int C>
__global__ void shared_groups(const float* __restrict__ m, long long n, float* out)
{
    const int lane = threadIdx.x & 31;
    const int c = threadIdx.x >> 5;  // blockDim.x == 32 C
    const long long cols_per_tile = TB / 4;
    const long long tiles_per_group = n / cols_per_tile;
    const long long groups_total = n / 32;
    const long long g0 = groups_total * blockIdx.x / gridDim.x;
    const long long g1 = groups_total * (blockIdx.x + 1) / gridDim.x;
    float s = 0.f;
    for (long long g = g0; g < g1; ++g)
        for (long long t = c; t < tiles_per_group; t += C)
            s += read_tile<TB>(m, n, 32 * g, t * cols_per_tile, lane);
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

int main(int argc, char** argv)
{
    const long long n = argc > 1 ? std::atoll(argv[1]) : 79872;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
    if (n <= 0 || n % 256 != 0) {
        std::fprintf(stderr, "n must be a positive multiple of 256 (whole tiles of 1024 bytes)\n");
        return 1;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    const double bytes = 4.0 * n * n;
    float* m = nullptr;
    float* out = nullptr;
    CHECK(cudaMalloc(&m, (size_t)bytes));
    CHECK(cudaMalloc(&out, (size_t)sms * 2048 * sizeof(float)));
    CHECK(cudaMemset(m, 0, (size_t)bytes));
    std::printf("%s, %d SMs; %lld x %lld f32 (%.2f GB), median of %d\n", prop.name, sms, n, n,
                bytes / 1e9, reps);
    const float seq = median_ms(
        [&] { sequential<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(m), (long long)(bytes / 16), out); },
        reps);
    std::printf("%-24s %8.3f ms %7.1f GB/s %6.3fx\n", "sequential", seq, bytes / seq / 1e6, 1.0);
    auto report = [&](const char* name, float ms) {
        std::printf("%-24s %8.3f ms %7.1f GB/s %6.3fx\n", name, ms, bytes / ms / 1e6, ms / seq);
    };
    // Persistent grids of W one-warp workers per SM (blocks of 4 warps).
    for (int w : {4, 8, 16}) {
        char name[64];
        std::snprintf(name, sizeof name, "groups 512 w%d", w);
        report(name, median_ms([&] { groups<512><<<sms * w / 4, 128>>>(m, n, out, 0); }, reps));
        std::snprintf(name, sizeof name, "groups 1024 w%d", w);
        report(name, median_ms([&] { groups<1024><<<sms * w / 4, 128>>>(m, n, out, 0); }, reps));
    }
    // The same with each lane asking L2 for its row of the tile `ahead` tiles on.
    for (int w : {4, 8}) {
        for (int ahead : {1, 2, 4}) {
            char name[64];
            std::snprintf(name, sizeof name, "groups 512 w%d L2+%d", w, ahead);
            report(name, median_ms([&] { groups<512><<<sms * w / 4, 128>>>(m, n, out, ahead); }, reps));
        }
    }
    // The kernels' staging alone: a ring of 16 KB tiles, one warp per block, W per SM, with
    // `extra` bytes beside each (0, or k = 100's f32 bins, 13332).
    CHECK(cudaFuncSetAttribute(staged<512, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    CHECK(cudaFuncSetAttribute(staged<512, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    for (int extra : {0, 13332}) {
        for (int tb : {512}) {
            for (int w : {4, 6, 8, 12}) {
                for (int stages : {2, 3}) {
                    const int bytes = stages * 32 * tb + extra;
                    if (w * bytes > 227 * 1024) continue;
                    char name[64];
                    std::snprintf(name, sizeof name, "staged %dx%d w%d s%d", tb, stages, w, extra);
                    report(name, median_ms([&] {
                        if (tb == 512 && stages == 2) staged<512, 2><<<sms * w, 32, bytes>>>(m, n, out);
                        if (tb == 512 && stages == 3) staged<512, 3><<<sms * w, 32, bytes>>>(m, n, out);
                    }, reps));
                }
            }
        }
    }
    // Lanes owning rows, one warp per block, W warps per SM, each block holding `bins` bytes of
    // shared memory (0, or k = 100's f32 bins: 101 x 33 x 4 = 13332).
    CHECK(cudaFuncSetAttribute(lane_rows<512>, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
    CHECK(cudaFuncSetAttribute(lane_rows<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024));
    for (int bins : {0, 13332}) {
        for (int w : {8, 16}) {
            char name[64];
            std::snprintf(name, sizeof name, "rows 512 w%d s%d", w, bins);
            report(name, median_ms([&] { lane_rows<512><<<sms * w, 32, bins + 128>>>(m, n, out); }, reps));
            std::snprintf(name, sizeof name, "rows 256 w%d s%d", w, bins);
            report(name, median_ms([&] { lane_rows<256><<<sms * w, 32, bins + 128>>>(m, n, out); }, reps));
        }
    }
    for (int blocks_per_sm : {2, 4}) {
        char name[64];
        std::snprintf(name, sizeof name, "shared 512 w%d c4", 4 * blocks_per_sm);
        report(name, median_ms([&] { shared_groups<512, 4><<<sms * blocks_per_sm, 128>>>(m, n, out); }, reps));
        std::snprintf(name, sizeof name, "shared 512 w%d c8", 8 * blocks_per_sm);
        report(name, median_ms([&] { shared_groups<512, 8><<<sms * blocks_per_sm, 256>>>(m, n, out); }, reps));
    }
    CHECK(cudaFree(m));
    CHECK(cudaFree(out));
    return 0;
}
