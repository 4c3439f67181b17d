//! Host memory: how much popcorn may still take, checks before large allocations, and vectors
//! allocated without aborting.
//!
//! Popcorn never lets an allocation whose size a user controls abort the process. Before
//! allocating, it compares the bytes with what is *available*: the smaller of the system's
//! available memory (`MemAvailable` of `/proc/meminfo` on Linux) and, under
//! `POPCORN_MEMORY_LIMIT`, the limit less what the owner (a CPU context's backend) already
//! holds; the allocation itself
//! then goes through `try_reserve`, so a refusal by the allocator is an error too.
//! [`RuntimeError::OutOfMemory`] names the bytes needed, the bytes available and what helps.

use crate::error::RuntimeError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes held by one CPU backend's live buffers (shared with its buffers, which release their
/// bytes when dropped).
#[derive(Clone, Debug, Default)]
pub struct Held(Arc<AtomicU64>);

impl Held {
    /// Records `bytes` more.
    pub(crate) fn hold(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records `bytes` released.
    pub(crate) fn release(&self, bytes: u64) {
        self.0.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// `(available, total)` bytes for more host allocations of an owner that holds `held` bytes
/// under `limit` (`POPCORN_MEMORY_LIMIT`), or `None` where neither the system nor a limit says.
pub fn budget(limit: Option<u64>, held: u64) -> Option<(u64, u64)> {
    let by_limit = limit.map(|l| (l.saturating_sub(held), l));
    match (popcorn_io::system_memory(), by_limit) {
        (Some((total, avail)), Some((free, l))) => Some((avail.min(free), total.min(l))),
        (Some((total, avail)), None) => Some((avail, total)),
        (None, by_limit) => by_limit,
    }
}

/// What helps when host memory runs short.
pub const HINT: &str = "use fewer points, f32 instead of f64, or a GPU (POPCORN_DEVICE=cuda); \
                        POPCORN_MEMORY_LIMIT caps what popcorn may take";

/// The error for `bytes` of `what` that do not fit in `available` of `total` bytes.
pub fn out_of_memory(bytes: u64, what: &str, (available, total): (u64, u64)) -> RuntimeError {
    let mib = |b: u64| usize::try_from(b >> 20).unwrap_or(usize::MAX);
    RuntimeError::OutOfMemory {
        memory: "host memory",
        needed_mib: mib(bytes.saturating_add((1 << 20) - 1)),
        what: what.to_string(),
        free_mib: mib(available),
        total_mib: mib(total),
        hint: HINT.to_string(),
    }
}

/// Checks that `bytes` more of `what` fit in the host budget of an owner holding `held` bytes
/// under `limit`.
pub fn check(bytes: u64, what: &str, limit: Option<u64>, held: u64) -> Result<(), RuntimeError> {
    match budget(limit, held) {
        Some(b) if bytes > b.0 => Err(out_of_memory(bytes, what, b)),
        _ => Ok(()),
    }
}

/// A vector of `len` copies of `value`, checked against the budget of an owner holding `held`
/// bytes under `limit` and allocated with `try_reserve_exact`: an error, never an abort, when
/// it does not fit.
pub fn try_vec<T: Clone>(
    len: usize,
    value: T,
    what: &str,
    (limit, held): (Option<u64>, u64),
) -> Result<Vec<T>, RuntimeError> {
    let bytes = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    check(bytes, what, limit, held)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        let b = budget(limit, held).unwrap_or((0, 0));
        out_of_memory(bytes, what, b)
    })?;
    v.resize(len, value);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_caps_the_budget_and_refuses_with_the_numbers() {
        let limit = Some(64 << 20);
        let (available, total) = budget(limit, 0).expect("a limit always gives a budget");
        assert!(total <= 64 << 20 && available <= 64 << 20);
        assert_eq!(budget(limit, 60 << 20).map(|b| b.0 <= 4 << 20), Some(true));
        let err = check(1 << 30, "a test buffer", limit, 0).expect_err("1 GiB over 64 MiB");
        let text = err.to_string();
        assert!(text.contains("host memory"), "{text}");
        assert!(
            text.contains("1024 MiB are needed (a test buffer)"),
            "{text}"
        );
        assert!(text.contains("POPCORN_MEMORY_LIMIT"), "{text}");
        assert!(try_vec(1 << 28, 0f32, "a test vector", (limit, 0)).is_err());
        assert_eq!(
            try_vec(4, 1u32, "a small vector", (limit, 0)).expect("fits"),
            vec![1; 4]
        );
    }

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        // More than any machine has, with no limit: refused by the budget or the allocator.
        assert!(try_vec(usize::MAX / 8, 0f64, "everything", (None, 0)).is_err());
    }
}
