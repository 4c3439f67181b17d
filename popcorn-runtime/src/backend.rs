//! The contract between the executor and a backend: buffers, transfers, the target the planner
//! plans for, and the methods that run one plan step (or one part of it). The CPU backend and
//! the CUDA backend implement it; the executor ([`crate::executor`]) resolves each step's
//! values to buffers and calls [`Backend::run_step`], or [`Backend::run_part`] on several
//! lanes for a plan's pipelined steps.

use crate::error::RuntimeError;
use kernel_ir::Half;
use popcorn_dsl::plan::{Step, StepPart};
use popcorn_dsl::{DType, Target};

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `u32` (index vectors)
    U32,
    /// `i32` (CSR row pointers and column indices)
    I32,
    /// 16-bit floats in `half`'s format: a dense value held in 16 bits, computed in `f32`.
    Half(Half),
}

impl ElemType {
    /// The floating-point element type of a plan dtype.
    pub fn float(dtype: DType) -> ElemType {
        match dtype {
            DType::F32 => ElemType::F32,
            DType::F64 => ElemType::F64,
        }
    }

    /// The element type of a dense value of a plan of `dtype`: `held` in 16 bits, or the
    /// plan's floating-point type.
    pub fn dense(dtype: DType, held: Option<Half>) -> ElemType {
        held.map_or(ElemType::float(dtype), ElemType::Half)
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::F64 => 8,
            ElemType::Half(_) => 2,
            _ => 4,
        }
    }
}

/// `x` rounded to `half` (to nearest even), as its bits.
pub fn to_half_bits(half: Half, x: f32) -> u16 {
    match half {
        Half::Bf16 => half::bf16::from_f32(x).to_bits(),
        Half::F16 => half::f16::from_f32(x).to_bits(),
    }
}

/// The value of the `half` bits `bits`.
pub fn from_half_bits(half: Half, bits: u16) -> f32 {
    match half {
        Half::Bf16 => half::bf16::from_bits(bits).to_f32(),
        Half::F16 => half::f16::from_bits(bits).to_f32(),
    }
}

