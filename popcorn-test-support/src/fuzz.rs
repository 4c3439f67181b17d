//! What the fuzz targets (`fuzz/`, run with `cargo fuzz`) do with an input, shared with the
//! test that replays their corpora on the stable toolchain (`tests/fuzz_corpora.rs`): each
//! function must return, for any bytes, without panicking; errors are the expected outcome of
//! most inputs.

use popcorn_dsl::{Plan, Program};
use popcorn_io::{load, Format, LoadOptions};
use std::path::PathBuf;

/// Parses and checks `data` as a DSL source (lossily decoded as UTF-8), and plans every
/// program that checks for the CPU with each dimension 3 (small enough for any input).
pub fn program_text(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Program::parse_all(&text) {
        Ok(programs) => {
            for p in &programs {
                let dims = p.dims().into_iter().map(|d| (d, 3)).collect();
                let target = popcorn_dsl::Target::cpu(1);
                let config = popcorn_dsl::PlannerConfig::default();
                if let Ok(plan) = popcorn_dsl::plan(p, &dims, &config, &target, &Default::default())
                {
                    let _ = plan.to_string();
                }
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Reads `data` as a plan's JSON.
pub fn plan_json(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(plan) = Plan::from_json(&text) {
        let _ = plan.to_string();
    }
}

/// A scratch file for this process and thread (in `/dev/shm` where it exists).
fn scratch(extension: &str) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let thread = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>();
    dir.join(format!(
        "popcorn-fuzz-{}-{thread}.{extension}",
        std::process::id()
    ))
}

/// Reads `data` as a data file of `format` (plain or gzip, as the readers detect), through the
/// file-based loaders users call.
pub fn data_file(data: &[u8], format: Format) {
    let extension = match format {
        Format::Auto | Format::Csv => "csv",
        Format::Libsvm => "libsvm",
        Format::Npy => "npy",
        Format::Idx => "idx",
        Format::Npz => "npz",
    };
    // Files that announce more than 256 MiB of points are refused before allocating (as
    // POPCORN_MEMORY_LIMIT makes programs do); the fuzzer looks for crashes, not large files.
    popcorn_io::set_memory_limit(Some(256 << 20));
    let path = scratch(extension);
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let options = LoadOptions {
        format,
        ..LoadOptions::default()
    };
    if let Ok(ds) = load(&path, &options) {
        assert_eq!(ds.x.len(), ds.n * ds.d, "a dataset's values are n x d");
    }
    let _ = std::fs::remove_file(&path);
}
