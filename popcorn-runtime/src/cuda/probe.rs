//! Probing for the CUDA driver and libraries before touching them: cudarc panics when a
//! dynamically loaded library is missing, so every entry point checks here first.

use cudarc::driver::result as drv;

/// One library the backend loads at run time.
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
        hint: "install the NVIDIA driver, or run on the CPU with POPCORN_DEVICE=cpu",
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

/// Checks that every library the backend needs can be loaded.
pub(crate) fn check_libraries() -> Result<(), String> {
    for lib in &LIBRARIES {
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
