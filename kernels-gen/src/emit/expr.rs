//! Element-wise expressions as a sequence of `const T tN = ...;` temporaries.
//!
//! One [`ElementScope`] covers the code for one element `(i, j)`: every input is loaded at most
//! once and every distinct sub-expression is computed at most once (two nodes that print the
//! same right-hand side share a temporary), so several outputs or reductions of one element
//! share their common work.

use std::collections::HashMap;

use crate::params::CType;
use kernel_ir::{Access, BinaryOp, Expr, Half, KernelSpec, ScalarType, UnaryOp};

/// Name of the macro holding `+inf` of `dtype` (defined by the kernel prelude).
pub(crate) fn inf_macro(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "PK_INF_F32",
        ScalarType::F64 => "PK_INF_F64",
    }
}

/// Name of the macro holding a quiet NaN of `dtype` (defined by the kernel prelude).
pub(crate) fn nan_macro(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "PK_NAN_F32",
        ScalarType::F64 => "PK_NAN_F64",
    }
}

/// Macro definitions every kernel of `dtype` relies on. NVRTC has no `<math.h>`, so `INFINITY`
/// and `NAN` are built from bit patterns with CUDA's builtin reinterpreting intrinsics. Guarded,
/// so sources may be concatenated into one module.
pub(crate) fn prelude(dtype: ScalarType) -> String {
    let (inf, nan) = match dtype {
        ScalarType::F32 => ("__int_as_float(0x7f800000)", "__int_as_float(0x7fc00000)"),
        ScalarType::F64 => (
            "__longlong_as_double(0x7ff0000000000000LL)",
            "__longlong_as_double(0x7ff8000000000000LL)",
        ),
    };
    let inf_name = inf_macro(dtype);
    let nan_name = nan_macro(dtype);
    let t = dtype.c_name();
    let pow = pow_fn(dtype);
    let guard = pow.to_uppercase();
    let c = |v: &str| format!("({t}){v}");
    format!(
        "#ifndef {inf_name}\n#define {inf_name} ({inf})\n#endif\n\
         #ifndef {nan_name}\n#define {nan_name} ({nan})\n#endif\n\
         #ifndef {guard}\n#define {guard}\n\
         // pow with the exponents of polynomial kernels (1 to 4) by multiplication: the general\n\
         // {general} costs tens of instructions, which made maps over n x n matrices compute bound.\n\
         // The exponent is usually a kernel argument, so the branch is the same for every thread.\n\
         __device__ __forceinline__ {t} {pow}({t} x, {t} y) {{\n\
         \x20   if (y == {two}) {{\n        return x * x;\n    }}\n\
         \x20   if (y == {three}) {{\n        return (x * x) * x;\n    }}\n\
         \x20   if (y == {four}) {{\n        const {t} s = x * x;\n        return s * s;\n    }}\n\
         \x20   if (y == {one}) {{\n        return x;\n    }}\n\
         \x20   return {general}(x, y);\n\
         }}\n\
         // The general function out of line: a contraction's tile unrolls its element code\n\
         // for every exponent class, and the general one inlined was three quarters of the\n\
         // kernel's machine code and of its compile time.\n\
         __device__ __noinline__ {t} {pow}_general({t} x, {t} y) {{\n\
         \x20   return {general}(x, y);\n\
         }}\n\
         // The same pow for a known exponent class V (see {pow}_variant): 1 to 4 multiply, 0\n\
         // is the general function. For a uniform exponent the class is chosen once per tile,\n\
         // so that unrolled element code has no branch.\n\
         template <int V>\n\
         __device__ __forceinline__ {t} {pow}_v({t} x, {t} y) {{\n\
         \x20   if constexpr (V == 1) {{\n        return x;\n\
         \x20   }} else if constexpr (V == 2) {{\n        return x * x;\n\
         \x20   }} else if constexpr (V == 3) {{\n        return (x * x) * x;\n\
         \x20   }} else if constexpr (V == 4) {{\n        const {t} s = x * x;\n        return s * s;\n\
         \x20   }} else {{\n        return {pow}_general(x, y);\n    }}\n\
         }}\n\
         // The class of exponent y for {pow}_v: y itself for 1 to 4, else 0.\n\
         __device__ __forceinline__ int {pow}_variant({t} y) {{\n\
         \x20   return y == {one} ? 1 : y == {two} ? 2 : y == {three} ? 3 : y == {four} ? 4 : 0;\n\
         }}\n\
         #endif\n",
        general = math_fn("pow", dtype),
        one = c("1"),
        two = c("2"),
        three = c("3"),
        four = c("4"),
    )
}

