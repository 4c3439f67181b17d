// `K * V` multiplies n x n by k x n: the inner dimensions disagree.
popcorn::program! {
    fn project(K: Dense[n, n], V: Csr[k, n]) -> (D: Dense[n, k]) {
        D = K * V;
    }
}

fn main() {}
