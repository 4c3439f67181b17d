//! GPU tests of the CUDA backend against naive host loops in f64.
//!
//! Every test needs a CUDA device. Without one it prints a notice and returns, unless
//! `POPCORN_REQUIRE_GPU` is set, in which case it fails. Outputs are poisoned with NaN before
//! each step, so an element a step forgets to write fails the comparison. Sizes include 1, odd
//! sizes and sizes that are not multiples of 32 or 256.

use super::*;
use crate::backend::{Arg, Backend, BufferInfo, ElemType, HostSlice, HostVec};
use crate::error::RuntimeError;
use crate::test_steps::step;
use kernel_ir::{Access, BinaryOp, Expr, Form, Input, KernelSpec, ReduceKind, Reduction, UnaryOp};
use popcorn_dsl::ops::{Builtin, Counts, Diag, LabelSums, PadCols, PermuteRows, Selection};
use popcorn_dsl::plan::{FusedStep, GemmStep, Step, StepOp, StepPart};
use popcorn_dsl::{DType, Dim, ScalarExpr};
use std::path::PathBuf;
use std::sync::OnceLock;

// ---------------------------------------------------------------------------------------------
// Harness

/// Whether a missing GPU fails the tests.
fn gpu_required() -> bool {
    popcorn_dsl::settings::settings().require_gpu
}

/// A backend for tests with its kernel cache in a per-process temporary directory (so the
/// tests neither read nor fill the user's cache).
fn test_config(tag: &str) -> CudaConfig {
    CudaConfig {
        allow_tf32: false,
        cache_dir: Some(temp_dir(tag)),
        dump_dir: None,
        log_cache: popcorn_dsl::settings::settings().log.cache,
        round_tf32_operands: true,
        warp_specialised_contractions: true,
        tensor_core_sums: true,
        sums_teams: true,
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("popcorn-cuda-tests-{}-{tag}", std::process::id()))
}

/// A fresh backend with `config`, or `None` (after a notice) when there is no usable GPU.
fn try_backend(config: CudaConfig) -> Option<CudaBackend> {
    let why = match cuda_available() {
        Ok(_) => match CudaBackend::with_config(0, config) {
            Ok(b) => return Some(b),
            Err(e) => e.to_string(),
        },
        Err(why) => why,
    };
    if gpu_required() {
        panic!("POPCORN_REQUIRE_GPU is set but the CUDA backend is unusable: {why}");
    }
    eprintln!("skipping GPU test: {why}");
    None
}

/// The backend shared by most tests (kernels compile once per process).
fn gpu() -> Option<&'static CudaBackend> {
    static SHARED: OnceLock<Option<CudaBackend>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| try_backend(test_config("shared")));
    if shared.is_none() && gpu_required() {
        panic!("POPCORN_REQUIRE_GPU is set but no CUDA backend could be created");
    }
    if shared.is_none() {
        eprintln!("skipping GPU test: no CUDA device");
    }
    shared.as_ref()
}

/// A deterministic generator of values in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    fn values(&mut self, len: usize) -> Vec<f64> {
        (0..len).map(|_| self.next()).collect()
    }

    fn below(&mut self, bound: usize) -> usize {
        (((self.next() + 1.0) / 2.0) * bound as f64) as usize % bound.max(1)
    }
}

/// Values rounded to `dtype`, so host references see exactly what the device sees.
fn rounded(dtype: DType, v: &[f64]) -> Vec<f64> {
    match dtype {
        DType::F32 => v.iter().map(|x| *x as f32 as f64).collect(),
        DType::F64 => v.to_vec(),
    }
}

fn upload(b: &CudaBackend, dtype: DType, v: &[f64]) -> CudaBuffer {
    let buf = match dtype {
        DType::F32 => b.upload(HostSlice::F32(
            &v.iter().map(|x| *x as f32).collect::<Vec<_>>(),
        )),
        DType::F64 => b.upload(HostSlice::F64(v)),
    };
    buf.expect("upload")
}

fn upload_u32(b: &CudaBackend, v: &[u32]) -> CudaBuffer {
    b.upload(HostSlice::U32(v)).expect("upload u32")
}

fn upload_i32(b: &CudaBackend, v: &[i32]) -> CudaBuffer {
    b.upload(HostSlice::I32(v)).expect("upload i32")
}

/// A buffer of `len` elements filled with NaN (`u32::MAX`, `-1` for integers).
fn poisoned(b: &CudaBackend, elem: ElemType, len: usize) -> CudaBuffer {
    let buf = b.alloc(elem, len).expect("alloc");
    b.fill(&buf, f64::NAN).expect("fill NaN");
    buf
}

fn download(b: &CudaBackend, buf: &CudaBuffer) -> Vec<f64> {
    b.download(buf).expect("download").to_f64()
}

fn dense(buf: &CudaBuffer, rows: usize, cols: usize) -> Arg<'_, CudaBuffer> {
    Arg::Dense { buf, rows, cols }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F64 => 1e-11,
    }
}

/// Asserts `got` matches `want` within `tol * (1 + |want|)`; NaN never matches.
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i} is {g}, expected {w}");
    }
}

/// Row-major element of a stored matrix read through an optional transpose.
fn at(data: &[f64], cols: usize, trans: bool, i: usize, j: usize) -> f64 {
    if trans {
        data[j * cols + i]
    } else {
        data[i * cols + j]
    }
}

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

// ---------------------------------------------------------------------------------------------
// Device, buffers, transfers

#[test]
fn gpu_describes_the_device_and_its_memory() {
    let Some(b) = gpu() else { return };
    let d = b.describe();
    assert!(
        d.starts_with("cuda:0 ") && d.contains("(sm_") && d.ends_with(" MiB)"),
        "{d}"
    );
    let (free, total) = b.memory_info().expect("memory info");
    assert!(free > 0 && free <= total, "{free} of {total}");
    println!("device: {d}");
}

#[test]
fn gpu_transfers_and_fills_every_element_type() {
    let Some(b) = gpu() else { return };
    for len in [0usize, 1, 257, 1000] {
        let f: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
        let d: Vec<f64> = (0..len).map(|i| i as f64 / 3.0).collect();
        let u: Vec<u32> = (0..len).map(|i| (i * 7) as u32).collect();
        let s: Vec<i32> = (0..len).map(|i| i as i32 - 100).collect();
        // 16-bit values exact in both formats (small multiples of 1/2).
        let bf: Vec<u16> = f
            .iter()
            .map(|x| crate::backend::to_half_bits(kernel_ir::Half::Bf16, *x))
            .collect();
        let hf: Vec<u16> = f
            .iter()
            .map(|x| crate::backend::to_half_bits(kernel_ir::Half::F16, *x))
            .collect();
        let cases = [
            HostSlice::F32(&f),
            HostSlice::F64(&d),
            HostSlice::U32(&u),
            HostSlice::I32(&s),
            HostSlice::Half(kernel_ir::Half::Bf16, &bf),
            HostSlice::Half(kernel_ir::Half::F16, &hf),
        ];
        for data in cases {
            let buf = b.upload(data).expect("upload");
            assert_eq!((buf.elem(), buf.len()), (data.elem(), len));
            let back = b.download(&buf).expect("download");
            assert_eq!(back.as_slice().len(), len);
            assert_eq!(
                back.to_f64(),
                HostVec::to_f64(&owned(data)),
                "round trip {:?}",
                data.elem()
            );
            // Write reversed data into the same buffer.
            let rev = owned(data).to_f64().into_iter().rev().collect::<Vec<_>>();
            let rev_vec = from_f64(data.elem(), &rev);
            b.write(&buf, rev_vec.as_slice()).expect("write");
            assert_eq!(b.download(&buf).expect("download").to_f64(), rev);
            // Poison, then a value.
            b.fill(&buf, f64::NAN).expect("fill");
            let poisoned = b.download(&buf).expect("download");
            match &poisoned {
                HostVec::F32(v) => assert!(v.iter().all(|x| x.is_nan())),
                HostVec::F64(v) => assert!(v.iter().all(|x| x.is_nan())),
                HostVec::U32(v) => assert!(v.iter().all(|x| *x == u32::MAX)),
                HostVec::I32(v) => assert!(v.iter().all(|x| *x == -1)),
                HostVec::Half(..) => assert!(poisoned.to_f64().iter().all(|x| x.is_nan())),
            }
            b.fill(&buf, 3.0).expect("fill");
            assert!(b
                .download(&buf)
                .expect("download")
                .to_f64()
                .iter()
                .all(|x| *x == 3.0));
        }
    }
    // Writing data of the wrong length or type is an error, not a crash.
    let buf = b.alloc(ElemType::F32, 4).expect("alloc");
    assert!(matches!(
        b.write(&buf, HostSlice::F32(&[1.0; 3])),
        Err(RuntimeError::InvalidData(_))
    ));
    assert!(matches!(
        b.write(&buf, HostSlice::F64(&[1.0; 4])),
        Err(RuntimeError::InvalidData(_))
    ));
}

fn owned(data: HostSlice<'_>) -> HostVec {
    match data {
        HostSlice::F32(v) => HostVec::F32(v.to_vec()),
        HostSlice::F64(v) => HostVec::F64(v.to_vec()),
        HostSlice::U32(v) => HostVec::U32(v.to_vec()),
        HostSlice::I32(v) => HostVec::I32(v.to_vec()),
        HostSlice::Half(h, v) => HostVec::Half(h, v.to_vec()),
    }
}

