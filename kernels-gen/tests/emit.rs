//! Tests of the generated CUDA C: determinism, naming, parameter ABI, index expressions,
//! reduction code and constants.

mod common;

use common::*;
use kernel_ir::{
    Access, BinaryOp, Expr, Form, KernelSpec, Precision, ReduceKind, Reduction, ScalarType,
    SpecError, UnaryOp,
};
use kernels_gen::{emit, try_emit, LaunchShape};

/// The kernel text after the header comment.
fn kernel_text(source: &str) -> &str {
    let marker = "// (end of header: the kernel text follows)\n";
    match source.find(marker) {
        Some(at) => &source[at + marker.len()..],
        None => panic!("header end marker missing:\n{source}"),
    }
}

/// The parameter declarations of the kernel signature, in order.
fn signature_params(source: &str) -> Vec<String> {
    let kernel = kernel_text(source);
    let start = kernel
        .find("__launch_bounds__(")
        .and_then(|at| kernel[at..].find("(\n").map(|p| at + p + 2));
    let Some(start) = start else {
        panic!("no signature in:\n{kernel}")
    };
    let end = start + kernel[start..].find(")\n{").unwrap_or(0);
    kernel[start..end]
        .split(',')
        .map(|p| p.trim().to_string())
        .collect()
}

/// The name of the temporary assigned `rhs` (`const T tN = rhs;`).
fn temp_for(source: &str, rhs: &str) -> String {
    let suffix = format!(" = {rhs};");
    source
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_suffix(&suffix)
                .and_then(|decl| decl.rsplit(' ').next())
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no temporary for {rhs} in:\n{source}"))
}

fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected to find {needle:?} in:\n{haystack}"
    );
}

#[test]
fn same_spec_gives_same_name_and_source() {
    for (label, spec) in all_samples() {
        let a = emit(&spec);
        let b = emit(&spec.clone());
        assert_eq!(a, b, "{label}");
        assert!(a.name.starts_with("pk_"), "{label}");
        assert_eq!(a.name.len(), 19, "{label}");
        assert!(a.name[3..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}

#[test]
fn launch_shapes_are_known_without_generating_the_text() {
    for (label, spec) in all_samples() {
        assert_eq!(
            kernels_gen::launch_shape(&spec),
            emit(&spec).launch,
            "{label}"
        );
        assert_eq!(emit(&spec).name, spec.name(), "{label}");
    }
}

#[test]
fn different_specs_give_different_names() {
    let samples = all_samples();
    let mut names: Vec<String> = samples.iter().map(|(_, s)| emit(s).name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), samples.len());

    let base = map_affine(ScalarType::F32);
    let mut changed = base.clone();
    if let Form::Map { outputs } = &mut changed.form {
        outputs[0] = bin(BinaryOp::Sub, inp(0), inp(1));
    }
    assert_ne!(emit(&base).name, emit(&changed).name);
    let mut transposed = base.clone();
    transposed.inputs[0].access = MATRIX_T;
    assert_ne!(emit(&base).name, emit(&transposed).name);
}

#[test]
fn provenance_and_input_names_change_the_source_but_not_the_name() {
    let base = rows_kmeans(ScalarType::F64);
    let mut renamed = base.clone();
    renamed.provenance = vec!["elsewhere".to_string()];
    renamed.inputs[0].name = "Gram".to_string();
    let (a, b) = (emit(&base), emit(&renamed));
    assert_eq!(a.name, b.name);
    assert_ne!(a.source, b.source);
    assert_eq!(kernel_text(&a.source), kernel_text(&b.source));
    assert_contains(&b.source, "//   elsewhere\n");
    assert_contains(&b.source, "//   in0 = Gram: matrix");
}

#[test]
fn header_lists_provenance_form_dtype_and_parameters() {
    let k = emit(&rows_kmeans(ScalarType::F32));
    let header = &k.source[..k.source.len() - kernel_text(&k.source).len()];
    assert!(header.starts_with(&format!("// {}: popcorn fused kernel", k.name)));
    assert_contains(header, "// provenance:\n//   distances\n//   assign\n");
    assert_contains(
        header,
        "// form: rows (stores: 1; reductions over j: sum, min, max, argmin, pick(in3))\n",
    );
    assert_contains(header, "// dtype: float (f32)\n");
    assert_contains(
        header,
        "//   in3 = idx: index vector (unsigned int), in3[i] per row\n",
    );
    assert_contains(
        header,
        "// parameters:\n//   const long long rows\n//   const long long cols\n",
    );
    assert_contains(header, "//   out4: one unsigned int index per row, [i]\n");
    assert!(header.lines().all(|l| l.starts_with("//")));
}

#[test]
fn header_text_cannot_break_out_of_comments() {
    let mut spec = map_affine(ScalarType::F32);
    spec.provenance = vec!["line one\nint evil;\\".to_string()];
    spec.inputs[0].name = "x\r\n#define rows 0".to_string();
    let k = emit(&spec);
    let header = &k.source[..k.source.len() - kernel_text(&k.source).len()];
    assert!(header.lines().all(|l| l.starts_with("//")), "{header}");
    assert!(!header.contains('\\'));
}

#[test]
fn parameters_follow_param_order() {
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F32,
        inputs: vec![
            input("A", MATRIX),
            input("c", Access::Col),
            input("r", Access::Row),
            input("s", Access::Scalar),
            input("idx", Access::IndexCol),
            input("B", MATRIX_T),
            input("g", Access::Broadcast),
        ],
        form: Form::Rows {
            stores: vec![inp(0)],
            reductions: vec![
                Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: inp(1),
                },
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: inp(2),
                },
            ],
        },
        provenance: vec![],
    };
    let k = emit(&spec);
    assert_eq!(
        signature_params(&k.source),
        vec![
            "const long long rows",
            "const long long cols",
            "const float* __restrict__ in0",
            "const long long in0_ld",
            "const float* __restrict__ in1",
            "const float* __restrict__ in2",
            "const float in3",
            "const unsigned int* __restrict__ in4",
            "const float* __restrict__ in5",
            "const long long in5_ld",
            "const float* __restrict__ in6",
            "float* __restrict__ out0",
            "unsigned int* __restrict__ out1",
            "float* __restrict__ out2",
        ]
    );
    assert_eq!(
        signature_params(&k.source).len(),
        kernels_gen::params(&spec).len()
    );
}

