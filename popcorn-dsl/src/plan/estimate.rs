//! How long a plan is expected to take on its target: each step at the target's measured rates
//! (its [`Ceilings`](crate::target::Ceilings) and contraction efficiencies), the slower of its
//! arithmetic and its memory traffic, plus a fixed cost per step. An estimate for choosing
//! between plans (stored or recomputed kernel matrices), not a prediction to the percent.

use super::{Plan, StepOp};
use crate::target::TargetKind;
use crate::types::DType;
use kernel_ir::{Access, Form, Precision, ReduceKind};

/// Seconds one step costs besides its work (a kernel launch and its tail on a GPU, a parallel
/// section's start on the CPU).
fn per_step_seconds(kind: TargetKind) -> f64 {
    match kind {
        TargetKind::Cuda => 5e-6,
        TargetKind::Cpu => 20e-6,
    }
}

impl Plan {
    /// Estimated seconds of one run of the plan on its target.
    ///
    /// ```
    /// use popcorn_dsl::{plan, PlannerConfig, Program, Target};
    /// let p = Program::parse("fn f(X: Dense[n, d]) -> (K: Dense[n, n]) { K = X * X^T; }").unwrap();
    /// let dims = |n| [("n".to_string(), n), ("d".to_string(), 8)].into_iter().collect();
    /// let config = PlannerConfig::default();
    /// let plan = |n| plan(&p, &dims(n), &config, &Target::cpu(2), &Default::default()).unwrap();
    /// let (small, large) = (plan(100).estimated_seconds(), plan(4000).estimated_seconds());
    /// assert!(small > 0.0 && large > 10.0 * small);
    /// ```
    pub fn estimated_seconds(&self) -> f64 {
        let c = &self.target.ceilings;
        let product_rate = |tf32: bool| c.product_flops_per_s(self.dtype, tf32);
        // Element-wise arithmetic runs on the ordinary cores, at best at the strict rate.
        let map_rate = product_rate(false);
        let memory = |bytes: f64| bytes / c.copy_bytes_per_s;
        let steps: f64 = self
            .steps
            .iter()
            .map(|step| {
                let work = match &step.op {
                    StepOp::Gemm(g) => step.flops / product_rate(g.tf32),
                    StepOp::Syrk { tf32, .. } => step.flops / product_rate(*tf32),
                    StepOp::Fused(f) => match &f.spec.form {
                        Form::Contraction {
                            a,
                            b,
                            precision,
                            stores,
                            reductions,
                            ..
                        } => {
                            let by_label_sums = reductions
                                .iter()
                                .filter(|r| matches!(r.kind, ReduceKind::ByLabel { .. }))
                                .count();
                            // The pipelined template's shape (f32, A * B^T of row-major
                            // operands, at most one sum by label); the tiled one computes
                            // 16-bit operands at TF32's rate and 3xTF32 strictly.
                            let common = self.dtype == DType::F32
                                && by_label_sums <= 1
                                && f.spec.inputs.iter().all(|i| {
                                    !matches!(
                                        i.access,
                                        Access::Left { transposed: true }
                                            | Access::Right { transposed: false }
                                    )
                                });
                            let precision = if common {
                                *precision
                            } else {
                                precision.on_general_template()
                            };
                            // 16-bit operands and 3xTF32 splits are priced as TF32 ones (the
                            // same kernels) at their own rates; the kernel counts 16-bit depth
                            // in pairs.
                            let tf32 = precision.on_tensor_cores() && self.dtype == DType::F32;
                            let kernel_depth = precision.kernel_depth(f.depth);
                            let product = 2.0 * f.rows as f64 * f.cols as f64 * f.depth as f64;
                            // A kernel matrix of one matrix with itself, mirrored: one
                            // triangle of the product (and the diagonal's tiles).
                            let mirrored = self.target.contractions.is_some_and(|t| {
                                t.mirror_min_depth
                                    .is_some_and(|least| kernel_depth >= least)
                            }) && tf32
                                && f.share.is_none()
                                && f.rows == f.cols
                                && step.inputs.get(*a) == step.inputs.get(*b)
                                && f.spec.stores_a_mirrorable_value();
                            let computed = if mirrored {
                                (0.5 + 128.0 / f.rows.max(1) as f64).min(1.0)
                            } else {
                                1.0
                            };
                            let efficiency = self.target.contractions.map_or(1.0, |t| {
                                if tf32 && reductions.is_empty() && !stores.is_empty() {
                                    t.stores_only_tf32_efficiency
                                } else {
                                    t.efficiency_of(common, tf32)
                                }
                            });
                            let by_label = match self.target.contractions {
                                Some(t) if f.width > 0 => {
                                    f.rows as f64 * f.cols as f64 / t.by_label_elements_per_s
                                }
                                _ => 0.0,
                            };
                            // Stored elements leave the kernel after the product's tiles: as
                            // the accumulators hold them (a few bytes per row and lane), or,
                            // 16-bit ones of a TF32 product, in 16-byte pieces of rows.
                            let all_half =
                                (0..stores.len()).all(|k| f.spec.narrow.output(k).is_some());
                            let stored = match self.target.contractions {
                                Some(t) if !stores.is_empty() => {
                                    let rate = if mirrored {
                                        t.mirror_store_bytes_per_s
                                    } else if tf32 && all_half {
                                        t.half_store_bytes_per_s
                                    } else {
                                        t.store_bytes_per_s
                                    };
                                    step.bytes / rate
                                }
                                _ => 0.0,
                            };
                            let rate = if tf32 && precision != Precision::Tf32 {
                                c.tensor_product_flops_per_s(precision)
                            } else {
                                product_rate(tf32)
                            };
                            (computed * product / (rate * efficiency.max(1e-3))
                                + computed * (step.flops - product).max(0.0) / map_rate
                                + stored)
                                .max(by_label)
                        }
                        _ => step.flops / map_rate,
                    },
                    _ => step.flops / map_rate,
                };
                work.max(memory(step.bytes))
            })
            .sum();
        steps + self.steps.len() as f64 * per_step_seconds(self.target.kind)
    }
}

