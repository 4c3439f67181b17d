//! NCCL collectives between the ranks of a partitioned plan, one CUDA device per rank, all
//! driven by this process ([`crate::ranks::execute`] with one [`CudaBackend`] per rank).
//!
//! NCCL is loaded at run time like the other CUDA libraries (`libnccl.so.2`); a machine
//! without it gets an error naming the library when ranks are set up, never a crash.
//! An all-gather of the ranks' blocks is a group of broadcasts, one per rank from its own block
//! into its place in every rank's whole copy (the blocks may differ in size, which NCCL's
//! all-gather does not allow). An all-reduce is NCCL's sum: over two ranks it equals the sum in
//! rank order bit for bit (one addition, which commutes); over more, NCCL chooses the order of
//! the additions, so sums may differ from one rank's in the last bits.
//!
//! Faults: at the end of every run ([`Collectives::settle`]) the ranks' streams are watched
//! together with NCCL's asynchronous error of each communicator. A rank whose work failed (a
//! device error, an NCCL error) or that does not finish within `POPCORN_RANK_TIMEOUT` seconds
//! (default 600) makes every communicator abort, so that no rank waits on for it, and the run
//! fails with an error naming the rank, its device and the cause; the communicators are gone
//! after that, and every later collective says so (make a new context).

use crate::backend::{BufferInfo, ElemType};
use crate::cuda::{CudaBackend, CudaBuffer};
use crate::error::RuntimeError;
use crate::ranks::Collectives;
use cudarc::nccl::{result, sys};
use kernel_ir::Half;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// NCCL communicators for the ranks this process runs: every rank of the run (one process
/// driving several GPUs, [`NcclRanks::new`]) or one rank of a run spread over processes.
pub struct NcclRanks {
    /// One per rank of this process.
    comms: Vec<sys::ncclComm_t>,
    /// The rank of each communicator.
    ranks: Vec<usize>,
    /// The device of each communicator.
    ordinals: Vec<usize>,
    /// Ranks in the run, in all processes.
    world: usize,
    /// Why the communicators were aborted, once they were.
    stopped: Mutex<Option<String>>,
    timeout: Duration,
}

// SAFETY: the communicators are used only through `&self` methods that issue whole groups of
// calls from one thread at a time (the ranks' collectives run in lockstep, never concurrently),
// and NCCL communicators may be used from any thread.
unsafe impl Send for NcclRanks {}
// SAFETY: as above.
unsafe impl Sync for NcclRanks {}

/// The error of NCCL call `call`.
fn nccl_error(call: &str, e: result::NcclError) -> RuntimeError {
    RuntimeError::Device(format!(
        "{call} failed: NCCL error {:?}; set NCCL_DEBUG=WARN for NCCL's own account",
        e.0
    ))
}

/// NCCL's element type for a buffer's.
fn nccl_type(elem: ElemType) -> sys::ncclDataType_t {
    match elem {
        ElemType::F32 => sys::ncclDataType_t::ncclFloat32,
        ElemType::F64 => sys::ncclDataType_t::ncclFloat64,
        ElemType::U32 => sys::ncclDataType_t::ncclUint32,
        ElemType::I32 => sys::ncclDataType_t::ncclInt32,
        ElemType::Half(Half::F16) => sys::ncclDataType_t::ncclFloat16,
        ElemType::Half(Half::Bf16) => sys::ncclDataType_t::ncclBfloat16,
    }
}

/// An error unless the NCCL library can be loaded.
fn nccl_present() -> Result<(), RuntimeError> {
    // SAFETY: only asks the loader whether the library can be opened.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(RuntimeError::Device(
            "NCCL (libnccl.so.2) was not found: install NCCL, put it on the loader's path, or \
             run on one GPU"
                .into(),
        ))
    }
}

impl NcclRanks {
    /// Ranks `ranks` of a run of `world`, communicator `comms[i]` on device `ordinals[i]`.
    fn from_comms(
        comms: Vec<sys::ncclComm_t>,
        ranks: Vec<usize>,
        ordinals: Vec<usize>,
        world: usize,
    ) -> NcclRanks {
        NcclRanks {
            comms,
            ranks,
            ordinals,
            world,
            stopped: Mutex::new(None),
            timeout: crate::ranks::rank_timeout(),
        }
    }

    /// Communicators over the devices of `backends`, rank `r` on `backends[r]`'s device (each
    /// device once). An error names a missing NCCL library or the failing call.
    pub fn new(backends: &[&CudaBackend]) -> Result<NcclRanks, RuntimeError> {
        nccl_present()?;
        let ordinals: Vec<usize> = backends.iter().map(|b| b.ordinal()).collect();
        for (i, o) in ordinals.iter().enumerate() {
            if ordinals[..i].contains(o) {
                return Err(RuntimeError::Device(format!(
                    "cuda:{o} is named twice: each rank needs a device of its own"
                )));
            }
        }
        let devices: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one communicator per device listed in `devices`.
        unsafe {
            result::comm_init_all(comms.as_mut_ptr(), devices.len() as i32, devices.as_ptr())
        }
        .map_err(|e| nccl_error("ncclCommInitAll", e))?;
        let count = ordinals.len();
        Ok(NcclRanks::from_comms(
            comms,
            (0..count).collect(),
            ordinals,
            count,
        ))
    }

