// How much of the f32 cluster sums' time is their per-element work: the bins kernel's staging
// (32-row x 128-column tiles, 16-byte cp.async copies into a ring of shared-memory stages, one
// warp a block, 4 blocks an SM) with different ways of summing a staged tile into per-lane bins
// (bins[c * 33 + lane]), timed against a plain sequential read of the same matrix.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 sums_consume.cu -o sums_consume
//   ./sums_consume [n] [reps]     (n x n f32, n a multiple of 128; default 79872: 25.5 GB)
//
// Ways of summing a tile (each lane its row, columns in order):
//   regs spin C   every element added into one register, then C clock cycles of waiting: how the
//                 ring's speed depends on the time a tile's sums take, apart from what they do;
//   push          the bins kernel's sums as generated today (kernels-gen cluster_sums): a run of
//                 equal bins kept in registers, each element's bin loaded before the previous
//                 run is stored, so two elements' bin updates overlap;
//   fwd D         each element's bin loaded D elements ahead of its update, right after the
//                 update D elements back is stored; an element whose bin one of the D - 1
//                 elements before it updated takes that element's new value from a register
//                 instead. Which one (the nearest) is worked out once a tile for the whole warp,
//                 from the tile's labels, and kept in the top bits of the bin's offset.
// Ways of staging (the names' last words): "pad", rows padded by 16 bytes (the kernels' layout
// until run 50); "swz", rows unpadded with their 16-byte chunks swizzled (chunk q of tile row r
// at q ^ (r & 7): the kernels' layout since); neither: unpadded and unswizzled (bank conflicts
// on the reads); "labels": the tile's labels copied with it; "bulk": one cp.async.bulk a row
// completing on an mbarrier a stage. s2, s3: stages; wW: one-warp blocks an SM (the shared
// memory is padded so that exactly W fit).
// Before timing, every way is checked on a small matrix against sums in double precision, for
// random labels, labels in long runs, one cluster, and labels outside the clusters.
#include <cmath>

#include "probe_common.cuh"

constexpr int TW = 128;          // columns a tile
constexpr int TWP = TW + 4;      // a staged row, padded (conflict-free 16-byte reads)
constexpr int TILE_BYTES = 32 * TWP * 4;
constexpr int STAGE_BYTES = TILE_BYTES + TW * 4;  // the tile, then its 128 labels
// Staging knobs: the labels copied with each tile (else not at all: regs only), rows padded to
// TWP (else TW), and the copies made by the bulk-copy engine (one cp.async.bulk of 512 bytes a
// row, lane r row r, completion counted on an mbarrier a stage) instead of 16-byte cp.async.
// SWZ: rows unpadded, chunk q of tile row r stored as chunk q ^ (r & 7) (the kernels' layout
// since run 50).
enum Staging { LABELS = 1, PAD = 2, BULK = 4, SWZ = 8 };
constexpr int DEFAULT_STAGING = LABELS | PAD;
constexpr unsigned BIN_BYTES = 33u * 4u;
constexpr unsigned CODE_SHIFT = 29;               // fwd: distance to the nearest same bin
constexpr unsigned OFFSET_MASK = (1u << CODE_SHIFT) - 1u;

enum Mode { REGS = 0, PUSH = 1, FWD = 2 };

__global__ void fill(float* m, long long count, unsigned seed)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13;
        x *= 0x5bd1e995u;
        x ^= x >> 15;
        m[i] = (float)(x & 0xffffff) / 16777216.0f;
    }
}

