// `^` only transposes: `X^2` is not a power (use `pow(X, 2)`).
popcorn::program! {
    fn square(X: Dense[n, d]) -> (Y: Dense[n, d]) {
        Y = X^2;
    }
}

fn main() {}