fn from_f64(elem: ElemType, v: &[f64]) -> HostVec {
    match elem {
        ElemType::F32 => HostVec::F32(v.iter().map(|x| *x as f32).collect()),
        ElemType::F64 => HostVec::F64(v.to_vec()),
        ElemType::U32 => HostVec::U32(v.iter().map(|x| *x as u32).collect()),
        ElemType::I32 => HostVec::I32(v.iter().map(|x| *x as i32).collect()),
        ElemType::Half(h) => HostVec::Half(
            h,
            v.iter()
                .map(|x| crate::backend::to_half_bits(h, *x as f32))
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// cuBLAS

#[test]
fn gpu_gemm_matches_host_in_all_four_transpose_combinations() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(1);
    for dtype in DTYPES {
        for (m, n, k) in [
            (1, 1, 1),
            (3, 5, 7),
            (33, 17, 65),
            (130, 1, 257),
            (1, 300, 3),
        ] {
            for trans_a in [false, true] {
                for trans_b in [false, true] {
                    let a = rounded(dtype, &rng.values(m * k));
                    let bm = rounded(dtype, &rng.values(k * n));
                    let (a_shape, b_shape) = (
                        if trans_a { (k, m) } else { (m, k) },
                        if trans_b { (n, k) } else { (k, n) },
                    );
                    let alpha = 1.5;
                    let mut want = vec![0.0; m * n];
                    for i in 0..m {
                        for j in 0..n {
                            let s: f64 = (0..k)
                                .map(|p| {
                                    at(&a, a_shape.1, trans_a, i, p)
                                        * at(&bm, b_shape.1, trans_b, p, j)
                                })
                                .sum();
                            want[i * n + j] = alpha * s;
                        }
                    }
                    let (ab, bb) = (upload(b, dtype, &a), upload(b, dtype, &bm));
                    let c = poisoned(b, ElemType::float(dtype), m * n);
                    let op = StepOp::Gemm(GemmStep {
                        trans_a,
                        trans_b,
                        m,
                        n,
                        k,
                        alpha: ScalarExpr::Lit(alpha),
                        tf32: false,
                    });
                    b.run_step(
                        &step(op),
                        &[
                            dense(&ab, a_shape.0, a_shape.1),
                            dense(&bb, b_shape.0, b_shape.1),
                        ],
                        &[dense(&c, m, n)],
                        dtype,
                        alpha,
                    )
                    .expect("gemm");
                    let what =
                        format!("gemm {dtype:?} m={m} n={n} k={k} ta={trans_a} tb={trans_b}");
                    assert_close(&download(b, &c), &want, tolerance(dtype), &what);
                }
            }
        }
    }
}

/// The product library's one-time setup (`prepare_products`: one 1 x 1 x 1 product) leaves the
/// backend as it was: twice in a row, then products in both precisions still match the host.
#[test]
fn gpu_prepared_products_leave_the_backend_as_it_was() {
    let Some(b) = gpu() else { return };
    b.prepare_products().expect("prepare");
    b.prepare_products().expect("prepare again");
    let mut rng = Rng(5);
    for dtype in DTYPES {
        let (n, k) = (37, 11);
        let a = rounded(dtype, &rng.values(n * k));
        let want = host_syrk(&a, n, k, false, 1.0);
        let shape = SyrkShape {
            n,
            k,
            trans: false,
            block_rows: 0,
        };
        let got = gpu_syrk(b, dtype, &a, shape, 1.0, false);
        assert_close(
            &got,
            &want,
            tolerance(dtype),
            &format!("syrk {dtype:?} after prepare"),
        );
    }
}

#[test]
fn gpu_syrk_writes_the_full_symmetric_matrix() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(2);
    for dtype in DTYPES {
        for (n, k, block_rows) in [
            (1, 1, 0),
            (5, 3, 0),
            (37, 70, 0),
            (100, 33, 0),
            (257, 5, 0),
            (1, 1, 1),
            (5, 3, 2),
            (37, 70, 16),
            (100, 33, 512),
            (257, 5, 64),
            (300, 40, 128),
            // Diagonal blocks halved to 512-row leaves in strided batches: 2 full blocks of
            // 2048 (levels 1024 and 512) and a tail of 901 rows.
            (4997, 9, 2048),
        ] {
            for trans in [false, true] {
                let a = rounded(dtype, &rng.values(n * k));
                let alpha = 0.75;
                let want = host_syrk(&a, n, k, trans, alpha);
                let shape = SyrkShape {
                    n,
                    k,
                    trans,
                    block_rows,
                };
                let got = gpu_syrk(b, dtype, &a, shape, alpha, false);
                let what =
                    format!("syrk {dtype:?} n={n} k={k} trans={trans} blocks of {block_rows}");
                assert_close(&got, &want, tolerance(dtype), &what);
                for i in 0..n {
                    for j in 0..i {
                        assert_eq!(
                            got[i * n + j].to_bits(),
                            got[j * n + i].to_bits(),
                            "{what}: not symmetric at ({i}, {j})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gpu_gemv_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(3);
    for dtype in DTYPES {
        for (m, n) in [(1, 1), (7, 5), (257, 33), (3, 300)] {
            for trans in [false, true] {
                let a = rounded(dtype, &rng.values(m * n));
                let (x_len, y_len) = if trans { (m, n) } else { (n, m) };
                let x = rounded(dtype, &rng.values(x_len));
                let alpha = -2.0;
                let want: Vec<f64> = (0..y_len)
                    .map(|i| {
                        alpha
                            * (0..x_len)
                                .map(|p| at(&a, n, trans, i, p) * x[p])
                                .sum::<f64>()
                    })
                    .collect();
                let (ab, xb) = (upload(b, dtype, &a), upload(b, dtype, &x));
                let y = poisoned(b, ElemType::float(dtype), y_len);
                let op = StepOp::Gemv {
                    trans,
                    m,
                    n,
                    alpha: ScalarExpr::Lit(alpha),
                };
                b.run_step(
                    &step(op),
                    &[dense(&ab, m, n), dense(&xb, x_len, 1)],
                    &[dense(&y, y_len, 1)],
                    dtype,
                    alpha,
                )
                .expect("gemv");
                assert_close(
                    &download(b, &y),
                    &want,
                    tolerance(dtype),
                    &format!("gemv {dtype:?} m={m} n={n} trans={trans}"),
                );
            }
        }
    }
}

#[test]
fn gpu_degenerate_products_write_zeros_and_bad_shapes_are_errors() {
    let Some(b) = gpu() else { return };
    let dtype = DType::F64;
    // k = 0: C is all zeros.
    let empty = b.alloc(ElemType::F64, 0).expect("alloc");
    let c = poisoned(b, ElemType::F64, 6);
    let op = StepOp::Gemm(GemmStep {
        trans_a: false,
        trans_b: false,
        m: 2,
        n: 3,
        k: 0,
        alpha: ScalarExpr::Lit(1.0),
        tf32: false,
    });
    b.run_step(
        &step(op),
        &[dense(&empty, 2, 0), dense(&empty, 0, 3)],
        &[dense(&c, 2, 3)],
        dtype,
        1.0,
    )
    .expect("gemm k=0");
    assert_eq!(download(b, &c), vec![0.0; 6]);
    // A wrong shape is reported before anything runs.
    let a = upload(b, dtype, &[1.0; 6]);
    let op = StepOp::Gemm(GemmStep {
        trans_a: false,
        trans_b: false,
        m: 2,
        n: 3,
        k: 3,
        alpha: ScalarExpr::Lit(1.0),
        tf32: false,
    });
    let e = b.run_step(
        &step(op),
        &[dense(&a, 2, 3), dense(&a, 2, 3)],
        &[dense(&c, 2, 3)],
        dtype,
        1.0,
    );
    assert!(matches!(e, Err(RuntimeError::InvalidData(_))), "{e:?}");
    // A buffer of the wrong element type too.
    let f = b.alloc(ElemType::F32, 6).expect("alloc");
    let op = StepOp::Builtin(Builtin::Diag(Diag::default()));
    let e = b.run_step(
        &step(op),
        &[dense(&f, 2, 3)],
        &[dense(&c, 2, 1)],
        dtype,
        1.0,
    );
    assert!(matches!(e, Err(RuntimeError::InvalidData(_))), "{e:?}");
}

// ---------------------------------------------------------------------------------------------
// cuSPARSE

/// A random CSR matrix (`rows x cols`, about `density` of the entries, row 0 empty when
/// `rows > 2`): the dense copy and the CSR arrays.
struct HostCsr {
    dense: Vec<f64>,
    row_ptr: Vec<i32>,
    col_idx: Vec<i32>,
    values: Vec<f64>,
}

fn random_csr(rng: &mut Rng, dtype: DType, rows: usize, cols: usize, density: f64) -> HostCsr {
    let mut m = HostCsr {
        dense: vec![0.0; rows * cols],
        row_ptr: vec![0],
        col_idx: vec![],
        values: vec![],
    };
    for i in 0..rows {
        for j in 0..cols {
            let keep = (rng.next() + 1.0) / 2.0 < density && !(rows > 2 && i == 0);
            if keep || (rows == 1 && cols == 1) {
                let v = rounded(dtype, &[rng.next()])[0];
                m.dense[i * cols + j] = v;
                m.col_idx.push(j as i32);
                m.values.push(v);
            }
        }
        m.row_ptr.push(m.col_idx.len() as i32);
    }
    m
}

struct DeviceCsr {
    row_ptr: CudaBuffer,
    col_idx: CudaBuffer,
    values: CudaBuffer,
    rows: usize,
    cols: usize,
    nnz: usize,
}

impl DeviceCsr {
    fn new(b: &CudaBackend, dtype: DType, h: &HostCsr, rows: usize, cols: usize) -> DeviceCsr {
        DeviceCsr {
            row_ptr: upload_i32(b, &h.row_ptr),
            col_idx: upload_i32(b, &h.col_idx),
            values: upload(b, dtype, &h.values),
            rows,
            cols,
            nnz: h.values.len(),
        }
    }

    fn arg(&self) -> Arg<'_, CudaBuffer> {
        Arg::Csr {
            row_ptr: &self.row_ptr,
            col_idx: &self.col_idx,
            values: &self.values,
            rows: self.rows,
            cols: self.cols,
            nnz: self.nnz,
        }
    }
}

#[test]
fn gpu_spmm_matches_host_for_both_sides_and_all_transposes() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(4);
    for dtype in DTYPES {
        for (m, n, k) in [(1, 1, 1), (5, 3, 4), (37, 9, 70), (3, 257, 33)] {
            for sparse_left in [true, false] {
                for trans_sparse in [false, true] {
                    for trans_dense in [false, true] {
                        let (s_shape, d_shape) = if sparse_left {
                            (
                                if trans_sparse { (k, m) } else { (m, k) },
                                if trans_dense { (n, k) } else { (k, n) },
                            )
                        } else {
                            (
                                if trans_sparse { (n, k) } else { (k, n) },
                                if trans_dense { (k, m) } else { (m, k) },
                            )
                        };
                        let s = random_csr(&mut rng, dtype, s_shape.0, s_shape.1, 0.3);
                        let d = rounded(dtype, &rng.values(d_shape.0 * d_shape.1));
                        let alpha = 1.25;
                        let mut want = vec![0.0; m * n];
                        for i in 0..m {
                            for j in 0..n {
                                let v: f64 = (0..k)
                                    .map(|p| {
                                        if sparse_left {
                                            at(&s.dense, s_shape.1, trans_sparse, i, p)
                                                * at(&d, d_shape.1, trans_dense, p, j)
                                        } else {
                                            at(&d, d_shape.1, trans_dense, i, p)
                                                * at(&s.dense, s_shape.1, trans_sparse, p, j)
                                        }
                                    })
                                    .sum();
                                want[i * n + j] = alpha * v;
                            }
                        }
                        let sd = DeviceCsr::new(b, dtype, &s, s_shape.0, s_shape.1);
                        let db = upload(b, dtype, &d);
                        let c = poisoned(b, ElemType::float(dtype), m * n);
                        let op = StepOp::SpMM {
                            sparse_left,
                            trans_sparse,
                            trans_dense,
                            m,
                            n,
                            k,
                            alpha: ScalarExpr::Lit(alpha),
                        };
                        let d_arg = dense(&db, d_shape.0, d_shape.1);
                        let inputs = if sparse_left {
                            [sd.arg(), d_arg]
                        } else {
                            [d_arg, sd.arg()]
                        };
                        let what = format!("spmm {dtype:?} m={m} n={n} k={k} left={sparse_left} ts={trans_sparse} td={trans_dense}");
                        b.run_step(&step(op), &inputs, &[dense(&c, m, n)], dtype, alpha)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_close(&download(b, &c), &want, tolerance(dtype), &what);
                    }
                }
            }
        }
    }
}

/// `alpha op(A) op(A)^T` on the host in f64 (`op(A)` is `n x k`: `A` is `k x n` when
/// transposed).
fn host_syrk(a: &[f64], n: usize, k: usize, trans: bool, alpha: f64) -> Vec<f64> {
    let cols = if trans { n } else { k };
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| at(a, cols, trans, i, p) * at(a, cols, trans, j, p))
                .sum();
            c[i * n + j] = alpha * s;
        }
    }
    c
}

/// The operand shape and blocking of a SYRK step.
#[derive(Clone, Copy)]
struct SyrkShape {
    n: usize,
    k: usize,
    trans: bool,
    block_rows: usize,
}

/// Runs a SYRK step (full result, no overlapped map) on `a` into a poisoned `n x n` output and
/// downloads it.
fn gpu_syrk(
    b: &CudaBackend,
    dtype: DType,
    a: &[f64],
    shape: SyrkShape,
    alpha: f64,
    tf32: bool,
) -> Vec<f64> {
    let SyrkShape {
        n,
        k,
        trans,
        block_rows,
    } = shape;
    let ab = upload(b, dtype, a);
    let c = poisoned(b, ElemType::float(dtype), n * n);
    let op = StepOp::Syrk {
        trans,
        n,
        k,
        alpha: ScalarExpr::Lit(alpha),
        tf32,
        lower_only: false,
        block_rows,
        row_block: None,
    };
    let a_arg = if trans {
        dense(&ab, k, n)
    } else {
        dense(&ab, n, k)
    };
    b.run_step(&step(op), &[a_arg], &[dense(&c, n, n)], dtype, alpha)
        .expect("syrk");
    download(b, &c)
}

/// A rank's block of rows of a SYRK (a partitioned plan's local step): those rows of the full
/// product, both triangles, and nothing else written (the block's own buffer), for blocks at
/// the start, middle and end, one row, and none.
#[test]
fn gpu_syrk_block_of_rows_is_those_rows_of_the_product() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(31);
    for dtype in DTYPES {
        for (n, k, start, end) in [
            (1, 1, 0, 1),
            (17, 5, 0, 9),
            (17, 5, 9, 17),
            (300, 33, 101, 102),
            (300, 33, 5, 5),
            (1030, 50, 257, 771),
        ] {
            let a = rounded(dtype, &rng.values(n * k));
            let alpha = -0.5;
            let want = host_syrk(&a, n, k, false, alpha);
            let ab = upload(b, dtype, &a);
            let m = end - start;
            let c = poisoned(b, ElemType::float(dtype), (m * n).max(1));
            let op = StepOp::Syrk {
                trans: false,
                n,
                k,
                alpha: ScalarExpr::Lit(alpha),
                tf32: false,
                lower_only: true,
                block_rows: 0,
                row_block: Some((start, end)),
            };
            b.run_step(
                &step(op),
                &[dense(&ab, n, k)],
                &[dense(&c, m, n)],
                dtype,
                alpha,
            )
            .expect("a block of rows of a SYRK");
            let got = download(b, &c);
            let what = format!("syrk rows {start}..{end} {dtype:?} n={n} k={k}");
            assert_close(
                &got[..m * n],
                &want[start * n..end * n],
                tolerance(dtype),
                &what,
            );
        }
    }
}

/// Labels of `n` points in `k` clusters with cluster `empty` unused.
fn labels_with_empty_cluster(rng: &mut Rng, n: usize, k: usize, empty: usize) -> Vec<u32> {
    (0..n)
        .map(|_| loop {
            let c = rng.below(k);
            if c != empty || k == 1 {
                break c as u32;
            }
        })
        .collect()
}

/// The selection matrix on the host: row offsets, columns, values.
fn host_selection(labels: &[u32], k: usize) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
    let mut row_ptr = vec![0i32];
    let mut cols = vec![];
    let mut vals = vec![];
    for c in 0..k {
        let members: Vec<usize> = (0..labels.len())
            .filter(|p| labels[*p] as usize == c)
            .collect();
        for p in &members {
            cols.push(*p as i32);
            vals.push(1.0 / members.len() as f64);
        }
        row_ptr.push(cols.len() as i32);
    }
    (row_ptr, cols, vals)
}

