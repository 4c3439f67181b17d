//! Which devices, if any, the calling thread is recording CUDA graphs for: while it records
//! for a device, the device gives the thread its capture streams as lanes, and no memory may
//! be allocated (see [`crate::cuda::graphs`]). A thread may record for several devices at once
//! (the ranks of a partitioned run, one graph each), never twice for one. A leaf: it knows
//! devices only by an identity.

use crate::error::RuntimeError;
use std::cell::RefCell;

thread_local! {
    /// The identities of the devices this thread is recording for.
    static RECORDING_FOR: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks the calling thread as recording for the device `id` until dropped.
pub(crate) struct Recording(usize);

impl Recording {
    /// Starts marking the calling thread.
    pub(crate) fn begin(id: usize) -> Recording {
        RECORDING_FOR.with(|r| r.borrow_mut().push(id));
        Recording(id)
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING_FOR.with(|r| r.borrow_mut().retain(|d| *d != self.0));
    }
}

/// Whether this thread is recording for the device `id`.
pub(crate) fn recording_for(id: usize) -> bool {
    RECORDING_FOR.with(|r| r.borrow().contains(&id))
}

/// Whether this thread is recording for any device.
pub(crate) fn recording() -> bool {
    RECORDING_FOR.with(|r| !r.borrow().is_empty())
}

/// The error of an allocation asked for while recording.
pub(crate) fn no_allocation_while_recording(what: &str) -> RuntimeError {
    RuntimeError::InvalidData(format!(
        "{what} would be allocated while recording a CUDA graph (recordings allocate nothing: \
         the run goes unrecorded)"
    ))
}
