//! The element-wise template ([`Form::Map`](kernel_ir::Form::Map)), in two layouts.
//!
//! - **Linear** (the usual one): threads grid-stride over the linear index `e = i * cols + j`
//!   of the `rows x cols` space, so consecutive threads touch consecutive columns (coalesced
//!   for row-major data), and each output is written at `out_k[e]`.
//! - **Tile pairs**, when an input is stored as the lower triangle of a symmetric matrix
//!   ([`Access::LowerSymmetric`], what a SYRK step leaves when the mirror image is left to its
//!   consumer): blocks grid-stride over the pairs of mirrored `64 x 64` tiles `(I, J)`,
//!   `J <= I`. A block stages tile `(I, J)` of each symmetric input in shared memory, then
//!   writes output tile `(I, J)` reading the staged values as they are and output tile
//!   `(J, I)` reading them transposed, both with row-major coalesced stores. The matrix is read
//!   once (its lower half) and the output written once, where a separate mirror pass would
//!   read and write the upper half again. The upper half of the input is never read, so the
//!   output may be the input's own buffer: each block reads only its own lower tile, into
//!   shared memory, before it writes anything. Each block loads the next pair's tile into
//!   registers before writing the current pair, so the loads' latency hides behind the stores
//!   (the next tile is another lower tile, which only this block reads or writes). The pairs
//!   are walked in groups of `PAIR_GROUP x PAIR_GROUP` tiles, so the blocks in flight write
//!   neighbouring tiles, which helps matrices whose rows start off cache lines (BENCHMARKS.md,
//!   run 4).

use super::expr::{narrowed, widened, ElementScope};
use super::launch::{LaunchShape, LINEAR_BLOCK_THREADS, PAIR_BLOCK_ROWS, PAIR_GROUP, PAIR_TILE};
use super::reads_position;
use crate::params::CType;
use kernel_ir::{Access, Expr, KernelSpec};

/// The launch shape of a map kernel: tile pairs for a banded map, else linear.
pub(crate) fn launch(spec: &KernelSpec) -> LaunchShape {
    if spec.runs_in_bands() {
        LaunchShape::TilePairs {
            tile: PAIR_TILE,
            block_rows: PAIR_BLOCK_ROWS,
            group: PAIR_GROUP,
        }
    } else {
        LaunchShape::Linear {
            block_threads: LINEAR_BLOCK_THREADS,
        }
    }
}

/// The statements of a map kernel's body.
pub(crate) fn body(spec: &KernelSpec, outputs: &[Expr]) -> String {
    let symmetric: Vec<usize> = spec
        .inputs
        .iter()
        .enumerate()
        .filter(|(_, input)| input.access == Access::LowerSymmetric)
        .map(|(k, _)| k)
        .collect();
    if symmetric.is_empty() {
        linear(spec, outputs)
    } else {
        tile_pairs(spec, outputs, &symmetric)
    }
}

/// The linear layout: one thread per element, grid-stride.
fn linear(spec: &KernelSpec, outputs: &[Expr]) -> String {
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
        let value = narrowed(spec, k, value);
        s.push_str(&format!("        out{k}[pk_e] = {value};\n"));
    }
    s.push_str("    }\n");
    s
}

