//! The results: the summary table, the JSON document and the output files.

use super::data::Data;
use super::error::CliError;
use super::setup::{describe_kernel, init_name, kernel_params_json, FitSpec};
use popcorn::kkmeans::{FitResult, Init, Kernel, ProductPrecision};
use popcorn::metrics::{adjusted_rand_index, normalized_mutual_info};
use std::io::Write;
use std::path::Path;

/// Agreement of a clustering with the true classes.
#[derive(Clone, Copy, Debug)]
pub struct Scores {
    /// Adjusted Rand index.
    pub ari: f64,
    /// Normalized mutual information.
    pub nmi: f64,
}

/// The scores of `labels` against the true classes of `data`, when it has them.
pub fn score(data: &Data, labels: &[u32]) -> Option<Scores> {
    let truth = data.labels.as_ref()?;
    if truth.len() != labels.len() {
        return None;
    }
    let pred: Vec<i64> = labels.iter().map(|&l| i64::from(l)).collect();
    Some(Scores {
        ari: adjusted_rand_index(truth, &pred),
        nmi: normalized_mutual_info(truth, &pred),
    })
}

/// One finished fit.
pub struct Outcome {
    /// What was asked.
    pub spec: FitSpec,
    /// What came out.
    pub fit: FitResult,
    /// Against the true classes.
    pub scores: Option<Scores>,
}

/// Seconds in a readable unit.
pub fn seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

fn number(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e7 || v.abs() < 1e-3) {
        format!("{v:.6e}")
    } else {
        format!("{v:.6}")
    }
}

fn init_text(outcome: &Outcome) -> String {
    let p = &outcome.spec.params;
    let mut text = init_name(&p.init).to_string();
    if let Init::Random { seed } | Init::KMeansPlusPlus { seed } = p.init {
        text += &format!(" (seed {seed}");
        if p.n_init > 1 {
            text += &format!(
                ", best of {} runs: run {}",
                p.n_init,
                outcome.fit.best_run + 1
            );
        }
        text += ")";
    }
    text
}

