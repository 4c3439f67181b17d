//! Host memory: how much popcorn may still take, checks before large allocations, and vectors
//! allocated without aborting.
//!
//! Popcorn never lets an allocation whose size a user controls abort the process. Before
//! allocating, it compares the bytes with what is *available*: the smaller of the system's
//! available memory (`MemAvailable` of `/proc/meminfo` on Linux, read for buffers of 1 MiB and
//! more) and, under `POPCORN_MEMORY_LIMIT`, the limit less what the owner (a CPU context's
//! backend) already holds; the allocation itself then goes through `try_reserve`, so a
//! refusal by the allocator is an error too.
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
    match (popcorn_io::system_memory(), limit_budget(limit, held)) {
        (Some((total, avail)), Some((free, l))) => Some((avail.min(free), total.min(l))),
        (Some((total, avail)), None) => Some((avail, total)),
        (None, by_limit) => by_limit,
    }
}

/// What is left under `limit` to an owner holding `held` bytes, and the limit.
fn limit_budget(limit: Option<u64>, held: u64) -> Option<(u64, u64)> {
    limit.map(|l| (l.saturating_sub(held), l))
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
    // The system's available memory is read (a file read) for buffers that could matter to it;
    // a limit is checked for every buffer, as the buffers under it add up.
    let b = if bytes < SYSTEM_CHECK_BYTES {
        limit_budget(limit, held)
    } else {
        budget(limit, held)
    };
    match b {
        Some(b) if bytes > b.0 => Err(out_of_memory(bytes, what, b)),
        _ => Ok(()),
    }
}

/// Buffers from this size up are checked against the system's available memory too; smaller
/// ones (an iteration's vectors) only against a limit, and by the allocator.
const SYSTEM_CHECK_BYTES: u64 = 1 << 20;

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
    advise_huge_pages(v.as_ptr(), v.capacity());
    v.resize(len, value);
    Ok(v)
}

/// Buffers from this size up ask for transparent huge pages.
const HUGE_PAGE_THRESHOLD: usize = 4 << 20;

/// Asks the kernel to back the reserved (not yet touched) storage of a large vector (`capacity`
/// elements from `data`) with
/// transparent huge pages where the system leaves that to `madvise`: a buffer of a few hundred
/// MB (a kernel matrix) then takes one page fault per 2 MB instead of per 4 kB when it is first
/// written, and the iterations that stream it miss the TLB far less often. The advice is only
/// advice: where the kernel refuses or has no huge pages the buffer is unchanged.
#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(data: *const T, capacity: usize) {
    const PAGE: usize = 4096;
    let bytes = capacity.saturating_mul(std::mem::size_of::<T>());
    if bytes < HUGE_PAGE_THRESHOLD {
        return;
    }
    let start = data as usize;
    let first = start.div_ceil(PAGE) * PAGE;
    let end = (start + bytes) / PAGE * PAGE;
    if end <= first {
        return;
    }
    // SAFETY: [first, end) lies inside the vector's own allocation (page-aligned inwards), and
    // MADV_HUGEPAGE changes only how the kernel backs those pages, never their contents or
    // their mapping; the return value is ignored on purpose (advice a kernel may refuse).
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_data: *const T, _capacity: usize) {}

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
        // Buffers below the size that reads the system's memory still count against a limit,
        // with what the owner holds.
        assert!(check(512 << 10, "a small buffer", Some(256 << 10), 0).is_err());
        let held = (1 << 20) - (50 << 10);
        assert!(check(100 << 10, "a small buffer", Some(1 << 20), held).is_err());
        assert!(check(40 << 10, "a small buffer", Some(1 << 20), held).is_ok());
    }

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        // More than any machine has, with no limit: refused by the budget or the allocator.
        assert!(try_vec(usize::MAX / 8, 0f64, "everything", (None, 0)).is_err());
    }

    /// The `VmFlags` line of the mapping of this process that holds `addr`.
    #[cfg(target_os = "linux")]
    fn vm_flags_at(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.to_string());
                }
            }
        }
        None
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn large_buffers_are_advised_onto_huge_pages_and_small_ones_are_not() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            return; // a kernel without transparent huge pages takes no such advice
        }
        let large = try_vec(16 << 20, 0.5f32, "a large test vector", (None, 0)).expect("64 MiB");
        assert!(large.iter().all(|&x| x == 0.5));
        let inner = (large.as_ptr() as usize).div_ceil(4096) * 4096 + 4096;
        let flags = vm_flags_at(inner).expect("the vector's mapping is listed");
        assert!(
            flags.split_whitespace().any(|f| f == "hg"),
            "no huge-page advice on the large vector: {flags}"
        );
        // A small buffer is not advised. Checked on a mapping of its own: the allocator may
        // place a small vector in memory that a large one, since freed, left advised (the
        // suite's other tests allocate large buffers beside this one).
        let bytes = 64 << 10;
        // SAFETY: a fresh anonymous private mapping of `bytes` bytes, unmapped below; nothing
        // else refers to it.
        let region = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(region, libc::MAP_FAILED);
        advise_huge_pages(region as *const f32, bytes / 4);
        let flags = vm_flags_at(region as usize);
        // SAFETY: the mapping made above, of `bytes` bytes, no longer used.
        unsafe { libc::munmap(region, bytes) };
        let flags = flags.expect("the small mapping is listed");
        assert!(!flags.split_whitespace().any(|f| f == "hg"), "{flags}");
    }
}
