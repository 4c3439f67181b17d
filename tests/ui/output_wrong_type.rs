// `D` is declared n x k but the statement computes an n x n matrix.
popcorn::program! {
    fn gram(X: Dense[n, d], C: Dense[k, d]) -> (D: Dense[n, k]) {
        D = X * X^T;
    }
}

fn main() {}