/// Borrowed host data to upload.
#[derive(Clone, Copy, Debug)]
pub enum HostSlice<'a> {
    /// `f32` values.
    F32(&'a [f32]),
    /// `f64` values.
    F64(&'a [f64]),
    /// `u32` values.
    U32(&'a [u32]),
    /// `i32` values.
    I32(&'a [i32]),
    /// 16-bit floats of a format, as their bits.
    Half(Half, &'a [u16]),
}

impl HostSlice<'_> {
    /// Element type.
    pub fn elem(&self) -> ElemType {
        match self {
            HostSlice::F32(_) => ElemType::F32,
            HostSlice::F64(_) => ElemType::F64,
            HostSlice::U32(_) => ElemType::U32,
            HostSlice::I32(_) => ElemType::I32,
            HostSlice::Half(h, _) => ElemType::Half(*h),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostSlice::F32(s) => s.len(),
            HostSlice::F64(s) => s.len(),
            HostSlice::U32(s) => s.len(),
            HostSlice::I32(s) => s.len(),
            HostSlice::Half(_, s) => s.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Owned host data, downloaded from a buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum HostVec {
    /// `f32` values.
    F32(Vec<f32>),
    /// `f64` values.
    F64(Vec<f64>),
    /// `u32` values.
    U32(Vec<u32>),
    /// `i32` values.
    I32(Vec<i32>),
    /// 16-bit floats of a format, as their bits.
    Half(Half, Vec<u16>),
}

impl HostVec {
    /// The values as `f64` (integers converted exactly).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            HostVec::F32(v) => v.iter().map(|x| *x as f64).collect(),
            HostVec::F64(v) => v.clone(),
            HostVec::U32(v) => v.iter().map(|x| *x as f64).collect(),
            HostVec::I32(v) => v.iter().map(|x| *x as f64).collect(),
            HostVec::Half(h, v) => v
                .iter()
                .map(|x| f64::from(from_half_bits(*h, *x)))
                .collect(),
        }
    }

    /// Borrows the data for an upload.
    pub fn as_slice(&self) -> HostSlice<'_> {
        match self {
            HostVec::F32(v) => HostSlice::F32(v),
            HostVec::F64(v) => HostSlice::F64(v),
            HostVec::U32(v) => HostSlice::U32(v),
            HostVec::I32(v) => HostSlice::I32(v),
            HostVec::Half(h, v) => HostSlice::Half(*h, v),
        }
    }
}

/// A value handed to a step: its buffers and sizes. Outputs are passed the same way; backends
/// write through them (GPU buffers by device pointer, CPU buffers through a lock). An output
/// may share its buffer with an input of the same step when the plan says the step works in
/// place.
pub enum Arg<'a, B> {
    /// Dense row-major `rows x cols` (leading dimension `cols`).
    Dense {
        /// The values.
        buf: &'a B,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// An index vector (`u32`).
    Index {
        /// The indices.
        buf: &'a B,
        /// Length.
        len: usize,
    },
    /// A CSR matrix.
    Csr {
        /// `rows + 1` row offsets (`i32`).
        row_ptr: &'a B,
        /// `nnz` column indices (`i32`).
        col_idx: &'a B,
        /// `nnz` values.
        values: &'a B,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Stored entries.
        nnz: usize,
    },
    /// A host scalar, already evaluated.
    Scalar(f64),
}

impl<'a, B> Arg<'a, B> {
    /// The buffers of the argument: one for dense and index values, three for CSR (row
    /// offsets, column indices, values), none for a scalar.
    pub fn buffers(&self) -> Vec<&'a B> {
        match self {
            Arg::Dense { buf, .. } | Arg::Index { buf, .. } => vec![*buf],
            Arg::Csr {
                row_ptr,
                col_idx,
                values,
                ..
            } => vec![*row_ptr, *col_idx, *values],
            Arg::Scalar(_) => vec![],
        }
    }

    /// The same argument (sizes, kind) over other buffers, given in the order of
    /// [`Arg::buffers`]; `None` when their number differs.
    pub fn with_buffers<'b, C>(&self, bufs: &'b [C]) -> Option<Arg<'b, C>> {
        Some(match (self, bufs) {
            (Arg::Dense { rows, cols, .. }, [buf]) => Arg::Dense {
                buf,
                rows: *rows,
                cols: *cols,
            },
            (Arg::Index { len, .. }, [buf]) => Arg::Index { buf, len: *len },
            (
                Arg::Csr {
                    rows, cols, nnz, ..
                },
                [row_ptr, col_idx, values],
            ) => Arg::Csr {
                row_ptr,
                col_idx,
                values,
                rows: *rows,
                cols: *cols,
                nnz: *nnz,
            },
            (Arg::Scalar(v), []) => Arg::Scalar(*v),
            _ => return None,
        })
    }
}

impl<B: BufferInfo> Arg<'_, B> {
    /// The 16-bit format of a dense argument held in 16 bits, `None` for any other.
    pub fn held(&self) -> Option<Half> {
        match self {
            Arg::Dense { buf, .. } => match buf.elem() {
                ElemType::Half(h) => Some(h),
                _ => None,
            },
            _ => None,
        }
    }
}

impl<B> Clone for Arg<'_, B> {
    fn clone(&self) -> Self {
        match self {
            Arg::Dense { buf, rows, cols } => Arg::Dense {
                buf,
                rows: *rows,
                cols: *cols,
            },
            Arg::Index { buf, len } => Arg::Index { buf, len: *len },
            Arg::Csr {
                row_ptr,
                col_idx,
                values,
                rows,
                cols,
                nnz,
            } => Arg::Csr {
                row_ptr,
                col_idx,
                values,
                rows: *rows,
                cols: *cols,
                nnz: *nnz,
            },
            Arg::Scalar(v) => Arg::Scalar(*v),
        }
    }
}

/// A buffer's element type and length.
pub trait BufferInfo {
    /// Element type.
    fn elem(&self) -> ElemType;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether the buffer has no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A compute backend.
pub trait Backend: Send + Sync {
    /// The backend's buffer type.
    type Buf: BufferInfo + Send + Sync;