/// The tile-pair layout for maps over a square space that read `symmetric` inputs.
///
/// Blocks are `32 x PAIR_BLOCK_ROWS` threads; thread `(tx, ty)` handles the tile elements
/// `(ty + PAIR_BLOCK_ROWS q, tx + 32 h)`. The staged tiles have one column of padding, so both
/// the row reads of tile `(I, J)` and the column reads of tile `(J, I)` are free of bank
/// conflicts.
fn tile_pairs(spec: &KernelSpec, outputs: &[Expr], symmetric: &[usize]) -> String {
    let t = spec.dtype.c_name();
    let tile = PAIR_TILE;
    let group = PAIR_GROUP;
    let rows_step = PAIR_BLOCK_ROWS;
    let row_steps = PAIR_TILE / PAIR_BLOCK_ROWS;
    let col_steps = PAIR_TILE / 32;
    let mut scope = ElementScope::new(spec, "i", "j", "t").with_staged_symmetric();
    let results: Vec<String> = outputs.iter().map(|e| scope.value(e)).collect();
    let mut element = String::new();
    scope.write_to(&mut element, "                ");
    for (k, value) in results.iter().enumerate() {
        let value = narrowed(spec, k, value);
        element.push_str(&format!(
            "                out{k}[i * cols + j] = {value};\n"
        ));
    }
    // The loops over a thread's elements: `a` (row in the tile) and `b` (column).
    let open = format!(
        "#pragma unroll\n\
         \x20       for (int q = 0; q < {row_steps}; ++q) {{\n\
         \x20           const int a = ty + q * {rows_step};\n\
         #pragma unroll\n\
         \x20           for (int h = 0; h < {col_steps}; ++h) {{\n\
         \x20               const int b = tx + h * 32;\n"
    );
    let close = "            }\n        }\n";

    let mut s = String::new();
    for k in symmetric {
        s.push_str(&format!(
            "    __shared__ {t} pk_tile{k}[{tile}][{}];\n\
             \x20   {t} pk_next{k}[{row_steps}][{col_steps}];\n",
            tile + 1
        ));
    }
    // Slot p of the walk: group pair s = p / G^2 (groups of G x G tiles, s = SI (SI + 1) / 2 +
    // SJ, SJ <= SI), tile (SI G + w / G, SJ G + w % G) for w = p mod G^2; slots above the
    // diagonal, past the last tile or outside the band's tile rows are skipped. The band's
    // slots are those of the group rows it meets. The loads of the next slot are issued before
    // the current pair is written, so their latency hides behind the stores.
    s.push_str(&format!(
        "    const long long pk_nt = (rows + {last}) / {tile};\n\
         \x20   const long long pk_t_lo = band_start / {tile};\n\
         \x20   const long long pk_t_hi = min((band_end + {last}) / {tile}, pk_nt);\n\
         \x20   const long long pk_g_lo = pk_t_lo / {group};\n\
         \x20   const long long pk_g_hi = (pk_t_hi + {last_group}) / {group};\n\
         \x20   const long long pk_first = pk_g_lo * (pk_g_lo + 1) / 2 * {group_tiles};\n\
         \x20   const long long pk_slots = pk_g_hi * (pk_g_hi + 1) / 2 * {group_tiles};\n\
         \x20   const int tx = (int)threadIdx.x;\n\
         \x20   const int ty = (int)threadIdx.y;\n\
         \x20   auto pk_row_of = [](long long p) {{\n\
         \x20       long long ti = (long long)((sqrt(8.0 * (double)p + 1.0) - 1.0) * 0.5);\n\
         \x20       while (ti * (ti + 1) / 2 > p) {{\n\
         \x20           --ti;\n\
         \x20       }}\n\
         \x20       while ((ti + 1) * (ti + 2) / 2 <= p) {{\n\
         \x20           ++ti;\n\
         \x20       }}\n\
         \x20       return ti;\n\
         \x20   }};\n\
         \x20   long long pk_ti = 0;\n\
         \x20   long long pk_tj = 0;\n\
         \x20   // The first slot from `p` (stepping by the grid) that holds a pair, or pk_slots.\n\
         \x20   auto pk_seek = [&](long long p) {{\n\
         \x20       for (; p < pk_slots; p += (long long)gridDim.x) {{\n\
         \x20           const long long g = p / {group_tiles};\n\
         \x20           const int w = (int)(p - g * {group_tiles});\n\
         \x20           const long long gi = pk_row_of(g);\n\
         \x20           const long long gj = g - gi * (gi + 1) / 2;\n\
         \x20           pk_ti = gi * {group} + w / {group};\n\
         \x20           pk_tj = gj * {group} + w % {group};\n\
         \x20           if (pk_ti >= pk_t_lo && pk_ti < pk_t_hi && pk_tj <= pk_ti) {{\n\
         \x20               break;\n\
         \x20           }}\n\
         \x20       }}\n\
         \x20       return p;\n\
         \x20   }};\n\
         \x20   long long pk_p = pk_seek(pk_first + (long long)blockIdx.x);\n",
        last = tile - 1,
        last_group = group - 1,
        group_tiles = group * group,
    ));
    let loads = |s: &mut String, indent: &str| {
        s.push_str(&format!(
            "{indent}#pragma unroll\n\
             {indent}for (int q = 0; q < {row_steps}; ++q) {{\n\
             {indent}#pragma unroll\n\
             {indent}    for (int h = 0; h < {col_steps}; ++h) {{\n\
             {indent}        const long long r = pk_ti * {tile} + ty + q * {rows_step};\n\
             {indent}        const long long c = pk_tj * {tile} + tx + h * 32;\n\
             {indent}        const bool inside = r < rows && c < rows;\n"
        ));
        for k in symmetric {
            s.push_str(&format!(
                "{indent}        pk_next{k}[q][h] = inside ? {} : ({t})0;\n",
                widened(spec, *k, format!("in{k}[r * in{k}_ld + c]"))
            ));
        }
        s.push_str(&format!("{indent}    }}\n{indent}}}\n"));
    };
    s.push_str("    if (pk_p < pk_slots) {\n");
    loads(&mut s, "        ");
    s.push_str("    }\n");
    s.push_str(
        "    while (pk_p < pk_slots) {\n\
         \x20       const long long pk_r0 = pk_ti * ",
    );
    s.push_str(&format!(
        "{tile};\n\
         \x20       const long long pk_c0 = pk_tj * {tile};\n\
         \x20       const bool pk_diagonal = pk_ti == pk_tj;\n\
         \x20       // The previous pair's staged tiles are no longer read.\n\
         \x20       __syncthreads();\n"
    ));
    s.push_str(&open);
    for k in symmetric {
        s.push_str(&format!(
            "                pk_tile{k}[a][b] = pk_next{k}[q][h];\n"
        ));
    }
    s.push_str(close);
    s.push_str(
        "        __syncthreads();\n\
         \x20       pk_p = pk_seek(pk_p + (long long)gridDim.x);\n\
         \x20       if (pk_p < pk_slots) {\n",
    );
    loads(&mut s, "            ");
    s.push_str("        }\n");
    // One output tile: element (row_base + a, col_base + b), each symmetric input's value
    // read from the staged tile by `staged`.
    let output_tile = |s: &mut String, row_base: &str, col_base: &str, staged: &str| {
        s.push_str(&open);
        s.push_str(&format!(
            "                const long long i = {row_base} + a;\n\
             \x20               const long long j = {col_base} + b;\n\
             \x20               if (i >= rows || j >= rows) {{\n\
             \x20                   continue;\n\
             \x20               }}\n"
        ));
        for k in symmetric {
            let value = staged.replace("{k}", &k.to_string());
            s.push_str(&format!("                const {t} pk_sym{k} = {value};\n"));
        }
        s.push_str(&element);
        s.push_str(close);
    };
    // Output tile (I, J); on a diagonal tile its upper part reads the staged lower part
    // transposed.
    s.push_str("        // Output tile (I, J).\n");
    output_tile(
        &mut s,
        "pk_r0",
        "pk_c0",
        "j <= i ? pk_tile{k}[a][b] : pk_tile{k}[b][a]",
    );
    // Output tile (J, I) of an off-diagonal pair: element (c0 + a, r0 + b) is the staged
    // element (r0 + b, c0 + a).
    s.push_str(
        "        if (pk_diagonal) {\n\
         \x20           continue;\n\
         \x20       }\n\
         \x20       // Output tile (J, I), from the staged tile read transposed.\n",
    );
    output_tile(&mut s, "pk_c0", "pk_r0", "pk_tile{k}[b][a]");
    s.push_str("    }\n");
    s
}

