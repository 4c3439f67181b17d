//! The `POPCORN_LOG` switch: a comma-separated list of topics (`plan`, `fusion`, `cache`, `time`, or
//! `all`) whose messages go to stderr.

/// Whether `POPCORN_LOG` enables `topic`.
pub fn enabled(topic: &str) -> bool {
    std::env::var("POPCORN_LOG")
        .map(|v| v.split([',', ' ']).any(|t| t == topic || t == "all"))
        .unwrap_or(false)
}