#[test]
fn f64_parameters_use_double() {
    let k = emit(&map_affine(ScalarType::F64));
    let params = signature_params(&k.source);
    // Map kernels may run in place, so their pointers are not `__restrict__`.
    assert_eq!(params[2], "const double* in0");
    assert_eq!(params[6], "const double in3");
    assert_eq!(params.last().map(String::as_str), Some("double* out2"));
    assert!(!kernel_text(&k.source).contains("float"));
}

#[test]
fn index_expressions_per_access() {
    let k = emit(&map_affine(ScalarType::F32));
    let text = kernel_text(&k.source);
    assert_contains(text, "in0[i * in0_ld + j]");
    assert_contains(text, "in1[j]");
    assert_contains(text, "in2[i]");
    assert_contains(text, " = in3;");
    assert_contains(text, "in4[j * in4_ld + i]");
    assert_contains(text, "in5[0]");
    // Map: grid-stride over the 64-bit linear index, output at the linear index.
    assert_contains(text, "const long long pk_n = rows * cols;");
    assert_contains(text, "pk_e += pk_stride");
    assert_contains(text, "const long long i = pk_e / cols;");
    assert_contains(text, "const long long j = pk_e - i * cols;");
    assert_contains(text, "out0[pk_e] = ");
    assert_contains(text, "out2[pk_e] = ");
    assert_eq!(k.launch, LaunchShape::Linear { block_threads: 256 });
}

#[test]
fn inputs_are_loaded_once_per_element() {
    let k = emit(&map_affine(ScalarType::F32));
    // X is read by out0 and out1, c once.
    assert_eq!(
        kernel_text(&k.source)
            .matches("in0[i * in0_ld + j]")
            .count(),
        1
    );
    let k = emit(&map_all_ops(ScalarType::F64));
    assert_eq!(
        kernel_text(&k.source)
            .matches("in0[i * in0_ld + j]")
            .count(),
        1
    );
    // The constant 0.5 is shared too.
    assert_eq!(kernel_text(&k.source).matches(" = 0.5;").count(), 1);
}

#[test]
fn map_without_positional_inputs_skips_the_index_division() {
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F32,
        inputs: vec![input("s", Access::Scalar), input("g", Access::Broadcast)],
        form: Form::Map {
            outputs: vec![bin(BinaryOp::Mul, inp(0), inp(1))],
        },
        provenance: vec![],
    };
    let text = emit(&spec).source;
    assert!(!text.contains("pk_e / cols"));
    assert_contains(&text, "out0[pk_e] = ");
}

#[test]
fn every_operation_uses_the_dtype_function() {
    let f32_text = emit(&map_all_ops(ScalarType::F32)).source;
    let f64_text = emit(&map_all_ops(ScalarType::F64)).source;
    for f in ["sqrtf(", "logf(", "tanhf(", "powf(", "fmaxf(", "fminf("] {
        assert_contains(&f32_text, f);
        assert!(!f64_text.contains(f), "{f} in f64 source");
    }
    for f in ["sqrt(", "log(", "tanh(", "pow(", "fmax(", "fmin("] {
        assert_contains(&f64_text, f);
    }
    // pow goes through the prelude's helper, which multiplies for exponents 1 to 4.
    assert_contains(&f32_text, "= pk_pow_f32(");
    assert_contains(&f32_text, "if (y == (float)2) {\n        return x * x;");
    assert_contains(&f64_text, "= pk_pow_f64(");
    assert_contains(&f64_text, "return pow(x, y);");
    let affine32 = emit(&map_affine(ScalarType::F32)).source;
    let affine64 = emit(&map_affine(ScalarType::F64)).source;
    assert_contains(&affine32, "expf(");
    assert_contains(&affine32, "fabsf(");
    assert_contains(&affine64, "exp(");
    assert_contains(&affine64, "fabs(");
    assert!(!affine64.contains("expf(") && !affine64.contains("fabsf("));
    // Negation, comparisons as 1/0, select on != 0, division.
    let x32 = temp_for(&f32_text, "in0[i * in0_ld + j]");
    let half32 = temp_for(&f32_text, "((float)(0.5))");
    let x64 = temp_for(&f64_text, "in0[i * in0_ld + j]");
    let half64 = temp_for(&f64_text, "0.5");
    assert_contains(&f32_text, &format!(" = -{x32};"));
    for op in ["<", "<=", ">", ">=", "==", "!="] {
        assert_contains(
            &f32_text,
            &format!("(({x32} {op} {half32}) ? (float)1 : (float)0)"),
        );
        assert_contains(
            &f64_text,
            &format!("(({x64} {op} {half64}) ? (double)1 : (double)0)"),
        );
    }
    let lt = temp_for(
        &f32_text,
        &format!("(({x32} < {half32}) ? (float)1 : (float)0)"),
    );
    let neg = temp_for(&f32_text, &format!("-{x32}"));
    assert_contains(&f32_text, &format!("(({lt} != (float)0) ? {x32} : {neg})"));
    assert_contains(&f32_text, &format!("{x32} / t"));
}

