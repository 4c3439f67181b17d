//! Runs recorded as CUDA graphs ([`crate::backend::Backend::record`] and `replay` on a GPU).
//!
//! A recording captures, on a device's own pair of capture streams, the work that the step
//! units queue while the calling thread is marked as recording ([`crate::cuda::recording`]): for that
//! thread the device's lanes are the capture streams, so work other threads queue on the
//! device's ordinary lanes meanwhile is neither captured nor disturbed. A recorded graph is
//! launched on the main lane, ordered with everything else queued there.
//!
//! A graph holds the addresses it was recorded with: the plan's buffers and tensors (the
//! caller keys recordings by them) and the device's scratch memory, which grows by
//! reallocation. Every reallocation of scratch memory advances one epoch
//! ([`crate::cuda::memory::scratch_epoch`]); a graph replays only in the epoch it was
//! recorded in, checked and launched under the epoch's lock, so no reallocation (whose free
//! is queued under that lock too) can come between. No memory may be allocated while
//! recording: the allocators refuse (the recording then fails, and the caller runs the work
//! as usual).

use crate::cuda::device::Device;
use crate::cuda::errors::driver_error;
use crate::cuda::recording;
use crate::error::RuntimeError;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use std::sync::Arc;

/// A run recorded as a CUDA graph, with the scratch epoch it was recorded in.
pub struct CudaRecording {
    graph: CudaGraph,
    epoch: u64,
}

// SAFETY: a CUDA graph and its executable may be used from any thread as long as calls on
// one graph are serialised; a recording is only launched through `&self` by `replay`, which
// launches it under the scratch epoch's lock, and dropped by its single owner.
unsafe impl Send for CudaRecording {}

impl std::fmt::Debug for CudaRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaRecording(epoch {})", self.epoch)
    }
}

/// Records the work `queue` queues on `device`'s lanes into a graph (nothing runs).
pub(crate) fn record(
    device: &Device,
    queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
) -> Result<CudaRecording, RuntimeError> {
    // One recording per device at a time: the capture streams are the device's.
    let _one = device
        .recorder
        .lock()
        .map_err(|_| RuntimeError::Device("the graph recorder's lock is poisoned".into()))?;
    if recording::recording() {
        return Err(RuntimeError::InvalidData(
            "a recording inside a recording".into(),
        ));
    }
    device.bind()?;
    let epoch = crate::cuda::memory::scratch_epoch();
    let origin = device.capture_streams[0].clone();
    origin
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| driver_error("cuStreamBeginCapture", e))?;
    let queued = {
        let _marked = recording::Recording::begin(device.identity());
        queue()
    };
    // The side lane's work joins the origin stream again (the queued steps join their lanes
    // at the end of a pipeline; after an error part way, this join ends the capture cleanly).
    let joined = join_capture(&device.capture_streams[1], &origin);
    let ended = origin.end_capture(CUgraphInstantiate_flags(0));
    queued?;
    joined?;
    let graph = ended
        .map_err(|e| driver_error("cuStreamEndCapture / cuGraphInstantiate", e))?
        .ok_or_else(|| RuntimeError::InvalidData("the recording captured nothing".into()))?;
    if crate::cuda::memory::scratch_epoch() != epoch {
        return Err(RuntimeError::InvalidData(
            "scratch memory was reallocated while recording".into(),
        ));
    }
    // Uploaded on the main lane (the capture streams never carry work of their own), so that
    // the first replay sets nothing up.
    // SAFETY: the executable graph was just instantiated and the main lane's stream belongs to
    // its context.
    unsafe {
        cudarc::driver::result::graph::upload(graph.cu_graph_exec(), device.streams[0].cu_stream())
    }
    .map_err(|e| driver_error("cuGraphUpload", e))?;
    Ok(CudaRecording { graph, epoch })
}

/// Makes `origin` wait for the work captured on `side` so far, where `side` joined the
/// capture (waiting on an event of a stream outside it would break the capture).
fn join_capture(side: &Arc<CudaStream>, origin: &Arc<CudaStream>) -> Result<(), RuntimeError> {
    use cudarc::driver::sys::{CUevent_flags, CUstreamCaptureStatus};
    let status = side
        .capture_status()
        .map_err(|e| driver_error("cuStreamIsCapturing", e))?;
    if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
        return Ok(());
    }
    let done = side
        .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(|e| driver_error("cuEventRecord", e))?;
    origin
        .wait(&done)
        .map_err(|e| driver_error("cuStreamWaitEvent", e))
}

/// Launches `recording` on `device`'s main lane, unless scratch memory it uses was reallocated
/// since it was recorded (`Ok(false)`).
pub(crate) fn replay(device: &Device, recording: &CudaRecording) -> Result<bool, RuntimeError> {
    let epoch = crate::cuda::memory::lock_scratch_epoch();
    if *epoch != recording.epoch {
        return Ok(false);
    }
    device.bind()?;
    // The graph was instantiated on the capture stream; it is launched on the main lane.
    // SAFETY: the executable graph is valid (owned by the recording) and the stream belongs
    // to its context; launching under the epoch's lock keeps its scratch memory allocated.
    unsafe {
        cudarc::driver::result::graph::launch(
            recording.graph.cu_graph_exec(),
            device.streams[0].cu_stream(),
        )
    }
    .map_err(|e| driver_error("cuGraphLaunch", e))?;
    Ok(true)
}
