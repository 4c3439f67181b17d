//! Structural checks of a [`KernelSpec`] before code generation.
//!
//! The planner should only build valid specs; these checks catch planner bugs with a message
//! that names the offending part. The planner validates every spec it builds, and plans
//! loaded from elsewhere are validated before they run.

use crate::spec::{Access, Expr, Form, Half, KernelSpec, OutputShape, ReduceKind, ScalarType};

/// A structural problem in a [`KernelSpec`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// An input held in 16 bits is not a dense matrix, or the kernel does not compute in f32.
    #[error(
        "input {index} is held in {half}, but only dense matrix inputs of f32 kernels may be; \
         hold it in the kernel's type"
    )]
    NarrowInput {
        /// The input number.
        index: usize,
        /// Its format.
        half: Half,
    },
    /// An output held in 16 bits is not a full matrix, or the kernel does not compute in f32.
    #[error(
        "output {index} is held in {half}, but only full matrix outputs of f32 kernels may be; \
         hold it in the kernel's type"
    )]
    NarrowOutput {
        /// The output number.
        index: usize,
        /// Its format.
        half: Half,
    },
    /// An expression reads an input number that does not exist.
    #[error(
        "{location} reads input {index}, but the kernel has only {count} inputs; \
         the planner must number inputs by their position in KernelSpec::inputs"
    )]
    InputOutOfRange {
        /// Where the expression is (e.g. `map output 0`).
        location: String,
        /// The input number read.
        index: usize,
        /// How many inputs the spec has.
        count: usize,
    },
    /// A `Pick` reduction names an index input that is missing or not an index vector.
    #[error(
        "{location} picks with input {index_input}, which is not an Access::IndexCol input; \
         point index_input at the unsigned index vector"
    )]
    PickIndexNotIndexCol {
        /// Where the reduction is.
        location: String,
        /// The input number named by the reduction.
        index_input: usize,
    },
    /// A contraction's operand does not have the access its role needs.
    #[error(
        "contraction operand {operand} is input {index}, which is not an {access} input; \
         point the contraction at its operands"
    )]
    BadOperand {
        /// `A` or `B`.
        operand: &'static str,
        /// The input number named.
        index: usize,
        /// The access it needs.
        access: &'static str,
    },
    /// An input read as a contraction operand is not one of the contraction's operands.
    #[error("input {index} is read as a product operand but no contraction multiplies it")]
    StrayOperand {
        /// The input number.
        index: usize,
    },
    /// An expression reads a contraction operand as a value.
    #[error("{location} reads input {index}, a product operand, as a value")]
    OperandAsValue {
        /// Where the expression is.
        location: String,
        /// The input number.
        index: usize,
    },
    /// An expression reads a product outside a contraction.
    #[error("{location} reads a product, which only a contraction computes")]
    ProductOutsideContraction {
        /// Where the expression is.
        location: String,
    },
    /// A reduction only contractions compute, elsewhere.
    #[error("{location} is a {kind} reduction, which only contractions compute")]
    ContractionOnly {
        /// Where the reduction is.
        location: String,
        /// The kind's name.
        kind: &'static str,
    },
    /// A reduction's vector does not have the access it needs.
    #[error("{location} reads input {index}, which is not an {access} input")]
    WrongAccess {
        /// Where the reduction is.
        location: String,
        /// The input number.
        index: usize,
        /// The access it needs.
        access: &'static str,
    },
    /// A column reduction of a kind only row reductions support.
    #[error(
        "{location} is a {kind} reduction, which column reductions do not support; \
         Form::Cols allows only Sum, Min and Max"
    )]
    UnsupportedColumnReduction {
        /// Where the reduction is.
        location: String,
        /// The kind's name (`argmin` or `pick`).
        kind: &'static str,
    },
}

