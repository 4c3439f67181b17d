//! The hooks a caller outside Rust needs (the Python package): stopping a fit from its
//! control callback, predicting with a precomputed kernel's model, and storing a model as
//! parts and building it again.

use popcorn::kkmeans::{
    FitError, Init, Kernel, KernelKMeans, Model, ModelParts, Points, Progress, Scaling,
};
use popcorn::{Context, DType, DeviceSpec};
use std::ops::ControlFlow;

mod common;

/// `n x d` values uniform in [-1, 1).
fn uniform_points(seed: u64, n: usize, d: usize) -> Vec<f64> {
    common::random_values(&mut common::SplitMix64::new(seed), n * d)
}

fn cpu64(k: usize) -> KernelKMeans {
    KernelKMeans::new(k)
        .device(DeviceSpec::Cpu)
        .dtype(DType::F64)
}

/// The linear kernel matrix of `n x d` points.
fn linear_kernel(x: &[f64], d: usize) -> Vec<f64> {
    let rows: Vec<&[f64]> = x.chunks(d).collect();
    rows.iter()
        .flat_map(|a| {
            rows.iter()
                .map(move |b| a.iter().zip(*b).map(|(p, q)| p * q).sum())
        })
        .collect()
}

#[test]
fn a_control_that_breaks_stops_the_fit_where_it_says() {
    let (n, d) = (200, 2);
    let x = uniform_points(1, n, d);
    let km = cpu64(8).init(Init::Random { seed: 3 });
    let full = km.fit(Points::new(n, d, &x).unwrap()).expect("fit");
    assert!(full.iterations > 3, "{} iterations", full.iterations);

    // Breaking after the third iteration: no fourth one runs.
    let mut seen = 0;
    let err = km
        .fit_with_control(Points::new(n, d, &x).unwrap(), &mut |p| match p {
            Progress::Iteration { iteration, .. } => {
                seen = *iteration;
                if *iteration == 3 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
            Progress::Phase(_) => ControlFlow::Continue(()),
        })
        .expect_err("interrupted");
    assert!(matches!(err, FitError::Interrupted(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the fit was interrupted after iteration 3 of run 1"
    );
    assert_eq!(seen, 3);

    // Breaking at a phase, before it starts.
    let err = km
        .fit_with_control(Points::new(n, d, &x).unwrap(), &mut |p| match p {
            Progress::Phase("init") => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        })
        .expect_err("interrupted");
    assert_eq!(
        err.to_string(),
        "the fit was interrupted before the phase `init`"
    );

    // A control that never breaks changes nothing.
    let same = km
        .fit_with_control(Points::new(n, d, &x).unwrap(), &mut |_| {
            ControlFlow::Continue(())
        })
        .expect("fit");
    assert_eq!(same.labels, full.labels);
    assert_eq!(same.objective_history, full.objective_history);

    // The precomputed fit stops the same way.
    let kmat = linear_kernel(&x, d);
    let err = km
        .clone()
        .kernel(Kernel::Precomputed)
        .fit_precomputed_with_control(&kmat, n, &mut |p| match p {
            Progress::Iteration { .. } => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        })
        .expect_err("interrupted");
    assert_eq!(
        err.to_string(),
        "the fit was interrupted after iteration 1 of run 1"
    );
}

#[test]
fn a_precomputed_fit_predicts_from_kernel_values() {
    let (n, m, d) = (60, 9, 3);
    let x = uniform_points(2, n, d);
    let y = uniform_points(4, m, d);
    let km = cpu64(4).init(Init::KMeansPlusPlus { seed: 5 });
    let on_points = km.fit(Points::new(n, d, &x).unwrap()).expect("fit");
    let pre = km
        .clone()
        .kernel(Kernel::Precomputed)
        .fit_precomputed(&linear_kernel(&x, d), n)
        .expect("precomputed fit");
    assert_eq!(pre.labels, on_points.labels);
    let model = pre.model.as_ref().expect("a precomputed fit keeps a model");
    let cross: Vec<f64> = y
        .chunks(d)
        .flat_map(|a| {
            x.chunks(d)
                .map(move |b| a.iter().zip(b).map(|(p, q)| p * q).sum())
        })
        .collect();
    // The self-similarities shift every distance of a point alike: zeros give the same argmin.
    let predicted = model
        .predict_precomputed(&cross, &vec![0.0; m])
        .expect("predict");
    assert_eq!(
        predicted,
        on_points.predict(Points::new(m, d, &y).unwrap()).unwrap()
    );
    let err = model
        .predict(Points::new(m, d, &y).unwrap())
        .expect_err("points");
    assert!(matches!(err, FitError::Parameter(_)), "{err:?}");
}

/// A change that makes model parts inconsistent.
type Spoil = fn(&mut ModelParts);

#[test]
fn model_parts_round_trip_and_are_checked() {
    let (n, m, d) = (50, 7, 2);
    let x = uniform_points(6, n, d);
    let y = uniform_points(7, m, d);
    let fit = cpu64(3)
        .kernel(Kernel::Gaussian { gamma: Some(2.0) })
        .zscore(true)
        .fit(Points::new(n, d, &x).unwrap())
        .expect("fit");
    let parts = fit.model.as_ref().expect("model").parts();
    assert!(parts.scaling.is_some());
    let ctx = || {
        Context::new(DeviceSpec::Cpu)
            .unwrap()
            .with_dtype(DType::F64)
    };
    let again = Model::from_parts(ctx(), parts.clone()).expect("from parts");
    assert_eq!(again.parts(), parts);
    assert_eq!(
        again.predict(Points::new(m, d, &y).unwrap()).unwrap(),
        fit.predict(Points::new(m, d, &y).unwrap()).unwrap()
    );

    let broken: [(&str, Spoil); 5] = [
        ("a label not below k", |p| p.labels[4] = 3),
        ("one value short", |p| {
            p.x.pop();
        }),
        ("a NaN point", |p| p.x[3] = f64::NAN),
        ("a centroid norm short", |p| {
            p.centroid_norms.pop();
        }),
        ("a scaling of another width", |p| {
            p.scaling = Some(Scaling::new(vec![0.0], vec![1.0]).unwrap())
        }),
    ];
    for (what, spoil) in broken {
        let mut p = parts.clone();
        spoil(&mut p);
        let err = Model::from_parts(ctx(), p)
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(matches!(err, FitError::Input(_)), "{what}: {err:?}");
    }
    assert!(matches!(
        Scaling::new(vec![0.0, 1.0], vec![1.0, 0.0]),
        Err(FitError::Input(_))
    ));
    assert!(matches!(
        Scaling::new(vec![0.0], vec![1.0, 2.0]),
        Err(FitError::Input(_))
    ));
}
