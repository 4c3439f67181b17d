//! Partitioned runs recorded once and replayed: each of this process's ranks' share of a run
//! (its steps and its side of every collective) as one graph per rank, queued with one launch
//! each instead of a launch per step and rank from the host ([`Backend::record_together`],
//! [`Backend::replay_together`]).
//!
//! As for runs on one backend ([`crate::recorded`]), a recording holds the addresses of every
//! buffer it was made with, so it is kept by a key of all of them (every rank's own buffers
//! and copies, every input's forms), the scalars and the sizes; the first run with a key runs
//! step by step, the second is recorded and replayed, later ones replay
//! ([`crate::recording_keys`]). Nothing is recorded for plans with library calls, where a
//! rank's backend cannot record, where two ranks share a backend, under `POPCORN_NO_GRAPHS`,
//! `POPCORN_SYNC` or `POPCORN_LOG=time`, or once a recording failed (the run then goes step by
//! step, `POPCORN_LOG=graphs` says why).

use super::{RankInput, Run};
use crate::backend::{Backend, BufferInfo};
use crate::error::RuntimeError;
use crate::recorded::log;
use crate::recording_keys::{PlanRecordings, Sighting};

/// One recorded run: a graph per local rank (in the order of the run's local ranks) and which
/// forms of each value the run leaves written.
pub(crate) struct Kept<B: Backend> {
    recordings: Vec<B::Recording>,
    rows_ok: Vec<bool>,
    whole_ok: Vec<bool>,
}

/// The recorded runs of one partitioned plan on one context's ranks.
pub(crate) type RankRecorded<B> = PlanRecordings<Vec<u64>, Kept<B>>;

impl<B: Backend> RankRecorded<B> {
    /// Queues `run`'s work by replaying its recordings where it has them (recording them first
    /// where this is the second run with its buffers): `Ok(true)` where the work is queued
    /// (the caller then waits for the ranks to settle), `Ok(false)` where the caller must
    /// queue it step by step (nothing was queued, and the run is as it was).
    pub(super) fn queue(
        &self,
        run: &mut Run<'_, '_, B>,
        collectives: &dyn super::Collectives<B>,
    ) -> Result<bool, RuntimeError> {
        let mut state = self.lock()?;
        let backends = run.local_backends();
        let allowed = state.allowed(|| {
            let why = crate::recorded::library_call(run.plan).or_else(|| not_recordable(&backends));
            if let Some(why) = &why {
                log(run.plan, &format!("runs step by step: {why}"));
            }
            why
        });
        if !allowed {
            return Ok(false);
        }
        let key = run.recording_key();
        match state.runs.sighting(&key) {
            Sighting::First => {
                if let Some(last) = state.runs.last_seen_before(&key) {
                    let differ = last.iter().zip(&key).filter(|(a, b)| a != b).count();
                    log(
                        run.plan,
                        &format!(
                            "a run on buffers not seen before ({differ} of {} words of its key \
                             differ from the last new run's): step by step",
                            key.len()
                        ),
                    );
                }
                return Ok(false);
            }
            Sighting::Record => {}
            Sighting::Replay(i) => {
                let kept = state.runs.get(i);
                let together: Vec<(&B, &B::Recording)> =
                    backends.iter().copied().zip(&kept.recordings).collect();
                if B::replay_together(&together)? {
                    run.rows_ok.clone_from(&kept.rows_ok);
                    run.whole_ok.clone_from(&kept.whole_ok);
                    self.count_replay();
                    return Ok(true);
                }
                log(
                    run.plan,
                    "scratch memory reallocated since the recording: recording again",
                );
                state.runs.forget(i);
            }
        }
        // The second run with this key: record every rank's share, nothing runs meanwhile.
        let before = (run.rows_ok.clone(), run.whole_ok.clone());
        let epoch = backends.first().map_or(0, |b| b.recording_epoch());
        let moved = |backends: &[&B]| backends.first().map_or(0, |b| b.recording_epoch()) != epoch;
        let recorded = B::record_together(&backends, &mut || run.schedule(collectives, None));
        let recordings = match recorded {
            Ok(Some(r)) => r,
            Ok(None) => {
                state.refuse("a rank's backend cannot record".into());
                (run.rows_ok, run.whole_ok) = before;
                return Ok(false);
            }
            Err(e) if moved(&backends) => {
                // Memory the recording used moved meanwhile: step by step this time, a later
                // run records again.
                log(
                    run.plan,
                    &format!("step by step this time: memory moved while recording ({e})"),
                );
                (run.rows_ok, run.whole_ok) = before;
                return Ok(false);
            }
            Err(e) => {
                log(
                    run.plan,
                    &format!("runs step by step: its recording failed: {e}"),
                );
                state.refuse(e.to_string());
                (run.rows_ok, run.whole_ok) = before;
                return Ok(false);
            }
        };
        let together: Vec<(&B, &B::Recording)> =
            backends.iter().copied().zip(&recordings).collect();
        if !B::replay_together(&together)? {
            // Scratch memory moved between recording and replay (another thread): not kept.
            (run.rows_ok, run.whole_ok) = before;
            return Ok(false);
        }
        self.count_replay();
        log(
            run.plan,
            &format!(
                "recorded over {} ranks, replayed from now on for the same buffers",
                backends.len()
            ),
        );
        state.runs.keep(
            key,
            Kept {
                recordings,
                rows_ok: run.rows_ok.clone(),
                whole_ok: run.whole_ok.clone(),
            },
        );
        Ok(true)
    }
}

