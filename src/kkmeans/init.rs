//! Initial labels: `i mod k` (the reference's default), uniformly random, k-means++ in feature
//! space, or given.

use super::source::Source;
use super::{weights, FitError, Init};
use crate::Context;

/// A small deterministic PRNG (splitmix64), so seeds give the same labels everywhere.
#[derive(Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_f64() * n as f64) as usize % n
    }
}

/// Initial labels for run number `run` (seeds are offset by the run); k-means++ draws by the
/// points' `weights` where given.
#[allow(clippy::too_many_arguments)]
pub fn initial_labels(
    init: &Init,
    n: usize,
    k: usize,
    run: usize,
    ctx: &Context,
    source: &Source<'_>,
    diag: &[f64],
    weights: Option<&[f64]>,
) -> Result<Vec<u32>, FitError> {
    Ok(match init {
        Init::Mod => (0..n).map(|i| (i % k) as u32).collect(),
        Init::Random { seed } => {
            let mut rng = SplitMix64::new(seed.wrapping_add(run as u64));
            (0..n).map(|_| rng.below(k) as u32).collect()
        }
        Init::Labels(given) => {
            crate::fit_checks::check_initial_labels(given, n, k, "points")?;
            given.clone()
        }
        Init::KMeansPlusPlus { seed } => {
            let seed = seed.wrapping_add(run as u64);
            kmeans_plus_plus(n, k, seed, ctx, source, diag, weights)?
        }
    })
}

/// k-means++ in feature space: the first center uniformly at random, each next one with
/// probability proportional to the squared feature-space distance to the nearest chosen
/// center, `K_ii - 2 K_ic + K_cc`; each point then takes its nearest center. One column of K
/// per center: read from the stored K (a one-hot product, `kernel_column`) or computed from the
/// points (the cross kernel against the center). With `weights`, as scikit-learn does: the
/// first center with probability proportional to the weight, the next ones to the weight
/// times the distance (a zero-weight point is never a center).
fn kmeans_plus_plus(
    n: usize,
    k: usize,
    seed: u64,
    ctx: &Context,
    source: &Source<'_>,
    diag: &[f64],
    weights: Option<&[f64]>,
) -> Result<Vec<u32>, FitError> {
    let mut rng = SplitMix64::new(seed);
    let weight = |i: usize| weights.map_or(1.0, |w| w[i]);
    // A point by weight alone (uniform without weights).
    let by_weight = |rng: &mut SplitMix64| match weights {
        Some(w) => weights::draw(w.iter().copied(), rng.next_f64() * w.iter().sum::<f64>()),
        None => rng.below(n),
    };
    let mut best = vec![f64::INFINITY; n];
    let mut labels = vec![0u32; n];
    let mut center = by_weight(&mut rng);
    for c in 0..k {
        let column = source.column(ctx, center, n)?;
        for i in 0..n {
            let d = (diag[i] - 2.0 * column[i] + diag[center]).max(0.0);
            if d < best[i] {
                best[i] = d;
                labels[i] = c as u32;
            }
        }
        if c + 1 == k {
            break;
        }
        let total: f64 = (0..n).map(|i| weight(i) * best[i]).sum();
        center = if total > 0.0 && total.is_finite() {
            let r = rng.next_f64() * total;
            weights::draw((0..n).map(|i| weight(i) * best[i]), r)
        } else {
            // Every point (of positive weight) coincides with a center: any will do.
            by_weight(&mut rng)
        };
    }
    Ok(labels)
}
