//! Kernel K-means from the command line, with flags compatible with the reference's
//! `gpukmeans`. Without an input file it runs a demo: two concentric rings that the gaussian
//! kernel separates and plain (linear) k-means cannot.
//!
//! ```text
//! cargo run --release --example kernel_kmeans                       # the rings demo
//! cargo run --release --example kernel_kmeans -- -i shared/data/digits.csv -k 10 -f polynomial
//! cargo run --release --example kernel_kmeans -- -n 10000 -d 32 -k 10 -m 30 --device cuda
//! cargo run --release --example kernel_kmeans -- -f precomputed -i K.npy -k 4 --labels-out l.txt
//! cargo run --release --example kernel_kmeans -- --help
//! ```

#[path = "kernel_kmeans/mod.rs"]
mod app;

use std::io::IsTerminal;

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "error: internal error (a bug in popcorn{place}): {}",
            what.replace('\n', "; ")
        );
    }));
    let terminal = std::io::stderr().is_terminal();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut err = std::io::stderr();
    let code = app::run(std::env::args_os(), &mut out, &mut err, terminal);
    drop(out);
    std::process::exit(code);
}
