//! The on-disk kernel cache: compiled images keyed by a stable hash of everything that
//! determines them. Failures to read or write it are warnings, never errors.

use kernel_ir::fnv1a64;
use std::path::{Path, PathBuf};

/// Where compiled kernels are kept between runs.
#[derive(Clone, Debug)]
pub(crate) struct DiskCache {
    dir: Option<PathBuf>,
}

/// The cache key: 128 bits from two FNV-1a hashes (plain and salted) over the source, the
/// options, the architecture and the NVRTC version, each field length-prefixed.
pub(crate) fn key(
    source: &str,
    options: &[String],
    arch: &str,
    nvrtc_version: (i32, i32),
) -> String {
    let mut data = Vec::with_capacity(source.len() + 128);
    let mut field = |bytes: &[u8]| {
        data.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        data.extend_from_slice(bytes);
    };
    field(b"popcorn-kernel-cache-v1");
    field(source.as_bytes());
    for o in options {
        field(o.as_bytes());
    }
    field(arch.as_bytes());
    field(format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
    let plain = fnv1a64(&data);
    data.extend_from_slice(b"salt");
    let salted = fnv1a64(&data);
    format!("{plain:016x}{salted:016x}")
}

impl DiskCache {
    /// A cache in `dir` (`None`: no disk cache).
    pub(crate) fn new(dir: Option<PathBuf>) -> DiskCache {
        DiskCache { dir }
    }

    /// The directory, if any.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The file for kernel `name` with cache key `key`.
    fn path(&self, name: &str, key: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}-{key}.cubin", super::compile::sanitize(name))))
    }

    /// The cached image, if present. A missing file is a plain miss; other read errors warn.
    pub(crate) fn load(&self, name: &str, key: &str) -> Option<Vec<u8>> {
        let path = self.path(name, key)?;
        match std::fs::read(&path) {
            Ok(bytes) if !bytes.is_empty() => Some(bytes),
            Ok(_) => None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                warn(&format!(
                    "could not read cached kernel {}: {e}",
                    path.display()
                ));
                None
            }
        }
    }

    /// Stores an image (written to a temporary file, then renamed, so readers never see a
    /// partial file). Failures warn.
    pub(crate) fn store(&self, name: &str, key: &str, image: &[u8]) {
        let (Some(dir), Some(path)) = (self.dir.as_ref(), self.path(name, key)) else {
            return;
        };
        if let Err(e) = std::fs::create_dir_all(dir) {
            warn(&format!(
                "could not create the kernel cache directory {}: {e}",
                dir.display()
            ));
            return;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = std::fs::write(&tmp, image).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            warn(&format!(
                "could not write cached kernel {}: {e}",
                path.display()
            ));
        }
    }

    /// Removes a cached image that failed to load (so it is rebuilt). Failures warn.
    pub(crate) fn remove(&self, name: &str, key: &str) {
        if let Some(path) = self.path(name, key) {
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn(&format!(
                        "could not remove stale cached kernel {}: {e}",
                        path.display()
                    ));
                }
            }
        }
    }
}

/// Writes the `.cu` and `.ptx` of a compiled kernel into `dir`. Failures warn.
pub(crate) fn dump(dir: &Path, name: &str, source: &str, ptx: Option<&[u8]>) {
    let base = super::compile::sanitize(name);
    let result = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join(format!("{base}.cu")), source))
        .and_then(|()| match ptx {
            Some(p) => std::fs::write(dir.join(format!("{base}.ptx")), p),
            None => Ok(()),
        });
    if let Err(e) = result {
        warn(&format!(
            "could not dump kernel {name} into {}: {e}",
            dir.display()
        ));
    }
}

/// A non-fatal problem with the kernel cache or dumps.
pub(crate) fn warn(message: &str) {
    eprintln!("popcorn: warning: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("popcorn-disk-cache-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn keys_are_stable_and_depend_on_every_field() {
        let opts = vec!["--gpu-architecture=sm_90".to_string()];
        let k = key("src", &opts, "sm_90", (13, 0));
        assert_eq!(k.len(), 32);
        assert_eq!(k, key("src", &opts, "sm_90", (13, 0)));
        assert_ne!(k, key("src2", &opts, "sm_90", (13, 0)));
        assert_ne!(k, key("src", &[], "sm_90", (13, 0)));
        assert_ne!(k, key("src", &opts, "sm_80", (13, 0)));
        assert_ne!(k, key("src", &opts, "sm_90", (13, 1)));
        // Field boundaries matter: moving bytes between fields changes the key.
        assert_ne!(
            key("ab", &["c".into()], "x", (1, 0)),
            key("a", &["bc".into()], "x", (1, 0))
        );
    }

    #[test]
    fn store_then_load_round_trips() {
        let dir = temp_dir("roundtrip");
        let cache = DiskCache::new(Some(dir.clone()));
        assert_eq!(cache.load("pk_x", "k1"), None);
        cache.store("pk_x", "k1", b"image bytes");
        assert_eq!(
            cache.load("pk_x", "k1").as_deref(),
            Some(&b"image bytes"[..])
        );
        assert_eq!(cache.load("pk_x", "k2"), None);
        cache.remove("pk_x", "k1");
        assert_eq!(cache.load("pk_x", "k1"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unwritable_directories_only_warn() {
        // A directory under a regular file cannot be created: store must not fail or panic.
        let dir = temp_dir("blocked");
        std::fs::create_dir_all(&dir).ok();
        let file = dir.join("file");
        std::fs::write(&file, b"x").ok();
        let cache = DiskCache::new(Some(file.join("sub")));
        cache.store("pk_y", "k", b"data");
        assert_eq!(cache.load("pk_y", "k"), None);
        let none = DiskCache::new(None);
        none.store("pk_y", "k", b"data");
        assert_eq!(none.load("pk_y", "k"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dumps_write_source_and_ptx() {
        let dir = temp_dir("dump");
        dump(&dir, "pk_z", "source text", Some(b"ptx text"));
        assert_eq!(
            std::fs::read_to_string(dir.join("pk_z.cu")).ok().as_deref(),
            Some("source text")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("pk_z.ptx"))
                .ok()
                .as_deref(),
            Some("ptx text")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
