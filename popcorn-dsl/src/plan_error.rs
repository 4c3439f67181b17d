//! Why planning failed: the error of every pass and of plan checks (its own module, so that
//! the plan's parts and the passes both take it without importing each other).

/// Why planning failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A dimension of the program has no size.
    #[error("dimension `{0}` has no size; give it (for example --dim {0}=100) or bind an input that has it")]
    UnboundDim(String),
    /// A dimension was given the size 0.
    #[error("dimension `{0}` is 0; every dimension must be at least 1")]
    ZeroDim(String),
    /// A rewritten graph no longer type-checks (a planner bug).
    #[error("internal planner error in pass `{pass}`: {message}")]
    Internal {
        /// The pass.
        pass: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The program uses something the planner cannot lower.
    #[error("{0}")]
    Unsupported(String),
    /// A plan (made elsewhere, or loaded) is malformed.
    #[error("invalid plan: {0}")]
    Invalid(String),
}
