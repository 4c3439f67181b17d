//! The CPU backend: plan steps on host memory through the primitives of [`crate::cpu`]
//! (multithreaded with rayon). It is the fallback where no GPU exists and the reference every
//! GPU result is tested against.

use crate::backend::{
    to_half_bits, Arg, Backend, BufferInfo, ElemType, HostSlice, HostVec, NoRecording,
};
use crate::cpu::{self, CsrRef, FusedArg, FusedOut, Real};
use crate::error::RuntimeError;
use crate::host_memory;
use popcorn_dsl::ops::Builtin;
use popcorn_dsl::plan::{Step, StepOp};
use popcorn_dsl::{DType, Dim, Target};
use std::ops::Deref;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

/// A buffer in host memory (counted in its backend's held bytes while it lives).
pub struct CpuBuffer {
    data: RwLock<HostVec>,
    elem: ElemType,
    len: usize,
    held: host_memory::Held,
}

impl CpuBuffer {
    fn new(data: HostVec, elem: ElemType, len: usize, held: &host_memory::Held) -> CpuBuffer {
        held.hold(Self::bytes(elem, len));
        CpuBuffer {
            data: RwLock::new(data),
            elem,
            len,
            held: held.clone(),
        }
    }

    fn bytes(elem: ElemType, len: usize) -> u64 {
        (len as u64).saturating_mul(elem.size_bytes() as u64)
    }
}

impl Drop for CpuBuffer {
    fn drop(&mut self) {
        self.held.release(Self::bytes(self.elem, self.len));
    }
}

impl BufferInfo for CpuBuffer {
    fn elem(&self) -> ElemType {
        self.elem
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl CpuBuffer {
    fn read(&self) -> Result<RwLockReadGuard<'_, HostVec>, RuntimeError> {
        self.data.read().map_err(|_| {
            RuntimeError::Internal("a buffer lock was poisoned by an earlier panic".into())
        })
    }
    fn write(&self) -> Result<RwLockWriteGuard<'_, HostVec>, RuntimeError> {
        self.data.write().map_err(|_| {
            RuntimeError::Internal("a buffer lock was poisoned by an earlier panic".into())
        })
    }
}

/// The CPU backend.
pub struct CpuBackend {
    /// The most host memory its buffers may take (`POPCORN_MEMORY_LIMIT`), in bytes.
    memory_limit: Option<u64>,
    /// What its live buffers hold.
    held: host_memory::Held,
}

impl CpuBackend {
    /// A backend on the global rayon pool, its buffers limited by `POPCORN_MEMORY_LIMIT`.
    pub fn new() -> CpuBackend {
        CpuBackend::with_memory_limit(popcorn_dsl::settings::settings().memory_limit)
    }

    /// A backend whose buffers may take at most `limit` bytes of host memory together, besides
    /// what the system has available.
    pub fn with_memory_limit(limit: Option<u64>) -> CpuBackend {
        CpuBackend {
            memory_limit: limit,
            held: host_memory::Held::default(),
        }
    }

    /// The limit its buffers live under, in bytes.
    pub fn memory_limit(&self) -> Option<u64> {
        self.memory_limit
    }

    /// A buffer of `len` elements of `elem`, zeroed, allocated without aborting.
    fn zeroed(&self, elem: ElemType, len: usize) -> Result<HostVec, RuntimeError> {
        let what = "a host buffer";
        let limit = (self.memory_limit, self.held.bytes());
        Ok(match elem {
            ElemType::F32 => HostVec::F32(host_memory::try_vec(len, 0.0, what, limit)?),
            ElemType::F64 => HostVec::F64(host_memory::try_vec(len, 0.0, what, limit)?),
            ElemType::U32 => HostVec::U32(host_memory::try_vec(len, 0, what, limit)?),
            ElemType::I32 => HostVec::I32(host_memory::try_vec(len, 0, what, limit)?),
            ElemType::Half(h) => HostVec::Half(h, host_memory::try_vec(len, 0, what, limit)?),
        })
    }
}

/// Element types the CPU backend stores in a [`HostVec`].
trait HostElem: Sized {
    fn slice(v: &HostVec) -> Option<&[Self]>;
    fn slice_mut(v: &mut HostVec) -> Option<&mut [Self]>;
}

