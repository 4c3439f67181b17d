//! Which runs of a plan get recorded: the rule both kinds of recorded runs follow (one
//! backend's, [`crate::recorded`]; a partitioned plan's ranks', [`crate::ranks`]). A recording
//! holds the addresses of the buffers it was made with, so it is kept by a key of them; the
//! first run with a key runs as usual, the second is recorded, later ones replay. A loop that
//! swaps two buffers has two keys, so several recordings are kept; both lists are bounded, the
//! oldest going first.

use crate::error::RuntimeError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Recordings kept per plan (an iteration swapping two tensors needs two).
pub(crate) const KEPT: usize = 4;

/// Keys seen once (not yet recorded) remembered per plan.
pub(crate) const SEEN: usize = 8;

/// What a plan's runs with a key should do ([`KeptRecordings::sighting`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sighting {
    /// Replay recording `i` ([`KeptRecordings::get`]).
    Replay(usize),
    /// The first run with this key: run as usual (the key is remembered).
    First,
    /// The second: record it ([`KeptRecordings::keep`]).
    Record,
}

/// The keys seen once and the recordings kept, by key, for one plan.
pub(crate) struct KeptRecordings<K, R> {
    seen: Vec<K>,
    kept: Vec<(K, R)>,
}

impl<K, R> Default for KeptRecordings<K, R> {
    fn default() -> Self {
        KeptRecordings {
            seen: Vec::new(),
            kept: Vec::new(),
        }
    }
}

impl<K: PartialEq, R> KeptRecordings<K, R> {
    /// What a run with `key` should do; a key not seen before is remembered (the oldest of
    /// [`SEEN`] forgotten).
    pub(crate) fn sighting(&mut self, key: &K) -> Sighting
    where
        K: Clone,
    {
        if let Some(i) = self.kept.iter().position(|(k, _)| k == key) {
            return Sighting::Replay(i);
        }
        if self.seen.contains(key) {
            return Sighting::Record;
        }
        if self.seen.len() == SEEN {
            self.seen.remove(0);
        }
        self.seen.push(key.clone());
        Sighting::First
    }

    /// The last key seen for the first time before `key` (to say how a new run differs).
    pub(crate) fn last_seen_before(&self, key: &K) -> Option<&K> {
        self.seen.iter().rev().find(|k| *k != key)
    }

    /// Recording `i` of a [`Sighting::Replay`].
    pub(crate) fn get(&self, i: usize) -> &R {
        &self.kept[i].1
    }

    /// Drops recording `i` (it may not be replayed any more); its key is to be recorded again.
    pub(crate) fn forget(&mut self, i: usize) {
        self.kept.remove(i);
    }

    /// Keeps a new recording of `key` (the oldest of [`KEPT`] dropped).
    pub(crate) fn keep(&mut self, key: K, recording: R) {
        if self.kept.len() == KEPT {
            self.kept.remove(0);
        }
        self.kept.push((key, recording));
    }
}

/// One plan's recorded runs, by key `K`, each kept as an `R`, behind one lock, with the number
/// of runs that replayed one.
pub(crate) struct PlanRecordings<K, R> {
    state: Mutex<RecordingState<K, R>>,
    replays: AtomicU64,
}

impl<K, R> Default for PlanRecordings<K, R> {
    fn default() -> Self {
        PlanRecordings {
            state: Mutex::new(RecordingState {
                refused: None,
                interruptions: 0,
                runs: KeptRecordings::default(),
            }),
            replays: AtomicU64::new(0),
        }
    }
}

impl<K, R> PlanRecordings<K, R> {
    /// How many runs replayed a recording.
    pub(crate) fn replays(&self) -> u64 {
        self.replays.load(Ordering::Relaxed)
    }

    /// Counts a run that replayed a recording.
    pub(crate) fn count_replay(&self) {
        self.replays.fetch_add(1, Ordering::Relaxed);
    }

    /// The plan's recordings, locked.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, RecordingState<K, R>>, RuntimeError> {
        self.state
            .lock()
            .map_err(|_| RuntimeError::Device("a plan's recordings' lock is poisoned".into()))
    }
}

/// What [`PlanRecordings`] keeps behind its lock.
pub(crate) struct RecordingState<K, R> {
    /// Whether the plan's runs may be recorded, once asked: `Some(None)` yes, `Some(Some(why))`
    /// no.
    refused: Option<Option<String>>,
    /// Recordings that another thread's call broke off in a row (since the last one made).
    interruptions: u32,
    /// The keys seen and the recordings kept.
    pub runs: KeptRecordings<K, R>,
}

