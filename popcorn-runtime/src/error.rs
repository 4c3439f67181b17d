//! The runtime's errors: one enum, each failure with its cause as a typed source where a
//! library reports one (the driver's, cuBLAS's, cuSPARSE's and NVRTC's status codes, the CPU
//! primitives' errors), and a message that names the problem and what to do.

use crate::cpu::CpuError;
use crate::cuda::sparse::result::CusparseError;
use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use cudarc::nvrtc::result::NvrtcError;
use popcorn_dsl::{LocatedError, PlanError};

/// Everything that can go wrong when running a program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The program could not be parsed or checked.
    #[error("{0}")]
    Program(#[from] LocatedError),
    /// Planning failed, or a plan is malformed.
    #[error("planning failed: {0}")]
    Plan(#[from] PlanError),
    /// A tensor or scalar passed to a program does not match its signature.
    #[error("{0}")]
    Binding(String),
    /// The same dimension received two sizes.
    #[error("dimension `{dim}` is {first} from {first_from} but {second} from {second_from}")]
    DimensionMismatch {
        /// The dimension.
        dim: String,
        /// The first size seen.
        first: usize,
        /// Where it came from.
        first_from: String,
        /// The conflicting size.
        second: usize,
        /// Where it came from.
        second_from: String,
    },
    /// Data given to the runtime is malformed (wrong length, NaN, bad CSR structure), or a
    /// step was given arguments that do not fit it.
    #[error("invalid data: {0}")]
    InvalidData(String),
    /// A step failed on the backend.
    #[error("step {step} ({op}: {what}) failed: {source}")]
    Step {
        /// Index of the step in the plan.
        step: usize,
        /// Its operation.
        op: String,
        /// The values it computes.
        what: String,
        /// The cause.
        #[source]
        source: Box<RuntimeError>,
    },
    /// A CPU primitive failed.
    #[error(transparent)]
    Cpu(#[from] CpuError),
    /// A backend's own invariant does not hold (a lock poisoned by an earlier panic, a buffer
    /// of the wrong element type): a popcorn bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// The device is missing or unusable.
    #[error("{0}")]
    Device(String),
    /// Not enough memory (of the GPU, or of the host for the CPU backend and host buffers).
    #[error("not enough {memory}: {needed_mib} MiB are needed ({what}) but only {free_mib} MiB of {total_mib} MiB are available; {hint}")]
    OutOfMemory {
        /// Which memory: "GPU memory" or "host memory".
        memory: &'static str,
        /// MiB needed.
        needed_mib: usize,
        /// What needs it.
        what: String,
        /// MiB free.
        free_mib: usize,
        /// MiB in total.
        total_mib: usize,
        /// What would help.
        hint: String,
    },
    /// A CUDA driver call failed.
    #[error("{call} failed: {}", crate::cuda::driver_message(*.source))]
    Driver {
        /// The call, with what it was for.
        call: String,
        /// The driver's status.
        #[source]
        source: DriverError,
    },
    /// A cuBLAS call failed.
    #[error("{call} failed: {source}: {text}")]
    Blas {
        /// The call.
        call: String,
        /// cuBLAS's description of the status.
        text: String,
        /// cuBLAS's status.
        #[source]
        source: CublasError,
    },
    /// A cuSPARSE call failed.
    #[error(transparent)]
    Sparse(#[from] CusparseError),
    /// NVRTC failed other than by rejecting a kernel's source.
    #[error("{call} failed: {source}")]
    Nvrtc {
        /// The call.
        call: String,
        /// NVRTC's status.
        #[source]
        source: NvrtcError,
    },
    /// A library cannot do what a step asks (no operand layout cuSPARSE accepts, a kernel
    /// missing from its compiled module).
    #[error("{call}: {message}")]
    Unsupported {
        /// The call.
        call: String,
        /// What it cannot do.
        message: String,
    },
    /// A generated kernel failed to compile.
    #[error("NVRTC could not compile kernel {name}:\n{log}\n--- source ---\n{numbered_source}")]
    Compile {
        /// The kernel.
        name: String,
        /// NVRTC's log.
        log: String,
        /// The source with line numbers.
        numbered_source: String,
    },
}

impl RuntimeError {
    /// Whether this is a CUDA graph capture broken off by a call of another thread (one that
    /// synchronizes the device, as opening or dropping a CUDA context does): the same
    /// recording may succeed on a later run. The error may come wrapped as a failed step's cause (a launch queued after the break).
    pub(crate) fn is_interrupted_capture(&self) -> bool {
        match self {
            RuntimeError::Driver { source, .. } => {
                source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
            }
            RuntimeError::Step { source, .. } => source.is_interrupted_capture(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;

    fn driver(code: CUresult) -> RuntimeError {
        RuntimeError::Driver {
            call: "cuLaunchKernel".into(),
            source: DriverError(code),
        }
    }

    #[test]
    fn an_interrupted_capture_is_recognised_bare_or_as_a_steps_cause() {
        let broken = || driver(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert!(broken().is_interrupted_capture());
        let step = |source| RuntimeError::Step {
            step: 2,
            op: "cluster sums".into(),
            what: "E".into(),
            source: Box::new(source),
        };
        assert!(step(broken()).is_interrupted_capture());
        assert!(step(step(broken())).is_interrupted_capture());
        assert!(!driver(CUresult::CUDA_ERROR_OUT_OF_MEMORY).is_interrupted_capture());
        assert!(!step(driver(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS)).is_interrupted_capture());
        assert!(!RuntimeError::InvalidData("x".into()).is_interrupted_capture());
    }
}
