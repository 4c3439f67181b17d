//! The pipelined contraction template: the fixed device code of `pipeline.cu` (tiling,
//! `cp.async` ring, TF32 `mma.sync` or strict FFMA inner product, per-row merge) driven by a
//! generated fold struct (`<kernel name>_fold`), which holds the kernel's parameters and says what an
//! element of the product becomes:
//! - `State`: one field per row reduction (`r{k}`, plus `r{k}_at` for `ArgMin`), 4 bytes each;
//! - `Values` and `eval<V>(p, i, j)`: the epilogue expressions of element `(i, j)` with `p` for
//!   the product (every load happens here, at an in-bounds position), in variant `V` of
//!   `kVariants`: where a scalar argument is the exponent of a `pow`, `variant()` is its class
//!   (1 to 4, 0 for any other exponent), so that interior tiles run code specialised for it;
//! - `fold(s, x, i, j)`: the element outputs and each reduction's fold into `s`;
//! - `merge`, `shfl_xor`, `identity` and `store` for the partials;
//! - `flush`, `label`, `by_label_value` and `add_by_label` for a sum by label: the template
//!   sums each tile's values per row and label; each thread keeps a running sum per row and
//!   the label it is for, adds it to the output with one atomic when the label changes
//!   (columns sorted by label: once per label) and at the end of its work unit; the launcher
//!   zeroes the output first ([`crate::zeroed_outputs`]);
//! - `kSplitColumns`: whether the only row reductions are sums by label, so that a row's
//!   column tiles may be split over several blocks for balance;
//! - `kSymmetric` and `add_to(i, c, v)`: a symmetric spec whose only reduction is the sum by
//!   label ([`kernel_ir::Form::Contraction`]'s `symmetric`); where its operands are one
//!   matrix the template then walks one triangle of tiles and adds each tile's mirror image to the bins
//!   of its columns' rows with `add_to`;
//! - `kMirrorStores`: the only output one 16-bit store of the product and scalars
//!   ([`KernelSpec::stores_a_mirrorable_value`]); where its operands are one matrix, the
//!   output square and the product at least
//!   [`PIPELINE_MIRROR_MIN_DEPTH`](crate::emit::PIPELINE_MIRROR_MIN_DEPTH) deep, the `wgmma`
//!   body walks one triangle of tiles and writes each tile's mirror image as well, from a
//!   transposed stage in the row exchange.
//!
//! The entry point is one call, `pk::contraction<MMA, ROUNDED>(A, lda, B, ldb, rows, cols,
//! depth, fold)` (`MMA` the inner product: strict, TF32, or bf16 or fp16 operands the launcher
//! packed in pairs, one 32-bit word a pair, `depth` and the leading dimensions then counted in
//! words: [`crate::packs_half_operands`]), launched with `__launch_bounds__(256, 1)` on a persistent grid (see
//! [`LaunchShape::Pipelined`]); or, for the warp-specialised variant
//! ([`ContractionVariant::warp_specialised`]), `pk::contraction_warp_specialised(..., fold,
//! &pk_ta, &pk_tb)` with the operands' tensor maps, launched with 384 threads.

use super::super::expr::{narrowed, pow_fn, uniform_pow_exponent, ElementScope};
use super::super::launch::{
    LaunchShape, PIPELINE_A_CHUNK_BYTES, PIPELINE_BLOCK_ROWS, PIPELINE_B_CHUNK_BYTES,
    PIPELINE_COLUMN_WARPS, PIPELINE_DEPTH_CHUNK, PIPELINE_STAGES, PIPELINE_THREADS,
};
use super::super::param_decl;
use super::{combine, fold, identity, Parts};
use crate::emit::ContractionVariant;
use crate::params::{params, CType, Param};
use kernel_ir::{Expr, Half, KernelSpec, Precision, ReduceKind, Reduction};

/// The fixed device code of every pipelined contraction kernel.
const PIPELINE: &str = include_str!("pipeline.cu");

