//! NVRTC compilation with an in-memory cache (per context) and an on-disk cache (across runs).
//!
//! Kernels are compiled to CUBIN for the device's real architecture (`sm_XY`), so loading a
//! cached kernel needs no JIT. Disk entries are keyed by a stable hash of the source text, the
//! compile options, the architecture and NVRTC's version. In memory, kernels are found by
//! entry-point name: generated names are hashes of the kernel text (`pk_<16 hex>`) and builtin
//! names carry their element type, so a name identifies one kernel.

mod compile;
mod disk_cache;

use crate::cuda::errors::driver_error;
use crate::error::RuntimeError;
use compile::Output;
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::Ptx;
use disk_cache::DiskCache;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Counts of how kernels were obtained since the backend was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCacheStats {
    /// Found already loaded in this context.
    pub memory_hits: usize,
    /// Loaded from the on-disk cache.
    pub disk_hits: usize,
    /// Compiled by NVRTC.
    pub compiled: usize,
}

/// Where the kernel cache lives and what it logs.
#[derive(Clone, Debug)]
pub(crate) struct CacheSettings {
    /// On-disk cache directory (`None`: no disk cache).
    pub(crate) dir: Option<PathBuf>,
    /// Where to dump `.cu` and `.ptx` files of compiled kernels.
    pub(crate) dump_dir: Option<PathBuf>,
    /// Whether to log hits, misses and compiles to stderr.
    pub(crate) log: bool,
}

/// The loaded kernels of one context.
pub(crate) struct KernelCache {
    ctx: Arc<CudaContext>,
    arch: String,
    virtual_arch: String,
    options: Vec<String>,
    nvrtc_version: (i32, i32),
    disk: DiskCache,
    dump_dir: Option<PathBuf>,
    log: bool,
    functions: Mutex<HashMap<String, CudaFunction>>,
    stats: Mutex<KernelCacheStats>,
}

/// The real and virtual architectures kernels of compute capability `(major, minor)` compile
/// for. Hopper (9.0) gets its architecture-specific target, `sm_90a`, whose `wgmma`
/// instructions the pipelined contraction uses (the code runs on 9.0 devices only, which is
/// the device it is compiled for).
pub(crate) fn architectures(capability: (i32, i32)) -> (String, String) {
    let suffix = if capability == (9, 0) { "a" } else { "" };
    (
        format!("sm_{}{}{suffix}", capability.0, capability.1),
        format!("compute_{}{}{suffix}", capability.0, capability.1),
    )
}

impl KernelCache {
    /// A cache for kernels of compute capability `(major, minor)` in `ctx`.
    pub(crate) fn new(
        ctx: Arc<CudaContext>,
        capability: (i32, i32),
        settings: CacheSettings,
    ) -> Result<Self, RuntimeError> {
        let (arch, virtual_arch) = architectures(capability);
        Ok(KernelCache {
            ctx,
            options: compile::options(&arch),
            arch,
            virtual_arch,
            nvrtc_version: compile::version()?,
            disk: DiskCache::new(settings.dir),
            dump_dir: settings.dump_dir,
            log: settings.log,
            functions: Mutex::new(HashMap::new()),
            stats: Mutex::new(KernelCacheStats::default()),
        })
    }

    /// How kernels were obtained so far.
    pub(crate) fn stats(&self) -> KernelCacheStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }

    /// The kernel `name`, compiled from `source()` on first use.
    pub(crate) fn function(
        &self,
        name: &str,
        source: impl FnOnce() -> String,
    ) -> Result<CudaFunction, RuntimeError> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(RuntimeError::InvalidData(format!(
                "`{name}` is not a valid kernel entry-point name (letters, digits and `_` only)"
            )));
        }
        let mut functions = self.functions.lock().map_err(|_| poisoned())?;
        if let Some(f) = functions.get(name) {
            self.count(|s| s.memory_hits += 1);
            return Ok(f.clone());
        }
        let source = source();
        let function = self.load(name, &source)?;
        functions.insert(name.to_string(), function.clone());
        Ok(function)
    }

    /// Loads `name` from the disk cache, or compiles it (and stores it there).
    fn load(&self, name: &str, source: &str) -> Result<CudaFunction, RuntimeError> {
        let key = disk_cache::key(source, &self.options, &self.arch, self.nvrtc_version);
        if let Some(image) = self.disk.load(name, &key) {
            match self.load_image(name, image) {
                Ok(f) => {
                    self.count(|s| s.disk_hits += 1);
                    self.log_line(&format!("hit (disk) {name}"));
                    return Ok(f);
                }
                Err(e) => {
                    disk_cache::warn(&format!(
                        "cached kernel {name} did not load ({e}); recompiling"
                    ));
                    self.disk.remove(name, &key);
                }
            }
        }
        self.log_line(&format!("miss {name}"));
        let start = Instant::now();
        let image = compile::compile(name, source, &self.options, Output::Cubin)?;
        self.count(|s| s.compiled += 1);
        self.log_line(&format!(
            "compiled {name} for {} in {:.1} ms ({} bytes)",
            self.arch,
            start.elapsed().as_secs_f64() * 1e3,
            image.len()
        ));
        self.disk.store(name, &key, &image);
        if let Some(dir) = &self.dump_dir {
            let ptx = compile::compile(
                name,
                source,
                &compile::options(&self.virtual_arch),
                Output::Ptx,
            );
            if let Err(e) = &ptx {
                disk_cache::warn(&format!(
                    "could not produce PTX of {name} for the dump: {e}"
                ));
            }
            disk_cache::dump(dir, name, source, ptx.as_deref().ok());
        }
        self.load_image(name, image)
    }

    /// Loads a compiled image into the context and finds the entry point.
    fn load_image(&self, name: &str, image: Vec<u8>) -> Result<CudaFunction, RuntimeError> {
        let module = self
            .ctx
            .load_module(Ptx::from_binary(image))
            .map_err(|e| driver_error("cuModuleLoadData", e))?;
        module
            .load_function(name)
            .map_err(|e| RuntimeError::Unsupported {
                call: "cuModuleGetFunction".to_string(),
                message: format!(
                    "kernel `{name}` is not in its compiled module ({})",
                    crate::cuda::errors::driver_message(e)
                ),
            })
    }

    fn count(&self, f: impl FnOnce(&mut KernelCacheStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    fn log_line(&self, message: &str) {
        if self.log {
            let dir = self
                .disk
                .dir()
                .map_or_else(|| "no disk cache".to_string(), |d| d.display().to_string());
            eprintln!("popcorn[cache]: {message} [{dir}]");
        }
    }
}

/// A lock poisoned by a panic in another thread.
pub(crate) fn poisoned() -> RuntimeError {
    RuntimeError::Device(
        "an internal lock of the CUDA backend was poisoned by an earlier panic".to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::architectures;

    #[test]
    fn hopper_compiles_for_its_architecture_specific_target() {
        let names = |a: &str, v: &str| (a.to_string(), v.to_string());
        assert_eq!(architectures((9, 0)), names("sm_90a", "compute_90a"));
        assert_eq!(architectures((8, 6)), names("sm_86", "compute_86"));
        assert_eq!(architectures((10, 0)), names("sm_100", "compute_100"));
    }
}
