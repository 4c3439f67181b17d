//! Prints the plans of every program in a `.pop` file: the step table, and optionally the
//! graph (DOT) and the generated CUDA C of every fused kernel. Needs no GPU.
//!
//! ```text
//! cargo run --example plan -- examples/programs/kernel_kmeans.pop --dim n=60000 --dim k=10 --dim d=784 [--dot] [--cuda [--cuda-variants]] [--target cpu] [--ranks P]
//! ```

use clap::Parser;
use popcorn::dsl::plan::collective::PartitionSpec;
use popcorn::dsl::{DType, DimBindings, PlannerConfig, Program, Target};
use popcorn::kernel_ir::Half;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Plans every program of a popcorn source file and prints the plans.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// A `.pop` file holding one or more programs.
    file: PathBuf,
    /// A dimension size, `name=value` (repeatable). Sizes a program does not use are ignored.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dims: Vec<String>,
    /// Also print the planned graph in Graphviz DOT (fused groups as clusters).
    #[arg(long)]
    dot: bool,
    /// Also print the generated CUDA C of every fused kernel.
    #[arg(long)]
    cuda: bool,
    /// With `--cuda`, also print the variants a GPU may launch of each TF32 contraction: its
    /// operands rounded to TF32 in memory beforehand, and the warp-specialised body that an
    /// H100 runs for large shallow products (read them, or compile them with NVRTC anywhere).
    #[arg(long, requires = "cuda")]
    cuda_variants: bool,
    /// Also print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Element type: f32 or f64.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Plan without fusion (every element-wise operation its own kernel).
    #[arg(long)]
    no_fusion: bool,
    /// `X * X^T` uses GEMM above this n/d ratio, SYRK below.
    #[arg(long, value_name = "RATIO")]
    syrk_ratio: Option<f64>,
    /// Products with a selection matrix as cluster sums up to this many clusters (0: always
    /// the general cuSPARSE SpMM).
    #[arg(long, value_name = "K")]
    cluster_sums_max_k: Option<usize>,
    /// Let dense products use TF32 tensor cores.
    #[arg(long)]
    tf32: bool,
    /// Multiply the generated contractions' products with 16-bit operands, `bf16` or `fp16`
    /// (16-bit tensor cores, f32 accumulation; the library's products then use TF32).
    #[arg(long, value_name = "FORMAT")]
    half_products: Option<Half>,
    /// Compute the generated contractions' products as three TF32 products of split operands
    /// (3xTF32: about fp32's accuracy on tensor cores).
    #[arg(long)]
    tf32x3: bool,
    /// The density of a CSR parameter, `name=fraction` (repeatable): its stored entries are
    /// that fraction of its shape (the sparse products' cost model reads them). Without it a
    /// CSR parameter counts as dense.
    #[arg(long = "density", value_name = "NAME=FRACTION")]
    densities: Vec<String>,
    /// The machine to plan for: `gpu` (the reference GPU, an H100, whose figures the defaults
    /// were measured on) or `cpu` (the CPU backend, with this machine's threads).
    #[arg(long, default_value = "gpu", value_parser = ["gpu", "cpu"])]
    target: String,
    /// Plan partitioned along the points `n` over this many ranks: prints each rank's rows,
    /// which values are held in rows or replicated, and the collectives with their bytes.
    #[arg(long, value_name = "P")]
    ranks: Option<usize>,
    /// Hold a dense parameter or result in 16 bits, `name=bf16` or `name=fp16` (repeatable;
    /// each program where `name` is one): written and read in half the bytes, computed in f32.
    #[arg(long = "half", value_name = "NAME=FORMAT")]
    halves: Vec<String>,
}

/// The `--half NAME=FORMAT` items as names and formats.
fn parse_halves(items: &[String]) -> Result<BTreeMap<String, Half>, String> {
    let mut held = BTreeMap::new();
    for item in items {
        let (name, format) = item.split_once('=').ok_or_else(|| {
            format!("--half {item}: expected NAME=FORMAT, for example --half K=bf16")
        })?;
        let half: Half = format
            .trim()
            .parse()
            .map_err(|e| format!("--half {item}: {e}"))?;
        held.insert(name.trim().to_string(), half);
    }
    Ok(held)
}

fn parse_dims(items: &[String]) -> Result<DimBindings, String> {
    let mut dims = BTreeMap::new();
    for item in items {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            format!("--dim {item}: expected NAME=VALUE, for example --dim n=60000")
        })?;
        let v: usize = value
            .trim()
            .parse()
            .map_err(|_| format!("--dim {item}: `{value}` is not a positive integer"))?;
        if v == 0 {
            return Err(format!("--dim {item}: a dimension must be at least 1"));
        }
        dims.insert(name.trim().to_string(), v);
    }
    Ok(dims)
}