/// The prelude's `pow` of `dtype` (small integer exponents by multiplication); `{pow}_v<V>` is
/// its specialisation for exponent class `V` and `{pow}_variant(y)` the class of `y`.
pub(crate) fn pow_fn(dtype: ScalarType) -> &'static str {
    match dtype {
        ScalarType::F32 => "pk_pow_f32",
        ScalarType::F64 => "pk_pow_f64",
    }
}

/// The C text of constant `value` in type `dtype`, reproducing it exactly.
///
/// Finite values are printed with Rust's shortest round-trip representation of the `f64`,
/// which C parses back to the same `double`; for `float` the `double` is then cast, which
/// rounds to nearest exactly like Rust's `value as f32`. Infinities and NaN use the prelude's
/// macros.
pub(crate) fn const_literal(value: f64, dtype: ScalarType) -> String {
    let t = dtype.c_name();
    if value.is_nan() {
        return nan_macro(dtype).to_string();
    }
    if value.is_infinite() {
        let sign = if value > 0.0 { "" } else { "-" };
        return format!("({sign}{})", inf_macro(dtype));
    }
    let digits = format!("{value:?}");
    match dtype {
        ScalarType::F64 if value.is_sign_negative() => format!("({digits})"),
        ScalarType::F64 => digits,
        ScalarType::F32 => format!("(({t})({digits}))"),
    }
}

/// The C math function for a unary or binary operation in `dtype`.
pub(crate) fn math_fn(name: &str, dtype: ScalarType) -> String {
    match dtype {
        ScalarType::F32 => format!("{name}f"),
        ScalarType::F64 => name.to_string(),
    }
}

/// The C expression reading input `index` at `(row, col)` (an index vector is converted to the
/// value type), or `None` where the input is missing (validation reports it). With
/// `staged_symmetric`, a [`Access::LowerSymmetric`] input is read from the local
/// `pk_sym{index}` that a tiled template defines for the element.
pub(crate) fn input_load(
    spec: &KernelSpec,
    index: usize,
    row: &str,
    col: &str,
    staged_symmetric: bool,
) -> Option<String> {
    let input = spec.inputs.get(index)?;
    let p = format!("in{index}");
    let held = |element: String| widened(spec, index, element);
    Some(match input.access {
        Access::Matrix { transposed: false } => held(format!("{p}[{row} * {p}_ld + {col}]")),
        Access::Matrix { transposed: true } => held(format!("{p}[{col} * {p}_ld + {row}]")),
        Access::LowerSymmetric if staged_symmetric => format!("pk_sym{index}"),
        Access::LowerSymmetric => held(format!(
            "{p}[({row} >= {col} ? {row} : {col}) * {p}_ld + ({row} >= {col} ? {col} : {row})]"
        )),
        Access::Col => format!("{p}[{row}]"),
        Access::Row => format!("{p}[{col}]"),
        Access::Scalar => p,
        Access::Broadcast => format!("{p}[0]"),
        Access::IndexCol => format!("(({}){p}[{row}])", spec.dtype.c_name()),
        Access::IndexRow => format!("(({}){p}[{col}])", spec.dtype.c_name()),
        // Product operands are read only by the product (validation reports any other read).
        Access::Left { .. } | Access::Right { .. } => return None,
    })
}

/// The value of input `index`'s element `element` (C text of the loaded element): widened
/// from 16 bits where the input is held so ([`kernel_ir::Narrow`]), else as it is.
pub(crate) fn widened(spec: &KernelSpec, index: usize, element: String) -> String {
    match spec.narrow.input(index) {
        Some(half) => format!("{}({element})", from_half_fn(half)),
        None => element,
    }
}

/// The C text storing `value` as an element of output `index`: rounded to 16 bits where the
/// output is held so ([`kernel_ir::Narrow`]), else as it is.
pub(crate) fn narrowed(spec: &KernelSpec, index: usize, value: &str) -> String {
    match spec.narrow.output(index) {
        Some(half) => format!("{}({value})", to_half_fn(half)),
        None => value.to_string(),
    }
}

