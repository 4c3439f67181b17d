// ------------------------------------------------------------------------------------
// popcorn's pipelined contraction (kernels-gen, emit/contraction/pipeline.cu; the fixed
// part of every pipelined contraction kernel, followed in the source by its generated
// fold and entry point).
//
// P = A B^T tile by tile, A (m x d) and B (n x d) row-major fp32 with the depth d
// contiguous. A CTA of 256 threads (8 warps, 4 x 2, warp tiles of 64 x 64) owns 256 rows
// at a time (a persistent grid strides over work units) and walks their column tiles of
// 128: all of them, so every row's reductions finish inside one CTA, or, where the only
// reductions are sums by label, a run of them (see Staging; for a symmetric sum by label,
// only the tiles on and above the diagonal block). The depth comes in chunks of
// 32 floats staged by cp.async into a 3-slot ring (XOR-swizzled rows, no padding); the
// producer runs two steps ahead across tile and unit boundaries. The inner product
// is, for TF32 (operands rounded with cvt.rna, fp32 accumulation): on Hopper compiled for
// sm_90a, wgmma.mma_async straight from the staged chunks (two warpgroups of 128 x 128);
// for 3xTF32 the launcher lays each operand's TF32 split pairs along the depth (see
// kSplitOperands) and the kernel multiplies them as TF32 values;
// elsewhere mma.sync.m16n8k8 with ldmatrix fragments; for strict fp32, FFMA on the
// mma.sync accumulator layout, each element summed in ascending depth. With 16-bit operands
// (bf16 or fp16, MMA_BF16 / MMA_F16) the launcher packs each operand's rows in pairs of
// 16-bit values, one 32-bit word a pair: the kernel then counts depth and leading
// dimensions in words and stages, swizzles and copies exactly as for fp32, and only the
// products differ (m64n128k16 and m16n8k16, whose 16-deep steps span the same 32 bytes of a
// staged row as TF32's 8-deep ones, with the same fragments and descriptors). Needs compute
// capability 8.0 (cp.async, TF32 mma). On Hopper, TF32 products of two depth chunks whose
// operands the launcher rounded into one copy (or packed 16-bit ones of one or two chunks)
// have a warp-specialised body as well (contraction_ws: a
// producer thread copying through the tensor memory accelerator, the two warpgroups
// consuming, mbarriers between them).
// ------------------------------------------------------------------------------------
#ifndef PK_PIPELINE
#define PK_PIPELINE

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "popcorn's pipelined contraction needs a GPU of compute capability 8.0 or newer (cp.async, TF32 mma.sync); plan with POPCORN_CONTRACTIONS=never on this device"
#endif

// One dynamic shared-memory array for the kernel.
extern __shared__ __align__(1024) unsigned char pk_smem[];

