//! Kernel K-means of sparse points (a CSR matrix, e.g. tf-idf text): the kernel matrix is
//! built from the points kept sparse (`kernel_*_sparse` in `kernel_kmeans.pop`, whose Gram
//! product the planner computes by the target's cost model) and stored; the iterations are the
//! dense ones on K. The recompute algorithm needs dense points.

use super::csr_upload::upload;
use super::model::{KernelPrograms, ModelParts};
use super::{report, Algorithm, AlgorithmChoice, Control, FitError, FitResult, Kernel};
use super::{KernelKMeans, Model, Progress, Source};
use crate::io::CsrMatrix;
use crate::Args;
use std::ops::ControlFlow;
use std::time::Instant;

impl AlgorithmChoice {
    /// The choice for sparse points: the stored kernel matrix.
    pub fn sparse(n: usize, dtype: crate::DType) -> AlgorithmChoice {
        AlgorithmChoice {
            reason: "sparse points: the kernel matrix is built once from the sparse points and \
                     stored (the recompute algorithm needs dense points)"
                .into(),
            summary: "stored (sparse points)".into(),
            ..AlgorithmChoice::given(n, dtype)
        }
    }
}

impl KernelKMeans {
    /// Clusters sparse points (`n x d` CSR, e.g. from [`crate::io::load_libsvm_sparse`]); the
    /// kernel matrix is built without densifying them where the planner finds that cheaper
    /// (the plan of `kernel_*_sparse` says how), then stored. `zscore` (which would make the
    /// points dense), [`Algorithm::Recompute`] and [`Algorithm::Features`] are errors; `Auto`
    /// takes the stored kernel.
    pub fn fit_sparse(&self, x: &CsrMatrix) -> Result<FitResult, FitError> {
        self.fit_sparse_with_control(x, &mut |_| ControlFlow::Continue(()))
    }

    /// [`fit_sparse`](KernelKMeans::fit_sparse), telling `control` of every phase and
    /// iteration; when it breaks, the fit stops with [`FitError::Interrupted`].
    pub fn fit_sparse_with_control(
        &self,
        x: &CsrMatrix,
        control: &mut Control<'_>,
    ) -> Result<FitResult, FitError> {
        let (n, d) = (x.rows(), x.cols());
        if n == 0 || d == 0 {
            return Err(FitError::Input(format!(
                "no data: {n} points of {d} features"
            )));
        }
        if self.kernel == Kernel::Precomputed {
            return Err(FitError::Parameter(
                "the precomputed kernel needs fit_precomputed(K, n), not sparse points".into(),
            ));
        }
        if self.zscore {
            return Err(FitError::Parameter(
                "zscore would make sparse points dense (every feature shifted by its mean); \
                 scale them before (e.g. tf-idf normalisation) or fit dense points"
                    .into(),
            ));
        }
        if matches!(self.algorithm, Algorithm::Recompute | Algorithm::Features) {
            return Err(FitError::Parameter(format!(
                "the {} algorithm needs dense points; sparse points use the stored kernel \
                 matrix (Algorithm::Stored, or Auto)",
                self.algorithm
            )));
        }
        self.validate(n)?;
        let max_norm2 = (0..n)
            .filter_map(|r| x.row(r))
            .map(|(_, v)| v.iter().map(|a| a * a).sum::<f64>())
            .fold(0.0f64, f64::max);
        let bound = self.kernel.bound_from_norm(max_norm2);
        let scale = self.kernel_scale(bound)?;
        let start = Instant::now();
        report(control, &Progress::Phase("upload"))?;
        let mut ctx = self.context()?;
        let xt = upload(&ctx, x)?;
        let w = self.weights_on(&ctx)?;
        // The product library's one-time setup, with the context's rather than in K's time.
        ctx.prepare_products()?;
        ctx.synchronize()?;
        let upload_s = start.elapsed().as_secs_f64();
        // A 16-bit K is built times `scale` (see kernel_scale).
        let programs = KernelPrograms::new(&self.kernel.scaled(scale), d);
        report(control, &Progress::Phase("kernel matrix"))?;
        let t = Instant::now();
        let kmat = ctx
            .run(
                programs.program_sparse("kernel"),
                &programs.bind(Args::new().tensor("X", &xt)),
            )?
            .take("K")?;
        ctx.synchronize()?;
        let kernel_matrix_s = t.elapsed().as_secs_f64();
        let choice = self.scaled_choice(AlgorithmChoice::sparse(n, ctx.dtype()), scale, bound);
        let (mut result, _) = self.iterate(
            &mut ctx,
            &Source::Stored(&kmat),
            w.as_ref(),
            n,
            choice,
            control,
        )?;
        let norms = self.stored_centroid_norms(&ctx, &kmat, &result, w.as_ref())?;
        drop(kmat);
        result.timings.upload_s = upload_s;
        result.timings.kernel_matrix_s = kernel_matrix_s;
        result.timings.total_s = start.elapsed().as_secs_f64();
        let parts = ModelParts {
            kernel: self.kernel,
            d,
            x: Vec::new(),
            x_sparse: Some(x.clone()),
            scaling: None,
            labels: result.labels.clone(),
            k: self.k,
            centroid_norms: norms,
            weights: self.sample_weight.clone(),
        };
        result.model = Some(Model::new(ctx, parts));
        Ok(result)
    }
}