/// Bytes of one row's partials (the fold's `State`): 4 per reduction, 4 more for an `ArgMin`'s
/// column or a sum by label's current label; a contraction without reductions keeps one unused
/// word.
fn state_bytes(reductions: &[Reduction]) -> u32 {
    let words: u32 = reductions
        .iter()
        .map(|r| {
            if matches!(r.kind, ReduceKind::ArgMin | ReduceKind::ByLabel { .. }) {
                2
            } else {
                1
            }
        })
        .sum();
    4 * words.max(1)
}

/// The launch shape: the kernel's tile and shared-memory plan.
pub(crate) fn launch(spec: &KernelSpec) -> LaunchShape {
    let reductions = match &spec.form {
        kernel_ir::Form::Contraction { reductions, .. } => reductions.as_slice(),
        _ => &[],
    };
    LaunchShape::Pipelined {
        block_rows: PIPELINE_BLOCK_ROWS,
        threads: PIPELINE_THREADS,
        depth_chunk: PIPELINE_DEPTH_CHUNK,
        stages: PIPELINE_STAGES,
        a_chunk_bytes: PIPELINE_A_CHUNK_BYTES,
        b_chunk_bytes: PIPELINE_B_CHUNK_BYTES,
        exchange_bytes: PIPELINE_BLOCK_ROWS * (PIPELINE_COLUMN_WARPS - 1) * state_bytes(reductions),
        // The stage of the wgmma body's mirror images (tensor-core products only).
        mirror_stage_bytes: if spec.stores_a_mirrorable_value()
            && matches!(
                spec.form,
                kernel_ir::Form::Contraction { precision, .. } if precision.on_tensor_cores()
            ) {
            PIPELINE_MIRROR_BYTES
        } else {
            0
        },
        split_columns: split_columns(reductions),
        warp_specialised: false,
    }
}

/// Shared bytes of the mirror images' stage (the kernel's `MIRROR_BYTES`: two warpgroups'
/// 128 x 128 tiles of 16-bit values, rows padded to 136).
const PIPELINE_MIRROR_BYTES: u32 = 2 * 128 * 136 * 2;

/// The template text: the fixed device code and the fold struct, then the entry point's call.
pub(crate) fn parts(
    spec: &KernelSpec,
    (a, b): (usize, usize),
    precision: Precision,
    variant: ContractionVariant,
    stores: &[Expr],
    reductions: &[Reduction],
) -> Parts {
    // Named after the kernel, so that sources concatenated into one module stay valid.
    let fold = format!("{}_fold", spec.name());
    let tensor = precision.on_tensor_cores();
    // The template's kMma; 16-bit operands come packed in pairs by the launcher, never rounded
    // by the kernel.
    let (mma, rounded) = match precision {
        Precision::Strict => ("pk::MMA_STRICT", 0),
        Precision::Tf32 => ("pk::MMA_TF32", variant.rounded.mask()),
        Precision::Half(Half::Bf16) => ("pk::MMA_BF16", 3),
        Precision::Half(Half::F16) => ("pk::MMA_F16", 3),
        // The launcher's split pairs, TF32 values already: three products as one, three
        // times as deep.
        Precision::Tf32x3 => ("pk::MMA_TF32", 3),
    };
    let mut preamble = String::from(PIPELINE);
    preamble.push_str(&fold_struct(spec, &fold, precision, stores, reductions));
    let members: Vec<String> = params(spec).iter().map(param_name).collect();
    let call = if tensor && variant.warp_specialised {
        format!(
            "pk::contraction_warp_specialised<{mma}>(in{a}, in{a}_ld, in{b}, in{b}_ld, rows, cols, \
             depth, pk_fold, &pk_ta, &pk_tb);"
        )
    } else {
        format!(
            "pk::contraction<{mma}, {rounded}>(in{a}, in{a}_ld, in{b}, in{b}_ld, rows, cols, \
             depth, pk_fold);"
        )
    };
    let statements = format!(
        "    const {fold} pk_fold{{{}}};\n    {call}\n",
        members.join(", ")
    );
    Parts {
        preamble,
        statements,
    }
}

/// Whether a row's column tiles may be split over several blocks: its only reductions are sums
/// by label, whose partial sums meet in the output by atomic adds.
pub(crate) fn split_columns(reductions: &[Reduction]) -> bool {
    reductions
        .iter()
        .all(|r| matches!(r.kind, ReduceKind::ByLabel { .. }))
}