namespace pk {

// ------------------------------------------------------------------------------------
// Configuration. The host's launch arithmetic (kernels-gen's LaunchShape::Pipelined)
// uses the same numbers.
// ------------------------------------------------------------------------------------
constexpr int WARPS_M = 4;               // warps along the rows of the CTA tile
constexpr int WARPS_N = 2;               // warps along the columns of the CTA tile
constexpr int THREADS = 32 * WARPS_M * WARPS_N;
constexpr int MT = 4;                    // 16-row mma tiles per warp
constexpr int NT = 8;                    // 8-column mma tiles per warp (even)
constexpr int WM = 16 * MT;              // warp tile: 64 rows
constexpr int WN = 8 * NT;               //            x 64 columns
constexpr int BM = WARPS_M * WM;         // CTA tile: 256 rows
constexpr int BN = WARPS_N * WN;         //           x 128 columns
constexpr int BK = 32;                   // depth of one staged chunk (floats)
constexpr int KSTEPS = BK / 8;           // m16n8k8 steps per chunk
constexpr int SEGS = BK / 4;             // 16-byte segments per staged row
constexpr int STAGES = 3;                // cp.async ring: STAGES - 1 steps in flight
constexpr int A_SLOT_FLOATS = BM * BK;   // one staged chunk of A: BM rows x BK
constexpr int B_SLOT_FLOATS = BN * BK;   // one staged chunk of B: BN rows x BK
constexpr int A_SLOT_BYTES = 4 * A_SLOT_FLOATS;
constexpr int B_SLOT_BYTES = 4 * B_SLOT_FLOATS;
constexpr int ROW_BYTES = 4 * BK;        // one staged row
constexpr int A_SEGS_PER_THREAD = BM * SEGS / THREADS;
constexpr int B_SEGS_PER_THREAD = BN * SEGS / THREADS;

static_assert(SEGS == 8, "the XOR swizzle permutes the 8 segments of a 128-byte row");
static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles per ldmatrix.x4");
static_assert((BM * SEGS) % THREADS == 0 && (BN * SEGS) % THREADS == 0,
              "every thread stages the same number of segments");
static_assert(WARPS_N > 1, "the row exchange assumes several column warps");

// The inner product's instructions: the kMma argument of the kernel bodies.
constexpr int MMA_STRICT = 0;  // fp32 FFMA
constexpr int MMA_TF32 = 1;    // fp32 operands rounded to TF32
constexpr int MMA_BF16 = 2;    // operands packed by the launcher in pairs of bf16 (words)
constexpr int MMA_F16 = 3;     // operands packed by the launcher in pairs of fp16 (words)

__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// Sixteen bytes written by one store (the folds' store8).
struct alignas(16) Words16 { unsigned x, y, z, w; };
struct alignas(16) Floats16 { float x, y, z, w; };

// A tensor map (CUtensorMap, 128 opaque bytes) of a row-major fp32 matrix for the tensor
// memory accelerator: dimensions (depth, rows), boxes of BK x (BM or BN), 128-byte swizzle,
// zeros outside the matrix. The launcher encodes it; the kernel takes it as a
// __grid_constant__ parameter.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};

// Bytes of dynamic shared memory for NA slots of A and a row exchange of `exchange`
// bytes (the host's formula is the same).
__device__ __forceinline__ unsigned long long smem_bytes(int na, unsigned long long exchange)
{
    return (unsigned long long)na * A_SLOT_BYTES + (unsigned long long)STAGES * B_SLOT_BYTES +
           exchange;
}

// ------------------------------------------------------------------------------------
// Shared-memory layout of a staged chunk: row r (0..BM-1 or 0..BN-1) holds the BK floats
// of depth k0..k0+BK-1 in 8 segments of 16 bytes; logical segment s of row r is stored
// at physical segment s ^ (r & 7). Eight consecutive rows reading the same logical
// segment (one ldmatrix phase, or one quarter of a cp.async warp) then touch 8 distinct
// 16-byte bank groups: no bank conflicts, and no padding.
// ------------------------------------------------------------------------------------
__device__ __forceinline__ int seg_offset(int row, int seg)  // in floats
{
    return row * BK + ((seg ^ (row & 7)) << 2);
}

// ------------------------------------------------------------------------------------
// Inline PTX wrappers.
// ------------------------------------------------------------------------------------
// cp.async of 16 bytes (L2 only); the bytes past src_bytes (0..16) are written as zeros
// and not read. Source and destination must be 16-byte aligned.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, unsigned src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// cp.async of 16 bytes (L2 only), all of them read.
__device__ __forceinline__ void cp_async16_whole(unsigned dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}

// cp.async of 4 bytes (.cg only allows 16); src_bytes is 4 or 0 (zero fill).
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, unsigned src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are pending; the completed
// copies are then visible to this thread (other threads need a barrier).
template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// fp32 -> TF32, round to nearest with ties away from zero; the low 13 bits come back 0.
__device__ __forceinline__ float to_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// Four 8x8 b16 matrices (= four 8-row x 4-float blocks) from shared memory. Lanes 8i..8i+7
// give the row addresses of matrix i; register i receives matrix i, lane L getting row
// L / 4, 32-bit word L % 4.
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned& r0, unsigned& r1, unsigned& r2,
                                        unsigned& r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

// D = A * B + C on one 16 x 8 tile of one 32-byte k-step of a staged row, fp32 accumulators:
// MMA_TF32, m16n8k8 with 32-bit registers holding TF32 bit patterns; MMA_BF16 / MMA_F16,
// m16n8k16 with registers holding pairs of 16-bit values. Both take the same fragments: word
// t of row g of the step's first 16 bytes is a0 (A) or b0 (B), and so on.
template <int kMma>
__device__ __forceinline__ void mma_step(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1)
{
    static_assert(kMma == MMA_TF32 || kMma == MMA_BF16 || kMma == MMA_F16, "a tensor-core product");
    if constexpr (kMma == MMA_TF32) {
        asm volatile(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else if constexpr (kMma == MMA_BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// ------------------------------------------------------------------------------------
// Staging: one chunk (ROWS x BK) of a row-major matrix X into one shared slot, zeros
// outside the matrix (rows >= rows, depth >= depth). Segment s of the chunk belongs to
// thread s % THREADS; 8 consecutive threads copy one 128-byte row (coalesced). A thread's
// segments are thus one column c = tid % 8 of rows tid / 8 + ROWS_PER_PASS i: the same
// depth, the same swizzle (ROWS_PER_PASS is a multiple of 8), addresses a constant stride
// apart, so everything but the row test is worked out once per chunk.
// vec16: X is 16-byte aligned and ldx % 4 == 0, so every segment start is 16-byte aligned
// and a segment straddling `depth` is a partial 16-byte copy; otherwise 4-byte copies.
// ------------------------------------------------------------------------------------
constexpr int ROWS_PER_PASS = THREADS / SEGS;
static_assert(THREADS % SEGS == 0 && ROWS_PER_PASS % 8 == 0,
              "a thread's segments share one column and one swizzle");

template <int SEGS_PER_THREAD>
__device__ __forceinline__ void stage_chunk(unsigned slot, const float* X, long long ldx,
                                            long long row0, long long rows, long long k0,
                                            long long depth, bool vec16, int tid)
{
    const int r = tid / SEGS;  // first row of this thread's segments
    const int c = tid % SEGS;  // its segment in each row
    const unsigned dst = slot + 4u * (unsigned)seg_offset(r, c);
    constexpr unsigned DST_STEP = (unsigned)(ROWS_PER_PASS * ROW_BYTES);
    const long long gk = k0 + 4 * c;
    // A chunk wholly inside the matrix (every step but those of a last row block or a last
    // depth chunk; the same for the whole CTA): whole 16-byte copies, no tests.
    if (vec16 && row0 + (long long)SEGS_PER_THREAD * ROWS_PER_PASS <= rows && k0 + BK <= depth) {
        const float* src = X + (row0 + r) * ldx + gk;
        const long long src_step = (long long)ROWS_PER_PASS * ldx;
#pragma unroll
        for (int i = 0; i < SEGS_PER_THREAD; ++i)
            cp_async16_whole(dst + (unsigned)i * DST_STEP, src + i * src_step);
        return;
    }
    const long long left_ll = depth - gk;  // floats of each row from gk on
    const int left = left_ll >= 4 ? 4 : (left_ll > 0 ? (int)left_ll : 0);
    // Rows of the matrix at or after this thread's first row (at most every pass's).
    const long long have_ll = rows - (row0 + r);
    const int have = have_ll >= (long long)SEGS_PER_THREAD * ROWS_PER_PASS
                         ? SEGS_PER_THREAD * ROWS_PER_PASS
                         : (have_ll > 0 ? (int)have_ll : 0);
    const float* src = X + (row0 + r) * ldx + gk;  // formed, not read, past the matrix
    const long long src_step = (long long)ROWS_PER_PASS * ldx;
#pragma unroll
    for (int i = 0; i < SEGS_PER_THREAD; ++i) {
        const bool row_ok = i * ROWS_PER_PASS < have;
        const unsigned d_i = dst + (unsigned)i * DST_STEP;
        const float* s_i = src + i * src_step;
        if (vec16) {
            const unsigned nf = row_ok ? (unsigned)left : 0u;
            cp_async16(d_i, nf > 0 ? s_i : X, 4u * nf);  // never a wild address
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const bool ok = row_ok && e < left;
                cp_async4(d_i + 4u * e, ok ? s_i + e : X, ok ? 4u : 0u);
            }
        }
    }
}

// Rounds to TF32, in place, the segments this thread staged with stage_chunk (same
// thread-to-segment map). Runs after cp_async_wait (own copies visible) and before the
// barrier that publishes the chunk, so no other thread can see unrounded values.
template <int SEGS_PER_THREAD>
__device__ __forceinline__ void round_chunk_tf32(float* slot, int tid)
{
    float* const first = slot + seg_offset(tid / SEGS, tid % SEGS);
#pragma unroll
    for (int i = 0; i < SEGS_PER_THREAD; ++i) {
        float4* p = reinterpret_cast<float4*>(first + i * ROWS_PER_PASS * BK);
        float4 v = *p;
        v.x = to_tf32(v.x);
        v.y = to_tf32(v.y);
        v.z = to_tf32(v.z);
        v.w = to_tf32(v.w);
        *p = v;
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ------------------------------------------------------------------------------------
// Hopper's warpgroup products (sm_90a): wgmma.mma_async reads both operands from the
// staged chunks, whose rows of 128 bytes with 16-byte segments XOR-swizzled by (row & 7)
// are exactly the 128-byte-swizzle K-major layout (8-row atoms of 1024 bytes).
// ------------------------------------------------------------------------------------
#define PK_WGMMA 1

// Shared-memory matrix descriptor of a K-major operand with the 128-byte swizzle, in two
// halves: the low one (start address >> 4 in bits 0-13, leading byte offset 1, unused by this
// layout) and the constant high one (stride byte offset 1024 >> 4 from one 8-row atom to
// the next, swizzle mode 1 in bits 62-63), so that a product's operands are 32-bit additions
// to a step's base rather than 64-bit ones.
__device__ __forceinline__ unsigned wgmma_desc_lo(unsigned addr) { return ((addr & 0x3FFFFu) >> 4) | (1u << 16); }
constexpr unsigned WGMMA_DESC_HI = (1024u >> 4) | (1u << 30);

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Orders this thread's ordinary shared-memory writes before the tensor cores' reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The text of an m64n128 warpgroup product: the 64 accumulators (operands 0-63), the
// descriptors' low halves (64, 65), whether to accumulate (66) and the descriptors' constant
// high half (67). INSTR names the product; TAIL ends its operand list.
#define PK_WGMMA_M64N128(INSTR, TAIL)                                                           \
    asm volatile(                                                                              \
        "{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %66, 0;\n"                          \
        "mov.b64 da, {%64, %67};\nmov.b64 db, {%65, %67};\n" INSTR " {"                          \
        PK_WGMMA_ACC_LIST "}, da, db, p, 1, 1" TAIL ";\n}\n"                                      \
        : PK_WGMMA_ACC_OPERANDS                                                                \
        : "r"(a_lo), "r"(b_lo), "r"(accumulate), "n"(WGMMA_DESC_HI))
#define PK_WGMMA_ACC_LIST \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PK_WGMMA_ACC_OPERANDS \
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d = A (64 x one 32-byte k-step, descriptor {a_lo, WGMMA_DESC_HI}) * B^T (128 x the same
// step, descriptor {b_lo, WGMMA_DESC_HI}) + (accumulate ? d : 0), fp32 d: the first product
// of a tile starts from zero without clearing d. The step is 8 TF32 values deep (MMA_TF32)
// or 16 bf16 or fp16 values (MMA_BF16, MMA_F16; both operands K-major, not transposed).
// d[r] of thread (warp w of the warpgroup, lane g * 4 + t) is element
// (16 w + g + 8 ((r >> 1) & 1), 8 (r >> 2) + 2 t + (r & 1)).
template <int kMma>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], unsigned a_lo, unsigned b_lo,
                                              int accumulate)
{
    static_assert(kMma == MMA_TF32 || kMma == MMA_BF16 || kMma == MMA_F16, "a tensor-core product");
    if constexpr (kMma == MMA_TF32) {
        PK_WGMMA_M64N128("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", "");
    } else if constexpr (kMma == MMA_BF16) {
        PK_WGMMA_M64N128("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 0, 0");
    } else {
        PK_WGMMA_M64N128("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", ", 0, 0");
    }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ------------------------------------------------------------------------------------
// Work units. A unit is one block of BM rows and a run of its column tiles; the CTAs of the
// persistent grid take units blockIdx.x, blockIdx.x + gridDim.x, ... A fold whose only row
// reductions are sums by label (Fold::kSplitColumns: partial sums of one row add up with
// atomics in any order) has the column tiles of each row block split into S runs, S chosen
// so that the grid gets about UNITS_PER_CTA units per CTA: with few row blocks, or a number
// that does not divide evenly over the CTAs, no CTA then idles while others finish their
// last row block. Other folds keep S = 1 (a unit is a whole row block), since their
// partials must meet in one CTA.
//
// The step sequence. A CTA walks steps (u, jt, kt): unit u, column tile jt of it (columns
// jt * BN ...), depth chunk kt (depth kt * BK ...), kt fastest. The producer runs
// STAGES - 1 steps ahead of the consumer, across column-tile and unit boundaries, so the
// next tile's (and the next unit's) loads overlap this tile's math.
// Slots: B chunk of step s -> B slot s % STAGES. A chunk:
//   streaming (A reloaded for every column tile): A slot s % STAGES, loaded every step;
//   resident  (A loaded once per unit, at its first tile): A slot (r * KT + kt) % NA for
//             the CTA's r-th unit, with NA = max(KT, STAGES) >= KT, so a unit's KT chunks
//             coexist, and NA >= STAGES, so a slot is refilled only after its last reader
//             (the producer is STAGES - 1 steps ahead, behind a barrier).
// ------------------------------------------------------------------------------------
constexpr long long UNITS_PER_CTA = 8;

struct Cursor {
    long long u;  // work unit
    long long rb; // its row block
    long long ub; // the row block's first unit
    int jt;       // column tile
    int jt_begin; // the unit's first column tile
    int jt_end;   // one past its last
    int kt;       // depth chunk
    int b_slot;   // step % STAGES
    int a_base;   // (r * KT) % NA for the CTA's r-th unit, used when A is resident

    __device__ __forceinline__ int a_slot(bool resident, int NA) const
    {
        if (!resident) return b_slot;
        const int s = a_base + kt;
        return s >= NA ? s - NA : s;
    }
    __device__ __forceinline__ bool loads_a(bool resident) const { return !resident || jt == jt_begin; }
    // The unit's first step: its row partials start here.
    __device__ __forceinline__ bool starts_unit() const { return jt == jt_begin && kt == 0; }
    // The unit's last column tile: its row partials are complete after it.
    __device__ __forceinline__ bool last_tile() const { return jt == jt_end - 1; }
};

// Bytes of the row exchange for partials of type State (the host's formula is the same).
template <class State>
__device__ __forceinline__ constexpr unsigned long long exchange_bytes()
{
    return (unsigned long long)BM * sizeof(State) * (unsigned long long)(WARPS_N - 1);
}

// ------------------------------------------------------------------------------------
// The staging plan of one CTA: sizes, work units, the shared-memory slots (A resident for a
// unit when the launch gave room for all its chunks, NA = max(KT, STAGES); streamed with B
// otherwise, NA = STAGES; too little room even for streaming traps), and the copies of a
// step. Shared memory (dynamic): [NA A slots][STAGES B slots][row exchange].
// ------------------------------------------------------------------------------------
struct Staging {
    const float* A;
    long long lda;
    const float* B;
    long long ldb;
    long long m, n, d;
    int KT;          // depth chunks
    int JT;          // column tiles
    long long R;     // row blocks
    long long S;     // runs of column tiles per row block (not symmetric)
    long long T;     // column tiles per run (symmetric: runs differ in number per row block)
    long long U;     // work units
    bool sym;        // one triangle of tiles (see Fold::kSymmetric)
    bool resident;
    int NA;          // A slots
    bool a_vec, b_vec;
    unsigned a_smem, b_smem;
    float* a_ptr;
    float* b_ptr;
    int tid;

    // False when this CTA has no work unit (it leaves, as a whole).
    __device__ __forceinline__ bool init(const float* A_, long long lda_, const float* B_,
                                         long long ldb_, long long m_, long long n_, long long d_,
                                         unsigned long long exchange, bool split_columns,
                                         bool symmetric, bool split_pair)
    {
        if (!init_units(A_, lda_, B_, ldb_, m_, n_, d_, split_columns, symmetric, split_pair))
            return false;

        unsigned dyn_bytes;
        asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn_bytes));
        const int resident_slots = KT > STAGES ? KT : STAGES;
        resident = smem_bytes(resident_slots, exchange) <= dyn_bytes;
        NA = resident ? resident_slots : STAGES;
        if (smem_bytes(NA, exchange) > dyn_bytes) __trap();  // launched with too little shared memory
        init_slots();
        return true;
    }

    // The sizes and work units (no shared memory); false when this CTA has none.
    __device__ __forceinline__ bool init_units(const float* A_, long long lda_, const float* B_,
                                               long long ldb_, long long m_, long long n_,
                                               long long d_, bool split_columns, bool symmetric,
                                               bool split_pair)
    {
        A = A_; lda = lda_; B = B_; ldb = ldb_; m = m_; n = n_; d = d_;
        if (m <= 0 || n <= 0) return false;
        R = (m + BM - 1) / BM;
        KT = d > 0 ? (int)((d + BK - 1) / BK) : 1;  // d == 0: one all-zero chunk
        JT = (int)((n + BN - 1) / BN);
        // The triangle only where the product is that of one matrix with itself: the whole
        // square, or (a rank's share) its corner from some row r0, rows [r0, r1) against
        // columns [r0, n), A and B both starting at row r0 and m a whole number of row blocks
        // (the diagonal block's tiles hold both halves of its entries only with all its rows).
        // split_pair: A and B are the launcher's two split copies of one matrix (a 3xTF32
        // product, Fold::kSplitOperands), whose product is as symmetric.
        sym = symmetric && split_columns && (A == B || split_pair) && lda == ldb && m <= n;
        if (sym && m < n && m % BM != 0) __trap();  // the launcher aligns shares to BM rows
        S = 1;
        T = 1;
        const long long wanted = UNITS_PER_CTA * (long long)gridDim.x;
        if (sym) {
            long long tiles = 0;
            for (long long rb = 0; rb < R; ++rb) tiles += JT - first_tile(rb);
            T = (tiles + wanted - 1) / wanted;
            U = 0;
            for (long long rb = 0; rb < R; ++rb) U += runs(rb);
        } else {
            if (split_columns && R < wanted) {
                S = (wanted + R - 1) / R;
                if (S > JT) S = JT;  // every run keeps at least one tile
            }
            U = R * S;
        }
        return (long long)blockIdx.x < U;
    }

    // The shared-memory slots: NA slots of A, then the B slots.
    __device__ __forceinline__ void init_slots()
    {
        tid = (int)threadIdx.x;
        a_vec = ((reinterpret_cast<unsigned long long>(A) & 15ull) == 0) && ((lda & 3) == 0);
        b_vec = ((reinterpret_cast<unsigned long long>(B) & 15ull) == 0) && ((ldb & 3) == 0);
        const unsigned smem_base = (unsigned)__cvta_generic_to_shared(pk_smem);
        if ((smem_base & 1023u) != 0) __trap();  // the swizzle atoms need 1024-byte alignment
        a_smem = smem_base;
        b_smem = smem_base + (unsigned)NA * (unsigned)A_SLOT_BYTES;
        a_ptr = reinterpret_cast<float*>(pk_smem);
        b_ptr = a_ptr + NA * A_SLOT_FLOATS;
    }

    // The first column tile of row block rb: 0, or for the triangle the first tile whose
    // columns start at or after the block's first row (BM is a multiple of BN).
    __device__ __forceinline__ int first_tile(long long rb) const
    {
        return sym ? (int)(rb * (BM / BN)) : 0;
    }
    // Runs of column tiles of row block rb (at least one each).
    __device__ __forceinline__ long long runs(long long rb) const
    {
        if (!sym) return S;
        const long long len = JT - first_tile(rb);
        return len > T ? (len + T - 1) / T : 1;
    }

    // Points the cursor at unit p.u: its row block (walking forward from the cursor's) and
    // its run of column tiles, run s of runs(rb) over the block's tiles (none empty).
    __device__ __forceinline__ void locate(Cursor& p) const
    {
        if (!sym) {  // S runs in every row block
            p.rb = p.u / S;
            p.ub = p.rb * S;
        }
        while (p.rb < R && p.u >= p.ub + runs(p.rb)) {
            p.ub += runs(p.rb);
            ++p.rb;
        }
        if (p.rb >= R) {  // past the last unit
            p.jt = p.jt_begin = p.jt_end = 0;
            return;
        }
        const long long lo = first_tile(p.rb), len = JT - lo, r = runs(p.rb), s = p.u - p.ub;
        p.jt = p.jt_begin = (int)(lo + s * len / r);
        p.jt_end = (int)(lo + (s + 1) * len / r);
    }

    // The cursor at this CTA's first step.
    __device__ __forceinline__ Cursor start() const
    {
        Cursor p{(long long)blockIdx.x, 0, 0, 0, 0, 0, 0, 0, 0};
        locate(p);
        return p;
    }

    // First row of the cursor's unit.
    __device__ __forceinline__ long long row0(const Cursor& p) const { return p.rb * BM; }

    // The next step.
    __device__ __forceinline__ void advance(Cursor& p) const
    {
        if (++p.b_slot == STAGES) p.b_slot = 0;
        if (++p.kt == KT) {
            p.kt = 0;
            if (++p.jt == p.jt_end) {
                p.u += (long long)gridDim.x;
                locate(p);
                if (resident) {
                    p.a_base += KT;  // a_base < NA and KT <= NA: one subtraction suffices
                    if (p.a_base >= NA) p.a_base -= NA;
                }
            }
        }
    }
    __device__ __forceinline__ int a_slot(const Cursor& p) const { return p.a_slot(resident, NA); }
    // Whether the cursor's tile stands for its mirror image too: one triangle is walked and
    // the tile lies past the diagonal block (the diagonal block's tiles hold both halves).
    __device__ __forceinline__ bool mirrors(const Cursor& p) const
    {
        return sym && (long long)p.jt * BN >= row0(p) + BM;
    }
    // The row exchange, after the B slots.
    __device__ __forceinline__ void* exchange() const { return b_ptr + STAGES * B_SLOT_FLOATS; }

    // Issues the copies of step p (none past the end) as one cp.async group.
    __device__ __forceinline__ void issue(const Cursor& p) const
    {
        if (p.u < U) {
            const long long k0 = (long long)p.kt * BK;
            if (p.loads_a(resident)) {
                stage_chunk<A_SEGS_PER_THREAD>(a_smem + (unsigned)(a_slot(p) * A_SLOT_BYTES), A, lda,
                                               row0(p), m, k0, d, a_vec, tid);
            }
            stage_chunk<B_SEGS_PER_THREAD>(b_smem + (unsigned)(p.b_slot * B_SLOT_BYTES), B, ldb,
                                           (long long)p.jt * BN, n, k0, d, b_vec, tid);
        }
        cp_async_commit();  // one group per step, empty past the end: uniform accounting
    }

    // Issues the first STAGES - 1 steps, advancing the producer's cursor.
    __device__ __forceinline__ void prime(Cursor& prod) const
    {
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s) {
            issue(prod);
            advance(prod);
        }
    }

    // Rounds this thread's copies of step p's chunks to TF32 (A only where p loads it), but for
    // the operands the launcher rounded in memory: bit 0 of kRounded is A, bit 1 B.
    template <int kRounded>
    __device__ __forceinline__ void round(const Cursor& p) const
    {
        if ((kRounded & 1) == 0 && p.loads_a(resident))
            round_chunk_tf32<A_SEGS_PER_THREAD>(a_ptr + a_slot(p) * A_SLOT_FLOATS, tid);
        if ((kRounded & 2) == 0) round_chunk_tf32<B_SEGS_PER_THREAD>(b_ptr + p.b_slot * B_SLOT_FLOATS, tid);
    }
};

// ------------------------------------------------------------------------------------
// Inner products of one staged chunk into the warp's WM x WN accumulator tile.
// acc[mt][nt][e] is element (row 16 mt + g + 8 (e / 2), column 8 nt + 2 t + e % 2) of the
// warp tile, g = lane / 4, t = lane % 4: the m16n8k8 accumulator layout (c0..c3).
// ------------------------------------------------------------------------------------
// Fragments of one k-step: A for the MT m16 tiles, B for the NT n8 tiles.
// a_row / b_row: shared address of this lane's ldmatrix row (warp row + lane % 16) in the
// slot; seg: byte offset of this lane's physical segment for the k-step.
__device__ __forceinline__ void load_fragments(unsigned (&fa)[MT][4], unsigned (&fb)[NT][2],
                                               unsigned a_row, unsigned b_row, unsigned seg)
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        // matrices: rows 0-7 k 0-3 | rows 8-15 k 0-3 | rows 0-7 k 4-7 | rows 8-15 k 4-7
        //        =  a0           | a1              | a2              | a3
        ldsm_x4(a_row + (unsigned)(mt * 16 * ROW_BYTES) + seg, fa[mt][0], fa[mt][1], fa[mt][2],
                fa[mt][3]);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        // matrices: n 0-7 k 0-3 | n 8-15 k 0-3 | n 0-7 k 4-7 | n 8-15 k 4-7
        //        =  b0 (tile 2np) | b0 (2np+1)  | b1 (2np)    | b1 (2np+1)
        ldsm_x4(b_row + (unsigned)(np * 16 * ROW_BYTES) + seg, fb[2 * np][0], fb[2 * np + 1][0],
                fb[2 * np][1], fb[2 * np + 1][1]);
    }
}

template <int kMma>
__device__ __forceinline__ void mma_chunk(float (&acc)[MT][NT][4], unsigned a_row, unsigned b_row,
                                          const unsigned (&seg)[KSTEPS])
{
    // Two fragment buffers: the next k-step's fragments load during this k-step's mma.
    unsigned fa[2][MT][4];
    unsigned fb[2][NT][2];
    load_fragments(fa[0], fb[0], a_row, b_row, seg[0]);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        const int cur = ks & 1;
        if (ks + 1 < KSTEPS) load_fragments(fa[cur ^ 1], fb[cur ^ 1], a_row, b_row, seg[ks + 1]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                mma_step<kMma>(acc[mt][nt], fa[cur][mt], fb[cur][nt][0], fb[cur][nt][1]);
            }
        }
    }
}

