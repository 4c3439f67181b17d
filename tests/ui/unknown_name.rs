// A misspelled parameter: the error names it and suggests the closest name.
popcorn::program! {
    fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (D: Dense[n, k]) {
        D = -2 * X * Cc^T + rownorms(X);
    }
}

fn main() {}
