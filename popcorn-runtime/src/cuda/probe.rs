//! Probing for the CUDA driver and libraries before touching them: cudarc panics when a
//! dynamically loaded library is missing, so every entry point checks here first.

use cudarc::driver::result as drv;

/// One library the backend loads at run time.
#[derive(Clone, Copy)]
struct Library {
    /// What users know it as.
    name: &'static str,
    /// Whether cudarc can load it.
    present: fn() -> bool,
    /// What to do when it is missing.
    hint: &'static str,
}

/// Whether the CUDA driver library can be loaded.
fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to open the shared library by its usual names and
    // closes it again; loading the NVIDIA driver library runs no code that could break Rust's
    // invariants.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether cuBLAS can be loaded.
fn cublas_present() -> bool {
    // SAFETY: as for the driver library: the library is opened and closed, nothing is called.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// Whether cuSPARSE can be loaded.
fn cusparse_present() -> bool {
    // SAFETY: as for the driver library: the library is opened and closed, nothing is called.
    unsafe { cudarc::cusparse::sys::is_culib_present() }
}

/// Whether NVRTC can be loaded.
fn nvrtc_present() -> bool {
    // SAFETY: as for the driver library: the library is opened and closed, nothing is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

const LIBRARIES: [Library; 4] = [
    Library {
        name: "the CUDA driver (libcuda)",
        present: driver_present,
        hint: "install the NVIDIA driver",
    },
    Library {
        name: "cuBLAS (libcublas)",
        present: cublas_present,
        hint: "install the CUDA toolkit's cuBLAS and add its lib directory to LD_LIBRARY_PATH",
    },
    Library {
        name: "cuSPARSE (libcusparse)",
        present: cusparse_present,
        hint: "install the CUDA toolkit's cuSPARSE and add its lib directory to LD_LIBRARY_PATH",
    },
    Library {
        name: "NVRTC (libnvrtc)",
        present: nvrtc_present,
        hint: "install the CUDA toolkit's NVRTC and add its lib directory to LD_LIBRARY_PATH",
    },
];

/// Directories where CUDA toolkits put their libraries, searched when a library is not on the
/// loader's path: `$CUDA_HOME`, `$CUDA_PATH`, then the usual install locations.
fn toolkit_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            let root = std::path::PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("targets/x86_64-linux/lib"));
        }
    }
    for root in ["/usr/local/cuda", "/opt/cuda", "/usr/lib/cuda"] {
        dirs.push(std::path::PathBuf::from(root).join("lib64"));
        dirs.push(std::path::PathBuf::from(root).join("targets/x86_64-linux/lib"));
    }
    dirs
}

/// Loads the toolkit libraries that the loader cannot find by name from a toolkit directory,
/// by full path and globally, so that cudarc's later load by soname (`libcublas.so.13`) finds
/// them already loaded. Users then need no `LD_LIBRARY_PATH` for a standard CUDA install.
fn preload_from_toolkit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Dependencies first: cuBLAS needs cuBLASLt, cuSPARSE needs nvJitLink.
        for stem in [
            "libcublasLt.so.",
            "libcublas.so.",
            "libnvJitLink.so.",
            "libcusparse.so.",
            "libnvrtc.so.",
        ] {
            for dir in toolkit_dirs() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                // The soname link (`libcublas.so.13`): the shortest matching name.
                let best = entries
                    .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                    .filter(|n| {
                        n.starts_with(stem)
                            && n[stem.len()..]
                                .chars()
                                .all(|c| c.is_ascii_digit() || c == '.')
                    })
                    .min_by_key(|n| n.len());
                if let Some(name) = best {
                    let path = dir.join(name);
                    // SAFETY: loading a CUDA toolkit library runs its initialisers, which only set
                    // up the library itself; the handle is leaked on purpose so it stays loaded
                    // for the process, as cudarc expects of the libraries it opens.
                    let lib = unsafe {
                        libloading::os::unix::Library::open(
                            Some(&path),
                            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                        )
                    };
                    if let Ok(lib) = lib {
                        std::mem::forget(lib);
                        break;
                    }
                }
            }
        }
    });
}

/// Checks that every library the backend needs can be loaded.
pub(crate) fn check_libraries() -> Result<(), String> {
    check(&LIBRARIES, preload_from_toolkit)
}

/// Checks `libraries`, trying `preload` (the toolkit's folders) once if one is missing; the
/// first still missing is named with what to do.
fn check(libraries: &[Library], preload: impl FnOnce()) -> Result<(), String> {
    if !libraries.iter().all(|lib| (lib.present)()) {
        preload();
    }
    for lib in libraries {
        if !(lib.present)() {
            return Err(format!("{} could not be loaded; {}", lib.name, lib.hint));
        }
    }
    Ok(())
}

/// Number of CUDA devices popcorn can use, or why none can be used (a library is missing,
/// the driver fails to initialise, or there is no device). Never panics.
pub fn cuda_available() -> Result<usize, String> {
    check_libraries()?;
    let count = std::panic::catch_unwind(|| -> Result<i32, String> {
        drv::init().map_err(|e| {
            format!(
                "the CUDA driver failed to initialise ({})",
                crate::cuda::errors::driver_message(e)
            )
        })?;
        drv::device::get_count().map_err(|e| {
            format!(
                "the CUDA driver could not count devices ({})",
                crate::cuda::errors::driver_message(e)
            )
        })
    })
    .map_err(|_| {
        "the CUDA driver library lacks a function popcorn needs (is it older than CUDA 12?)"
            .to_string()
    })??;
    match usize::try_from(count) {
        Ok(0) | Err(_) => Err("no CUDA device was found".to_string()),
        Ok(n) => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::{check, Library, LIBRARIES};

    /// cuSPARSE missing (the others present): the toolkit's folders are tried once, then the
    /// error names it and says what to install.
    #[test]
    fn a_missing_library_is_named_with_its_fix() {
        let mut libraries: Vec<Library> = LIBRARIES.to_vec();
        for lib in &mut libraries {
            lib.present = if lib.name.starts_with("cuSPARSE") {
                || false
            } else {
                || true
            };
        }
        let mut preloaded = 0;
        let err = check(&libraries, || preloaded += 1).unwrap_err();
        assert_eq!(preloaded, 1);
        assert!(
            err.starts_with("cuSPARSE (libcusparse) could not be loaded; install"),
            "{err}"
        );
        assert!(err.contains("LD_LIBRARY_PATH"), "{err}");
        for lib in &mut libraries {
            lib.present = || true;
        }
        let mut preloaded = 0;
        assert_eq!(check(&libraries, || preloaded += 1), Ok(()));
        assert_eq!(preloaded, 0, "nothing to preload when every library loads");
    }
}
