//! Helpers shared by the integration tests: a tiny seeded PRNG, random inputs, the example
//! programs, CPU contexts and tolerance checks.
//!
//! The reference evaluator (`popcorn-runtime/src/reference.rs`) is compiled into the tests
//! from its source file, so the tests do not depend on how the runtime exports it.
#![allow(dead_code)]

#[path = "../../popcorn-runtime/src/reference.rs"]
pub mod reference;

use popcorn_dsl::{DType, PlannerConfig, Program};
use popcorn_runtime::{Context, DeviceSpec};
use reference::RefValue;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// SplitMix64: a small, good-enough, seedable generator (no dependency).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`, rounded to the nearest `f32` so that the value is the same in
    /// f32 and f64 computations.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo + (hi - lo) * self.unit()) as f32 as f64
    }

    /// Uniform in `0..n` (`n >= 1`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `len` values uniform in `[-1, 1)`, f32-representable.
pub fn random_values(rng: &mut SplitMix64, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// `n` labels uniform in `0..k`.
pub fn random_labels(rng: &mut SplitMix64, n: usize, k: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(k) as u32).collect()
}

/// A CSR matrix as the runtime takes it, with its dense form for hand-written loops.
#[derive(Clone, Debug)]
pub struct CsrData {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows + 1` offsets.
    pub row_ptr: Vec<i32>,
    /// Column of each entry (sorted within a row, no duplicates).
    pub col_idx: Vec<i32>,
    /// Value of each entry.
    pub values: Vec<f64>,
}

impl CsrData {
    /// The dense row-major form.
    pub fn dense(&self) -> Vec<f64> {
        let mut d = vec![0.0; self.rows * self.cols];
        for i in 0..self.rows {
            for p in self.row_ptr[i] as usize..self.row_ptr[i + 1] as usize {
                d[i * self.cols + self.col_idx[p] as usize] += self.values[p];
            }
        }
        d
    }

    /// The reference evaluator's value.
    pub fn to_ref(&self) -> RefValue {
        RefValue::Csr {
            rows: self.rows,
            cols: self.cols,
            row_ptr: self.row_ptr.iter().map(|v| *v as usize).collect(),
            col_idx: self.col_idx.iter().map(|v| *v as usize).collect(),
            values: self.values.clone(),
        }
    }
}

/// A random CSR matrix: each entry is stored with probability `density` (so some rows are
/// empty), values uniform in `[-1, 1)`, f32-representable.
pub fn random_csr(rng: &mut SplitMix64, rows: usize, cols: usize, density: f64) -> CsrData {
    let mut row_ptr = vec![0i32];
    let mut col_idx = Vec::new();
    let mut values = Vec::new();
    for _ in 0..rows {
        for j in 0..cols {
            if rng.unit() < density {
                col_idx.push(j as i32);
                values.push(rng.uniform(-1.0, 1.0));
            }
        }
        row_ptr.push(values.len() as i32);
    }
    CsrData {
        rows,
        cols,
        row_ptr,
        col_idx,
        values,
    }
}

/// The programs of every `examples/programs/*.pop` file, by name.
pub fn example_programs() -> BTreeMap<String, Program> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/programs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pop"))
        .collect();
    files.sort();
    let mut out = BTreeMap::new();
    for f in files {
        let src = std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        let programs = Program::parse_all(&src)
            .unwrap_or_else(|e| panic!("{} does not parse: {e:?}", f.display()));
        for p in programs {
            out.insert(p.name.clone(), p);
        }
    }
    out
}

/// A CPU context computing in `dtype`, fusion on (whatever the environment says).
pub fn cpu(dtype: DType) -> Context {
    cpu_with(PlannerConfig {
        dtype,
        ..PlannerConfig::default()
    })
}

/// A CPU context with a planner configuration.
pub fn cpu_with(config: PlannerConfig) -> Context {
    Context::new(DeviceSpec::Cpu)
        .expect("the CPU context always opens")
        .with_config(config)
}

/// The relative tolerance used for a dtype in the example-program tests.
pub fn rtol(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-9,
        DType::F32 => 1e-4,
    }
}

/// The largest finite magnitude of `v`, at least 1: the scale tolerances are relative to.
pub fn scale_of(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(1.0f64, |m, x| m.max(x.abs()))
}

/// Whether `got` matches `want` within `tol` (absolute); infinities must match exactly, NaN
/// matches only NaN.
pub fn same(got: f64, want: f64, tol: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= tol
}

/// Compares element by element, relative to the largest magnitude of `want` (at least 1);
/// the error names the first mismatches.
pub fn check_close(what: &str, got: &[f64], want: &[f64], rtol: f64) -> Result<(), String> {
    check_close_scaled(what, got, want, rtol * scale_of(want))
}

/// Compares element by element within the absolute tolerance `tol`.
pub fn check_close_scaled(what: &str, got: &[f64], want: &[f64], tol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| !same(**g, **w, tol))
        .take(5)
        .map(|(i, (g, w))| format!("[{i}] got {g:e}, expected {w:e} (diff {:e})", (g - w).abs()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{what}: mismatches beyond {tol:e}: {}",
            bad.join("; ")
        ))
    }
}

/// Panics with the message of [`check_close`].
#[track_caller]
pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64) {
    if let Err(e) = check_close(what, got, want, rtol) {
        panic!("{e}");
    }
}

/// Checks labels against a distance matrix `d` (`n x k`, row-major) whose exact argmin is
/// `want`: equal labels, or a label whose distance is within `tol` of the minimum (a near-tie
/// that rounding may break either way).
pub fn check_labels(
    what: &str,
    got: &[u32],
    want: &[u32],
    d: &[f64],
    k: usize,
    tol: f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} labels, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g == w {
            continue;
        }
        let (g, w) = (g as usize, w as usize);
        if g >= k {
            return Err(format!(
                "{what}: label {g} of point {i} is not below k = {k}"
            ));
        }
        let (dg, dw) = (d[i * k + g], d[i * k + w]);
        if !same(dg, dw, tol) {
            return Err(format!(
                "{what}: point {i} got label {g} (distance {dg:e}), expected {w} (distance {dw:e}); not a near-tie within {tol:e}"
            ));
        }
    }
    Ok(())
}

/// The exact argmin of each row of `d` (`n x k`), ties to the lowest index.
pub fn argmin_rows(d: &[f64], k: usize) -> Vec<u32> {
    d.chunks(k)
        .map(|row| {
            let mut best = 0;
            for c in 1..k {
                if row[c] < row[best] {
                    best = c;
                }
            }
            best as u32
        })
        .collect()
}

/// A context on the first GPU, or `None` when there is none and tests may skip; with
/// `POPCORN_REQUIRE_GPU` set (the GPU bundle sets it), a missing GPU panics instead.
pub fn gpu_or_skip(dtype: DType) -> Option<Context> {
    match popcorn_runtime::cuda::cuda_available() {
        Ok(n) if n > 0 => Some(
            Context::new(DeviceSpec::Cuda(0))
                .expect("GPU context")
                .with_dtype(dtype),
        ),
        other => {
            let why = match other {
                Ok(_) => "no CUDA device".to_string(),
                Err(e) => e,
            };
            if std::env::var_os("POPCORN_REQUIRE_GPU").is_some_and(|v| !v.is_empty() && v != "0") {
                panic!("POPCORN_REQUIRE_GPU is set but no GPU is usable: {why}");
            }
            eprintln!("skipping GPU test: {why}");
            None
        }
    }
}
