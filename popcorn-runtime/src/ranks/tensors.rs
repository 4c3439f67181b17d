//! Tensors held by the ranks of a partitioned context: what each rank holds of an output of
//! [`super::execute_ranked`] ([`RankHeld`]: its block of rows and/or a whole copy), read back
//! and written from the host, and handed to the next run as [`RankForms`].

use super::collective::{concatenated, prefix, slice, write_prefix};
use super::{first, RankForms, RankHeld};
use crate::backend::{Arg, Backend, HostVec};
use crate::error::RuntimeError;
use crate::tensor::TensorShape;

/// Rows and columns of a dense or index tensor (an index vector is one column).
fn rows_cols(shape: TensorShape) -> Result<(usize, usize), RuntimeError> {
    match shape {
        TensorShape::Dense { rows, cols } => Ok((rows, cols)),
        TensorShape::Index { len } => Ok((len, 1)),
        TensorShape::Csr { .. } => Err(RuntimeError::Internal(
            "a CSR tensor is never held by ranks".into(),
        )),
    }
}

/// The whole value on the host: every rank's rows in rank order where each holds its rows,
/// else rank 0's whole copy. `backends[r]` is rank `r`'s.
pub(crate) fn to_host<B: Backend>(
    backends: &[&B],
    held: &[RankHeld<B::Buf>],
    shape: TensorShape,
) -> Result<HostVec, RuntimeError> {
    let (rows, cols) = rows_cols(shape)?;
    super::whole_on_host(backends, held, rows, cols)
}

/// The whole value on the host in a run over processes ([`super::world`]), on `backend`, the
/// backend of this process's rank `rank`: its whole copy, else every rank's rows gathered
/// through `channel`, in rank order. Every process must read the value at the same point.
pub(crate) fn to_host_in_world<B: Backend>(
    backend: &B,
    held: &[RankHeld<B::Buf>],
    shape: TensorShape,
    rank: usize,
    channel: &super::world::HostChannel,
) -> Result<HostVec, RuntimeError> {
    let (rows, cols) = rows_cols(shape)?;
    let mine = held
        .get(rank)
        .ok_or_else(|| RuntimeError::Internal(format!("no part of rank {rank}")))?;
    if let Some(whole) = first(&mine.whole) {
        return prefix(backend.download(whole)?, rows * cols);
    }
    let buf = first(&mine.rows).ok_or_else(|| {
        RuntimeError::Internal("a ranked tensor with nothing on this rank".into())
    })?;
    let part = prefix(backend.download(buf)?, mine.row_count * cols)?;
    concatenated(super::world::gather_host(channel, &part)?)?
        .ok_or_else(|| RuntimeError::Internal("a gather over no ranks".into()))
}

/// Writes `data` (the whole value) into every form every rank holds.
pub(crate) fn write<B: Backend>(
    backends: &[&B],
    held: &[RankHeld<B::Buf>],
    shape: TensorShape,
    data: &HostVec,
) -> Result<(), RuntimeError> {
    let (_, cols) = rows_cols(shape)?;
    let mut first_row = 0;
    for (h, backend) in held.iter().zip(backends) {
        if let Some(whole) = first(&h.whole) {
            write_prefix(*backend, whole, data)?;
        }
        if let Some(rows) = first(&h.rows) {
            let block = slice(data, first_row * cols..(first_row + h.row_count) * cols)?;
            write_prefix(*backend, rows, &block)?;
        }
        first_row += h.row_count;
    }
    Ok(())
}

/// Sets every element of every form to `value`.
pub(crate) fn fill<B: Backend>(
    backends: &[&B],
    held: &[RankHeld<B::Buf>],
    value: f64,
) -> Result<(), RuntimeError> {
    for (h, backend) in held.iter().zip(backends) {
        for buf in h.whole.iter().chain(h.rows.iter()).flatten() {
            backend.fill(buf, value)?;
        }
    }
    Ok(())
}

/// The ranks' forms of a ranked tensor as arguments of the next run.
pub(crate) fn forms<Buf>(
    held: &[RankHeld<Buf>],
    shape: TensorShape,
) -> Result<Vec<RankForms<'_, Buf>>, RuntimeError> {
    let (rows, cols) = rows_cols(shape)?;
    fn arg<Buf>(
        buf: &Option<Vec<Buf>>,
        rows: usize,
        cols: usize,
        shape: TensorShape,
    ) -> Option<Arg<'_, Buf>> {
        first(buf).map(|buf| match shape {
            TensorShape::Index { .. } => Arg::Index { buf, len: rows },
            _ => Arg::Dense { buf, rows, cols },
        })
    }
    Ok(held
        .iter()
        .map(|h| RankForms {
            whole: arg(&h.whole, rows, cols, shape),
            rows: arg(&h.rows, h.row_count, cols, shape),
        })
        .collect())
}