// Strict fp32: per 4-deep segment, 2 MT float4 of A (the lane's rows) and 2 NT float4 of
// B (its columns) from shared memory, 16 MT NT FMAs (512 by default), each element summed
// in ascending depth.
// a_row0 = warp row + g, b_row0 = warp column + 2 t.
__device__ __forceinline__ void ffma_chunk(float (&acc)[MT][NT][4], const float* As,
                                           const float* Bs, int a_row0, int b_row0)
{
#pragma unroll 2
    for (int q = 0; q < SEGS; ++q) {
        float4 a[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                a[mt][h] = *reinterpret_cast<const float4*>(As + seg_offset(a_row0 + 16 * mt + 8 * h, q));
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float4 b = *reinterpret_cast<const float4*>(Bs + seg_offset(b_row0 + 8 * nt + c, q));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float& x = acc[mt][nt][2 * h + c];
                        x = fmaf(a[mt][h].x, b.x, x);
                        x = fmaf(a[mt][h].y, b.y, x);
                        x = fmaf(a[mt][h].z, b.z, x);
                        x = fmaf(a[mt][h].w, b.w, x);
                    }
                }
            }
        }
    }
}

// ------------------------------------------------------------------------------------
// The generated part of a kernel is a FOLD: a struct with the kernel's parameters as
// members and
//   State              the per-row partials of the row reductions (4-byte fields);
//   Values             what one element contributes (its epilogue values);
//   identity()         the partials of no column;
//   eval<V>(p, i, j)   the Values of element (i, j) with product value p: every load of
//                      the epilogue happens here; i < m and j < n always (padded elements
//                      are evaluated at a clamped position and then dropped), so the calls
//                      of an unrolled tile share their loads; V is the variant below;
//   kVariants, variant()  specialisations of eval for a uniform argument (the integer
//                      exponent of a pow): variant() in [0, kVariants) says which one this
//                      launch's arguments select; 0 is the general one, right for every
//                      argument. Interior tiles run variant() (a branch per element, such
//                      as pow's test of its exponent, is then compiled away), edge tiles 0;
//   fold(s, x, i, j)   folds the Values x of element (i, j) into s and writes the element
//                      outputs; called only inside the matrix, by each thread in ascending
//                      j for each of its rows;
//   merge(s, o)        folds the partials of higher columns o into s (fixed merge order:
//                      lane ^ 1, lane ^ 2, then the column warps in order);
//   shfl_xor(s, mask)  the partials of lane ^ mask;
//   store(i, s)        writes row i's reductions;
//   flush(i, s)        adds this thread's pending by-label sum of row i to the output (each
//                      thread keeps one running sum per row and label: with columns sorted
//                      by label it flushes once per label, in any order once per element);
//                      the launcher zeroes the by-label output before the launch;
//   kSplitColumns      whether the only row reductions are sums by label (a row's columns
//                      may then be split over several CTAs, see Staging);
//   kByLabel           whether there is a sum by label (at most one); then, per finished
//                      tile, each element's by_label_value(x) is left in acc and summed by
//                      tile_sums_by_label (label(j), add_by_label(s, i, c, v));
//   kSymmetric         whether the spec is symmetric (kernel_ir's Form::Contraction): its only
//                      reduction a sum by label whose labels are those of the rows too, the
//                      product A A^T. Where A and B are then the same matrix (checked at run
//                      time), the kernel walks one triangle of tiles (Staging) and adds
//                      the mirror image of each tile above the diagonal block to the
//                      columns' rows (tile_column_sums, add_to(j, c, v));
//   kSplitOperands     whether the launcher passes a 3xTF32 product's two split copies of
//                      one matrix (rows [h, h, l] and [h, l, h]) as A and B: their product is
//                      symmetric, so the triangle of tiles holds for them as for A == B. Set
//                      for symmetric specs only (kSymmetric), whose launcher checks that the
//                      operands are one matrix; mirrored stores of split copies walk every tile;
//   kMirrorStores      whether the only output is one 16-bit store of the product and
//                      scalars (KernelSpec::stores_a_mirrorable_value): where A and B are
//                      the same matrix, the output square and the product MIRROR_MIN_DEPTH
//                      deep or more, the wgmma body walks one triangle of tiles and writes
//                      each tile's mirror image too (write_mirror).
// ------------------------------------------------------------------------------------

// How an epilogue treats the edges of the matrix: a tile wholly inside needs no check; a
// tile whose rows are inside but whose columns run past n skips those columns (one test per
// column, so the loads of each column are still shared by its rows); only the last block of
// rows evaluates padded elements at clamped positions and drops them.
enum Edge { kInside = 0, kColumns = 1, kAll = 2 };

__device__ __forceinline__ int edge_of(long long i0, long long j0, long long m, long long n)
{
    if (i0 + BM > m) return kAll;
    return j0 + BN > n ? kColumns : kInside;
}

