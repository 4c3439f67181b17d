//! Writes the sample kernels and every builtin to a folder, one `.cu` file each, with a
//! `manifest.tsv` (`label`, entry point, file, launch shape), for compiling them with NVRTC on a
//! GPU machine (see `tools/nvrtc_check.py`).
//!
//! `cargo run -p kernels-gen --example dump_kernels -- <folder>`

#[path = "../tests/common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::path::PathBuf;

use kernel_ir::ScalarType;
use kernels_gen::{builtins, emit};

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "kernels".to_string()),
    );
    std::fs::create_dir_all(&dir)?;
    let mut manifest = String::new();
    for (label, spec) in common::all_samples() {
        let kernel = emit(&spec);
        let file = format!("{label}.cu");
        std::fs::write(dir.join(&file), &kernel.source)?;
        let _ = writeln!(
            manifest,
            "{label}\t{}\t{file}\t{:?}",
            kernel.name, kernel.launch
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for dtype in [ScalarType::F32, ScalarType::F64] {
        for kernel in builtins::all(dtype) {
            // Untyped builtins appear for both dtypes.
            if !seen.insert(kernel.name.clone()) {
                continue;
            }
            let file = format!("{}.cu", kernel.name);
            std::fs::write(dir.join(&file), &kernel.source)?;
            let _ = writeln!(
                manifest,
                "{}\t{}\t{file}\tbuiltin",
                kernel.name, kernel.name
            );
        }
    }
    std::fs::write(dir.join("manifest.tsv"), manifest)?;
    println!("wrote kernels to {}", dir.display());
    Ok(())
}