/// The C name of a kernel parameter.
fn param_name(param: &Param) -> String {
    match *param {
        Param::Rows => "rows".to_string(),
        Param::Cols => "cols".to_string(),
        Param::BandStart => "band_start".to_string(),
        Param::BandEnd => "band_end".to_string(),
        Param::Depth => "depth".to_string(),
        Param::Width => "width".to_string(),
        Param::Scratch => "scratch".to_string(),
        Param::InputPtr(k) | Param::InputScalar(k) | Param::InputIndex(k) => format!("in{k}"),
        Param::InputLd(k) => format!("in{k}_ld"),
        Param::Output(k) => format!("out{k}"),
    }
}

/// `struct {name}`: the parameters as members (same names, so the generated expressions read
/// them unchanged) and the fold's functions.
fn fold_struct(
    spec: &KernelSpec,
    name: &str,
    precision: Precision,
    stores: &[Expr],
    reductions: &[Reduction],
) -> String {
    let t = spec.dtype.c_name();
    let mut s = format!(
        "\n// The generated fold: the kernel's parameters, and what each element of the product\n\
         // becomes (see pk::contraction).\nstruct {name} {{\n"
    );
    for p in params(spec) {
        // Members without `__restrict__`, which C++ does not define on members.
        let decl = param_decl(spec, &p).replace(" __restrict__", "");
        s.push_str(&format!("    {decl};\n"));
    }

    // The partials.
    s.push_str("    struct State {\n");
    for (k, r) in reductions.iter().enumerate() {
        s.push_str(&format!("        {t} r{k};\n"));
        if matches!(r.kind, ReduceKind::ArgMin) {
            s.push_str(&format!("        unsigned int r{k}_at;\n"));
        }
        if matches!(r.kind, ReduceKind::ByLabel { .. }) {
            s.push_str(&format!("        unsigned int r{k}_c;\n"));
        }
    }
    if reductions.is_empty() {
        s.push_str("        unsigned int unused;\n");
    }
    s.push_str("    };\n");
    s.push_str(&format!(
        "    static_assert(sizeof(State) == {}, \"the host's shared-memory plan counts 4 bytes a field\");\n",
        state_bytes(reductions)
    ));

    // identity()
    s.push_str("    __device__ __forceinline__ static State identity() {\n        State s;\n");
    for (k, r) in reductions.iter().enumerate() {
        if let Some(init) = identity(r.kind, spec.dtype) {
            s.push_str(&format!("        s.r{k} = {init};\n"));
        }
        if matches!(r.kind, ReduceKind::ArgMin) {
            s.push_str(&format!("        s.r{k}_at = 0u;\n"));
        }
        if matches!(r.kind, ReduceKind::ByLabel { .. }) {
            s.push_str(&format!(
                "        s.r{k} = ({t})0;\n        s.r{k}_c = 0xffffffffu;\n"
            ));
        }
    }
    if reductions.is_empty() {
        s.push_str("        s.unused = 0u;\n");
    }
    s.push_str("        return s;\n    }\n");

    // Values, eval() and fold().
    let mut scope = ElementScope::new(spec, "i", "j", "t").with_product("pk_p");
    let pow_exponent = uniform_pow_exponent(
        spec,
        stores.iter().chain(reductions.iter().map(|r| &r.expr)),
    );
    if let Some(k) = pow_exponent {
        scope = scope.with_uniform_pow(k, "V");
    }
    let stored: Vec<String> = stores.iter().map(|e| scope.value(e)).collect();
    let reduced: Vec<String> = reductions.iter().map(|r| scope.value(&r.expr)).collect();
    s.push_str("    struct Values {\n");
    for k in 0..stores.len() {
        s.push_str(&format!("        {t} s{k};\n"));
    }
    for (k, r) in reductions.iter().enumerate() {
        s.push_str(&format!("        {t} v{k};\n"));
        if matches!(r.kind, ReduceKind::Pick { .. }) {
            s.push_str(&format!("        bool hit{k};\n"));
        }
    }
    if stores.is_empty() && reductions.is_empty() {
        s.push_str("        unsigned int unused;\n");
    }
    s.push_str("    };\n");
    match pow_exponent {
        Some(k) => s.push_str(&format!(
            "    static constexpr int kVariants = 5;\n    \
             __device__ __forceinline__ int variant() const {{ return {}_variant(in{k}); }}\n",
            pow_fn(spec.dtype)
        )),
        None => s.push_str(
            "    static constexpr int kVariants = 1;\n    \
             __device__ __forceinline__ int variant() const { return 0; }\n",
        ),
    }
    s.push_str(&format!(
        "    template <int V>\n    \
         __device__ __forceinline__ Values eval(const {t} pk_p, const long long i, \
         const long long j) const {{\n"
    ));
    scope.write_to(&mut s, "        ");
    s.push_str("        Values x;\n");
    for (k, v) in stored.iter().enumerate() {
        s.push_str(&format!("        x.s{k} = {v};\n"));
    }
    for (k, (r, v)) in reductions.iter().zip(&reduced).enumerate() {
        match r.kind {
            ReduceKind::Dot { weights } => {
                s.push_str(&format!("        x.v{k} = {v} * in{weights}[j];\n"));
            }
            ReduceKind::Pick { index_input } => {
                s.push_str(&format!("        x.v{k} = {v};\n"));
                s.push_str(&format!(
                    "        x.hit{k} = j == (long long)in{index_input}[i];\n"
                ));
            }
            _ => s.push_str(&format!("        x.v{k} = {v};\n")),
        }
    }
    if stores.is_empty() && reductions.is_empty() {
        s.push_str("        x.unused = 0u;\n");
    }
    s.push_str("        return x;\n    }\n");
    // fold<kWrite>(): the stores only where kWrite (the template's row-segment paths write
    // them themselves, through the members of row_segment_stores).
    s.push_str(
        "    template <bool kWrite = true>\n    \
         __device__ __forceinline__ void fold(State& s, const Values& x, const long long i, \
         const long long j) const {\n",
    );
    for k in 0..stores.len() {
        let value = narrowed(spec, k, &format!("x.s{k}"));
        s.push_str(&format!(
            "        if constexpr (kWrite) out{k}[i * cols + j] = {value};\n"
        ));
    }
    for (k, r) in reductions.iter().enumerate() {
        let v = format!("x.v{k}");
        let line = match r.kind {
            // The weight was applied in eval().
            ReduceKind::Dot { .. } => fold(ReduceKind::Sum, &v, &format!("s.r{k}"), ""),
            ReduceKind::Pick { .. } => Some(format!("if (x.hit{k}) {{ s.r{k} = {v}; }}")),
            // Summed per tile by the template (see by_label_value and add_by_label).
            ReduceKind::ByLabel { .. } => None,
            kind => fold(kind, &v, &format!("s.r{k}"), &format!("s.r{k}_at")),
        };
        if let Some(line) = line {
            s.push_str(&format!("        {line}\n"));
        }
    }
    s.push_str("    }\n");

    s.push_str(&row_segment_stores(
        spec,
        stores.len(),
        reductions.is_empty(),
    ));

    // merge()
    s.push_str("    __device__ __forceinline__ static void merge(State& s, const State& o) {\n");
    for (k, r) in reductions.iter().enumerate() {
        let line = combine(
            r.kind,
            &format!("s.r{k}"),
            &format!("o.r{k}"),
            &format!("s.r{k}_at"),
            &format!("o.r{k}_at"),
        );
        if let Some(line) = line {
            s.push_str(&format!("        {line}\n"));
        }
    }
    s.push_str("    }\n");

    // shfl_xor()
    s.push_str(
        "    __device__ __forceinline__ static State shfl_xor(const State& s, const int mask) {\n\
         \x20       State o = s;\n",
    );
    let mut fields: Vec<String> = Vec::new();
    for (k, r) in reductions.iter().enumerate() {
        if matches!(r.kind, ReduceKind::ByLabel { .. }) {
            // Each thread flushes its own; merge() leaves them alone.
            continue;
        }
        fields.push(format!("r{k}"));
        if matches!(r.kind, ReduceKind::ArgMin) {
            fields.push(format!("r{k}_at"));
        }
    }
    for f in &fields {
        s.push_str(&format!(
            "        o.{f} = __shfl_xor_sync(0xffffffffu, s.{f}, mask);\n"
        ));
    }
    s.push_str("        return o;\n    }\n");

    // store()
    s.push_str(
        "    __device__ __forceinline__ void store(const long long i, const State& s) const {\n",
    );
    for (k, r) in reductions.iter().enumerate() {
        let out = stores.len() + k;
        if matches!(r.kind, ReduceKind::ByLabel { .. }) {
            continue;
        }
        let field = if matches!(r.kind, ReduceKind::ArgMin) {
            format!("r{k}_at")
        } else {
            format!("r{k}")
        };
        s.push_str(&format!("        out{out}[i] = s.{field};\n"));
    }
    s.push_str("    }\n");

    // flush() and the tile's sums: the sum by label, if any (at most one, see is_pipelined).
    let by_label = reductions
        .iter()
        .enumerate()
        .find_map(|(k, r)| match r.kind {
            ReduceKind::ByLabel { labels } => Some((k, labels, stores.len() + k)),
            _ => None,
        });
    s.push_str("    __device__ __forceinline__ void flush(const long long i, State& s) const {\n");
    if let Some((k, _, out)) = by_label {
        s.push_str(&format!(
            "        {} s.r{k}_c = 0xffffffffu;\n",
            flush_line(k, out, t)
        ));
    }
    s.push_str("    }\n");
    // The triangle of tiles needs a symmetric spec whose only reduction is the sum by label.
    let symmetric = matches!(
        spec.form,
        kernel_ir::Form::Contraction {
            symmetric: true,
            ..
        }
    ) && stores.is_empty()
        && reductions.len() == 1
        && by_label.is_some();
    s.push_str(&format!(
        "    static constexpr bool kByLabel = {};\n    static constexpr bool kSplitColumns = {};\n    \
         static constexpr bool kSymmetric = {symmetric};\n    \
         static constexpr bool kMirrorStores = {};\n    \
         static constexpr bool kSplitOperands = {};\n",
        by_label.is_some(),
        split_columns(reductions),
        spec.stores_a_mirrorable_value(),
        // Only a symmetric spec, whose launcher checks that both operands are one matrix: a
        // spec of mirrored stores may multiply two (Y * X^T), and two split copies cannot tell.
        precision == Precision::Tf32x3 && symmetric
    ));
    if let Some((k, labels, out)) = by_label {
        s.push_str(&format!(
            "    __device__ __forceinline__ {t} by_label_value(const Values& x) const {{ return x.v{k}; }}\n    \
             __device__ __forceinline__ unsigned int label(const long long j) const {{ return in{labels}[j]; }}\n    \
             __device__ __forceinline__ void add_by_label(State& s, const long long i, const unsigned int c, const {t} v) const {{\n        \
             if (c != s.r{k}_c) {{ {} s.r{k}_c = c; }}\n        s.r{k} += v;\n    }}\n    \
             __device__ __forceinline__ void add_to(const long long i, const unsigned int c, const {t} v) const {{\n        \
             if ((long long)c < width) {{ atomicAdd(&out{out}[i * width + c], v); }}\n    }}\n",
            flush_line(k, out, t)
        ));
    }
    s.push_str("};\n\n");
    s
}

