//! Writes every cluster-sums kernel variant to a folder, one `.cu` file each, for compiling
//! them with NVRTC and reading their resource usage and SASS.
//!
//! `cargo run -p kernels-gen --example cluster_sums_dump -- <folder>`

use kernel_ir::ScalarType;
use kernels_gen::cluster_sums::{cluster_sums, ClusterSumsVariant};
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "cluster_sums".into()),
    );
    std::fs::create_dir_all(&dir)?;
    for dtype in [ScalarType::F32, ScalarType::F64] {
        for vectorized in [true, false] {
            for row_bytes in [64u32, 128, 256, 512] {
                for stages in 2..=4 {
                    let cols = row_bytes / dtype.size_bytes() as u32;
                    let Ok(v) = ClusterSumsVariant::new(dtype, None, cols, stages, vectorized)
                    else {
                        continue;
                    };
                    let k = cluster_sums(&v);
                    std::fs::write(dir.join(format!("{}.cu", k.name)), &k.source)?;
                }
            }
        }
    }
    Ok(())
}
