//! Collectives between the ranks of a partitioned plan: the [`Collectives`] trait a backend's
//! communication library implements (NCCL's `ncclAllGather` / `ncclAllReduce(ncclSum)` map onto
//! it one to one), and [`InMemory`], the ranks of one process exchanging through host memory.

use crate::backend::{Backend, BufferInfo, HostVec};
use crate::error::RuntimeError;

/// One all-gather, as the ranks of this process see it: entry `i` of `backends`, `parts` and
/// `wholes` belongs to rank `ranks[i]`; `lens` holds every rank's part length (this
/// process's and the others').
pub struct Gather<'g, B: Backend> {
    /// The ranks of this process, in increasing order.
    pub ranks: &'g [usize],
    /// Their backends.
    pub backends: &'g [&'g B],
    /// Their parts: a buffer and how many of its first elements are the part.
    pub parts: &'g [(&'g B::Buf, usize)],
    /// Every rank's part length, by rank.
    pub lens: &'g [usize],
    /// Their whole copies, written with every part in rank order.
    pub wholes: &'g [&'g B::Buf],
}

/// All-gather and all-reduce(sum) over the ranks of one partitioned run. Each method gets the
/// ranks this process runs (`ranks`, increasing), with their backends and buffers in the same
/// order; the other ranks, if any, run in other processes that the collectives reach.
pub trait Collectives<B: Backend> {
    /// What carries the data, for messages.
    fn describe(&self) -> String;

    /// Writes into every rank's whole copy the ranks' parts concatenated in rank order.
    fn all_gather(&self, gather: &Gather<'_, B>) -> Result<(), RuntimeError>;

    /// Replaces the first `len` elements of every rank's buffer by their element-wise sum over
    /// all ranks, added in rank order (rank 0 first).
    fn all_reduce_sum(
        &self,
        ranks: &[usize],
        backends: &[&B],
        bufs: &[&B::Buf],
        len: usize,
    ) -> Result<(), RuntimeError>;

    /// Waits until every rank's queued work has finished, or stops every rank when one fails
    /// or stops answering, with an error naming it and the cause, so that no rank waits for a
    /// peer that will never come. The runner calls it at the end of every run, failed or
    /// not. Collectives that finish before they return (in memory) have nothing to wait for.
    fn settle(&self, ranks: &[usize], backends: &[&B]) -> Result<(), RuntimeError> {
        let _ = (ranks, backends);
        Ok(())
    }

    /// Tells the other ranks that this process's run failed with `error`, so that none waits
    /// for it. Collectives whose ranks all live in this process have no one to tell.
    fn abandon(&self, error: &RuntimeError) {
        let _ = error;
    }
}

/// The ranks of one process, exchanging through host memory (download, combine, write back):
/// what the CPU ranks of tests use.
#[derive(Clone, Copy, Debug, Default)]
pub struct InMemory;

impl<B: Backend> Collectives<B> for InMemory {
    fn describe(&self) -> String {
        "in-memory collectives".into()
    }

    fn all_gather(&self, g: &Gather<'_, B>) -> Result<(), RuntimeError> {
        all_here(g.ranks, g.lens.len())?;
        check_ranks(g.backends, g.parts.len().max(g.wholes.len()))?;
        on_host(g.backends, g.parts, g.wholes, concatenated)
    }