    /// A point in the backend's timeline: on a GPU an event recorded on the stream (so it
    /// marks when the work queued before it finishes), on the CPU the current instant.
    type Mark: Send + Sync;

    /// A run's work recorded once and queued again ([`Backend::record`], [`Backend::replay`]):
    /// a CUDA graph on a GPU; [`NoRecording`] where the backend cannot record.
    type Recording: Send;

    /// A one-line description (`cpu (16 threads)`, `cuda:0 NVIDIA H100 80GB HBM3 (sm_90)`).
    fn describe(&self) -> String;

    /// What the planner may assume about this backend's machine.
    fn target(&self) -> Target;

    /// Allocates an uninitialised buffer.
    fn alloc(&self, elem: ElemType, len: usize) -> Result<Self::Buf, RuntimeError>;

    /// Allocates a buffer holding `data`.
    fn upload(&self, data: HostSlice<'_>) -> Result<Self::Buf, RuntimeError>;

    /// Copies `data` into an existing buffer of the same element type and length.
    fn write(&self, buf: &Self::Buf, data: HostSlice<'_>) -> Result<(), RuntimeError>;

    /// Reads a buffer back (synchronising as needed).
    fn download(&self, buf: &Self::Buf) -> Result<HostVec, RuntimeError>;

    /// The first element of each buffer, as `f64` (NaN for an empty one), after the work
    /// queued so far: a run's scalar results read back together (on a GPU, one wait for all
    /// of them). By default one [`Backend::download`] each.
    fn read_scalars(&self, bufs: &[&Self::Buf]) -> Result<Vec<f64>, RuntimeError> {
        bufs.iter()
            .map(|b| {
                Ok(self
                    .download(b)?
                    .to_f64()
                    .first()
                    .copied()
                    .unwrap_or(f64::NAN))
            })
            .collect()
    }

    /// Copies elements `from..from + len` of `src` into the first `len` elements of `dst`,
    /// on the backend (both buffers its own, of one element type, not the same buffer;
    /// ordered after the work queued before it).
    fn copy_block(
        &self,
        src: &Self::Buf,
        from: usize,
        dst: &Self::Buf,
        len: usize,
    ) -> Result<(), RuntimeError>;

    /// Sets every element to `value` (NaN poisons float buffers in tests; integer buffers take
    /// `value as u32`/`i32`, `u32::MAX` for NaN).
    fn fill(&self, buf: &Self::Buf, value: f64) -> Result<(), RuntimeError>;

    /// Free and total device memory in bytes, where that means something.
    fn memory_info(&self) -> Option<(usize, usize)>;

    /// Pays the one-time setup of the backend's product library now (see
    /// [`Context::prepare_products`](crate::Context::prepare_products)). Nothing to do by
    /// default.
    fn prepare_products(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Gives memory freed but still held for reuse back to the device (waits for queued work
    /// first), so that [`Backend::memory_info`] counts it free. Nothing to do by default.
    fn release_memory(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Runs one plan step. `inputs` and `outputs` follow `step.inputs` and `step.outputs`;
    /// `dtype` is the plan's element type; `alpha` is the library step's scalar factor,
    /// evaluated (1 for steps without one).
    fn run_step(
        &self,
        step: &Step,
        inputs: &[Arg<'_, Self::Buf>],
        outputs: &[Arg<'_, Self::Buf>],
        dtype: DType,
        alpha: f64,
    ) -> Result<(), RuntimeError>;

    /// How many lanes (queues of work that run concurrently, such as CUDA streams) the backend
    /// has. With one, the executor runs every step whole, in order.
    fn lanes(&self) -> usize {
        1
    }

    /// Queues part `part` of `step` on lane `lane` (0 is the lane of ordinary steps), as
    /// [`Backend::run_step`] does for a whole step. Only backends with several lanes are asked
    /// for parts other than [`StepPart::Whole`] on lane 0.
    #[allow(clippy::too_many_arguments)]
    fn run_part(
        &self,
        step: &Step,
        inputs: &[Arg<'_, Self::Buf>],
        outputs: &[Arg<'_, Self::Buf>],
        dtype: DType,
        alpha: f64,
        part: StepPart,
        lane: usize,
    ) -> Result<(), RuntimeError> {
        match (part, lane) {
            (StepPart::Whole, 0) => self.run_step(step, inputs, outputs, dtype, alpha),
            _ => Err(RuntimeError::InvalidData(format!(
                "{} runs whole steps on one lane; it was asked for {part:?} of a {} step on lane {lane}",
                self.describe(),
                step.op_name()
            ))),
        }
    }

    /// Makes the work queued on lane `to` from now on wait for the work queued on lane `from`
    /// so far.
    fn order_lanes(&self, from: usize, to: usize) -> Result<(), RuntimeError> {
        let _ = (from, to);
        Ok(())
    }

    /// Makes lane 0 wait for every other lane's work so far. If that cannot be queued, waits on
    /// the host for the other lanes (so no queued work outlives the buffers it uses) and
    /// reports the error.
    fn join_lanes(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Waits for queued work and reports asynchronous errors.
    fn synchronize(&self) -> Result<(), RuntimeError>;

    /// Records a mark after the work queued so far.
    fn mark(&self) -> Result<Self::Mark, RuntimeError>;

    /// Milliseconds from mark `a` to mark `b` (recorded after `a`). Waits for the work before
    /// `b` to finish on a GPU.
    fn elapsed_ms(&self, a: &Self::Mark, b: &Self::Mark) -> Result<f64, RuntimeError>;

    /// Whether [`Backend::record`] can record (false by default).
    fn can_record(&self) -> bool {
        false
    }

    /// A number that changes whenever memory that recordings may use is reallocated (a CUDA
    /// backend's scratch memory, process-wide): a recording that failed while it changed may
    /// succeed at a later run, where one that failed otherwise would fail again. 0 by default.
    fn recording_epoch(&self) -> u64 {
        0
    }

    /// Records instead of running: calls `queue`, which queues work (a plan's steps) as it
    /// would to run it, and returns that work recorded, not run. `Ok(None)` where the backend
    /// cannot record (the default); an error where `queue` failed or queued what cannot be
    /// recorded (nothing then ran, and the backend is as before).
    fn record(
        &self,
        queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Option<Self::Recording>, RuntimeError> {
        let _ = queue;
        Ok(None)
    }

    /// Queues a recording's work again, on the buffers it was recorded with. `Ok(false)`, with
    /// nothing queued, where it may not be replayed any more (scratch memory it uses was
    /// reallocated since): record again.
    fn replay(&self, recording: &Self::Recording) -> Result<bool, RuntimeError>;

    /// Records what `queue` queues on every backend of `backends` (the ranks of a
    /// partitioned run), one recording each, in their order ([`Backend::record`]): `Ok(None)`
    /// where they cannot record together. By default only one backend records this way.
    #[allow(clippy::type_complexity)]
    fn record_together(
        backends: &[&Self],
        queue: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Result<Option<Vec<Self::Recording>>, RuntimeError>
    where
        Self: Sized,
    {
        match backends {
            [backend] => Ok(backend.record(queue)?.map(|r| vec![r])),
            _ => Ok(None),
        }
    }

    /// Replays one recording on each of several backends ([`Backend::replay`]), all or none:
    /// `Ok(false)`, with nothing queued, where one of them may not be replayed any more. The
    /// recordings of one partitioned run wait for one another in their collectives, so some of
    /// them alone would wait forever. By default only one recording replays this way.
    fn replay_together(runs: &[(&Self, &Self::Recording)]) -> Result<bool, RuntimeError>
    where
        Self: Sized,
    {
        match runs {
            [] => Ok(true),
            [(backend, recording)] => backend.replay(recording),
            _ => Ok(false),
        }
    }

    /// The address of a buffer's memory: with the lengths, what identifies the buffers a
    /// recording was made with.
    fn address(&self, buf: &Self::Buf) -> u64;
}

/// The recording of a backend that cannot record: no value exists.
#[derive(Debug)]
pub enum NoRecording {}
