//! Replays the fuzz targets' seeds and corpora (`fuzz/seeds/<target>/`, `fuzz/corpus/<target>/`)
//! through the same functions the libFuzzer targets call (`popcorn_test_support::fuzz`), on the
//! stable toolchain: every input must be handled without a panic. `fuzz/README.md` says how the
//! corpora were grown.

use popcorn::io::Format;
use popcorn_test_support::fuzz;
use std::path::Path;

/// Every file of the seeds and corpus of `target`.
fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for kind in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out.sort();
    out
}

fn replay(target: &str, run: impl Fn(&[u8])) {
    let all = inputs(target);
    assert!(!all.is_empty(), "no seeds for the fuzz target {target}");
    for (name, bytes) in &all {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(bytes)));
        assert!(outcome.is_ok(), "{target}: {name} panics");
    }
}

#[test]
fn program_sources_never_panic() {
    replay("program_text", fuzz::program_text);
}

#[test]
fn plan_json_never_panics() {
    replay("plan_json", fuzz::plan_json);
}

#[test]
fn data_files_never_panic() {
    replay("csv", |b| fuzz::data_file(b, Format::Csv));
    replay("libsvm", |b| fuzz::data_file(b, Format::Libsvm));
    replay("npy", |b| fuzz::data_file(b, Format::Npy));
    replay("idx", |b| fuzz::data_file(b, Format::Idx));
}

#[test]
fn the_seed_plan_reads_back() {
    let all = inputs("plan_json");
    let (_, lloyd) = all
        .iter()
        .find(|(name, _)| name.ends_with("seeds/plan_json/lloyd.json"))
        .expect("the Lloyd plan seed");
    let plan = popcorn::Plan::from_json(&String::from_utf8_lossy(lloyd)).expect("a valid plan");
    assert_eq!(plan.program, "lloyd_step");
}
