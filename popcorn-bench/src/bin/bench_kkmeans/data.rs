//! The benchmark's data: the paper's shapes filled with uniform random values (generated in
//! parallel), and Fashion-MNIST when its IDX file is found.

use popcorn::io::IoError;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// A data set's name and size.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    /// Short name (as on the command line).
    pub name: &'static str,
    /// Points.
    pub n: usize,
    /// Features.
    pub d: usize,
}

/// The paper's six data sets (Bellavita et al., PPoPP'25), in the order it lists them here.
pub const PAPER: [Shape; 6] = [
    Shape {
        name: "letter",
        n: 10_500,
        d: 26,
    },
    Shape {
        name: "scotus",
        n: 6_400,
        d: 126_405,
    },
    Shape {
        name: "cifar10",
        n: 50_000,
        d: 3_072,
    },
    Shape {
        name: "mnist",
        n: 60_000,
        d: 780,
    },
    Shape {
        name: "ledgar",
        n: 70_000,
        d: 19_996,
    },
    Shape {
        name: "acoustic",
        n: 78_823,
        d: 50,
    },
];

/// Fashion-MNIST's training images.
pub const FASHION: Shape = Shape {
    name: "fashion",
    n: 60_000,
    d: 784,
};

/// Where Fashion-MNIST is looked for when --fashion is not given.
const FASHION_SYSTEM: &str = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
const FASHION_FILE: &str = "train-images-idx3-ubyte.gz";

/// The shapes named on the command line, in the order given (`paper`, `all` expand).
pub fn select(names: &[String], fashion_found: bool) -> Result<Vec<Shape>, String> {
    let mut out: Vec<Shape> = Vec::new();
    let mut push = |s: &Shape| {
        if !out.iter().any(|o| o.name == s.name) {
            out.push(s.clone());
        }
    };
    for raw in names {
        let name = raw.trim().to_ascii_lowercase();
        match name.as_str() {
            "" => {}
            "all" | "paper" => {
                PAPER.iter().for_each(&mut push);
                if name == "all" && fashion_found {
                    push(&FASHION);
                }
            }
            "fashion" | "fashion-mnist" => {
                if !fashion_found {
                    return Err(format!(
                        "--shapes fashion: Fashion-MNIST was not found; give the training images with --fashion PATH (looked at {FASHION_SYSTEM} and next to the binary)"
                    ));
                }
                push(&FASHION);
            }
            "cifar" | "cifar-10" => push(&PAPER[2]),
            other => match PAPER.iter().find(|s| s.name == other) {
                Some(s) => push(s),
                None => {
                    return Err(format!(
                        "unknown shape `{raw}`; expected letter, scotus, cifar10, mnist, ledgar, acoustic, fashion, paper or all"
                    ))
                }
            },
        }
    }
    if out.is_empty() {
        return Err("--shapes names no shape".into());
    }
    Ok(out)
}

/// The Fashion-MNIST images file: the given path, else the system copy, else next to the
/// binary (or in a `fashion-mnist` folder there).
pub fn find_fashion(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    let mut candidates = vec![PathBuf::from(FASHION_SYSTEM)];
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(FASHION_FILE));
        candidates.push(dir.join("fashion-mnist").join(FASHION_FILE));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// `n` scaled by `scale`, at least 1.
pub fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).clamp(1, n)
}

/// Points as f32, row-major, with their true labels when known.
pub struct Points {
    /// Points.
    pub n: usize,
    /// Features.
    pub d: usize,
    /// `n * d` values.
    pub x: Vec<f32>,
    /// True classes (Fashion-MNIST).
    pub truth: Option<Vec<i64>>,
    /// Where the values came from, in words.
    pub source: String,
}

/// `n x d` values uniform in [0, 1), generated in parallel (splitmix64 per chunk, so the
/// values depend on the seed only, not on the number of threads).
pub fn uniform(n: usize, d: usize, seed: u64) -> Points {
    const CHUNK: usize = 1 << 16;
    let mut x = vec![0f32; n * d];
    x.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
        let mut state = seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for v in chunk {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            *v = (z >> 40) as f32 / (1u32 << 24) as f32;
        }
    });
    Points {
        n,
        d,
        x,
        truth: None,
        source: "uniform [0, 1)".into(),
    }
}

/// The first `n` Fashion-MNIST images, pixel values scaled to [0, 1], with their classes
/// when the labels file sits beside the images.
pub fn fashion(path: &Path, n: usize) -> Result<Points, IoError> {
    let labels = popcorn::io::find_idx_labels(path);
    let ds = popcorn::io::load_idx(path, labels.as_deref())?;
    let n = n.min(ds.n);
    let x: Vec<f32> = ds.x[..n * ds.d]
        .par_iter()
        .map(|v| (*v / 255.0) as f32)
        .collect();
    let truth = ds.labels.map(|l| l[..n].to_vec());
    Ok(Points {
        n,
        d: ds.d,
        x,
        truth,
        source: format!("{} (/255)", path.display()),
    })
}

/// Well separated gaussian-ish blobs for the correctness check: `k` centres on a grid, each
/// point near the centre of its class `i * 7 mod k`.
pub fn blobs(n: usize, d: usize, k: usize, seed: u64) -> Vec<f64> {
    let mut rng = popcorn::kkmeans::SplitMix64::new(seed);
    (0..n)
        .flat_map(|i| {
            let class = (i * 7) % k;
            (0..d)
                .map(|t| {
                    let centre = if t % k == class { 4.0 } else { 0.0 }
                        + 0.5 * (class as f64) * ((t == 0) as u8 as f64);
                    centre + 0.3 * (rng.next_f64() - 0.5)
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