impl KernelSpec {
    /// Checks the spec's structure; returns the first problem found.
    pub fn validate(&self) -> Result<(), SpecError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every structural problem of the spec, in a fixed order (outputs first, then
    /// reductions; within an expression, inputs in reading order). Empty for a valid spec.
    pub fn problems(&self) -> Vec<SpecError> {
        let mut found = Vec::new();
        let contraction = matches!(self.form, Form::Contraction { .. });
        match &self.form {
            Form::Map { outputs } => {
                for (k, expr) in outputs.iter().enumerate() {
                    self.check_expr(expr, &format!("map output {k}"), &mut found);
                }
            }
            Form::Rows { stores, reductions }
            | Form::Contraction {
                stores, reductions, ..
            } => {
                let what = if contraction { "contraction" } else { "row" };
                for (k, expr) in stores.iter().enumerate() {
                    self.check_expr(expr, &format!("{what} store {k}"), &mut found);
                }
                for (k, reduction) in reductions.iter().enumerate() {
                    let location = format!("{what} reduction {k}");
                    self.check_expr(&reduction.expr, &location, &mut found);
                    self.check_reduction(reduction.kind, contraction, &location, &mut found);
                }
            }
            Form::Cols { reductions } => {
                for (k, reduction) in reductions.iter().enumerate() {
                    let location = format!("column reduction {k}");
                    self.check_expr(&reduction.expr, &location, &mut found);
                    let unsupported = match reduction.kind {
                        ReduceKind::ArgMin => Some("argmin"),
                        ReduceKind::Pick { .. } => Some("pick"),
                        ReduceKind::Dot { .. } => Some("dot"),
                        ReduceKind::ByLabel { .. } => Some("by-label"),
                        ReduceKind::Sum | ReduceKind::Min | ReduceKind::Max => None,
                    };
                    if let Some(kind) = unsupported {
                        found.push(SpecError::UnsupportedColumnReduction { location, kind });
                    }
                }
            }
        }
        if let Form::Contraction { a, b, .. } = self.form {
            for (operand, index, want) in [("A", a, true), ("B", b, false)] {
                let ok = match self.inputs.get(index).map(|i| i.access) {
                    Some(Access::Left { .. }) => want,
                    Some(Access::Right { .. }) => !want,
                    _ => false,
                };
                if !ok {
                    found.push(SpecError::BadOperand {
                        operand,
                        index,
                        access: if want {
                            "Access::Left"
                        } else {
                            "Access::Right"
                        },
                    });
                }
            }
        }
        for (k, input) in self.inputs.iter().enumerate() {
            let operand = matches!(input.access, Access::Left { .. } | Access::Right { .. });
            let is_operand = match self.form {
                Form::Contraction { a, b, .. } => k == a || k == b,
                _ => false,
            };
            if operand && !is_operand {
                found.push(SpecError::StrayOperand { index: k });
            }
        }
        for (k, half) in &self.narrow.inputs {
            let held = matches!(
                self.inputs.get(*k).map(|i| i.access),
                Some(Access::Matrix { .. } | Access::LowerSymmetric)
            );
            if !held || self.dtype != ScalarType::F32 {
                found.push(SpecError::NarrowInput {
                    index: *k,
                    half: *half,
                });
            }
        }
        let outputs = self.outputs();
        for (k, half) in &self.narrow.outputs {
            if outputs.get(*k) != Some(&OutputShape::Full) || self.dtype != ScalarType::F32 {
                found.push(SpecError::NarrowOutput {
                    index: *k,
                    half: *half,
                });
            }
        }
        found
    }

    /// Records the problems of one row or contraction reduction of kind `kind`.
    fn check_reduction(
        &self,
        kind: ReduceKind,
        contraction: bool,
        location: &str,
        found: &mut Vec<SpecError>,
    ) {
        let access = |k: usize| self.inputs.get(k).map(|i| i.access);
        match kind {
            ReduceKind::Pick { index_input } => {
                if access(index_input) != Some(Access::IndexCol) {
                    found.push(SpecError::PickIndexNotIndexCol {
                        location: location.to_string(),
                        index_input,
                    });
                }
            }
            ReduceKind::Dot { weights } => {
                if !contraction {
                    found.push(SpecError::ContractionOnly {
                        location: location.to_string(),
                        kind: "dot",
                    });
                } else if access(weights) != Some(Access::Row) {
                    found.push(SpecError::WrongAccess {
                        location: location.to_string(),
                        index: weights,
                        access: "Access::Row",
                    });
                }
            }
            ReduceKind::ByLabel { labels } => {
                if !contraction {
                    found.push(SpecError::ContractionOnly {
                        location: location.to_string(),
                        kind: "by-label",
                    });
                } else if access(labels) != Some(Access::IndexRow) {
                    found.push(SpecError::WrongAccess {
                        location: location.to_string(),
                        index: labels,
                        access: "Access::IndexRow",
                    });
                }
            }
            ReduceKind::Sum | ReduceKind::Min | ReduceKind::Max | ReduceKind::ArgMin => {}
        }
    }

    /// Records a problem for each input reference of `expr` to an input that does not exist
    /// or that is a contraction operand (read only by the product; every other input can be read
    /// as a value: index vectors are converted), and for a product outside a contraction.
    fn check_expr(&self, expr: &Expr, location: &str, found: &mut Vec<SpecError>) {
        expr.for_each_input(&mut |index| match self.inputs.get(index) {
            None => found.push(SpecError::InputOutOfRange {
                location: location.to_string(),
                index,
                count: self.inputs.len(),
            }),
            Some(input) if matches!(input.access, Access::Left { .. } | Access::Right { .. }) => {
                found.push(SpecError::OperandAsValue {
                    location: location.to_string(),
                    index,
                })
            }
            Some(_) => {}
        });
        if expr.uses_product() && !matches!(self.form, Form::Contraction { .. }) {
            found.push(SpecError::ProductOutsideContraction {
                location: location.to_string(),
            });
        }
    }
}
