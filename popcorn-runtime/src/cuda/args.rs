//! Reading step arguments: checking kinds, element types and sizes before any device pointer
//! reaches a kernel or a library call, so a malformed call is an error rather than an
//! out-of-bounds access.

use crate::backend::{Arg, BufferInfo, ElemType};
use crate::cuda::errors::invalid;
use crate::cuda::memory::DeviceAddress;
use crate::error::RuntimeError;

/// A dense row-major operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dense {
    /// Device address.
    pub(crate) ptr: u64,
    /// Rows.
    pub(crate) rows: usize,
    /// Columns (the leading dimension).
    pub(crate) cols: usize,
}

impl Dense {
    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.rows * self.cols
    }
}

/// A CSR operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Csr {
    pub(crate) row_ptr: u64,
    pub(crate) col_idx: u64,
    pub(crate) values: u64,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) nnz: usize,
}

/// A short name of an argument's kind, for messages.
pub(crate) fn kind<B>(arg: &Arg<'_, B>) -> &'static str {
    match arg {
        Arg::Dense { .. } => "a dense matrix",
        Arg::Index { .. } => "an index vector",
        Arg::Csr { .. } => "a CSR matrix",
        Arg::Scalar(_) => "a scalar",
    }
}

/// Checks a buffer's element type and that it holds `needed` elements.
pub(crate) fn check_buffer<B: BufferInfo>(
    buf: &B,
    elem: ElemType,
    needed: usize,
    what: &str,
) -> Result<(), RuntimeError> {
    if buf.elem() != elem {
        return Err(invalid(format!(
            "{what}: expected {elem:?} elements, the buffer holds {:?}",
            buf.elem()
        )));
    }
    if buf.len() < needed {
        return Err(invalid(format!(
            "{what}: needs {needed} elements, the buffer has {}",
            buf.len()
        )));
    }
    Ok(())
}

/// A dense argument of element type `elem`.
pub(crate) fn dense<B: BufferInfo + DeviceAddress>(
    arg: &Arg<'_, B>,
    elem: ElemType,
    what: &str,
) -> Result<Dense, RuntimeError> {
    match arg {
        Arg::Dense { buf, rows, cols } => {
            let len = rows
                .checked_mul(*cols)
                .ok_or_else(|| invalid(format!("{what}: {rows} x {cols} overflows")))?;
            check_buffer(*buf, elem, len, what)?;
            Ok(Dense {
                ptr: buf.address(),
                rows: *rows,
                cols: *cols,
            })
        }
        other => Err(invalid(format!(
            "{what}: expected a dense matrix, got {}",
            kind(other)
        ))),
    }
}

/// A `u32` index vector (`Index`, or a dense value with `u32` elements), as address and length.
pub(crate) fn index<B: BufferInfo + DeviceAddress>(
    arg: &Arg<'_, B>,
    what: &str,
) -> Result<(u64, usize), RuntimeError> {
    match arg {
        Arg::Index { buf, len } => {
            check_buffer(*buf, ElemType::U32, *len, what)?;
            Ok((buf.address(), *len))
        }
        Arg::Dense { buf, rows, cols } if buf.elem() == ElemType::U32 => {
            let len = rows * cols;
            check_buffer(*buf, ElemType::U32, len, what)?;
            Ok((buf.address(), len))
        }
        other => Err(invalid(format!(
            "{what}: expected an index vector, got {}",
            kind(other)
        ))),
    }
}

/// A CSR argument with values of type `elem`.
pub(crate) fn csr<B: BufferInfo + DeviceAddress>(
    arg: &Arg<'_, B>,
    elem: ElemType,
    what: &str,
) -> Result<Csr, RuntimeError> {
    match arg {
        Arg::Csr {
            row_ptr,
            col_idx,
            values,
            rows,
            cols,
            nnz,
        } => {
            check_buffer(
                *row_ptr,
                ElemType::I32,
                rows + 1,
                &format!("{what} (row offsets)"),
            )?;
            check_buffer(
                *col_idx,
                ElemType::I32,
                *nnz,
                &format!("{what} (column indices)"),
            )?;
            check_buffer(*values, elem, *nnz, &format!("{what} (values)"))?;
            Ok(Csr {
                row_ptr: row_ptr.address(),
                col_idx: col_idx.address(),
                values: values.address(),
                rows: *rows,
                cols: *cols,
                nnz: *nnz,
            })
        }
        other => Err(invalid(format!(
            "{what}: expected a CSR matrix, got {}",
            kind(other)
        ))),
    }
}

/// Checks that a step received `inputs` and `outputs` arguments.
pub(crate) fn count<B>(
    op: &str,
    inputs: &[Arg<'_, B>],
    outputs: &[Arg<'_, B>],
    want_in: usize,
    want_out: usize,
) -> Result<(), RuntimeError> {
    if inputs.len() != want_in || outputs.len() != want_out {
        return Err(invalid(format!(
            "{op} takes {want_in} input(s) and {want_out} output(s), got {} and {}",
            inputs.len(),
            outputs.len()
        )));
    }
    Ok(())
}

/// Checks a shape: `got` must equal `want`.
pub(crate) fn shape(
    what: &str,
    got: (usize, usize),
    want: (usize, usize),
) -> Result<(), RuntimeError> {
    if got != want {
        return Err(invalid(format!(
            "{what} is {} x {} but the step needs {} x {}",
            got.0, got.1, want.0, want.1
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod fake {
    //! A host-side stand-in for device buffers, for testing argument handling without a GPU.
    use super::*;

    /// A buffer with an element type, a length and a made-up address.
    pub(crate) struct FakeBuf {
        pub(crate) elem: ElemType,
        pub(crate) len: usize,
        pub(crate) addr: u64,
    }

    impl BufferInfo for FakeBuf {
        fn elem(&self) -> ElemType {
            self.elem
        }
        fn len(&self) -> usize {
            self.len
        }
    }

    impl DeviceAddress for FakeBuf {
        fn address(&self) -> u64 {
            self.addr
        }
    }

    /// A fake buffer.
    pub(crate) fn buf(elem: ElemType, len: usize, addr: u64) -> FakeBuf {
        FakeBuf { elem, len, addr }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::buf;
    use super::*;

    #[test]
    fn dense_arguments_are_checked() {
        let b = buf(ElemType::F32, 12, 0x1000);
        let ok = Arg::Dense {
            buf: &b,
            rows: 3,
            cols: 4,
        };
        assert_eq!(
            dense(&ok, ElemType::F32, "x").ok(),
            Some(Dense {
                ptr: 0x1000,
                rows: 3,
                cols: 4
            })
        );
        assert!(dense(&ok, ElemType::F64, "x").is_err());
        let too_big = Arg::Dense {
            buf: &b,
            rows: 4,
            cols: 4,
        };
        let e = dense(&too_big, ElemType::F32, "the input")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("needs 16 elements, the buffer has 12"), "{e}");
        assert!(dense(
            &Arg::<super::fake::FakeBuf>::Scalar(1.0),
            ElemType::F32,
            "x"
        )
        .is_err());
    }

    #[test]
    fn csr_arguments_check_all_three_arrays() {
        let rp = buf(ElemType::I32, 4, 1);
        let ci = buf(ElemType::I32, 5, 2);
        let v = buf(ElemType::F64, 5, 3);
        let arg = Arg::Csr {
            row_ptr: &rp,
            col_idx: &ci,
            values: &v,
            rows: 3,
            cols: 7,
            nnz: 5,
        };
        let c = csr(&arg, ElemType::F64, "S").ok();
        assert_eq!(
            c.map(|c| (c.row_ptr, c.col_idx, c.values, c.nnz)),
            Some((1, 2, 3, 5))
        );
        assert!(csr(&arg, ElemType::F32, "S").is_err());
        let short = Arg::Csr {
            row_ptr: &rp,
            col_idx: &ci,
            values: &v,
            rows: 4,
            cols: 7,
            nnz: 5,
        };
        assert!(csr(&short, ElemType::F64, "S").is_err());
    }

    #[test]
    fn index_arguments_need_u32() {
        let u = buf(ElemType::U32, 10, 9);
        let f = buf(ElemType::F32, 10, 9);
        assert_eq!(
            index(&Arg::Index { buf: &u, len: 10 }, "labels").ok(),
            Some((9, 10))
        );
        assert!(index(&Arg::Index { buf: &f, len: 10 }, "labels").is_err());
        assert!(index(&Arg::Index { buf: &u, len: 11 }, "labels").is_err());
    }
}