macro_rules! host_elem {
    ($t:ty, $variant:ident) => {
        impl HostElem for $t {
            fn slice(v: &HostVec) -> Option<&[$t]> {
                match v {
                    HostVec::$variant(x) => Some(x),
                    _ => None,
                }
            }
            fn slice_mut(v: &mut HostVec) -> Option<&mut [$t]> {
                match v {
                    HostVec::$variant(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}
host_elem!(f32, F32);
host_elem!(f64, F64);
host_elem!(u32, U32);
host_elem!(i32, I32);

/// An input's data: a read lock, or a copy when the same step writes the buffer (in place).
enum Held<'a> {
    Guard(RwLockReadGuard<'a, HostVec>),
    Copy(HostVec),
    /// The step's output itself, which a fused map reads in place (nothing is held: the
    /// output's write guard gives the values, see `reads_in_place`).
    InPlace,
}

/// What an in-place input holds: nothing.
static NOTHING: HostVec = HostVec::U32(Vec::new());

impl Deref for Held<'_> {
    type Target = HostVec;
    fn deref(&self) -> &HostVec {
        match self {
            Held::Guard(g) => g,
            Held::Copy(v) => v,
            Held::InPlace => &NOTHING,
        }
    }
}

fn wrong(what: &str) -> RuntimeError {
    RuntimeError::Internal(format!("{what} has the wrong element type"))
}

fn get<'a, T: HostElem>(h: &'a HostVec, what: &str) -> Result<&'a [T], RuntimeError> {
    T::slice(h).ok_or_else(|| wrong(what))
}

impl Default for CpuBackend {
    fn default() -> CpuBackend {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    type Buf = CpuBuffer;
    type Mark = Instant;
    type Recording = NoRecording;

    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn target(&self) -> Target {
        Target::cpu(rayon::current_num_threads())
    }

    fn alloc(&self, elem: ElemType, len: usize) -> Result<CpuBuffer, RuntimeError> {
        Ok(CpuBuffer::new(
            self.zeroed(elem, len)?,
            elem,
            len,
            &self.held,
        ))
    }

    fn upload(&self, data: HostSlice<'_>) -> Result<CpuBuffer, RuntimeError> {
        let mut v = self.zeroed(data.elem(), data.len())?;
        match (&mut v, data) {
            (HostVec::F32(d), HostSlice::F32(s)) => d.copy_from_slice(s),
            (HostVec::F64(d), HostSlice::F64(s)) => d.copy_from_slice(s),
            (HostVec::U32(d), HostSlice::U32(s)) => d.copy_from_slice(s),
            (HostVec::I32(d), HostSlice::I32(s)) => d.copy_from_slice(s),
            (HostVec::Half(_, d), HostSlice::Half(_, s)) => d.copy_from_slice(s),
            _ => return Err(wrong("an upload")),
        }
        Ok(CpuBuffer::new(v, data.elem(), data.len(), &self.held))
    }

    fn write(&self, buf: &CpuBuffer, data: HostSlice<'_>) -> Result<(), RuntimeError> {
        if data.elem() != buf.elem || data.len() != buf.len {
            return Err(RuntimeError::InvalidData(format!(
                "cannot write {} {:?} values into a buffer of {} {:?}",
                data.len(),
                data.elem(),
                buf.len,
                buf.elem
            )));
        }
        let mut g = buf.write()?;
        match (&mut *g, data) {
            (HostVec::F32(d), HostSlice::F32(s)) => d.copy_from_slice(s),
            (HostVec::F64(d), HostSlice::F64(s)) => d.copy_from_slice(s),
            (HostVec::U32(d), HostSlice::U32(s)) => d.copy_from_slice(s),
            (HostVec::I32(d), HostSlice::I32(s)) => d.copy_from_slice(s),
            (HostVec::Half(_, d), HostSlice::Half(_, s)) => d.copy_from_slice(s),
            _ => return Err(wrong("a written buffer")),
        }
        Ok(())
    }

    fn download(&self, buf: &CpuBuffer) -> Result<HostVec, RuntimeError> {
        Ok(buf.read()?.clone())
    }

    fn copy_block(
        &self,
        src: &CpuBuffer,
        from: usize,
        dst: &CpuBuffer,
        len: usize,
    ) -> Result<(), RuntimeError> {
        if len == 0 {
            return Ok(());
        }
        if std::ptr::eq(src, dst) || src.elem != dst.elem || from + len > src.len || len > dst.len {
            return Err(RuntimeError::Internal(format!(
                "a copy of {len} elements from {from} of a buffer of {} into one of {}",
                src.len, dst.len
            )));
        }
        let (s, mut d) = (src.read()?, dst.write()?);
        let range = from..from + len;
        match (&*s, &mut *d) {
            (HostVec::F32(s), HostVec::F32(d)) => d[..len].copy_from_slice(&s[range]),
            (HostVec::F64(s), HostVec::F64(d)) => d[..len].copy_from_slice(&s[range]),
            (HostVec::U32(s), HostVec::U32(d)) => d[..len].copy_from_slice(&s[range]),
            (HostVec::I32(s), HostVec::I32(d)) => d[..len].copy_from_slice(&s[range]),
            (HostVec::Half(_, s), HostVec::Half(_, d)) => d[..len].copy_from_slice(&s[range]),
            _ => {
                return Err(RuntimeError::Internal(
                    "a copy between element types".into(),
                ))
            }
        }
        Ok(())
    }

    fn fill(&self, buf: &CpuBuffer, value: f64) -> Result<(), RuntimeError> {
        let mut g = buf.write()?;
        let int = |v: f64| if v.is_nan() { u32::MAX } else { v as u32 };
        match &mut *g {
            HostVec::F32(d) => d.fill(value as f32),
            HostVec::F64(d) => d.fill(value),
            HostVec::U32(d) => d.fill(int(value)),
            HostVec::I32(d) => d.fill(if value.is_nan() { -1 } else { value as i32 }),
            HostVec::Half(h, d) => d.fill(to_half_bits(*h, value as f32)),
        }
        Ok(())
    }

    fn memory_info(&self) -> Option<(usize, usize)> {
        let (available, total) = host_memory::budget(self.memory_limit, self.held.bytes())?;
        let size = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
        Some((size(available), size(total)))
    }

    fn run_step(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CpuBuffer>],
        outputs: &[Arg<'_, CpuBuffer>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        if run_on_half(step, inputs, outputs)? {
            return Ok(());
        }
        if let Some(wide) = self.widened(inputs, outputs)? {
            return wide.run(step, inputs, outputs, dtype, alpha);
        }
        match dtype {
            DType::F32 => run_typed::<f32>(step, inputs, outputs, alpha),
            DType::F64 => run_typed::<f64>(step, inputs, outputs, alpha),
        }
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn mark(&self) -> Result<Instant, RuntimeError> {
        // Steps run synchronously on the calling thread, so the host clock marks their end.
        Ok(Instant::now())
    }

    fn elapsed_ms(&self, a: &Instant, b: &Instant) -> Result<f64, RuntimeError> {
        Ok(b.saturating_duration_since(*a).as_secs_f64() * 1e3)
    }

    fn replay(&self, recording: &NoRecording) -> Result<bool, RuntimeError> {
        match *recording {}
    }

    fn address(&self, buf: &CpuBuffer) -> u64 {
        // The buffer itself: its data never moves out of it.
        buf as *const CpuBuffer as u64
    }
}

/// Elements per task of the conversions between 16 bits and `f32`.
const CONVERSION_CHUNK: usize = 1 << 16;

/// A step's dense arguments held in 16 bits, widened to `f32` copies: the CPU backend computes
/// every step on `f32` values and rounds the 16-bit outputs once the step is done (the same
/// rounding to nearest even as the GPU's stores). The copies take `f32` memory for the step's
/// duration.
struct Widened {
    /// `f32` copies of the held inputs, by input position.
    inputs: Vec<(usize, CpuBuffer)>,
    /// `f32` buffers for the held outputs, by output position.
    outputs: Vec<(usize, CpuBuffer)>,
}

impl CpuBackend {
    /// The widened copies of the step's 16-bit dense arguments, or `None` when it has none.
    fn widened(
        &self,
        inputs: &[Arg<'_, CpuBuffer>],
        outputs: &[Arg<'_, CpuBuffer>],
    ) -> Result<Option<Widened>, RuntimeError> {
        if inputs.iter().chain(outputs).all(|a| held(a).is_none()) {
            return Ok(None);
        }
        let mut wide = Widened {
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        for (k, a) in inputs.iter().enumerate() {
            if let Some((buf, h)) = held(a) {
                let g = buf.read()?;
                let HostVec::Half(_, bits) = &*g else {
                    return Err(wrong("a 16-bit input"));
                };
                let mut v = self.zeroed(ElemType::F32, bits.len())?;
                if let HostVec::F32(d) = &mut v {
                    use rayon::prelude::*;
                    d.par_chunks_mut(CONVERSION_CHUNK)
                        .zip(bits.par_chunks(CONVERSION_CHUNK))
                        .for_each(|(x, b)| cpu::widen(h, b, x));
                }
                wide.inputs
                    .push((k, CpuBuffer::new(v, ElemType::F32, bits.len(), &self.held)));
            }
        }
        for (k, a) in outputs.iter().enumerate() {
            if let Some((buf, _)) = held(a) {
                wide.outputs.push((k, self.alloc(ElemType::F32, buf.len)?));
            }
        }
        Ok(Some(wide))
    }
}

/// Runs the steps that read a matrix held in 16 bits as it is (cluster sums and diagonals,
/// which stream or pick from a kernel matrix); `false` for any other step.
fn run_on_half(
    step: &Step,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &[Arg<'_, CpuBuffer>],
) -> Result<bool, RuntimeError> {
    let (Some(Arg::Dense { buf, rows, cols }), Some(out)) = (inputs.first(), outputs.first())
    else {
        return Ok(false);
    };
    let Some(half) = inputs[0].held() else {
        return Ok(false);
    };
    let StepOp::Builtin(b @ (Builtin::ClusterSums(_) | Builtin::Diag(_))) = &step.op else {
        return Ok(false);
    };
    let m = buf.read()?;
    let HostVec::Half(_, bits) = &*m else {
        return Err(wrong("a 16-bit matrix"));
    };
    let out_buf = out.buffers()[0];
    let mut g = out_buf.write()?;
    let HostVec::F32(out) = &mut *g else {
        return Err(wrong("the f32 result of a 16-bit matrix"));
    };
    match b {
        Builtin::ClusterSums(c) => {
            let Some(Arg::Index { buf, len }) = inputs.get(1) else {
                return Err(wrong("the labels"));
            };
            let l = buf.read()?;
            let labels = get::<u32>(&l, "the labels")?
                .get(..*len)
                .ok_or_else(|| wrong("the labels"))?;
            let Dim::Fixed(k) = c.k else {
                return Err(RuntimeError::Internal(
                    "the plan's cluster sums leave their clusters unsized".into(),
                ));
            };
            cpu::cluster_sums_half(*rows, *cols, bits, *cols, half, labels, k, out)?;
        }
        Builtin::Diag(d) => cpu::diag_half(*rows, d.offset, bits, *cols, half, out)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The buffer and format of a dense argument held in 16 bits.
fn held<'a>(a: &Arg<'a, CpuBuffer>) -> Option<(&'a CpuBuffer, kernel_ir::Half)> {
    match (a, a.held()) {
        (Arg::Dense { buf, .. }, Some(h)) => Some((*buf, h)),
        _ => None,
    }
}

/// `args` with the arguments at the positions of `copies` replaced by those copies.
fn swap<'a>(
    args: &[Arg<'a, CpuBuffer>],
    copies: &'a [(usize, CpuBuffer)],
) -> Vec<Arg<'a, CpuBuffer>> {
    args.iter()
        .enumerate()
        .map(|(k, a)| match (a, copies.iter().find(|(i, _)| *i == k)) {
            (Arg::Dense { rows, cols, .. }, Some((_, copy))) => Arg::Dense {
                buf: copy,
                rows: *rows,
                cols: *cols,
            },
            _ => a.clone(),
        })
        .collect()
}

impl Widened {
    /// Runs `step` on the widened arguments, then rounds the outputs into their 16-bit buffers.
    fn run(
        &self,
        step: &Step,
        inputs: &[Arg<'_, CpuBuffer>],
        outputs: &[Arg<'_, CpuBuffer>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError> {
        if dtype != DType::F32 {
            return Err(RuntimeError::Binding(
                "a value held in 16 bits is computed in f32; plan in f32".into(),
            ));
        }
        let wide_inputs = swap(inputs, &self.inputs);
        let wide_outputs = swap(outputs, &self.outputs);
        let mut step = step.clone();
        if let StepOp::Fused(f) = &mut step.op {
            f.spec.narrow = Default::default();
        }
        run_typed::<f32>(&step, &wide_inputs, &wide_outputs, alpha)?;
        for (k, copy) in &self.outputs {
            let Arg::Dense { buf, .. } = &outputs[*k] else {
                continue;
            };
            let from = copy.read()?;
            let mut to = buf.write()?;
            match (&*from, &mut *to) {
                (HostVec::F32(x), HostVec::Half(h, bits)) => {
                    use rayon::prelude::*;
                    let h = *h;
                    bits.par_chunks_mut(CONVERSION_CHUNK)
                        .zip(x.par_chunks(CONVERSION_CHUNK))
                        .for_each(|(b, v)| cpu::narrow(h, v, b));
                }
                _ => return Err(wrong("a 16-bit output")),
            }
        }
        Ok(())
    }
}

/// `spec` with its lower-symmetric inputs read as whole matrices. They come from SYRK steps,
/// which this backend always completes to the full symmetric matrix, and contiguous rows
/// stream much faster on a CPU than the column walk that reading the lower triangle needs for
/// the upper half.
fn full_symmetric(spec: &kernel_ir::KernelSpec) -> std::borrow::Cow<'_, kernel_ir::KernelSpec> {
    use kernel_ir::Access;
    if !spec
        .inputs
        .iter()
        .any(|i| i.access == Access::LowerSymmetric)
    {
        return std::borrow::Cow::Borrowed(spec);
    }
    let mut full = spec.clone();
    for input in &mut full.inputs {
        if input.access == Access::LowerSymmetric {
            input.access = Access::Matrix { transposed: false };
        }
    }
    std::borrow::Cow::Owned(full)
}

/// Whether input `i` (`a`) of `step`, which shares its buffer with an output, can be read in
/// place instead of copied first: a fused map with one output that reads it at the element it
/// writes (see `cpu::reads_in_place`; a lower-symmetric input counts, this backend's SYRK
/// having completed it to the full matrix), over the same `rows x cols` as the output.
fn reads_in_place(step: &Step, i: usize, a: &Arg<'_, CpuBuffer>) -> bool {
    match &step.op {
        StepOp::Fused(f) => {
            cpu::reads_in_place(&full_symmetric(&f.spec), i)
                && dims(a) == (f.rows, f.cols)
                && matches!(a, Arg::Dense { .. })
        }
        _ => false,
    }
}

/// Sizes of an argument, for building views.
fn dims(a: &Arg<'_, CpuBuffer>) -> (usize, usize) {
    match a {
        Arg::Dense { rows, cols, .. } | Arg::Csr { rows, cols, .. } => (*rows, *cols),
        Arg::Index { len, .. } => (*len, 1),
        Arg::Scalar(_) => (1, 1),
    }
}

fn run_typed<T: Real + HostElem>(
    step: &Step,
    inputs: &[Arg<'_, CpuBuffer>],
    outputs: &[Arg<'_, CpuBuffer>],
    alpha: f64,
) -> Result<(), RuntimeError> {
    // Lock outputs for writing; inputs that share a buffer with an output are copied first.
    let out_bufs: Vec<&CpuBuffer> = outputs.iter().flat_map(Arg::buffers).collect();
    for (i, a) in out_bufs.iter().enumerate() {
        if out_bufs[..i].iter().any(|b| std::ptr::eq(*a, *b)) {
            return Err(RuntimeError::Internal(
                "two outputs of one step share a buffer".into(),
            ));
        }
    }
    let held: Vec<Vec<Held<'_>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.buffers()
                .into_iter()
                .map(|b| {
                    if out_bufs.iter().any(|o| std::ptr::eq(*o, b)) {
                        if reads_in_place(step, i, a) {
                            Ok(Held::InPlace)
                        } else {
                            Ok(Held::Copy(b.read()?.clone()))
                        }
                    } else {
                        Ok(Held::Guard(b.read()?))
                    }
                })
                .collect::<Result<Vec<_>, RuntimeError>>()
        })
        .collect::<Result<_, _>>()?;
    let mut guards: Vec<RwLockWriteGuard<'_, HostVec>> = out_bufs
        .iter()
        .map(|b| b.write())
        .collect::<Result<_, _>>()?;
    let a = T::from_f64(alpha);
    let zero = T::from_f64(0.0);
    let dense = |i: usize| -> Result<&[T], RuntimeError> { get::<T>(&held[i][0], "a dense input") };
    // Plan buffers may be longer than the value they hold (reuse): slice to the value.
    let csr = |i: usize| -> Result<CsrRef<'_, T>, RuntimeError> {
        let (rows, cols) = dims(&inputs[i]);
        let nnz = match &inputs[i] {
            Arg::Csr { nnz, .. } => *nnz,
            _ => return Err(wrong("a sparse input")),
        };
        fn part<'a>(v: &'a [i32], len: usize, what: &str) -> Result<&'a [i32], RuntimeError> {
            v.get(..len).ok_or_else(|| {
                RuntimeError::Internal(format!("{what} hold {} entries, {len} needed", v.len()))
            })
        }
        let values = get::<T>(&held[i][2], "sparse values")?;
        Ok(CsrRef {
            rows,
            cols,
            row_ptr: part(
                get::<i32>(&held[i][0], "row offsets")?,
                rows + 1,
                "row offsets",
            )?,
            col_idx: part(
                get::<i32>(&held[i][1], "column indices")?,
                nnz,
                "column indices",
            )?,
            values: values
                .get(..nnz)
                .ok_or_else(|| RuntimeError::Internal("too few sparse values".into()))?,
        })
    };
    let in_dims = |i: usize| dims(&inputs[i]);
    let out_dims = |i: usize| dims(&outputs[i]);
    match &step.op {
        StepOp::Gemm(g) => {
            let (_, lda) = in_dims(0);
            let (_, ldb) = in_dims(1);
            let c = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the GEMM output"))?;
            cpu::gemm(
                g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                a,
                dense(0)?,
                lda,
                dense(1)?,
                ldb,
                zero,
                c,
                g.n,
            )?;
        }
        StepOp::Syrk {
            trans,
            n,
            k,
            row_block,
            ..
        } => {
            let (_, lda) = in_dims(0);
            let c = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the SYRK output"))?;
            match row_block {
                None => cpu::syrk(*trans, *n, *k, a, dense(0)?, lda, zero, c, *n)?,
                Some((start, end)) => {
                    cpu::syrk_rows(*trans, *n, *k, a, dense(0)?, lda, *start..*end, c, *n)?
                }
            }
        }
        StepOp::Gemv { trans, m, n, .. } => {
            let y = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the GEMV output"))?;
            cpu::gemv(*trans, *m, *n, a, dense(0)?, *n, dense(1)?, zero, y)?;
        }
        StepOp::SpMM {
            sparse_left,
            trans_sparse,
            trans_dense,
            m,
            n,
            ..
        } => {
            let (_, ldc) = out_dims(0);
            if *sparse_left {
                let (_, ldd) = in_dims(1);
                let s = csr(0)?;
                let d = dense(1)?;
                let c = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the SpMM output"))?;
                cpu::spmm_sparse_dense(
                    *trans_sparse,
                    s,
                    *trans_dense,
                    d,
                    ldd,
                    a,
                    zero,
                    c,
                    ldc,
                    *n,
                )?;
            } else {
                let (_, ldd) = in_dims(0);
                let d = dense(0)?;
                let s = csr(1)?;
                let c = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the SpMM output"))?;
                cpu::spmm_dense_sparse(
                    *trans_dense,
                    d,
                    ldd,
                    *m,
                    *trans_sparse,
                    s,
                    a,
                    zero,
                    c,
                    ldc,
                )?;
            }
        }
        StepOp::SpGemm { .. } => {
            let (_, ldc) = out_dims(0);
            let c = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the SpGEMM output"))?;
            cpu::spgemm_abt(csr(0)?, csr(1)?, a, c, ldc)?;
        }
        StepOp::SpMV { trans, .. } => {
            let s = csr(0)?;
            let x = dense(1)?;
            let y = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the SpMV output"))?;
            cpu::spmv(*trans, s, a, x, zero, y)?;
        }
        StepOp::Builtin(b) => {
            let labels_at = |i: usize| -> Result<&[u32], RuntimeError> {
                Ok(&get::<u32>(&held[i][0], "labels")?[..in_dims(i).0])
            };
            let k = |d: &Dim| match d {
                Dim::Fixed(k) => Ok(*k),
                Dim::Sym(s) => Err(RuntimeError::Internal(format!(
                    "the plan's builtin step leaves dimension `{s}` unsized"
                ))),
            };
            match b {
                Builtin::ClusterSums(c) => {
                    let (rows, cols) = in_dims(0);
                    let out =
                        T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the cluster sums"))?;
                    cpu::cluster_sums(rows, cols, dense(0)?, cols, labels_at(1)?, k(&c.k)?, out)?;
                }
                Builtin::LabelSums(l) => {
                    let (n, d) = in_dims(0);
                    let out =
                        T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the label sums"))?;
                    if d == 1 {
                        // x as a 1 x n matrix: its cluster sums are the label sums.
                        cpu::cluster_sums(1, n, dense(0)?, n, labels_at(1)?, k(&l.k)?, out)?;
                    } else {
                        cpu::label_row_sums(n, d, dense(0)?, labels_at(1)?, k(&l.k)?, out)?;
                    }
                }
                Builtin::Densify(d) => {
                    let (_, ld) = out_dims(0);
                    let out =
                        T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the dense copy"))?;
                    cpu::csr_densify(csr(0)?, d.transpose, out, ld)?;
                }
                Builtin::SparseRowNorms(_) => {
                    let out = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the row norms"))?;
                    cpu::csr_row_norms(csr(0)?, out)?;
                }
                Builtin::Diag(d) => {
                    let (n, lda) = in_dims(0);
                    let out = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the diagonal"))?;
                    cpu::diag(n, d.offset, dense(0)?, lda, out)?;
                }
                Builtin::Counts(c) => {
                    let out = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the counts"))?;
                    cpu::counts(labels_at(0)?, k(&c.k)?, out)?;
                }
                Builtin::Selection(s) => {
                    let labels = labels_at(0)?;
                    let k = k(&s.k)?;
                    let (rp, rest) = guards.split_at_mut(1);
                    let (ci, vals) = rest.split_at_mut(1);
                    let row_ptr = i32::slice_mut(&mut rp[0]).ok_or_else(|| wrong("row offsets"))?;
                    let col_idx =
                        i32::slice_mut(&mut ci[0]).ok_or_else(|| wrong("column indices"))?;
                    let values =
                        T::slice_mut(&mut vals[0]).ok_or_else(|| wrong("selection values"))?;
                    cpu::selection(labels, k, row_ptr, col_idx, values)?;
                    if s.weighted {
                        let weights = dense(1)?.get(..labels.len()).ok_or_else(|| {
                            RuntimeError::Internal("fewer weights than labels".into())
                        })?;
                        cpu::weigh_selection(k, row_ptr, col_idx, weights, values)?;
                    }
                }
                Builtin::PermuteRows(perm) => {
                    let s = csr(1)?;
                    let nnz = usize::try_from(s.row_ptr[s.rows])
                        .unwrap_or(0)
                        .min(s.col_idx.len());
                    let listed = &s.col_idx[..nnz];
                    let short = || {
                        RuntimeError::Internal(
                            "rows to reorder of the wrong element type or too few".into(),
                        )
                    };
                    match &inputs[0] {
                        Arg::Index { len, .. } => {
                            let labels = labels_at(0)?;
                            let out = u32::slice_mut(&mut guards[0])
                                .and_then(|o| o.get_mut(..*len))
                                .ok_or_else(short)?;
                            cpu::permute_rows(listed, *len, labels, 1, out, perm.inverse)?;
                        }
                        _ => {
                            let (rows, cols) = in_dims(0);
                            let len = rows * cols;
                            let m = dense(0)?.get(..len).ok_or_else(short)?;
                            let out = T::slice_mut(&mut guards[0])
                                .and_then(|o| o.get_mut(..len))
                                .ok_or_else(short)?;
                            cpu::permute_rows(listed, rows, m, cols, out, perm.inverse)?;
                        }
                    }
                }
                Builtin::Monomials(_) => {
                    let (n, d) = in_dims(0);
                    let out = T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the monomials"))?;
                    let (a, b) = (labels_at(1)?, labels_at(2)?);
                    cpu::monomials(n, d, dense(0)?, d, a, b, dense(3)?, out)?;
                }
                Builtin::PadCols(p) => {
                    let (rows, cols) = in_dims(0);
                    let out =
                        T::slice_mut(&mut guards[0]).ok_or_else(|| wrong("the padded matrix"))?;
                    cpu::pad_cols(rows, cols, dense(0)?, p.cols, out)?;
                }
            }
        }
        StepOp::Copy => {
            let (r, c) = in_dims(0);
            let len = r * c;
            match &mut *guards[0] {
                HostVec::U32(d) => {
                    d[..len].copy_from_slice(&get::<u32>(&held[0][0], "copied indices")?[..len])
                }
                other => {
                    let d = T::slice_mut(other).ok_or_else(|| wrong("the copy"))?;
                    d[..len].copy_from_slice(&dense(0)?[..len]);
                }
            }
        }
        StepOp::Fused(f) => {
            let mut args = Vec::with_capacity(inputs.len());
            for (i, inp) in inputs.iter().enumerate() {
                if matches!(held[i].first(), Some(Held::InPlace)) {
                    args.push(FusedArg::InPlace);
                    continue;
                }
                args.push(match inp {
                    Arg::Scalar(v) => FusedArg::Scalar(T::from_f64(*v)),
                    Arg::Index { len, .. } => {
                        FusedArg::Index(&get::<u32>(&held[i][0], "an index input")?[..*len])
                    }
                    Arg::Dense { cols, .. } => match f.spec.inputs[i].access {
                        kernel_ir::Access::Matrix { .. }
                        | kernel_ir::Access::LowerSymmetric
                        | kernel_ir::Access::Left { .. }
                        | kernel_ir::Access::Right { .. } => FusedArg::Matrix {
                            data: dense(i)?,
                            ld: *cols,
                        },
                        _ => FusedArg::Vector(dense(i)?),
                    },
                    Arg::Csr { .. } => {
                        return Err(RuntimeError::Internal(
                            "a sparse matrix in a fused kernel".into(),
                        ))
                    }
                });
            }
            let mut outs = Vec::with_capacity(guards.len());
            for g in guards.iter_mut() {
                outs.push(match &mut **g {
                    HostVec::U32(v) => FusedOut::Indices(v),
                    other => FusedOut::Values(
                        T::slice_mut(other).ok_or_else(|| wrong("a fused output"))?,
                    ),
                });
            }
            let contraction = matches!(f.spec.form, kernel_ir::Form::Contraction { .. });
            let (space, sizes) = ((f.rows, f.cols), (f.depth, f.width));
            match (contraction, f.share) {
                // A rank's share: its equal block of whole rows, zeros in the other rows.
                (true, Some(share)) => cpu::run_contraction_rows(
                    &f.spec,
                    space,
                    sizes,
                    &args,
                    &mut outs,
                    share.rows(f.rows),
                )?,
                (true, None) => {
                    cpu::run_contraction(&f.spec, space, sizes.0, sizes.1, &args, &mut outs)?
                }
                (false, _) => {
                    cpu::run_fused(&full_symmetric(&f.spec), f.rows, f.cols, &args, &mut outs)?
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_steps::step;
    use popcorn_dsl::ops::{PermuteRows, Selection};

    fn permute(inverse: bool) -> Step {
        step(StepOp::Builtin(Builtin::PermuteRows(PermuteRows {
            inverse,
        })))
    }

    /// Runs a permutation step on `m` (an index vector when `width` is `None`, else `rows x
    /// width` dense) with the selection `(row_ptr, col_idx)` over `n` points.
    fn run_permute(
        b: &CpuBackend,
        inverse: bool,
        sel: (&[i32], &[i32]),
        m: HostSlice<'_>,
        n: usize,
        width: Option<usize>,
    ) -> HostVec {
        let (row_ptr, col_idx) = sel;
        let k = row_ptr.len() - 1;
        let rp = b.upload(HostSlice::I32(row_ptr)).unwrap();
        let ci = b.upload(HostSlice::I32(col_idx)).unwrap();
        let vals = b.upload(HostSlice::F64(&vec![1.0; col_idx.len()])).unwrap();
        let s = Arg::Csr {
            row_ptr: &rp,
            col_idx: &ci,
            values: &vals,
            rows: k,
            cols: n,
            nnz: col_idx.len(),
        };
        let src = b.upload(m).unwrap();
        let dst = b.alloc(src.elem(), src.len()).unwrap();
        let (a, o) = match width {
            None => (
                Arg::Index { buf: &src, len: n },
                Arg::Index { buf: &dst, len: n },
            ),
            Some(w) => (
                Arg::Dense {
                    buf: &src,
                    rows: n,
                    cols: w,
                },
                Arg::Dense {
                    buf: &dst,
                    rows: n,
                    cols: w,
                },
            ),
        };
        b.run_step(&permute(inverse), &[a, s], &[o], DType::F64, 1.0)
            .unwrap();
        b.download(&dst).unwrap()
    }

    #[test]
    fn permute_rows_lists_points_outside_the_clusters_last_both_ways() {
        let b = CpuBackend::with_memory_limit(None);
        // Labels [2, 0, 2, 5, 0] with k = 3: the selection lists 1, 4, 0, 2 (row_ptr[3] = 4);
        // the column-index buffer has room for n = 5 (its last entry unused here).
        let sel: (&[i32], &[i32]) = (&[0, 2, 2, 4], &[1, 4, 0, 2, -1]);
        let labels = [2u32, 0, 2, 5, 0];
        let sorted = run_permute(&b, false, sel, HostSlice::U32(&labels), 5, None);
        assert_eq!(sorted, HostVec::U32(vec![0, 0, 2, 2, 5]));
        let HostVec::U32(sorted) = sorted else {
            unreachable!()
        };
        let back = run_permute(&b, true, sel, HostSlice::U32(&sorted), 5, None);
        assert_eq!(back, HostVec::U32(labels.to_vec()));
        let m: Vec<f64> = (0..15).map(f64::from).collect();
        let fwd = run_permute(&b, false, sel, HostSlice::F64(&m), 5, Some(3));
        let want: Vec<f64> = [1, 4, 0, 2, 3]
            .iter()
            .flat_map(|&i| m[i * 3..i * 3 + 3].to_vec())
            .collect();
        assert_eq!(fwd, HostVec::F64(want.clone()));
        let back = run_permute(&b, true, sel, HostSlice::F64(&want), 5, Some(3));
        assert_eq!(back, HostVec::F64(m));
    }

    #[test]
    fn permute_rows_after_a_cpu_selection_round_trips_odd_and_single_sizes() {
        let b = CpuBackend::with_memory_limit(None);
        for (n, k) in [(1usize, 1usize), (1, 3), (7, 2), (33, 5)] {
            let labels: Vec<u32> = (0..n).map(|i| ((i * 5 + 1) % k) as u32).collect();
            let lb = b.upload(HostSlice::U32(&labels)).unwrap();
            let rp = b.alloc(ElemType::I32, k + 1).unwrap();
            let ci = b.alloc(ElemType::I32, n).unwrap();
            let vals = b.alloc(ElemType::F64, n).unwrap();
            let sel = Arg::Csr {
                row_ptr: &rp,
                col_idx: &ci,
                values: &vals,
                rows: k,
                cols: n,
                nnz: n,
            };
            let op = StepOp::Builtin(Builtin::Selection(Selection::plain(Dim::Fixed(k))));
            b.run_step(
                &step(op),
                &[Arg::Index { buf: &lb, len: n }],
                &[sel],
                DType::F64,
                1.0,
            )
            .unwrap();
            let (HostVec::I32(row_ptr), HostVec::I32(col_idx)) =
                (b.download(&rp).unwrap(), b.download(&ci).unwrap())
            else {
                unreachable!()
            };
            let sorted = run_permute(
                &b,
                false,
                (&row_ptr, &col_idx),
                HostSlice::U32(&labels),
                n,
                None,
            );
            let HostVec::U32(sorted) = sorted else {
                unreachable!()
            };
            assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "n={n} k={k}");
            let back = run_permute(
                &b,
                true,
                (&row_ptr, &col_idx),
                HostSlice::U32(&sorted),
                n,
                None,
            );
            assert_eq!(back, HostVec::U32(labels.clone()), "n={n} k={k}");
            let m: Vec<f64> = (0..n * 3).map(|x| x as f64 - 0.5).collect();
            let fwd = run_permute(
                &b,
                false,
                (&row_ptr, &col_idx),
                HostSlice::F64(&m),
                n,
                Some(3),
            );
            let HostVec::F64(fwd) = fwd else {
                unreachable!()
            };
            let back = run_permute(
                &b,
                true,
                (&row_ptr, &col_idx),
                HostSlice::F64(&fwd),
                n,
                Some(3),
            );
            assert_eq!(back, HostVec::F64(m), "n={n} k={k}");
        }
    }
}
