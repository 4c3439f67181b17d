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

use crate::backend::{BufferInfo, ElemType};
use crate::cuda::{CudaBackend, CudaBuffer};
use crate::error::RuntimeError;
use crate::ranks::Collectives;
use cudarc::nccl::{result, sys};
use kernel_ir::Half;

/// One NCCL communicator per rank, rank `r` on the device of the `r`-th backend given.
pub struct NcclRanks {
    comms: Vec<sys::ncclComm_t>,
    ordinals: Vec<usize>,
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

impl NcclRanks {
    /// Communicators over the devices of `backends`, rank `r` on `backends[r]`'s device (each
    /// device once). An error names a missing NCCL library or the failing call.
    pub fn new(backends: &[&CudaBackend]) -> Result<NcclRanks, RuntimeError> {
        // SAFETY: only asks the loader whether the library can be opened.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::Device(
                "NCCL (libnccl.so.2) was not found: install NCCL, put it on the loader's path, \
                 or run on one GPU"
                    .into(),
            ));
        }
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
        Ok(NcclRanks { comms, ordinals })
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

    /// Checks that `backends` are the ranks' devices, in rank order.
    fn check(&self, backends: &[&CudaBackend], bufs: usize) -> Result<(), RuntimeError> {
        let same = backends.len() == self.ordinals.len()
            && bufs == self.ordinals.len()
            && backends
                .iter()
                .zip(&self.ordinals)
                .all(|(b, o)| b.ordinal() == *o);
        if same {
            Ok(())
        } else {
            Err(RuntimeError::Internal(format!(
                "NCCL ranks on devices {:?} were handed {} backends and {bufs} buffers",
                self.ordinals,
                backends.len()
            )))
        }
    }
}

impl Drop for NcclRanks {
    fn drop(&mut self) {
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
        format!("NCCL over {}", devices.join(", "))
    }

    fn all_gather(
        &self,
        backends: &[&CudaBackend],
        parts: &[(&CudaBuffer, usize)],
        wholes: &[&CudaBuffer],
    ) -> Result<(), RuntimeError> {
        self.check(backends, parts.len())?;
        self.check(backends, wholes.len())?;
        let elem = wholes.first().map_or(ElemType::F32, |w| w.elem());
        let total: usize = parts.iter().map(|p| p.1).sum();
        for (r, (p, w)) in parts.iter().zip(wholes).enumerate() {
            if p.0.elem() != elem || w.elem() != elem || p.0.len() < p.1 || w.len() < total {
                return Err(RuntimeError::Internal(format!(
                    "all-gather: rank {r}'s buffers do not hold {} of {total} elements",
                    p.1
                )));
            }
        }
        let size = elem.size_bytes() as u64;
        self.group("the all-gather's ncclGroupEnd", || {
            let mut offset = 0u64;
            for (root, (part, len)) in parts.iter().enumerate() {
                if *len > 0 {
                    for (r, whole) in wholes.iter().enumerate() {
                        let recv = whole.device_ptr() + offset * size;
                        let send = if r == root { part.device_ptr() } else { recv };
                        let stream = backends[r].main_stream().cu_stream();
                        // SAFETY: `send` holds `len` elements on the root (checked above), and
                        // `recv` has room for them at `offset` in every rank's whole copy
                        // (`total` elements checked); both live on rank r's device, whose
                        // communicator and stream are used.
                        unsafe {
                            result::broadcast(
                                send as *const _,
                                recv as *mut _,
                                *len,
                                nccl_type(elem),
                                root as i32,
                                self.comms[r],
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
        backends: &[&CudaBackend],
        bufs: &[&CudaBuffer],
        len: usize,
    ) -> Result<(), RuntimeError> {
        self.check(backends, bufs.len())?;
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
}

#[cfg(test)]
mod tests {
    //! Two GPUs of this host as two ranks. Without two usable GPUs the tests print a notice
    //! and return, unless `POPCORN_REQUIRE_GPUS` asks for at least two.

    use super::*;
    use crate::backend::{Arg, Backend, HostSlice, HostVec};
    use crate::cuda::cuda_available;
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
        ranks
            .all_gather(&backends, &[(&p0, 3), (&p1, 2)], &[&w0, &w1])
            .unwrap();
        for (backend, w) in [(&a, &w0), (&b, &w1)] {
            let got = backend.download(w).unwrap().to_f64();
            assert_eq!(&got[..5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
            assert!(got[5].is_nan(), "element 5 lies past the gathered blocks");
        }
        let s0 = a.upload(HostSlice::F32(&[0.1, 2.0, 7.0])).unwrap();
        let s1 = b.upload(HostSlice::F32(&[0.2, -2.0, 7.0])).unwrap();
        ranks.all_reduce_sum(&backends, &[&s0, &s1], 2).unwrap();
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
        ranks::execute(
            backends,
            plan,
            collectives,
            inputs,
            &args,
            &ScalarBindings::new(),
            dims,
        )
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
            let inputs: HashMap<String, Arg<'_, CudaBuffer>> = [
                (
                    "K".to_string(),
                    Arg::Dense {
                        buf: &kt,
                        rows: n,
                        cols: n,
                    },
                ),
                ("labels".to_string(), Arg::Index { buf: &lt, len: n }),
            ]
            .into();
            let one_gpu = run(&plan, &[&a, &a], &InMemory, &inputs, &dims);
            let nccl = NcclRanks::new(&[&a, &b]).unwrap();
            let two_gpus = run(&plan, &[&a, &b], &nccl, &inputs, &dims);
            // Two ranks: NCCL's sums are the rank-order sums, so the bits agree.
            assert_eq!(two_gpus, one_gpu, "n={n} k={k}");
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
        let source = include_str!("../../../examples/programs/kernel_kmeans.pop");
        let programs = Program::parse_all(source).unwrap();
        let find = |name: &str| programs.iter().find(|p| p.name == name).unwrap().clone();
        let (build, iteration) = (find("kernel_polynomial"), find("kkmeans_iteration"));
        let (n, d, k) = (3001, 8, 3);
        // Three blobs, point i in blob i mod 3, a little noise.
        let x: Vec<f64> = (0..n * d)
            .map(|e| {
                let (i, j) = (e / d, e % d);
                let centre = if j == i % 3 { 4.0 } else { 0.0 };
                centre + ((e * 7919 % 1000) as f64 / 1000.0 - 0.5)
            })
            .collect();
        let run = |ctx: &crate::Context| -> (Vec<u32>, f64) {
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
            for _ in 0..4 {
                let args = crate::Args::new()
                    .tensor("K", &kmat)
                    .tensor("labels", &labels)
                    .dim("k", k);
                let mut out = ctx.run(&iteration, &args).unwrap();
                objective = out.scalar("objective").unwrap();
                labels = out.take("new_labels").unwrap();
            }
            (ctx.to_u32(&labels).unwrap(), objective)
        };
        let one = run(&crate::Context::new(crate::DeviceSpec::Cuda(0)).unwrap());
        let two_ctx = crate::Context::new(crate::DeviceSpec::CudaSet(0b11)).unwrap();
        let two = run(&two_ctx);
        assert_eq!(two.0, one.0, "labels");
        assert!(
            (two.1 - one.1).abs() <= 1e-4 * one.1.abs(),
            "{} vs {}",
            two.1,
            one.1
        );
    }
}
