//! Expansion tests of `popcorn::program!`: programs declared with the macro run on the CPU
//! backend and match hand-computed values. The whole file denies warnings, so the generated
//! code must not trigger any lint in a user's crate.
#![deny(
    warnings,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    unused_qualifications,
    unused_results
)]

use popcorn::{Context, DeviceSpec, RuntimeError, Tensor};

popcorn::program! {
    // Scaling: one tensor and one scalar parameter.
    fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) {
        Y = a * X;
    }

    // The facade's doc example.
    fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (labels: Index[n]) {
        D = -2 * X * C^T + rownorms(X) + rownorms(C)^T;
        labels = argmin_rows(D);
    }

    // `k` appears in no input: it becomes a trailing `usize` parameter. `selection` holds
    // 1/|c| in row c, so `V * X` are the cluster means.
    fn cluster_means(X: Dense[n, d], labels: Index[n]) -> (M: Dense[k, d], sizes: Col[k]) {
        V = selection(labels, k);
        M = V * X;
        sizes = counts(labels, k);
    }

    // Scalar outputs: one computed on the device, one folded on the host.
    fn energy(X: Dense[n, d], w: Scalar) -> (Y: Dense[n, d], e: Scalar, half: Scalar) {
        Y = w * X;
        e = sum(Y .* Y);
        half = w / 2;
    }

    // Only a scalar output.
    fn total(X: Dense[n, d]) -> (s: Scalar) {
        s = sum(X);
    }

    // Parameter names that the generated functions use themselves, and two free dimensions.
    fn clash(ctx: Dense[n, d], out: Scalar, args: Dense[n, d], labels: Index[n]) -> (program: Dense[n, d], a: Col[j], b: Col[k]) {
        program = out * ctx + args;
        a = counts(labels, j);
        b = counts(labels, k);
    }

    // Rust keywords as names become raw identifiers.
    fn r#type(r#in: Col[n]) -> (r#match: Col[n]) {
        r#match = 2 * r#in;
    }
}

fn cpu() -> Context {
    Context::new(DeviceSpec::Cpu).expect("the CPU backend is always available")
}

fn values(ctx: &Context, t: &Tensor) -> Vec<f64> {
    ctx.to_f64(t).expect("download")
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "lengths differ: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-4 * w.abs().max(1.0);
        assert!(
            (g - w).abs() <= tol,
            "entry {i}: got {g}, want {w} (all: {got:?})"
        );
    }
}

/// Deterministic values in [-2, 2), different for every (seed, index).
fn data(seed: u64, len: usize) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let h = (seed * 7919 + i as u64 * 104_729 + 17) % 4001;
            h as f64 / 1000.0 - 2.0
        })
        .collect()
}

#[test]
fn scale_multiplies_every_entry() {
    let ctx = cpu();
    for (n, d) in [(1, 1), (3, 5), (7, 2), (33, 17)] {
        let xs = data((n * 100 + d) as u64, n * d);
        let x = ctx.dense(n, d, &xs).expect("upload");
        let out = scale::run(&ctx, &x, -1.5).expect("run");
        let want: Vec<f64> = xs.iter().map(|v| -1.5 * v).collect();
        assert_eq!(out.Y.dims(), (n, d));
        assert_close(&values(&ctx, &out.Y), &want);
    }
}

#[test]
fn facade_example_assigns_nearest_centroids() {
    let ctx = cpu();
    let x = ctx.dense(3, 1, &[0.0, 1.0, 10.0]).expect("upload");
    let c = ctx.dense(2, 1, &[0.5, 9.0]).expect("upload");
    let out = nearest::run(&ctx, &x, &c).expect("run");
    assert_eq!(ctx.to_u32(&out.labels).expect("download"), vec![0, 0, 1]);
}

#[test]
fn nearest_matches_a_naive_search() {
    let ctx = cpu();
    for (n, d, k) in [(1, 1, 1), (5, 3, 2), (19, 4, 7)] {
        let xs = data(n as u64, n * d);
        let cs = data(1000 + k as u64, k * d);
        let x = ctx.dense(n, d, &xs).expect("upload");
        let c = ctx.dense(k, d, &cs).expect("upload");
        let got = ctx
            .to_u32(&nearest::run(&ctx, &x, &c).expect("run").labels)
            .expect("download");
        for i in 0..n {
            let dist = |j: usize| -> f64 {
                (0..d)
                    .map(|t| (xs[i * d + t] - cs[j * d + t]).powi(2))
                    .sum()
            };
            let best = (0..k).map(dist).fold(f64::INFINITY, f64::min);
            // Ties (within f32 rounding) may pick either centroid.
            assert!(
                dist(got[i] as usize) <= best + 1e-4,
                "point {i}: label {} is not nearest",
                got[i]
            );
        }
    }
}