// The label all BN columns of the tile from j0 on share (each lane reads four of them), or
// kNoLabel where they do not or the tile runs past n. Warp-uniform. In two parts, so that a
// caller can issue the reads well before it needs the answer: each lane's four labels
// (kNoLabel for a tile past n), then the warp's vote.
constexpr unsigned kNoLabel = 0xffffffffu;
struct LaneColumnLabels {
    unsigned l[4];
};
template <class Fold>
__device__ __forceinline__ LaneColumnLabels lane_column_labels(const Fold& fold, long long j0, long long n, int lane)
{
    static_assert(BN == 4 * 32, "four columns a lane");
    LaneColumnLabels c;
    const bool inside = j0 + BN <= n;
    const long long j = j0 + 4 * lane;
#pragma unroll
    for (int x = 0; x < 4; ++x) c.l[x] = inside ? fold.label(j + x) : kNoLabel;
    return c;
}
__device__ __forceinline__ unsigned shared_column_label(const LaneColumnLabels& c)
{
    const unsigned first = __shfl_sync(0xffffffffu, c.l[0], 0);
    const bool same = c.l[0] == first && c.l[1] == first && c.l[2] == first && c.l[3] == first;
    return __all_sync(0xffffffffu, same) ? first : kNoLabel;
}
template <class Fold>
__device__ __forceinline__ unsigned tile_column_label(const Fold& fold, long long j0, long long n, int lane)
{
    return shared_column_label(lane_column_labels(fold, j0, n, lane));
}

// The sums by label of a finished tile, over a thread's R rows and C columns of it: col(c)
// is the c-th column, row(r) the r-th row, state(r) its partials and value(r, c) the element's
// by-label value (left in acc by the epilogue). Where the C columns share one label (as they
// do, but at cluster boundaries, once sorted by label) each row adds one sum; else one pass
// per distinct label among them (ascending; labels past the bins, which includes the
// kNoLabel of columns past the matrix, are skipped), each row adding the sum of its elements
// of that label: two passes at a cluster boundary. The passes are a loop that is not
// unrolled (its body is: the values stay in registers), so the code of this rare case stays
// small and out of the way of the common one. uniform: the label of all the tile's columns
// where the caller knows it (tile_column_label), else kNoLabel.
template <int kEdge, int R, int C, class Fold, class ColOf, class RowOf, class StateOf, class ValueOf>
__device__ __forceinline__ void tile_sums_by_label(const Fold& fold, long long m, long long n,
                                                   ColOf col, RowOf row, StateOf state,
                                                   ValueOf value, unsigned uniform)
{
    if (uniform != kNoLabel) {
        // Every row's sum first, each in four interleaved partials (R x 4 independent chains
        // of C / 4 additions), then the rows' additions to their partials: summed row by row
        // around each addition's test, the sums were R chains of dependent additions, and
        // the epilogue waited on their latency.
        static_assert(C % 4 == 0, "four partials a row");
        float part[R][4];
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int q = 0; q < 4; ++q) part[r][q] = value(r, q);
#pragma unroll
        for (int c = 4; c < C; ++c)
#pragma unroll
            for (int r = 0; r < R; ++r) part[r][c & 3] += value(r, c);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long i = row(r);
            if (kEdge == kAll && i >= m) continue;
            fold.add_by_label(state(r), i, uniform, (part[r][0] + part[r][1]) + (part[r][2] + part[r][3]));
        }
        return;
    }
    // The labels are read again in each pass (from L1) rather than held: C more live
    // registers spill the strict body's accumulators.
    auto label_of = [&](int c) {
        const long long j = col(c);
        return (kEdge == kInside || j < n) ? fold.label(j) : kNoLabel;
    };
    unsigned L = kNoLabel;
#pragma unroll
    for (int c = 0; c < C; ++c) {
        const unsigned l = label_of(c);
        L = l < L ? l : L;
    }
#pragma unroll 1
    while ((long long)L < fold.width) {
        float sum[R];
#pragma unroll
        for (int r = 0; r < R; ++r) sum[r] = 0.0f;
        unsigned next = kNoLabel;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            const unsigned l = label_of(c);
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (l == L) sum[r] += value(r, c);
            next = (l > L && l < next) ? l : next;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long i = row(r);
            if (kEdge == kAll && i >= m) continue;
            fold.add_by_label(state(r), i, L, sum[r]);
        }
        L = next;
    }
}

// Epilogue of one finished column tile. For each of its 2 MT rows a thread visits its
// 2 NT columns in ascending j (nt, then c); tiles come in ascending order, so each row's
// columns reach fold() in ascending order.
// i_lane = row block origin + warp row origin + g; j_lane = tile column origin + warp
// column origin + 2 t.
template <int kEdge, int V, class Fold>
__device__ __forceinline__ void epilogue_elements(float (&acc)[MT][NT][4],
                                                  typename Fold::State (&st)[MT][2],
                                                  const Fold& fold, long long i_lane,
                                                  long long j_lane, long long m, long long n)
{
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const long long j = j_lane + 8 * nt + c;
            if (kEdge == kColumns && j >= n) continue;
            const long long jc = (kEdge == kAll && j >= n) ? n - 1 : j;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const long long i = i_lane + 16 * mt + 8 * h;
                    const long long ic = (kEdge == kAll && i >= m) ? m - 1 : i;
                    const typename Fold::Values x = fold.template eval<V>(acc[mt][nt][2 * h + c], ic, jc);
                    if (kEdge != kAll || (i < m && j < n)) fold.fold(st[mt][h], x, i, j);
                    if constexpr (Fold::kByLabel) acc[mt][nt][2 * h + c] = fold.by_label_value(x);
                }
            }
        }
    }
    if constexpr (Fold::kByLabel) {
        tile_sums_by_label<kEdge, 2 * MT, 2 * NT>(
            fold, m, n, [&](int c) { return j_lane + 8 * (c >> 1) + (c & 1); },
            [&](int r) { return i_lane + 16 * (r >> 1) + 8 * (r & 1); },
            [&](int r) -> typename Fold::State& { return st[r >> 1][r & 1]; },
            [&](int r, int c) { return acc[r >> 1][c >> 1][2 * (r & 1) + (c & 1)]; }, kNoLabel);
    }
}

// Runs tile.run<edge, variant>() for a finished tile: interior tiles with the fold's variant
// for this launch, edge tiles (few) with the general variant 0, so that only the interior
// code is compiled several times. (A struct with a member template rather than a generic
// lambda, which NVRTC compiles as host code.)
template <class Fold, class Tile>
__device__ __forceinline__ void for_tile(const Fold& fold, int edge, const Tile& tile)
{
    static_assert(Fold::kVariants >= 1 && Fold::kVariants <= 5, "at most 5 variants of eval");
    if (edge == kInside) {
        if constexpr (Fold::kVariants > 1) {
            switch (fold.variant()) {
            case 1: tile.template run<kInside, 1>(); return;
            case 2: if constexpr (Fold::kVariants > 2) { tile.template run<kInside, 2>(); return; } break;
            case 3: if constexpr (Fold::kVariants > 3) { tile.template run<kInside, 3>(); return; } break;
            case 4: if constexpr (Fold::kVariants > 4) { tile.template run<kInside, 4>(); return; } break;
            default: break;
            }
        }
        tile.template run<kInside, 0>();
    } else if (edge == kColumns) {
        tile.template run<kColumns, 0>();
    } else {
        tile.template run<kAll, 0>();
    }
}

// A finished tile on the mma.sync accumulator layout, for for_tile.
template <class Fold>
struct MmaTile {
    float (&acc)[MT][NT][4];
    typename Fold::State (&st)[MT][2];
    const Fold& fold;
    long long i_lane, j_lane, m, n;
    template <int kEdge, int V>
    __device__ __forceinline__ void run() const
    {
        epilogue_elements<kEdge, V>(acc, st, fold, i_lane, j_lane, m, n);
    }
};

// End of a work unit: merge the partials of each row and store.
// (1) The 4 lanes of a quad (same g) hold the same 2 MT rows, disjoint columns: butterfly
//     over lane bits 0 and 1; the quad leader's result is merge(merge(L0, L1), merge(L2, L3)).
// (2) The WARPS_N warps with the same wm hold the same rows, disjoint columns: warps
//     wn > 0 leave their partials in shared memory, warp wn == 0 merges them in wn order
//     and stores rows i < m.
// Every thread of the CTA reaches the barrier (a CTA-uniform call). The next write to
// xchg happens at the next unit's end, after at least one more step barrier.
template <class Fold>
__device__ __forceinline__ void finish_rows(typename Fold::State (&st)[MT][2], const Fold& fold,
                                            typename Fold::State* xchg, long long i0, long long m,
                                            int wm, int wn, int lane)
{
    using State = typename Fold::State;
    const int g = lane >> 2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long i = i0 + wm * WM + 16 * mt + 8 * h + g;
            if (i < m) fold.flush(i, st[mt][h]);
            Fold::merge(st[mt][h], Fold::shfl_xor(st[mt][h], 1));
            Fold::merge(st[mt][h], Fold::shfl_xor(st[mt][h], 2));
        }
    }
    const bool quad_leader = (lane & 3) == 0;
    if (wn > 0 && quad_leader) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                xchg[(wn - 1) * BM + wm * WM + 16 * mt + 8 * h + g] = st[mt][h];
            }
        }
    }
    __syncthreads();
    if (wn == 0 && quad_leader) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wm * WM + 16 * mt + 8 * h + g;
                State s = st[mt][h];
#pragma unroll
                for (int w = 1; w < WARPS_N; ++w) Fold::merge(s, xchg[(w - 1) * BM + r]);
                if (i0 + r < m) fold.store(i0 + r, s);
            }
        }
    }
}

// The smallest of the warp's values.
__device__ __forceinline__ unsigned warp_min(unsigned v)
{
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) {
        const unsigned o = __shfl_xor_sync(0xffffffffu, v, mask);
        v = o < v ? o : v;
    }
    return v;
}

// p ? a : b between two registers. (Written as a select of values: the compiler otherwise
// may select between the two array elements' addresses, which moves the array to local
// memory.)
__device__ __forceinline__ float select_value(bool p, float a, float b)
{
    float r;
    asm("{\n.reg .pred q;\nsetp.ne.u32 q, %3, 0;\nselp.f32 %0, %1, %2, q;\n}\n"
        : "=f"(r)
        : "f"(a), "f"(b), "r"((unsigned)p));
    return r;
}

// One exchange of reduce_scatter_columns: lanes whose bit `Mask` is clear keep the lower half
// of their first 2 Half values and send the upper half; the others the reverse. Each step is
// its own instantiation, so every index is a constant and v stays in registers (a loop over
// the steps, whose bounds the compiler may leave rolled, moves v to local memory).
template <int Mask, int Half, int C>
__device__ __forceinline__ void exchange_half(float (&v)[C], int lane)
{
    const bool upper = (lane & Mask) != 0;
#pragma unroll
    for (int x = 0; x < Half; ++x) {
        const float keep = select_value(upper, v[x + Half], v[x]);
        const float send = select_value(upper, v[x], v[x + Half]);
        v[x] = keep + __shfl_xor_sync(0xffffffffu, send, Mask);
    }
}

// Reduce-scatter over the 8 lanes that hold the same columns (lane bits 2-4, the rows g of the
// accumulator layouts): each lane enters C partial column sums and leaves with the complete
// sums of C / 8 of them in v[0 .. C / 8): v[x] is column x + (C / 2) b4 + (C / 4) b3 + (C / 8) b2
// of its C, b4 b3 b2 being its lane bits 4, 3, 2 (see scattered_column).
template <int C>
__device__ __forceinline__ void reduce_scatter_columns(float (&v)[C], int lane)
{
    static_assert(C % 8 == 0, "eight lanes share a thread's columns");
    exchange_half<16, C / 2>(v, lane);
    exchange_half<8, C / 4>(v, lane);
    exchange_half<4, C / 8>(v, lane);
}

// Which of its C columns reduce_scatter_columns left in a lane's v[x].
template <int C>
__device__ __forceinline__ int scattered_column(int x, int lane)
{
    return x + (C / 2) * ((lane >> 4) & 1) + (C / 4) * ((lane >> 3) & 1) + (C / 8) * ((lane >> 2) & 1);
}

