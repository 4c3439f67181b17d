//! Runs of one plan recorded once and replayed ([`Backend::record`], [`Backend::replay`]): on
//! a GPU, a CUDA graph that queues all of a run's kernels with one launch, which is what an
//! iteration of small steps (Kernel K-means on a few thousand points) spends most of its time
//! on otherwise.
//!
//! A recording holds the addresses of the buffers it was made with, so it is kept by a key of
//! the run's tensors (addresses and lengths), scalars and sizes, and replayed only for a run
//! with the same key. The first run with a key runs as usual (it compiles the kernels and sizes
//! the scratch memory), the second is recorded and replayed, and later ones replay
//! ([`crate::recording_keys`]). An iteration that swaps its input and output tensors every
//! time has two keys: both are kept.
//!
//! Only plans of popcorn's own kernels are recorded (library calls through cuBLAS and
//! cuSPARSE run as usual; partitioned plans are recorded by [`crate::ranks`], a graph per
//! rank), and not under `POPCORN_NO_GRAPHS`,
//! `POPCORN_SYNC` or `POPCORN_LOG=time` (which need every step queued on its own). A recording
//! that fails (something in the run cannot be recorded) makes the plan run as usual from then
//! on, unless memory it used moved meanwhile ([`Backend::recording_epoch`]: scratch memory
//! grown by another run, perhaps on another thread) or another thread's call broke the
//! capture off (a few times in a row at most), where a later run records again; `POPCORN_LOG=graphs`
//! says why.

use crate::backend::{Arg, Backend, BufferInfo};
use crate::error::RuntimeError;
use crate::executor::{allocate_transient, execute, execute_with, Workspace};
use crate::recording_keys::{PlanRecordings, Sighting};
use popcorn_dsl::plan::{Plan, StepOp};
use popcorn_dsl::{DimBindings, ScalarBindings};
use std::collections::HashMap;

/// What a recording was made with: every tensor's address and length (and every scalar
/// argument's bits), taken in the order of their names, then every bound scalar's bits and
/// every size. A plan's runs all have the same names, so the values alone tell its runs
/// apart, and building the key allocates nothing per name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunKey(Vec<u64>);