__device__ __forceinline__ void copy16(unsigned dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void copy4(unsigned dst, const void* src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void bar_init(unsigned bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes)
{
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool bar_try_wait(unsigned bar, unsigned parity)
{
    unsigned ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
    return ok != 0;
}

// The bins kernel's run-keeping update (kernels-gen's `push`).
__device__ __forceinline__ void push(float v, float* p, float*& cur, float& base, float& acc)
{
    const float nb = *p;
    *cur = base + acc;
    const bool same = p == cur;
    base = same ? base : nb;
    acc = same ? acc + v : v;
    cur = p;
}

// Turns the staged labels into bin offsets (labels >= kb go to the dump bin kb); for fwd, the
// distance (1 .. D - 1) back to the nearest earlier column of the tile with the same bin goes
// into the top bits (0: none within D - 1).
template <int MODE, int D>
__device__ __forceinline__ void label_offsets(unsigned* lab, unsigned kb, unsigned lane)
{
    unsigned code[TW / 32];
#pragma unroll
    for (int i = 0; i < TW / 32; ++i) {
        const int j = i * 32 + (int)lane;
        const unsigned c = min(lab[j], kb);
        unsigned d = 0;
        if (MODE == FWD) {
#pragma unroll
            for (int dd = D - 1; dd >= 1; --dd) {
                if (j >= dd && min(lab[j - dd], kb) == c) d = (unsigned)dd;
            }
        }
        code[i] = c * BIN_BYTES | d << CODE_SHIFT;
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < TW / 32; ++i) lab[i * 32 + (int)lane] = code[i];
    __syncwarp();
}

__device__ __forceinline__ unsigned field(const uint4& u, int e)
{
    return e == 0 ? u.x : (e == 1 ? u.y : (e == 2 ? u.z : u.w));
}

// The offsets are read a vector of four at a time, G + 1 vectors ahead of their use (before the
// stores they would otherwise wait behind): element j's bin is loaded at element j - D, whose
// offsets vector was read one vector earlier still.
template <int D>
__device__ __forceinline__ void consume_fwd(const float* row, unsigned sw, const unsigned* lab,
                                            unsigned char* bins_lane)
{
    static_assert(D % 4 == 0, "D a multiple of four");
    constexpr int G = D / 4;
    constexpr int W = G + 2;
    const uint4* lab4 = reinterpret_cast<const uint4*>(lab);
    uint4 win[W];
    float nb[D], pend[D];
#pragma unroll
    for (int i = 0; i <= G; ++i) win[i % W] = lab4[i];
#pragma unroll
    for (int j = 0; j < D; ++j) {
        nb[j] = *reinterpret_cast<float*>(bins_lane + (field(win[(j / 4) % W], j % 4) & OFFSET_MASK));
    }
#pragma unroll
    for (int q = 0; q < TW / 4; ++q) {
        if (q + G + 1 < TW / 4) win[(q + G + 1) % W] = lab4[q + G + 1];
        const float4 v4 = *reinterpret_cast<const float4*>(row + 4 * ((unsigned)q ^ sw));
        const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int j = 4 * q + e;
            const unsigned o = field(win[q % W], e);
            const unsigned d = o >> CODE_SHIFT;
            float val = nb[j % D];
#pragma unroll
            for (int dd = D - 1; dd >= 1; --dd) {
                if (j >= dd) val = d == (unsigned)dd ? pend[(j - dd) % D] : val;
            }
            pend[j % D] = val + v[e];
            *reinterpret_cast<float*>(bins_lane + (o & OFFSET_MASK)) = pend[j % D];
            if (j + D < TW) {
                const unsigned on = field(win[((j + D) / 4) % W], (j + D) % 4);
                nb[j % D] = *reinterpret_cast<float*>(bins_lane + (on & OFFSET_MASK));
            }
        }
    }
}

__device__ __forceinline__ void consume_push(const float* row, unsigned sw, const unsigned* lab,
                                             unsigned char* bins_lane, float*& cur, float& base,
                                             float& acc)
{
#pragma unroll
    for (int q = 0; q < TW / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(row + 4 * ((unsigned)q ^ sw));
        const uint4 l = *reinterpret_cast<const uint4*>(lab + 4 * q);
        push(v.x, reinterpret_cast<float*>(bins_lane + l.x), cur, base, acc);
        push(v.y, reinterpret_cast<float*>(bins_lane + l.y), cur, base, acc);
        push(v.z, reinterpret_cast<float*>(bins_lane + l.z), cur, base, acc);
        push(v.w, reinterpret_cast<float*>(bins_lane + l.w), cur, base, acc);
    }
}

// One warp a block, each a contiguous range of the matrix's tiles (row group after row group).
// s (n x kb, zeroed) receives each row group's bins by atomicAdd (a row group may be split
// between two workers).
template <int MODE, int STAGES, int D, int STAGING>
__global__ void __launch_bounds__(32) sums(const float* __restrict__ m, long long n,
    const unsigned* __restrict__ labels, unsigned kb, float* __restrict__ s, long long spin,
    float* __restrict__ out)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const unsigned lane = threadIdx.x;
    const long long tpg = n / TW;
    const long long total = (n / 32) * tpg;
    const long long begin = total * blockIdx.x / gridDim.x;
    const long long end = total * (blockIdx.x + 1) / gridDim.x;
    const unsigned base_addr = (unsigned)__cvta_generic_to_shared(smem);
    unsigned char* bins_lane = smem + STAGES * STAGE_BYTES + 4 * lane;
    for (unsigned c = 0; c <= kb; ++c) *reinterpret_cast<float*>(bins_lane + c * BIN_BYTES) = 0.f;
    constexpr bool HAS_LABELS = (STAGING & LABELS) != 0;
    constexpr bool IS_BULK = (STAGING & BULK) != 0;
    constexpr int ROW = (STAGING & PAD) != 0 ? TWP : TW;  // a staged row's floats
    constexpr bool IS_SWZ = (STAGING & SWZ) != 0;
    const unsigned sw = IS_SWZ ? (lane & 7u) : 0u;
    // The stages' mbarriers (bulk copies) follow the bins, 8-byte aligned.
    const unsigned bars = base_addr + ((STAGES * STAGE_BYTES + (kb + 1) * BIN_BYTES + 7u) & ~7u);
    if (IS_BULK) {
        if (lane == 0) {
            for (int p = 0; p < STAGES; ++p) bar_init(bars + 8 * p);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncwarp();
    }
    auto queue = [&](long long t, int slot) {
        if (t < end) {
            const long long g = t / tpg, ct = t % tpg;
            const unsigned st = base_addr + slot * STAGE_BYTES;
            if (IS_BULK) {
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                const unsigned bar = bars + 8 * slot;
                if (lane == 0) bar_expect(bar, 32 * TW * 4 + (HAS_LABELS ? TW * 4 : 0));
                __syncwarp();
                bulk_copy(st + lane * ROW * 4, m + (32 * g + lane) * n + ct * TW, TW * 4, bar);
                if (HAS_LABELS && lane == 0) bulk_copy(st + TILE_BYTES, labels + ct * TW, TW * 4, bar);
            } else {
                const unsigned q = lane % 32u;  // 32 chunks of 16 bytes a row
#pragma unroll
                for (int r = 0; r < 32; ++r) {
                    const unsigned qs = IS_SWZ ? (q ^ (unsigned)(r & 7)) : q;
                    copy16(st + (r * ROW + 4 * qs) * 4, m + (32 * g + r) * n + ct * TW + 4 * q);
                }
                if (HAS_LABELS) {
#pragma unroll
                    for (int i = 0; i < TW / 32; ++i) {
                        copy4(st + TILE_BYTES + (i * 32 + lane) * 4, labels + ct * TW + i * 32 + lane);
                    }
                }
            }
        }
        if (!IS_BULK) asm volatile("cp.async.commit_group;\n" ::: "memory");
    };
    for (int p = 0; p < STAGES - 1; ++p) queue(begin + p, p);
    float reg = 0.f;
    float* dump = reinterpret_cast<float*>(bins_lane + kb * BIN_BYTES);
    float* cur = dump;
    float base = 0.f, acc = 0.f;
    int slot = 0;
    for (long long t = begin; t < end; ++t) {
        int refill = slot + STAGES - 1;
        refill -= refill >= STAGES ? STAGES : 0;
        queue(t + STAGES - 1, refill);
        if (IS_BULK) {
            const unsigned parity = (unsigned)((t - begin) / STAGES) & 1u;
            while (!bar_try_wait(bars + 8 * slot, parity)) {
            }
        } else {
            asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 1) : "memory");
        }
        __syncwarp();
        const float* row = reinterpret_cast<const float*>(smem + slot * STAGE_BYTES) + lane * ROW;
        unsigned* lab = reinterpret_cast<unsigned*>(smem + slot * STAGE_BYTES + TILE_BYTES);
        if constexpr (MODE == REGS) {
#pragma unroll 8
            for (int i = 0; i < TW / 4; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(row + 4 * ((unsigned)i ^ sw));
                reg += v.x + v.y + v.z + v.w;
            }
            if (spin > 0) {
                const long long t0 = clock64();
                while (clock64() - t0 < spin) {
                }
            }
        } else {
            label_offsets<MODE, D>(lab, kb, lane);
            if constexpr (MODE == PUSH) {
                consume_push(row, sw, lab, bins_lane, cur, base, acc);
            } else {
                consume_fwd<D>(row, sw, lab, bins_lane);
            }
        }
        const long long g = t / tpg;
        if (MODE != REGS && (t % tpg == tpg - 1 || t + 1 == end)) {
            if (MODE == PUSH) {
                *cur = base + acc;
                cur = dump;
                base = 0.f;
                acc = 0.f;
            }
            __syncwarp();
            for (int r = 0; r < 32; ++r) {
                for (unsigned c = lane; c < kb; c += 32) {
                    atomicAdd(s + (32 * g + r) * kb + c,
                              *reinterpret_cast<float*>(smem + STAGES * STAGE_BYTES + (c * 33 + r) * 4));
                }
            }
            __syncwarp();
            for (unsigned c = 0; c <= kb; ++c) *reinterpret_cast<float*>(bins_lane + c * BIN_BYTES) = 0.f;
        }
        __syncwarp();
        slot = slot + 1 == STAGES ? 0 : slot + 1;
    }
    if (!IS_BULK) asm volatile("cp.async.wait_all;\n" ::: "memory");
    out[(long long)blockIdx.x * 32 + lane] = reg;
}

