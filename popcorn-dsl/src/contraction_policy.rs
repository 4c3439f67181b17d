//! When the planner fuses a product with its consumers (the `contractions` pass), apart from
//! the passes so that the settings can name it without depending on them.

use serde::{Deserialize, Serialize};

/// When the planner fuses a product with its consumers (the `contractions` pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ContractionPolicy {
    /// Where the target's cost model finds it faster than storing the product.
    #[default]
    Auto,
    /// Wherever the consumers allow it (for comparisons).
    Always,
    /// Never: every product is a library call.
    Never,
}

impl std::str::FromStr for ContractionPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<ContractionPolicy, String> {
        match s.trim() {
            "auto" => Ok(ContractionPolicy::Auto),
            "always" => Ok(ContractionPolicy::Always),
            "never" => Ok(ContractionPolicy::Never),
            other => Err(format!(
                "`{other}` is no contraction policy; expected auto, always or never"
            )),
        }
    }
}