/// The statement adding the running sum of by-label reduction `k` (output `out`) to its row's
/// bin, if its label is a column of the output, and restarting it.
fn flush_line(k: usize, out: usize, t: &str) -> String {
    format!(
        "if ((long long)s.r{k}_c < width) {{ atomicAdd(&out{out}[i * width + s.r{k}_c], s.r{k}); }} s.r{k} = ({t})0;"
    )
}

/// The fold's members for writing stored values eight columns at a time: `kStoresOnly`
/// (stores and no reductions: the template may then write each row segment itself),
/// `kStores`, `kHalfStores` (every store 16-bit), `store_value<K>(x)` (store `K`'s value
/// before narrowing), `wide_rows()` (uniform over the launch: every output 16-byte aligned,
/// and, unless every store is 16-bit, `cols` a multiple of 8 so that rows start on 16 bytes),
/// `row_offset(i)` (values from the last 16-byte boundary to row `i`'s start), `store8<K>(i, j,
/// v)`, which writes `v[0..8]` to columns `j..j+8` of row `i` of store `K` (`j` a multiple of
/// 8, rows on 16 bytes) in one 16-byte store per 16-bit output, two per f32 one, and for
/// 16-bit stores `pack2<K>(lo, hi)` (two values narrowed into one word), `store16<K>(i, j, w)`
/// (eight packed values from column `j`, which lies on 16 bytes) and `store_half<K>(i, j, h)`.
fn row_segment_stores(spec: &KernelSpec, n_stores: usize, no_reductions: bool) -> String {
    let half = |k: usize| spec.narrow.output(k);
    let all_half = n_stores > 0 && (0..n_stores).all(|k| half(k).is_some());
    let mut s = format!(
        "    static constexpr int kStores = {n_stores};\n    \
         static constexpr bool kStoresOnly = {};\n    \
         static constexpr bool kHalfStores = {all_half};\n",
        n_stores > 0 && no_reductions
    );
    per_store_member(
        &mut s,
        "static float store_value(const Values& x)",
        "return 0.0f;",
        (0..n_stores).map(|k| (k, format!("return (float)x.s{k};"))),
    );
    let aligned: String = (0..n_stores)
        .map(|k| format!(" && ((unsigned long long)out{k} & 15ull) == 0"))
        .collect();
    let rows_on_16 = if all_half { "true" } else { "(cols & 7) == 0" };
    s.push_str(&format!(
        "    __device__ __forceinline__ bool wide_rows() const {{ return {rows_on_16}{aligned}; }}\n    \
         __device__ __forceinline__ int row_offset(const long long i) const {{ \
         return (int)((i * cols) & 7); }}\n"
    ));
    let halves = || (0..n_stores).filter_map(|k| half(k).map(|h| (k, h)));
    per_store_member(
        &mut s,
        "static unsigned pack2(const float lo, const float hi)",
        "return 0u;",
        halves().map(|(k, h)| {
            let f = match h {
                Half::Bf16 => "pk::pack_bf16x2",
                Half::F16 => "pk::pack_f16x2",
            };
            (k, format!("return {f}(lo, hi);"))
        }),
    );
    per_store_member(
        &mut s,
        "void store16(const long long i, const long long j, const unsigned (&w)[4]) const",
        "",
        halves().map(|(k, _)| {
            (
                k,
                format!(
                    "*reinterpret_cast<pk::Words16*>(out{k} + i * cols + j) = \
                     pk::Words16{{w[0], w[1], w[2], w[3]}};"
                ),
            )
        }),
    );
    per_store_member(
        &mut s,
        "void store_half(const long long i, const long long j, const unsigned short h) const",
        "",
        halves().map(|(k, _)| (k, format!("out{k}[i * cols + j] = h;"))),
    );
    per_store_member(
        &mut s,
        "void store8(const long long i, const long long j, const float (&v)[8]) const",
        "",
        (0..n_stores).map(|k| {
            let body = match half(k) {
                Some(_) => "store16<K>(i, j, {pack2<K>(v[0], v[1]), pack2<K>(v[2], v[3]), \
                            pack2<K>(v[4], v[5]), pack2<K>(v[6], v[7])});"
                    .to_string(),
                None => format!(
                    "{{\n            \
                     pk::Floats16* p = reinterpret_cast<pk::Floats16*>(out{k} + i * cols + j);\n            \
                     p[0] = pk::Floats16{{v[0], v[1], v[2], v[3]}};\n            \
                     p[1] = pk::Floats16{{v[4], v[5], v[6], v[7]}};\n        }}"
                ),
            };
            (k, body)
        }),
    );
    s
}