/// The stored entries of `program`'s CSR parameters from `--density NAME=FRACTION` items.
fn stored_entries(
    program: &Program,
    dims: &DimBindings,
    items: &[String],
) -> Result<BTreeMap<String, usize>, String> {
    let mut nnz = BTreeMap::new();
    for item in items {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            format!("--density {item}: expected NAME=FRACTION, for example --density X=0.005")
        })?;
        let fraction: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|f: &f64| (0.0..=1.0).contains(f))
            .ok_or_else(|| format!("--density {item}: `{value}` is not a fraction in [0, 1]"))?;
        let Some(param) = program.params.iter().find(|p| p.name == name.trim()) else {
            continue;
        };
        if let Some((r, c)) = param.ty.shape.resolve(dims) {
            nnz.insert(
                param.name.clone(),
                (fraction * r as f64 * c as f64).round() as usize,
            );
        }
    }
    Ok(nnz)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let source = match std::fs::read_to_string(&cli.file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", cli.file.display());
            return ExitCode::FAILURE;
        }
    };
    let programs = match Program::parse_all(&source) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error in {}: {e}", cli.file.display());
            return ExitCode::FAILURE;
        }
    };
    let dims = match parse_dims(&cli.dims) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = PlannerConfig::from_env().with_dtype(cli.dtype);
    if cli.no_fusion {
        config.fusion = false;
    }
    if let Some(r) = cli.syrk_ratio {
        config.syrk_gemm_ratio = Some(r);
    }
    if let Some(k) = cli.cluster_sums_max_k {
        config.cluster_sums_max_k = Some(k);
    }
    config.tf32 |= cli.tf32;
    config.half_products = cli.half_products.or(config.half_products);
    config.tf32x3 |= cli.tf32x3;
    let halves = match parse_halves(&cli.halves) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(p) = cli.ranks {
        if p == 0 {
            eprintln!("error: --ranks takes at least 1 rank");
            return ExitCode::FAILURE;
        }
        config.partition = Some(PartitionSpec::points(p));
    }
    let target = if cli.target == "cpu" {
        Target::cpu(std::thread::available_parallelism().map_or(1, |n| n.get()))
    } else {
        Target::reference_gpu()
    };
    let mut failed = false;
    for program in &programs {
        let missing: Vec<String> = program
            .dims()
            .into_iter()
            .filter(|d| !dims.contains_key(d))
            .collect();
        if !missing.is_empty() {
            let hint: Vec<String> = missing.iter().map(|d| format!("--dim {d}=...")).collect();
            println!(
                "# {}: not planned; give {}\n",
                program.signature(),
                hint.join(" ")
            );
            continue;
        }
        let used: DimBindings = program
            .dims()
            .into_iter()
            .map(|d| (d.clone(), dims[&d]))
            .collect();
        let nnz = match stored_entries(program, &used, &cli.densities) {
            Ok(nnz) => nnz,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut config = config.clone();
        config.half_storage = halves
            .iter()
            .filter(|(name, _)| {
                program
                    .params
                    .iter()
                    .chain(&program.outputs)
                    .any(|p| &p.name == *name)
            })
            .map(|(name, half)| (name.clone(), *half))
            .collect();
        match popcorn::dsl::plan(program, &used, &config, &target, &nnz) {
            Ok(plan) => {
                println!("{plan}\n");
                if cli.dot {
                    println!("{}", plan.to_dot());
                }
                if cli.cuda {
                    for kernel in plan.kernels() {
                        let source = popcorn::kernels::emit(&kernel.spec).source;
                        println!("// ---- {}.cu ----\n{source}", kernel.name);
                        if cli.cuda_variants
                            && popcorn::kernels::takes_rounded_operands(&kernel.spec)
                        {
                            for warp_specialised in [false, true] {
                                let variant = popcorn::kernels::ContractionVariant {
                                    rounded: popcorn::kernels::RoundedOperands::BOTH,
                                    warp_specialised,
                                };
                                let generated =
                                    popcorn::kernels::emit_variant(&kernel.spec, variant);
                                println!(
                                    "// ---- {}.cu ----\n{}",
                                    generated.name, generated.source
                                );
                            }
                        }
                    }
                }
                if cli.json {
                    println!("{}", plan.to_json());
                }
            }
            Err(e) => {
                eprintln!("error: cannot plan `{}`: {e}", program.name);
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
