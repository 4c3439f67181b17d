//! The data to cluster: a file, the concentric-rings demo, or uniform random points.

use super::cli::SparseMode;
use super::error::CliError;
use popcorn::io::{self, CsrMatrix, CsvOptions, Header, LabelColumn, LoadOptions};
use popcorn::kkmeans::{FitError, Points, SplitMix64};
use std::path::{Path, PathBuf};

/// Radii of the demo's rings. Two rings, not three: with equal counts per ring, three rings
/// are not a minimum of the kernel k-means objective for any gaussian width (angular sectors
/// cutting across the rings score better), while these two are, and are reached from the
/// `i mod k` start.
pub const RING_RADII: [f64; 2] = [0.25, 1.0];
/// Standard deviation of the radial noise of the rings.
pub const RING_NOISE: f64 = 0.05;
/// The gaussian kernel's gamma for the rings: the width (about 0.5) is below the gap between
/// the rings and above the spacing of neighbouring points.
pub const RING_GAMMA: f64 = 4.0;

/// Where the points come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// The concentric-rings demo.
    Rings,
    /// Uniform random values in [0, 1).
    Uniform,
    /// A file (a point set, or a kernel matrix with `-f precomputed`).
    File(PathBuf),
}

/// Points (or a kernel matrix) with optional true labels.
#[derive(Clone, Debug)]
pub struct Data {
    /// Where they come from.
    pub source: Source,
    /// Rows.
    pub n: usize,
    /// Columns (`n` for a kernel matrix).
    pub d: usize,
    /// Row-major values (empty where the points are sparse).
    pub x: Vec<f64>,
    /// The points kept sparse (`--sparse`), where they are.
    pub sparse: Option<CsrMatrix>,
    /// True classes, when known.
    pub labels: Option<Vec<i64>>,
}

impl Data {
    /// A one-line description for the summary.
    pub fn describe(&self, seed: u64) -> String {
        match &self.source {
            Source::Rings => format!(
                "{} concentric rings (radii {}, radial noise {RING_NOISE}), synthetic, seed {seed}",
                RING_RADII.len(),
                RING_RADII.map(|r| r.to_string()).join(" and ")
            ),
            Source::Uniform => format!("uniform random values in [0, 1), synthetic, seed {seed}"),
            Source::File(p) => p.display().to_string(),
        }
    }

    /// The input's name for the JSON output.
    pub fn input_name(&self) -> String {
        match &self.source {
            Source::Rings => "rings (synthetic)".into(),
            Source::Uniform => "uniform (synthetic)".into(),
            Source::File(p) => p.display().to_string(),
        }
    }

    /// `sparse (CSR, density 0.100%)` or `dense`, for the summary.
    pub fn storage(&self) -> String {
        match &self.sparse {
            Some(s) => format!("sparse (CSR, density {:.3}%)", s.density() * 100.0),
            None => "dense".into(),
        }
    }

    /// Number of distinct true classes.
    pub fn classes(&self) -> Option<usize> {
        let labels = self.labels.as_ref()?;
        let mut sorted = labels.clone();
        sorted.sort_unstable();
        sorted.dedup();
        Some(sorted.len())
    }
}

/// The points of `data` for a fit (checked finite there).
impl<'a> TryFrom<&'a Data> for Points<'a> {
    type Error = FitError;
    fn try_from(data: &'a Data) -> Result<Points<'a>, FitError> {
        Points::new(data.n, data.d, &data.x)
    }
}

/// A standard normal value (Box-Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u = 1.0 - rng.next_f64(); // in (0, 1]: the logarithm is finite
    let v = rng.next_f64();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Checks that `n x d` synthetic values (and `extra_per_point` more bytes a point) fit in host
/// memory before they are drawn (under `POPCORN_MEMORY_LIMIT` too).
fn check_synthetic(n: usize, d: usize, extra_per_point: usize) -> Result<(), CliError> {
    let bytes = (n as u64)
        .saturating_mul(d as u64)
        .saturating_mul(8)
        .saturating_add((n as u64).saturating_mul(extra_per_point as u64));
    let what = format!("{n} x {d} synthetic points in f64");
    let limit = popcorn::dsl::settings::settings().memory_limit;
    popcorn::runtime::host_memory::check(bytes, &what, limit, 0)?;
    Ok(())
}