#[test]
fn gpu_spmm_kernel_kmeans_case_k_times_v_transposed() {
    // Its own backend: the test checks the size of the cuSPARSE work buffer, which other tests
    // running at the same time on the shared backend may grow.
    let Some(own) = try_backend(test_config("spmm-workspace")) else {
        return;
    };
    let b = &own;
    let mut rng = Rng(5);
    for dtype in DTYPES {
        for (n, k) in [(1, 1), (300, 7), (1025, 10)] {
            let kd = rounded(dtype, &rng.values(n * n));
            let labels = labels_with_empty_cluster(&mut rng, n, k, 3);
            let (row_ptr, col_idx, vals) = host_selection(&labels, k);
            let vals = rounded(dtype, &vals);
            let mut v_dense = vec![0.0; k * n];
            for c in 0..k {
                for e in row_ptr[c] as usize..row_ptr[c + 1] as usize {
                    v_dense[c * n + col_idx[e] as usize] = vals[e];
                }
            }
            // C (n x k) = K V^T.
            let mut want = vec![0.0; n * k];
            for i in 0..n {
                for c in 0..k {
                    want[i * k + c] = (0..n).map(|p| kd[i * n + p] * v_dense[c * n + p]).sum();
                }
            }
            let h = HostCsr {
                dense: v_dense,
                row_ptr,
                col_idx,
                values: vals,
            };
            let v = DeviceCsr::new(b, dtype, &h, k, n);
            let kb = upload(b, dtype, &kd);
            let op = StepOp::SpMM {
                sparse_left: false,
                trans_sparse: true,
                trans_dense: false,
                m: n,
                n: k,
                k: n,
                alpha: ScalarExpr::Lit(1.0),
            };
            let before = b.sparse_workspace_bytes();
            for round in 0..2 {
                let c = poisoned(b, ElemType::float(dtype), n * k);
                b.run_step(
                    &step(op.clone()),
                    &[dense(&kb, n, n), v.arg()],
                    &[dense(&c, n, k)],
                    dtype,
                    1.0,
                )
                .expect("spmm K V^T");
                assert_close(
                    &download(b, &c),
                    &want,
                    tolerance(dtype),
                    &format!("K V^T {dtype:?} n={n} k={k} round {round}"),
                );
            }
            // The work buffer is sized once: a second run of the same shape does not grow it.
            let after_first = b.sparse_workspace_bytes();
            assert!(after_first >= before);
            let c = poisoned(b, ElemType::float(dtype), n * k);
            b.run_step(
                &step(op),
                &[dense(&kb, n, n), v.arg()],
                &[dense(&c, n, k)],
                dtype,
                1.0,
            )
            .expect("spmm");
            assert_eq!(b.sparse_workspace_bytes(), after_first);
        }
    }
}

#[test]
fn gpu_spmv_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(6);
    for dtype in DTYPES {
        for (rows, cols) in [(1, 1), (9, 4), (300, 257)] {
            for trans in [false, true] {
                let s = random_csr(&mut rng, dtype, rows, cols, 0.2);
                let (x_len, y_len) = if trans { (rows, cols) } else { (cols, rows) };
                let x = rounded(dtype, &rng.values(x_len));
                let alpha = 0.5;
                let want: Vec<f64> = (0..y_len)
                    .map(|i| {
                        alpha
                            * (0..x_len)
                                .map(|p| at(&s.dense, cols, trans, i, p) * x[p])
                                .sum::<f64>()
                    })
                    .collect();
                let sd = DeviceCsr::new(b, dtype, &s, rows, cols);
                let xb = upload(b, dtype, &x);
                let y = poisoned(b, ElemType::float(dtype), y_len);
                let op = StepOp::SpMV {
                    trans,
                    alpha: ScalarExpr::Lit(alpha),
                };
                b.run_step(
                    &step(op),
                    &[sd.arg(), dense(&xb, x_len, 1)],
                    &[dense(&y, y_len, 1)],
                    dtype,
                    alpha,
                )
                .expect("spmv");
                assert_close(
                    &download(b, &y),
                    &want,
                    tolerance(dtype),
                    &format!("spmv {dtype:?} {rows}x{cols} trans={trans}"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Builtin steps

#[test]
fn gpu_diag_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(7);
    for dtype in DTYPES {
        for n in [1, 33, 300] {
            let m = rounded(dtype, &rng.values(n * n));
            let want: Vec<f64> = (0..n).map(|i| m[i * n + i]).collect();
            let mb = upload(b, dtype, &m);
            let out = poisoned(b, ElemType::float(dtype), n);
            b.run_step(
                &step(StepOp::Builtin(Builtin::Diag(Diag::default()))),
                &[dense(&mb, n, n)],
                &[dense(&out, n, 1)],
                dtype,
                1.0,
            )
            .expect("diag");
            assert_eq!(download(b, &out), want, "diag {dtype:?} n={n}");
        }
    }
}

#[test]
fn gpu_counts_match_host_with_an_empty_cluster() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(8);
    for dtype in DTYPES {
        // One block (n <= 2^16): its warps' own bins up to k = 256, runs of 16 labels a
        // thread (16,384 a round), and the block's bins beyond (k = 9000: two passes over its
        // 8192 bins); the block histogram beyond 2^16 (k = 9000: three passes over its 4096
        // bins; chunks of 256 x 8 labels a block); labels >= k ignored.
        for (n, k) in [
            (1, 1),
            (1000, 7),
            (16_383, 5),
            (16_385, 5),
            (3000, 256),
            (3000, 257),
            ((1 << 16) + 2049, 3),
            (5000, 33),
            (20_000, 9000),
            ((1 << 16) + 1, 9000),
            (100_003, 100),
            ((1 << 20) + 3, 10),
        ] {
            let mut labels = labels_with_empty_cluster(&mut rng, n, k, 2);
            if n > 10 {
                labels[3] = k as u32;
                labels[n - 1] = u32::MAX;
            }
            let want: Vec<f64> = (0..k)
                .map(|c| labels.iter().filter(|l| **l as usize == c).count() as f64)
                .collect();
            // In random order, then sorted (long runs of one label: one warp's lanes on one
            // bin, a thread's labels one run).
            let mut sorted = labels.clone();
            sorted.sort_unstable();
            for labels in [labels, sorted] {
                let lb = upload_u32(b, &labels);
                let out = poisoned(b, ElemType::float(dtype), k);
                for _ in 0..2 {
                    // Twice: the scratch counters must be cleared between calls.
                    b.run_step(
                        &step(StepOp::Builtin(Builtin::Counts(Counts {
                            k: Dim::Fixed(k),
                        }))),
                        &[Arg::Index { buf: &lb, len: n }],
                        &[dense(&out, k, 1)],
                        dtype,
                        1.0,
                    )
                    .expect("counts");
                    assert_eq!(download(b, &out), want, "counts {dtype:?} n={n} k={k}");
                }
            }
        }
    }
}

#[test]
fn gpu_label_sums_match_host_and_repeat_exactly() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(9);
    for dtype in DTYPES {
        // Sizes around the 1024-thread stride, an empty cluster, and labels >= k (ignored);
        // past LABEL_SUMS_VECTOR_MAX_WORK (n k = 2^25) the one-pass kernel of the row sums
        // (an n x 1 matrix), and k = 1000 (one pass in f32; too many bins per warp in f64,
        // which keeps the per-cluster kernel).
        for (n, k) in [
            (1, 1),
            (1023, 3),
            (1025, 7),
            (5000, 33),
            (60_000, 10),
            ((1 << 20) + 3, 40),
            (40_000, 1000),
        ] {
            let mut labels = labels_with_empty_cluster(&mut rng, n, k, 2);
            if n > 10 {
                labels[3] = k as u32;
                labels[n - 1] = u32::MAX;
            }
            let x = rounded(dtype, &rng.values(n));
            let mut want = vec![0.0; k];
            for (xi, &l) in x.iter().zip(&labels) {
                if (l as usize) < k {
                    want[l as usize] += xi;
                }
            }
            let (xb, lb) = (upload(b, dtype, &x), upload_u32(b, &labels));
            let out = poisoned(b, ElemType::float(dtype), k);
            let mut runs = Vec::new();
            for _ in 0..2 {
                b.run_step(
                    &step(StepOp::Builtin(Builtin::LabelSums(LabelSums {
                        k: Dim::Fixed(k),
                    }))),
                    &[dense(&xb, n, 1), Arg::Index { buf: &lb, len: n }],
                    &[dense(&out, k, 1)],
                    dtype,
                    1.0,
                )
                .expect("label sums");
                runs.push(download(b, &out));
            }
            let what = format!("label sums {dtype:?} n={n} k={k}");
            assert_close(&runs[0], &want, tolerance(dtype), &what);
            if k > 2 {
                assert_eq!(runs[0][2], 0.0, "{what}: the empty cluster");
            }
            // A fixed order of additions: bit for bit the same on every run.
            assert_eq!(runs[0], runs[1], "{what}: not deterministic");
        }
    }
}

#[test]
fn gpu_label_row_sums_match_host_and_repeat_exactly() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(10);
    for dtype in DTYPES {
        // One point; widths around the 32-column chunks; blocks of 512 rows and their
        // remainders; Lloyd's k = 100 at d = 32; the planner's largest k (256); an empty
        // cluster and labels >= k (ignored, as the vector case does).
        for (n, d, k) in [
            (1, 2, 1),
            (5, 31, 3),
            (513, 33, 7),
            (4099, 64, 256),
            (100_003, 32, 100),
            (20_000, 70, 5),
        ] {
            let mut labels = labels_with_empty_cluster(&mut rng, n, k, 2);
            if n > 10 {
                labels[3] = k as u32;
                labels[n - 1] = u32::MAX;
            }
            let x = rounded(dtype, &rng.values(n * d));
            let mut want = vec![0.0; k * d];
            for (i, &l) in labels.iter().enumerate() {
                if (l as usize) < k {
                    for f in 0..d {
                        want[l as usize * d + f] += x[i * d + f];
                    }
                }
            }
            let (xb, lb) = (upload(b, dtype, &x), upload_u32(b, &labels));
            let out = poisoned(b, ElemType::float(dtype), k * d);
            let mut runs = Vec::new();
            for _ in 0..2 {
                b.run_step(
                    &step(StepOp::Builtin(Builtin::LabelSums(LabelSums {
                        k: Dim::Fixed(k),
                    }))),
                    &[dense(&xb, n, d), Arg::Index { buf: &lb, len: n }],
                    &[dense(&out, k, d)],
                    dtype,
                    1.0,
                )
                .expect("label row sums");
                runs.push(download(b, &out));
            }
            let what = format!("label row sums {dtype:?} n={n} d={d} k={k}");
            assert_close(&runs[0], &want, tolerance(dtype), &what);
            if k > 2 {
                assert!(
                    runs[0][2 * d..3 * d].iter().all(|&v| v == 0.0),
                    "{what}: the empty cluster"
                );
            }
            assert_eq!(runs[0], runs[1], "{what}: not deterministic");
        }
    }
}

#[test]
fn gpu_selection_matches_host_with_an_empty_cluster() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(9);
    for dtype in DTYPES {
        for (n, k, empty) in [
            (1, 1, 9),
            (7, 3, 1),
            (3000, 7, 3),
            (2049, 40, 0),
            (32768, 319, 7),
            (70001, 100, 5),
        ] {
            let labels = labels_with_empty_cluster(&mut rng, n, k, empty);
            let (row_ptr, cols, vals) = host_selection(&labels, k);
            let (rp, ci, vb) = gpu_selection(b, dtype, &labels, k);
            let what = format!("selection {dtype:?} n={n} k={k}");
            assert_eq!(
                b.download(&rp).expect("download"),
                HostVec::I32(row_ptr.clone()),
                "{what}: row offsets"
            );
            if k > 1 && empty < k {
                assert_eq!(
                    row_ptr[empty],
                    row_ptr[empty + 1],
                    "{what}: the empty cluster has an empty row"
                );
            }
            assert_eq!(
                b.download(&ci).expect("download"),
                HostVec::I32(cols),
                "{what}: column indices"
            );
            assert_close(
                &download(b, &vb),
                &vals,
                tolerance(dtype),
                &format!("{what}: values"),
            );
        }
    }
}

