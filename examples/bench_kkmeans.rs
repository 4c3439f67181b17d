//! Benchmarks Kernel K-means on the paper's shapes: popcorn (the DSL's plans) against the
//! hand-written naive GPU baseline, with the device's ceilings measured first.
//!
//! ```text
//! cargo run --release --example bench_kkmeans                          # everything, on the GPU
//! cargo run --release --example bench_kkmeans -- --shapes letter,mnist --k 10 --reps 3
//! cargo run --release --example bench_kkmeans -- --json bench.json --fashion train-images-idx3-ubyte.gz
//! cargo run --release --example bench_kkmeans -- --device cpu --scale 0.01 --reps 1   # smoke run
//! cargo run --release --example bench_kkmeans -- --help
//! ```
//!
//! Without a usable GPU (and without `--device cpu`) it says so and exits with status 0.

#[path = "bench_kkmeans/mod.rs"]
mod bench;

fn main() {
    std::process::exit(bench::main());
}