// The other half of a symmetric fold's tile (Fold::kSymmetric): a tile strictly above the
// diagonal block stands for its mirror image too, whose rows are this tile's columns. Element
// (i, j)'s by-label value is added to row j in the bin of row i's label. Per warp, for each
// label L among its rows (ascending; rows past the matrix have none), 16 of its C columns at
// a time: each thread sums its R rows of label L per column, the 8 lanes sharing those
// columns reduce-scatter the 16 sums, and each lane adds its 2 to the output. row(r) is the
// r-th row, col(c) the c-th column, value(r, c) the element's by-label value; in both
// accumulator layouts (mma.sync's and wgmma's) the lanes that differ only in bits 2-4 hold
// the same columns.
template <int R, int C, class Fold, class RowOf, class ColOf, class ValueOf>
__device__ __forceinline__ void tile_column_sums(const Fold& fold, long long m, long long n,
                                                 RowOf row, ColOf col, ValueOf value, int lane)
{
    static_assert(C % 16 == 0, "columns go 16 at a time");
    unsigned rlab[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const long long i = row(r);
        rlab[r] = i < m ? fold.label(i) : 0xffffffffu;
    }
    unsigned lowest = 0xffffffffu;
#pragma unroll
    for (int r = 0; r < R; ++r) lowest = rlab[r] < lowest ? rlab[r] : lowest;
    unsigned L = warp_min(lowest);
    while ((long long)L < fold.width) {  // warp-uniform; labels past the bins are skipped
        bool all = true;
#pragma unroll
        for (int r = 0; r < R; ++r) all = all && rlab[r] == L;
        // 16 columns at a time: fewer live registers beside the tile's accumulators.
#pragma unroll
        for (int h = 0; h < C / 16; ++h) {
            float v[16];
            if (all) {
#pragma unroll
                for (int c = 0; c < 16; ++c) {
                    float sum = value(0, 16 * h + c);
#pragma unroll
                    for (int r = 1; r < R; ++r) sum += value(r, 16 * h + c);
                    v[c] = sum;
                }
            } else {
#pragma unroll
                for (int c = 0; c < 16; ++c) v[c] = 0.0f;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (rlab[r] == L) {
#pragma unroll
                        for (int c = 0; c < 16; ++c) v[c] += value(r, 16 * h + c);
                    }
                }
            }
            reduce_scatter_columns<16>(v, lane);
#pragma unroll
            for (int x = 0; x < 2; ++x) {
                const long long j = col(16 * h + scattered_column<16>(x, lane));
                if (j < n) fold.add_to(j, L, v[x]);
            }
        }
        unsigned next = 0xffffffffu;
#pragma unroll
        for (int r = 0; r < R; ++r) next = (rlab[r] > L && rlab[r] < next) ? rlab[r] : next;
        L = warp_min(next);
    }
}

#if defined(PK_WGMMA)
// mbarriers and named barriers.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
// Arrives on the barrier (release: this thread's earlier memory operations are visible to
// the threads its phase completion releases).
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}
// Waits (acquire) until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}
// mbar_wait for a thread with nothing else to do (the producer): between tests the thread
// may be suspended until the phase completes (or about a microsecond passes), instead of
// spinning on the scheduler that two consumer warps issue from.
__device__ __forceinline__ void mbar_wait_idle(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity), "n"(1000) : "memory");
    }
}
__device__ __forceinline__ void named_sync(unsigned id, unsigned count)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(unsigned id, unsigned count)
{
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}

// A warp's scratch for the mirror image's column sums (ws_column_sums): 8 rows of 128 + 8
// floats (the 8 extra keep both the stores and the loads free of bank conflicts).
constexpr int WS_SCRATCH_STRIDE = 136;
constexpr int WS_SCRATCH_BYTES = (THREADS / 32) * 8 * WS_SCRATCH_STRIDE * 4;

// Where a warpgroup's four warps meet to add their column sums of a tile before the output's
// atomics (one per column and label instead of four): each warp's sums of the tile's BN
// columns and their label (kNoLabel: the warp added its own).
struct WgShare {
    float sums[4][BN];
    unsigned label[4];
    unsigned pad[4];
};
// Two warpgroups, two tiles in flight each (alternating, so one barrier per tile suffices).
constexpr int WS_SHARE_BYTES = 2 * 2 * (int)sizeof(WgShare);

// The labels of a thread's R rows (kNoLabel past the matrix) and, where all the warp's rows
// have one label, that label (else kNoLabel): the rows of a unit, read once for its tiles.
template <int R>
struct RowLabels {
    unsigned lab[R];
    unsigned uniform;
};
template <int R, class Fold, class RowOf>
__device__ __forceinline__ RowLabels<R> row_labels(const Fold& fold, long long m, RowOf row)
{
    RowLabels<R> rl;
    bool same = true;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const long long i = row(r);
        rl.lab[r] = i < m ? fold.label(i) : kNoLabel;
        same = same && rl.lab[r] == rl.lab[0];
    }
    const unsigned first = __shfl_sync(0xffffffffu, rl.lab[0], 0);
    same = same && rl.lab[0] == first && first != kNoLabel;
    rl.uniform = __all_sync(0xffffffffu, same) ? first : kNoLabel;
    return rl;
}

// The mirror image's sums by label of a finished tile on the warpgroup layout (see
// tile_column_sums; the same sums, added in another order): for each label L among the
// warp's rows (rl: their labels; one pass where they share one), each thread sums its rows of
// label L per column, the warp's eight row groups meet in its scratch (8 rows of
// WS_SCRATCH_STRIDE floats), and each lane adds the complete sums of 4 of the tile's 128
// columns to the output. j0: the tile's first column.
template <class Fold, class ValueOf>
__device__ __forceinline__ void ws_column_sums(const Fold& fold, long long n, long long j0,
                                               const RowLabels<4>& rl, ValueOf value, float* scratch,
                                               WgShare& share, int w, unsigned bar_id, int lane)
{
    constexpr int R = 4, C = 32;
    const int g = lane >> 2, t = lane & 3;
    const bool uniform = rl.uniform != kNoLabel;
    unsigned L;
    if (uniform) {
        L = rl.uniform;
    } else {
        unsigned lowest = kNoLabel;
#pragma unroll
        for (int r = 0; r < R; ++r) lowest = rl.lab[r] < lowest ? rl.lab[r] : lowest;
        L = warp_min(lowest);
    }
    while ((long long)L < fold.width) {  // warp-uniform; labels past the bins are skipped
        bool all = uniform;
        if (!uniform) {
            all = true;
#pragma unroll
            for (int r = 0; r < R; ++r) all = all && rl.lab[r] == L;
        }
        float* const mine = scratch + g * WS_SCRATCH_STRIDE + 2 * t;
        if (all) {
            float v[C];
#pragma unroll
            for (int c = 0; c < C; ++c) v[c] = (value(0, c) + value(1, c)) + (value(2, c) + value(3, c));
#pragma unroll
            for (int q = 0; q < C / 2; ++q) *reinterpret_cast<float2*>(mine + 8 * q) = make_float2(v[2 * q], v[2 * q + 1]);
        } else {
            bool in[R];
#pragma unroll
            for (int r = 0; r < R; ++r) in[r] = rl.lab[r] == L;
#pragma unroll
            for (int q = 0; q < C / 2; ++q) {
                float2 v = make_float2(0.0f, 0.0f);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    v.x += in[r] ? value(r, 2 * q) : 0.0f;
                    v.y += in[r] ? value(r, 2 * q + 1) : 0.0f;
                }
                *reinterpret_cast<float2*>(mine + 8 * q) = v;
            }
        }
        __syncwarp();
        // The eight row groups' sums of this lane's four columns, added as a tree (depth
        // three rather than a chain of seven).
        float4 part[8];
#pragma unroll
        for (int h = 0; h < 8; ++h) part[h] = *reinterpret_cast<const float4*>(scratch + h * WS_SCRATCH_STRIDE + 4 * lane);
#pragma unroll
        for (int step = 1; step < 8; step *= 2)
#pragma unroll
            for (int h = 0; h < 8; h += 2 * step) {
                part[h].x += part[h + step].x;
                part[h].y += part[h + step].y;
                part[h].z += part[h + step].z;
                part[h].w += part[h + step].w;
            }
        const float4 s = part[0];
        __syncwarp();  // the scratch is free for the next label
        if (uniform) {  // the warpgroup adds it up below
            *reinterpret_cast<float4*>(&share.sums[w][4 * lane]) = s;
            break;
        }
        const long long j = j0 + 4 * lane;
        if (j < n) fold.add_to(j, L, s.x);
        if (j + 1 < n) fold.add_to(j + 1, L, s.y);
        if (j + 2 < n) fold.add_to(j + 2, L, s.z);
        if (j + 3 < n) fold.add_to(j + 3, L, s.w);
        unsigned next = kNoLabel;
#pragma unroll
        for (int r = 0; r < R; ++r) next = (rl.lab[r] > L && rl.lab[r] < next) ? rl.lab[r] : next;
        L = warp_min(next);
    }
    if (lane == 0) share.label[w] = uniform && (long long)rl.uniform < fold.width ? rl.uniform : kNoLabel;
    named_sync(bar_id, 128);
    // Lane L of warp w: column 32 w + L, the four warps' sums in warp order, one atomic per
    // run of equal labels.
    const int c = 32 * w + lane;
    const long long j = j0 + c;
    unsigned cur = kNoLabel;
    float sum = 0.0f;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
        const unsigned lx = share.label[x];
        if (lx == kNoLabel) continue;
        const float v = share.sums[x][c];
        if (lx != cur) {
            if (cur != kNoLabel && j < n) fold.add_to(j, cur, sum);
            cur = lx;
            sum = v;
        } else {
            sum += v;
        }
    }
    if (cur != kNoLabel && j < n) fold.add_to(j, cur, sum);
}

// Rows of eight columns for a fold that only stores (kStoresOnly, interior tiles): in each
// group of four 8-column blocks, the four lanes of a quad (same row g, t = 0..3) swap their
// column pairs so that lane t holds block t's eight columns in order, and the quad writes
// them in 16-byte stores instead of two- or four-byte stores that each touch eight rows'
// sectors: block by block where rows start on 16 bytes (wgmma_store_rows, two stores per
// f32 output), and for 16-bit outputs in the 16-byte pieces of rows of any alignment
// (wgmma_store_half_rows).
// a[s][c] of lane t, before: columns 8 s + 2 t + c of the group; after: columns 8 t + 2 s + c.
__device__ __forceinline__ void quad_transpose(float (&a)[4][2], int t)
{
#pragma unroll
    for (int r = 1; r <= 2; r <<= 1) {
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            if (s & r) continue;
            const bool upper = (t & r) != 0;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float send = upper ? a[s][c] : a[s ^ r][c];
                const float got = __shfl_xor_sync(0xffffffffu, send, r);
                if (upper) a[s][c] = got; else a[s ^ r][c] = got;
            }
        }
    }
}

// Mirror-image stores (Fold::kMirrorStores: one 16-bit store of a value symmetric in i and j,
// from A A^T): the triangle of tiles is computed, and a tile strictly above the diagonal block
// stands for its mirror image too, whose rows are this tile's columns. As the epilogue
// evaluates its elements each warpgroup stages them, 16-bit, transposed in shared memory
// (rows of MIRROR_STRIDE values: with the padding the lanes of one store hit distinct banks);
// then each quad of lanes writes four of the mirror's rows, eight columns a lane, in the
// 16-byte pieces of rows of any alignment (store_half_pieces). Named barrier 5 + wg brackets
// the stage.
constexpr int MIRROR_STRIDE = 136;
// The triangle only for products at least this deep: shallower ones are bound by their
// stores, which the stage slows, and compute and write every tile (the host's
// PIPELINE_MIRROR_MIN_DEPTH).
constexpr long long MIRROR_MIN_DEPTH = 256;
constexpr unsigned long long MIRROR_BYTES = 2ull * 128 * MIRROR_STRIDE * 2;  // both warpgroups

