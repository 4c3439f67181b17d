//! Buffers the rank runner keeps from one run of a partitioned plan to the next: a run's own
//! buffers (each rank's rows and whole copies of the values it does not hand out as outputs)
//! would otherwise be allocated afresh every run, which on the host touches new pages and on a
//! GPU maps memory again. A run takes a spare buffer of its rank, element type and length
//! where there is one, and gives its own back at the end.
//!
//! What is kept is bounded: a spare that two runs in a row leave untaken is dropped, so the
//! spares are at most the buffers of the last three runs (two programs run in turn, as a fit's
//! iteration and another step, keep theirs; sizes that change run to run do not pile up). A
//! context drops them all before it refuses a plan for want of memory.

use crate::backend::{BufferInfo, ElemType};
use std::collections::HashMap;
use std::sync::Mutex;

/// A buffer's key: its rank, element type and length.
type Key = (usize, ElemType, usize);

/// Runs in a row a spare may be left untaken before it is dropped.
const KEPT_UNTAKEN: u32 = 2;

/// Spare buffers by rank, element type and length, each with the number of runs in a row that
/// left it untaken (see the module docs).
pub struct SpareBuffers<Buf> {
    spare: Mutex<HashMap<Key, Vec<(Buf, u32)>>>,
}

impl<Buf> Default for SpareBuffers<Buf> {
    fn default() -> Self {
        SpareBuffers {
            spare: Mutex::new(HashMap::new()),
        }
    }
}

impl<Buf: BufferInfo> SpareBuffers<Buf> {
    /// No spares.
    pub fn new() -> Self {
        Self::default()
    }

    /// A spare buffer of rank `rank` holding `len` elements of `elem`, if one is kept.
    pub(crate) fn take(&self, rank: usize, elem: ElemType, len: usize) -> Option<Buf> {
        let mut spare = self.spare.lock().ok()?;
        let list = spare.get_mut(&(rank, elem, len))?;
        let buf = list.pop().map(|(buf, _)| buf);
        if list.is_empty() {
            spare.remove(&(rank, elem, len));
        }
        buf
    }

    /// Keeps a run's own buffers (rank, buffer); the spares it left untaken age by one run, and
    /// those that [`KEPT_UNTAKEN`] runs in a row left untaken are dropped.
    pub(crate) fn give_back(&self, returned: Vec<(usize, Buf)>) {
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        for list in spare.values_mut() {
            for (_, untaken) in list.iter_mut() {
                *untaken += 1;
            }
            list.retain(|(_, untaken)| *untaken < KEPT_UNTAKEN);
        }
        spare.retain(|_, list| !list.is_empty());
        for (rank, buf) in returned {
            spare
                .entry((rank, buf.elem(), buf.len()))
                .or_default()
                .push((buf, 0));
        }
    }

    /// Drops every spare buffer.
    pub fn clear(&self) {
        if let Ok(mut spare) = self.spare.lock() {
            spare.clear();
        }
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.spare.lock().map_or(0, |s| {
            s.values()
                .flatten()
                .map(|(b, _)| b.len() * b.elem().size_bytes())
                .sum()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in buffer: its type, length and a mark to tell buffers apart.
    #[derive(Debug, PartialEq)]
    struct Fake(ElemType, usize, u32);

    impl BufferInfo for Fake {
        fn elem(&self) -> ElemType {
            self.0
        }
        fn len(&self) -> usize {
            self.1
        }
    }

    #[test]
    fn buffers_come_back_by_rank_type_and_length_and_stay_bounded() {
        let spares = SpareBuffers::new();
        assert!(spares.take(0, ElemType::F32, 8).is_none());
        spares.give_back(vec![
            (0, Fake(ElemType::F32, 8, 1)),
            (1, Fake(ElemType::F32, 8, 2)),
            (0, Fake(ElemType::U32, 8, 3)),
        ]);
        assert_eq!(spares.bytes(), 96);
        assert_eq!(
            spares.take(1, ElemType::F32, 8),
            Some(Fake(ElemType::F32, 8, 2))
        );
        assert!(spares.take(1, ElemType::F32, 8).is_none(), "taken once");
        assert!(spares.take(0, ElemType::F32, 9).is_none(), "another length");
        // Another program's run leaves the first run's spares untaken once: they stay...
        spares.give_back(vec![(2, Fake(ElemType::F64, 8, 4))]);
        assert_eq!(spares.bytes(), 64 + 64);
        assert_eq!(
            spares.take(0, ElemType::U32, 8),
            Some(Fake(ElemType::U32, 8, 3))
        );
        spares.give_back(vec![(0, Fake(ElemType::U32, 8, 3))]);
        // ...and go when a second run in a row leaves them (the F32 one of rank 0), while the
        // one taken in between starts over.
        spares.give_back(vec![]);
        assert!(
            spares.take(0, ElemType::F32, 8).is_none(),
            "left untaken twice"
        );
        assert_eq!(
            spares.take(0, ElemType::U32, 8),
            Some(Fake(ElemType::U32, 8, 3))
        );
        spares.give_back(vec![(0, Fake(ElemType::F32, 2, 6))]);
        spares.clear();
        assert_eq!(spares.bytes(), 0);
    }
}
