//! Kernel K-means against the exact float64 reference results on scikit-learn's digits
//! (tests/data, copied from shared/data): features divided by 16, k = 10, init i mod k.

use popcorn::io::{load, LoadOptions};
use popcorn::kkmeans::{Kernel, KernelKMeans, Points};
use popcorn::{DType, DeviceSpec};
use serde_json::Value;

mod common;

fn digits() -> (usize, usize, Vec<f64>) {
    let ds = load(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/digits.csv"),
        &LoadOptions::default(),
    )
    .expect("digits.csv");
    assert!(ds.labels.is_some());
    (ds.n, ds.d, ds.x.iter().map(|v| v / 16.0).collect())
}

fn fixture(kernel: &str) -> Value {
    let path = format!(
        "{}/tests/data/digits_scaled-{kernel}-k10.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn kernel_of(name: &str) -> Kernel {
    match name {
        "linear" => Kernel::Linear,
        "polynomial" => Kernel::Polynomial {
            gamma: 1.0,
            coef0: 1.0,
            degree: 2.0,
        },
        "gaussian" => Kernel::Gaussian {
            gamma: Some(1.0 / 64.0),
        },
        "sigmoid" => Kernel::Sigmoid {
            gamma: Some(1.0 / 64.0),
            coef0: 0.0,
        },
        _ => unreachable!(),
    }
}

fn check(kernel: &str, dtype: DType, device: DeviceSpec) {
    let (n, d, x) = digits();
    let f = fixture(kernel);
    let fit = KernelKMeans::new(10)
        .kernel(kernel_of(kernel))
        .dtype(dtype)
        .device(device)
        .fit(Points::new(n, d, &x).unwrap())
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    let want_labels: Vec<u32> = f["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let want_hist: Vec<f64> = f["objective_history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let want_obj = f["objective"].as_f64().unwrap();
    let agree = fit
        .labels
        .iter()
        .zip(&want_labels)
        .filter(|(a, b)| a == b)
        .count() as f64
        / n as f64;
    let rel = (fit.objective - want_obj).abs() / want_obj.abs();
    match dtype {
        DType::F64 => {
            assert_eq!(fit.labels, want_labels, "{kernel}: labels");
            assert_eq!(
                fit.iterations,
                f["iterations"].as_u64().unwrap() as usize,
                "{kernel}: iterations"
            );
            assert_eq!(fit.objective_history.len(), want_hist.len());
            for (i, (a, b)) in fit.objective_history.iter().zip(&want_hist).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-9 * b.abs(),
                    "{kernel}: objective {i}: {a} vs {b}"
                );
            }
            assert!(
                rel <= 1e-9,
                "{kernel}: objective {} vs {want_obj}",
                fit.objective
            );
            assert!(fit.converged);
        }
        DType::F32 => {
            assert!(
                agree >= 0.99,
                "{kernel}: only {:.2}% of labels agree",
                100.0 * agree
            );
            assert!(
                rel <= 1e-5,
                "{kernel}: objective {} vs {want_obj} ({rel:e} relative)",
                fit.objective
            );
        }
    }
}

#[test]
fn digits_linear_f64_matches_exactly() {
    check("linear", DType::F64, DeviceSpec::Cpu);
}

#[test]
fn digits_polynomial_gaussian_sigmoid_f64_match_exactly() {
    for k in ["polynomial", "gaussian", "sigmoid"] {
        check(k, DType::F64, DeviceSpec::Cpu);
    }
}

#[test]
fn digits_f32_agrees_within_tolerance() {
    for k in ["linear", "polynomial", "gaussian", "sigmoid"] {
        check(k, DType::F32, DeviceSpec::Cpu);
    }
}

#[test]
fn digits_on_the_gpu_f32_and_f64() {
    if common::gpu_or_skip(DType::F32).is_none() {
        return;
    }
    for k in ["linear", "polynomial", "gaussian", "sigmoid"] {
        check(k, DType::F32, DeviceSpec::Cuda(0));
        check(k, DType::F64, DeviceSpec::Cuda(0));
    }
}