#[cfg(test)]
mod tests {
    use crate::{emit, LaunchShape};
    use kernel_ir::{Access, BinaryOp, Expr, Form, Input, KernelSpec, ScalarType};

    fn spec(form: Form) -> KernelSpec {
        KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F32,
            inputs: vec![
                Input {
                    name: "K".into(),
                    access: Access::LowerSymmetric,
                },
                Input {
                    name: "c".into(),
                    access: Access::Scalar,
                },
            ],
            form,
            provenance: vec![],
        }
    }

    #[test]
    fn symmetric_inputs_select_the_tile_pair_layout() {
        let add = Expr::binary(BinaryOp::Add, Expr::Input(0), Expr::Input(1));
        let k = emit(&spec(Form::Map {
            outputs: vec![add.clone()],
        }));
        assert_eq!(
            k.launch,
            LaunchShape::TilePairs {
                tile: 64,
                block_rows: 8,
                group: 8
            }
        );
        assert!(k.source.contains("__launch_bounds__(256)"));
        assert!(k.source.contains("__shared__ float pk_tile0[64][65];"));
        // Loaded into registers one pair ahead, then staged.
        assert!(k
            .source
            .contains("pk_next0[q][h] = inside ? in0[r * in0_ld + c] : (float)0;"));
        assert!(k.source.contains("pk_tile0[a][b] = pk_next0[q][h];"));
        // Tile (I, J) reads the staged tile as is (transposed above a diagonal), tile (J, I)
        // transposed; both store row-major.
        assert!(k
            .source
            .contains("const float pk_sym0 = j <= i ? pk_tile0[a][b] : pk_tile0[b][a];"));
        assert!(k.source.contains("const float pk_sym0 = pk_tile0[b][a];"));
        assert_eq!(k.source.matches("out0[i * cols + j] = ").count(), 2);
        // A band of rows: the kernel takes its bounds and skips pairs outside it.
        assert!(k
            .source
            .contains("const long long band_start,\n    const long long band_end,"));
        assert!(k
            .source
            .contains("if (pk_ti >= pk_t_lo && pk_ti < pk_t_hi && pk_tj <= pk_ti) {"));
        assert!(!k.source.contains("pk_stride"));
        // A row kernel reads the lower triangle directly.
        let r = emit(&spec(Form::Rows {
            stores: vec![add],
            reductions: vec![],
        }));
        assert!(r
            .source
            .contains("in0[(i >= j ? i : j) * in0_ld + (i >= j ? j : i)]"));
    }
}
