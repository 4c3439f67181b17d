//! The `kernel_kmeans` example's command line, driven in-process: its code is a module
//! (`examples/kernel_kmeans/mod.rs`) that this test includes and calls with argument lists,
//! so the test needs no separately built binary. One test also runs the built example binary
//! when `cargo test` has built it (it checks the exit status and the one-line error of `main`).

#[allow(dead_code)]
#[path = "../examples/kernel_kmeans/mod.rs"]
mod kernel_kmeans_cli;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What one run of the command gave.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_cli(args: &[&str]) -> Run {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("kernel_kmeans").chain(args.iter().copied());
    let code = kernel_kmeans_cli::run(argv, &mut out, &mut err, false);
    Run {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }
}

/// A fresh scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("popcorn-example-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch folder");
    dir
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8 here")
}

/// Three well-separated blobs of 21, 17 and 13 points (odd, unequal sizes) around (0, 0),
/// (20, 0) and (0, 20), jittered by at most 1, in a shuffled order: (class, x, y) per point.
fn blobs() -> Vec<(i64, f64, f64)> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let centers = [(0.0, 0.0), (20.0, 0.0), (0.0, 20.0)];
    let sizes = [21, 17, 13];
    let mut points = Vec::new();
    for (c, (&(cx, cy), &size)) in centers.iter().zip(&sizes).enumerate() {
        for _ in 0..size {
            points.push((c as i64, cx + 2.0 * next() - 1.0, cy + 2.0 * next() - 1.0));
        }
    }
    for i in (1..points.len()).rev() {
        let j = (next() * (i + 1) as f64) as usize % (i + 1);
        points.swap(i, j);
    }
    points
}

/// Writes the blobs as CSV with a `label,x,y` header.
fn write_blobs_csv(path: &Path, points: &[(i64, f64, f64)]) {
    let mut text = String::from("label,x,y\n");
    for (c, x, y) in points {
        text += &format!("{c},{x:?},{y:?}\n");
    }
    std::fs::write(path, text).expect("write the blobs");
}

/// Checks that `pred` groups the points exactly as `truth` does (a bijection of labels).
fn assert_same_partition(truth: &[i64], pred: &[u32]) {
    assert_eq!(truth.len(), pred.len());
    let mut forward: HashMap<i64, u32> = HashMap::new();
    let mut backward: HashMap<u32, i64> = HashMap::new();
    for (t, p) in truth.iter().zip(pred) {
        assert_eq!(
            *forward.entry(*t).or_insert(*p),
            *p,
            "class {t} is split: {pred:?}"
        );
        assert_eq!(
            *backward.entry(*p).or_insert(*t),
            *t,
            "cluster {p} mixes classes: {pred:?}"
        );
    }
}

fn read_labels(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .expect("read the labels")
        .lines()
        .map(|l| l.trim().parse().expect("one label a line"))
        .collect()
}

/// The values of a summary row (`  ARI   1.0000   0.0053`).
fn summary_row(stdout: &str, name: &str) -> Vec<String> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(name) && l.trim_start()[name.len()..].starts_with(' '))
        .unwrap_or_else(|| panic!("no `{name}` row in:\n{stdout}"));
    line.trim_start()[name.len()..]
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The objective of plain k-means (the linear kernel, tr(K) included): the sum of squared
/// distances to the cluster means, in f64.
fn linear_objective(points: &[(i64, f64, f64)], labels: &[u32]) -> f64 {
    let k = labels.iter().max().map_or(0, |m| *m as usize + 1);
    let mut sums = vec![(0.0, 0.0, 0usize); k];
    for (p, &l) in points.iter().zip(labels) {
        let s = &mut sums[l as usize];
        s.0 += p.1;
        s.1 += p.2;
        s.2 += 1;
    }
    points
        .iter()
        .zip(labels)
        .map(|(p, &l)| {
            let (sx, sy, c) = sums[l as usize];
            let (mx, my) = (sx / c as f64, sy / c as f64);
            (p.1 - mx).powi(2) + (p.2 - my).powi(2)
        })
        .sum()
}

