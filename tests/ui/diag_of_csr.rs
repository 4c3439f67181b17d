// `diag` needs a dense square matrix; a CSR matrix is rejected.
popcorn::program! {
    fn diagonal(V: Csr[n, n]) -> (d: Col[n]) {
        d = diag(V);
    }
}

fn main() {}
