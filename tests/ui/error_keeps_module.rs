// While a program has an error, its module still exists with the declared API, so code that
// uses it reports no second error: only the program's error is shown.
popcorn::program! {
    fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) {
        Y = a * Xs;
    }
}

fn main() {
    let ctx = popcorn::Context::new(popcorn::DeviceSpec::Cpu).unwrap();
    let x = ctx.dense(1, 1, &[1.0]).unwrap();
    let out = scale::run(&ctx, &x, 2.0).unwrap();
    let _y: popcorn::Tensor = out.Y;
}