#[test]
fn constants_round_trip_exactly() {
    let values = [
        0.1,
        -2.5,
        1.0,
        1e-7,
        3.0e300,
        5e-324,
        -0.0,
        123_456_789.123_456_78,
        2.0f64.powi(60),
    ];
    for &v in &values {
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F64,
            inputs: vec![],
            form: Form::Map {
                outputs: vec![c(v)],
            },
            provenance: vec![],
        };
        let text = emit(&spec).source;
        let line = text
            .lines()
            .find(|l| l.contains("const double t0 = "))
            .unwrap_or_else(|| panic!("no constant line in:\n{text}"));
        let literal = line
            .trim()
            .trim_start_matches("const double t0 = ")
            .trim_end_matches(';')
            .trim_start_matches('(')
            .trim_end_matches(')');
        let parsed: f64 = literal
            .parse()
            .unwrap_or_else(|_| panic!("bad literal {literal}"));
        assert_eq!(parsed.to_bits(), v.to_bits(), "{v} printed as {literal}");

        let mut spec32 = spec.clone();
        spec32.dtype = ScalarType::F32;
        let text = emit(&spec32).source;
        assert_contains(&text, &format!("const float t0 = ((float)({literal}));"));
    }
    // Negative constants are parenthesised so `a - -b` never appears.
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F64,
        inputs: vec![input("s", Access::Scalar)],
        form: Form::Map {
            outputs: vec![bin(BinaryOp::Sub, inp(0), c(-2.0))],
        },
        provenance: vec![],
    };
    assert_contains(&emit(&spec).source, "const double t1 = (-2.0);");
}

#[test]
fn infinities_use_prelude_macros_without_headers() {
    let k32 = emit(&map_all_ops(ScalarType::F32)).source;
    assert_contains(&k32, "#define PK_INF_F32 (__int_as_float(0x7f800000))");
    assert_contains(&k32, "#define PK_NAN_F32 (__int_as_float(0x7fc00000))");
    assert_contains(&k32, "= (PK_INF_F32);");
    assert_contains(&k32, "= (-PK_INF_F32);");
    assert!(!k32.contains("INFINITY"));
    let k64 = emit(&map_all_ops(ScalarType::F64)).source;
    assert_contains(
        &k64,
        "#define PK_INF_F64 (__longlong_as_double(0x7ff0000000000000LL))",
    );
    assert_contains(&k64, "= (-PK_INF_F64);");
    for source in [k32, k64] {
        assert!(!source.contains("#include"));
    }
}

#[test]
fn row_reductions_initialise_and_combine_per_kind() {
    let k = emit(&rows_kmeans(ScalarType::F32));
    let text = kernel_text(&k.source);
    assert_eq!(k.launch, LaunchShape::WarpPerRow { warps_per_block: 8 });
    assert_contains(text, "__launch_bounds__(256)");
    // One warp per row, lanes stride over columns.
    assert_contains(
        text,
        "for (long long i = pk_first; i < rows; i += pk_step) {",
    );
    assert_contains(text, "for (long long j = pk_lane; j < cols; j += 32) {");
    // Store as the lanes go.
    assert_contains(text, "out0[i * cols + j] = t");
    // Initial values.
    assert_contains(text, "float r0 = (float)0;");
    assert_contains(text, "float r1 = PK_INF_F32;");
    assert_contains(text, "float r2 = -PK_INF_F32;");
    assert_contains(
        text,
        "float r3 = PK_INF_F32;\n        unsigned int r3_at = 0u;",
    );
    // Lane-local folds.
    let d = "t6"; // the distance temporary (d, 2, K, 2K, d - 2K, r, dist)
    assert_contains(text, &format!("r0 += {d};"));
    assert_contains(text, &format!("r1 = ({d} < r1) ? {d} : r1;"));
    assert_contains(text, &format!("r2 = ({d} > r2) ? {d} : r2;"));
    // ArgMin: strict < in ascending j keeps the lowest index of equal values.
    assert_contains(
        text,
        &format!("if ({d} < r3) {{ r3 = {d}; r3_at = (unsigned int)j; }}"),
    );
    // Shuffle tree; argmin combines on (value, index).
    assert_contains(text, "for (int pk_off = 16; pk_off > 0; pk_off >>= 1) {");
    assert_contains(
        text,
        "const float o0 = __shfl_down_sync(0xffffffffu, r0, pk_off);",
    );
    assert_contains(
        text,
        "const unsigned int o3_at = __shfl_down_sync(0xffffffffu, r3_at, pk_off);",
    );
    assert_contains(
        text,
        "if (o3 < r3 || (o3 == r3 && o3_at < r3_at)) { r3 = o3; r3_at = o3_at; }",
    );
    // Lane 0 writes; outputs numbered after the store.
    assert_contains(text, "if (pk_lane == 0) {");
    assert_contains(text, "out1[i] = r0;");
    assert_contains(text, "out4[i] = r3_at;");
    // Pick: evaluated once at (i, idx[i]), NaN when out of range.
    assert_contains(text, "const long long pk_pick4 = (long long)in3[i];");
    assert_contains(text, "float v4 = PK_NAN_F32;");
    assert_contains(text, "if (pk_pick4 < cols) {");
    assert_contains(text, "in0[i * in0_ld + pk_pick4]");
    assert_contains(text, "in2[pk_pick4]");
    assert_contains(text, "out5[i] = v4;");
    // The pick is not folded in the column loop.
    assert!(!text.contains("r4"));
}

