//! Index vectors compared as values: the labels-changed test of an iteration runs on the
//! device and reads back one number (`changed = sum(new_labels != labels)`).

mod common;

use popcorn::{Args, Context, DType, DeviceSpec, Program};

const SRC: &str =
    "fn changes(a: Index[n], b: Index[n]) -> (changed: Scalar, same: Col[n], big: Col[n]) {
    changed = sum(a != b);
    same = a == b;
    big = where(a >= 3, 2, 0);
}";

fn check(ctx: &Context) {
    let p = Program::parse(SRC).unwrap();
    for n in [1usize, 7, 33, 1000] {
        let a: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % 5).collect();
        let b: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % 5).collect();
        let (ta, tb) = (ctx.index(&a).unwrap(), ctx.index(&b).unwrap());
        let out = ctx
            .run(&p, &Args::new().tensor("a", &ta).tensor("b", &tb))
            .unwrap();
        let want = a.iter().zip(&b).filter(|(x, y)| x != y).count() as f64;
        assert_eq!(
            out.scalar("changed").unwrap(),
            want,
            "n = {n} on {}",
            ctx.describe()
        );
        let same = ctx.to_f64(out.tensor("same").unwrap()).unwrap();
        let big = ctx.to_f64(out.tensor("big").unwrap()).unwrap();
        for i in 0..n {
            assert_eq!(same[i], if a[i] == b[i] { 1.0 } else { 0.0 });
            assert_eq!(big[i], if a[i] >= 3 { 2.0 } else { 0.0 });
        }
    }
}

#[test]
fn labels_compare_on_the_cpu() {
    for dtype in [DType::F32, DType::F64] {
        check(&Context::new(DeviceSpec::Cpu).unwrap().with_dtype(dtype));
    }
}

#[test]
fn labels_compare_on_the_gpu() {
    for dtype in [DType::F32, DType::F64] {
        let Some(ctx) = common::gpu_or_skip(dtype) else {
            return;
        };
        check(&ctx);
    }
}

#[test]
fn arithmetic_on_labels_is_still_an_error() {
    let err = Program::parse("fn f(a: Index[n]) -> (y: Col[n]) { y = a + 1; }").unwrap_err();
    assert!(
        err.message.contains("cannot be used in arithmetic"),
        "{err}"
    );
}
