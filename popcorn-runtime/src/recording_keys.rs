//! Which runs of a plan get recorded: the rule both kinds of recorded runs follow (one
//! backend's, [`crate::recorded`]; a partitioned plan's ranks', [`crate::ranks`]). A recording
//! holds the addresses of the buffers it was made with, so it is kept by a key of them; the
//! first run with a key runs as usual, the second is recorded, later ones replay. A loop that
//! swaps two buffers has two keys, so several recordings are kept; both lists are bounded, the
//! oldest going first.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