#[test]
fn rows_with_only_picks_skip_the_column_pass() {
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F64,
        inputs: vec![input("X", MATRIX), input("idx", Access::IndexCol)],
        form: Form::Rows {
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::Pick { index_input: 1 },
                expr: inp(0),
            }],
        },
        provenance: vec![],
    };
    let text = emit(&spec).source;
    assert!(!text.contains("j += 32"));
    assert!(!text.contains("__shfl"));
    assert_contains(&text, "double v0 = PK_NAN_F64;");
}

#[test]
fn column_reductions_are_deterministic_block_reductions() {
    let k = emit(&cols_stats(ScalarType::F64));
    let text = kernel_text(&k.source);
    assert_eq!(
        k.launch,
        LaunchShape::ColumnGroups {
            block_threads: 1024,
            elem_bytes: 8
        }
    );
    assert_eq!(k.launch.grid_block(10, 70), ((18, 1, 1), (4, 256, 1), 8192));
    assert_eq!(
        k.launch.grid_block(10, 100_000),
        ((3125, 1, 1), (32, 32, 1), 8192)
    );
    assert_contains(text, "__launch_bounds__(1024)");
    assert_contains(
        text,
        "extern __shared__ __align__(8) unsigned char pk_smem[];",
    );
    assert_contains(text, "double* const pk_part = (double*)pk_smem;");
    assert_contains(text, "pk_c0 += (long long)gridDim.x * pk_width");
    assert_contains(
        text,
        "for (long long i = pk_r0 + pk_ty; i < pk_r1; i += pk_depth) {",
    );
    assert_contains(text, "double r0 = (double)0;");
    assert_contains(text, "double r1 = PK_INF_F64;");
    assert_contains(text, "double r2 = -PK_INF_F64;");
    // Fixed-order tree over the rows of threads.
    assert_contains(
        text,
        "for (int pk_half = pk_depth >> 1; pk_half > 0; pk_half >>= 1) {",
    );
    assert_contains(
        text,
        "const double pk_v = pk_part[pk_slot + pk_half * pk_width];",
    );
    assert_contains(text, "pk_acc += pk_v;");
    assert_contains(text, "pk_acc = (pk_v < pk_acc) ? pk_v : pk_acc;");
    assert_contains(text, "pk_acc = (pk_v > pk_acc) ? pk_v : pk_acc;");
    assert_contains(text, "out2[j] = pk_part[pk_tx];");
    // Split rows: partials to scratch, one ticket per column group, the last block folds the
    // slices in order.
    assert_contains(
        text,
        "pk_partials[((long long)blockIdx.y * cols + j) * 3LL + 2LL] = pk_part[pk_tx];",
    );
    assert_eq!(text.matches("atomicAdd(").count(), 1);
    assert_contains(text, "atomicAdd(&pk_tickets[pk_c0 / pk_width], 1u)");
    assert_contains(
        text,
        "for (unsigned int pk_s = 1; pk_s < gridDim.y; ++pk_s) {",
    );
    // Every __syncthreads is reached by the whole block: none inside `if (j < cols)` or
    // `if (pk_ty < pk_half)` (three per reduction), three more under the block-uniform
    // `if (gridDim.y > 1)`.
    assert_eq!(text.matches("__syncthreads();").count(), 12);
    for block in text.split("if (").skip(1) {
        if block.starts_with("gridDim.y > 1)") {
            continue;
        }
        let body = block.split('}').next().unwrap_or("");
        assert!(
            !body.contains("__syncthreads"),
            "barrier under a condition:\n{body}"
        );
    }
}

