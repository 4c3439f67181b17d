//! Writes every cluster-sums kernel variant to a folder, one `.cu` file each, for compiling
//! them with NVRTC and reading their resource usage and SASS.
//!
//! `cargo run -p kernels-gen --example cluster_sums_dump -- <folder>`

use kernel_ir::{Half, ScalarType};
use kernels_gen::cluster_sums::{cluster_sums, ClusterSumsVariant, BLOCK_BYTES, LINE_BYTES};
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "cluster_sums".into()),
    );
    std::fs::create_dir_all(&dir)?;
    // f32 and f64 matrices, and f32 sums of a matrix held in bf16 (the bins kernel and the
    // tensor-core kernel with 2, 8 and 13 tiles of 8 clusters, one warp a block and teams of
    // four); strided variants on 128-byte lines and on 512-byte blocks.
    let kinds = [
        (ScalarType::F32, None, 0),
        (ScalarType::F64, None, 0),
        (ScalarType::F32, Some(Half::Bf16), 0),
        (ScalarType::F32, Some(Half::Bf16), 2),
        (ScalarType::F32, Some(Half::Bf16), 8),
        (ScalarType::F32, Some(Half::Bf16), 13),
    ];
    for (dtype, held, tiles) in kinds {
        let esz = held.map_or(dtype.size_bytes() as u32, |_| 2);
        for vectorized in [true, false] {
            for row_bytes in [64u32, 128, 256, 512] {
                for stages in 2..=4 {
                    let Ok(v) =
                        ClusterSumsVariant::new(dtype, held, row_bytes / esz, stages, vectorized)
                    else {
                        continue;
                    };
                    let teams: &[u32] = if tiles > 0 { &[1, 4] } else { &[1] };
                    // Strided tiles on 128-byte lines and on 512-byte blocks (the same source
                    // for tile rows of 128 bytes or less, written twice).
                    for blocks in [LINE_BYTES, BLOCK_BYTES] {
                        for &team in teams {
                            let v = v.with_blocks(blocks).with_tensor_core_tiles(tiles);
                            let k = cluster_sums(&v.with_team(team));
                            std::fs::write(dir.join(format!("{}.cu", k.name)), &k.source)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
