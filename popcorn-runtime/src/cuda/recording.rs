//! Which device, if any, the calling thread is recording a CUDA graph for: while it records,
//! the device gives the thread its capture streams as lanes, and no memory may be allocated
//! (see [`crate::cuda::graphs`]). A leaf: it knows devices only by an identity.

use crate::error::RuntimeError;
use std::cell::Cell;

thread_local! {
    /// The identity of the device this thread is recording for, 0 when none.
    static RECORDING_FOR: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as recording for the device `id` (not 0) until dropped.
pub(crate) struct Recording(());

impl Recording {
    /// Starts marking the calling thread.
    pub(crate) fn begin(id: usize) -> Recording {
        RECORDING_FOR.with(|r| r.set(id));
        Recording(())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        RECORDING_FOR.with(|r| r.set(0));
    }
}

/// Whether this thread is recording for the device `id`.
pub(crate) fn recording_for(id: usize) -> bool {
    RECORDING_FOR.with(|r| r.get() == id)
}

/// Whether this thread is recording for any device.
pub(crate) fn recording() -> bool {
    RECORDING_FOR.with(|r| r.get() != 0)
}

/// The error of an allocation asked for while recording.
pub(crate) fn no_allocation_while_recording(what: &str) -> RuntimeError {
    RuntimeError::InvalidData(format!(
        "{what} would be allocated while recording a CUDA graph (recordings allocate nothing: \
         the run goes unrecorded)"
    ))
}
