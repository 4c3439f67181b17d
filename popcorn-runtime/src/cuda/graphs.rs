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
use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// A run recorded as a CUDA graph, with the scratch epoch it was recorded in.
pub struct CudaRecording {
    graph: Graph,
    epoch: u64,
}

/// A captured graph and its executable, destroyed with it.
struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: both handles were made by this graph's recording and are destroyed once,
        // here; nothing launches them after (a recording is dropped by its single owner).
        unsafe {
            let _ = cudarc::driver::result::graph::exec_destroy(self.exec);
            let _ = cudarc::driver::result::graph::destroy(self.graph);
        }
    }
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
    let mut graphs = record_together(&[device], queue)?;
    graphs
        .pop()
        .ok_or_else(|| RuntimeError::Internal("a recording of one device made none".into()))
}

/// Records the work `queue` queues on the lanes of every device of `devices` into a graph per
/// device (nothing runs): the ranks of a partitioned run, whose collectives queue on each
/// device. Every capture ends before any graph is instantiated (instantiating is not allowed
/// while the thread captures).
pub(crate) fn record_together(
    devices: &[&Device],
    queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
) -> Result<Vec<CudaRecording>, RuntimeError> {
    // One recording per device at a time: the capture streams are the device's.
    let _locks = devices
        .iter()
        .map(|d| d.recorder.lock())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| RuntimeError::Device("the graph recorder's lock is poisoned".into()))?;
    if devices
        .iter()
        .any(|d| recording::recording_for(d.identity()))
    {
        return Err(RuntimeError::InvalidData(
            "a recording inside a recording for the same device".into(),
        ));
    }
    let epoch = crate::cuda::memory::scratch_epoch();
    let mut begun = Vec::with_capacity(devices.len());
    let mut marks = Vec::with_capacity(devices.len());
    let mut started = Ok(());
    for device in devices {
        let origin = &device.capture_streams[0];
        started = device.bind().and_then(|()| {
            origin
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(|e| driver_error("cuStreamBeginCapture", e))
        });
        if started.is_err() {
            break;
        }
        begun.push(*device);
        marks.push(recording::Recording::begin(device.identity()));
    }
    let queued = started.and_then(|()| queue());
    drop(marks);
    // Every capture ends (the side lane's work joining the origin stream first; after an error
    // part way, this ends the capture cleanly), then the graphs are instantiated.
    let mut captured = Vec::with_capacity(begun.len());
    let mut ended = Ok(());
    for device in &begun {
        let origin = &device.capture_streams[0];
        let joined = join_capture(&device.capture_streams[1], origin);
        // SAFETY: `origin` is capturing (begun above) on this device's context, bound first.
        let graph = device.bind().and_then(|()| {
            unsafe { cudarc::driver::result::stream::end_capture(origin.cu_stream()) }
                .map_err(|e| driver_error("cuStreamEndCapture", e))
        });
        match graph {
            Ok(g) if !g.is_null() => captured.push(g),
            Ok(_) => {
                ended = ended.and(Err(RuntimeError::InvalidData(
                    "the recording captured nothing".into(),
                )))
            }
            Err(e) => ended = ended.and(Err(e)),
        }
        ended = ended.and(joined);
    }
    let destroy_all = |graphs: &[sys::CUgraph]| {
        for g in graphs {
            // SAFETY: each graph was just captured and is owned here, destroyed once.
            let _ = unsafe { cudarc::driver::result::graph::destroy(*g) };
        }
    };
    if let Err(e) = queued.and(ended) {
        destroy_all(&captured);
        return Err(e);
    }
    if crate::cuda::memory::scratch_epoch() != epoch {
        destroy_all(&captured);
        return Err(RuntimeError::InvalidData(
            "scratch memory was reallocated while recording".into(),
        ));
    }
    let mut recordings = Vec::with_capacity(captured.len());
    let mut graphs = captured.into_iter();
    for device in &begun {
        let Some(graph) = graphs.next() else { break };
        device.bind()?;
        // SAFETY: `graph` was captured on this device and is valid.
        let exec = match unsafe {
            cudarc::driver::result::graph::instantiate(graph, CUgraphInstantiate_flags(0))
        } {
            Ok(exec) => exec,
            Err(e) => {
                destroy_all(&[graph]);
                destroy_all(&graphs.collect::<Vec<_>>());
                return Err(driver_error("cuGraphInstantiate", e));
            }
        };
        let recording = CudaRecording {
            graph: Graph { graph, exec },
            epoch,
        };
        // Uploaded on the main lane (the capture streams never carry work of their own), so
        // that the first replay sets nothing up.
        // SAFETY: the executable graph was just instantiated and the main lane's stream
        // belongs to its context.
        unsafe { cudarc::driver::result::graph::upload(exec, device.streams[0].cu_stream()) }
            .map_err(|e| driver_error("cuGraphUpload", e))?;
        recordings.push(recording);
    }
    Ok(recordings)
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
    replay_together(&[(device, recording)])
}

/// Launches each recording on its device's main lane, all or none: none where scratch memory
/// one of them uses was reallocated since it was recorded (`Ok(false)`). The graphs of one
/// partitioned run wait for one another in their collectives, so launching some of them alone
/// would leave those waiting.
pub(crate) fn replay_together(runs: &[(&Device, &CudaRecording)]) -> Result<bool, RuntimeError> {
    let epoch = crate::cuda::memory::lock_scratch_epoch();
    if runs.iter().any(|(_, r)| *epoch != r.epoch) {
        return Ok(false);
    }
    for (device, recording) in runs {
        device.bind()?;
        // The graph was instantiated on the capture stream; it is launched on the main lane.
        // SAFETY: the executable graph is valid (owned by the recording) and the stream
        // belongs to its context; launching under the epoch's lock keeps its scratch memory
        // allocated.
        unsafe {
            cudarc::driver::result::graph::launch(
                recording.graph.exec,
                device.streams[0].cu_stream(),
            )
        }
        .map_err(|e| driver_error("cuGraphLaunch", e))?;
    }
    Ok(true)
}
