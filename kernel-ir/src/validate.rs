//! Structural checks of a [`KernelSpec`] before code generation.
//!
//! The planner should only build valid specs; these checks catch planner bugs with a message
//! that names the offending part. The planner validates every spec it builds, and plans
//! loaded from elsewhere are validated before they run.

use crate::spec::{Access, Expr, Form, KernelSpec, ReduceKind};

/// A structural problem in a [`KernelSpec`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
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
        match &self.form {
            Form::Map { outputs } => {
                for (k, expr) in outputs.iter().enumerate() {
                    self.check_expr(expr, &format!("map output {k}"), &mut found);
                }
            }
            Form::Rows { stores, reductions } => {
                for (k, expr) in stores.iter().enumerate() {
                    self.check_expr(expr, &format!("row store {k}"), &mut found);
                }
                for (k, reduction) in reductions.iter().enumerate() {
                    let location = format!("row reduction {k}");
                    self.check_expr(&reduction.expr, &location, &mut found);
                    if let ReduceKind::Pick { index_input } = reduction.kind {
                        let is_index = self
                            .inputs
                            .get(index_input)
                            .is_some_and(|input| input.access == Access::IndexCol);
                        if !is_index {
                            found.push(SpecError::PickIndexNotIndexCol {
                                location,
                                index_input,
                            });
                        }
                    }
                }
            }
            Form::Cols { reductions } => {
                for (k, reduction) in reductions.iter().enumerate() {
                    let location = format!("column reduction {k}");
                    self.check_expr(&reduction.expr, &location, &mut found);
                    let unsupported = match reduction.kind {
                        ReduceKind::ArgMin => Some("argmin"),
                        ReduceKind::Pick { .. } => Some("pick"),
                        ReduceKind::Sum | ReduceKind::Min | ReduceKind::Max => None,
                    };
                    if let Some(kind) = unsupported {
                        found.push(SpecError::UnsupportedColumnReduction { location, kind });
                    }
                }
            }
        }
        found
    }

    /// Records a problem for each input reference of `expr` to an input that does not exist
    /// (every existing input can be read as a value; index vectors are converted).
    fn check_expr(&self, expr: &Expr, location: &str, found: &mut Vec<SpecError>) {
        expr.for_each_input(&mut |index| {
            if index >= self.inputs.len() {
                found.push(SpecError::InputOutOfRange {
                    location: location.to_string(),
                    index,
                    count: self.inputs.len(),
                });
            }
        });
    }
}