/// The full order of a selection on the host: the points of clusters `0..k` cluster by
/// cluster (ascending within each), then the points with labels `>= k`, ascending.
fn host_order(labels: &[u32], k: usize) -> Vec<i32> {
    let (_, mut order, _) = host_selection(labels, k);
    order.extend((0..labels.len() as i32).filter(|p| labels[*p as usize] as usize >= k));
    order
}

/// Labels of `n` points below `k + 3`, so some (about 3 in k + 3) are past the clusters.
fn labels_past_k(rng: &mut Rng, n: usize, k: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(k + 3) as u32).collect()
}

/// Runs the selection step on `labels`; returns the device buffers (row offsets, column
/// indices, values), each poisoned first.
fn gpu_selection(
    b: &CudaBackend,
    dtype: DType,
    labels: &[u32],
    k: usize,
) -> (CudaBuffer, CudaBuffer, CudaBuffer) {
    gpu_weighted_selection(b, dtype, labels, None, k)
}

/// [`gpu_selection`], weighted by `weights` where given.
fn gpu_weighted_selection(
    b: &CudaBackend,
    dtype: DType,
    labels: &[u32],
    weights: Option<&[f64]>,
    k: usize,
) -> (CudaBuffer, CudaBuffer, CudaBuffer) {
    let n = labels.len();
    let lb = upload_u32(b, labels);
    let wb = weights.map(|w| upload(b, dtype, w));
    let rp = poisoned(b, ElemType::I32, k + 1);
    let ci = poisoned(b, ElemType::I32, n.max(1));
    let vb = poisoned(b, ElemType::float(dtype), n.max(1));
    let out = Arg::Csr {
        row_ptr: &rp,
        col_idx: &ci,
        values: &vb,
        rows: k,
        cols: n,
        nnz: n,
    };
    let (op, inputs) = match &wb {
        Some(wb) => (
            Selection::weighted(Dim::Fixed(k)),
            vec![Arg::Index { buf: &lb, len: n }, dense(wb, n, 1)],
        ),
        None => (
            Selection::plain(Dim::Fixed(k)),
            vec![Arg::Index { buf: &lb, len: n }],
        ),
    };
    b.run_step(
        &step(StepOp::Builtin(Builtin::Selection(op))),
        &inputs,
        &[out],
        dtype,
        1.0,
    )
    .expect("selection");
    (rp, ci, vb)
}

/// The weighted selection: the plain one's structure (points past `k` after the clusters),
/// each value its weight over the cluster's total, 0 in a cluster of weight 0; repeatable bit
/// for bit (one warp per row, no atomics).
#[test]
fn gpu_weighted_selection_divides_weights_by_their_cluster_total() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(43);
    for dtype in DTYPES {
        for (n, k) in [(1, 1), (5, 0), (7, 3), (33, 2), (3001, 7), (5000, 1536)] {
            let labels = labels_past_k(&mut rng, n, k);
            // Integer weights 0..3: some clusters weigh 0.
            let weights: Vec<f64> = (0..n).map(|_| rng.below(4) as f64).collect();
            let what = format!("weighted selection {dtype:?} n={n} k={k}");
            let (row_ptr, cols, _) = host_selection(&labels, k);
            let mut want = Vec::with_capacity(cols.len());
            for c in 0..k {
                let row = &cols[row_ptr[c] as usize..row_ptr[c + 1] as usize];
                let total: f64 = row.iter().map(|&p| weights[p as usize]).sum();
                want.extend(row.iter().map(|&p| {
                    if total != 0.0 {
                        weights[p as usize] / total
                    } else {
                        0.0
                    }
                }));
            }
            let (rp, ci, vb) = gpu_weighted_selection(b, dtype, &labels, Some(&weights), k);
            assert_eq!(
                b.download(&rp).expect("download"),
                HostVec::I32(row_ptr.clone()),
                "{what}: row offsets"
            );
            let HostVec::I32(mut got) = b.download(&ci).expect("download") else {
                panic!("{what}: column indices are not i32")
            };
            got.truncate(n);
            assert_eq!(got, host_order(&labels, k), "{what}: column indices");
            let nnz = cols.len();
            let values = download(b, &vb);
            assert_close(
                &values[..nnz],
                &want,
                tolerance(dtype),
                &format!("{what}: values"),
            );
            let (_, _, again) = gpu_weighted_selection(b, dtype, &labels, Some(&weights), k);
            assert_eq!(
                download(b, &again)[..nnz],
                values[..nnz],
                "{what}: repeatable"
            );
        }
    }
}

/// The one-block selection and the chunked kernels write the same matrix, bit for bit (row
/// offsets, columns, values), on sizes the launcher gives the one block.
#[test]
fn gpu_selection_in_one_block_equals_the_chunked_kernels_bit_for_bit() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(47);
    for dtype in DTYPES {
        for (n, k) in [
            (1, 0),
            (1, 1),
            (33, 2),
            (3001, 7),
            (10_500, 26),
            (32_768, 319),
        ] {
            let labels = labels_past_k(&mut rng, n, k);
            let lb = upload_u32(b, &labels);
            let build = |one_block: bool| {
                let rp = poisoned(b, ElemType::I32, k + 1);
                let ci = poisoned(b, ElemType::I32, n);
                let vb = poisoned(b, ElemType::float(dtype), n);
                let device = b.device();
                device.bind().expect("bind");
                let mut scratch = device.scratch.lock().expect("selection scratch");
                let builtins = device.builtins(device.main());
                let (labels, row_ptr, col_idx, values) = (
                    lb.device_ptr(),
                    rp.device_ptr(),
                    ci.device_ptr(),
                    vb.device_ptr(),
                );
                let scalar = dtype.scalar_type();
                // SAFETY: `lb` holds `n` labels, `rp` `k + 1` entries, `ci` and `vb` `n` each,
                // all of this backend's context, used on its main stream.
                unsafe {
                    if one_block {
                        builtins.selection_one_block(scalar, labels, n, k, row_ptr, col_idx, values)
                    } else {
                        builtins.selection_chunked(
                            scalar,
                            &mut scratch,
                            labels,
                            n,
                            k,
                            row_ptr,
                            col_idx,
                            values,
                        )
                    }
                }
                .expect("selection");
                drop(scratch);
                [rp, ci, vb].map(|x| b.download(&x).expect("download"))
            };
            assert_eq!(build(true), build(false), "selection {dtype:?} n={n} k={k}");
        }
    }
}

#[test]
fn gpu_selection_lists_points_past_k_after_the_clusters() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(41);
    for dtype in DTYPES {
        for (n, k) in [
            (1, 1),
            (1, 0),
            (5, 0),
            (7, 3),
            (33, 2),
            (3001, 7),
            (2049, 40),
            (5000, 1535),
            (5000, 1536),
            // One block up to 32 * 1024 points and 319 clusters (the points outside make
            // 320), the chunked kernels beyond.
            (3000, 319),
            (3000, 320),
            (32768, 26),
            (32769, 26),
            (40000, 100),
        ] {
            let mut labels = labels_past_k(&mut rng, n, k);
            if n == 1 && k == 1 {
                labels[0] = 1;
            }
            let what = format!("selection {dtype:?} n={n} k={k}");
            let (row_ptr, cols, vals) = host_selection(&labels, k);
            let (rp, ci, vb) = gpu_selection(b, dtype, &labels, k);
            assert_eq!(
                b.download(&rp).expect("download"),
                HostVec::I32(row_ptr.clone()),
                "{what}: row offsets"
            );
            let nnz = cols.len();
            assert_eq!(row_ptr[k] as usize, nnz, "{what}: nnz");
            let mut order = host_order(&labels, k);
            let HostVec::I32(mut got) = b.download(&ci).expect("download") else {
                panic!("{what}: column indices are not i32")
            };
            got.truncate(n);
            assert_eq!(got, order, "{what}: column indices, then the points past k");
            order.sort_unstable();
            assert_eq!(
                order,
                (0..n as i32).collect::<Vec<_>>(),
                "{what}: a permutation"
            );
            let got_vals = download(b, &vb);
            assert_close(
                &got_vals[..nnz],
                &vals,
                tolerance(dtype),
                &format!("{what}: values"),
            );
            assert!(
                got_vals[nnz..n].iter().all(|v| v.is_finite()),
                "{what}: values past nnz are not finite"
            );
        }
    }
}

/// Runs a permutation step (`inverse` or not) of `src` (an index vector when `width` is `None`,
/// else `n x width` dense) by the selection `(rp, ci)` of `k` clusters; returns the output.
#[allow(clippy::too_many_arguments)]
fn gpu_permute(
    b: &CudaBackend,
    dtype: DType,
    inverse: bool,
    (rp, ci, vb): (&CudaBuffer, &CudaBuffer, &CudaBuffer),
    k: usize,
    src: &CudaBuffer,
    n: usize,
    width: Option<usize>,
) -> CudaBuffer {
    let s = Arg::Csr {
        row_ptr: rp,
        col_idx: ci,
        values: vb,
        rows: k,
        cols: n,
        nnz: n,
    };
    let (dst, a, o);
    match width {
        None => {
            dst = poisoned(b, ElemType::U32, n.max(1));
            a = Arg::Index { buf: src, len: n };
            o = Arg::Index { buf: &dst, len: n };
        }
        Some(w) => {
            dst = poisoned(b, ElemType::float(dtype), (n * w).max(1));
            a = dense(src, n, w);
            o = dense(&dst, n, w);
        }
    }
    b.run_step(
        &step(StepOp::Builtin(Builtin::PermuteRows(PermuteRows {
            inverse,
        }))),
        &[a, s],
        &[o],
        dtype,
        1.0,
    )
    .expect("permute rows");
    dst
}

#[test]
fn gpu_permute_rows_both_ways_with_points_past_k() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(43);
    for dtype in DTYPES {
        for (n, k, width) in [
            (1, 1, 1),
            (1, 0, 3),
            (7, 3, 5),
            (33, 2, 1),
            (257, 5, 3),
            (3001, 40, 7),
        ] {
            let labels = labels_past_k(&mut rng, n, k);
            let what = format!("permute {dtype:?} n={n} k={k} width={width}");
            let order: Vec<usize> = host_order(&labels, k).iter().map(|&p| p as usize).collect();
            let (rp, ci, vb) = gpu_selection(b, dtype, &labels, k);
            let sel = (&rp, &ci, &vb);
            // Index vectors: forward sorts the labels by cluster, the points past k last.
            let lb = upload_u32(b, &labels);
            let sorted = gpu_permute(b, dtype, false, sel, k, &lb, n, None);
            let want: Vec<u32> = order.iter().map(|&i| labels[i]).collect();
            let HostVec::U32(mut got) = b.download(&sorted).expect("download") else {
                panic!("{what}: not u32")
            };
            got.truncate(n);
            assert_eq!(got, want, "{what}: labels by cluster");
            let back = gpu_permute(b, dtype, true, sel, k, &sorted, n, None);
            let HostVec::U32(mut got) = b.download(&back).expect("download") else {
                panic!("{what}: not u32")
            };
            got.truncate(n);
            assert_eq!(got, labels, "{what}: labels back");
            // Dense: forward gathers rows, inverse scatters them; inverse(forward(M)) == M.
            let m = rounded(dtype, &rng.values(n * width));
            let mb = upload(b, dtype, &m);
            let fwd = gpu_permute(b, dtype, false, sel, k, &mb, n, Some(width));
            let want: Vec<f64> = order
                .iter()
                .flat_map(|&i| m[i * width..(i + 1) * width].to_vec())
                .collect();
            assert_eq!(
                download(b, &fwd)[..n * width],
                want[..],
                "{what}: rows by cluster"
            );
            let back = gpu_permute(b, dtype, true, sel, k, &fwd, n, Some(width));
            assert_eq!(download(b, &back)[..n * width], m[..], "{what}: rows back");
            let inv = gpu_permute(b, dtype, true, sel, k, &mb, n, Some(width));
            let mut want = vec![f64::NAN; n * width];
            for (p, &i) in order.iter().enumerate() {
                want[i * width..(i + 1) * width].copy_from_slice(&m[p * width..(p + 1) * width]);
            }
            assert_eq!(
                download(b, &inv)[..n * width],
                want[..],
                "{what}: inverse alone"
            );
        }
    }
}