/// The prelude's function widening a 16-bit value of `half` to `float`.
pub(crate) fn from_half_fn(half: Half) -> &'static str {
    match half {
        Half::Bf16 => "pk_from_bf16",
        Half::F16 => "pk_from_f16",
    }
}

/// The prelude's function rounding a `float` to `half` (to nearest even).
pub(crate) fn to_half_fn(half: Half) -> &'static str {
    match half {
        Half::Bf16 => "pk_to_bf16",
        Half::F16 => "pk_to_f16",
    }
}

/// The conversions between `float` and the 16-bit formats, for kernels that hold a matrix in
/// 16 bits. bf16 rounds by integer arithmetic (to nearest even; NaN stays NaN), exactly as the
/// CPU backend does; fp16 uses the hardware's conversions (to nearest even, overflow to
/// infinity). Guarded, so sources may be concatenated into one module.
pub(crate) const HALF_CONVERSIONS: &str = "#ifndef PK_HALF_CONVERSIONS\n\
#define PK_HALF_CONVERSIONS\n\
__device__ __forceinline__ float pk_from_bf16(unsigned short h) {\n\
    return __uint_as_float(((unsigned int)h) << 16);\n\
}\n\
__device__ __forceinline__ unsigned short pk_to_bf16(float f) {\n\
    const unsigned int u = __float_as_uint(f);\n\
    if ((u & 0x7fffffffu) > 0x7f800000u) {\n\
        return (unsigned short)((u >> 16) | 0x40u);\n\
    }\n\
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n\
}\n\
__device__ __forceinline__ float pk_from_f16(unsigned short h) {\n\
    float f;\n\
    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n\
    return f;\n\
}\n\
__device__ __forceinline__ unsigned short pk_to_f16(float f) {\n\
    unsigned short h;\n\
    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n\
    return h;\n\
}\n\
#endif\n";

/// Code for the expressions of one element `(row, col)`.
pub(crate) struct ElementScope<'a> {
    spec: &'a KernelSpec,
    row: String,
    col: String,
    prefix: &'static str,
    staged_symmetric: bool,
    product: Option<String>,
    uniform_pow: Option<(usize, String)>,
    lines: Vec<String>,
    temps: HashMap<String, String>,
}

impl<'a> ElementScope<'a> {
    /// A scope reading element `(row, col)` (C expressions of type `long long`); temporaries
    /// are named `{prefix}0`, `{prefix}1`, ...
    pub(crate) fn new(spec: &'a KernelSpec, row: &str, col: &str, prefix: &'static str) -> Self {
        ElementScope {
            spec,
            row: row.to_string(),
            col: col.to_string(),
            prefix,
            staged_symmetric: false,
            product: None,
            uniform_pow: None,
            lines: Vec::new(),
            temps: HashMap::new(),
        }
    }

    /// Reads [`Access::LowerSymmetric`] inputs from the locals `pk_sym{k}` (staged in shared
    /// memory by the tile-pair template) instead of from device memory.
    pub(crate) fn with_staged_symmetric(mut self) -> Self {
        self.staged_symmetric = true;
        self
    }

    /// Reads [`Expr::Product`] as the C expression `value` (a contraction's accumulator).
    pub(crate) fn with_product(mut self, value: &str) -> Self {
        self.product = Some(value.to_string());
        self
    }

    /// Emits `pow(x, in{input})` as `{pow}_v<{class}>(x, in{input})`: the exponent, a scalar
    /// argument, is specialised by the C expression `class` (a template parameter of the
    /// caller, see [`uniform_pow_exponent`]).
    pub(crate) fn with_uniform_pow(mut self, input: usize, class: &str) -> Self {
        self.uniform_pow = Some((input, class.to_string()));
        self
    }

