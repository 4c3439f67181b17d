//! Buffers the rank runner keeps from one run of a partitioned plan to the next: a run's own
//! buffers (each rank's rows and whole copies of the values it does not hand out as outputs)
//! would otherwise be allocated afresh every run, which on the host touches new pages and on a
//! GPU maps memory again. A run takes a spare buffer of its rank, element type and length
//! where there is one, and gives its own back at the end. Each buffer comes back with its
//! place (which value of which plan it held, a `Place`), and a run takes, of the spares that
//! fit, the one that held the same place before: the same value gets the same buffer run after
//! run, so a partitioned run recorded as graphs (which hold their buffers' addresses) finds
//! its buffers again.
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

/// Where a buffer served in a run: a value of a plan, held in rows or whole (any number that
/// tells such places apart; a buffer that held another place still serves).
pub(crate) type Place = u64;

/// Runs in a row a spare may be left untaken before it is dropped.
const KEPT_UNTAKEN: u32 = 2;

/// Spare buffers by rank, element type and length, each with the number of runs in a row that
/// left it untaken (see the module docs).
pub struct SpareBuffers<Buf> {
    spare: Mutex<HashMap<Key, Vec<Spare<Buf>>>>,
}

/// A spare buffer, the place it last held and the runs in a row that left it untaken.
struct Spare<Buf> {
    buf: Buf,
    place: Place,
    untaken: u32,
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

    /// A spare buffer of rank `rank` holding `len` elements of `elem`, if one is kept: the one
    /// that last held `place` where there is one.
    pub(crate) fn take(
        &self,
        rank: usize,
        elem: ElemType,
        len: usize,
        place: Place,
    ) -> Option<Buf> {
        let mut spare = self.spare.lock().ok()?;
        let list = spare.get_mut(&(rank, elem, len))?;
        let at = list
            .iter()
            .position(|s| s.place == place)
            .unwrap_or(list.len().checked_sub(1)?);
        let buf = list.swap_remove(at).buf;
        if list.is_empty() {
            spare.remove(&(rank, elem, len));
        }
        Some(buf)
    }

    /// Keeps a run's own buffers (rank, buffer, the place it held); the spares it left untaken
    /// age by one run, and those that [`KEPT_UNTAKEN`] runs in a row left untaken are dropped.
    pub(crate) fn give_back(&self, returned: Vec<(usize, Buf, Place)>) {
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        for list in spare.values_mut() {
            for s in list.iter_mut() {
                s.untaken += 1;
            }
            list.retain(|s| s.untaken < KEPT_UNTAKEN);
        }
        spare.retain(|_, list| !list.is_empty());
        for (rank, buf, place) in returned {
            spare
                .entry((rank, buf.elem(), buf.len()))
                .or_default()
                .push(Spare {
                    buf,
                    place,
                    untaken: 0,
                });
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
                .map(|s| s.buf.len() * s.buf.elem().size_bytes())
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
        assert!(spares.take(0, ElemType::F32, 8, 0).is_none());
        spares.give_back(vec![
            (0, Fake(ElemType::F32, 8, 1), 0),
            (1, Fake(ElemType::F32, 8, 2), 0),
            (0, Fake(ElemType::U32, 8, 3), 0),
        ]);
        assert_eq!(spares.bytes(), 96);
        assert_eq!(
            spares.take(1, ElemType::F32, 8, 0),
            Some(Fake(ElemType::F32, 8, 2))
        );
        assert!(spares.take(1, ElemType::F32, 8, 0).is_none(), "taken once");
        assert!(
            spares.take(0, ElemType::F32, 9, 0).is_none(),
            "another length"
        );
        // Another program's run leaves the first run's spares untaken once: they stay...
        spares.give_back(vec![(2, Fake(ElemType::F64, 8, 4), 0)]);
        assert_eq!(spares.bytes(), 64 + 64);
        assert_eq!(
            spares.take(0, ElemType::U32, 8, 0),
            Some(Fake(ElemType::U32, 8, 3))
        );
        spares.give_back(vec![(0, Fake(ElemType::U32, 8, 3), 0)]);
        // ...and go when a second run in a row leaves them (the F32 one of rank 0), while the
        // one taken in between starts over.
        spares.give_back(vec![]);
        assert!(
            spares.take(0, ElemType::F32, 8, 0).is_none(),
            "left untaken twice"
        );
        assert_eq!(
            spares.take(0, ElemType::U32, 8, 0),
            Some(Fake(ElemType::U32, 8, 3))
        );
        spares.give_back(vec![(0, Fake(ElemType::F32, 2, 6), 0)]);
        spares.clear();
        assert_eq!(spares.bytes(), 0);
    }

    #[test]
    fn a_place_gets_back_the_buffer_it_held() {
        let spares = SpareBuffers::new();
        spares.give_back(vec![
            (0, Fake(ElemType::F32, 8, 1), 10),
            (0, Fake(ElemType::F32, 8, 2), 20),
            (0, Fake(ElemType::F32, 8, 3), 30),
        ]);
        assert_eq!(
            spares.take(0, ElemType::F32, 8, 10),
            Some(Fake(ElemType::F32, 8, 1))
        );
        assert_eq!(
            spares.take(0, ElemType::F32, 8, 30),
            Some(Fake(ElemType::F32, 8, 3))
        );
        // A place no spare held takes any that fits.
        assert_eq!(
            spares.take(0, ElemType::F32, 8, 99),
            Some(Fake(ElemType::F32, 8, 2))
        );
        assert!(spares.take(0, ElemType::F32, 8, 20).is_none());
    }
}
