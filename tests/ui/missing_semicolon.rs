// A statement without its `;`.
popcorn::program! {
    fn scale(X: Dense[n, d], a: Scalar) -> (Y: Dense[n, d]) {
        Z = a * X
        Y = Z;
    }
}

fn main() {}