__device__ __forceinline__ void warpgroup_barrier(int id)
{
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// The warpgroup's part of the stage (null: no mirror for this tile).
__device__ __forceinline__ unsigned short* warpgroup_stage(unsigned short* stage)
{
    return stage ? stage + ((threadIdx.x >> 7) & 1) * 128 * MIRROR_STRIDE : nullptr;
}

// Stages element (row 16 w + g + row_base, column 2 t + col_base) of the warpgroup's tile
// (the accumulator layout's lane-dependent parts added here).
template <class Fold>
__device__ __forceinline__ void stage_for_mirror(const Fold& fold, unsigned short* stage,
                                                 const typename Fold::Values& x, int row_base,
                                                 int col_base)
{
    if constexpr (Fold::kMirrorStores) {
        if (stage) {
            const int lane = threadIdx.x & 31;
            const int r = row_base + 16 * ((threadIdx.x >> 5) & 3) + (lane >> 2);
            const int col = col_base + 2 * (lane & 3);
            const unsigned short h =
                (unsigned short)Fold::template pack2<0>(Fold::template store_value<0>(x), 0.0f);
            const unsigned addr =
                (unsigned)__cvta_generic_to_shared(stage) + 2u * (unsigned)(col * MIRROR_STRIDE + r);
            // Ordered against the stage's barriers and reads (all volatile asm) without a
            // memory clobber, so the tile's global stores may move around it.
            asm volatile("st.shared.u16 [%0], %1;" ::"r"(addr), "h"(h));
        }
    }
}

// The values of one row group (columns 32 grp .. 32 grp + 31 of the tile) of row i = i_lane
// + 64 mi + 8 h: x[s][c] is column 8 (4 grp + s) + 2 t + c, folded as it is evaluated, and
// staged for the tile's mirror image where `stage` is given (see write_mirror).
template <int V, class Fold>
__device__ __forceinline__ void row_group_values(float (&acc)[2][64], typename Fold::State (&st)[2][2],
                                                 const Fold& fold, int mi, int h, int grp,
                                                 long long i, long long j_lane,
                                                 typename Fold::Values (&x)[4][2],
                                                 unsigned short* stage = nullptr)
{
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int q = 4 * grp + s;
            const long long j = j_lane + 8 * q + c;
            x[s][c] = fold.template eval<V>(acc[mi][4 * q + 2 * h + c], i, j);
            fold.template fold<false>(st[mi][h], x[s][c], i, j);
            stage_for_mirror(fold, stage, x[s][c], 64 * mi + 8 * h, 8 * q + c);
        }
    }
}

// Store K's values of a row group, quad-transposed: a[s][c] is column 8 t + 2 s + c of it.
template <int K, class Fold>
__device__ __forceinline__ void lane_block(const typename Fold::Values (&x)[4][2], int t,
                                           float (&a)[4][2])
{
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int c = 0; c < 2; ++c) a[s][c] = Fold::template store_value<K>(x[s][c]);
    quad_transpose(a, t);
}

template <int K, class Fold>
__device__ __forceinline__ void store_row_groups(const Fold& fold, const typename Fold::Values (&x)[4][2],
                                                 long long i, long long j_group, int t)
{
    float a[4][2];
    lane_block<K, Fold>(x, t, a);
    const float v[8] = {a[0][0], a[0][1], a[1][0], a[1][1], a[2][0], a[2][1], a[3][0], a[3][1]};
    fold.template store8<K>(i, j_group + 8 * t, v);
    if constexpr (K + 1 < Fold::kStores) store_row_groups<K + 1>(fold, x, i, j_group, t);
}

template <int V, class Fold>
__device__ __forceinline__ void wgmma_store_rows(float (&acc)[2][64], typename Fold::State (&st)[2][2],
                                                 const Fold& fold, long long i_lane, long long j_lane)
{
    const int t = threadIdx.x & 3;
    const long long j_tile = j_lane - 2 * t;
#pragma unroll
    for (int grp = 0; grp < 4; ++grp) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const long long i = i_lane + 64 * mi + 8 * h;
                typename Fold::Values x[4][2];
                row_group_values<V>(acc, st, fold, mi, h, grp, i, j_lane, x);
                store_row_groups<0>(fold, x, i, j_tile + 32 * grp, t);
            }
        }
    }
}

// Two values rounded to bf16 / fp16 (to nearest even) in one word, `lo` in the low half.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Value e (0..7) of eight 16-bit values packed two a word, low half first.
__device__ __forceinline__ unsigned short half_of(const unsigned (&w)[4], int e)
{
    return (unsigned short)(w[e >> 1] >> (16 * (e & 1)));
}

// Values p..p+7 (p = 0..7) of the sixteen in lo (values 0..7) and hi (8..15), packed as they
// are: a two-stage select by words, then a byte permutation for an odd p.
__device__ __forceinline__ void window8(const unsigned (&lo)[4], const unsigned (&hi)[4], int p,
                                        unsigned (&out)[4])
{
    const unsigned e[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    unsigned f[6];
#pragma unroll
    for (int k = 0; k < 6; ++k) f[k] = (p & 4) ? e[k + 2] : e[k];
    unsigned g[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) g[k] = (p & 2) ? f[k + 1] : f[k];
    const unsigned sel = (p & 1) ? 0x5432u : 0x3210u;
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = __byte_perm(g[k], g[k + 1], sel);
}

// Lane t's eight packed values w (columns j_tile + 32 grp + 8 t ...) of row i of store K,
// written in the row's 16-byte pieces (see store_half_row_group); `live` false writes nothing
// (the shuffle still runs, so that every lane of the warp takes part).
template <int K, class Fold>
__device__ __forceinline__ void store_half_pieces(const Fold& fold, const unsigned (&w)[4],
                                                  unsigned (&prev)[4], long long i,
                                                  long long j_tile, int grp, int t, int p,
                                                  bool carry, bool live)
{
    unsigned next[4], lo[4], piece[4];
    const int next_lane = (threadIdx.x & 28) | ((t + 1) & 3);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        next[s] = __shfl_sync(0xffffffffu, w[s], next_lane);
        lo[s] = carry ? prev[s] : w[s];
    }
    window8(lo, next, p, piece);
    const long long j_group = j_tile + 32 * grp;
    if (live) {
        if (!carry || grp > 0) {
            fold.template store16<K>(i, j_group + (carry ? -8 : 8 * t) + p, piece);
        } else {
#pragma unroll
            for (int e = 0; e < 7; ++e)
                if (e < p) fold.template store_half<K>(i, j_tile + e, half_of(next, e));
        }
        if (carry && grp == 3) {
#pragma unroll
            for (int e = 1; e < 8; ++e)
                if (e >= p) fold.template store_half<K>(i, j_group + 24 + e, half_of(w, e));
        }
    }
#pragma unroll
    for (int s = 0; s < 4; ++s) prev[s] = w[s];
}

// One row group (32 columns, lane t's eight after the quad transpose) of every 16-bit store,
// for rows of any alignment: a row whose start lies `off` values past 16 bytes (p = 8 - off
// values before the next boundary) is written in the 16-byte pieces that lie on boundaries.
// Lane t's piece starts p values into its own block and ends in lane t + 1's; lane 3's starts
// in its previous group's block (`prev`) and ends in lane 0's of this group, so at the first
// group lane 3 writes the p values before the tile's first boundary one by one instead, and
// after the last group the off values after its last boundary.
template <int K, class Fold>
__device__ __forceinline__ void store_half_row_group(const Fold& fold,
                                                     const typename Fold::Values (&x)[4][2],
                                                     unsigned (&prev)[Fold::kStores][4], long long i,
                                                     long long j_tile, int grp, int t, int p,
                                                     bool carry)
{
    float a[4][2];
    lane_block<K, Fold>(x, t, a);
    unsigned w[4];
#pragma unroll
    for (int s = 0; s < 4; ++s) w[s] = Fold::template pack2<K>(a[s][0], a[s][1]);
    store_half_pieces<K>(fold, w, prev[K], i, j_tile, grp, t, p, carry, true);
    if constexpr (K + 1 < Fold::kStores)
        store_half_row_group<K + 1>(fold, x, prev, i, j_tile, grp, t, p, carry);
}

template <int V, class Fold>
__device__ __forceinline__ void wgmma_store_half_rows(float (&acc)[2][64],
                                                      typename Fold::State (&st)[2][2],
                                                      const Fold& fold, long long i_lane,
                                                      long long j_lane, unsigned short* stage)
{
    const int t = threadIdx.x & 3;
    const long long j_tile = j_lane - 2 * t;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long i = i_lane + 64 * mi + 8 * h;
            const int off = fold.row_offset(i);
            const int p = (8 - off) & 7;
            const bool carry = t == 3 && off != 0;
            unsigned prev[Fold::kStores][4] = {};
#pragma unroll
            for (int grp = 0; grp < 4; ++grp) {
                typename Fold::Values x[4][2];
                row_group_values<V>(acc, st, fold, mi, h, grp, i, j_lane, x, stage);
                store_half_row_group<0>(fold, x, prev, i, j_tile, grp, t, p, carry);
            }
        }
    }
}

// Bytes of the row exchange of a fold over depth d: its partials', or from MIRROR_MIN_DEPTH
// deep the mirror's stage (the host's LaunchShape::pipelined_shared_bytes gives the same).
template <class Fold>
__device__ __forceinline__ unsigned long long fold_exchange_bytes(long long d)
{
    const unsigned long long partials = exchange_bytes<typename Fold::State>();
    return Fold::kMirrorStores && d >= MIRROR_MIN_DEPTH && MIRROR_BYTES > partials ? MIRROR_BYTES
                                                                                   : partials;
}

// The mirror image of the staged tile: rows j_tile + 0..127 (those below n), columns i_tile +
// 0..127 (the warpgroup's rows).
template <class Fold>
__device__ __forceinline__ void write_mirror(const Fold& fold, const unsigned short* stage,
                                             long long i_tile, long long j_tile, long long n)
{
    const int lane = threadIdx.x & 31;
    const int t = lane & 3;
    const int quad = 8 * ((threadIdx.x >> 5) & 3) + (lane >> 2);
#pragma unroll 1
    for (int rr = 0; rr < 4; ++rr) {
        const int col = quad + 32 * rr;
        const long long row = j_tile + col;  // the mirror's row
        const int off = fold.row_offset(row);
        const int p = (8 - off) & 7;
        const bool carry = t == 3 && off != 0;
        unsigned prev[4] = {};
#pragma unroll
        for (int grp = 0; grp < 4; ++grp) {
            unsigned words[4];
            const unsigned addr = (unsigned)__cvta_generic_to_shared(stage) +
                                  2u * (unsigned)(col * MIRROR_STRIDE + 32 * grp + 8 * t);
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(words[0]), "=r"(words[1]), "=r"(words[2]), "=r"(words[3])
                         : "r"(addr));
            store_half_pieces<0>(fold, words, prev, row, i_tile, grp, t, p, carry, row < n);
        }
    }
}

// Epilogue of one finished column tile on the warpgroup layout: acc[mi][r] is element
// (i_lane + 64 mi + 8 ((r >> 1) & 1), j_lane + 8 (r >> 2) + (r & 1)) with
// i_lane = row block origin + 128 wg + 16 w + g and j_lane = tile column origin + 2 t.
// Columns in ascending order for each row, as epilogue_elements.
template <int kEdge, int V, class Fold>
__device__ __forceinline__ void wgmma_epilogue(float (&acc)[2][64],
                                               typename Fold::State (&st)[2][2], const Fold& fold,
                                               long long i_lane, long long j_lane, long long m,
                                               long long n, unsigned col_label,
                                               unsigned short* stage = nullptr)
{
    if constexpr (Fold::kStoresOnly && kEdge == kInside) {
        if (fold.wide_rows()) {
            if constexpr (Fold::kHalfStores)
                wgmma_store_half_rows<V>(acc, st, fold, i_lane, j_lane, stage);
            else
                wgmma_store_rows<V>(acc, st, fold, i_lane, j_lane);
            return;
        }
    }
#pragma unroll
    for (int q = 0; q < 16; ++q) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const long long j = j_lane + 8 * q + c;
            if (kEdge == kColumns && j >= n) continue;
            const long long jc = (kEdge == kAll && j >= n) ? n - 1 : j;
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const long long i = i_lane + 64 * mi + 8 * h;
                    const long long ic = (kEdge == kAll && i >= m) ? m - 1 : i;
                    const typename Fold::Values x = fold.template eval<V>(acc[mi][4 * q + 2 * h + c], ic, jc);
                    if (kEdge != kAll || (i < m && j < n)) fold.fold(st[mi][h], x, i, j);
                    if constexpr (Fold::kByLabel) acc[mi][4 * q + 2 * h + c] = fold.by_label_value(x);
                    stage_for_mirror(fold, stage, x, 64 * mi + 8 * h, 8 * q + c);
                }
            }
        }
    }
    if constexpr (Fold::kByLabel) {
        tile_sums_by_label<kEdge, 4, 32>(
            fold, m, n, [&](int c) { return j_lane + 8 * (c >> 1) + (c & 1); },
            [&](int r) { return i_lane + 64 * (r >> 1) + 8 * (r & 1); },
            [&](int r) -> typename Fold::State& { return st[r >> 1][r & 1]; },
            [&](int r, int c) { return acc[r >> 1][4 * (c >> 1) + 2 * (r & 1) + (c & 1)]; }, col_label);
    }
}