/// `n` points on [`RING_RADII`], as evenly shared as possible, at uniform angles with normal
/// radial noise, in a shuffled order (so that the `i mod k` start knows nothing); the true
/// label of a point is its ring.
pub fn rings(n: usize, seed: u64) -> Result<Data, CliError> {
    // The points with their rings while drawing, then the values and the labels.
    check_synthetic(n, 2, 24 + 8)?;
    let mut rng = SplitMix64::new(seed);
    let rings = RING_RADII.len();
    let mut points: Vec<(f64, f64, i64)> = Vec::with_capacity(n);
    for (ring, radius) in RING_RADII.iter().enumerate() {
        // Ring r gets n / rings points, the outer rings one more while a remainder is left.
        let count = n / rings + usize::from(rings - 1 - ring < n % rings);
        for _ in 0..count {
            let angle = rng.next_f64() * std::f64::consts::TAU;
            let r = radius + RING_NOISE * normal(&mut rng);
            points.push((r * angle.cos(), r * angle.sin(), ring as i64));
        }
    }
    for i in (1..points.len()).rev() {
        let j = rng.below(i + 1);
        points.swap(i, j);
    }
    Ok(Data {
        source: Source::Rings,
        n,
        d: 2,
        x: points.iter().flat_map(|p| [p.0, p.1]).collect(),
        labels: Some(points.iter().map(|p| p.2).collect()),
        sparse: None,
    })
}

/// `n x d` uniform random values in [0, 1), without labels.
pub fn uniform(n: usize, d: usize, seed: u64) -> Result<Data, CliError> {
    check_synthetic(n, d, 0)?;
    let mut rng = SplitMix64::new(seed);
    Ok(Data {
        source: Source::Uniform,
        n,
        d,
        x: (0..n.saturating_mul(d)).map(|_| rng.next_f64()).collect(),
        labels: None,
        sparse: None,
    })
}

/// Reads a point set from `path`; with `limit`, keeps the first `limit` points; with
/// `expect_d`, checks the number of features.
pub fn load_points(
    path: &Path,
    label_column: LabelColumn,
    limit: Option<usize>,
    expect_d: Option<usize>,
    sparse: SparseMode,
) -> Result<Data, CliError> {
    let mut data = read_points(path, label_column, sparse)?;
    if let Some(d) = expect_d {
        if d != data.d {
            return Err(CliError::Usage(format!(
                "-d {d} was given but `{}` has {} features per point; drop -d or give -d {}",
                path.display(),
                data.d,
                data.d
            )));
        }
    }
    if let Some(n) = limit {
        keep_first_rows(&mut data, n, path)?;
    }
    Ok(data)
}

/// Densities below which `--sparse auto` keeps a sparse file (libsvm, `.npz`) sparse: a CSR
/// entry takes 16 bytes (value and index) against 8 for a dense value, and the sparse Gram
/// product's work grows with the square of the density.
pub const SPARSE_AUTO_MAX_DENSITY: f64 = 0.1;

/// Reads points as `mode` says: a sparse file (libsvm, `.npz`) as CSR (kept sparse under
/// `auto` below [`SPARSE_AUTO_MAX_DENSITY`], or `on`), other formats dense (converted under
/// `on`).
fn read_points(path: &Path, label_column: LabelColumn, mode: SparseMode) -> Result<Data, CliError> {
    let keep_sparse = match mode {
        SparseMode::Off => false,
        SparseMode::On => true,
        SparseMode::Auto => io::detect_format(path)?.is_sparse(),
    };
    if !keep_sparse {
        return read_data(path, label_column);
    }
    let ds = io::load_sparse(path, &load_options(label_column))?;
    if mode == SparseMode::Auto && ds.x.density() >= SPARSE_AUTO_MAX_DENSITY {
        let dense = ds.to_dense()?;
        return Ok(Data {
            source: Source::File(path.to_path_buf()),
            n: dense.n,
            d: dense.d,
            x: dense.x,
            labels: dense.labels,
            sparse: None,
        });
    }
    Ok(Data {
        source: Source::File(path.to_path_buf()),
        n: ds.n(),
        d: ds.d(),
        x: Vec::new(),
        labels: ds.labels,
        sparse: Some(ds.x),
    })
}

/// How point files are read: every format detected, `label_column` for delimited text.
fn load_options(label_column: LabelColumn) -> LoadOptions {
    LoadOptions {
        csv: CsvOptions {
            label_column,
            ..CsvOptions::default()
        },
        ..LoadOptions::default()
    }
}