#[test]
fn invalid_specs_emit_error_directives_and_try_emit_reports_them() {
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F32,
        inputs: vec![input("X", MATRIX), input("idx", Access::IndexCol)],
        form: Form::Cols {
            reductions: vec![
                Reduction {
                    kind: ReduceKind::ArgMin,
                    expr: inp(0),
                },
                Reduction {
                    kind: ReduceKind::Sum,
                    expr: bin(BinaryOp::Add, inp(7), inp(1)),
                },
            ],
        },
        provenance: vec![],
    };
    let problems = spec.problems();
    // Reading index input 1 as a value is allowed (converted to the value type).
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(matches!(
        problems[0],
        SpecError::UnsupportedColumnReduction { kind: "argmin", .. }
    ));
    assert!(matches!(
        problems[1],
        SpecError::InputOutOfRange {
            index: 7,
            count: 2,
            ..
        }
    ));
    let k = emit(&spec);
    assert_eq!(k.source.matches("#error \"").count(), 2);
    assert_contains(
        &k.source,
        "#error \"column reduction 0 is a argmin reduction",
    );
    assert_eq!(try_emit(&spec), Err(problems[0].clone()));

    let bad_pick = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F64,
        inputs: vec![input("X", MATRIX)],
        form: Form::Rows {
            stores: vec![],
            reductions: vec![Reduction {
                kind: ReduceKind::Pick { index_input: 0 },
                expr: inp(0),
            }],
        },
        provenance: vec![],
    };
    assert!(matches!(
        bad_pick.validate(),
        Err(SpecError::PickIndexNotIndexCol { index_input: 0, .. })
    ));
    assert!(emit(&bad_pick).source.contains("#error"));
}

#[test]
fn valid_samples_have_no_problems() {
    for (label, spec) in all_samples() {
        assert_eq!(spec.problems(), vec![], "{label}");
        assert!(try_emit(&spec).is_ok(), "{label}");
        // Only the pipelined contraction's guard for GPUs it cannot run on may remain.
        let source = emit(&spec).source;
        let errors = source
            .lines()
            .filter(|l| l.starts_with("#error") && !l.contains("compute capability 8.0"))
            .count();
        assert_eq!(errors, 0, "{label}");
    }
}

#[test]
fn empty_forms_still_emit_valid_kernels() {
    let specs = [
        Form::Map { outputs: vec![] },
        Form::Rows {
            stores: vec![],
            reductions: vec![],
        },
        Form::Cols { reductions: vec![] },
    ];
    for form in specs {
        let spec = KernelSpec {
            narrow: Default::default(),
            dtype: ScalarType::F32,
            inputs: vec![],
            form,
            provenance: vec![],
        };
        let k = emit(&spec);
        assert_eq!(
            signature_params(&k.source),
            vec!["const long long rows", "const long long cols"]
        );
    }
}

#[test]
fn unary_and_select_compose() {
    let spec = KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F64,
        inputs: vec![input("x", Access::Col)],
        form: Form::Map {
            outputs: vec![Expr::select(
                bin(BinaryOp::Ge, inp(0), c(0.0)),
                un(UnaryOp::Sqrt, inp(0)),
                un(UnaryOp::Neg, un(UnaryOp::Sqrt, un(UnaryOp::Neg, inp(0)))),
            )],
        },
        provenance: vec![],
    };
    let text = emit(&spec).source;
    assert_contains(&text, "const double t0 = in0[i];");
    assert_contains(&text, "const double t1 = 0.0;");
    assert_contains(
        &text,
        "const double t2 = ((t0 >= t1) ? (double)1 : (double)0);",
    );
    assert_contains(&text, "const double t3 = sqrt(t0);");
    assert_contains(&text, "const double t4 = -t0;");
    assert_contains(&text, "const double t5 = sqrt(t4);");
    assert_contains(&text, "const double t6 = -t5;");
    assert_contains(&text, "const double t7 = ((t2 != (double)0) ? t3 : t6);");
    assert_contains(&text, "out0[pk_e] = t7;");
}

/// A pipelined contraction summing `pow(s * P + 1, exponent)` by label, with an argmin of the
/// product too when `with_argmin`.
fn polynomial_by_label(exponent: Expr, with_argmin: bool) -> KernelSpec {
    let mut reductions = vec![Reduction {
        kind: ReduceKind::ByLabel { labels: 3 },
        expr: bin(
            BinaryOp::Pow,
            bin(
                BinaryOp::Add,
                bin(BinaryOp::Mul, inp(2), Expr::Product),
                c(1.0),
            ),
            exponent,
        ),
    }];
    if with_argmin {
        reductions.insert(
            0,
            Reduction {
                kind: ReduceKind::ArgMin,
                expr: Expr::Product,
            },
        );
    }
    KernelSpec {
        narrow: Default::default(),
        dtype: ScalarType::F32,
        inputs: vec![
            input("X", Access::Left { transposed: false }),
            input("Y", Access::Right { transposed: true }),
            input("s", Access::Scalar),
            input("labels", Access::IndexRow),
            input("degree", Access::Scalar),
        ],
        form: Form::Contraction {
            a: 0,
            b: 1,
            precision: Precision::Tf32,
            symmetric: false,
            stores: vec![],
            reductions,
        },
        provenance: vec![],
    }
}

#[test]
fn pipelined_contractions_specialise_a_scalar_exponent_per_tile() {
    let source = emit(&polynomial_by_label(inp(4), false)).source;
    assert_contains(&source, "static constexpr int kVariants = 5;");
    assert_contains(&source, "return pk_pow_f32_variant(in4);");
    assert_contains(&source, "pk_pow_f32_v<V>(");
    assert_contains(
        &source,
        "template <int V>\n    __device__ __forceinline__ Values eval(",
    );
    // A constant exponent folds at compile time: no variants.
    let source = emit(&polynomial_by_label(c(2.0), false)).source;
    assert_contains(&source, "static constexpr int kVariants = 1;");
    assert!(!source.contains("pk_pow_f32_v<V>("), "{source}");
}

