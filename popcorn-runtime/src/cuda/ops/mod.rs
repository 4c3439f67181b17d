//! One unit per plan operation on the GPU. Each unit checks its step's arguments against
//! typed views ([`crate::cuda::args`]) and queues its work on its lane's stream; the backend
//! dispatches to it ([`run`]). Library products run on the main lane, where the cuBLAS and
//! cuSPARSE handles are bound; a SYRK and a banded map also run in parts (a
//! [pipeline](popcorn_dsl::plan::Pipeline)).

pub(crate) mod cluster_sums;
mod copy;
mod counts;
mod densify;
mod diag;
mod fused;
mod gemm;
mod gemv;
mod label_sums;
mod monomials;
mod operand_copies;
mod pad_cols;
mod permute_rows;
mod selection;
mod sparse_row_norms;
mod spmm;
mod spmv;
mod syrk;

pub(crate) use cluster_sums::launch_cluster_sums;
pub use cluster_sums::{ClusterSumsArgs, ClusterSumsReport, ClusterSumsTuning};

use crate::backend::{Arg, ElemType};
use crate::cuda::device::Device;
use crate::cuda::driver;
use crate::cuda::errors::invalid;
use crate::cuda::memory::CudaBuffer;
use crate::cuda::memory::GrowBuffer;
use crate::error::RuntimeError;
use cudarc::driver::CudaStream;
use kernel_ir::ScalarType;
use popcorn_dsl::ops::Builtin;
use popcorn_dsl::plan::{Step, StepOp, StepPart};
use popcorn_dsl::DType;
use std::sync::{Arc, MutexGuard};

/// What a step unit works with.
pub(crate) struct StepCx<'a> {
    /// The device.
    pub(crate) device: &'a Device,
    /// The lane the work goes to.
    pub(crate) lane: usize,
    /// Its stream.
    pub(crate) stream: &'a Arc<CudaStream>,
    /// The plan's element type.
    pub(crate) dtype: DType,
    /// The step's scalar factor (1 without one).
    pub(crate) alpha: f64,
}

impl<'a> StepCx<'a> {
    /// This lane's scratch memory, locked: steps on one lane run in stream order, so a step
    /// may use all of it until its work is queued (the guard keeps other threads' steps on
    /// this lane out meanwhile).
    pub(crate) fn lane_scratch(&self) -> Result<MutexGuard<'a, GrowBuffer>, RuntimeError> {
        self.device
            .column_scratch
            .get(self.lane)
            .ok_or_else(|| invalid(format!("lane {} has no scratch", self.lane)))?
            .lock()
            .map_err(|_| crate::cuda::nvrtc::poisoned())
    }

    /// The element type of the plan's values.
    pub(crate) fn elem(&self) -> ElemType {
        ElemType::float(self.dtype)
    }

    /// The kernels' scalar type.
    pub(crate) fn scalar(&self) -> ScalarType {
        self.dtype.scalar_type()
    }

    /// Checks that the step runs on the main lane (where the library handles are bound).
    pub(crate) fn require_main_lane(&self, what: &str) -> Result<(), RuntimeError> {
        if self.lane == 0 {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what} runs on the main lane only (its library handle is bound there), not on lane {}",
                self.lane
            )))
        }
    }

    /// Sets `elems` elements of `elem` at `ptr` to zero.
    ///
    /// # Safety
    /// `ptr` holds at least `elems` elements of `elem` usable on this lane's stream.
    pub(crate) unsafe fn zero(
        &self,
        ptr: u64,
        elems: usize,
        elem: ElemType,
    ) -> Result<(), RuntimeError> {
        // SAFETY: as this function's contract says; every element size is a multiple of 4.
        unsafe { driver::memset32(self.stream, ptr, 0, elems * elem.size_bytes() / 4) }
    }
}

/// A step's inputs and outputs.
pub(crate) type Io<'a, 'b> = (&'a [Arg<'b, CudaBuffer>], &'a [Arg<'b, CudaBuffer>]);

/// Runs part `part` of `step` through its unit. Only a SYRK and a fused map run in parts;
/// every other step runs whole.
pub(crate) fn run(
    cx: &StepCx<'_>,
    step: &Step,
    io: Io<'_, '_>,
    part: StepPart,
) -> Result<(), RuntimeError> {
    let whole = || {
        if part == StepPart::Whole {
            Ok(())
        } else {
            Err(invalid(format!(
                "a {} step runs whole, not as {part:?}",
                step.op_name()
            )))
        }
    };
    match &step.op {
        StepOp::Syrk { .. } => syrk::run(cx, step, io, part),
        StepOp::Fused(f) => fused::run(cx, f, io, part),
        StepOp::Gemm(g) => whole().and_then(|_| gemm::run(cx, g, io)),
        StepOp::Gemv { trans, m, n, .. } => whole().and_then(|_| gemv::run(cx, *trans, *m, *n, io)),
        StepOp::SpMM {
            sparse_left,
            trans_sparse,
            trans_dense,
            m,
            n,
            k,
            ..
        } => {
            whole()?;
            let shape = spmm::Shape {
                sparse_left: *sparse_left,
                trans_sparse: *trans_sparse,
                trans_dense: *trans_dense,
                m: *m,
                n: *n,
                k: *k,
            };
            spmm::run(cx, shape, io)
        }
        StepOp::SpMV { trans, .. } => whole().and_then(|_| spmv::run(cx, *trans, io)),
        StepOp::SpGemm { .. } => Err(invalid(
            "the GPU has no sparse x sparse^T product (spgemm): plan the program for the GPU \
             target, whose cost model computes it as an SpMM against the dense transpose or \
             densifies it"
                .to_string(),
        )),
        StepOp::Builtin(b) => whole().and_then(|_| run_builtin(cx, b, io)),
        StepOp::Copy => whole().and_then(|_| copy::run(cx, io)),
    }
}

/// Runs a builtin step through its unit.
fn run_builtin(cx: &StepCx<'_>, b: &Builtin, io: Io<'_, '_>) -> Result<(), RuntimeError> {
    let k = |d: &popcorn_dsl::Dim| match d {
        popcorn_dsl::Dim::Fixed(k) => Ok(*k),
        popcorn_dsl::Dim::Sym(s) => Err(invalid(format!(
            "the plan's builtin step leaves dimension `{s}` unsized"
        ))),
    };
    match b {
        Builtin::Diag(d) => diag::run(cx, d, io),
        Builtin::Counts(c) => counts::run(cx, k(&c.k)?, io),
        Builtin::Selection(s) => selection::run(cx, k(&s.k)?, s.weighted, io),
        Builtin::ClusterSums(c) => cluster_sums::run(cx, k(&c.k)?, io),
        Builtin::LabelSums(l) => label_sums::run(cx, k(&l.k)?, io),
        Builtin::PadCols(p) => pad_cols::run(cx, p.cols, io),
        Builtin::PermuteRows(p) => permute_rows::run(cx, *p, io),
        Builtin::Densify(d) => densify::run(cx, d.transpose, io),
        Builtin::SparseRowNorms(_) => sparse_row_norms::run(cx, io),
        Builtin::Monomials(_) => monomials::run(cx, io),
    }
}

/// Checks a vector's length.
pub(crate) fn vector_len(what: &str, got: usize, want: usize) -> Result<(), RuntimeError> {
    if got != want {
        return Err(invalid(format!(
            "{what} has {got} elements but the step needs {want}"
        )));
    }
    Ok(())
}