#[test]
fn gpu_copy_copies_dense_and_index_values() {
    let Some(b) = gpu() else { return };
    let src = upload(b, DType::F64, &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let dst = poisoned(b, ElemType::F64, 5);
    b.run_step(
        &step(StepOp::Copy),
        &[dense(&src, 5, 1)],
        &[dense(&dst, 5, 1)],
        DType::F64,
        1.0,
    )
    .expect("copy");
    assert_eq!(download(b, &dst), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    let isrc = upload_u32(b, &[9, 8, 7]);
    let idst = poisoned(b, ElemType::U32, 3);
    b.run_step(
        &step(StepOp::Copy),
        &[Arg::Index { buf: &isrc, len: 3 }],
        &[Arg::Index { buf: &idst, len: 3 }],
        DType::F64,
        1.0,
    )
    .expect("copy");
    assert_eq!(
        b.download(&idst).expect("download"),
        HostVec::U32(vec![9, 8, 7])
    );
}

// ---------------------------------------------------------------------------------------------
// Fused kernels from kernels-gen

fn input(name: &str, access: Access) -> Input {
    Input {
        name: name.into(),
        access,
    }
}

fn bin(op: BinaryOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

/// Map: out0 = x * s + r[j] - c[i]; out1 = (x > c[i]) ? t^T : exp(-|x|) * bc.
fn map_spec(dtype: DType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype: dtype.scalar_type(),
        inputs: vec![
            input("x", Access::Matrix { transposed: false }),
            input("t", Access::Matrix { transposed: true }),
            input("r", Access::Row),
            input("c", Access::Col),
            input("s", Access::Scalar),
            input("bc", Access::Broadcast),
        ],
        form: Form::Map {
            outputs: vec![
                bin(
                    BinaryOp::Sub,
                    bin(
                        BinaryOp::Add,
                        bin(BinaryOp::Mul, Expr::Input(0), Expr::Input(4)),
                        Expr::Input(2),
                    ),
                    Expr::Input(3),
                ),
                Expr::select(
                    bin(BinaryOp::Gt, Expr::Input(0), Expr::Input(3)),
                    Expr::Input(1),
                    bin(
                        BinaryOp::Mul,
                        Expr::unary(
                            UnaryOp::Exp,
                            Expr::unary(UnaryOp::Neg, Expr::unary(UnaryOp::Abs, Expr::Input(0))),
                        ),
                        Expr::Input(5),
                    ),
                ),
            ],
        },
        provenance: vec!["gpu test map".into()],
    }
}

/// Rows: store x - c[i]; sum of x^2, argmin of x - c[i], min of x, x[i, idx[i]].
fn rows_spec(dtype: DType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype: dtype.scalar_type(),
        inputs: vec![
            input("x", Access::Matrix { transposed: false }),
            input("c", Access::Col),
            input("idx", Access::IndexCol),
        ],
        form: Form::Rows {
            stores: vec![bin(BinaryOp::Sub, Expr::Input(0), Expr::Input(1))],
            reductions: vec![
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: bin(BinaryOp::Mul, Expr::Input(0), Expr::Input(0)),
                },
                Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: bin(BinaryOp::Sub, Expr::Input(0), Expr::Input(1)),
                },
                Reduction {
                    kind: ReduceKind::Min,
                    expr: Expr::Input(0),
                },
                Reduction {
                    kind: ReduceKind::Pick { index_input: 2 },
                    expr: Expr::Input(0),
                },
            ],
        },
        provenance: vec!["gpu test rows".into()],
    }
}

/// Cols: sum of x * r[j], max of x, min of x (x read transposed when `transposed`).
fn cols_spec(dtype: DType, transposed: bool) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype: dtype.scalar_type(),
        inputs: vec![
            input("x", Access::Matrix { transposed }),
            input("r", Access::Row),
        ],
        form: Form::Cols {
            reductions: vec![
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: bin(BinaryOp::Mul, Expr::Input(0), Expr::Input(1)),
                },
                Reduction {
                    kind: ReduceKind::Max,
                    expr: Expr::Input(0),
                },
                Reduction {
                    kind: ReduceKind::Min,
                    expr: Expr::Input(0),
                },
            ],
        },
        provenance: vec!["gpu test cols".into()],
    }
}

fn fused(spec: KernelSpec, rows: usize, cols: usize) -> Step {
    step(StepOp::Fused(FusedStep {
        name: spec.name(),
        spec,
        rows,
        cols,
        depth: 0,
        width: 0,
        share: None,
    }))
}

#[test]
fn fused_test_specs_are_valid() {
    // Runs without a GPU: the specs the GPU tests use are well-formed for kernels-gen.
    for dtype in DTYPES {
        for spec in [
            map_spec(dtype),
            symmetric_map_spec(dtype),
            rows_spec(dtype),
            cols_spec(dtype, false),
            cols_spec(dtype, true),
        ] {
            assert!(
                kernels_gen::try_emit(&spec).is_ok(),
                "{:?}",
                kernels_gen::try_emit(&spec).err()
            );
        }
    }
}

const FUSED_SIZES: [(usize, usize); 5] = [(1, 1), (37, 5), (3, 300), (300, 257), (1000, 33)];

#[test]
fn gpu_fused_map_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(10);
    for dtype in DTYPES {
        for (rows, cols) in FUSED_SIZES {
            let x = rounded(dtype, &rng.values(rows * cols));
            let t = rounded(dtype, &rng.values(rows * cols)); // stored cols x rows
            let r = rounded(dtype, &rng.values(cols));
            let c = rounded(dtype, &rng.values(rows));
            let s = rounded(dtype, &[1.75])[0];
            let bc = rounded(dtype, &[0.5])[0];
            let mut want0 = vec![0.0; rows * cols];
            let mut want1 = vec![0.0; rows * cols];
            for i in 0..rows {
                for j in 0..cols {
                    let xv = x[i * cols + j];
                    want0[i * cols + j] = xv * s + r[j] - c[i];
                    want1[i * cols + j] = if xv > c[i] {
                        t[j * rows + i]
                    } else {
                        (-xv.abs()).exp() * bc
                    };
                }
            }
            let (xb, tb, rb, cb, bcb) = (
                upload(b, dtype, &x),
                upload(b, dtype, &t),
                upload(b, dtype, &r),
                upload(b, dtype, &c),
                upload(b, dtype, &[bc]),
            );
            let o0 = poisoned(b, ElemType::float(dtype), rows * cols);
            let o1 = poisoned(b, ElemType::float(dtype), rows * cols);
            let inputs = [
                dense(&xb, rows, cols),
                dense(&tb, cols, rows),
                dense(&rb, 1, cols),
                dense(&cb, rows, 1),
                Arg::Scalar(s),
                dense(&bcb, 1, 1),
            ];
            b.run_step(
                &fused(map_spec(dtype), rows, cols),
                &inputs,
                &[dense(&o0, rows, cols), dense(&o1, rows, cols)],
                dtype,
                1.0,
            )
            .expect("fused map");
            let what = format!("fused map {dtype:?} {rows}x{cols}");
            assert_close(
                &download(b, &o0),
                &want0,
                tolerance(dtype),
                &format!("{what} out0"),
            );
            assert_close(
                &download(b, &o1),
                &want1,
                tolerance(dtype),
                &format!("{what} out1"),
            );
        }
    }
}

/// `x` raised to `y` in `dtype`'s arithmetic, with exponents 1 to 4 by multiplication as both
/// backends compute them.
fn pow_in(dtype: DType, x: f64, y: f64) -> f64 {
    match dtype {
        DType::F32 => {
            let x = x as f32;
            f64::from(match y {
                1.0 => x,
                2.0 => x * x,
                3.0 => (x * x) * x,
                4.0 => (x * x) * (x * x),
                _ => x.powf(y as f32),
            })
        }
        DType::F64 => match y {
            1.0 => x,
            2.0 => x * x,
            3.0 => (x * x) * x,
            4.0 => (x * x) * (x * x),
            _ => x.powf(y),
        },
    }
}

#[test]
fn gpu_pow_multiplies_for_small_integer_exponents() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(21);
    let spec = |dtype: DType| KernelSpec {
        narrow: Default::default(),
        dtype: dtype.scalar_type(),
        inputs: vec![
            input("x", Access::Matrix { transposed: false }),
            input("y", Access::Scalar),
        ],
        form: Form::Map {
            outputs: vec![bin(BinaryOp::Pow, Expr::Input(0), Expr::Input(1))],
        },
        provenance: vec!["gpu test pow".into()],
    };
    for dtype in DTYPES {
        let mut x: Vec<f64> = rng.values(300).iter().map(|v| 4.0 * v - 2.0).collect();
        x.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            1e30,
            -1e30,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        x.push(f64::NAN);
        let x = rounded(dtype, &x);
        let n = x.len();
        let xb = upload(b, dtype, &x);
        for y in [1.0, 2.0, 3.0, 4.0, 0.0, -1.0, 0.5, 2.5] {
            let out = poisoned(b, ElemType::float(dtype), n);
            b.run_step(
                &fused(spec(dtype), n, 1),
                &[dense(&xb, n, 1), Arg::Scalar(y)],
                &[dense(&out, n, 1)],
                dtype,
                1.0,
            )
            .expect("pow map");
            let got = download(b, &out);
            for (i, (g, xv)) in got.iter().zip(&x).enumerate() {
                let w = pow_in(dtype, *xv, y);
                let what = format!("pow({xv}, {y}) {dtype:?} element {i}: got {g}, want {w}");
                if w.is_nan() {
                    assert!(g.is_nan(), "{what}");
                } else if [1.0, 2.0, 3.0, 4.0].contains(&y) || w.is_infinite() || w == 0.0 {
                    // Multiplications round exactly alike on both sides; so do the edge cases.
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}");
                } else {
                    let tol = match dtype {
                        DType::F32 => 1e-6,
                        DType::F64 => 1e-14,
                    };
                    assert!((g - w).abs() <= tol * w.abs(), "{what}");
                }
            }
        }
    }
}

/// `out0 = pow(s * K + c[i], 2)`, `out1 = K`, K read as a lower-symmetric matrix.
fn symmetric_map_spec(dtype: DType) -> KernelSpec {
    KernelSpec {
        narrow: Default::default(),
        dtype: dtype.scalar_type(),
        inputs: vec![
            input("K", Access::LowerSymmetric),
            input("c", Access::Col),
            input("s", Access::Scalar),
        ],
        form: Form::Map {
            outputs: vec![
                bin(
                    BinaryOp::Pow,
                    bin(
                        BinaryOp::Add,
                        bin(BinaryOp::Mul, Expr::Input(2), Expr::Input(0)),
                        Expr::Input(1),
                    ),
                    Expr::Const(2.0),
                ),
                Expr::Input(0),
            ],
        },
        provenance: vec!["gpu test symmetric map".into()],
    }
}

#[test]
fn gpu_tile_pair_map_mirrors_the_lower_triangle() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(14);
    for dtype in DTYPES {
        for n in [1, 2, 31, 32, 33, 65, 200, 1000, 1100] {
            // K's upper triangle is NaN: a read of it shows in the output.
            let mut k = rounded(dtype, &rng.values(n * n));
            for i in 0..n {
                for j in (i + 1)..n {
                    k[i * n + j] = f64::NAN;
                }
            }
            let c = rounded(dtype, &rng.values(n));
            let s = rounded(dtype, &[0.625])[0];
            let sym = |i: usize, j: usize| k[i.max(j) * n + i.min(j)];
            let mut want0 = vec![0.0; n * n];
            let mut want1 = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..n {
                    want0[i * n + j] = (s * sym(i, j) + c[i]).powi(2);
                    want1[i * n + j] = sym(i, j);
                }
            }
            let spec = symmetric_map_spec(dtype);
            let kb = upload(b, dtype, &k);
            let cb = upload(b, dtype, &c);
            let o0 = poisoned(b, ElemType::float(dtype), n * n);
            let o1 = poisoned(b, ElemType::float(dtype), n * n);
            let inputs = [dense(&kb, n, n), dense(&cb, n, 1), Arg::Scalar(s)];
            b.run_step(
                &fused(spec.clone(), n, n),
                &inputs,
                &[dense(&o0, n, n), dense(&o1, n, n)],
                dtype,
                1.0,
            )
            .expect("tile-pair map");
            let what = format!("tile-pair map {dtype:?} n={n}");
            assert_close(&download(b, &o0), &want0, tolerance(dtype), &what);
            assert_eq!(download(b, &o1), want1, "{what}: the mirror is not exact");
            // In place: the first output over K itself.
            b.run_step(
                &fused(spec.clone(), n, n),
                &inputs,
                &[dense(&kb, n, n), dense(&o1, n, n)],
                dtype,
                1.0,
            )
            .expect("tile-pair map in place");
            assert_close(
                &download(b, &kb),
                &want0,
                tolerance(dtype),
                &format!("{what} in place"),
            );
        }
        // A square space is required.
        let kb = upload(b, dtype, &[1.0; 12]);
        let cb = upload(b, dtype, &[0.0; 4]);
        let o = poisoned(b, ElemType::float(dtype), 12);
        let err = b
            .run_step(
                &fused(symmetric_map_spec(dtype), 4, 3),
                &[dense(&kb, 4, 3), dense(&cb, 4, 1), Arg::Scalar(1.0)],
                &[dense(&o, 4, 3), dense(&o, 4, 3)],
                dtype,
                1.0,
            )
            .unwrap_err();
        assert!(err.to_string().contains("square"), "{err}");
    }
}