#[test]
fn symmetric_sums_by_label_walk_one_triangle_on_hopper() {
    let mut spec = polynomial_by_label(inp(4), false);
    assert_contains(
        &emit(&spec).source,
        "static constexpr bool kSymmetric = false;",
    );
    if let Form::Contraction { symmetric, .. } = &mut spec.form {
        *symmetric = true;
    }
    let kernel = emit(&spec);
    assert_contains(&kernel.source, "static constexpr bool kSymmetric = true;");
    // The mirror image goes to the columns' rows, in the bins of the rows' labels.
    assert_contains(
        &kernel.source,
        "__device__ __forceinline__ void add_to(const long long i, const unsigned int c, const float v) const {",
    );
    assert_contains(&kernel.source, "tile_column_sums<4, 32>(");
    // A symmetric kernel is another kernel (its name differs), and says so.
    assert_ne!(kernel.name, emit(&polynomial_by_label(inp(4), false)).name);
    assert_contains(&kernel.source, "symmetric");
    // With an argmin beside the sum by label, the triangle cannot hold: not symmetric.
    let mut with_argmin = polynomial_by_label(inp(4), true);
    if let Form::Contraction { symmetric, .. } = &mut with_argmin.form {
        *symmetric = true;
    }
    assert_contains(
        &emit(&with_argmin).source,
        "static constexpr bool kSymmetric = false;",
    );
}

#[test]
fn sums_by_label_are_zeroed_by_the_launcher_and_may_split_rows() {
    let alone = polynomial_by_label(inp(4), false);
    assert_eq!(kernels_gen::zeroed_outputs(&alone), vec![0]);
    let split = |spec: &KernelSpec| match kernels_gen::launch_shape(spec) {
        LaunchShape::Pipelined { split_columns, .. } => split_columns,
        other => panic!("not pipelined: {other:?}"),
    };
    assert!(split(&alone));
    assert_contains(
        &emit(&alone).source,
        "static constexpr bool kSplitColumns = true;",
    );
    // With an argmin, a row's partials must meet in one block: no split.
    let with_argmin = polynomial_by_label(inp(4), true);
    assert_eq!(kernels_gen::zeroed_outputs(&with_argmin), vec![1]);
    assert!(!split(&with_argmin));
    assert_contains(
        &emit(&with_argmin).source,
        "static constexpr bool kSplitColumns = false;",
    );
    // The tiled template (f64) clears its own bins.
    let mut f64_spec = alone;
    f64_spec.dtype = ScalarType::F64;
    assert!(kernels_gen::zeroed_outputs(&f64_spec).is_empty());
    // Map kernels add into nothing.
    assert!(kernels_gen::zeroed_outputs(&common::map_affine(ScalarType::F32)).is_empty());
}

#[test]
fn pipelined_launches_fill_the_device_when_rows_may_split() {
    let shape = kernels_gen::launch_shape(&polynomial_by_label(inp(4), false));
    // 10,500 rows are 42 blocks of 256; split, they fill all 132 multiprocessors.
    let ((grid, _, _), _, _) = shape
        .pipelined_grid_block((10_500, 10_500, 26), 132, 227 * 1024)
        .expect("fits");
    assert_eq!(grid, 132);
    let shape = kernels_gen::launch_shape(&polynomial_by_label(inp(4), true));
    let ((grid, _, _), _, _) = shape
        .pipelined_grid_block((10_500, 10_500, 26), 132, 227 * 1024)
        .expect("fits");
    assert_eq!(grid, 42);
}

/// TF32 contractions on the pipelined template have a kernel per set of operands rounded in
/// memory, and a warp-specialised one where both are; other kernels ignore the request and
/// keep `emit`'s name and source.
#[test]
fn contraction_variants_name_their_own_tf32_kernel() {
    use kernel_ir::{samples::mixed_contraction, Precision, ScalarType};
    use kernels_gen::{
        emit_variant, takes_rounded_operands, variant_name, ContractionVariant, RoundedOperands,
    };
    let both = RoundedOperands { a: true, b: true };
    let b_only = RoundedOperands { a: false, b: true };
    let rounded = |rounded| ContractionVariant {
        rounded,
        warp_specialised: false,
    };
    let tf32 = mixed_contraction(ScalarType::F32, (false, true), Precision::Tf32, true);
    assert!(takes_rounded_operands(&tf32));
    let plain = emit(&tf32);
    assert_eq!(emit_variant(&tf32, ContractionVariant::default()), plain);
    assert!(plain.source.contains("pk::contraction<pk::MMA_TF32, 0>"));
    for (operands, mask) in [(b_only, 2), (both, 3)] {
        let k = emit_variant(&tf32, rounded(operands));
        assert_eq!(k.name, format!("{}_r{mask}", plain.name));
        assert_eq!(variant_name(&tf32, rounded(operands)), k.name);
        assert!(k.source.contains("void __launch_bounds__(256, 1)"));
        assert!(k.source.contains(&format!("{}(", k.name)));
        assert!(k
            .source
            .contains(&format!("pk::contraction<pk::MMA_TF32, {mask}>")));
        assert_eq!(k.launch, plain.launch);
    }
    // The warp-specialised body: both operands rounded, 384 threads, two tensor maps.
    let ws = ContractionVariant {
        rounded: both,
        warp_specialised: true,
    };
    let k = emit_variant(&tf32, ws);
    assert_eq!(k.name, format!("{}_r3_ws", plain.name));
    assert_eq!(variant_name(&tf32, ws), k.name);
    assert!(k.source.contains("void __launch_bounds__(384, 1)"));
    assert!(k
        .source
        .contains("const __grid_constant__ pk::TensorMap pk_ta"));
    assert!(k
        .source
        .contains("pk::contraction_warp_specialised<pk::MMA_TF32>("));
    assert_eq!(k.launch, plain.launch.warp_specialised());
    assert_eq!(k.launch.threads_per_block(), 384);
    // Without both operands rounded the request is the rounded kernel's.
    let partial = ContractionVariant {
        rounded: b_only,
        warp_specialised: true,
    };
    assert_eq!(
        emit_variant(&tf32, partial),
        emit_variant(&tf32, rounded(b_only))
    );
    // Strict, f64 and transposed-operand contractions stage nothing to round.
    for spec in [
        mixed_contraction(ScalarType::F32, (false, true), Precision::Strict, true),
        mixed_contraction(ScalarType::F64, (false, true), Precision::Tf32, true),
        mixed_contraction(ScalarType::F32, (true, true), Precision::Tf32, true),
    ] {
        assert!(!takes_rounded_operands(&spec));
        assert_eq!(emit_variant(&spec, ws), emit(&spec));
        assert_eq!(variant_name(&spec, ws), spec.name());
    }
}

