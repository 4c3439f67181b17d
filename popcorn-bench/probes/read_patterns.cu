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
//   groups TB wW    the cluster-sums kernel's pattern: a worker (one warp) owns row groups of
//                   32 rows and walks their column tiles of TB bytes a row in order (a lane
//                   reads 16 bytes of each row of the tile, every load of a tile in flight
//                   together); a persistent grid of W warps per SM, each worker a contiguous
//                   range of tiles (row group after row group);
//   groups TB wW L2+A  the same, each lane first asking the L2 cache (a bulk prefetch, which
//                   holds none of the SM's resources) for its row of the tile A tiles on;
//   shared TB wW cC C workers of a block share each row group, worker c taking the column
//                   tiles c, c + C, ...: at any moment they read C adjacent tiles of the same
//                   rows, C x TB contiguous bytes of each.
// Each figure is the median of `reps` timed runs (CUDA events) after one warm-up.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_));         \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

__global__ void sequential(const float4* __restrict__ m, long long pieces, float* out)
{
    float s = 0.f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < pieces; i += 4 * stride) {
        float4 a = m[i], b = m[i + stride], c = m[i + 2 * stride], d = m[i + 3 * stride];
        s += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y +
             d.z + d.w;
    }
    for (; i < pieces; i += stride) {
        float4 a = m[i];
        s += a.x + a.y + a.z + a.w;
    }
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// One tile: 32 rows x TB bytes from (row0, col0); lane l reads the 16-byte pieces l, l + 32, ...
// of every row, 32 loads (16 KB a warp) issued before any of them is summed.
template <int TB>
__device__ __forceinline__ float read_tile(const float* m, long long ld, long long row0,
                                           long long col0, int lane)
{
    constexpr int PER_ROW = TB / 16 / 32;  // pieces a lane reads of each row
    constexpr int ROWS = 32 / PER_ROW;     // rows per batch of 32 loads
    float s = 0.f;
#pragma unroll
    for (int r0 = 0; r0 < 32; r0 += ROWS) {
        float4 v[32];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int p = 0; p < PER_ROW; ++p)
                v[r * PER_ROW + p] = *reinterpret_cast<const float4*>(
                    m + (row0 + r0 + r) * ld + col0 + 4 * (lane + 32 * p));
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

template <int TB>
__global__ void groups(const float* __restrict__ m, long long n, float* out, int ahead)
{
    const int lane = threadIdx.x & 31;
    const long long worker = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long workers = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long cols_per_tile = TB / 4;
    const long long tiles_per_group = n / cols_per_tile;
    const long long total = (n / 32) * tiles_per_group;
    const long long begin = total * worker / workers, end = total * (worker + 1) / workers;
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

template <class Launch>
float median_ms(Launch launch, int reps)
{
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    launch();  // warm-up
    CHECK(cudaGetLastError());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0.f;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
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