#[test]
fn gpu_fused_rows_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(11);
    for dtype in DTYPES {
        for (rows, cols) in FUSED_SIZES {
            let x = rounded(dtype, &rng.values(rows * cols));
            let c = rounded(dtype, &rng.values(rows));
            let idx: Vec<u32> = (0..rows).map(|_| rng.below(cols) as u32).collect();
            let mut store = vec![0.0; rows * cols];
            let (mut sum, mut argmin, mut min, mut pick) = (
                vec![0.0; rows],
                vec![0.0; rows],
                vec![0.0; rows],
                vec![0.0; rows],
            );
            for i in 0..rows {
                let row = &x[i * cols..(i + 1) * cols];
                let mut best = (f64::INFINITY, 0usize);
                for (j, v) in row.iter().enumerate() {
                    let d = rounded(dtype, &[v - c[i]])[0];
                    store[i * cols + j] = d;
                    if d < best.0 {
                        best = (d, j);
                    }
                }
                sum[i] = row.iter().map(|v| v * v).sum();
                argmin[i] = best.1 as f64;
                min[i] = row.iter().cloned().fold(f64::INFINITY, f64::min);
                pick[i] = row[idx[i] as usize];
            }
            let (xb, cb, ib) = (
                upload(b, dtype, &x),
                upload(b, dtype, &c),
                upload_u32(b, &idx),
            );
            let fe = ElemType::float(dtype);
            let (os, osum, oarg, omin, opick) = (
                poisoned(b, fe, rows * cols),
                poisoned(b, fe, rows),
                poisoned(b, ElemType::U32, rows),
                poisoned(b, fe, rows),
                poisoned(b, fe, rows),
            );
            let outputs = [
                dense(&os, rows, cols),
                dense(&osum, rows, 1),
                Arg::Index {
                    buf: &oarg,
                    len: rows,
                },
                dense(&omin, rows, 1),
                dense(&opick, rows, 1),
            ];
            let inputs = [
                dense(&xb, rows, cols),
                dense(&cb, rows, 1),
                Arg::Index {
                    buf: &ib,
                    len: rows,
                },
            ];
            b.run_step(
                &fused(rows_spec(dtype), rows, cols),
                &inputs,
                &outputs,
                dtype,
                1.0,
            )
            .expect("fused rows");
            let what = format!("fused rows {dtype:?} {rows}x{cols}");
            let tol = tolerance(dtype);
            assert_close(&download(b, &os), &store, tol, &format!("{what} store"));
            assert_close(
                &download(b, &osum),
                &sum,
                tol * (cols as f64).sqrt().max(1.0),
                &format!("{what} sum"),
            );
            assert_eq!(download(b, &oarg), argmin, "{what} argmin");
            assert_eq!(download(b, &omin), min, "{what} min");
            assert_eq!(download(b, &opick), pick, "{what} pick");
        }
    }
}

#[test]
fn gpu_fused_cols_matches_host() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(12);
    for dtype in DTYPES {
        for (rows, cols) in FUSED_SIZES {
            for transposed in [false, true] {
                let x = rounded(dtype, &rng.values(rows * cols));
                let r = rounded(dtype, &rng.values(cols));
                let (xr, xc) = if transposed {
                    (cols, rows)
                } else {
                    (rows, cols)
                };
                let xv = |i: usize, j: usize| at(&x, xc, transposed, i, j);
                let sum: Vec<f64> = (0..cols)
                    .map(|j| (0..rows).map(|i| xv(i, j) * r[j]).sum())
                    .collect();
                let max: Vec<f64> = (0..cols)
                    .map(|j| {
                        (0..rows)
                            .map(|i| xv(i, j))
                            .fold(f64::NEG_INFINITY, f64::max)
                    })
                    .collect();
                let min: Vec<f64> = (0..cols)
                    .map(|j| (0..rows).map(|i| xv(i, j)).fold(f64::INFINITY, f64::min))
                    .collect();
                let (xb, rb) = (upload(b, dtype, &x), upload(b, dtype, &r));
                let fe = ElemType::float(dtype);
                let (osum, omax, omin) = (
                    poisoned(b, fe, cols),
                    poisoned(b, fe, cols),
                    poisoned(b, fe, cols),
                );
                b.run_step(
                    &fused(cols_spec(dtype, transposed), rows, cols),
                    &[dense(&xb, xr, xc), dense(&rb, 1, cols)],
                    &[
                        dense(&osum, 1, cols),
                        dense(&omax, 1, cols),
                        dense(&omin, 1, cols),
                    ],
                    dtype,
                    1.0,
                )
                .expect("fused cols");
                let what = format!("fused cols {dtype:?} {rows}x{cols} transposed={transposed}");
                assert_close(
                    &download(b, &osum),
                    &sum,
                    tolerance(dtype) * (rows as f64).sqrt().max(1.0),
                    &format!("{what} sum"),
                );
                assert_eq!(download(b, &omax), max, "{what} max");
                assert_eq!(download(b, &omin), min, "{what} min");
            }
        }
    }
}

#[test]
fn gpu_fused_arguments_are_checked() {
    let Some(b) = gpu() else { return };
    let x = upload(b, DType::F32, &[1.0; 6]);
    let out = poisoned(b, ElemType::F32, 2);
    // cols_spec expects two inputs; one is an error, not a launch.
    let e = b.run_step(
        &fused(cols_spec(DType::F32, false), 3, 2),
        &[dense(&x, 3, 2)],
        &[dense(&out, 1, 2)],
        DType::F32,
        1.0,
    );
    assert!(matches!(e, Err(RuntimeError::InvalidData(_))), "{e:?}");
}

// ---------------------------------------------------------------------------------------------
// NVRTC caches and errors

const CACHE_TEST_SOURCE: &str = r#"extern "C" __global__ void pk_cache_test_kernel(const long long n, float* out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = (float)i * 2.0f;
    }
}
"#;

#[test]
fn gpu_second_backend_loads_kernels_from_the_disk_cache() {
    let dir = temp_dir("disk-cache");
    let dump = temp_dir("dump");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dump);
    let mut config = test_config("disk-cache");
    config.dump_dir = Some(dump.clone());
    let Some(first) = try_backend(config.clone()) else {
        return;
    };
    first
        .compile_kernel("pk_cache_test_kernel", CACHE_TEST_SOURCE)
        .expect("compile");
    let s = first.kernel_cache_stats();
    assert_eq!((s.compiled, s.disk_hits), (1, 0), "{s:?}");
    first
        .compile_kernel("pk_cache_test_kernel", CACHE_TEST_SOURCE)
        .expect("again");
    assert_eq!(first.kernel_cache_stats().memory_hits, 1);
    let cached: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        cached
            .iter()
            .any(|f| f.to_string_lossy().starts_with("pk_cache_test_kernel-")),
        "{cached:?}"
    );
    assert!(
        dump.join("pk_cache_test_kernel.cu").is_file(),
        "no .cu dump"
    );
    let ptx = std::fs::read_to_string(dump.join("pk_cache_test_kernel.ptx")).unwrap_or_default();
    assert!(
        ptx.contains(".entry pk_cache_test_kernel"),
        "no PTX dump: {ptx:.200}"
    );

    config.dump_dir = None;
    let Some(second) = try_backend(config) else {
        return;
    };
    second
        .compile_kernel("pk_cache_test_kernel", CACHE_TEST_SOURCE)
        .expect("load");
    let s = second.kernel_cache_stats();
    assert_eq!(
        (s.compiled, s.disk_hits),
        (0, 1),
        "the second backend compiled again: {s:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dump);
}

#[test]
fn gpu_compile_errors_carry_the_log_and_numbered_source() {
    let Some(b) = gpu() else { return };
    let src = "extern \"C\" __global__ void pk_broken_kernel(float* out)\n{\n    out[0] = undefined_name_xyz;\n}\n";
    match b.compile_kernel("pk_broken_kernel", src) {
        Err(RuntimeError::Compile {
            name,
            log,
            numbered_source,
        }) => {
            assert_eq!(name, "pk_broken_kernel");
            assert!(log.contains("undefined_name_xyz"), "log: {log}");
            assert!(
                numbered_source.contains("3 |     out[0] = undefined_name_xyz;"),
                "{numbered_source}"
            );
            let message = RuntimeError::Compile {
                name,
                log,
                numbered_source,
            }
            .to_string();
            assert!(message.contains("NVRTC could not compile kernel pk_broken_kernel"));
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    // A bad name is rejected before NVRTC sees it.
    assert!(matches!(
        b.compile_kernel("bad name", src),
        Err(RuntimeError::InvalidData(_))
    ));
}

#[test]
fn gpu_tf32_mode_and_missing_devices() {
    if try_backend(test_config("shared")).is_none() {
        return;
    }
    // A device that does not exist is an error, not a panic.
    let e = CudaBackend::with_config(1000, test_config("shared"));
    assert!(matches!(e, Err(RuntimeError::Device(_))), "{e:?}");
    // The TF32 option creates a working backend.
    let mut config = test_config("shared");
    config.allow_tf32 = true;
    let b = try_backend(config).expect("backend with TF32");
    let a = upload(&b, DType::F32, &[1.0, 2.0, 3.0, 4.0]);
    let c = poisoned(&b, ElemType::F32, 4);
    let op = StepOp::Gemm(GemmStep {
        trans_a: false,
        trans_b: false,
        m: 2,
        n: 2,
        k: 2,
        alpha: ScalarExpr::Lit(1.0),
        tf32: false,
    });
    b.run_step(
        &step(op),
        &[dense(&a, 2, 2), dense(&a, 2, 2)],
        &[dense(&c, 2, 2)],
        DType::F32,
        1.0,
    )
    .expect("gemm");
    assert_close(
        &download(&b, &c),
        &[7.0, 10.0, 15.0, 22.0],
        1e-2,
        "tf32 gemm",
    );
}

#[test]
fn gpu_tf32_syrk_is_exact_on_small_integers() {
    let Some(b) = gpu() else { return };
    // Small integers: exact in TF32 and in every sum, so TF32 gives the exact result; rows of
    // 131 elements (not a whole tensor-core row), 37 and 144, a transposed A.
    let mut rng = Rng(31);
    for (n, k, trans) in [
        (300, 131, false),
        (300, 37, false),
        (200, 144, false),
        (129, 131, true),
    ] {
        let a: Vec<f64> = rng
            .values(n * k)
            .iter()
            .map(|v| (v * 5.0).floor() - 2.0)
            .collect();
        let want = host_syrk(&a, n, k, trans, 1.0);
        for block_rows in [0, 128, 1024] {
            let shape = SyrkShape {
                n,
                k,
                trans,
                block_rows,
            };
            assert_eq!(
                gpu_syrk(b, DType::F32, &a, shape, 1.0, true),
                want,
                "tf32 syrk n={n} k={k} trans={trans} block_rows={block_rows}"
            );
        }
    }
}

#[test]
fn gpu_pad_cols_appends_zero_columns() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(37);
    for dtype in [DType::F32, DType::F64] {
        for (rows, cols, padded) in [(1, 1, 1), (3, 5, 16), (257, 131, 144), (64, 128, 129)] {
            let a = rounded(dtype, &rng.values(rows * cols));
            let ab = upload(b, dtype, &a);
            let out = poisoned(b, ElemType::float(dtype), rows * padded);
            let op = StepOp::Builtin(Builtin::PadCols(PadCols { cols: padded }));
            b.run_step(
                &step(op),
                &[dense(&ab, rows, cols)],
                &[dense(&out, rows, padded)],
                dtype,
                1.0,
            )
            .expect("pad columns");
            let mut want = vec![0.0; rows * padded];
            for i in 0..rows {
                want[i * padded..i * padded + cols].copy_from_slice(&a[i * cols..(i + 1) * cols]);
            }
            assert_eq!(
                download(b, &out),
                want,
                "{dtype} {rows} x {cols} -> {padded}"
            );
        }
    }
}

#[test]
fn gpu_syrk_in_bands_and_a_banded_map_on_the_second_lane_match_the_whole() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(41);
    let dtype = DType::F32;
    for (n, k, block_rows) in [(300, 17, 128), (1000, 64, 256), (64, 5, 64)] {
        let a = rounded(dtype, &rng.values(n * k));
        let ab = upload(b, dtype, &a);
        let syrk = step(StepOp::Syrk {
            trans: false,
            n,
            k,
            alpha: ScalarExpr::Lit(1.0),
            tf32: false,
            lower_only: true,
            block_rows,
            row_block: None,
        });
        let map = fused(symmetric_map_spec(dtype), n, n);
        let col = upload(b, dtype, &rounded(dtype, &rng.values(n)));
        let c = poisoned(b, ElemType::F32, n * n);
        let outs = [
            poisoned(b, ElemType::F32, n * n),
            poisoned(b, ElemType::F32, n * n),
        ];
        let (a_in, c_out) = ([dense(&ab, n, k)], [dense(&c, n, n)]);
        let map_in = [dense(&c, n, n), dense(&col, n, 1), Arg::Scalar(0.5)];
        let map_out = [dense(&outs[0], n, n), dense(&outs[1], n, n)];
        b.run_part(&syrk, &a_in, &c_out, dtype, 1.0, StepPart::Prologue, 0)
            .expect("prologue");
        for (r0, r1) in popcorn_dsl::plan::block_row_ranges(n, block_rows) {
            let band = StepPart::Band(r0, r1);
            b.run_part(&syrk, &a_in, &c_out, dtype, 1.0, band, 0)
                .expect("syrk band");
            b.order_lanes(0, 1).expect("order");
            b.run_part(&map, &map_in, &map_out, dtype, 1.0, band, 1)
                .expect("map band");
        }
        b.join_lanes().expect("join");
        // The same map over the whole lower triangle.
        let c2 = poisoned(b, ElemType::F32, n * n);
        let outs2 = [
            poisoned(b, ElemType::F32, n * n),
            poisoned(b, ElemType::F32, n * n),
        ];
        b.run_step(&syrk, &a_in, &[dense(&c2, n, n)], dtype, 1.0)
            .expect("syrk");
        let whole_in = [dense(&c2, n, n), dense(&col, n, 1), Arg::Scalar(0.5)];
        let whole_out = [dense(&outs2[0], n, n), dense(&outs2[1], n, n)];
        b.run_step(&map, &whole_in, &whole_out, dtype, 1.0)
            .expect("map");
        for o in 0..2 {
            let (banded, whole) = (download(b, &outs[o]), download(b, &outs2[o]));
            assert!(
                banded.iter().all(|v| v.is_finite()),
                "n={n}: unwritten elements"
            );
            assert_eq!(banded, whole, "n={n} block_rows={block_rows} output {o}");
        }
        // Parts are refused where they make no sense.
        assert!(b
            .run_part(&syrk, &a_in, &c_out, dtype, 1.0, StepPart::Band(1, 5), 0)
            .is_err());
        assert!(b
            .run_part(&syrk, &a_in, &c_out, dtype, 1.0, StepPart::Prologue, 1)
            .is_err());
    }
}