    /// Emits the code computing `expr` and returns the name of the temporary holding it.
    pub(crate) fn value(&mut self, expr: &Expr) -> String {
        let dtype = self.spec.dtype;
        let t = dtype.c_name();
        let rhs = match expr {
            Expr::Input(index) => input_load(
                self.spec,
                *index,
                &self.row,
                &self.col,
                self.staged_symmetric,
            )
            // Invalid reference: validation reports it as an `#error`; keep the C valid.
            .unwrap_or_else(|| format!("(({t})0)")),
            Expr::Const(value) => const_literal(*value, dtype),
            // Outside a contraction validation reports the read; keep the C valid.
            Expr::Product => self.product.clone().unwrap_or_else(|| format!("(({t})0)")),
            Expr::Unary(op, a) => {
                let a = self.value(a);
                match op {
                    UnaryOp::Neg => format!("-{a}"),
                    UnaryOp::Exp => format!("{}({a})", math_fn("exp", dtype)),
                    UnaryOp::Log => format!("{}({a})", math_fn("log", dtype)),
                    UnaryOp::Sqrt => format!("{}({a})", math_fn("sqrt", dtype)),
                    UnaryOp::Abs => format!("{}({a})", math_fn("fabs", dtype)),
                    UnaryOp::Tanh => format!("{}({a})", math_fn("tanh", dtype)),
                }
            }
            Expr::Binary(op, a_expr, b_expr) => {
                let a = self.value(a_expr);
                let b = self.value(b_expr);
                let compare = |c_op: &str| format!("(({a} {c_op} {b}) ? ({t})1 : ({t})0)");
                match op {
                    BinaryOp::Add => format!("{a} + {b}"),
                    BinaryOp::Sub => format!("{a} - {b}"),
                    BinaryOp::Mul => format!("{a} * {b}"),
                    BinaryOp::Div => format!("{a} / {b}"),
                    BinaryOp::Pow => match &self.uniform_pow {
                        Some((input, class)) if **b_expr == Expr::Input(*input) => {
                            format!("{}_v<{class}>({a}, {b})", pow_fn(dtype))
                        }
                        _ => format!("{}({a}, {b})", pow_fn(dtype)),
                    },
                    BinaryOp::Max => format!("{}({a}, {b})", math_fn("fmax", dtype)),
                    BinaryOp::Min => format!("{}({a}, {b})", math_fn("fmin", dtype)),
                    BinaryOp::Lt => compare("<"),
                    BinaryOp::Le => compare("<="),
                    BinaryOp::Gt => compare(">"),
                    BinaryOp::Ge => compare(">="),
                    BinaryOp::Eq => compare("=="),
                    BinaryOp::Ne => compare("!="),
                }
            }
            Expr::Select(cond, then, otherwise) => {
                let c = self.value(cond);
                let a = self.value(then);
                let b = self.value(otherwise);
                format!("(({c} != ({t})0) ? {a} : {b})")
            }
        };
        if let Some(name) = self.temps.get(&rhs) {
            return name.clone();
        }
        let name = format!("{}{}", self.prefix, self.temps.len());
        self.lines.push(format!("const {t} {name} = {rhs};"));
        self.temps.insert(rhs, name.clone());
        name
    }

    /// Appends the emitted lines to `out`, each indented by `indent`.
    pub(crate) fn write_to(&self, out: &mut String, indent: &str) {
        for line in &self.lines {
            out.push_str(indent);
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// The first scalar argument of `spec` that is the exponent of a `pow` in `exprs`, if any: the
/// one argument worth specialising element code for (see [`ElementScope::with_uniform_pow`]).
pub(crate) fn uniform_pow_exponent<'e>(
    spec: &KernelSpec,
    exprs: impl IntoIterator<Item = &'e Expr>,
) -> Option<usize> {
    fn find(spec: &KernelSpec, e: &Expr) -> Option<usize> {
        match e {
            Expr::Binary(BinaryOp::Pow, a, b) => match **b {
                Expr::Input(k)
                    if spec
                        .inputs
                        .get(k)
                        .is_some_and(|i| i.access == Access::Scalar) =>
                {
                    Some(k)
                }
                _ => find(spec, a).or_else(|| find(spec, b)),
            },
            Expr::Binary(_, a, b) => find(spec, a).or_else(|| find(spec, b)),
            Expr::Unary(_, a) => find(spec, a),
            Expr::Select(c, a, b) => find(spec, c)
                .or_else(|| find(spec, a))
                .or_else(|| find(spec, b)),
            Expr::Input(_) | Expr::Const(_) | Expr::Product => None,
        }
    }
    exprs.into_iter().find_map(|e| find(spec, e))
}
