//! The `POPCORN_LOG` switch: a comma-separated list of topics (`plan`, `fusion`, `cache`, `time`, or
//! `all`) whose messages go to stderr (read once, with the other [settings](crate::settings)).

/// Whether `POPCORN_LOG` enables `topic`.
pub fn enabled(topic: &str) -> bool {
    let t = crate::settings::settings().log;
    match topic {
        "plan" => t.plan,
        "fusion" => t.fusion,
        "cache" => t.cache,
        "time" => t.time,
        _ => false,
    }
}