#[cfg(test)]
mod tests {
    use crate::{plan, ContractionPolicy, PlannerConfig, Program, Target};
    use kernel_ir::Half;

    /// Seconds of a kernel matrix `K = (A B^T + 1)^2` held in bf16, written by one TF32
    /// contraction kernel, on the reference GPU with or without mirrored stores.
    fn build_seconds(same_points: bool, n: usize, d: usize, mirrors: bool) -> f64 {
        let source = if same_points {
            "fn k(X: Dense[n, d]) -> (K: Dense[n, n]) { K = pow(X * X^T + 1, 2); }"
        } else {
            "fn k(X: Dense[n, d], Y: Dense[n, d]) -> (K: Dense[n, n]) { K = pow(X * Y^T + 1, 2); }"
        };
        let program = Program::parse(source).expect("parses");
        let mut config = PlannerConfig {
            tf32: true,
            contractions: ContractionPolicy::Always,
            ..PlannerConfig::default()
        };
        config.half_storage.insert("K".into(), Half::Bf16);
        let mut target = Target::reference_gpu();
        if !mirrors {
            if let Some(c) = target.contractions.as_mut() {
                c.mirror_min_depth = None;
            }
        }
        let dims = [("n".to_string(), n), ("d".to_string(), d)]
            .into_iter()
            .collect();
        plan(&program, &dims, &config, &target, &Default::default())
            .expect("plans")
            .estimated_seconds()
    }

    /// A kernel matrix of points with themselves, deep enough, costs half the product and the
    /// mirror's stores; shallower, or of two matrices, every tile.
    #[test]
    fn mirrored_kernel_matrices_count_one_triangle_of_the_product() {
        let (mirrored, every_tile) = (
            build_seconds(true, 60000, 780, true),
            build_seconds(true, 60000, 780, false),
        );
        assert!(
            mirrored < 0.75 * every_tile,
            "{mirrored} against {every_tile}"
        );
        let least = Target::reference_gpu()
            .contractions
            .and_then(|c| c.mirror_min_depth)
            .expect("the reference GPU mirrors");
        // (The depth of a TF32 contraction's rounded operands is a multiple of 16.)
        assert_eq!(
            build_seconds(true, 60000, least - 16, true),
            build_seconds(true, 60000, least - 16, false)
        );
        assert!(build_seconds(true, 60000, least, true) < build_seconds(true, 60000, least, false));
        assert_eq!(
            build_seconds(false, 60000, 780, true),
            build_seconds(false, 60000, 780, false)
        );
    }
}