impl<K, R> RecordingState<K, R> {
    /// Whether the plan's runs may be recorded: `why_not` is asked at the first run only (what
    /// it looks at does not change for a plan) and its answer kept, as is a later
    /// [`RecordingState::refuse`].
    pub(crate) fn allowed(&mut self, why_not: impl FnOnce() -> Option<String>) -> bool {
        self.refused.get_or_insert_with(why_not).is_none()
    }

    /// The plan's runs are not recorded from now on (`why`: a recording failed for good).
    pub(crate) fn refuse(&mut self, why: String) {
        self.refused = Some(Some(why));
    }

    /// A recording was made: the count of broken-off ones starts again.
    pub(crate) fn recorded(&mut self) {
        self.interruptions = 0;
    }

    /// Counts a recording broken off by another thread's call (`why`); whether a later run
    /// may record again: yes until [`MAX_INTERRUPTED_RECORDINGS`] in a row, then the plan is
    /// refused as by [`RecordingState::refuse`] (a break that keeps coming is no accident).
    pub(crate) fn interrupted(&mut self, why: String) -> bool {
        self.interruptions += 1;
        if self.interruptions >= MAX_INTERRUPTED_RECORDINGS {
            self.refuse(format!(
                "{} recordings broken off, the last: {why}",
                self.interruptions
            ));
            return false;
        }
        true
    }
}

/// How many recordings of one plan in a row may be broken off by other threads before its runs
/// go step by step for good.
pub(crate) const MAX_INTERRUPTED_RECORDINGS: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_records_again_after_a_few_broken_recordings_and_then_no_more() {
        let p: PlanRecordings<u32, &str> = PlanRecordings::default();
        let mut state = p.lock().unwrap();
        assert!(state.allowed(|| None));
        for _ in 1..MAX_INTERRUPTED_RECORDINGS {
            assert!(state.interrupted("broken".into()));
            assert!(state.allowed(|| Some("not asked again".into())));
        }
        // A recording made in between: the count starts again.
        state.recorded();
        for _ in 1..MAX_INTERRUPTED_RECORDINGS {
            assert!(state.interrupted("broken".into()));
        }
        assert!(!state.interrupted("broken".into()));
        assert!(!state.allowed(|| None), "refused for good");
    }

    #[test]
    fn the_first_run_of_a_key_runs_the_second_records_and_later_ones_replay() {
        let mut r: KeptRecordings<u32, &str> = KeptRecordings::default();
        assert_eq!(r.sighting(&1), Sighting::First);
        assert_eq!(r.sighting(&2), Sighting::First);
        assert_eq!(r.sighting(&1), Sighting::Record);
        r.keep(1, "one");
        assert_eq!(r.sighting(&1), Sighting::Replay(0));
        assert_eq!(*r.get(0), "one");
        // A recording that may not be replayed is recorded again at the next run.
        r.forget(0);
        assert_eq!(r.sighting(&1), Sighting::Record);
        assert_eq!(r.last_seen_before(&1), Some(&2));
    }

    #[test]
    fn both_lists_stay_bounded_oldest_first() {
        let mut r: KeptRecordings<usize, usize> = KeptRecordings::default();
        for key in 0..=SEEN {
            assert_eq!(r.sighting(&key), Sighting::First);
        }
        // Key 0 was forgotten when the ninth new key came: it runs as a first run again.
        assert_eq!(r.sighting(&0), Sighting::First);
        assert_eq!(r.sighting(&SEEN), Sighting::Record);
        for key in 0..=KEPT {
            r.keep(key, key);
        }
        assert_eq!(r.sighting(&KEPT), Sighting::Replay(KEPT - 1));
        assert_ne!(r.sighting(&0), Sighting::Replay(0), "the oldest went");
    }

    #[test]
    fn whether_a_plan_records_is_asked_once_and_a_refusal_stays() {
        let recordings: PlanRecordings<u32, ()> = PlanRecordings::default();
        let mut state = recordings.lock().unwrap();
        let mut asked = 0;
        assert!(state.allowed(|| {
            asked += 1;
            None
        }));
        assert!(state.allowed(|| {
            asked += 1;
            Some("never asked".into())
        }));
        assert_eq!(asked, 1);
        state.refuse("a recording failed".into());
        assert!(!state.allowed(|| None));
        drop(state);
        recordings.count_replay();
        assert_eq!(recordings.replays(), 1);
    }
}
