// A misspelled function: the error suggests the closest one.
popcorn::program! {
    fn norms(X: Dense[n, d]) -> (r: Col[n]) {
        r = rownorm(X);
    }
}

fn main() {}