/// Contractions with 16-bit operands: on the pipelined template the launcher packs both
/// operands (never rounded by the kernel) and the inner product is the 16-bit one, the
/// warp-specialised body included; on the tiled template (transposed operands) each staged value
/// is rounded to the format and multiplied on TF32 tensor cores. f64 ignores the precision.
#[test]
fn sixteen_bit_operands_pick_their_products() {
    use kernel_ir::{samples::mixed_contraction, Half, Precision, ScalarType};
    use kernels_gen::{
        emit_variant, packs_half_operands, takes_rounded_operands, ContractionVariant,
        RoundedOperands,
    };
    for (half, mma, round) in [
        (Half::Bf16, "pk::MMA_BF16", "pk_from_bf16(pk_to_bf16(pk_v))"),
        (Half::F16, "pk::MMA_F16", "pk_from_f16(pk_to_f16(pk_v))"),
    ] {
        let precision = Precision::Half(half);
        let spec = mixed_contraction(ScalarType::F32, (false, true), precision, true);
        assert_eq!(packs_half_operands(&spec), Some(half));
        assert!(!takes_rounded_operands(&spec));
        let plain = emit(&spec);
        assert!(plain
            .source
            .contains(&format!("pk::contraction<{mma}, 3>(")));
        assert!(plain
            .source
            .contains(&format!("{} tensor cores", half.name())));
        // A request for rounded operands changes nothing; the warp-specialised body is its own.
        let rounded = ContractionVariant {
            rounded: RoundedOperands::BOTH,
            warp_specialised: false,
        };
        assert_eq!(emit_variant(&spec, rounded), plain);
        let ws = emit_variant(
            &spec,
            ContractionVariant {
                rounded: RoundedOperands::NONE,
                warp_specialised: true,
            },
        );
        assert_eq!(ws.name, format!("{}_r0_ws", plain.name));
        assert!(ws
            .source
            .contains(&format!("pk::contraction_warp_specialised<{mma}>(")));
        // Tiled: rounded while staged, TF32 instructions.
        let tiled = mixed_contraction(ScalarType::F32, (true, true), precision, true);
        assert_eq!(packs_half_operands(&tiled), None);
        let k = emit(&tiled);
        assert!(
            k.source.contains(&format!("pk_v = {round};")),
            "{}",
            k.source
        );
        assert!(k.source.contains("m16n8k8.row.col.f32.tf32.tf32.f32"));
        // f64 computes strictly whatever the precision.
        let f64_spec = mixed_contraction(ScalarType::F64, (false, true), precision, true);
        assert_eq!(packs_half_operands(&f64_spec), None);
        assert!(!emit(&f64_spec).source.contains("pk_to_"));
    }
    // Each precision names its own kernel.
    let names: std::collections::BTreeSet<String> = [
        Precision::Strict,
        Precision::Tf32,
        Precision::Half(Half::Bf16),
        Precision::Half(Half::F16),
    ]
    .into_iter()
    .map(|p| mixed_contraction(ScalarType::F32, (false, true), p, true).name())
    .collect();
    assert_eq!(names.len(), 4);
}

