// Every statement binds a new name: assigning `D` a second time is rejected.
popcorn::program! {
    fn twice(X: Dense[n, d]) -> (D: Dense[n, d]) {
        D = 2 * X;
        D = D + X;
    }
}

fn main() {}
