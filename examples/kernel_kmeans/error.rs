//! What can go wrong in the command, and the exit status of each.

use popcorn::io::IoError;
use popcorn::kkmeans::FitError;
use popcorn::RuntimeError;
use std::path::PathBuf;

/// A failure of the command; printed as one `error: ...` line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The flags do not make sense together (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The data is unusable (exit status 1).
    #[error("{0}")]
    Data(String),
    /// Reading the input failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The fit failed.
    #[error(transparent)]
    Fit(#[from] FitError),
    /// The runtime failed outside a fit (planning).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An output file could not be written.
    #[error("cannot write `{}`: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The picture of `--plot` could not be drawn.
    #[error("cannot draw `{}`: {message}", path.display())]
    Plot {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Standard output could not be written.
    #[error("cannot write to standard output: {0}")]
    Stdout(#[from] std::io::Error),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    /// The message on one line (nested messages may hold line breaks).
    pub fn one_line(&self) -> String {
        self.to_string()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}
