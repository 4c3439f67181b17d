//! Syntax check of every generated and builtin source with the host C++ compiler, through a
//! prelude that stubs CUDA's keywords and intrinsics. Skipped (with a message) where `g++` is
//! missing. The real check is NVRTC on a GPU machine (`tools/nvrtc_check.py`); this one catches
//! malformed C on any machine.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use kernel_ir::ScalarType;
use kernels_gen::{builtins, emit};

const PRELUDE: &str = r#"
#include <cmath>
#include <cstring>
struct pk_uint3 { unsigned int x, y, z; };
static pk_uint3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
inline void __syncthreads() {}
inline void __threadfence() {}
inline void __syncwarp(unsigned int = 0xffffffffu) {}
template <class T> T __shfl_down_sync(unsigned int, T v, int) { return v; }
template <class T> T __shfl_up_sync(unsigned int, T v, int) { return v; }
template <class T> T __shfl_sync(unsigned int, T v, int) { return v; }
template <class T> T __shfl_xor_sync(unsigned int, T v, int) { return v; }
struct float4 { float x, y, z, w; };
inline unsigned long long __cvta_generic_to_shared(const void* p) { return (unsigned long long)p; }
inline void __trap() {}
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline unsigned int __activemask() { return 0xffffffffu; }
inline unsigned int __match_any_sync(unsigned int mask, unsigned int) { return mask; }
inline int __all_sync(unsigned int, int p) { return p; }
inline unsigned int __ballot_sync(unsigned int mask, int p) { return p ? mask : 0u; }
inline int __clzll(unsigned long long x) { return x ? __builtin_clzll(x) : 64; }
inline int __ffs(unsigned int x) { return __builtin_ffs((int)x); }
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x; unsigned int r = 0;
    for (int k = 0; k < 4; ++k) r |= (unsigned int)((v >> (8 * ((s >> (4 * k)) & 7))) & 0xffu) << (8 * k);
    return r;
}
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { unsigned int o = *p; *p += v; return o; }
inline float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }
inline double atomicAdd(double* p, double v) { double o = *p; *p += v; return o; }
inline float __uint_as_float(unsigned int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned int __float_as_uint(float x) { unsigned int u; std::memcpy(&u, &x, 4); return u; }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
"#;

fn gxx_available() -> bool {
    Command::new("g++")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn all_sources_compile_as_cxx() {
    if !gxx_available() {
        eprintln!("g++ not found: skipping the C++ syntax check");
        return;
    }
    let mut unit = String::from(PRELUDE);
    for (_, spec) in common::all_samples() {
        unit.push_str(&emit(&spec).source);
    }
    let mut seen = std::collections::BTreeSet::new();
    for dtype in [ScalarType::F32, ScalarType::F64] {
        for kernel in builtins::all(dtype) {
            if seen.insert(kernel.name.clone()) {
                unit.push_str(&kernel.source);
            }
        }
    }
    check_with_gxx(&unit);
}

/// Runs `g++ -fsyntax-only` over `unit` and fails on any error or warning.
fn check_with_gxx(unit: &str) {
    let child = Command::new("g++")
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-Wall",
            "-Wno-unused",
            // `#pragma unroll` is nvcc's; the host compiler ignores it.
            "-Wno-unknown-pragmas",
            "-x",
            "c++",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => panic!("could not start g++: {e}"),
    };
    if let Some(mut stdin) = child.stdin.take() {
        if let Err(e) = stdin.write_all(unit.as_bytes()) {
            panic!("could not write to g++: {e}");
        }
    }
    let output = match child.wait_with_output() {
        Ok(output) => output,
        Err(e) => panic!("g++ failed to run: {e}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "g++ rejected the sources:\n{stderr}"
    );
    assert!(!stderr.contains("warning"), "g++ warnings:\n{stderr}");
}

/// The sections compiled only for Hopper (`sm_90a`: warpgroup products, the warp-specialised
/// body with its tensor-memory copies and barriers) as C++, with the feature macro set: a
/// symmetric TF32 contraction on the warp-specialised body, and a TF32 contraction with
/// rounded operands on the lock-step warpgroup body (one variant per spec: a unit holds one
/// fold struct of each name).
#[test]
fn hopper_sources_compile_as_cxx() {
    use kernel_ir::{samples, Half, Precision};
    use kernels_gen::{emit_variant, ContractionVariant, RoundedOperands};
    if !gxx_available() {
        eprintln!("g++ not found: skipping the C++ syntax check");
        return;
    }
    let mut unit = String::from(PRELUDE);
    unit.push_str(HOPPER_PRELUDE);
    for (spec, warp_specialised) in [
        (
            samples::symmetric_kernel_sums(ScalarType::F32, Precision::Tf32),
            true,
        ),
        (
            samples::mixed_contraction(ScalarType::F32, (false, true), Precision::Tf32, true),
            false,
        ),
        (
            samples::symmetric_kernel_sums(ScalarType::F32, Precision::Half(Half::Bf16)),
            true,
        ),
        (
            samples::mixed_contraction(
                ScalarType::F32,
                (false, true),
                Precision::Half(Half::F16),
                true,
            ),
            false,
        ),
    ] {
        let variant = ContractionVariant {
            rounded: RoundedOperands::BOTH,
            warp_specialised,
        };
        unit.push_str(&emit_variant(&spec, variant).source);
    }
    check_with_gxx(&unit);
}

/// What the Hopper sections use beyond [`PRELUDE`].
const HOPPER_PRELUDE: &str = r#"
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#define __grid_constant__
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
"#;

/// The cluster-sums kernels as C++: the bins kernel and the tensor-core one, in bf16 and fp16,
/// in both row modes.
#[test]
fn cluster_sums_sources_compile_as_cxx() {
    use kernel_ir::Half;
    use kernels_gen::cluster_sums::{cluster_sums, ClusterSumsVariant};
    if !gxx_available() {
        eprintln!("g++ not found: skipping the C++ syntax check");
        return;
    }
    let mut unit = String::from(PRELUDE);
    unit.push_str(CLUSTER_SUMS_PRELUDE);
    for held in [Half::Bf16, Half::F16] {
        for aligned in [true, false] {
            let bins = ClusterSumsVariant::preferred(ScalarType::F32, Some(held), aligned)
                .with_leading_dimension(10_500);
            unit.push_str(&cluster_sums(&bins).source);
            for tiles in [1, 13] {
                for team in [1, 2, 4, 8] {
                    let v = bins.with_tensor_core_tiles(tiles).with_team(team);
                    unit.push_str(&cluster_sums(&v).source);
                }
            }
        }
    }
    check_with_gxx(&unit);
}

/// What the cluster-sums kernels use beyond [`PRELUDE`].
const CLUSTER_SUMS_PRELUDE: &str = r#"
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
"#;