#[test]
fn csv_input_with_labels_writes_every_output() {
    let dir = scratch("csv");
    let points = blobs();
    let truth: Vec<i64> = points.iter().map(|p| p.0).collect();
    let (input, csv, labels_out, json) = (
        dir.join("blobs.csv"),
        dir.join("out.csv"),
        dir.join("labels.txt"),
        dir.join("result.json"),
    );
    write_blobs_csv(&input, &points);
    let r = run_cli(&[
        "-i",
        path_str(&input),
        "-k",
        "3",
        "--device",
        "cpu",
        "-o",
        path_str(&csv),
        "--labels-out",
        path_str(&labels_out),
        "--json",
        path_str(&json),
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(summary_row(&r.stdout, "ARI"), ["1.0000"]);
    assert_eq!(summary_row(&r.stdout, "NMI"), ["1.0000"]);
    assert_eq!(summary_row(&r.stdout, "n x d"), ["51", "x", "2"]);
    assert_eq!(summary_row(&r.stdout, "kernel"), ["linear"]);

    // --labels-out: one label a line, grouping the points as the blobs do.
    let labels = read_labels(&labels_out);
    assert_eq!(labels.len(), 51);
    assert_same_partition(&truth, &labels);

    // -o: the label, then the coordinates exactly as read.
    let text = std::fs::read_to_string(&csv).expect("read -o");
    let rows: Vec<Vec<f64>> = text
        .lines()
        .map(|l| l.split(',').map(|f| f.parse().expect("a number")).collect())
        .collect();
    assert_eq!(rows.len(), 51);
    for ((row, p), l) in rows.iter().zip(&points).zip(&labels) {
        assert_eq!(row, &vec![f64::from(*l), p.1, p.2]);
    }

    // --json: the fit's fields plus the data's.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read --json"))
            .expect("valid JSON");
    let json_labels: Vec<u32> = doc["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|v| v.as_u64().expect("a label") as u32)
        .collect();
    assert_eq!(json_labels, labels);
    let objective = doc["objective"].as_f64().expect("objective");
    let expected = linear_objective(&points, &labels);
    assert!(
        (objective - expected).abs() <= 1e-4 * expected,
        "objective {objective}, expected {expected}"
    );
    let history: Vec<f64> = doc["objective_history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect();
    assert_eq!(
        history.len() as u64,
        doc["iterations"].as_u64().expect("iterations")
    );
    assert!(
        history.windows(2).all(|w| w[1] <= w[0] * (1.0 + 1e-6)),
        "the objective increased: {history:?}"
    );
    assert!((history[history.len() - 1] - objective).abs() <= 1e-6 * objective);
    assert_eq!(doc["converged"], true);
    assert_eq!(doc["ari"].as_f64(), Some(1.0));
    assert!((doc["nmi"].as_f64().expect("nmi") - 1.0).abs() < 1e-12);
    assert_eq!(
        (doc["n"].as_u64(), doc["d"].as_u64(), doc["k"].as_u64()),
        (Some(51), Some(2), Some(3))
    );
    assert_eq!(doc["kernel"], "linear");
    assert!(doc["input"].as_str().expect("input").ends_with("blobs.csv"));
    for field in [
        "total_s",
        "kernel_matrix_s",
        "iterations_s",
        "per_iteration_s",
        "data_s",
    ] {
        assert!(
            !doc["timings"][field].is_null(),
            "timings.{field} missing: {}",
            doc["timings"]
        );
    }
    assert_eq!(doc["params"]["max_iter"], 300);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn default_demo_separates_the_rings_only_with_the_gaussian_kernel() {
    let dir = scratch("rings");
    let json = dir.join("rings.json");
    let r = run_cli(&["--device", "cpu", "--json", path_str(&json)]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(
        summary_row(&r.stdout, "n x d"),
        ["1500", "x", "2", "1500", "x", "2"]
    );
    let ari: Vec<f64> = summary_row(&r.stdout, "ARI")
        .iter()
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert_eq!(ari.len(), 2, "{}", r.stdout);
    assert!(ari[0] > 0.99, "gaussian ARI {}", ari[0]);
    assert!(ari[1].abs() < 0.1, "linear ARI {}", ari[1]);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read --json"))
            .expect("valid JSON");
    assert_eq!(doc["kernel"], "gaussian");
    assert_eq!(doc["kernel_params"]["gamma"].as_f64(), Some(4.0));
    assert_eq!(doc["labels"].as_array().map(Vec::len), Some(1500));
    assert_eq!(doc["comparison"][0]["kernel"], "linear");
    assert!(doc["comparison"][0]["ari"].as_f64().expect("linear ari") < 0.1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn uniform_random_data_has_no_scores() {
    let dir = scratch("uniform");
    let labels_out = dir.join("labels.txt");
    let r = run_cli(&[
        "-n",
        "41",
        "-d",
        "3",
        "-k",
        "4",
        "--device",
        "cpu",
        "--init",
        "kmeans++",
        "-r",
        "2",
        "--labels-out",
        path_str(&labels_out),
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(!r.stdout.contains("ARI"), "{}", r.stdout);
    assert_eq!(summary_row(&r.stdout, "n x d"), ["41", "x", "3"]);
    let labels = read_labels(&labels_out);
    assert_eq!(labels.len(), 41);
    assert!(labels.iter().all(|l| *l < 4));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn precomputed_kernel_matrix_groups_the_blobs() {
    let dir = scratch("precomputed");
    let points = blobs();
    let truth: Vec<i64> = points.iter().map(|p| p.0).collect();
    let n = points.len();
    // The gaussian kernel with gamma 0.1, computed here in f64.
    let mut text = String::new();
    for a in &points {
        let row: Vec<String> = points
            .iter()
            .map(|b| {
                format!(
                    "{:?}",
                    (-0.1 * ((a.1 - b.1).powi(2) + (a.2 - b.2).powi(2))).exp()
                )
            })
            .collect();
        text += &row.join(",");
        text.push('\n');
    }
    let kfile = dir.join("K.csv");
    std::fs::write(&kfile, text).expect("write K");
    let labels_out = dir.join("labels.txt");
    let r = run_cli(&[
        "-f",
        "precomputed",
        "-i",
        path_str(&kfile),
        "-k",
        "3",
        "--device",
        "cpu",
        "--labels-out",
        path_str(&labels_out),
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(
        r.stdout
            .contains(&format!("{n} (precomputed {n} x {n} kernel matrix)")),
        "{}",
        r.stdout
    );
    assert_same_partition(&truth, &read_labels(&labels_out));

    // The leading 20 x 20 block with -n.
    let r = run_cli(&[
        "-f",
        "precomputed",
        "-i",
        path_str(&kfile),
        "-k",
        "3",
        "-n",
        "20",
        "--device",
        "cpu",
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(
        r.stdout.contains("20 (precomputed 20 x 20 kernel matrix)"),
        "{}",
        r.stdout
    );

    // A matrix that is not square.
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "1,0,0\n0,1,0\n").expect("write");
    let r = run_cli(&[
        "-f",
        "precomputed",
        "-i",
        path_str(&bad),
        "-k",
        "2",
        "--device",
        "cpu",
    ]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "2 x 3 matrix");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The run printed exactly one line on stderr, an `error:` line containing `needle`.
fn assert_one_error_line(r: &Run, needle: &str) {
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {}", r.stderr);
    assert!(lines[0].starts_with("error: "), "stderr: {}", r.stderr);
    assert!(lines[0].contains(needle), "`{needle}` not in: {}", r.stderr);
}

#[test]
fn bad_input_gives_one_error_line_and_a_non_zero_status() {
    let dir = scratch("errors");
    let points = blobs();
    let input = dir.join("blobs.csv");
    write_blobs_csv(&input, &points);

    let missing = dir.join("missing.csv");
    let r = run_cli(&["-i", path_str(&missing), "-k", "3", "--device", "cpu"]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "missing.csv");

    let r = run_cli(&["-i", path_str(&input), "-k", "52", "--device", "cpu"]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "k = 52");

    let r = run_cli(&["-n", "2", "-k", "3", "--device", "cpu"]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "k = 3");

    let nan = dir.join("nan.csv");
    std::fs::write(&nan, "label,x,y\n0,1.0,2.0\n1,NaN,3.0\n").expect("write");
    let r = run_cli(&["-i", path_str(&nan), "--device", "cpu"]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "NaN");

    let r = run_cli(&["-i", path_str(&input), "-f", "laplacian", "--device", "cpu"]);
    assert_eq!(r.code, 2);
    assert_one_error_line(&r, "unknown kernel");

    let r = run_cli(&["-l", "naive", "--device", "cpu"]);
    assert_eq!(r.code, 2);
    assert_one_error_line(&r, "naive baseline");

    let r = run_cli(&["--gamma", "-1e400", "--device", "cpu"]);
    assert_ne!(r.code, 0);
    assert_one_error_line(&r, "gamma");

    let r = run_cli(&["-i", path_str(&input), "-d", "5", "--device", "cpu"]);
    assert_eq!(r.code, 2);
    assert_one_error_line(&r, "2 features");

    let r = run_cli(&["-f", "precomputed", "--device", "cpu"]);
    assert_eq!(r.code, 2);
    assert_one_error_line(&r, "-i");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_flag_prints_the_plans_of_every_program_run() {
    let r = run_cli(&[
        "-n",
        "31",
        "--plan",
        "--device",
        "cpu",
        "--algorithm",
        "stored",
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    for program in [
        "kernel_gaussian",
        "kernel_linear",
        "kkmeans_iteration",
        "kkmeans_centroid_norms",
    ] {
        assert!(
            r.stdout.contains(&format!("plan for fn {program}(")),
            "no plan of {program}:\n{}",
            r.stdout
        );
    }
    assert!(r.stdout.contains("n=31"), "{}", r.stdout);
    assert_eq!(
        r.stdout.matches("plan for fn kkmeans_iteration(").count(),
        1
    );
}

#[test]
fn help_lists_the_flags_and_exits_zero() {
    let r = run_cli(&["--help"]);
    assert_eq!(r.code, 0);
    for flag in [
        "-n <N>",
        "-f <KERNEL>",
        "--init <INIT>",
        "--labels-out",
        "--json",
        "--plan",
        "--weights <FILE>",
        "concentric rings",
    ] {
        assert!(
            r.stdout.contains(flag),
            "`{flag}` not in the help:\n{}",
            r.stdout
        );
    }
}

/// The example binary that `cargo test` built next to this test's own binary, if it is newer
/// than the example's sources.
fn built_example() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir
        .join("examples")
        .join(format!("kernel_kmeans{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&bin).ok()?.modified().ok()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut sources = vec![root.join("kernel_kmeans.rs")];
    sources.extend(
        std::fs::read_dir(root.join("kernel_kmeans"))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path())),
    );
    let newest = sources
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok()?.modified().ok())
        .max()?;
    (built >= newest).then_some(bin)
}

/// [`built_example`], or a notice that the test is skipped.
fn built_example_or_notice() -> Option<PathBuf> {
    let bin = built_example();
    if bin.is_none() {
        eprintln!(
            "skipped: no up-to-date kernel_kmeans example binary (plain `cargo test` builds it)"
        );
    }
    bin
}

#[test]
fn built_binary_exits_non_zero_with_one_error_line() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let out = std::process::Command::new(&bin)
        .args([
            "-i",
            "/nonexistent/popcorn/points.csv",
            "-k",
            "2",
            "--device",
            "cpu",
        ])
        .output()
        .expect("run the example binary");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: cannot open") && stderr.contains("points.csv"),
        "{stderr}"
    );
    let out = std::process::Command::new(&bin)
        .args(["-f", "nope"])
        .output()
        .expect("run the example binary");
    assert_eq!(out.status.code(), Some(2));
}

/// Sizes beyond the machine's memory are refused with the numbers, never an abort: a stored
/// kernel matrix of 10^6 points (4 TB in f32) on the CPU, and 10^11 synthetic values (800 GB)
/// (n = 200,000, 160 GB, fits a 256 GB machine: the size is one that no test machine holds).
#[test]
fn sizes_beyond_host_memory_are_refused_with_the_numbers() {
    let cases: [(&[&str], &str); 2] = [
        (
            &[
                "-n",
                "1000000",
                "-d",
                "2",
                "-k",
                "2",
                "--device",
                "cpu",
                "--algorithm",
                "stored",
            ],
            "workspace and outputs",
        ),
        (
            &[
                "-n",
                "100000000",
                "-d",
                "1000",
                "-k",
                "2",
                "--device",
                "cpu",
            ],
            "synthetic points",
        ),
    ];
    for (args, what) in cases {
        let run = run_cli(args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("not enough host memory") && run.stderr.contains(what),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains("MiB are needed"), "{}", run.stderr);
        assert!(
            run.stderr.contains("POPCORN_MEMORY_LIMIT"),
            "{}",
            run.stderr
        );
    }
    let stored = run_cli(cases[0].0);
    assert!(
        stored.stderr.contains("--algorithm recompute"),
        "{}",
        stored.stderr
    );
}

/// `--algorithm recompute` runs the iteration from the points: `--plan` shows its plan and not
/// the kernel matrix's, and the summary says which algorithm ran and why, with the same labels
/// as the stored kernel matrix.
#[test]
fn recompute_runs_the_iteration_from_the_points() {
    let dir = scratch("recompute");
    let mut labels = Vec::new();
    for algorithm in ["recompute", "stored"] {
        let out = dir.join(format!("{algorithm}.txt"));
        let r = run_cli(&[
            "-n",
            "300",
            "-d",
            "2",
            "-k",
            "3",
            "-f",
            "gaussian",
            "--dtype",
            "f64",
            "--device",
            "cpu",
            "--algorithm",
            algorithm,
            "--plan",
            "--labels-out",
            path_str(&out),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let recompute = algorithm == "recompute";
        assert_eq!(
            r.stdout.contains("plan for fn kkmeans_recompute_gaussian("),
            recompute,
            "{}",
            r.stdout
        );
        assert_eq!(
            r.stdout.contains("plan for fn kernel_gaussian("),
            !recompute,
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains(&format!("{algorithm} (asked for)")),
            "{}",
            r.stdout
        );
        labels.push(read_labels(&out));
    }
    assert_eq!(labels[0], labels[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GPU that was asked for by name is never silently replaced by the CPU: a device index the
/// machine lacks is refused everywhere, and `--device cuda` (or `POPCORN_DEVICE=cuda`) without a
/// usable GPU names the missing piece and the way out, in one line.
#[test]
fn a_requested_gpu_that_is_not_there_is_an_error_not_a_fallback() {
    let r = run_cli(&["-n", "100", "-d", "2", "-k", "2", "--device", "cuda:99"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_one_error_line(&r, "cuda:99 was requested");
    assert!(r.stderr.contains("POPCORN_DEVICE=cpu"), "{}", r.stderr);

    if popcorn::runtime::cuda::cuda_available().is_ok_and(|count| count > 0) {
        return;
    }
    let r = run_cli(&["-n", "100", "-d", "2", "-k", "2", "--device", "cuda"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_one_error_line(&r, "CUDA is not usable here");
    assert_eq!(
        r.stderr.matches("POPCORN_DEVICE=cpu").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "nothing ran: {}", r.stdout);
}

/// Whether the CLI can find a TrueType font of the system for `--plot` (its search: `.ttf`
/// files up to four folders down its font folders).
fn system_has_a_font() -> bool {
    fn any_ttf(dir: &std::path::Path, depth: usize) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.filter_map(|e| e.ok()).any(|e| {
            let p = e.path();
            (p.is_dir() && depth > 0 && any_ttf(&p, depth - 1))
                || p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf"))
        })
    }
    [
        "/usr/share/fonts",
        "/usr/local/share/fonts",
        "/Library/Fonts",
        "C:\\Windows\\Fonts",
    ]
    .iter()
    .any(|d| any_ttf(std::path::Path::new(d), 4))
}

/// Without a font on the system, `--plot` stops before fitting with one line naming what
/// helps; a file that is not a font named with `--plot-font` is refused the same way.
#[test]
fn plot_without_a_usable_font_is_one_error_line() {
    let dir = scratch("plot-font");
    let not_a_font = dir.join("not-a-font.ttf");
    std::fs::write(&not_a_font, b"plain text").expect("scratch file");
    let out = dir.join("p.png");
    let r = run_cli(&[
        "-n",
        "50",
        "--device",
        "cpu",
        "--plot",
        path_str(&out),
        "--plot-font",
        path_str(&not_a_font),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_one_error_line(&r, "not a usable TrueType font");
    assert!(!out.exists());
    if !system_has_a_font() {
        let r = run_cli(&["-n", "50", "--device", "cpu", "--plot", path_str(&out)]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert_one_error_line(&r, "--plot-font FILE.ttf");
        assert!(!out.exists());
    }
}

#[test]
fn plot_flag_draws_png_and_svg() {
    if !system_has_a_font() {
        eprintln!("no TrueType font on this system: the pictures are checked where one is");
        return;
    }
    let dir = scratch("plot");
    // The rings (2-D, two fits: one row each) and uniform 5-D data (principal components).
    for (args, file) in [
        (vec!["-n", "200", "--device", "cpu"], "rings.png"),
        (
            vec!["-n", "120", "-d", "5", "-k", "3", "--device", "cpu"],
            "uniform.svg",
        ),
    ] {
        let path = dir.join(file);
        let mut args = args.clone();
        args.extend(["--plot", path_str(&path)]);
        let r = run_cli(&args);
        assert_eq!(r.code, 0, "{file}: {}", r.stderr);
        assert!(
            r.stdout.contains(&format!("wrote {}", path.display())),
            "{}",
            r.stdout
        );
        let bytes = std::fs::read(&path).expect("the picture");
        if file.ends_with(".png") {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        } else {
            let text = String::from_utf8(bytes).expect("SVG is text");
            assert!(text.contains("<svg") && text.contains("principal component 1"));
        }
    }
    let r = run_cli(&["-n", "50", "--device", "cpu", "--plot", "rings.pdf"]);
    assert_eq!(r.code, 2);
    assert_one_error_line(&r, ".png or .svg");
}

/// `--weights FILE`: the fit is weighted (its objective is the weighted k-means objective of
/// its labels, by hand), the summary and the JSON say so; one weight a line and a one-column
/// CSV read alike; a zero weight leaves a point out of the objective.
#[test]
fn weights_file_weighs_the_points() {
    let dir = scratch("weights");
    let points = blobs();
    let csv = dir.join("blobs.csv");
    write_blobs_csv(&csv, &points);
    let n = points.len();
    let w: Vec<f64> = (0..n).map(|i| [1.0, 2.0, 0.0, 3.5][i % 4]).collect();
    let lines: String = w.iter().map(|v| format!("{v}\n")).collect();
    let txt = dir.join("w.txt");
    std::fs::write(&txt, &lines).expect("write the weights");
    let one_column = dir.join("w.csv");
    std::fs::write(&one_column, &lines).expect("write the weights");
    let mut objectives = Vec::new();
    for file in [&txt, &one_column] {
        let labels = dir.join("labels.txt");
        let json = dir.join("fit.json");
        let r = run_cli(&[
            "-i",
            path_str(&csv),
            "--device",
            "cpu",
            "--dtype",
            "f64",
            "--weights",
            path_str(file),
            "--labels-out",
            path_str(&labels),
            "--json",
            path_str(&json),
        ]);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        let got = read_labels(&labels);
        let truth: Vec<i64> = points.iter().map(|p| p.0).collect();
        assert_same_partition(&truth, &got);
        let total: f64 = w.iter().sum();
        let zero = w.iter().filter(|v| **v == 0.0).count();
        assert_eq!(
            summary_row(&r.stdout, "weights"),
            [
                "total",
                &format!("{total},"),
                "from",
                "0",
                "to",
                "3.5,",
                &zero.to_string(),
                "zero"
            ]
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).unwrap();
        assert_eq!(doc["weights"]["total"].as_f64(), Some(total), "{doc}");
        assert_eq!(doc["weights"]["zero"].as_u64(), Some(zero as u64), "{doc}");
        // The weighted objective of the labels, by hand: weighted means, weighted squares.
        let k = 3;
        let mut sums = vec![(0.0, 0.0, 0.0); k];
        for ((p, &l), wi) in points.iter().zip(&got).zip(&w) {
            let s = &mut sums[l as usize];
            s.0 += wi * p.1;
            s.1 += wi * p.2;
            s.2 += wi;
        }
        let want: f64 = points
            .iter()
            .zip(&got)
            .zip(&w)
            .map(|((p, &l), wi)| {
                let (sx, sy, sw) = sums[l as usize];
                wi * ((p.1 - sx / sw).powi(2) + (p.2 - sy / sw).powi(2))
            })
            .sum();
        let objective = doc["objective"].as_f64().expect("an objective");
        assert!(
            (objective - want).abs() <= 1e-9 * want.max(1.0),
            "{objective} against {want}"
        );
        objectives.push(objective);
    }
    assert_eq!(objectives[0], objectives[1]);
}

/// Bad weights files: one error line naming the file and the line or the count.
#[test]
fn bad_weights_files_are_one_error_line() {
    let dir = scratch("bad-weights");
    let csv = dir.join("blobs.csv");
    let points = blobs();
    write_blobs_csv(&csv, &points);
    let n = points.len();
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    let ones = |count: usize| "1\n".repeat(count);
    let cases = [
        (
            write("short.txt", ones(n - 1)),
            format!("holds {} weights for {n} points", n - 1),
        ),
        (
            write("negative.txt", format!("1\n1\n-0.5\n{}", ones(n - 3))),
            "invalid input: sample weight 2 is -0.5; weights must be finite and >= 0".to_string(),
        ),
        (
            write("word.txt", format!("1\nheavy\n{}", ones(n - 2))),
            "line 2".to_string(),
        ),
        (
            write("two.csv", "1,2\n".repeat(n)),
            "has 2 columns; a weights file holds one weight per line".to_string(),
        ),
        (
            write("zero.txt", "0\n".repeat(n)),
            "every sample weight is 0".to_string(),
        ),
    ];
    for (file, needle) in cases {
        let r = run_cli(&[
            "-i",
            path_str(&csv),
            "--device",
            "cpu",
            "--weights",
            path_str(&file),
        ]);
        assert_eq!(r.code, 1, "{}: {}", file.display(), r.stderr);
        assert_one_error_line(&r, &needle);
    }
    let r = run_cli(&[
        "-i",
        path_str(&csv),
        "--device",
        "cpu",
        "--weights",
        "/nonexistent/w.txt",
    ]);
    assert_eq!(r.code, 1);
    assert_one_error_line(&r, "/nonexistent/w.txt");
}

/// `--sparse`: a sparse libsvm file stays sparse under `auto` (the summary and the JSON say so),
/// gives the labels of `--sparse off`, `-n` keeps the first points, and flags that need dense
/// points say so; a dense file stays dense under `auto`.
#[test]
fn sparse_points_are_chosen_from_the_file_and_reported() {
    let dir = scratch("sparse");
    let svm = dir.join("topics.libsvm");
    let mut text = String::new();
    for i in 0..90usize {
        let topic = i % 3;
        text.push_str(&topic.to_string());
        for j in 0..4usize {
            let col = topic * 100 + (i * 7 + j * 13) % 100;
            text.push_str(&format!(" {}:{}", col + 1, 1.0 + (j as f64) * 0.25));
        }
        text.push('\n');
    }
    // Indices must increase within a line: sort each line's pairs.
    let text: String = text
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let label = parts.next().unwrap_or("0");
            let mut pairs: Vec<(usize, &str)> = parts
                .map(|p| (p.split(':').next().unwrap().parse().unwrap(), p))
                .collect();
            pairs.sort_by_key(|p| p.0);
            pairs.dedup_by_key(|p| p.0);
            let body: Vec<&str> = pairs.iter().map(|p| p.1).collect();
            format!("{label} {}\n", body.join(" "))
        })
        .collect();
    std::fs::write(&svm, text).unwrap();
    let json = dir.join("fit.json");
    let labels_sparse = dir.join("sparse.txt");
    let labels_dense = dir.join("dense.txt");
    let sparse = run_cli(&[
        "-i",
        path_str(&svm),
        "--device",
        "cpu",
        "--json",
        path_str(&json),
        "--labels-out",
        path_str(&labels_sparse),
    ]);
    assert_eq!(sparse.code, 0, "{}", sparse.stderr);
    assert!(
        sparse.stdout.contains("sparse (CSR, density"),
        "{}",
        sparse.stdout
    );
    assert!(
        sparse.stdout.contains("stored (sparse points)"),
        "{}",
        sparse.stdout
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["points"], "sparse");
    assert!(doc["density"].as_f64().unwrap() < 0.02);
    let dense = run_cli(&[
        "-i",
        path_str(&svm),
        "--device",
        "cpu",
        "--sparse",
        "off",
        "--labels-out",
        path_str(&labels_dense),
    ]);
    assert_eq!(dense.code, 0, "{}", dense.stderr);
    assert!(
        dense.stdout.contains("points                dense"),
        "{}",
        dense.stdout
    );
    assert_eq!(
        std::fs::read_to_string(&labels_sparse).unwrap(),
        std::fs::read_to_string(&labels_dense).unwrap()
    );
    let first = run_cli(&[
        "-i",
        path_str(&svm),
        "--device",
        "cpu",
        "-n",
        "30",
        "-k",
        "3",
    ]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stdout.contains("30 x 300"), "{}", first.stdout);
    let out = dir.join("out.csv");
    let refused = run_cli(&[
        "-i",
        path_str(&svm),
        "--device",
        "cpu",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(refused.code, 2);
    assert!(
        refused.stderr.contains("add --sparse off"),
        "{}",
        refused.stderr
    );
    // Options the library refuses for sparse points are refused here first, the same way.
    for (flags, flag) in [
        (&["--zscore"][..], "--zscore"),
        (&["--algorithm", "recompute"][..], "--algorithm recompute"),
    ] {
        let mut args = vec!["-i", path_str(&svm), "--device", "cpu", "-k", "3"];
        args.extend_from_slice(flags);
        let r = run_cli(&args);
        assert_eq!(r.code, 2, "{flag}: {}", r.stderr);
        assert_one_error_line(&r, &format!("the points are sparse and {flag}"));
        assert!(
            r.stderr.contains("add --sparse off"),
            "{flag}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("Algorithm::"), "{flag}: {}", r.stderr);
    }
    let bad = run_cli(&["-i", path_str(&svm), "--sparse", "maybe"]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr.contains("expected auto, on or off"),
        "{}",
        bad.stderr
    );
    // A dense CSV stays dense under auto and becomes sparse under on.
    let csv = dir.join("blobs.csv");
    let body: String = blobs()
        .iter()
        .map(|(c, x, y)| format!("{c},{x},{y}\n"))
        .collect();
    std::fs::write(&csv, body).unwrap();
    let auto = run_cli(&[
        "-i",
        path_str(&csv),
        "--device",
        "cpu",
        "--label-column",
        "first",
    ]);
    assert!(
        auto.stdout.contains("points                dense"),
        "{}",
        auto.stdout
    );
    let on = run_cli(&[
        "-i",
        path_str(&csv),
        "--device",
        "cpu",
        "--label-column",
        "first",
        "--sparse",
        "on",
    ]);
    assert_eq!(on.code, 0, "{}", on.stderr);
    assert!(on.stdout.contains("sparse (CSR"), "{}", on.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scipy sparse `.npz` (CSR) file: kept sparse under `--sparse auto` below 10% density, with
/// the labels of the same points dense (`--sparse off`); a denser one is clustered dense, and
/// a CSC archive is refused naming the conversion.
#[test]
fn npz_points_are_read_sparse() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let topics = data.join("topics.npz");
    let dir = scratch("npz");
    let labels_sparse = dir.join("sparse.txt");
    let labels_dense = dir.join("dense.txt");
    let sparse = run_cli(&[
        "-i",
        path_str(&topics),
        "-k",
        "3",
        "--device",
        "cpu",
        "--labels-out",
        path_str(&labels_sparse),
    ]);
    assert_eq!(sparse.code, 0, "{}", sparse.stderr);
    assert!(sparse.stdout.contains("60 x 300"), "{}", sparse.stdout);
    assert!(
        sparse.stdout.contains("sparse (CSR, density 1.333%)"),
        "{}",
        sparse.stdout
    );
    let dense = run_cli(&[
        "-i",
        path_str(&topics),
        "-k",
        "3",
        "--device",
        "cpu",
        "--sparse",
        "off",
        "--labels-out",
        path_str(&labels_dense),
    ]);
    assert_eq!(dense.code, 0, "{}", dense.stderr);
    assert!(
        dense.stdout.contains("points                dense"),
        "{}",
        dense.stdout
    );
    let sparse_labels = std::fs::read_to_string(&labels_sparse).unwrap();
    assert_eq!(sparse_labels.lines().count(), 60);
    assert_eq!(
        sparse_labels,
        std::fs::read_to_string(&labels_dense).unwrap()
    );
    // 6 entries in 4 x 5 (30%): dense under auto.
    let io_data = Path::new(env!("CARGO_MANIFEST_DIR")).join("popcorn-io/tests/data");
    let denser = run_cli(&[
        "-i",
        path_str(&io_data.join("csr_f64.npz")),
        "-k",
        "2",
        "--device",
        "cpu",
    ]);
    assert_eq!(denser.code, 0, "{}", denser.stderr);
    assert!(
        denser.stdout.contains("points                dense"),
        "{}",
        denser.stdout
    );
    let csc = run_cli(&[
        "-i",
        path_str(&io_data.join("csc.npz")),
        "-k",
        "2",
        "--device",
        "cpu",
    ]);
    assert_eq!(csc.code, 1, "{}", csc.stderr);
    assert_one_error_line(&csc, "X.tocsr()");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two 5-cliques joined by one edge (4 - 5), as an edge list (1-based, both directions of some
/// edges, a comment) and as a symmetric Matrix Market file.
fn two_cliques() -> (String, String) {
    let mut edges = vec![(4, 5)];
    for base in [0, 5] {
        for i in 0..5 {
            for j in i + 1..5 {
                edges.push((base + i, base + j));
            }
        }
    }
    let mut list = String::from("# two cliques\n");
    let mut mtx = format!(
        "%%MatrixMarket matrix coordinate pattern symmetric\n10 10 {}\n",
        edges.len()
    );
    for (n, (i, j)) in edges.iter().enumerate() {
        list.push_str(&format!("{} {}\n", i + 1, j + 1));
        if n % 3 == 0 {
            list.push_str(&format!("{} {}\n", j + 1, i + 1));
        }
        mtx.push_str(&format!("{} {}\n", j + 1, i + 1));
    }
    (list, mtx)
}

#[test]
fn graphs_are_clustered_by_normalized_cut() {
    let dir = scratch("graph");
    let (list, mtx) = two_cliques();
    let edges = dir.join("g.edges");
    let market = dir.join("g.mtx");
    std::fs::write(&edges, list).unwrap();
    std::fs::write(&market, mtx).unwrap();
    let labels = dir.join("labels.txt");
    let json = dir.join("r.json");
    // Volumes 21 and 21, one edge cut: 2 / 21.
    for (file, extra) in [(&market, vec![]), (&edges, vec!["--one-based"])] {
        let mut args = vec![
            "--graph",
            path_str(file),
            "-k",
            "2",
            "-r",
            "3",
            "--device",
            "cpu",
            "--dtype",
            "f64",
            "--labels-out",
            path_str(&labels),
            "--json",
            path_str(&json),
        ];
        args.extend(extra);
        let r = run_cli(&args);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        let truth: Vec<i64> = (0..10).map(|i| (i / 5) as i64).collect();
        assert_same_partition(&truth, &read_labels(&labels));
        assert_eq!(summary_row(&r.stdout, "normalized cut"), vec!["0.095238"]);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let cut = report["result"]["ncut"].as_f64().unwrap();
        assert!((cut - 2.0 / 21.0).abs() < 1e-12, "{cut}");
        assert_eq!(report["result"]["n"], 10);
    }
    // A 0-based read of the 1-based file has an isolated node 0.
    let r = run_cli(&["--graph", path_str(&edges), "-k", "2", "--device", "cpu"]);
    assert_one_error_line(&r, "node 0 is isolated");
    let r = run_cli(&["--graph", path_str(&market), "--device", "cpu"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("-k"), "{}", r.stderr);
    let r = run_cli(&["--graph", path_str(&market), "-k", "2", "-f", "linear"]);
    assert_one_error_line(&r, "-f does not apply to --graph");
    std::fs::write(
        dir.join("bad.mtx"),
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 3 1\n",
    )
    .unwrap();
    let r = run_cli(&["--graph", path_str(&dir.join("bad.mtx")), "-k", "1"]);
    assert_one_error_line(&r, "line 3: column index 3 is outside 1..=2");
}

/// The first fit's objective in a `--json` report.
fn report_objective(json: &Path) -> f64 {
    std::fs::read_to_string(json)
        .expect("the JSON report")
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"objective\":"))
        .and_then(|v| v.trim().trim_end_matches(',').parse().ok())
        .expect("an objective in the report")
}

/// Whole fits with the plans partitioned over in-process CPU ranks (`POPCORN_CPU_RANKS`, read
/// once per process: hence the built binary): k-means++ from the kernel's columns, the stored
/// K kept on the ranks from run to run, and the recomputed iteration (its contraction shared:
/// each CPU rank its block of whole rows, the parts all-reduced): the labels and the objective
/// of one rank, bit for bit.
#[test]
fn fits_over_cpu_ranks_equal_the_unpartitioned_fit() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let dir = scratch("cpu-ranks");
    for algorithm in ["stored", "recompute"] {
        let mut seen: Vec<(Vec<u32>, f64)> = Vec::new();
        for ranks in ["1", "2", "3"] {
            let labels = dir.join(format!("{algorithm}-{ranks}.txt"));
            let json = dir.join(format!("{algorithm}-{ranks}.json"));
            let out = std::process::Command::new(&bin)
                .args([
                    "-n",
                    "301",
                    "-d",
                    "3",
                    "-k",
                    "4",
                    "-f",
                    "gaussian",
                    "--dtype",
                    "f64",
                    "--device",
                    "cpu",
                    "--algorithm",
                    algorithm,
                    "--init",
                    "kmeans++",
                    "-r",
                    "2",
                    "--labels-out",
                    path_str(&labels),
                    "--json",
                    path_str(&json),
                ])
                .env("POPCORN_CPU_RANKS", ranks)
                .output()
                .expect("run the example binary");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{algorithm}, {ranks} ranks: {stderr}"
            );
            seen.push((read_labels(&labels), report_objective(&json)));
        }
        let (one, two, three) = (&seen[0], &seen[1], &seen[2]);
        assert_eq!(two.0, one.0, "{algorithm}: labels on two ranks against one");
        assert_eq!(three, two, "{algorithm}: three ranks against two");
        assert_eq!(two.1.to_bits(), one.1.to_bits(), "{algorithm}: objective");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example binary as rank `rank` of `size` processes, as a launcher starts it: its rank,
/// the world's size and the rendezvous file in the environment, ranks waiting `timeout_s`
/// seconds for one another, its output captured. The caller adds its arguments and spawns it.
fn rank_process(
    bin: &Path,
    (rank, size): (usize, usize),
    rendezvous: &Path,
    timeout_s: u32,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("POPCORN_RANK", rank.to_string())
        .env("POPCORN_WORLD_SIZE", size.to_string())
        .env("POPCORN_RENDEZVOUS", rendezvous)
        .env("POPCORN_RANK_TIMEOUT", timeout_s.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// Waits for the ranks (each started with its labels and report paths): every one exits with
/// 0, rank 0 wrote `want` (the labels, and the objective bit for bit), the others wrote no
/// results. `what` names a rank in the messages. Returns the ranks' outputs.
fn ranks_give(
    children: Vec<(std::process::Child, PathBuf, PathBuf)>,
    (want_labels, want_objective): (&[u32], f64),
    what: &dyn Fn(usize) -> String,
) -> Vec<std::process::Output> {
    let mut outs = Vec::new();
    for (rank, (child, labels, json)) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("a rank's exit");
        let what = what(rank);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if rank == 0 {
            assert_eq!(read_labels(&labels), want_labels, "{what}: labels");
            let got = report_objective(&json);
            assert_eq!(got.to_bits(), want_objective.to_bits(), "{what}: objective");
        } else {
            assert!(!labels.exists() && !json.exists(), "{what} wrote results");
        }
        outs.push(out);
    }
    outs
}

/// The example run as several processes, one rank each, as `mpirun -np P` starts it (the
/// launcher's rank, size and a rendezvous file in the environment): rank 0 writes the labels
/// and the report, which equal one process's fit bit for bit (stored and recomputed K); the
/// other ranks write nothing. A rank that fails (a missing input on one rank) stops every
/// rank with an error naming it.
#[test]
fn processes_of_one_rank_each_give_one_process_fit() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let dir = scratch("world");
    let args = |algorithm: &str, labels: &Path, json: &Path| -> Vec<String> {
        [
            "-n",
            "257",
            "-d",
            "3",
            "-k",
            "5",
            "-f",
            "polynomial",
            "--dtype",
            "f64",
            "--device",
            "cpu",
            "--algorithm",
            algorithm,
            "--init",
            "kmeans++",
            "-m",
            "20",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "--labels-out".to_string(),
            path_str(labels).to_string(),
            "--json".to_string(),
            path_str(json).to_string(),
        ])
        .collect()
    };
    for algorithm in ["stored", "recompute"] {
        let (labels, json) = (dir.join("one.txt"), dir.join("one.json"));
        let one = std::process::Command::new(&bin)
            .args(args(algorithm, &labels, &json))
            .output()
            .expect("run the example");
        assert_eq!(
            one.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&one.stderr)
        );
        let (want_labels, want_objective) = (read_labels(&labels), report_objective(&json));
        for size in [2, 3] {
            let rendezvous = dir.join(format!("{algorithm}-{size}.addr"));
            let children: Vec<_> = (0..size)
                .map(|rank| {
                    let labels = dir.join(format!("{algorithm}-{size}-{rank}.txt"));
                    let json = dir.join(format!("{algorithm}-{size}-{rank}.json"));
                    let child = rank_process(&bin, (rank, size), &rendezvous, 60)
                        .args(args(algorithm, &labels, &json))
                        .spawn()
                        .expect("start a rank");
                    (child, labels, json)
                })
                .collect();
            let what = |rank: usize| format!("{algorithm}, rank {rank} of {size}");
            let outs = ranks_give(children, (&want_labels, want_objective), &what);
            for (rank, out) in outs.iter().enumerate().skip(1) {
                assert!(out.stdout.is_empty(), "{} printed", what(rank));
            }
        }
    }
    // Rank 1 of 2 cannot read its input: both ranks stop, naming it.
    let rendezvous = dir.join("failure.addr");
    let points = dir.join("points.csv");
    std::fs::write(&points, "0,0\n1,1\n5,5\n6,6\n").unwrap();
    let start = std::time::Instant::now();
    let children: Vec<_> = (0..2)
        .map(|rank| {
            let input = if rank == 0 {
                path_str(&points).to_string()
            } else {
                "/nonexistent/popcorn/points.csv".to_string()
            };
            rank_process(&bin, (rank, 2), &rendezvous, 20)
                .args(["-i", &input, "-k", "2", "--device", "cpu"])
                .spawn()
                .expect("start a rank")
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("a rank's exit"))
        .collect();
    assert!(
        start.elapsed().as_secs_f64() < 60.0,
        "the ranks took too long to stop"
    );
    assert_eq!(outs[1].status.code(), Some(1));
    let rank0 = String::from_utf8_lossy(&outs[0].stderr);
    assert_ne!(outs[0].status.code(), Some(0), "rank 0 went on: {rank0}");
    assert!(rank0.contains("rank 1"), "{rank0}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two GPUs of this host, or `None` after a notice (a failure where `POPCORN_REQUIRE_GPUS`
/// asks for at least two).
fn two_gpus_or_notice() -> Option<()> {
    let count = popcorn::runtime::cuda::cuda_available().unwrap_or(0);
    if count >= 2 {
        return Some(());
    }
    let required = std::env::var("POPCORN_REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    assert!(
        required < 2,
        "POPCORN_REQUIRE_GPUS asks for two GPUs; this machine has {count}"
    );
    eprintln!("skipping two-GPU test: this machine has {count} CUDA device(s)");
    None
}

/// `POPCORN_LOG=time` accounts for a run's wall time on the host beside its steps' device
/// times: for each run, one line with the time preparing it (plan, workspace), allocating its
/// outputs and running it, each a number of milliseconds.
#[test]
fn log_time_reports_the_host_side_of_each_run() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let out = std::process::Command::new(&bin)
        .args([
            "-n",
            "500",
            "-d",
            "3",
            "-k",
            "4",
            "-f",
            "polynomial",
            "--algorithm",
            "stored",
            "-m",
            "2",
            "-c",
            "0",
            "--device",
            "cpu",
        ])
        .env("POPCORN_LOG", "time")
        .output()
        .expect("run the example");
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let host: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("on the host:"))
        .collect();
    assert!(
        host.iter()
            .any(|l| l.starts_with("[popcorn time] kernel_polynomial on the host:")),
        "{stderr}"
    );
    assert!(
        host.iter()
            .any(|l| l.starts_with("[popcorn time] kkmeans_iteration on the host:")),
        "{stderr}"
    );
    for line in host {
        let numbers: Vec<f64> = line
            .split_whitespace()
            .zip(line.split_whitespace().skip(1))
            .filter(|(_, unit)| *unit == "ms")
            .map(|(v, _)| v.parse().expect("a number of milliseconds"))
            .collect();
        assert_eq!(numbers.len(), 3, "{line}");
        assert!(
            numbers.iter().all(|&ms| ms >= 0.0 && ms.is_finite()),
            "{line}"
        );
    }
}

/// The short steps that run beside a small plan's cluster sums on a second lane (the cluster
/// sizes, the weights' map, the diagonal) change no result: stored-K fits in f32 and with a
/// bf16 K give the labels and objective of the same fits with every step on one lane
/// (`POPCORN_NO_SIDE_LANE=1`, read once per process: hence the built binary), bit for bit.
#[test]
fn the_side_lane_gives_the_results_of_one_lane() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    if popcorn_test_support::gpu_or_skip(popcorn::DType::F32).is_none() {
        return;
    }
    let dir = scratch("side-lane");
    for storage in ["f32", "bf16"] {
        let fit = |one_lane: bool| {
            let tag = format!("{storage}-{}", if one_lane { "one" } else { "side" });
            let (labels, json) = (
                dir.join(format!("{tag}.txt")),
                dir.join(format!("{tag}.json")),
            );
            let mut cmd = std::process::Command::new(&bin);
            cmd.args([
                "-n",
                "5003",
                "-d",
                "13",
                "-k",
                "7",
                "-f",
                "polynomial",
                "--algorithm",
                "stored",
                "--kernel-storage",
                storage,
                "-m",
                "12",
                "-c",
                "0",
                "--device",
                "cuda",
                "--labels-out",
                path_str(&labels),
                "--json",
                path_str(&json),
            ]);
            if one_lane {
                cmd.env("POPCORN_NO_SIDE_LANE", "1");
            } else {
                // Each of these keeps every step on one lane too.
                for var in ["POPCORN_NO_SIDE_LANE", "POPCORN_SYNC", "POPCORN_LOG"] {
                    cmd.env_remove(var);
                }
            }
            let out = cmd.output().expect("run the example");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{storage}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            (read_labels(&labels), report_objective(&json))
        };
        let (side_labels, side_objective) = fit(false);
        let (one_labels, one_objective) = fit(true);
        assert_eq!(side_labels, one_labels, "{storage}: labels");
        assert_eq!(
            side_objective.to_bits(),
            one_objective.to_bits(),
            "{storage}: objective {side_objective} against {one_objective}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example as two processes with one GPU each (as `mpirun -np 2` starts it: rank, size,
/// local rank and a rendezvous file in the environment, `--device cuda` taking the local
/// rank's GPU) gives the fit of one process driving both GPUs (`--device cuda:0,1`), bit for
/// bit with stored K (each rank's rows of K by the same GEMM, deterministic sums by label,
/// NCCL's sums of two ranks in rank order); only rank 0 writes results.
#[test]
fn two_processes_with_a_gpu_each_give_one_process_over_both_gpus() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    if two_gpus_or_notice().is_none() {
        return;
    }
    let dir = scratch("world-gpus");
    let args = |device: &str, labels: &Path, json: &Path| -> Vec<String> {
        [
            "-n",
            "3001",
            "-d",
            "8",
            "-k",
            "3",
            "-f",
            "polynomial",
            "--algorithm",
            "stored",
            "-m",
            "10",
            "-c",
            "0",
            "--device",
            device,
            "--labels-out",
            path_str(labels),
            "--json",
            path_str(json),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let (labels, json) = (dir.join("one.txt"), dir.join("one.json"));
    let one = std::process::Command::new(&bin)
        .args(args("cuda:0,1", &labels, &json))
        .env("NCCL_NVLS_ENABLE", "0")
        .output()
        .expect("run the example");
    assert_eq!(
        one.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let (want_labels, want_objective) = (read_labels(&labels), report_objective(&json));
    let rendezvous = dir.join("gpus.addr");
    let children: Vec<_> = (0..2)
        .map(|rank| {
            let labels = dir.join(format!("rank-{rank}.txt"));
            let json = dir.join(format!("rank-{rank}.json"));
            let child = rank_process(&bin, (rank, 2), &rendezvous, 120)
                .args(args("cuda", &labels, &json))
                .env("POPCORN_LOCAL_RANK", rank.to_string())
                .env("NCCL_NVLS_ENABLE", "0")
                .spawn()
                .expect("start a rank");
            (child, labels, json)
        })
        .collect();
    ranks_give(children, (&want_labels, want_objective), &|rank| {
        format!("rank {rank}")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `.npy` file of an `rows x cols` f64 matrix (format 1.0).
fn write_npy(path: &Path, rows: usize, cols: usize, values: &[f64]) {
    let mut header =
        format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write the .npy file");
}

/// A precomputed kernel matrix in a `.npy` file, read by each rank for its own rows (one
/// process over CPU ranks, and two processes of one rank each): the labels and objective of
/// one process that reads the whole file.
#[test]
fn a_precomputed_kernel_matrix_read_by_rows_gives_the_whole_fit() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let dir = scratch("rows");
    let points = blobs();
    let n = points.len();
    let kernel: Vec<f64> = (0..n * n)
        .map(|e| {
            let (a, b) = (points[e / n], points[e % n]);
            (-0.5 * ((a.1 - b.1).powi(2) + (a.2 - b.2).powi(2))).exp()
        })
        .collect();
    let kfile = dir.join("K.npy");
    write_npy(&kfile, n, n, &kernel);
    let fit = |tag: &str, env: &[(&str, String)], ranks: usize| -> Vec<(Vec<u32>, u64)> {
        let rendezvous = dir.join(format!("{tag}.addr"));
        let children: Vec<_> = (0..ranks)
            .map(|rank| {
                let labels = dir.join(format!("{tag}-{rank}.txt"));
                let json = dir.join(format!("{tag}-{rank}.json"));
                let mut cmd = std::process::Command::new(&bin);
                cmd.args(["-f", "precomputed", "-i", path_str(&kfile), "-k", "3"])
                    .args([
                        "--dtype", "f64", "--device", "cpu", "--init", "kmeans++", "-r", "3",
                    ])
                    .args(["--labels-out", path_str(&labels), "--json", path_str(&json)])
                    .envs(env.iter().map(|(k, v)| (*k, v.clone())));
                if ranks > 1 {
                    cmd.env("POPCORN_RANK", rank.to_string())
                        .env("POPCORN_WORLD_SIZE", ranks.to_string())
                        .env("POPCORN_RENDEZVOUS", &rendezvous);
                }
                let child = cmd
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("start the example");
                (child, labels, json)
            })
            .collect();
        let mut got = Vec::new();
        for (rank, (child, labels, json)) in children.into_iter().enumerate() {
            let out = child.wait_with_output().expect("the example's exit");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{tag} rank {rank}: {stderr}");
            if rank == 0 {
                got.push((read_labels(&labels), report_objective(&json).to_bits()));
            }
        }
        got
    };
    let whole = fit("whole", &[], 1);
    assert_same_partition(&points.iter().map(|p| p.0).collect::<Vec<_>>(), &whole[0].0);
    let cpu_ranks = fit("cpu-ranks", &[("POPCORN_CPU_RANKS", "3".to_string())], 1);
    assert_eq!(cpu_ranks, whole, "three CPU ranks in one process");
    let processes = fit("processes", &[], 2);
    assert_eq!(processes, whole, "two processes");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--all-iterations` makes every `-m` iteration past a fixed point, with the labels of the run
/// that stops there: two well-separated groups reach one in a couple of iterations.
#[test]
fn all_iterations_runs_past_a_fixed_point_with_the_same_labels() {
    let Some(bin) = built_example_or_notice() else {
        return;
    };
    let dir = scratch("all-iterations");
    let run = |extra: &[&str], name: &str| {
        let json = dir.join(name);
        let out = std::process::Command::new(&bin)
            .args([
                "-n", "200", "-d", "2", "-k", "2", "-m", "12", "--device", "cpu",
            ])
            .args(["--json", path_str(&json)])
            .args(extra)
            .output()
            .expect("run the example");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
        (
            v["iterations"].as_u64().expect("iterations"),
            v["labels"].clone(),
            v["converged"].as_bool().expect("converged"),
        )
    };
    let (early, labels, converged) = run(&[], "early.json");
    assert!(early < 12 && converged, "stopped after {early}");
    let (all, all_labels, all_converged) = run(&["--all-iterations"], "all.json");
    assert_eq!(all, 12);
    assert_eq!(all_labels, labels);
    assert!(all_converged);
}