struct Variant {
    const char* name;
    void (*kernel)(const float*, long long, const unsigned*, unsigned, float*, long long, float*);
    int stages;
};

template <int MODE, int STAGES, int D, int STAGING = DEFAULT_STAGING>
Variant variant(const char* name)
{
    return Variant{name, sums<MODE, STAGES, D, STAGING>, STAGES};
}

static size_t smem_bytes(int stages, unsigned kb)
{
    return (((size_t)stages * STAGE_BYTES + (kb + 1) * BIN_BYTES + 7) & ~(size_t)7) + 8 * stages;
}

// As many one-warp blocks an SM as asked, fewer where their shared memory does not fit.
static int fitting_warps(int warps, const Variant& v, unsigned kb)
{
    return std::min(warps, (int)(227 * 1024 / smem_bytes(v.stages, kb)));
}

static void launch(const Variant& v, int sms, int warps, const float* m, long long n,
                   const unsigned* labels, unsigned kb, float* s, long long spin, float* out)
{
    // Shared memory padded so that exactly `warps` blocks fit an SM (228 KB, 1 KB reserved a
    // block): the block scheduler cannot stack more on some SMs than on others.
    const size_t bytes = std::max(smem_bytes(v.stages, kb), (size_t)(233472 / warps - 1024 - 16));
    CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    v.kernel<<<sms * warps, 32, bytes>>>(m, n, labels, kb, s, spin, out);
}

