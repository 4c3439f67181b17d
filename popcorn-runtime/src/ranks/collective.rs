//! Collectives between the ranks of a partitioned plan: the [`Collectives`] trait a backend's
//! communication library implements (NCCL's `ncclAllGather` / `ncclAllReduce(ncclSum)` map onto
//! it one to one), and [`InMemory`], the ranks of one process exchanging through host memory.

use crate::backend::{Backend, BufferInfo, HostVec};
use crate::error::RuntimeError;

/// All-gather and all-reduce(sum) over the ranks of one partitioned run. Each method gets
/// every rank's backend and buffer, in rank order (rank `r`'s buffers live on `backends[r]`).
pub trait Collectives<B: Backend> {
    /// What carries the data, for messages.
    fn describe(&self) -> String;

    /// Writes into every rank's `wholes[r]` the ranks' parts concatenated in rank order: rank
    /// `r`'s first `parts[r].1` elements of `parts[r].0`.
    fn all_gather(
        &self,
        backends: &[&B],
        parts: &[(&B::Buf, usize)],
        wholes: &[&B::Buf],
    ) -> Result<(), RuntimeError>;

    /// Replaces the first `len` elements of every rank's `bufs[r]` by their element-wise sum
    /// over the ranks, added in rank order (rank 0 first).
    fn all_reduce_sum(
        &self,
        backends: &[&B],
        bufs: &[&B::Buf],
        len: usize,
    ) -> Result<(), RuntimeError>;

    /// Waits until every rank's queued work has finished, or stops every rank when one fails
    /// or stops answering, with an error naming it and the cause, so that no rank waits for a
    /// peer that will never come. The runner calls it at the end of every run, failed or
    /// not. Collectives that finish before they return (in memory) have nothing to wait for.
    fn settle(&self, backends: &[&B]) -> Result<(), RuntimeError> {
        let _ = backends;
        Ok(())
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

    fn all_gather(
        &self,
        backends: &[&B],
        parts: &[(&B::Buf, usize)],
        wholes: &[&B::Buf],
    ) -> Result<(), RuntimeError> {
        check_ranks(backends, parts.len().max(wholes.len()))?;
        let mut whole: Option<HostVec> = None;
        for ((buf, len), backend) in parts.iter().zip(backends) {
            let part = prefix(backend.download(buf)?, *len)?;
            match &mut whole {
                None => whole = Some(part),
                Some(w) => append(w, &part)?,
            }
        }
        let Some(whole) = whole else {
            return Ok(());
        };
        for (w, backend) in wholes.iter().zip(backends) {
            write_prefix(*backend, w, &whole)?;
        }
        Ok(())
    }

    fn all_reduce_sum(
        &self,
        backends: &[&B],
        bufs: &[&B::Buf],
        len: usize,
    ) -> Result<(), RuntimeError> {
        check_ranks(backends, bufs.len())?;
        let mut sum: Option<HostVec> = None;
        for (buf, backend) in bufs.iter().zip(backends) {
            let part = prefix(backend.download(buf)?, len)?;
            match &mut sum {
                None => sum = Some(part),
                Some(s) => add(s, &part)?,
            }
        }
        let Some(sum) = sum else {
            return Ok(());
        };
        for (b, backend) in bufs.iter().zip(backends) {
            write_prefix(*backend, b, &sum)?;
        }
        Ok(())
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
pub(crate) fn append(a: &mut HostVec, b: &HostVec) -> Result<(), RuntimeError> {
    same_elem!(a, b, x, y => x.extend_from_slice(y), "an all-gather");
    Ok(())
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
        InMemory
            .all_gather(&[&b, &b], &[(&p0, 2), (&p1, 1)], &[&w0, &w1])
            .unwrap();
        for w in [&w0, &w1] {
            assert_eq!(b.download(w).unwrap(), HostVec::F64(vec![1.0, 2.0, 3.0]));
        }
        let a = b.upload(HostSlice::F32(&[1.0, 2.0])).unwrap();
        let c = b.upload(HostSlice::F32(&[10.0, 20.0])).unwrap();
        InMemory.all_reduce_sum(&[&b, &b], &[&a, &c], 2).unwrap();
        for x in [&a, &c] {
            assert_eq!(b.download(x).unwrap(), HostVec::F32(vec![11.0, 22.0]));
        }
        let i = b.upload(HostSlice::U32(&[1])).unwrap();
        let err = InMemory
            .all_reduce_sum(&[&b, &b], &[&a, &i], 1)
            .unwrap_err();
        assert!(err.to_string().contains("element type"), "{err}");
    }
}
