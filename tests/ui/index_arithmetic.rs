// Cluster labels are indices, not numbers: arithmetic on them is rejected.
popcorn::program! {
    fn shift(labels: Index[n]) -> (y: Col[n]) {
        y = labels + 1;
    }
}

fn main() {}
