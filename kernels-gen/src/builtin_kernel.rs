//! A builtin kernel's text: its entry-point name and source, made from a template (shared by
//! the fixed builtins and the label sums of rows).

use crate::params::CType;
use kernel_ir::ScalarType;

/// A fixed kernel: entry-point name and complete CUDA C source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltinKernel {
    /// The `extern "C"` entry point.
    pub name: String,
    /// The complete CUDA C source.
    pub source: String,
}

/// `_f32` or `_f64`.
fn suffix(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "f32",
        ScalarType::F64 => "f64",
    }
}

/// Instantiates `template`: `{T}` becomes the C type, `{NAME}` the entry point
/// `pk_{base}_{f32|f64}`.
pub(crate) fn typed(base: &str, dtype: ScalarType, template: &str) -> BuiltinKernel {
    let name = format!("pk_{base}_{}", suffix(dtype));
    untyped(&name, &template.replace("{T}", dtype.c_name()))
}

/// A kernel whose source needs no type: `{NAME}` becomes `name`.
pub(crate) fn untyped(name: &str, template: &str) -> BuiltinKernel {
    BuiltinKernel {
        name: name.to_string(),
        source: template.replace("{NAME}", name),
    }
}
