//! `POPCORN_DUMP_DIR`: writes every new plan as text, DOT and JSON, and every fused kernel's
//! CUDA C, into that directory. Failures to write are reported on stderr, never fatal.

use popcorn_dsl::Plan;
use std::path::PathBuf;

/// The dump directory, if `POPCORN_DUMP_DIR` is set.
pub fn dump_dir() -> Option<PathBuf> {
    popcorn_dsl::settings::settings().dump_dir.clone()
}

/// Writes `plan` (text, DOT, JSON) and its kernels' sources under the dump directory.
pub fn dump_plan(plan: &Plan) {
    let Some(dir) = dump_dir() else { return };
    let dims: Vec<String> = plan.dims.iter().map(|(k, v)| format!("{k}{v}")).collect();
    let stem = format!("{}-{}-{}", plan.program, dims.join("-"), plan.dtype);
    let mut files: Vec<(PathBuf, String)> = vec![
        (dir.join(format!("{stem}.plan.txt")), plan.to_string()),
        (dir.join(format!("{stem}.dot")), plan.to_dot()),
        (dir.join(format!("{stem}.plan.json")), plan.to_json()),
    ];
    for kernel in plan.kernels() {
        let source = kernels_gen::emit(&kernel.spec).source;
        files.push((dir.join(format!("{}.cu", kernel.name)), source));
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!(
            "popcorn: cannot create POPCORN_DUMP_DIR {}: {e}",
            dir.display()
        );
        return;
    }
    for (path, text) in files {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("popcorn: cannot write {}: {e}", path.display());
        }
    }
}