    /// The communicator of rank `rank` of a run of `size` processes, one GPU each, on
    /// `backend`'s device: rank 0 makes NCCL's unique id and `channel` carries it to the others.
    pub fn for_rank(
        backend: &CudaBackend,
        rank: usize,
        size: usize,
        channel: &crate::ranks::world::HostChannel,
    ) -> Result<NcclRanks, RuntimeError> {
        nccl_present()?;
        let mine = if rank == 0 {
            let id = result::get_uniqueid().map_err(|e| nccl_error("ncclGetUniqueId", e))?;
            id.internal.iter().map(|c| *c as u8).collect::<Vec<u8>>()
        } else {
            Vec::new()
        };
        let bytes = channel.broadcast(&mine)?;
        let mut internal = [0 as std::ffi::c_char; 128];
        if bytes.len() != internal.len() {
            return Err(RuntimeError::Device(format!(
                "rank 0 sent an NCCL id of {} bytes (128 expected)",
                bytes.len()
            )));
        }
        for (d, b) in internal.iter_mut().zip(&bytes) {
            *d = *b as std::ffi::c_char;
        }
        let id = sys::ncclUniqueId { internal };
        backend
            .main_stream()
            .context()
            .bind_to_thread()
            .map_err(|e| crate::cuda::errors::driver_error("cuCtxSetCurrent", e))?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` is a place for one communicator; the id is the one every rank got.
        unsafe { result::comm_init_rank(&mut comm, size as i32, id, rank as i32) }
            .map_err(|e| nccl_error("ncclCommInitRank", e))?;
        Ok(NcclRanks::from_comms(
            vec![comm],
            vec![rank],
            vec![backend.ordinal()],
            size,
        ))
    }

    /// The same ranks waiting at most `timeout` for one another (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> NcclRanks {
        self.timeout = timeout;
        self
    }

    /// An error if the communicators were aborted.
    fn usable(&self) -> Result<(), RuntimeError> {
        match self.stopped.lock().map(|s| s.clone()) {
            Ok(None) => Ok(()),
            Ok(Some(why)) => Err(RuntimeError::Device(format!(
                "the NCCL ranks were stopped earlier ({why}); make a new context"
            ))),
            Err(_) => Err(RuntimeError::Device(
                "the NCCL ranks' state is poisoned".into(),
            )),
        }
    }

    /// Aborts every communicator (their pending operations end in error, so no rank waits for
    /// the failed one) and returns the error naming rank `rank` and `cause`.
    fn stop(&self, i: usize, cause: String) -> RuntimeError {
        self.stop_all(&[(i, cause)])
    }

    /// Every rank's failure at this moment: NCCL's asynchronous error or its stream's, with
    /// the first one seen (`first`) among them. A fault on one device can make its peers'
    /// collectives fail too, so the error names each failed rank rather than the first asked.
    fn failures(&self, backends: &[&CudaBackend], first: (usize, String)) -> Vec<(usize, String)> {
        let mut failed = Vec::new();
        for (r, backend) in backends.iter().enumerate() {
            if r == first.0 {
                failed.push(first.clone());
            } else if let Some(cause) = self.async_error(r) {
                failed.push((r, cause));
            } else if let Err(cause) = backend.stream_state() {
                failed.push((r, cause));
            }
        }
        failed
    }

    /// [`NcclRanks::stop`] naming every failed rank of `failed` (rank index, cause).
    fn stop_all(&self, failed: &[(usize, String)]) -> RuntimeError {
        let what = failed
            .iter()
            .map(|(i, cause)| {
                format!(
                    "rank {} (cuda:{}) failed: {cause}",
                    self.ranks[*i], self.ordinals[*i]
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        if let Ok(mut stopped) = self.stopped.lock() {
            if stopped.is_none() {
                for &comm in &self.comms {
                    // SAFETY: each communicator came from ncclCommInitAll and is aborted once
                    // (the flag set below keeps Drop from destroying it again).
                    let _ = unsafe { result::comm_abort(comm) };
                }
                *stopped = Some(what.clone());
            }
        }
        RuntimeError::Device(format!("{what}; every rank was stopped"))
    }

    /// NCCL's asynchronous error of rank `r`'s communicator, if it has one.
    fn async_error(&self, r: usize) -> Option<String> {
        let mut state = sys::ncclResult_t::ncclSuccess;
        // SAFETY: the communicator is live (not aborted: checked by the caller) and `state`
        // is a place for the result.
        let called = unsafe { sys::ncclCommGetAsyncError(self.comms[r], &mut state) };
        if called != sys::ncclResult_t::ncclSuccess {
            return Some(format!("ncclCommGetAsyncError returned {called:?}"));
        }
        match state {
            sys::ncclResult_t::ncclSuccess | sys::ncclResult_t::ncclInProgress => None,
            other => Some(format!("NCCL error {other:?}")),
        }
    }

    /// Runs `issue` between ncclGroupStart and ncclGroupEnd, so that the calls it makes for
    /// every rank from this one thread form one collective operation.
    fn group(
        &self,
        what: &str,
        issue: impl FnOnce() -> Result<(), RuntimeError>,
    ) -> Result<(), RuntimeError> {
        result::group_start().map_err(|e| nccl_error("ncclGroupStart", e))?;
        let issued = issue();
        // The group is closed even when a call failed, so the communicators stay usable.
        let ended = result::group_end().map_err(|e| nccl_error(what, e));
        issued.and(ended.map(|_| ()))
    }

    /// Checks that `ranks` and `backends` are this process's ranks and their devices, with
    /// `bufs` buffers.
    fn check(
        &self,
        ranks: &[usize],
        backends: &[&CudaBackend],
        bufs: usize,
    ) -> Result<(), RuntimeError> {
        let same = ranks == self.ranks.as_slice()
            && backends.len() == self.ordinals.len()
            && bufs == self.ordinals.len()
            && backends
                .iter()
                .zip(&self.ordinals)
                .all(|(b, o)| b.ordinal() == *o);
        if same {
            Ok(())
        } else {
            Err(RuntimeError::Internal(format!(
                "NCCL ranks {:?} on devices {:?} were handed ranks {ranks:?}, {} backends and \
                 {bufs} buffers",
                self.ranks,
                self.ordinals,
                backends.len()
            )))
        }
    }
}

impl Drop for NcclRanks {
    fn drop(&mut self) {
        if !matches!(self.stopped.get_mut().map(|s| s.is_none()), Ok(true)) {
            return; // aborted: NCCL freed them
        }
        for &comm in &self.comms {
            // SAFETY: each communicator came from ncclCommInitAll and is destroyed once; the
            // status is ignored (nothing can be done about a failure while dropping).
            let _ = unsafe { result::comm_destroy(comm) };
        }
    }
}

impl Collectives<CudaBackend> for NcclRanks {
    fn describe(&self) -> String {
        let devices: Vec<String> = self.ordinals.iter().map(|o| format!("cuda:{o}")).collect();
        if self.ranks.len() == self.world {
            format!("NCCL over {}", devices.join(", "))
        } else {
            format!(
                "NCCL, ranks {:?} of {} on {}",
                self.ranks,
                self.world,
                devices.join(", ")
            )
        }
    }

    fn all_gather(&self, g: &crate::ranks::Gather<'_, CudaBackend>) -> Result<(), RuntimeError> {
        self.usable()?;
        self.check(g.ranks, g.backends, g.parts.len())?;
        self.check(g.ranks, g.backends, g.wholes.len())?;
        if g.lens.len() != self.world {
            return Err(RuntimeError::Internal(format!(
                "all-gather over {} ranks given {} part lengths",
                self.world,
                g.lens.len()
            )));
        }
        let elem = g.wholes.first().map_or(ElemType::F32, |w| w.elem());
        let total: usize = g.lens.iter().sum();
        for (i, (p, w)) in g.parts.iter().zip(g.wholes).enumerate() {
            let rank = self.ranks[i];
            let fits = p.0.elem() == elem && w.elem() == elem && p.0.len() >= p.1;
            if !fits || p.1 != g.lens[rank] || w.len() < total {
                return Err(RuntimeError::Internal(format!(
                    "all-gather: rank {rank}'s buffers do not hold {} of {total} elements",
                    g.lens[rank]
                )));
            }
        }
        let size = elem.size_bytes() as u64;
        self.group("the all-gather's ncclGroupEnd", || {
            let mut offset = 0u64;
            for (root, len) in g.lens.iter().enumerate() {
                if *len > 0 {
                    for (i, whole) in g.wholes.iter().enumerate() {
                        let recv = whole.device_ptr() + offset * size;
                        let send = if self.ranks[i] == root {
                            g.parts[i].0.device_ptr()
                        } else {
                            recv
                        };
                        let stream = g.backends[i].main_stream().cu_stream();
                        // SAFETY: on the root, `send` holds `len` elements (checked above), and
                        // `recv` has room for them at `offset` in every rank's whole copy
                        // (`total` elements checked); both live on this rank's device, whose
                        // communicator and stream are used.
                        unsafe {
                            result::broadcast(
                                send as *const _,
                                recv as *mut _,
                                *len,
                                nccl_type(elem),
                                root as i32,
                                self.comms[i],
                                stream as sys::cudaStream_t,
                            )
                        }
                        .map_err(|e| nccl_error("ncclBroadcast", e))?;
                    }
                }
                offset += *len as u64;
            }
            Ok(())
        })
    }

    fn all_reduce_sum(
        &self,
        ranks: &[usize],
        backends: &[&CudaBackend],
        bufs: &[&CudaBuffer],
        len: usize,
    ) -> Result<(), RuntimeError> {
        self.usable()?;
        self.check(ranks, backends, bufs.len())?;
        if len == 0 {
            return Ok(());
        }
        let elem = bufs[0].elem();
        if bufs.iter().any(|b| b.elem() != elem || b.len() < len) {
            return Err(RuntimeError::Internal(format!(
                "all-reduce: the ranks' buffers differ in element type or hold fewer than {len}"
            )));
        }
        self.group("the all-reduce's ncclGroupEnd", || {
            for (r, buf) in bufs.iter().enumerate() {
                let ptr = buf.device_ptr();
                let stream = backends[r].main_stream().cu_stream();
                // SAFETY: `ptr` holds at least `len` elements of `elem` on rank r's device
                // (checked above); the sum is in place, which NCCL allows.
                unsafe {
                    result::all_reduce(
                        ptr as *const _,
                        ptr as *mut _,
                        len,
                        nccl_type(elem),
                        sys::ncclRedOp_t::ncclSum,
                        self.comms[r],
                        stream as sys::cudaStream_t,
                    )
                }
                .map_err(|e| nccl_error("ncclAllReduce", e))?;
            }
            Ok(())
        })
    }

    fn settle(&self, ranks: &[usize], backends: &[&CudaBackend]) -> Result<(), RuntimeError> {
        self.usable()?;
        self.check(ranks, backends, backends.len())?;
        let start = Instant::now();
        let mut done = vec![false; backends.len()];
        loop {
            for (r, backend) in backends.iter().enumerate() {
                if done[r] {
                    continue;
                }
                let failed = match self.async_error(r) {
                    Some(cause) => Some(cause),
                    None => match backend.stream_state() {
                        Ok(true) => {
                            done[r] = true;
                            None
                        }
                        Ok(false) => None,
                        Err(cause) => Some(cause),
                    },
                };
                if let Some(cause) = failed {
                    return Err(self.stop_all(&self.failures(backends, (r, cause))));
                }
            }
            if done.iter().all(|d| *d) {
                return Ok(());
            }
            if start.elapsed() > self.timeout {
                let r = done.iter().position(|d| !d).unwrap_or(0);
                let cause = format!(
                    "its work did not finish within {} s (POPCORN_RANK_TIMEOUT); a peer may have \
                     failed or the work is longer than that",
                    self.timeout.as_secs_f64()
                );
                return Err(self.stop(r, cause));
            }
            // Most runs end within milliseconds of being issued: yield while that is likely
            // (a sleep costs its timer slack, tens of microseconds, on every run), then poll
            // every 200 us.
            if start.elapsed() < SETTLE_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// How long [`NcclRanks::settle`] polls its ranks without sleeping.
const SETTLE_SPIN: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    //! Two GPUs of this host as two ranks. Without two usable GPUs the tests print a notice
    //! and return, unless `POPCORN_REQUIRE_GPUS` asks for at least two.

    use super::*;
    use crate::backend::{Arg, Backend, HostSlice, HostVec};
    use crate::cuda::{cuda_available, CudaConfig};
    use crate::ranks::{self, InMemory};
    use popcorn_dsl::plan::collective::PartitionSpec;
    use popcorn_dsl::plan::{Home, Plan, ValueKind};
    use popcorn_dsl::{DType, DimBindings, PlannerConfig, Program, ScalarBindings};
    use std::collections::{BTreeMap, HashMap};

    /// Backends on cuda:0 and cuda:1, or `None` after a notice.
    fn two_gpus() -> Option<[CudaBackend; 2]> {
        let required = popcorn_dsl::settings::settings().require_gpus.unwrap_or(0) >= 2;
        let why = match cuda_available() {
            Ok(n) if n >= 2 => match (CudaBackend::new(0), CudaBackend::new(1)) {
                (Ok(a), Ok(b)) => return Some([a, b]),
                (Err(e), _) | (_, Err(e)) => e.to_string(),
            },
            Ok(n) => format!("this machine has {n} CUDA device(s)"),
            Err(why) => why,
        };
        assert!(!required, "POPCORN_REQUIRE_GPUS asks for two GPUs: {why}");
        eprintln!("skipping two-GPU test: {why}");
        None
    }

    #[test]
    fn gathers_uneven_blocks_and_sums_over_two_gpus() {
        let Some([a, b]) = two_gpus() else { return };
        let backends = [&a, &b];
        let ranks = NcclRanks::new(&backends).expect("NCCL over two GPUs");
        assert_eq!(ranks.describe(), "NCCL over cuda:0, cuda:1");
        let p0 = a.upload(HostSlice::F64(&[1.0, 2.0, 3.0, 9.0])).unwrap();
        let p1 = b.upload(HostSlice::F64(&[4.0, 5.0])).unwrap();
        let w0 = a.upload(HostSlice::F64(&[f64::NAN; 6])).unwrap();
        let w1 = b.upload(HostSlice::F64(&[f64::NAN; 6])).unwrap();
        let gather = crate::ranks::Gather {
            ranks: &[0, 1],
            backends: &backends,
            parts: &[(&p0, 3), (&p1, 2)],
            lens: &[3, 2],
            wholes: &[&w0, &w1],
        };
        ranks.all_gather(&gather).unwrap();
        for (backend, w) in [(&a, &w0), (&b, &w1)] {
            let got = backend.download(w).unwrap().to_f64();
            assert_eq!(&got[..5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
            assert!(got[5].is_nan(), "element 5 lies past the gathered blocks");
        }
        let s0 = a.upload(HostSlice::F32(&[0.1, 2.0, 7.0])).unwrap();
        let s1 = b.upload(HostSlice::F32(&[0.2, -2.0, 7.0])).unwrap();
        ranks
            .all_reduce_sum(&[0, 1], &backends, &[&s0, &s1], 2)
            .unwrap();
        for (backend, s) in [(&a, &s0), (&b, &s1)] {
            assert_eq!(
                backend.download(s).unwrap(),
                HostVec::F32(vec![0.1 + 0.2, 0.0, 7.0])
            );
        }
        let err = NcclRanks::new(&[&a, &a]).err().expect("one device twice");
        assert!(err.to_string().contains("named twice"), "{err}");
    }

    /// Every output of `plan` (but host scalars) run over `backends` with `collectives`.
    fn run(
        plan: &Plan,
        backends: &[&CudaBackend],
        collectives: &dyn ranks::Collectives<CudaBackend>,
        inputs: &HashMap<String, Arg<'_, CudaBuffer>>,
        scalars: &ScalarBindings,
        dims: &DimBindings,
    ) -> BTreeMap<String, HostVec> {
        let home = backends[0];
        let outs: Vec<(String, CudaBuffer, usize, usize, bool)> = plan
            .outputs
            .iter()
            .map(|(name, v)| (name, plan.value(*v)))
            .filter(|(_, v)| !matches!(v.home, Home::Host))
            .map(|(name, v)| {
                let index = matches!(v.kind, ValueKind::Index);
                let elem = if index {
                    ElemType::U32
                } else {
                    ElemType::float(plan.dtype)
                };
                let buf = home.alloc(elem, v.len().max(1)).unwrap();
                if !index {
                    home.fill(&buf, f64::NAN).unwrap();
                }
                (name.clone(), buf, v.rows, v.cols, index)
            })
            .collect();
        let args: HashMap<String, Arg<'_, CudaBuffer>> = outs
            .iter()
            .map(|(name, buf, rows, cols, index)| {
                let arg = if *index {
                    Arg::Index {
                        buf,
                        len: rows * cols,
                    }
                } else {
                    Arg::Dense {
                        buf,
                        rows: *rows,
                        cols: *cols,
                    }
                };
                (name.clone(), arg)
            })
            .collect();
        ranks::execute(backends, plan, collectives, inputs, &args, scalars, dims)
            .expect("the partitioned plan runs");
        outs.iter()
            .map(|(name, buf, ..)| (name.clone(), home.download(buf).unwrap()))
            .collect()
    }

    #[test]
    fn a_kernel_kmeans_iteration_over_two_gpus_equals_two_ranks_on_one() {
        let Some([a, b]) = two_gpus() else { return };
        let source = include_str!("../../../examples/programs/kernel_kmeans.pop");
        let program = Program::parse_all(source)
            .unwrap()
            .into_iter()
            .find(|p| p.name == "kkmeans_iteration")
            .unwrap();
        for (n, k) in [(1, 1), (1001, 7), (4099, 26)] {
            let dims: DimBindings = [("n".to_string(), n), ("k".to_string(), k)].into();
            let config = PlannerConfig {
                partition: Some(PartitionSpec::points(2)),
                ..PlannerConfig::default().with_dtype(DType::F32)
            };
            let plan = popcorn_dsl::plan(&program, &dims, &config, &a.target(), &BTreeMap::new())
                .expect("plans");
            let kernel: Vec<f32> = (0..n * n)
                .map(|i| {
                    let (r, c) = ((i / n) as f32, (i % n) as f32);
                    (-((r - c) / n as f32).powi(2)).exp()
                })
                .collect();
            let labels: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % k as u32).collect();
            let kt = a.upload(HostSlice::F32(&kernel)).unwrap();
            let lt = a.upload(HostSlice::U32(&labels)).unwrap();
            let inputs = crate::ranks::tests::iteration_inputs(&kt, &lt, n);
            let no_scalars = ScalarBindings::new();
            let one_gpu = run(&plan, &[&a, &a], &InMemory, &inputs, &no_scalars, &dims);
            let nccl = NcclRanks::new(&[&a, &b]).unwrap();
            let two_gpus = run(&plan, &[&a, &b], &nccl, &inputs, &no_scalars, &dims);
            // Two ranks: NCCL's sums are the rank-order sums, so the bits agree.
            assert_eq!(two_gpus, one_gpu, "n={n} k={k}");
        }
    }

    /// The recomputed-K iteration partitioned over 1, 2 and 3 ranks on one GPU: the
    /// contraction shared (each rank its rows of one triangle of tiles, on whole blocks of
    /// rows, partial sums all-reduced), the points sorted by cluster on every rank. Shapes: one
    /// point, shares that end inside the last block of rows, f64 (a template of whole rows:
    /// each rank a block of rows), TF32 on the lock-step body and on the warp-specialised one
    /// (10^9 entries, depth 40). The GPU adds a tile's sums with
    /// atomics in no fixed order, so the shares agree with one rank to f32 rounding: the
    /// objective and the centroid norms to 1e-4 relative, and on clustered points (no
    /// near-ties) the labels exactly.
    #[test]
    fn a_shared_recomputed_contraction_on_one_gpu_matches_one_rank() {
        let config = CudaConfig {
            allow_tf32: true,
            ..CudaConfig::from_env()
        };
        let gpu = match CudaBackend::with_config(0, config) {
            Ok(b) => b,
            Err(e) => {
                assert!(
                    !popcorn_dsl::settings::settings().require_gpu,
                    "POPCORN_REQUIRE_GPU is set: {e}"
                );
                eprintln!("skipping GPU test: {e}");
                return;
            }
        };
        let source = include_str!("../../../examples/programs/kernel_kmeans.pop");
        let program = Program::parse_all(source)
            .unwrap()
            .into_iter()
            .find(|p| p.name == "kkmeans_recompute_polynomial")
            .unwrap();
        for (n, d, k, tf32, dtype) in [
            (1, 3, 1, false, DType::F32),
            (1001, 5, 7, false, DType::F32),
            (1001, 5, 7, false, DType::F64),
            (4099, 50, 26, true, DType::F32),
            (33000, 40, 10, true, DType::F32),
        ] {
            let dims: DimBindings = [
                ("n".to_string(), n),
                ("d".to_string(), d),
                ("k".to_string(), k),
            ]
            .into();
            // k blobs (centres in [0, 3)^d, noise 0.05), every tenth point of each first given
            // the next cluster: distinct centroids, so the argmin has no near-ties that
            // rounding flips, and about a tenth of the labels move.
            let hash = |e: u64| ((e.wrapping_mul(2_654_435_761) >> 7) % 1000) as f32 / 1000.0;
            let x: Vec<f32> = (0..n * d)
                .map(|e| {
                    let (i, j) = (e / d, e % d);
                    let c = (i % k) as u64;
                    3.0 * hash(c * 131 + j as u64 + 1) + 0.1 * (hash(e as u64 + 7) - 0.5)
                })
                .collect();
            let labels: Vec<u32> = (0..n)
                .map(|i| ((i % k + usize::from((i / k) % 10 == 9)) % k) as u32)
                .collect();
            let x64: Vec<f64> = x.iter().map(|v| f64::from(*v)).collect();
            let xt = match dtype {
                DType::F32 => gpu.upload(HostSlice::F32(&x)).unwrap(),
                DType::F64 => gpu.upload(HostSlice::F64(&x64)).unwrap(),
            };
            let lt = gpu.upload(HostSlice::U32(&labels)).unwrap();
            let inputs: HashMap<String, Arg<'_, CudaBuffer>> = [
                (
                    "X".to_string(),
                    Arg::Dense {
                        buf: &xt,
                        rows: n,
                        cols: d,
                    },
                ),
                ("labels".to_string(), Arg::Index { buf: &lt, len: n }),
            ]
            .into();
            let scalars: ScalarBindings = [
                ("gamma".to_string(), 1.0 / d as f64),
                ("coef0".to_string(), 1.0),
                ("degree".to_string(), 2.0),
            ]
            .into();
            let outcome = |ranks: usize| {
                let config = PlannerConfig {
                    partition: Some(PartitionSpec::points(ranks)),
                    tf32,
                    ..PlannerConfig::default().with_dtype(dtype)
                };
                let plan =
                    popcorn_dsl::plan(&program, &dims, &config, &gpu.target(), &BTreeMap::new())
                        .expect("plans");
                let backends = vec![&gpu; ranks];
                run(&plan, &backends, &InMemory, &inputs, &scalars, &dims)
            };
            let one = outcome(1);
            let floats = |m: &BTreeMap<String, HostVec>, name: &str| m[name].to_f64();
            for ranks in [2, 3] {
                let shared = outcome(ranks);
                for name in ["objective", "cn"] {
                    for (a, b) in floats(&shared, name).iter().zip(floats(&one, name)) {
                        // An empty cluster's norm is infinite on both.
                        assert!(
                            *a == b || (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                            "n={n} d={d} k={k} {dtype:?} over {ranks} ranks: `{name}` {a} against {b}"
                        );
                    }
                }
                let (HostVec::U32(got), HostVec::U32(want)) =
                    (&shared["new_labels"], &one["new_labels"])
                else {
                    panic!("labels are indices");
                };
                let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
                assert_eq!(
                    differ, 0,
                    "n={n} d={d} k={k} {dtype:?} over {ranks} ranks: labels differ from one rank's"
                );
                // The mislabelled tenth moved: the iteration did something.
                let moved = got.iter().zip(&labels).filter(|(a, b)| a != b).count();
                assert!(
                    n < 10 || moved * 20 >= n,
                    "n={n} k={k}: only {moved} labels changed"
                );
            }
        }
    }

    /// A context over two GPUs builds a polynomial kernel matrix (each GPU its rows, the
    /// product as a GEMM of its rows) and iterates on it, K staying on its ranks: the labels
    /// of one GPU's context, the objective to rounding (the whole SYRK sums in another order).
    #[test]
    fn kernel_kmeans_on_a_two_gpu_context_matches_one_gpu() {
        if two_gpus().is_none() {
            return;
        }
        let one = fit_three_blobs(&crate::Context::new(crate::DeviceSpec::Cuda(0)).unwrap(), 4);
        let two_ctx = crate::Context::new(crate::DeviceSpec::CudaSet(0b11)).unwrap();
        let two = fit_three_blobs(&two_ctx, 4);
        assert_eq!(two.0, one.0, "labels");
        assert!(
            (two.1 - one.1).abs() <= 1e-4 * one.1.abs(),
            "{} vs {}",
            two.1,
            one.1
        );
    }

    /// A two-GPU context records a partitioned iteration as a graph per GPU (from the second
    /// run with the same buffers on) and replays it, with the results of the same context's
    /// iterations step by step, bit for bit. In a process of its own ([`replay_child`]): the
    /// scratch memory's epoch is the process's, and another test growing its scratch while
    /// this one records would stale the recording (the plan then runs step by step for good).
    #[test]
    fn a_two_gpu_context_replays_its_iterations_with_the_results_step_by_step() {
        if two_gpus().is_none() {
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "cuda::nccl::tests::replay_child",
                "--nocapture",
            ])
            .env("POPCORN_NCCL_REPLAY_CHILD", "1")
            .output()
            .expect("run the child");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("REPLAYED: ")),
            "the child did not run: {text}"
        );
    }

    /// The child of [`a_two_gpu_context_replays_its_iterations_with_the_results_step_by_step`].
    #[test]
    #[ignore = "run by a_two_gpu_context_replays_its_iterations_with_the_results_step_by_step in its own process"]
    fn replay_child() {
        if std::env::var_os("POPCORN_NCCL_REPLAY_CHILD").is_none() || two_gpus().is_none() {
            return;
        }
        let graphs = crate::Context::new(crate::DeviceSpec::CudaSet(0b11)).unwrap();
        let with = fit_three_blobs(&graphs, 9);
        let steps = crate::Context::new(crate::DeviceSpec::CudaSet(0b11))
            .unwrap()
            .with_graphs(false);
        let without = fit_three_blobs(&steps, 9);
        assert_eq!(with.0, without.0, "labels");
        assert_eq!(
            with.1.to_bits(),
            without.1.to_bits(),
            "{} vs {}",
            with.1,
            without.1
        );
        assert_eq!(steps.replayed_runs(), 0);
        assert!(
            graphs.replayed_runs() >= 4,
            "{} of 9 iterations replayed",
            graphs.replayed_runs()
        );
        println!("REPLAYED: {} of 9", graphs.replayed_runs());
    }

    /// Kernel K-means with the polynomial kernel on three blobs of 3001 points (point i in blob
    /// i mod 3, a little noise), `iterations` iterations from labels `(i / 7) mod 3`: the labels
    /// and the last objective.
    fn fit_three_blobs(ctx: &crate::Context, iterations: usize) -> (Vec<u32>, f64) {
        let source = include_str!("../../../examples/programs/kernel_kmeans.pop");
        let programs = Program::parse_all(source).unwrap();
        let find = |name: &str| programs.iter().find(|p| p.name == name).unwrap().clone();
        let (build, iteration) = (find("kernel_polynomial"), find("kkmeans_iteration"));
        let (n, d, k) = (3001, 8, 3);
        let x: Vec<f64> = (0..n * d)
            .map(|e| {
                let (i, j) = (e / d, e % d);
                let centre = if j == i % 3 { 4.0 } else { 0.0 };
                centre + ((e * 7919 % 1000) as f64 / 1000.0 - 0.5)
            })
            .collect();
        let xt = ctx.dense(n, d, &x).unwrap();
        let args = crate::Args::new()
            .tensor("X", &xt)
            .scalar("gamma", 0.1)
            .scalar("coef0", 1.0)
            .scalar("degree", 2.0);
        let kmat = ctx.run(&build, &args).unwrap().take("K").unwrap();
        let first: Vec<u32> = (0..n as u32).map(|i| (i / 7) % k as u32).collect();
        let mut labels = ctx.index(&first).unwrap();
        let mut objective = 0.0;
        for _ in 0..iterations {
            let args = crate::Args::new()
                .tensor("K", &kmat)
                .tensor("labels", &labels)
                .dim("k", k);
            let mut out = ctx.run(&iteration, &args).unwrap();
            objective = out.scalar("objective").unwrap();
            labels = out.take("new_labels").unwrap();
        }
        (ctx.to_u32(&labels).unwrap(), objective)
    }

    /// The child of [`a_fault_on_one_gpu_stops_both_ranks_within_seconds`]: rank 1's device
    /// traps before an all-reduce that rank 0 would wait on for ever. A trap leaves that device
    /// unusable for the rest of the process, hence a process of its own.
    #[test]
    #[ignore = "run by a_fault_on_one_gpu_stops_both_ranks_within_seconds in its own process"]
    fn fault_child() {
        if std::env::var_os("POPCORN_NCCL_FAULT_CHILD").is_none() {
            return;
        }
        let Some([a, b]) = two_gpus() else { return };
        let backends = [&a, &b];
        let ranks = NcclRanks::new(&backends)
            .unwrap()
            .with_timeout(std::time::Duration::from_secs(20));
        let trap = b
            .raw()
            .kernel("pk_test_trap", || {
                "extern \"C\" __global__ void pk_test_trap() { asm volatile(\"trap;\"); }".into()
            })
            .unwrap();
        // SAFETY: the kernel takes no arguments and touches no memory.
        unsafe { b.raw().launch(&trap, ((1, 1, 1), (1, 1, 1), 0), &mut []) }.unwrap();
        let s0 = a.upload(HostSlice::F32(&[1.0; 1024])).unwrap();
        let s1 = b.upload(HostSlice::F32(&[1.0; 1024])).unwrap();
        // Issuing may fail already (the trapped device refuses work) or not; settling names
        // the rank either way.
        let issued = ranks.all_reduce_sum(&[0, 1], &backends, &[&s0, &s1], 1024);
        println!("ISSUED: {issued:?}");
        let err = ranks
            .settle(&[0, 1], &backends)
            .expect_err("rank 1 trapped");
        println!("FAULT-REPORT: {err}");
        let again = ranks
            .all_reduce_sum(&[0, 1], &backends, &[&s0, &s1], 1024)
            .expect_err("the ranks were stopped");
        println!("AFTER: {again}");
    }

    /// A device fault on one GPU stops both ranks with an error naming the rank, its device
    /// and the cause, within seconds (not a hang), and the stopped ranks refuse later work.
    #[test]
    fn a_fault_on_one_gpu_stops_both_ranks_within_seconds() {
        if two_gpus().is_none() {
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let start = std::time::Instant::now();
        let out = std::process::Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "cuda::nccl::tests::fault_child",
                "--nocapture",
            ])
            .env("POPCORN_NCCL_FAULT_CHILD", "1")
            .output()
            .expect("run the child");
        let elapsed = start.elapsed().as_secs_f64();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The trapped rank is named (its peer's collective may fail with it, named too).
        let report = text
            .lines()
            .find(|l| l.starts_with("FAULT-REPORT: "))
            .unwrap_or_else(|| panic!("no fault report: {text}"));
        assert!(report.contains("rank 1 (cuda:1) failed"), "{text}");
        assert!(text.contains("every rank was stopped"), "{text}");
        assert!(
            text.contains("AFTER: the NCCL ranks were stopped earlier"),
            "{text}"
        );
        assert!(elapsed < 60.0, "the ranks took {elapsed:.1} s to stop");
    }
}