/// Reads any supported file (CSV, libsvm, npy, npz, IDX) into dense points and optional true
/// labels.
fn read_data(path: &Path, label_column: LabelColumn) -> Result<Data, CliError> {
    let ds = io::load(path, &load_options(label_column))?;
    Ok(Data {
        source: Source::File(path.to_path_buf()),
        n: ds.n,
        d: ds.d,
        x: ds.x,
        labels: ds.labels,
        sparse: None,
    })
}

/// Reads the points' weights from `path`: one number per line (no header), or a one-column
/// `.csv` or `.npy`. There must be `n` of them, or with `limit` (`-n`) at least `n`, the
/// first `n` kept. A malformed line is named by the reader; bad values (negative, all 0) by
/// the fit, which names the weight's 0-based position.
pub fn load_weights(path: &Path, n: usize, limit: Option<usize>) -> Result<Vec<f64>, CliError> {
    let options = LoadOptions {
        csv: CsvOptions {
            label_column: LabelColumn::None,
            header: Header::Absent,
            ..CsvOptions::default()
        },
        ..LoadOptions::default()
    };
    let ds = io::load(path, &options)?;
    let file = path.display();
    if ds.d != 1 {
        return Err(CliError::Data(format!(
            "`{file}` has {} columns; a weights file holds one weight per line (one column)",
            ds.d
        )));
    }
    let mut w = ds.x;
    if limit.is_some() && w.len() > n {
        w.truncate(n);
    }
    if w.len() != n {
        return Err(CliError::Data(format!(
            "`{file}` holds {} weights for {n} points; give one weight per point",
            w.len()
        )));
    }
    // Their values (negative, all 0) are the library's to check, in its one message.
    Ok(w)
}

/// Reads an `n x n` kernel matrix from `path` (any label column is kept as true labels); with
/// `limit`, keeps the leading `limit x limit` block.
pub fn load_kernel_matrix(
    path: &Path,
    label_column: LabelColumn,
    limit: Option<usize>,
) -> Result<Data, CliError> {
    let mut data = read_data(path, label_column)?;
    if data.n != data.d {
        return Err(CliError::Data(format!(
            "`{}` holds a {} x {} matrix; a precomputed kernel matrix must be n x n (one row and one column per point)",
            path.display(),
            data.n,
            data.d
        )));
    }
    if let Some(n) = limit {
        keep_first_rows(&mut data, n, path)?;
        let full = data.d;
        data.x = data
            .x
            .chunks_exact(full)
            .flat_map(|row| row[..n].iter().copied())
            .collect();
        data.d = n;
    }
    Ok(data)
}

/// A square `.npy` kernel matrix whose rows each rank reads for itself when the fit runs
/// (a context partitioned along the points): only its shape is read here, and the data's
/// values stay empty.
pub fn kernel_matrix_by_rows(path: &Path, limit: Option<usize>) -> Result<Data, CliError> {
    if limit.is_some() {
        return Err(CliError::Usage(
            "-n takes a leading part of the matrix, which every rank would read whole; drop -n \
             (the ranks read their rows of the whole file)"
                .into(),
        ));
    }
    let (n, d) = popcorn::io::npy_shape(path)?;
    if n != d {
        return Err(CliError::Data(format!(
            "`{}` holds a {n} x {d} matrix; a precomputed kernel matrix must be n x n (one row and one column per point)",
            path.display()
        )));
    }
    Ok(Data {
        source: Source::File(path.to_path_buf()),
        n,
        d,
        x: Vec::new(),
        sparse: None,
        labels: None,
    })
}

fn keep_first_rows(data: &mut Data, n: usize, path: &Path) -> Result<(), CliError> {
    if n == 0 {
        return Err(CliError::Usage("-n 0: ask for at least one point".into()));
    }
    if n > data.n {
        return Err(CliError::Usage(format!(
            "-n {n} was given but `{}` has only {} points; give -n {} or less, or drop -n",
            path.display(),
            data.n,
            data.n
        )));
    }
    data.n = n;
    data.x.truncate(n * data.d);
    if let Some(s) = data.sparse.as_mut() {
        *s = s.select_rows(&(0..n).collect::<Vec<_>>())?;
    }
    if let Some(l) = data.labels.as_mut() {
        l.truncate(n);
    }
    Ok(())
}

/// The largest `|K_ij - K_ji|` relative to the largest `|K_ij|` (0 for a symmetric matrix).
pub fn asymmetry(k: &[f64], n: usize) -> f64 {
    let scale = k.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if scale == 0.0 {
        return 0.0;
    }
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in i + 1..n {
            worst = worst.max((k[i * n + j] - k[j * n + i]).abs());
        }
    }
    worst / scale
}
