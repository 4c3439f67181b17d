// The output `labels` is declared but no statement assigns it.
popcorn::program! {
    fn nearest(X: Dense[n, d], C: Dense[k, d]) -> (D: Dense[n, k], labels: Index[n]) {
        D = -2 * X * C^T;
    }
}

fn main() {}
