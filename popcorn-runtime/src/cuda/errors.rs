//! Turning CUDA driver, cuBLAS and NVRTC status codes into [`RuntimeError`]s that name the call.

use crate::error::RuntimeError;
use cudarc::driver::{result::DriverError, sys::CUresult};

/// The driver's name and description of an error code (`CUDA_ERROR_OUT_OF_MEMORY: out of memory`).
pub fn driver_message(e: DriverError) -> String {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
    match (name, text) {
        (Ok(n), Ok(t)) => format!("{n}: {t}"),
        (Ok(n), Err(_)) => n,
        _ => format!("{:?}", e.0),
    }
}

/// A failed driver call.
pub(crate) fn driver_error(call: &str, e: DriverError) -> RuntimeError {
    RuntimeError::Driver {
        call: call.to_string(),
        source: e,
    }
}

/// Whether a driver error is an out-of-memory condition.
pub(crate) fn is_out_of_memory(e: DriverError) -> bool {
    e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

/// An argument that does not fit what a step needs.
pub(crate) fn invalid(what: impl Into<String>) -> RuntimeError {
    RuntimeError::InvalidData(what.into())
}

/// A size converted to the `i64` that CUDA libraries take.
pub(crate) fn to_i64(value: usize, what: &str) -> Result<i64, RuntimeError> {
    i64::try_from(value).map_err(|_| {
        invalid(format!(
            "{what} ({value}) does not fit in 64-bit signed sizes"
        ))
    })
}
