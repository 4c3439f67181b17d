//! Buffers the rank runner keeps from one run of a partitioned plan to the next: a run's own
//! buffers (each rank's rows and whole copies of the values it does not hand out as outputs)
//! would otherwise be allocated afresh every run, which on the host touches new pages and on a
//! GPU maps memory again. A run takes a spare buffer of its rank, element type and length
//! where there is one, and gives its own back at the end.
//!
//! What is kept is bounded: after a run, the spares are that run's buffers plus what earlier
//! runs left untaken, the latter dropped as soon as they would make the spares more than
//! twice the run's own. A context drops them all before it refuses a plan for want of memory.

use crate::backend::{BufferInfo, ElemType};
use std::collections::HashMap;
use std::sync::Mutex;

/// A buffer's key: its rank, element type and length.
type Key = (usize, ElemType, usize);

/// Spare buffers by rank, element type and length (see the module docs).
pub struct SpareBuffers<Buf> {
    spare: Mutex<HashMap<Key, Vec<Buf>>>,
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
        let buf = list.pop();
        if list.is_empty() {
            spare.remove(&(rank, elem, len));
        }
        buf
    }

    /// Keeps a run's own buffers (rank, buffer), and of the spares it left untaken as many as
    /// keep the whole within twice the run's bytes.
    pub(crate) fn give_back(&self, returned: Vec<(usize, Buf)>) {
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        let bytes = |b: &Buf| b.len() * b.elem().size_bytes();
        let own: usize = returned.iter().map(|(_, b)| bytes(b)).sum();
        let left: usize = spare.values().flatten().map(bytes).sum();
        if left > own {
            spare.clear();
        }
        for (rank, buf) in returned {
            spare
                .entry((rank, buf.elem(), buf.len()))
                .or_default()
                .push(buf);
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
                .map(|b| b.len() * b.elem().size_bytes())
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
        // A run keeps what an earlier one left within twice its own bytes...
        spares.give_back(vec![(2, Fake(ElemType::F64, 8, 4))]);
        assert_eq!(spares.bytes(), 64 + 64);
        // ...and a smaller run drops the leftovers that would pass that.
        spares.give_back(vec![(0, Fake(ElemType::F32, 1, 5))]);
        assert_eq!(spares.bytes(), 4);
        assert_eq!(
            spares.take(0, ElemType::F32, 1),
            Some(Fake(ElemType::F32, 1, 5))
        );
        spares.give_back(vec![(0, Fake(ElemType::F32, 2, 6))]);
        spares.clear();
        assert_eq!(spares.bytes(), 0);
    }
}