// A finished tile on the warpgroup accumulator layout, for for_tile.
template <class Fold>
struct WgmmaTile {
    float (&acc)[2][64];
    typename Fold::State (&st)[2][2];
    const Fold& fold;
    long long i_lane, j_lane, m, n;
    unsigned col_label;  // the label of all the tile's columns, or kNoLabel
    unsigned short* mirror_stage = nullptr;  // where the tile's mirror image is also written
    template <int kEdge, int V>
    __device__ __forceinline__ void run() const
    {
        unsigned short* stage = warpgroup_stage(mirror_stage);
        const int wg = (threadIdx.x >> 7) & 1;
        if constexpr (Fold::kMirrorStores) {
            if (stage) warpgroup_barrier(5 + wg);  // the previous mirror's reads are done
        }
        wgmma_epilogue<kEdge, V>(acc, st, fold, i_lane, j_lane, m, n, col_label, stage);
        if constexpr (Fold::kMirrorStores) {
            if (stage) {
                warpgroup_barrier(5 + wg);  // the stage is complete
                const int lane = threadIdx.x & 31;
                write_mirror(fold, stage, i_lane - 16 * ((threadIdx.x >> 5) & 3) - (lane >> 2),
                             j_lane - 2 * (lane & 3), n);
            }
        }
    }
};

// End of a work unit on the warpgroup layout: each row's 128 columns of a tile lie in one
// quad of lanes, so its partials merge by two shuffles and the quad's first lane stores them.
template <class Fold>
__device__ __forceinline__ void wgmma_finish_rows(typename Fold::State (&st)[2][2], const Fold& fold,
                                                  long long i_lane, long long m, int t)
{
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const long long i = i_lane + 64 * mi + 8 * h;
            if (i < m) fold.flush(i, st[mi][h]);
            Fold::merge(st[mi][h], Fold::shfl_xor(st[mi][h], 1));
            Fold::merge(st[mi][h], Fold::shfl_xor(st[mi][h], 2));
            if (t == 0 && i < m) fold.store(i, st[mi][h]);
        }
    }
}

// The tensor-core kernel body on Hopper (TF32 or packed 16-bit operands): the same tiles, ring and step sequence as contraction(),
// with each warpgroup (warps 0-3 and 4-7) computing 128 rows x 128 columns as two
// m64n128k8 products per 8-deep step, straight from the staged chunks. A step issues its
// products and then the copies of the step STAGES - 1 ahead, which run beside them; the
// products are waited for before the next step's barrier (so the slots the next copies
// refill are free), which lets them overlap that step's copy wait and TF32 rounding too.
// Each row's 128 columns of a tile lie in one quad of lanes: its partials merge by two
// shuffles.
template <int kMma, int kRounded, class Fold>
__device__ __forceinline__ void contraction_wgmma(const float* A, long long lda, const float* B,
                                                  long long ldb, long long m, long long n,
                                                  long long d, const Fold& fold)
{
    using State = typename Fold::State;
    Staging sg;
    if (!sg.init(A, lda, B, ldb, m, n, d, fold_exchange_bytes<Fold>(d), Fold::kSplitColumns,
                 Fold::kSymmetric ||
                     (Fold::kMirrorStores && m == n && d >= MIRROR_MIN_DEPTH),
                 Fold::kSplitOperands))
        return;

    const int lane = sg.tid & 31;
    const int warp = sg.tid >> 5;
    const int wg = warp >> 2;  // warpgroup: rows 128 wg ...
    const int w = warp & 3;    // warp of the warpgroup: rows 16 w ... of each 64
    const int g = lane >> 2;
    const int t = lane & 3;

    Cursor prod = sg.start();
    Cursor cons = prod;
    sg.prime(prod);

    float acc[2][64];  // each tile's first product overwrites it (accumulate = 0)
    State st[2][2];

    while (cons.u < sg.U) {
        const long long i0 = sg.row0(cons);
        if (cons.starts_unit()) {  // a new unit: fresh partials
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) st[mi][h] = Fold::identity();
        }

        cp_async_wait<STAGES - 2>();
        if constexpr (kMma == MMA_TF32) sg.round<kRounded>(cons);
        fence_proxy_async();
        wgmma_wait_all();  // the previous step's products are done: its slots may be refilled
        __syncthreads();

        const unsigned a_rows =
            sg.a_smem + (unsigned)(sg.a_slot(cons) * A_SLOT_BYTES) + (unsigned)(wg * 128 * ROW_BYTES);
        const unsigned b_rows = sg.b_smem + (unsigned)(cons.b_slot * B_SLOT_BYTES);
        // The descriptors of the step's first operands; the others are constant offsets
        // from them (in the address field, counted in 16 bytes; shared addresses stay below
        // 2^18 bytes, so the field never carries).
        const unsigned da = wgmma_desc_lo(a_rows);
        const unsigned db = wgmma_desc_lo(b_rows);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                wgmma_m64n128<kMma>(acc[mi], da + (unsigned)((mi * 64 * ROW_BYTES + ks * 32) >> 4),
                                    db + (unsigned)((ks * 32) >> 4), ks > 0 || cons.kt > 0);
            }
        }
        wgmma_commit();
        // The copies of the step STAGES - 1 ahead go out while the products run (they refill
        // the previous step's slots, whose products every warp waited for before the barrier).
        sg.issue(prod);
        sg.advance(prod);

        if (cons.kt == sg.KT - 1) {  // the column tile is complete: epilogue and reductions
            wgmma_wait_all();
            const long long i_lane = i0 + wg * 128 + w * 16 + g;
            const long long j_lane = (long long)cons.jt * BN + 2 * t;
            unsigned col_label = kNoLabel;
            if constexpr (Fold::kByLabel) col_label = tile_column_label(fold, (long long)cons.jt * BN, n, lane);
            unsigned short* mirror = nullptr;
            if constexpr (Fold::kMirrorStores) {
                if (sg.mirrors(cons)) mirror = static_cast<unsigned short*>(sg.exchange());
            }
            for_tile(fold, edge_of(i0, (long long)cons.jt * BN, m, n),
                     WgmmaTile<Fold>{acc, st, fold, i_lane, j_lane, m, n, col_label, mirror});
            if constexpr (Fold::kSymmetric) {
                // Above the diagonal block: the mirror image's sums too (acc now holds the
                // by-label values).
                if (sg.mirrors(cons)) {
                    tile_column_sums<4, 32>(
                        fold, m, n, [&](int r) { return i_lane + 64 * (r >> 1) + 8 * (r & 1); },
                        [&](int c) { return j_lane + 8 * (c >> 1) + (c & 1); },
                        [&](int r, int c) { return acc[r >> 1][4 * (c >> 1) + 2 * (r & 1) + (c & 1)]; },
                        lane);
                }
            }
            if (cons.last_tile()) wgmma_finish_rows(st, fold, i_lane, m, t);
        }
        sg.advance(cons);
    }
    wgmma_wait_all();
    cp_async_wait<0>();  // only empty groups remain; leave nothing in flight
}

// ------------------------------------------------------------------------------------
// The warp-specialised tensor-core body on Hopper (sm_90a), for operands the launcher rounded
// to TF32 or packed in 16-bit pairs (rows of a multiple of 16 bytes) and depths of at most WS_MAX_KT chunks. A CTA of
// WS_THREADS: the eight warps of contraction_wgmma's two warpgroups consume; one thread of a
// third warpgroup produces (its registers move to the consumers with setmaxnreg). The
// producer has the tensor memory accelerator copy every step's chunks (A's, resident for a
// unit, at its first tile; B's into a ring of WS_B_STAGES slots) from the launcher's tensor
// maps, which lay them out swizzled as the products read them and fill zeros outside the
// matrix; each step lands on its slot's `full` mbarrier. Each consumer warpgroup waits on
// `full`, issues its products and, once they are done, releases the slot through `empty`
// (one arrival per warp) before it runs the tile's epilogue, so the next chunks arrive while
// it computes. With WS_TURNS the two warpgroups take turns on the tensor cores (named
// barriers 1 and 2). A unit's A chunks are replaced only after every consumer warp has
// finished the unit's products (`a_empty`). The mirror images' sums by label go through
// shared memory (ws_column_sums; named barriers 3 and 4).
// Shared memory: [KT A slots][WS_B_STAGES B slots][column scratch][WgShare x 4][mbarriers].
// ------------------------------------------------------------------------------------
constexpr int WS_B_STAGES = 6;
constexpr int WS_MAX_KT = 2;
constexpr bool WS_TURNS = true;
constexpr int WS_THREADS = THREADS + 128;  // the producer's warpgroup: one thread works
constexpr int WS_PRODUCER_REGS = 40;       // registers per thread after setmaxnreg
constexpr int WS_CONSUMER_REGS = 232;
static_assert(128 * WS_PRODUCER_REGS + THREADS * WS_CONSUMER_REGS <= 65536,
              "the register file holds both roles");
constexpr int WS_BARRIERS = 2 * WS_B_STAGES + 1;

// A position in the ring of B slots: the slot and the parity of its use (step / WS_B_STAGES),
// counted without 64-bit divisions.
struct Ring {
    int slot = 0;
    unsigned phase = 0;
    __device__ __forceinline__ void next()
    {
        if (++slot == WS_B_STAGES) {
            slot = 0;
            phase ^= 1u;
        }
    }
};

// Bytes of dynamic shared memory of the warp-specialised body for KT chunks of depth (the
// host's formula is the same).
__device__ __forceinline__ unsigned long long ws_smem_bytes(int kt)
{
    return (unsigned long long)kt * A_SLOT_BYTES + (unsigned long long)WS_B_STAGES * B_SLOT_BYTES +
           WS_SCRATCH_BYTES + WS_SHARE_BYTES + 8ull * WS_BARRIERS;
}

// Arrives on the barrier and adds `bytes` to the transfer count its phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}

// The box of the tensor map at (depth k0, row row0) into shared memory at dst (1024-byte
// aligned), completing `bar`'s transfer count as it lands.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TensorMap* map, int k0, int row0,
                                            unsigned bar)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(k0), "r"(row0), "r"(bar)
        : "memory");
}