/// Prints the summary table, one column per fit.
pub fn print_summary(
    data: &Data,
    seed: u64,
    data_s: f64,
    outcomes: &[Outcome],
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let cols = |f: &dyn Fn(&Outcome) -> String| outcomes.iter().map(f).collect::<Vec<String>>();
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, values: Vec<String>| rows.push((name.to_string(), values));
    if outcomes.len() > 1 {
        row("", cols(&|o| o.spec.name.clone()));
    }
    let precomputed = outcomes
        .iter()
        .any(|o| o.spec.params.kernel == Kernel::Precomputed);
    if precomputed {
        row(
            "n",
            cols(&|_| {
                format!(
                    "{} (precomputed {} x {} kernel matrix)",
                    data.n, data.n, data.n
                )
            }),
        );
    } else {
        row("n x d", cols(&|_| format!("{} x {}", data.n, data.d)));
        row("points", cols(&|_| data.storage()));
    }
    row("k", cols(&|o| o.spec.params.k.to_string()));
    row(
        "kernel",
        cols(&|o| describe_kernel(&o.spec.params.kernel, data.d)),
    );
    row("init", cols(&init_text));
    if let Some(w) = outcomes.first().and_then(|o| o.fit.weights.as_ref()) {
        row(
            "weights",
            cols(&|_| {
                format!(
                    "total {}, from {} to {}, {} zero",
                    w.total, w.min, w.max, w.zero
                )
            }),
        );
    }
    if outcomes.iter().any(|o| o.spec.params.zscore) {
        row(
            "zscore",
            cols(&|o| {
                if o.spec.params.zscore {
                    "yes".into()
                } else {
                    "no".into()
                }
            }),
        );
    }
    row("device", cols(&|o| o.fit.device.clone()));
    if !precomputed {
        row("kernel matrix", cols(&|o| o.fit.algorithm.summary.clone()));
    }
    row("dtype", cols(&|o| o.fit.dtype.to_string()));
    if outcomes
        .iter()
        .any(|o| o.spec.params.product_precision() != ProductPrecision::Strict)
    {
        row(
            "products",
            cols(&|o| o.spec.params.product_precision().to_string()),
        );
    }
    row("iterations", cols(&|o| o.fit.iterations.to_string()));
    row(
        "converged",
        cols(&|o| {
            if o.fit.converged {
                "yes".into()
            } else {
                format!("no (stopped at -m {})", o.spec.params.max_iter)
            }
        }),
    );
    row("objective", cols(&|o| number(o.fit.objective)));
    row(
        "empty clusters",
        cols(&|o| o.fit.empty_clusters.to_string()),
    );
    row("time: data", cols(&|_| seconds(data_s)));
    row("time: upload", cols(&|o| seconds(o.fit.timings.upload_s)));
    if outcomes.iter().any(|o| o.fit.timings.kernel_matrix_s > 0.0) {
        row(
            "time: kernel matrix",
            cols(&|o| seconds(o.fit.timings.kernel_matrix_s)),
        );
    }
    row("time: init", cols(&|o| seconds(o.fit.timings.init_s)));
    row(
        "time: iterations",
        cols(&|o| {
            let t = &o.fit.timings;
            let per: Vec<f64> = t.per_iteration_s.clone();
            if per.is_empty() {
                seconds(t.iterations_s)
            } else {
                format!(
                    "{} ({} each)",
                    seconds(t.iterations_s),
                    seconds(per.iter().sum::<f64>() / per.len() as f64)
                )
            }
        }),
    );
    row("time: total", cols(&|o| seconds(o.fit.timings.total_s)));
    if outcomes.iter().any(|o| o.scores.is_some()) {
        let s = |o: &Outcome, f: fn(&Scores) -> f64| {
            o.scores
                .as_ref()
                .map_or("-".into(), |s| format!("{:.4}", f(s)))
        };
        row("ARI", cols(&|o| s(o, |s| s.ari)));
        row("NMI", cols(&|o| s(o, |s| s.nmi)));
    }

    writeln!(out, "Kernel K-means on {}", data.describe(seed))?;
    let name_w = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let ncols = outcomes.len();
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            rows.iter()
                .map(|(_, v)| v.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (name, values) in &rows {
        let mut line = format!("  {name:<name_w$}");
        for (c, v) in values.iter().enumerate() {
            if c + 1 == ncols {
                line += &format!("   {v}");
            } else {
                line += &format!("   {v:<w$}", w = widths[c]);
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The whole result of the first fit as JSON: the fit's fields (labels, objective,
/// objective_history, iterations, converged, timings, params, ...), the data's `input`, `n`,
/// `d`, the resolved `kernel` and `kernel_params`, `ari` and `nmi` when the data has classes,
/// and the other fits (the rings demo's linear comparison) under `comparison`.
pub fn json(data: &Data, data_s: f64, outcomes: &[Outcome]) -> Result<serde_json::Value, CliError> {
    let to_json = |o: &Outcome| -> Result<serde_json::Value, CliError> {
        let mut v = serde_json::to_value(&o.fit)
            .map_err(|e| CliError::Data(format!("cannot encode the result as JSON: {e}")))?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("input".into(), data.input_name().into());
            obj.insert("n".into(), data.n.into());
            obj.insert("d".into(), data.d.into());
            obj.insert(
                "points".into(),
                if data.sparse.is_some() {
                    "sparse"
                } else {
                    "dense"
                }
                .into(),
            );
            if let Some(s) = &data.sparse {
                obj.insert("density".into(), s.density().into());
                obj.insert("nnz".into(), s.nnz().into());
            }
            obj.insert("k".into(), o.spec.params.k.into());
            obj.insert("kernel".into(), o.spec.params.kernel.name().into());
            obj.insert(
                "kernel_params".into(),
                kernel_params_json(&o.spec.params.kernel, data.d),
            );
            if let Some(s) = &o.scores {
                obj.insert("ari".into(), s.ari.into());
                obj.insert("nmi".into(), s.nmi.into());
            }
            if let Some(t) = obj.get_mut("timings").and_then(|t| t.as_object_mut()) {
                t.insert("data_s".into(), data_s.into());
            }
        }
        Ok(v)
    };
    let Some((first, others)) = outcomes.split_first() else {
        return Err(CliError::Data("no fit to report".into()));
    };
    let mut doc = to_json(first)?;
    if !others.is_empty() {
        let mut comparison = Vec::new();
        for o in others {
            let mut v = to_json(o)?;
            if let Some(obj) = v.as_object_mut() {
                // Only the main fit's labels are written: the comparison is summed up by its scores.
                obj.remove("labels");
            }
            comparison.push(v);
        }
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("comparison".into(), comparison.into());
        }
    }
    Ok(doc)
}

/// Writes `value` as indented JSON to `path`.
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), CliError> {
    let write_error = |source| CliError::Write {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(write_error)?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut w, value).map_err(|e| write_error(e.into()))?;
    writeln!(w).map_err(write_error)?;
    w.flush().map_err(write_error)
}
