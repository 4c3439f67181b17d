//! Arguments of a program call and the outputs it returns.

use crate::error::RuntimeError;
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// The arguments of a program call: tensors and scalars by parameter name, and the sizes of
/// dimensions that no input determines.
#[derive(Default)]
pub struct Args<'a> {
    pub(crate) tensors: Vec<(&'a str, &'a Tensor)>,
    pub(crate) scalars: Vec<(&'a str, f64)>,
    pub(crate) dims: Vec<(&'a str, usize)>,
}

impl<'a> Args<'a> {
    /// No arguments yet.
    pub fn new() -> Args<'a> {
        Args::default()
    }

    /// Binds a tensor parameter.
    pub fn tensor(mut self, name: &'a str, t: &'a Tensor) -> Args<'a> {
        self.tensors.push((name, t));
        self
    }

    /// Binds a scalar parameter.
    pub fn scalar(mut self, name: &'a str, v: f64) -> Args<'a> {
        self.scalars.push((name, v));
        self
    }

    /// Gives the size of a dimension (needed for dimensions no input has, such as `k` in
    /// `selection(labels, k)`).
    pub fn dim(mut self, name: &'a str, v: usize) -> Args<'a> {
        self.dims.push((name, v));
        self
    }
}

/// The outputs of a program call: tensors and scalars by name. Pass the same `Outputs` to
/// [`crate::Context::run_into`] again to reuse its tensors.
#[derive(Default, Debug)]
pub struct Outputs {
    pub(crate) tensors: BTreeMap<String, Tensor>,
    pub(crate) scalars: BTreeMap<String, f64>,
}

impl Outputs {
    /// An output tensor.
    pub fn tensor(&self, name: &str) -> Result<&Tensor, RuntimeError> {
        self.tensors.get(name).ok_or_else(|| self.missing(name))
    }

    /// Takes an output tensor out.
    pub fn take(&mut self, name: &str) -> Result<Tensor, RuntimeError> {
        let e = self.missing(name);
        self.tensors.remove(name).ok_or(e)
    }

    /// Puts a tensor back (for example to swap label buffers between iterations).
    pub fn insert(&mut self, name: &str, t: Tensor) {
        self.tensors.insert(name.to_string(), t);
    }

    /// A scalar output.
    pub fn scalar(&self, name: &str) -> Result<f64, RuntimeError> {
        self.scalars
            .get(name)
            .copied()
            .ok_or_else(|| self.missing(name))
    }

    fn missing(&self, name: &str) -> RuntimeError {
        let names: Vec<&str> = self
            .tensors
            .keys()
            .chain(self.scalars.keys())
            .map(|s| s.as_str())
            .collect();
        RuntimeError::Binding(format!(
            "no output named `{name}`; the outputs are {}",
            names.join(", ")
        ))
    }
}
