// Two programs with the same name in one invocation.
popcorn::program! {
    fn scale(X: Dense[n, d]) -> (Y: Dense[n, d]) {
        Y = 2 * X;
    }
    fn scale(X: Dense[n, d]) -> (Y: Dense[n, d]) {
        Y = 3 * X;
    }
}

fn main() {}