    fn all_reduce_sum(
        &self,
        ranks: &[usize],
        backends: &[&B],
        bufs: &[&B::Buf],
        len: usize,
    ) -> Result<(), RuntimeError> {
        check_ranks(backends, bufs.len())?;
        all_here(ranks, bufs.len())?;
        let parts: Vec<(&B::Buf, usize)> = bufs.iter().map(|b| (*b, len)).collect();
        on_host(backends, &parts, bufs, summed)
    }
}

/// How the ranks' parts, read back in rank order, make one host vector: [`concatenated`] or
/// [`summed`] (`None` where there are no parts).
pub(crate) type Combine = fn(Vec<HostVec>) -> Result<Option<HostVec>, RuntimeError>;

/// Reads every rank's part (a buffer and how many of its first elements it is) back to the
/// host, combines them in rank order, and writes the result to every rank's `dests`.
fn on_host<B: Backend>(
    backends: &[&B],
    parts: &[(&B::Buf, usize)],
    dests: &[&B::Buf],
    combine: Combine,
) -> Result<(), RuntimeError> {
    let read = parts
        .iter()
        .zip(backends)
        .map(|((buf, len), backend)| prefix(backend.download(buf)?, *len))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(all) = combine(read)? else {
        return Ok(());
    };
    for (dest, backend) in dests.iter().zip(backends) {
        write_prefix(*backend, dest, &all)?;
    }
    Ok(())
}

/// Checks that `ranks` are all of `count` ranks (in-memory collectives see every rank).
fn all_here(ranks: &[usize], count: usize) -> Result<(), RuntimeError> {
    if ranks.len() == count && ranks.iter().enumerate().all(|(i, r)| i == *r) {
        Ok(())
    } else {
        Err(RuntimeError::Internal(
            "in-memory collectives need every rank in this process (ranks of other processes \
             exchange through the world's collectives)"
                .into(),
        ))
    }
}

/// Checks that there is one backend per rank's buffer.
fn check_ranks<B>(backends: &[&B], ranks: usize) -> Result<(), RuntimeError> {
    if backends.len() == ranks {
        Ok(())
    } else {
        Err(RuntimeError::Internal(format!(
            "a collective over {ranks} ranks was given {} backends",
            backends.len()
        )))
    }
}

fn mismatch(what: &str) -> RuntimeError {
    RuntimeError::Internal(format!("{what}: the ranks' buffers differ in element type"))
}

/// Applies `$body` to the vectors inside two [`HostVec`]s of one element type.
macro_rules! same_elem {
    ($a:expr, $b:expr, $x:ident, $y:ident => $body:expr, $what:expr) => {
        match ($a, $b) {
            (HostVec::F32($x), HostVec::F32($y)) => $body,
            (HostVec::F64($x), HostVec::F64($y)) => $body,
            (HostVec::U32($x), HostVec::U32($y)) => $body,
            (HostVec::I32($x), HostVec::I32($y)) => $body,
            (HostVec::Half(_, $x), HostVec::Half(_, $y)) => $body,
            _ => return Err(mismatch($what)),
        }
    };
}

/// The first `len` elements of `v`.
pub(crate) fn prefix(mut v: HostVec, len: usize) -> Result<HostVec, RuntimeError> {
    let have = v.as_slice().len();
    if have < len {
        return Err(RuntimeError::Internal(format!(
            "a rank's buffer holds {have} elements, {len} needed"
        )));
    }
    match &mut v {
        HostVec::F32(x) => x.truncate(len),
        HostVec::F64(x) => x.truncate(len),
        HostVec::U32(x) => x.truncate(len),
        HostVec::I32(x) => x.truncate(len),
        HostVec::Half(_, x) => x.truncate(len),
    }
    Ok(v)
}

/// Elements `range` of `v`.
pub(crate) fn slice(v: &HostVec, range: std::ops::Range<usize>) -> Result<HostVec, RuntimeError> {
    let short = || RuntimeError::Internal(format!("elements {range:?} of a shorter buffer"));
    Ok(match v {
        HostVec::F32(x) => HostVec::F32(x.get(range.clone()).ok_or_else(short)?.to_vec()),
        HostVec::F64(x) => HostVec::F64(x.get(range.clone()).ok_or_else(short)?.to_vec()),
        HostVec::U32(x) => HostVec::U32(x.get(range.clone()).ok_or_else(short)?.to_vec()),
        HostVec::I32(x) => HostVec::I32(x.get(range.clone()).ok_or_else(short)?.to_vec()),
        HostVec::Half(h, x) => HostVec::Half(*h, x.get(range.clone()).ok_or_else(short)?.to_vec()),
    })
}

/// `a` followed by `b`.
fn append(a: &mut HostVec, b: &HostVec) -> Result<(), RuntimeError> {
    same_elem!(a, b, x, y => x.extend_from_slice(y), "an all-gather");
    Ok(())
}

/// The parts one after another, in rank order (`None` where there are none).
pub(crate) fn concatenated(parts: Vec<HostVec>) -> Result<Option<HostVec>, RuntimeError> {
    folded(parts, append)
}

/// The parts' element-wise sum, added in rank order (rank 0 first; `None` where there are
/// none).
pub(crate) fn summed(parts: Vec<HostVec>) -> Result<Option<HostVec>, RuntimeError> {
    folded(parts, add)
}

/// The first part with every later one folded into it by `fold`, in rank order.
fn folded(
    parts: Vec<HostVec>,
    fold: fn(&mut HostVec, &HostVec) -> Result<(), RuntimeError>,
) -> Result<Option<HostVec>, RuntimeError> {
    let mut parts = parts.into_iter();
    let Some(mut all) = parts.next() else {
        return Ok(None);
    };
    for p in parts {
        fold(&mut all, &p)?;
    }
    Ok(Some(all))
}

/// `a += b`, element by element.
fn add(a: &mut HostVec, b: &HostVec) -> Result<(), RuntimeError> {
    same_elem!(a, b, x, y => x.iter_mut().zip(y.iter()).for_each(|(p, q)| *p += *q), "an all-reduce");
    Ok(())
}

/// Writes `data` into the first elements of `buf` (which may be longer).
pub(crate) fn write_prefix<B: Backend>(
    backend: &B,
    buf: &B::Buf,
    data: &HostVec,
) -> Result<(), RuntimeError> {
    let len = data.as_slice().len();
    if len == 0 {
        return Ok(());
    }
    if buf.len() == len {
        return backend.write(buf, data.as_slice());
    }
    // A longer buffer: keep what follows the prefix.
    let mut full = backend.download(buf)?;
    let rest = slice(&full, len..buf.len())?;
    full = data.clone();
    append(&mut full, &rest)?;
    backend.write(buf, full.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::HostSlice;
    use crate::cpu_backend::CpuBackend;

    #[test]
    fn gathers_in_rank_order_and_sums_in_place() {
        let b = CpuBackend::new();
        let p0 = b.upload(HostSlice::F64(&[1.0, 2.0, 9.0])).unwrap();
        let p1 = b.upload(HostSlice::F64(&[3.0])).unwrap();
        let w0 = b.alloc(crate::backend::ElemType::F64, 3).unwrap();
        let w1 = b.alloc(crate::backend::ElemType::F64, 3).unwrap();
        let gather = Gather {
            ranks: &[0, 1],
            backends: &[&b, &b],
            parts: &[(&p0, 2), (&p1, 1)],
            lens: &[2, 1],
            wholes: &[&w0, &w1],
        };
        InMemory.all_gather(&gather).unwrap();
        for w in [&w0, &w1] {
            assert_eq!(b.download(w).unwrap(), HostVec::F64(vec![1.0, 2.0, 3.0]));
        }
        let a = b.upload(HostSlice::F32(&[1.0, 2.0])).unwrap();
        let c = b.upload(HostSlice::F32(&[10.0, 20.0])).unwrap();
        InMemory
            .all_reduce_sum(&[0, 1], &[&b, &b], &[&a, &c], 2)
            .unwrap();
        for x in [&a, &c] {
            assert_eq!(b.download(x).unwrap(), HostVec::F32(vec![11.0, 22.0]));
        }
        let i = b.upload(HostSlice::U32(&[1])).unwrap();
        let err = InMemory
            .all_reduce_sum(&[0, 1], &[&b, &b], &[&a, &i], 1)
            .unwrap_err();
        assert!(err.to_string().contains("element type"), "{err}");
    }
}
