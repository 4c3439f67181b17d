//! The runtime's errors.

use popcorn_dsl::{LocatedError, PlanError};

/// Everything that can go wrong when running a program.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The program could not be parsed or checked.
    #[error("{0}")]
    Program(#[from] LocatedError),
    /// Planning failed.
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
    /// Data given to the runtime is malformed (wrong length, NaN, bad CSR structure).
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
    #[error("{0}")]
    Cpu(String),
    /// The device is missing or unusable.
    #[error("{0}")]
    Device(String),
    /// Not enough device memory for the plan.
    #[error("not enough GPU memory: the plan needs {needed_mib} MiB ({what}) but only {free_mib} MiB of {total_mib} MiB are free; {hint}")]
    OutOfMemory {
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
    /// A CUDA library call failed.
    #[error("{call} failed: {message}")]
    Cuda {
        /// The call (for example `cusparseSpMM`).
        call: String,
        /// The library's message.
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
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
}