/// Why the ranks on `backends` cannot record their runs, if they cannot.
fn not_recordable<B: Backend>(backends: &[&B]) -> Option<String> {
    if !crate::recorded::settings_allow() {
        return Some("graphs are off (POPCORN_NO_GRAPHS, POPCORN_SYNC or POPCORN_LOG=time)".into());
    }
    if let Some(b) = backends.iter().find(|b| !b.can_record()) {
        return Some(format!("{} cannot record", b.describe()));
    }
    let shared = backends
        .iter()
        .enumerate()
        .any(|(i, a)| backends[..i].iter().any(|b| std::ptr::eq(*a, *b)));
    shared.then(|| "ranks share a backend".into())
}

impl<B: Backend> Run<'_, '_, B> {
    /// What a recording of this run holds: the address and length of every buffer of this
    /// process's ranks (their own, their copies of inputs, the inputs' forms), then the
    /// scalars and the sizes.
    fn recording_key(&self) -> Vec<u64> {
        let mut key = Vec::new();
        let push = |key: &mut Vec<u64>, b: &B, buf: &B::Buf| {
            key.extend([b.address(buf), buf.len() as u64])
        };
        for &r in &self.local {
            let b = self.backends[r];
            let store = &self.ranks[r];
            for slot in store.rows.iter().chain(&store.whole) {
                for buf in slot.iter().flatten() {
                    push(&mut key, b, buf);
                }
            }
            let mut names: Vec<&String> = store.inputs.keys().collect();
            names.sort();
            for name in names {
                for buf in &store.inputs[name] {
                    push(&mut key, b, buf);
                }
            }
        }
        let mut names: Vec<&String> = self.inputs.keys().collect();
        names.sort();
        for name in names {
            match &self.inputs[name] {
                RankInput::Whole(crate::backend::Arg::Scalar(x)) => key.push(x.to_bits()),
                RankInput::Whole(arg) => {
                    for buf in arg.buffers() {
                        push(&mut key, self.home, buf);
                    }
                }
                RankInput::Ranked(forms) => {
                    for &r in &self.local {
                        let Some(f) = forms.get(r) else { continue };
                        for arg in [&f.rows, &f.whole].into_iter().flatten() {
                            for buf in arg.buffers() {
                                push(&mut key, self.backends[r], buf);
                            }
                        }
                    }
                }
            }
        }
        key.extend(self.scalars.values().map(|v| v.to_bits()));
        key.extend(self.dims.values().map(|v| *v as u64));
        key
    }
}