#[test]
fn free_dimension_is_a_trailing_parameter() {
    let ctx = cpu();
    let (n, d, k) = (5, 2, 3);
    let xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
    let labels = [2u32, 0, 2, 1, 2];
    let x = ctx.dense(n, d, &xs).expect("upload");
    let l = ctx.index(&labels).expect("upload");
    let out = cluster_means::run(&ctx, &x, &l, k).expect("run");
    // Cluster 0: row 1; cluster 1: row 3; cluster 2: rows 0, 2, 4.
    let mean2 = [(1.0 + 5.0 + 9.0) / 3.0, (2.0 + 6.0 + 10.0) / 3.0];
    assert_close(
        &values(&ctx, &out.M),
        &[3.0, 4.0, 7.0, 8.0, mean2[0], mean2[1]],
    );
    assert_close(&values(&ctx, &out.sizes), &[1.0, 1.0, 3.0]);
    // An empty cluster (k larger than any label) has a zero row and a zero count.
    let out = cluster_means::run(&ctx, &x, &l, 4).expect("run");
    assert_eq!(out.M.dims(), (4, 2));
    assert_close(&values(&ctx, &out.M)[6..], &[0.0, 0.0]);
    assert_close(&values(&ctx, &out.sizes), &[1.0, 1.0, 3.0, 0.0]);
}

#[test]
fn scalar_outputs_are_f64_fields() {
    let ctx = cpu();
    let xs = [1.0, -2.0, 3.0, 0.5, 0.0, -1.0, 2.0];
    let x = ctx.dense(7, 1, &xs).expect("upload");
    let out = energy::run(&ctx, &x, 3.0).expect("run");
    let want_e: f64 = xs.iter().map(|v| (3.0 * v) * (3.0 * v)).sum();
    assert_close(&[out.e], &[want_e]);
    assert_eq!(out.half, 1.5);
    assert_close(&values(&ctx, &out.Y), &xs.map(|v| 3.0 * v));

    let y = ctx
        .dense(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.5])
        .expect("upload");
    let s = total::run(&ctx, &y).expect("run").s;
    assert_close(&[s], &[21.5]);
    let one = ctx.dense(1, 1, &[-4.25]).expect("upload");
    assert_close(&[total::run(&ctx, &one).expect("run").s], &[-4.25]);
}

#[test]
fn run_into_reuses_the_outputs_across_calls() {
    let ctx = cpu();
    let x = ctx.dense(2, 2, &[1.0, 2.0, 3.0, 4.0]).expect("upload");
    let mut out = popcorn::Outputs::default();
    for step in 1..=3 {
        let w = f64::from(step);
        energy::run_into(&ctx, &x, w, &mut out).expect("run");
        let y = out.tensor("Y").expect("tensor output");
        assert_close(&values(&ctx, y), &[w, 2.0 * w, 3.0 * w, 4.0 * w]);
        assert_close(&[out.scalar("e").expect("scalar output")], &[30.0 * w * w]);
        assert_eq!(out.scalar("half").expect("scalar output"), w / 2.0);
    }
}

#[test]
fn names_used_by_the_expansion_do_not_clash() {
    let ctx = cpu();
    let c = ctx.dense(3, 1, &[1.0, 2.0, 3.0]).expect("upload");
    let a = ctx.dense(3, 1, &[10.0, 20.0, 30.0]).expect("upload");
    let l = ctx.index(&[0, 1, 1]).expect("upload");
    // Parameters in signature order, then the free dimensions `j` and `k`, sorted.
    let out = clash::run(&ctx, &c, 2.0, &a, &l, 2, 3).expect("run");
    assert_close(&values(&ctx, &out.program), &[12.0, 24.0, 36.0]);
    assert_close(&values(&ctx, &out.a), &[1.0, 2.0]);
    assert_close(&values(&ctx, &out.b), &[1.0, 2.0, 0.0]);
}

#[test]
fn keyword_names_are_raw_identifiers() {
    let ctx = cpu();
    let x = ctx.col(&[1.0, -3.0]).expect("upload");
    let out = r#type::run(&ctx, &x).expect("run");
    assert_close(&values(&ctx, &out.r#match), &[2.0, -6.0]);
}

#[test]
fn program_and_source_describe_the_program() {
    let p = nearest::program();
    assert_eq!(p.name, "nearest");
    assert_eq!(
        p.signature(),
        "fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (labels: Index[n])"
    );
    assert!(std::ptr::eq(p, nearest::program()), "parsed once");
    let again = popcorn::Program::parse(nearest::SOURCE).expect("SOURCE parses");
    assert_eq!(again.signature(), p.signature());
    assert_eq!(
        cluster_means::program()
            .free_dims()
            .into_iter()
            .collect::<Vec<_>>(),
        vec!["k".to_string()]
    );
}

#[test]
fn args_builds_the_arguments_for_context_run() {
    let ctx = cpu();
    let x = ctx.dense(1, 3, &[1.0, 2.0, 3.0]).expect("upload");
    let mut out = ctx
        .run(scale::program(), &scale::args(&x, 0.5))
        .expect("run");
    let y = out.take("Y").expect("output");
    assert_close(&values(&ctx, &y), &[0.5, 1.0, 1.5]);
}

#[test]
fn mismatched_inputs_are_errors_not_panics() {
    let ctx = cpu();
    let x = ctx.dense(3, 2, &data(1, 6)).expect("upload");
    let c = ctx.dense(2, 3, &data(2, 6)).expect("upload");
    let err = nearest::run(&ctx, &x, &c).expect_err("d is 2 for X but 3 for C");
    assert!(
        matches!(err, RuntimeError::DimensionMismatch { ref dim, .. } if dim == "d"),
        "{err}"
    );

    let l = ctx.index(&[0, 1, 0]).expect("upload");
    let err = scale::run(&ctx, &l, 1.0).expect_err("an index vector is not Dense");
    assert!(err.to_string().contains("Dense"), "{err}");
}
