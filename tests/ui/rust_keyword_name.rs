// `self` is a valid popcorn name but cannot name a parameter of the generated Rust function.
popcorn::program! {
    fn scale(self: Dense[n, d]) -> (Y: Dense[n, d]) {
        Y = 2 * self;
    }
}

fn main() {}