/// 3xTF32 contractions: on the pipelined template the launcher's split pairs, taken as TF32
/// values never rounded again, with the triangle of tiles allowed for two copies of one matrix;
/// on the tiled template the strict product.
#[test]
fn three_tf32_products_take_split_pairs_or_stay_strict() {
    use kernel_ir::{samples, Precision, ScalarType};
    use kernels_gen::{splits_tf32_operands, takes_rounded_operands};
    let pipelined = samples::symmetric_kernel_sums(ScalarType::F32, Precision::Tf32x3);
    assert!(splits_tf32_operands(&pipelined));
    assert!(!takes_rounded_operands(&pipelined));
    let k = emit(&pipelined);
    assert!(k.source.contains("pk::contraction<pk::MMA_TF32, 3>("));
    assert!(k
        .source
        .contains("static constexpr bool kSplitOperands = true;"));
    assert!(k.source.contains("3xtf32 tensor cores"));
    // A product of two matrices (or mirrored stores) never walks a triangle of split copies.
    let cross = samples::mixed_contraction(ScalarType::F32, (false, true), Precision::Tf32x3, true);
    assert!(splits_tf32_operands(&cross));
    assert!(emit(&cross)
        .source
        .contains("static constexpr bool kSplitOperands = false;"));
    let tf32 = emit(&samples::symmetric_kernel_sums(
        ScalarType::F32,
        Precision::Tf32,
    ));
    assert!(tf32
        .source
        .contains("static constexpr bool kSplitOperands = false;"));
    assert_ne!(k.name, tf32.name);
    let tiled = samples::mixed_contraction(ScalarType::F32, (true, true), Precision::Tf32x3, true);
    assert!(!splits_tf32_operands(&tiled));
    let t = emit(&tiled);
    assert!(!t.source.contains("mma.sync") && !t.source.contains("pk_tf32"));
}

/// The warp-specialised shape's shared memory: the whole depth of the left operand resident
/// (at most two chunks), six right-operand slots, scratch and barriers; refused where the
/// device has less.
#[test]
fn warp_specialised_contractions_plan_their_shared_memory() {
    use kernel_ir::{samples::mixed_contraction, Precision, ScalarType};
    use kernels_gen::emit::{
        PIPELINE_A_CHUNK_BYTES, PIPELINE_B_CHUNK_BYTES, PIPELINE_WS_OTHER_BYTES,
    };
    let spec = mixed_contraction(ScalarType::F32, (false, true), Precision::Tf32, true);
    let shape = kernels_gen::launch_shape(&spec).warp_specialised();
    for (depth, chunks) in [(1u64, 1u32), (32, 1), (33, 2), (64, 2)] {
        let want =
            chunks * PIPELINE_A_CHUNK_BYTES + 6 * PIPELINE_B_CHUNK_BYTES + PIPELINE_WS_OTHER_BYTES;
        let (grid, block, shared) = shape
            .pipelined_grid_block((5000, 5000, depth), 132, 232_448)
            .expect("fits");
        assert_eq!((shared, block), (want, (384, 1, 1)), "depth {depth}");
        assert!(grid.0 >= 1 && grid.0 <= 132);
    }
    assert!(shape
        .pipelined_grid_block((5000, 5000, 64), 132, 100_000)
        .is_err());
}

#[test]
fn matrices_held_in_sixteen_bits_are_widened_on_load_and_rounded_on_store() {
    use kernel_ir::{Half, Input, Narrow};
    // out0 = 2 * in0 (a matrix), in a map, a row kernel and a lower-symmetric tile-pair map.
    let map = |access: Access, narrow: Narrow| KernelSpec {
        narrow,
        dtype: ScalarType::F32,
        inputs: vec![Input {
            name: "K".into(),
            access,
        }],
        form: Form::Map {
            outputs: vec![Expr::binary(
                BinaryOp::Mul,
                Expr::Const(2.0),
                Expr::Input(0),
            )],
        },
        provenance: vec![],
    };
    let plain = map(Access::Matrix { transposed: false }, Narrow::default());
    for half in [Half::Bf16, Half::F16] {
        let (widen, round) = match half {
            Half::Bf16 => ("pk_from_bf16", "pk_to_bf16"),
            Half::F16 => ("pk_from_f16", "pk_to_f16"),
        };
        let both = Narrow {
            inputs: vec![(0, half)],
            outputs: vec![(0, half)],
        };
        for access in [Access::Matrix { transposed: false }, Access::LowerSymmetric] {
            let spec = map(access, both.clone());
            spec.validate().expect("valid");
            let k = try_emit(&spec).expect("emits");
            assert_ne!(
                spec.name(),
                plain.name(),
                "16-bit storage changes the identity"
            );
            let params = signature_params(&k.source);
            assert!(
                params.iter().any(|p| p == "const unsigned short* in0"),
                "{params:?}"
            );
            assert!(
                params.iter().any(|p| p == "unsigned short* out0"),
                "{params:?}"
            );
            assert_contains(&k.source, "#define PK_HALF_CONVERSIONS");
            assert_contains(&k.source, &format!("{widen}(in0["));
            assert_contains(&k.source, &format!("= {round}("));
        }
        // Narrow outputs must be full matrices, narrow inputs matrices, and the kernel f32.
        let mut bad = map(
            Access::Col,
            Narrow {
                inputs: vec![(0, half)],
                outputs: vec![],
            },
        );
        assert!(matches!(bad.validate(), Err(SpecError::NarrowInput { .. })));
        bad.inputs[0].access = Access::Matrix { transposed: true };
        bad.dtype = ScalarType::F64;
        assert!(matches!(bad.validate(), Err(SpecError::NarrowInput { .. })));
    }
    // Kernels that hold nothing keep their source free of the conversions.
    assert!(!emit(&plain).source.contains("PK_HALF_CONVERSIONS"));
}