/// Appends `template <int K> __device__ __forceinline__ {signature} { ... }`: for each
/// `(k, statement)`, `if constexpr (K == k) statement`, then `fallback`.
fn per_store_member(
    s: &mut String,
    signature: &str,
    fallback: &str,
    cases: impl Iterator<Item = (usize, String)>,
) {
    s.push_str(&format!(
        "    template <int K>\n    __device__ __forceinline__ {signature} {{\n"
    ));
    for (k, statement) in cases {
        s.push_str(&format!("        if constexpr (K == {k}) {statement}\n"));
    }
    if !fallback.is_empty() {
        s.push_str(&format!("        {fallback}\n"));
    }
    s.push_str("    }\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::PIPELINE_MIRROR_MIN_DEPTH;

    /// The kernel's mirror constants are the host's: the least depth (which the planner's
    /// estimate reads through the device's target) and the stage's size (which the launch
    /// gives as the row exchange).
    #[test]
    fn the_kernels_mirror_constants_are_the_hosts() {
        let depth = format!("constexpr long long MIRROR_MIN_DEPTH = {PIPELINE_MIRROR_MIN_DEPTH};");
        assert!(PIPELINE.contains(&depth), "{depth}");
        assert!(PIPELINE.contains("constexpr int MIRROR_STRIDE = 136;"));
        assert!(PIPELINE.contains("MIRROR_BYTES = 2ull * 128 * MIRROR_STRIDE * 2;"));
        assert_eq!(PIPELINE_MIRROR_BYTES, 2 * 128 * 136 * 2);
    }

    /// The mirror images' stage takes shared memory only in launches deep enough to mirror:
    /// shallower ones keep the whole of the left operand resident where it fits.
    #[test]
    fn only_launches_deep_enough_to_mirror_hold_the_stage() {
        use kernel_ir::samples::symmetric_kernel_sums;
        use kernel_ir::{Form, Half, Precision, ScalarType};
        let mut spec = symmetric_kernel_sums(ScalarType::F32, Precision::Tf32);
        if let Form::Contraction {
            symmetric,
            stores,
            reductions,
            ..
        } = &mut spec.form
        {
            *symmetric = false;
            stores.push(reductions.remove(0).expr);
        }
        spec.narrow.outputs.push((0, Half::Bf16));
        assert!(spec.stores_a_mirrorable_value());
        let shape = launch(&spec);
        let least = u64::from(PIPELINE_MIRROR_MIN_DEPTH);
        let stage = u64::from(PIPELINE_MIRROR_BYTES);
        let streaming = |depth| u64::from(shape.pipelined_shared_bytes(depth, false));
        let LaunchShape::Pipelined { exchange_bytes, .. } = shape else {
            unreachable!("a pipelined contraction")
        };
        // The stage takes the row exchange's place.
        assert_eq!(
            streaming(least) - streaming(least - 1),
            stage - u64::from(exchange_bytes)
        );
        // 128 deep (four chunks): the left operand resident, as without the stage.
        let ((_, _, _), _, shared) = shape
            .pipelined_grid_block((60_000, 60_000, 128), 132, 227 * 1024)
            .expect("fits");
        assert_eq!(shared, shape.pipelined_shared_bytes(128, true));
        // Without the device's figures, the streaming plan of any depth.
        let (_, _, any) = shape.grid_block(60_000, 60_000);
        assert_eq!(u64::from(any), streaming(least));
        // Only the wgmma body mirrors: on a device without it (an A100, 163 KB a block) the
        // stage goes, and a deep launch fits.
        let a100 = 163 * 1024;
        assert!(shape
            .pipelined_grid_block((60_000, 60_000, 780), 108, a100)
            .is_err());
        let plain = shape.without_mirror_stage();
        assert!(plain
            .pipelined_grid_block((60_000, 60_000, 780), 108, a100)
            .is_ok());
        assert_eq!(
            plain.pipelined_shared_bytes(780, false),
            shape.pipelined_shared_bytes(least - 1, false)
        );
        // Strict products never run the wgmma body: no stage.
        if let Form::Contraction { precision, .. } = &mut spec.form {
            *precision = Precision::Strict;
        }
        assert!(spec.stores_a_mirrorable_value());
        assert_eq!(launch(&spec), plain);
    }
}