// ta, tb: the tensor maps of A (boxes of BK x BM) and B (BK x BN).
template <int kMma, class Fold>
__device__ __forceinline__ void contraction_ws(const float* A, long long lda, const float* B,
                                               long long ldb, long long m, long long n, long long d,
                                               const Fold& fold, const TensorMap* ta,
                                               const TensorMap* tb)
{
    using State = typename Fold::State;
    Staging sg;
    if (!sg.init_units(A, lda, B, ldb, m, n, d, Fold::kSplitColumns, Fold::kSymmetric,
                       Fold::kSplitOperands))
        return;
    if (sg.KT > WS_MAX_KT) __trap();  // the launcher picks this body only for shallow products
    unsigned dyn_bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(dyn_bytes));
    if (ws_smem_bytes(sg.KT) > dyn_bytes) __trap();  // launched with too little shared memory
    sg.resident = true;
    sg.NA = sg.KT;
    sg.init_slots();
    const unsigned scratch_smem = sg.b_smem + (unsigned)(WS_B_STAGES * B_SLOT_BYTES);
    const unsigned share_smem = scratch_smem + (unsigned)WS_SCRATCH_BYTES;
    const unsigned bars = share_smem + (unsigned)WS_SHARE_BYTES;
    const unsigned a_empty = bars + 8u * (2 * WS_B_STAGES);
    // full[s] at bars + 8 s, empty[s] at bars + 8 (WS_B_STAGES + s).
    if (sg.tid == 0) {
        for (int s = 0; s < WS_B_STAGES; ++s) {
            mbar_init(bars + 8u * s, 1);                             // the producer's arrival
            mbar_init(bars + 8u * (WS_B_STAGES + s), THREADS / 32);  // the consumer warps
        }
        mbar_init(a_empty, THREADS / 32);
    }
    __syncthreads();

    const int lane = sg.tid & 31;
    const int warp = sg.tid >> 5;
    const int KT = sg.KT;

    if (warp >= THREADS / 32) {
        // ---- the producer ----
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(WS_PRODUCER_REGS));
        if (sg.tid != THREADS) return;
        Cursor p = sg.start();
        Ring w;
        bool reuse = false;  // the ring went round once: a slot's last readers must be done
        unsigned a_phase = 0;
        bool first_unit = true;
        while (p.u < sg.U) {
            if (p.starts_unit()) {
                if (!first_unit) {
                    mbar_wait_idle(a_empty, a_phase);
                    a_phase ^= 1u;
                }
                first_unit = false;
            }
            if (reuse) mbar_wait_idle(bars + 8u * (WS_B_STAGES + w.slot), w.phase ^ 1u);
            const unsigned full = bars + 8u * w.slot;
            const bool loads_a = p.loads_a(true);
            mbar_arrive_expect_tx(full, (unsigned)(B_SLOT_BYTES + (loads_a ? A_SLOT_BYTES : 0)));
            if (loads_a)
                tma_load_2d(sg.a_smem + (unsigned)(p.kt * A_SLOT_BYTES), ta, p.kt * BK, (int)sg.row0(p), full);
            tma_load_2d(sg.b_smem + (unsigned)(w.slot * B_SLOT_BYTES), tb, p.kt * BK, p.jt * BN, full);
            w.next();
            reuse = reuse || w.slot == 0;
            sg.advance(p);
        }
        return;
    }

    // ---- the consumer warpgroups ----
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(WS_CONSUMER_REGS));
    // Warpgroup: rows 128 wg ... (broadcast from lane 0: warp-uniform for the compiler, so the
    // products' descriptors can live in uniform registers).
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
    const int w = warp & 3;    // warp of the warpgroup: rows 16 w ... of each 64
    const int g = lane >> 2;
    const int t = lane & 3;
    float* const scratch = reinterpret_cast<float*>(pk_smem + (scratch_smem - sg.a_smem)) + warp * 8 * WS_SCRATCH_STRIDE;
    WgShare* const shares = reinterpret_cast<WgShare*>(pk_smem + (share_smem - sg.a_smem)) + 2 * wg;
    int share_parity = 0;

    Cursor c = sg.start();
    Ring r;
    float acc[2][64];
    State st[2][2];
    RowLabels<4> rows;  // symmetric folds: the labels of this thread's rows of the unit
    if (WS_TURNS && wg == 1) named_arrive(1, THREADS);  // warpgroup 0 goes first

    while (c.u < sg.U) {
        const long long i0 = sg.row0(c);
        const long long j0 = (long long)c.jt * BN;
        const bool starts = c.starts_unit();
        const bool last = c.last_tile();
        const bool mirrors = Fold::kSymmetric && sg.mirrors(c);
        if (starts) {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int h = 0; h < 2; ++h) st[mi][h] = Fold::identity();
            if constexpr (Fold::kSymmetric) {
                const long long i_first = i0 + wg * 128 + w * 16 + g;
                rows = row_labels<4>(fold, m, [&](int r) { return i_first + 64 * (r >> 1) + 8 * (r & 1); });
            }
        }
        // The columns' labels, read from memory while this warpgroup waits for its turn and
        // its products rather than after them.
        LaneColumnLabels lane_labels;
        if constexpr (Fold::kByLabel) lane_labels = lane_column_labels(fold, j0, n, lane);
        // This warpgroup's turn on the tensor cores: the tile's products.
        if constexpr (WS_TURNS) named_sync(1 + wg, THREADS);
        const Ring r0 = r;
        for (int kt = 0; kt < KT; ++kt) {
            const int s = r.slot;
            mbar_wait(bars + 8u * s, r.phase);
            const unsigned da =
                wgmma_desc_lo(sg.a_smem + (unsigned)(kt * A_SLOT_BYTES) + (unsigned)(wg * 128 * ROW_BYTES));
            const unsigned db = wgmma_desc_lo(sg.b_smem + (unsigned)(s * B_SLOT_BYTES));
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    wgmma_m64n128<kMma>(acc[mi], da + (unsigned)((mi * 64 * ROW_BYTES + ks * 32) >> 4),
                                        db + (unsigned)((ks * 32) >> 4), ks > 0 || kt > 0);
                }
            }
            wgmma_commit();
            r.next();
            sg.advance(c);
        }
        if constexpr (WS_TURNS) named_arrive(1 + (1 - wg), THREADS);  // the other warpgroup's turn
        unsigned col_label = kNoLabel;
        if constexpr (Fold::kByLabel) col_label = shared_column_label(lane_labels);
        wgmma_wait_all();
        __syncwarp();
        if (lane == 0) {
            Ring done = r0;
            for (int kt = 0; kt < KT; ++kt) {
                mbar_arrive(bars + 8u * (WS_B_STAGES + done.slot));
                done.next();
            }
            if (last) mbar_arrive(a_empty);
        }

        const long long i_lane = i0 + wg * 128 + w * 16 + g;
        const long long j_lane = j0 + 2 * t;
        for_tile(fold, edge_of(i0, j0, m, n), WgmmaTile<Fold>{acc, st, fold, i_lane, j_lane, m, n, col_label});
        if constexpr (Fold::kSymmetric) {
            if (mirrors) {  // acc now holds the by-label values
                ws_column_sums(
                    fold, n, j0, rows,
                    [&](int r, int cc) { return acc[r >> 1][4 * (cc >> 1) + 2 * (r & 1) + (cc & 1)]; },
                    scratch, shares[share_parity], w, 3u + (unsigned)wg, lane);
                share_parity ^= 1;
            }
        }
        if (last) wgmma_finish_rows(st, fold, i_lane, m, t);
    }
    if (WS_TURNS && wg == 0) named_sync(1, THREADS);  // warpgroup 1's last turn signal
}
#endif  // PK_WGMMA

// ------------------------------------------------------------------------------------
// The kernel body: P = A B^T over m rows, n columns and depth d, each tile folded (shared
// memory as Staging plans it).
// ------------------------------------------------------------------------------------
// kMma: the inner product (MMA_STRICT, MMA_TF32, or with operands the launcher packed in pairs
// of 16-bit values, MMA_BF16 or MMA_F16). kRounded (TF32 only): the operands the launcher
// already rounded to TF32 in memory, bit 0 A, bit 1 B; the kernel does not round its staged
// copies of those.
template <int kMma, int kRounded, class Fold>
__device__ __forceinline__ void contraction(const float* A, long long lda, const float* B,
                                            long long ldb, long long m, long long n, long long d,
                                            const Fold& fold)
{
#if defined(PK_WGMMA)
    if constexpr (kMma != MMA_STRICT) {
        contraction_wgmma<kMma, kRounded>(A, lda, B, ldb, m, n, d, fold);
        return;
    }
#endif
    using State = typename Fold::State;
    Staging sg;
    if (!sg.init(A, lda, B, ldb, m, n, d, exchange_bytes<State>(), Fold::kSplitColumns,
                 Fold::kSymmetric, Fold::kSplitOperands))
        return;

    const int lane = sg.tid & 31;
    const int warp = sg.tid >> 5;
    const int wm = warp / WARPS_N;
    const int wn = warp % WARPS_N;
    const int g = lane >> 2;
    const int t = lane & 3;
    State* const xchg = reinterpret_cast<State*>(sg.exchange());

    // ldmatrix: this lane addresses row (warp origin + lane % 16) of each 16-row group,
    // logical segment 2 ks + lane / 16 of k-step ks; its physical segment is that
    // ^ (row & 7) = that ^ (lane & 7), since warp origins and 16 mt are multiples of 8.
    const unsigned a_frag_row = (unsigned)((wm * WM + (lane & 15)) * ROW_BYTES);
    const unsigned b_frag_row = (unsigned)((wn * WN + (lane & 15)) * ROW_BYTES);
    unsigned frag_seg[KSTEPS];
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) frag_seg[ks] = (unsigned)(((2 * ks + (lane >> 4)) ^ (lane & 7)) << 4);

    Cursor prod = sg.start();
    Cursor cons = prod;
    sg.prime(prod);

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
    State st[MT][2];

    while (cons.u < sg.U) {
        const long long i0 = sg.row0(cons);
        if (cons.starts_unit()) {  // a new unit: fresh partials
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) st[mt][h] = Fold::identity();
            }
        }

        // This step's chunks: own copies landed (all but the STAGES - 2 newest groups) ...
        cp_async_wait<STAGES - 2>();
        const int a_slot = sg.a_slot(cons);
        if constexpr (kMma == MMA_TF32) sg.round<kRounded>(cons);  // ... rounded to TF32 by the thread that copied them ...
        // ... and published. The barrier also says every thread finished the previous
        // step, so the slot it read (the one the issue below refills) is free.
        __syncthreads();
        sg.issue(prod);
        sg.advance(prod);

        if constexpr (kMma != MMA_STRICT) {
            mma_chunk<kMma>(acc, sg.a_smem + (unsigned)(a_slot * A_SLOT_BYTES) + a_frag_row,
                      sg.b_smem + (unsigned)(cons.b_slot * B_SLOT_BYTES) + b_frag_row, frag_seg);
        } else {
            ffma_chunk(acc, sg.a_ptr + a_slot * A_SLOT_FLOATS, sg.b_ptr + cons.b_slot * B_SLOT_FLOATS,
                       wm * WM + g, wn * WN + 2 * t);
        }

        if (cons.kt == sg.KT - 1) {  // the column tile is complete: epilogue and reductions
            const long long i_lane = i0 + wm * WM + g;
            const long long j_lane = (long long)cons.jt * BN + wn * WN + 2 * t;
            for_tile(fold, edge_of(i0, (long long)cons.jt * BN, m, n),
                     MmaTile<Fold>{acc, st, fold, i_lane, j_lane, m, n});
            if constexpr (Fold::kSymmetric) {
                // Above the diagonal block: the mirror image's sums too (acc now holds the
                // by-label values).
                if (sg.mirrors(cons)) {
                    tile_column_sums<2 * MT, 2 * NT>(
                        fold, m, n, [&](int r) { return i_lane + 16 * (r >> 1) + 8 * (r & 1); },
                        [&](int c) { return j_lane + 8 * (c >> 1) + (c & 1); },
                        [&](int r, int c) { return acc[r >> 1][c >> 1][2 * (r & 1) + (c & 1)]; },
                        lane);
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
            if (cons.last_tile()) finish_rows<Fold>(st, fold, xchg, i0, m, wm, wn, lane);
        }
        sg.advance(cons);
    }
    cp_async_wait<0>();  // only empty groups remain; leave nothing in flight
}

// The warp-specialised entry (see contraction_ws): the launcher takes it only on devices of
// compute capability 9.0, whose kernels are compiled for sm_90a.
template <int kMma, class Fold>
__device__ __forceinline__ void contraction_warp_specialised(const float* A, long long lda,
                                                             const float* B, long long ldb,
                                                             long long m, long long n, long long d,
                                                             const Fold& fold, const TensorMap* ta,
                                                             const TensorMap* tb)
{
#if defined(PK_WGMMA)
    contraction_ws<kMma>(A, lda, B, ldb, m, n, d, fold, ta, tb);
#else
    __trap();
#endif
}

}  // namespace pk

#endif  // PK_PIPELINE