impl RunKey {
    fn new<B: Backend>(
        backend: &B,
        inputs: &HashMap<String, Arg<'_, B::Buf>>,
        outputs: &HashMap<String, Arg<'_, B::Buf>>,
        scalars: &ScalarBindings,
        dims: &DimBindings,
    ) -> RunKey {
        let mut args: Vec<(bool, &str, &Arg<'_, B::Buf>)> = inputs
            .iter()
            .map(|(name, arg)| (false, name.as_str(), arg))
            .chain(outputs.iter().map(|(name, arg)| (true, name.as_str(), arg)))
            .collect();
        args.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let mut key = Vec::with_capacity(2 * args.len() + scalars.len() + dims.len() + 2);
        key.push(args.len() as u64);
        for (_, _, arg) in args {
            if let Arg::Scalar(x) = arg {
                key.push(x.to_bits());
                continue;
            }
            for b in arg.buffers() {
                key.extend([backend.address(b), b.len() as u64]);
            }
        }
        key.push(scalars.len() as u64);
        key.extend(scalars.values().map(|v| v.to_bits()));
        key.extend(dims.values().map(|v| *v as u64));
        RunKey(key)
    }
}

/// One recording, with the transient buffers it uses.
pub(crate) struct Kept<B: Backend> {
    recording: B::Recording,
    _transient: Vec<Option<B::Buf>>,
}

/// The recorded runs of one plan on one backend.
pub(crate) type Recorded<B> = PlanRecordings<RunKey, Kept<B>>;

/// Why `plan`'s runs cannot be recorded, if they cannot.
fn not_recordable(plan: &Plan) -> Option<String> {
    if plan.partition.is_some() {
        return Some("the plan is partitioned over ranks".into());
    }
    library_call(plan)
}

/// The first of `plan`'s steps that calls a library (cuBLAS, cuSPARSE), named, if one does:
/// such plans are not recorded.
pub(crate) fn library_call(plan: &Plan) -> Option<String> {
    plan.steps.iter().enumerate().find_map(|(i, s)| match s.op {
        StepOp::Fused(_) | StepOp::Builtin(_) | StepOp::Copy => None,
        _ => Some(format!("step {i} ({}) is a library call", s.op_name())),
    })
}

/// Whether the settings let runs be recorded at all.
pub(crate) fn settings_allow() -> bool {
    let s = popcorn_dsl::settings::settings();
    !(s.no_graphs || s.sync || s.log.time)
}

pub(crate) fn log(plan: &Plan, what: &str) {
    if popcorn_dsl::settings::settings().log.graphs {
        eprintln!("[popcorn graphs] {}: {what}", plan.program);
    }
}

impl<B: Backend> Recorded<B> {
    /// Runs `plan` as [`execute`] does (only that where `allowed` is false): by replaying the recording of an earlier run with the
    /// same tensors, scalars and sizes where there is one, recording this run where it is the
    /// second with them, and queuing its steps one by one otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        allowed: bool,
        backend: &B,
        plan: &Plan,
        workspace: &Workspace<B>,
        inputs: &HashMap<String, Arg<'_, B::Buf>>,
        outputs: &HashMap<String, Arg<'_, B::Buf>>,
        scalars: &ScalarBindings,
        dims: &DimBindings,
    ) -> Result<(), RuntimeError> {
        let plain = || execute(backend, plan, workspace, inputs, outputs, scalars, dims);
        if !allowed || !backend.can_record() || !settings_allow() {
            return plain();
        }
        let mut state = self.lock()?;
        let allowed = state.allowed(|| {
            let why = not_recordable(plan);
            if let Some(why) = &why {
                log(plan, &format!("runs step by step: {why}"));
            }
            why
        });
        if !allowed {
            return plain();
        }
        let key = RunKey::new(backend, inputs, outputs, scalars, dims);
        match state.runs.sighting(&key) {
            Sighting::First => return plain(),
            Sighting::Record => {}
            Sighting::Replay(i) => {
                if backend.replay(&state.runs.get(i).recording)? {
                    self.count_replay();
                    return Ok(());
                }
                // Scratch memory moved since: record again.
                log(
                    plan,
                    "scratch memory reallocated since the recording: recording again",
                );
                state.runs.forget(i);
            }
        }
        // The second run with this key (or one whose recording went stale): record it.
        let transient = allocate_transient(backend, plan)?;
        let epoch = backend.recording_epoch();
        let recorded = backend.record(&mut || {
            execute_with(
                backend, plan, workspace, &transient, inputs, outputs, scalars, dims,
            )
        });
        let recording = match recorded {
            Ok(Some(r)) => r,
            Ok(None) => {
                state.refuse(format!("{} cannot record", backend.describe()));
                return plain();
            }
            Err(e) if backend.recording_epoch() != epoch => {
                // Memory the recording used moved meanwhile (another plan's run, perhaps on
                // another thread): this run goes step by step, a later one records again.
                log(
                    plan,
                    &format!("step by step this time: memory moved while recording ({e})"),
                );
                return plain();
            }
            Err(e) if e.is_interrupted_capture() => {
                // Another thread's call broke the capture off (a CUDA context opened or
                // dropped meanwhile synchronizes the device): this run goes step by step, a
                // later one records again, unless that keeps happening.
                let again = state.interrupted(e.to_string());
                log(
                    plan,
                    &format!(
                        "step by step this time: the recording was broken off ({e}){}",
                        if again {
                            ""
                        } else {
                            "; from now on step by step"
                        }
                    ),
                );
                return plain();
            }
            Err(e) => {
                log(
                    plan,
                    &format!("runs step by step: its recording failed: {e}"),
                );
                state.refuse(e.to_string());
                return plain();
            }
        };
        if !backend.replay(&recording)? {
            // Scratch memory moved between recording and replay (another thread): not kept.
            return plain();
        }
        self.count_replay();
        log(
            plan,
            &format!(
                "recorded ({} steps), replayed from now on for the same tensors",
                plan.steps.len()
            ),
        );
        state.recorded();
        state.runs.keep(
            key,
            Kept {
                recording,
                _transient: transient,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ElemType, HostSlice};
    use crate::cpu_backend::CpuBackend;
    use popcorn_dsl::Program;

    fn gpu_plan(src: &str, dims: &[(&str, usize)]) -> Plan {
        crate::test_steps::reference_gpu_plan(&Program::parse(src).unwrap(), dims)
    }

    #[test]
    fn plans_of_popcorns_kernels_are_recordable_and_library_calls_are_not() {
        let maps = gpu_plan(
            "fn f(x: Col[n], y: Col[n], a: Scalar) -> (z: Col[n], s: Scalar) { z = a * x + y; s = sum(z); }",
            &[("n", 1000)],
        );
        assert_eq!(not_recordable(&maps), None, "{maps}");
        let product = gpu_plan(
            "fn g(A: Dense[m, k], B: Dense[k, n]) -> (C: Dense[m, n]) { C = A * B; }",
            &[("m", 300), ("k", 200), ("n", 400)],
        );
        let why = not_recordable(&product).expect("a GEMM is a library call");
        assert!(why.contains("library call"), "{why}\n{product}");
    }

    #[test]
    fn a_run_key_names_every_tensor_scalar_and_size() {
        let b = CpuBackend::new();
        let x = b.upload(HostSlice::F64(&[1.0, 2.0])).unwrap();
        let y = b.alloc(ElemType::F64, 2).unwrap();
        let l = b.alloc(ElemType::U32, 2).unwrap();
        let dense = |buf| Arg::Dense {
            buf,
            rows: 2,
            cols: 1,
        };
        let ins = HashMap::from([("x".to_string(), dense(&x))]);
        let outs = HashMap::from([("y".to_string(), dense(&y))]);
        let scalars = ScalarBindings::from([("a".to_string(), 2.0)]);
        let dims = DimBindings::from([("n".to_string(), 2)]);
        let key = RunKey::new(&b, &ins, &outs, &scalars, &dims);
        assert_eq!(key, RunKey::new(&b, &ins, &outs, &scalars, &dims));
        // Another output tensor, another scalar value or another size: another key.
        let other = HashMap::from([("y".to_string(), dense(&x))]);
        assert_ne!(key, RunKey::new(&b, &ins, &other, &scalars, &dims));
        let index = HashMap::from([("y".to_string(), Arg::Index { buf: &l, len: 2 })]);
        assert_ne!(key, RunKey::new(&b, &ins, &index, &scalars, &dims));
        let a3 = ScalarBindings::from([("a".to_string(), 3.0)]);
        assert_ne!(key, RunKey::new(&b, &ins, &outs, &a3, &dims));
        let n3 = DimBindings::from([("n".to_string(), 3)]);
        assert_ne!(key, RunKey::new(&b, &ins, &outs, &scalars, &n3));
    }

    #[test]
    fn a_backend_that_cannot_record_runs_every_step() {
        let b = CpuBackend::new();
        let plan = gpu_plan(
            "fn f(x: Col[n], a: Scalar) -> (z: Col[n]) { z = a * x; }",
            &[("n", 3)],
        );
        let ws = Workspace::allocate(&b, &plan).unwrap();
        let x = b.upload(HostSlice::F32(&[1.0, 2.0, 3.0])).unwrap();
        let z = b.alloc(ElemType::F32, 3).unwrap();
        let ins = HashMap::from([(
            "x".to_string(),
            Arg::Dense {
                buf: &x,
                rows: 3,
                cols: 1,
            },
        )]);
        let outs = HashMap::from([(
            "z".to_string(),
            Arg::Dense {
                buf: &z,
                rows: 3,
                cols: 1,
            },
        )]);
        let scalars = ScalarBindings::from([("a".to_string(), 2.0)]);
        let dims = DimBindings::from([("n".to_string(), 3)]);
        let recorded = Recorded::<CpuBackend>::default();
        for _ in 0..4 {
            recorded
                .run(true, &b, &plan, &ws, &ins, &outs, &scalars, &dims)
                .unwrap();
        }
        assert_eq!(recorded.replays(), 0);
        assert_eq!(
            b.download(&z).unwrap(),
            crate::backend::HostVec::F32(vec![2.0, 4.0, 6.0])
        );
    }
}