/// The shared mixed contraction (every store and reduction kind at once) on the GPU against
/// the CPU contraction in f64 (itself tested against a naive reference): both templates
/// (pipelined: `float`, `A * B^T`, no sums by label; tiled: the rest), every operand
/// orientation, strict, TF32 and 16-bit operands (bf16, fp16: the pipelined template's packed
/// pairs on 16-bit tensor cores, the tiled template's staged values rounded; against the CPU
/// given the operands rounded to the same format, whose products are then exact in either),
/// shapes with 1, odd sizes and depths (a packed row's last pair half zero), non-multiples of
/// the 64 x 64 and 256 x 128 tiles and of the 16- and 32-deep slices, more rows than one block
/// of 256, and odd leading dimensions (4-byte copies). Outputs are NaN-poisoned before the
/// run.
#[test]
fn gpu_mixed_contraction_matches_the_cpu() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(29);
    let width = 5;
    let shapes = [
        (1, 1, 1),
        (7, 3, 5),
        (300, 130, 33),
        (513, 257, 70),
        (1000, 9, 200),
    ];
    for (rows, cols, depth) in shapes {
        for (ta, tb) in [(false, true), (false, false), (true, false), (true, true)] {
            for by_label in [true, false] {
                for (dtype, precision) in [
                    (DType::F32, kernel_ir::Precision::Strict),
                    (DType::F64, kernel_ir::Precision::Strict),
                    (DType::F32, kernel_ir::Precision::Tf32),
                    (
                        DType::F32,
                        kernel_ir::Precision::Half(kernel_ir::Half::Bf16),
                    ),
                    (DType::F32, kernel_ir::Precision::Half(kernel_ir::Half::F16)),
                    (DType::F32, kernel_ir::Precision::Tf32x3),
                ] {
                    let tf32 = precision == kernel_ir::Precision::Tf32;
                    let spec = kernel_ir::samples::mixed_contraction(
                        dtype.scalar_type(),
                        (ta, tb),
                        precision,
                        by_label,
                    );
                    let what = format!(
                        "mixed contraction {rows}x{cols}x{depth} ta={ta} tb={tb} \
                         by_label={by_label} {dtype:?} {}",
                        precision.name()
                    );
                    let (ar, ac) = if ta { (depth, rows) } else { (rows, depth) };
                    let (br, bc) = if tb { (cols, depth) } else { (depth, cols) };
                    let a = rounded(dtype, &rng.values(ar * ac));
                    let bm = rounded(dtype, &rng.values(br * bc));
                    let cn = rounded(dtype, &rng.values(cols));
                    let y = rounded(dtype, &rng.values(cols));
                    let labels: Vec<u32> = (0..cols).map(|_| rng.below(width + 1) as u32).collect();
                    let idx: Vec<u32> = (0..rows).map(|_| rng.below(cols) as u32).collect();
                    let g = 0.75;

                    // The CPU reference in f64, strict; for 16-bit operands, from the operands
                    // rounded to the format (the GPU gets them unrounded).
                    let (a_ref, bm_ref) =
                        (as_multiplied(precision, &a), as_multiplied(precision, &bm));
                    let mut cpu_spec = spec.clone();
                    cpu_spec.dtype = kernel_ir::ScalarType::F64;
                    if let Form::Contraction { precision, .. } = &mut cpu_spec.form {
                        *precision = kernel_ir::Precision::Strict;
                    }
                    let args = [
                        crate::cpu::FusedArg::Matrix {
                            data: &a_ref,
                            ld: ac,
                        },
                        crate::cpu::FusedArg::Matrix {
                            data: &bm_ref,
                            ld: bc,
                        },
                        crate::cpu::FusedArg::Vector(&cn),
                        crate::cpu::FusedArg::Vector(&y),
                        crate::cpu::FusedArg::Index(&labels),
                        crate::cpu::FusedArg::Index(&idx),
                        crate::cpu::FusedArg::Scalar(g),
                    ];
                    let n_out = if by_label { 9 } else { 8 };
                    let sizes: Vec<usize> = (0..n_out)
                        .map(|o| match o {
                            0 | 1 => rows * cols,
                            7 if by_label => rows * width,
                            _ => rows,
                        })
                        .collect();
                    let mut want: Vec<Vec<f64>> =
                        sizes.iter().map(|&n| vec![f64::NAN; n]).collect();
                    let mut argmin = vec![u32::MAX; rows];
                    {
                        let (first, rest) = want.split_at_mut(2);
                        let (p_out, d_out) = first.split_at_mut(1);
                        let mut outs: Vec<crate::cpu::FusedOut<'_, f64>> = vec![
                            crate::cpu::FusedOut::Values(&mut p_out[0]),
                            crate::cpu::FusedOut::Values(&mut d_out[0]),
                            crate::cpu::FusedOut::Indices(&mut argmin),
                        ];
                        for v in rest.iter_mut().skip(1) {
                            outs.push(crate::cpu::FusedOut::Values(v));
                        }
                        crate::cpu::run_contraction(
                            &cpu_spec,
                            (rows, cols),
                            depth,
                            width,
                            &args,
                            &mut outs,
                        )
                        .unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
                    }

                    let fe = ElemType::float(dtype);
                    let (abuf, bbuf, cbuf, ybuf) = (
                        upload(b, dtype, &a),
                        upload(b, dtype, &bm),
                        upload(b, dtype, &cn),
                        upload(b, dtype, &y),
                    );
                    let (lbuf, ibuf) = (upload_u32(b, &labels), upload_u32(b, &idx));
                    let outs: Vec<CudaBuffer> = sizes
                        .iter()
                        .enumerate()
                        .map(|(o, &n)| {
                            poisoned(b, if o == 2 { ElemType::U32 } else { fe }, n.max(1))
                        })
                        .collect();
                    let inputs = [
                        dense(&abuf, ar, ac),
                        dense(&bbuf, br, bc),
                        dense(&cbuf, 1, cols),
                        dense(&ybuf, 1, cols),
                        Arg::Index {
                            buf: &lbuf,
                            len: cols,
                        },
                        Arg::Index {
                            buf: &ibuf,
                            len: rows,
                        },
                        Arg::Scalar(g),
                    ];
                    let outputs: Vec<Arg<'_, CudaBuffer>> = outs
                        .iter()
                        .enumerate()
                        .map(|(o, buf)| match o {
                            0 | 1 => dense(buf, rows, cols),
                            2 => Arg::Index { buf, len: rows },
                            7 if by_label => dense(buf, rows, width),
                            _ => dense(buf, rows, 1),
                        })
                        .collect();
                    let step = step(StepOp::Fused(FusedStep {
                        name: spec.name(),
                        spec,
                        rows,
                        cols,
                        depth,
                        width: if by_label { width } else { 0 },
                        share: None,
                    }));
                    b.run_step(&step, &inputs, &outputs, dtype, 1.0)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));

                    // TF32 keeps about 10 bits of each operand.
                    let tol = if tf32 { 2e-2 } else { tolerance(dtype) * 10.0 };
                    let scale = (depth as f64).sqrt().max(1.0);
                    let got: Vec<Vec<f64>> = outs.iter().map(|o| download(b, o)).collect();
                    for o in [0, 1, 3, 4, n_out - 1] {
                        assert_close(
                            &got[o][..sizes[o]],
                            &want[o],
                            tol * scale,
                            &format!("{what} out{o}"),
                        );
                    }
                    for o in 5..n_out - 1 {
                        // Sums over the columns (sum, dot, by label).
                        assert_close(
                            &got[o][..sizes[o]],
                            &want[o],
                            tol * scale * (cols as f64).sqrt().max(1.0),
                            &format!("{what} out{o}"),
                        );
                    }
                    // The chosen column holds the minimum distance (near-ties may differ).
                    for i in 0..rows {
                        let chosen = got[2][i] as usize;
                        assert!(chosen < cols, "{what}: argmin {chosen} of {cols}");
                        let d = want[1][i * cols + chosen];
                        assert!(
                            d - want[3][i] <= tol * scale * (1.0 + d.abs()),
                            "{what}: row {i} chose {chosen} at {d}, min {}",
                            want[3][i]
                        );
                    }
                }
            }
        }
    }
}

/// TF32 operands rounded once in memory (the default) against the kernel rounding every staged
/// chunk (`round_tf32_operands: false`): the same bits in every output, for a contraction over
/// enough rows to round (`A` and `B` distinct, and one matrix as both, as `X * X^T` has it),
/// with odd sizes and leading dimensions.
#[test]
fn gpu_tf32_operands_rounded_once_give_the_same_bits() {
    let Some(rounding) = gpu() else { return };
    let Some(in_kernel) = try_backend(CudaConfig {
        round_tf32_operands: false,
        ..test_config("in-kernel-rounding")
    }) else {
        return;
    };
    let mut rng = Rng(31);
    let width = 6;
    for (rows, cols, depth, same) in [(1500, 700, 45, false), (1300, 1300, 37, true)] {
        let spec = kernel_ir::samples::mixed_contraction(
            kernel_ir::ScalarType::F32,
            (false, true),
            kernel_ir::Precision::Tf32,
            true,
        );
        let a = rng.values(rows * depth);
        let bm = if same {
            a.clone()
        } else {
            rng.values(cols * depth)
        };
        let cn = rng.values(cols);
        let y = rng.values(cols);
        let labels: Vec<u32> = (0..cols).map(|_| rng.below(width) as u32).collect();
        let idx: Vec<u32> = (0..rows).map(|_| rng.below(cols) as u32).collect();
        let sizes = [
            rows * cols,
            rows * cols,
            rows,
            rows,
            rows,
            rows,
            rows,
            rows * width,
            rows,
        ];
        let run = |b: &CudaBackend| -> Vec<Vec<f64>> {
            let fe = ElemType::F32;
            let (abuf, bbuf) = (upload(b, DType::F32, &a), upload(b, DType::F32, &bm));
            let (cbuf, ybuf) = (upload(b, DType::F32, &cn), upload(b, DType::F32, &y));
            let (lbuf, ibuf) = (upload_u32(b, &labels), upload_u32(b, &idx));
            let outs: Vec<CudaBuffer> = sizes
                .iter()
                .enumerate()
                .map(|(o, &n)| poisoned(b, if o == 2 { ElemType::U32 } else { fe }, n))
                .collect();
            // One matrix as both operands where `same`: the launcher rounds it once for both.
            let b_arg = if same {
                dense(&abuf, rows, depth)
            } else {
                dense(&bbuf, cols, depth)
            };
            let inputs = [
                dense(&abuf, rows, depth),
                b_arg,
                dense(&cbuf, 1, cols),
                dense(&ybuf, 1, cols),
                Arg::Index {
                    buf: &lbuf,
                    len: cols,
                },
                Arg::Index {
                    buf: &ibuf,
                    len: rows,
                },
                Arg::Scalar(0.75),
            ];
            let outputs: Vec<Arg<'_, CudaBuffer>> = outs
                .iter()
                .enumerate()
                .map(|(o, buf)| match o {
                    0 | 1 => dense(buf, rows, cols),
                    2 => Arg::Index { buf, len: rows },
                    7 => dense(buf, rows, width),
                    _ => dense(buf, rows, 1),
                })
                .collect();
            let step = step(StepOp::Fused(FusedStep {
                name: spec.name(),
                spec: spec.clone(),
                rows,
                cols,
                depth,
                width,
                share: None,
            }));
            b.run_step(&step, &inputs, &outputs, DType::F32, 1.0)
                .unwrap_or_else(|e| panic!("{rows}x{cols}x{depth}: {e}"));
            outs.iter().map(|o| download(b, o)).collect()
        };
        let (once, staged) = (run(rounding), run(&in_kernel));
        for (o, (x, z)) in once.iter().zip(&staged).enumerate() {
            // Sums by label (output 7) add from several blocks with atomics: their order, not
            // the operands, may differ.
            if o == 7 {
                assert_close(x, z, 1e-5, &format!("by-label sums, {rows}x{cols}"));
                continue;
            }
            let same_bits = x
                .iter()
                .zip(z)
                .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()));
            assert!(
                same_bits,
                "{rows}x{cols}x{depth} same={same}: output {o} differs"
            );
        }
    }
}

