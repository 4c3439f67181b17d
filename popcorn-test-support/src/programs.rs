//! The DSL programs of `examples/programs/`.

use popcorn_dsl::Program;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The programs of every `examples/programs/*.pop` file, by name.
pub fn example_programs() -> BTreeMap<String, Program> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/programs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pop"))
        .collect();
    files.sort();
    let mut out = BTreeMap::new();
    for f in files {
        let src = std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        let programs = Program::parse_all(&src)
            .unwrap_or_else(|e| panic!("{} does not parse: {e:?}", f.display()));
        for p in programs {
            out.insert(p.name.clone(), p);
        }
    }
    out
}