static std::vector<unsigned> make_labels(long long n, unsigned k, int kind, unsigned seed)
{
    std::vector<unsigned> l(n);
    unsigned x = seed * 747796405u + 1u;
    for (long long j = 0; j < n; ++j) {
        x = x * 1664525u + 1013904223u;
        if (kind == 0) l[j] = (x >> 8) % k;                     // random
        if (kind == 1) l[j] = (unsigned)((j / 37) % k);         // runs of 37
        if (kind == 2) l[j] = 0;                                // one cluster
        if (kind == 3) l[j] = (x >> 8) % (k + 3);               // some outside [0, k)
    }
    return l;
}

int main(int argc, char** argv)
{
    const long long n = argc > 1 ? std::atoll(argv[1]) : 79872;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
    if (n <= 0 || n % TW != 0) {
        std::fprintf(stderr, "n must be a positive multiple of %d\n", TW);
        return 1;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    std::vector<Variant> variants = {
        variant<PUSH, 2, 1>("push s2 pad"),
        variant<PUSH, 2, 1, LABELS | SWZ>("push s2 swz"),
        variant<PUSH, 3, 1, LABELS | SWZ>("push s3 swz"),
        variant<FWD, 2, 4>("fwd4 s2 pad"),
        variant<FWD, 2, 4, LABELS | SWZ>("fwd4 s2 swz"),
        variant<FWD, 3, 4, LABELS | SWZ>("fwd4 s3 swz"),
        variant<FWD, 2, 8, LABELS | SWZ>("fwd8 s2 swz"),
    };
    float* out = nullptr;
    CHECK(cudaMalloc(&out, (size_t)sms * 16 * 32 * sizeof(float)));

    // Checks: a small matrix against double-precision sums.
    {
        const long long cn = 2048;
        float* cm = nullptr;
        unsigned* cl = nullptr;
        float* cs = nullptr;
        CHECK(cudaMalloc(&cm, cn * cn * 4));
        CHECK(cudaMalloc(&cl, cn * 4));
        CHECK(cudaMalloc(&cs, cn * 128 * 4));
        fill<<<256, 256>>>(cm, cn * cn, 7u);
        std::vector<float> hm(cn * cn);
        CHECK(cudaMemcpy(hm.data(), cm, cn * cn * 4, cudaMemcpyDeviceToHost));
        int bad = 0, checks = 0;
        for (unsigned k : {1u, 3u, 10u, 100u}) {
            for (int kind = 0; kind < 4; ++kind) {
                const std::vector<unsigned> hl = make_labels(cn, k, kind, k * 10 + kind);
                CHECK(cudaMemcpy(cl, hl.data(), cn * 4, cudaMemcpyHostToDevice));
                std::vector<double> ref(cn * k, 0.0), mag(cn, 0.0);
                for (long long i = 0; i < cn; ++i)
                    for (long long j = 0; j < cn; ++j) {
                        if (hl[j] < k) ref[i * k + hl[j]] += hm[i * cn + j];
                        mag[i] += std::fabs(hm[i * cn + j]);
                    }
                for (const Variant& v : variants) {
                    for (int asked : {4, 7}) {
                        const int warps = fitting_warps(asked, v, k);
                        CHECK(cudaMemset(cs, 0xff, cn * k * 4));  // poison, then zero what s holds
                        CHECK(cudaMemset(cs, 0, cn * k * 4));
                        launch(v, sms, warps, cm, cn, cl, k, cs, 0, out);
                        CHECK(cudaGetLastError());
                        std::vector<float> hs(cn * k);
                        CHECK(cudaMemcpy(hs.data(), cs, cn * k * 4, cudaMemcpyDeviceToHost));
                        double worst = 0.0;
                        for (long long i = 0; i < cn; ++i)
                            for (unsigned c = 0; c < k; ++c)
                                worst = std::max(worst, std::fabs(hs[i * k + c] - ref[i * k + c]) / mag[i]);
                        ++checks;
                        if (!(worst < 2e-5)) {
                            ++bad;
                            std::printf("CHECK FAIL %s warps %d k %u labels %d: worst %.3e\n", v.name, warps, k, kind, worst);
                        }
                    }
                }
            }
        }
        std::printf("checks: %d of %d passed (relative to each row's absolute sum, < 2e-5)\n", checks - bad, checks);
        CHECK(cudaFree(cm));
        CHECK(cudaFree(cl));
        CHECK(cudaFree(cs));
    }

    const double bytes = 4.0 * n * n;
    float* m = nullptr;
    unsigned* labels = nullptr;
    float* s = nullptr;
    CHECK(cudaMalloc(&m, (size_t)bytes));
    CHECK(cudaMalloc(&labels, n * 4));
    CHECK(cudaMalloc(&s, n * 128 * 4));
    fill<<<sms * 8, 256>>>(m, n * n, 1u);
    std::printf("%s, %d SMs; %lld x %lld f32 (%.2f GB), median of %d\n", prop.name, sms, n, n,
                bytes / 1e9, reps);
    const float seq = median_ms(
        [&] { sequential<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(m), (long long)(bytes / 16), out); },
        reps);
    std::printf("%-28s %8.3f ms %7.1f GB/s %6.3fx\n", "sequential", seq, bytes / seq / 1e6, 1.0);
    auto report = [&](const char* name, float ms) {
        std::printf("%-28s %8.3f ms %7.1f GB/s %6.3fx\n", name, ms, bytes / ms / 1e6, ms / seq);
        std::fflush(stdout);
    };
    // The staging alone, every element added into a register.
    const std::vector<Variant> stagings = {
        variant<REGS, 2, 1>("regs s2 labels pad"),
        variant<REGS, 2, 1, PAD>("regs s2 pad"),
        variant<REGS, 2, 1, 0>("regs s2"),
        variant<REGS, 2, 1, LABELS | SWZ>("regs s2 labels swz"),
        variant<REGS, 3, 1, LABELS | SWZ>("regs s3 labels swz"),
        variant<REGS, 2, 1, LABELS | PAD | BULK>("regs bulk s2 labels pad"),
        variant<REGS, 3, 1, LABELS | PAD | BULK>("regs bulk s3 labels pad"),
    };
    for (const Variant& v : stagings) {
        for (int asked : {4, 6}) {
            const int warps = fitting_warps(asked, v, 1);
            if (asked == 6 && warps <= 4) continue;
            char name[64];
            std::snprintf(name, sizeof name, "%s w%d", v.name, warps);
            report(name, median_ms([&] { launch(v, sms, warps, m, n, labels, 1, s, 0, out); }, reps));
        }
    }
    for (long long spin : {2000LL, 4000LL}) {
        char name[64];
        std::snprintf(name, sizeof name, "regs s2 labels pad w4 spin %lld", spin);
        report(name, median_ms([&] { launch(stagings[0], sms, 4, m, n, labels, 1, s, spin, out); }, reps));
        std::snprintf(name, sizeof name, "regs s2 labels swz w4 spin %lld", spin);
        report(name, median_ms([&] { launch(stagings[3], sms, 4, m, n, labels, 1, s, spin, out); }, reps));
    }
    for (unsigned k : {10u, 50u, 100u}) {
        const std::vector<unsigned> hl = make_labels(n, k, 0, k);
        CHECK(cudaMemcpy(labels, hl.data(), n * 4, cudaMemcpyHostToDevice));
        for (const Variant& v : variants) {
            for (int asked : {4}) {
                const int warps = fitting_warps(asked, v, k);
                char name[64];
                std::snprintf(name, sizeof name, "%s w%d k %u", v.name, warps, k);
                report(name, median_ms([&] {
                    CHECK(cudaMemsetAsync(s, 0, n * k * 4));
                    launch(v, sms, warps, m, n, labels, k, s, 0, out);
                }, reps));
            }
        }
    }
    // The same staging on a matrix of zeros (the read_patterns probe's data).
    CHECK(cudaMemset(m, 0, (size_t)bytes));
    report("sequential, zeros", median_ms(
        [&] { sequential<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(m), (long long)(bytes / 16), out); },
        reps));
    report("regs s2 labels pad w4, zeros", median_ms([&] { launch(stagings[0], sms, 4, m, n, labels, 1, s, 0, out); }, reps));
    report("regs s2 w4, zeros", median_ms([&] { launch(stagings[2], sms, 4, m, n, labels, 1, s, 0, out); }, reps));
    CHECK(cudaFree(m));
    CHECK(cudaFree(labels));
    CHECK(cudaFree(s));
    CHECK(cudaFree(out));
    return 0;
}
