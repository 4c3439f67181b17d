//! The element-wise template ([`Form::Map`](crate::Form::Map)).
//!
//! Threads grid-stride over the linear index `e = i * cols + j` of the `rows x cols` space, so
//! consecutive threads touch consecutive columns (coalesced for row-major data), and each
//! output is written at `out_k[e]`.

use super::expr::ElementScope;
use super::launch::{LaunchShape, LINEAR_BLOCK_THREADS};
use super::reads_position;
use crate::spec::{Expr, KernelSpec};

/// The launch shape of map kernels.
pub(crate) const LAUNCH: LaunchShape = LaunchShape::Linear {
    block_threads: LINEAR_BLOCK_THREADS,
};

/// The statements of a map kernel's body.
pub(crate) fn body(spec: &KernelSpec, outputs: &[Expr]) -> String {
    let mut scope = ElementScope::new(spec, "i", "j", "t");
    let results: Vec<String> = outputs.iter().map(|e| scope.value(e)).collect();

    let mut s = String::new();
    s.push_str("    const long long pk_n = rows * cols;\n");
    s.push_str("    const long long pk_stride = (long long)gridDim.x * (long long)blockDim.x;\n");
    s.push_str(
        "    for (long long pk_e = (long long)blockIdx.x * (long long)blockDim.x + \
         (long long)threadIdx.x; pk_e < pk_n; pk_e += pk_stride) {\n",
    );
    if reads_position(spec, outputs.iter()) {
        s.push_str("        const long long i = pk_e / cols;\n");
        s.push_str("        const long long j = pk_e - i * cols;\n");
    }
    scope.write_to(&mut s, "        ");
    for (k, value) in results.iter().enumerate() {
        s.push_str(&format!("        out{k}[pk_e] = {value};\n"));
    }
    s.push_str("    }\n");
    s
}
