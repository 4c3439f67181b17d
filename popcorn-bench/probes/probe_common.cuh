// What the standalone CUDA probes share: error checks, the sequential read every figure is set
// against, and median timing with CUDA events. Header-only; each probe includes it and builds
// with nvcc alone.
#pragma once
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

// Every thread reads 16-byte pieces, grid-stride over the whole matrix, and folds them into
// one sum it writes out (so that no load is dead): the read ceiling.
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

// The median of `reps` timed runs of `launch` (CUDA events on the default stream), after one
// warm-up run.
template <class Launch>
float median_ms(Launch launch, int reps)
{
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
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
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