/// Scalar results read back together (`Backend::read_scalars`): the first element of each
/// buffer in every element type, NaN for an empty buffer, more buffers than the staging
/// memory first holds (it grows), against the values written.
#[test]
fn gpu_scalars_read_back_together() {
    let Some(b) = gpu() else { return };
    let mut bufs = vec![
        b.upload(HostSlice::F32(&[1.5, 9.0])).unwrap(),
        b.upload(HostSlice::F64(&[-2.25])).unwrap(),
        b.upload(HostSlice::U32(&[4_000_000_000, 1])).unwrap(),
        b.upload(HostSlice::I32(&[-3])).unwrap(),
        b.alloc(ElemType::F32, 0).unwrap(),
    ];
    let mut want = vec![1.5, -2.25, 4e9, -3.0, f64::NAN];
    for i in 0..9 {
        bufs.push(b.upload(HostSlice::F64(&[i as f64 * 0.5 - 1.0])).unwrap());
        want.push(i as f64 * 0.5 - 1.0);
    }
    for round in 0..2 {
        let refs: Vec<&CudaBuffer> = bufs.iter().collect();
        let got = b.read_scalars(&refs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "round {round}, buffer {i}: {g} read, {w} written"
            );
        }
        // Fewer buffers the second time: the grown staging is reused.
        bufs.truncate(6);
        want.truncate(6);
    }
}

/// The warp-specialised contraction (compute capability 9.0, both operands rounded in memory,
/// products of at least 2^30 elements, two chunks of depth) against the lock-step body on the
/// same inputs: Kernel K-means' symmetric sums of a polynomial kernel by label, over sorted
/// labels of uneven clusters (one of them empty) and over random labels, depths 37, 50 and 64
/// (and 17, which stays on the lock-step body), n past the threshold and no multiple of any
/// tile. The products and element values are the same; the mirror images' sums add in another
/// order. The dumped sources show that the warp-specialised kernel ran.
#[test]
fn gpu_warp_specialised_contraction_matches_the_lock_step_body() {
    let dump = temp_dir("ws-dump");
    let Some(ws) = try_backend(CudaConfig {
        dump_dir: Some(dump.clone()),
        ..test_config("ws")
    }) else {
        return;
    };
    if ws.compute_capability() != (9, 0) {
        eprintln!("skipping: the warp-specialised body needs compute capability 9.0");
        return;
    }
    let Some(lock_step) = try_backend(CudaConfig {
        warp_specialised_contractions: false,
        ..test_config("lock-step")
    }) else {
        return;
    };
    let mut rng = Rng(47);
    let tf32 = kernel_ir::Precision::Tf32;
    let bf16 = kernel_ir::Precision::Half(kernel_ir::Half::Bf16);
    let fp16 = kernel_ir::Precision::Half(kernel_ir::Half::F16);
    // 16-bit operands come packed in pairs: 65 to 128 of them make two chunks, up to 64 one
    // (which the warp-specialised body takes too for packed operands).
    for (n, d, k, sorted, precision) in [
        (33_001, 50, 100, true, tf32),
        (32_800, 64, 7, true, tf32),
        (32_769, 17, 1, true, tf32),
        (33_000, 37, 300, false, tf32),
        (33_001, 100, 100, true, bf16),
        (32_800, 127, 7, false, fp16),
        (32_900, 50, 13, true, bf16),
    ] {
        let spec = kernel_ir::samples::symmetric_kernel_sums(kernel_ir::ScalarType::F32, precision);
        let points = rng.values(n * d);
        // Sorted: cluster c holds a share growing with c, cluster k / 2 none; else random.
        let labels: Vec<u32> = if sorted {
            let weights: Vec<usize> = (0..k)
                .map(|c| if k > 1 && c == k / 2 { 0 } else { c + 1 })
                .collect();
            let total: usize = weights.iter().sum();
            let mut out = Vec::with_capacity(n);
            for (c, w) in weights.iter().enumerate() {
                let end = if c + 1 == k {
                    n
                } else {
                    out.len() + n * w / total
                };
                out.resize(end.min(n), c as u32);
            }
            out
        } else {
            (0..n).map(|_| rng.below(k) as u32).collect()
        };
        let run = |b: &CudaBackend| {
            symmetric_sums_on(b, &spec, (n, d, k), &points, &labels, 0.5)
                .unwrap_or_else(|e| panic!("{n}x{d}, k = {k}: {e}"))
        };
        let (got, want) = (run(&ws), run(&lock_step));
        assert_close(
            &got,
            &want,
            1e-5,
            &format!(
                "n = {n}, d = {d}, k = {k}, sorted = {sorted}, {}",
                precision.name()
            ),
        );
    }
    let names: Vec<String> = std::fs::read_dir(&dump)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    // TF32 on rounded operands (r3), 16-bit on packed ones (r0).
    for variant in ["_r3_ws", "_r0_ws"] {
        assert!(
            names.iter().any(|f| f.contains(variant)),
            "no warp-specialised {variant} kernel among the dumped sources: {names:?}"
        );
    }
}

/// The operand values a product at `precision` multiplies, for an f64 reference: rounded to
/// the 16-bit format for 16-bit operands (whose products are then exact), as they are
/// otherwise.
fn as_multiplied(precision: kernel_ir::Precision, values: &[f64]) -> Vec<f64> {
    match precision {
        kernel_ir::Precision::Half(half) => values
            .iter()
            .map(|v| {
                crate::backend::from_half_bits(half, crate::backend::to_half_bits(half, *v as f32))
                    as f64
            })
            .collect(),
        _ => values.to_vec(),
    }
}

/// Runs `spec` (a [`kernel_ir::samples::symmetric_kernel_sums`]) on `b` over `n` points of `d`
/// values (the one matrix as both operands), their labels below `k` and the scalar `g`: the
/// `n x k` sums, poisoned before the run.
fn symmetric_sums_on(
    b: &CudaBackend,
    spec: &KernelSpec,
    (n, d, k): (usize, usize, usize),
    points: &[f64],
    labels: &[u32],
    g: f64,
) -> Result<Vec<f64>, RuntimeError> {
    let points = upload(b, DType::F32, points);
    let labels = upload_u32(b, labels);
    let out = poisoned(b, ElemType::F32, n * k);
    let inputs = [
        dense(&points, n, d),
        dense(&points, n, d),
        Arg::Index {
            buf: &labels,
            len: n,
        },
        Arg::Scalar(g),
    ];
    let outputs = [dense(&out, n, k)];
    let step = step(StepOp::Fused(FusedStep {
        name: spec.name(),
        spec: spec.clone(),
        rows: n,
        cols: n,
        depth: d,
        width: k,
        share: None,
    }));
    b.run_step(&step, &inputs, &outputs, DType::F32, 1.0)?;
    Ok(download(b, &out))
}

/// Kernel K-means' symmetric sums by label with 16-bit operands (one matrix as both, packed
/// once) against the CPU in f64 given the points rounded to the same format: the products of
/// 16-bit values are exact, so only the fp32 accumulation differs. 3xTF32 (two split copies of
/// one matrix, one triangle of tiles) against the points themselves: about fp32's accuracy.
/// Sizes of 1, odd sizes and depths (a packed row's last pair half zero), sorted and random
/// labels.
#[test]
fn gpu_sixteen_bit_symmetric_sums_match_the_cpu_on_rounded_points() {
    let Some(b) = gpu() else { return };
    let mut rng = Rng(53);
    for precision in [
        kernel_ir::Precision::Half(kernel_ir::Half::Bf16),
        kernel_ir::Precision::Half(kernel_ir::Half::F16),
        kernel_ir::Precision::Tf32x3,
    ] {
        let spec = kernel_ir::samples::symmetric_kernel_sums(kernel_ir::ScalarType::F32, precision);
        let mut cpu_spec = spec.clone();
        cpu_spec.dtype = kernel_ir::ScalarType::F64;
        if let Form::Contraction { precision, .. } = &mut cpu_spec.form {
            *precision = kernel_ir::Precision::Strict;
        }
        for (n, d, k) in [(1, 1, 1), (300, 17, 7), (1000, 50, 10), (777, 64, 3)] {
            let what = format!("{} n = {n}, d = {d}, k = {k}", precision.name());
            let points = rng.values(n * d);
            // 3xTF32 is about fp32: against the points themselves.
            let rounded = as_multiplied(precision, &points);
            let mut labels: Vec<u32> = (0..n).map(|_| rng.below(k) as u32).collect();
            if n % 2 == 0 {
                labels.sort_unstable();
            }
            let g = 0.5;
            let mut want = vec![f64::NAN; n * k];
            {
                let args = [
                    crate::cpu::FusedArg::Matrix {
                        data: &rounded,
                        ld: d,
                    },
                    crate::cpu::FusedArg::Matrix {
                        data: &rounded,
                        ld: d,
                    },
                    crate::cpu::FusedArg::Index(&labels),
                    crate::cpu::FusedArg::Scalar(g),
                ];
                let mut outs = vec![crate::cpu::FusedOut::Values(&mut want)];
                crate::cpu::run_contraction(&cpu_spec, (n, n), d, k, &args, &mut outs)
                    .unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
            }
            let got = symmetric_sums_on(b, &spec, (n, d, k), &points, &labels, g)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            // Sums of non-negative values: relative error of the fp32 accumulation alone.
            assert_close(&got, &want, 2.0 * tolerance(DType::F32), &what);
        }
    }
}

#[test]
fn a_backend_opens_and_drops_while_another_thread_records() {
    // Opening a context must not synchronize the device: that is refused while a stream of
    // the same context captures (here the recording thread's graph). Dropping one frees
    // library handles, which synchronizes the device and may break the capture off: the
    // recording then fails as an interrupted capture (a later run records again), never as
    // anything else, leaving no stream capturing, and a recording that succeeds replays what
    // it captured.
    let Some(b) = gpu() else {
        return;
    };
    let buf = b.alloc(ElemType::F32, 1000).expect("alloc");
    for (phase, value) in [("open", 3.0), ("drop", 5.0)] {
        b.fill(&buf, -1.0).expect("fill");
        b.synchronize().expect("synchronize");
        let mut beside = if phase == "drop" {
            Some(CudaBackend::with_config(0, test_config("beside")).expect("a second backend"))
        } else {
            None
        };
        let recorded = b.record(&mut || {
            // The side lane joins the capture too (as a plan's steps beside the sums do).
            b.order_lanes(0, 1)?;
            beside = std::thread::scope(|s| {
                let beside = beside.take();
                s.spawn(move || match beside {
                    None => Some(
                        CudaBackend::with_config(0, test_config("beside"))
                            .expect("a backend opens during another thread's recording"),
                    ),
                    Some(other) => {
                        drop(other);
                        None
                    }
                })
                .join()
                .expect("the other thread does not panic")
            });
            b.fill(&buf, value)?;
            b.join_lanes()
        });
        // However the recording ended, neither capture stream is left capturing.
        for (lane, stream) in b.device().capture_streams.iter().enumerate() {
            assert_eq!(
                stream.capture_status().expect("cuStreamIsCapturing"),
                cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
                "{phase}: capture stream {lane}"
            );
        }
        match recorded {
            Ok(recording) => {
                let recording = recording.expect("a GPU records");
                assert!(b.replay(&recording).expect("replay"), "{phase}: replays");
                b.synchronize().expect("synchronize");
                assert!(
                    download(b, &buf).iter().all(|&x| x == value),
                    "{phase}: the replay fills the buffer"
                );
                eprintln!("{phase} beside a recording: recorded");
            }
            Err(e) => {
                assert!(e.is_interrupted_capture(), "{phase}: {e}");
                eprintln!("{phase} beside a recording: broken off ({e})");
            }
        }
        drop(beside);
    }
}
