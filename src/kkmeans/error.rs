//! Why a fit failed.

use crate::RuntimeError;

/// Why a fit failed.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// The points are unusable (empty, wrong length, NaN or infinite values).
    #[error("invalid input: {0}")]
    Input(String),
    /// `k` does not fit the data.
    #[error("invalid k: {0}")]
    K(String),
    /// The given initial labels are unusable.
    #[error("invalid initial labels: {0}")]
    InitLabels(String),
    /// A parameter is out of range.
    #[error("invalid parameter: {0}")]
    Parameter(String),
    /// The runtime failed (device, memory, a step).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The control callback of [`super::KernelKMeans::fit_with_control`] stopped the fit; the text
    /// says where.
    #[error("the fit was interrupted {0}")]
    Interrupted(String),
}

impl From<std::convert::Infallible> for FitError {
    fn from(e: std::convert::Infallible) -> FitError {
        match e {}
    }
}
