//! From flags to fits: the kernel with its parameters, the initialisation, the builder.

use super::cli::{Cli, InitName, KernelName};
use popcorn::kkmeans::{Init, Kernel, KernelKMeans, ProductPrecision};
use popcorn::DeviceSpec;

/// One fit to run: a name for displays and the parameters.
#[derive(Clone, Debug)]
pub struct FitSpec {
    /// Short name (the kernel's).
    pub name: String,
    /// The parameters.
    pub params: KernelKMeans,
}

/// The kernel named by `name` with its parameters from the flags; `demo_gamma` is the gaussian
/// gamma used when `--gamma` is absent (`None`: 1/d). Flags that do not apply to the kernel
/// add a warning.
pub fn kernel_from_flags(
    cli: &Cli,
    name: KernelName,
    demo_gamma: Option<f64>,
    warnings: &mut Vec<String>,
) -> Kernel {
    let mut unused = |flag: &str, given: bool| {
        if given {
            warnings.push(format!(
                "{flag} does not apply to the {} kernel; ignored",
                kernel_word(name)
            ));
        }
    };
    match name {
        KernelName::Linear | KernelName::Precomputed => {
            unused("--gamma", cli.gamma.is_some());
            unused("--coef0", cli.coef0.is_some());
            unused("--degree", cli.degree.is_some());
            if name == KernelName::Linear {
                Kernel::Linear
            } else {
                Kernel::Precomputed
            }
        }
        KernelName::Polynomial => match Kernel::POLYNOMIAL_DEFAULT {
            Kernel::Polynomial {
                gamma,
                coef0,
                degree,
            } => Kernel::Polynomial {
                gamma: cli.gamma.unwrap_or(gamma),
                coef0: cli.coef0.unwrap_or(coef0),
                degree: cli.degree.unwrap_or(degree),
            },
            other => other,
        },
        KernelName::Gaussian => {
            unused("--coef0", cli.coef0.is_some());
            unused("--degree", cli.degree.is_some());
            Kernel::Gaussian {
                gamma: cli.gamma.or(demo_gamma),
            }
        }
        KernelName::Sigmoid => {
            unused("--degree", cli.degree.is_some());
            Kernel::Sigmoid {
                gamma: cli.gamma,
                coef0: cli.coef0.unwrap_or(1.0),
            }
        }
    }
}

fn kernel_word(name: KernelName) -> &'static str {
    match name {
        KernelName::Linear => "linear",
        KernelName::Polynomial => "polynomial",
        KernelName::Gaussian => "gaussian",
        KernelName::Sigmoid => "sigmoid",
        KernelName::Precomputed => "precomputed",
    }
}

/// The kernel and its parameters in words, with defaults resolved for `d` features.
pub fn describe_kernel(kernel: &Kernel, d: usize) -> String {
    let by_d = |g: Option<f64>| match g {
        Some(g) => format!("gamma {g}"),
        None => format!("gamma 1/d = {}", 1.0 / d as f64),
    };
    match *kernel {
        Kernel::Linear => "linear".into(),
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } => format!("polynomial (gamma {gamma}, coef0 {coef0}, degree {degree})"),
        Kernel::Gaussian { gamma } => format!("gaussian ({})", by_d(gamma)),
        Kernel::Sigmoid { gamma, coef0 } => format!("sigmoid ({}, coef0 {coef0})", by_d(gamma)),
        Kernel::Precomputed => "precomputed".into(),
    }
}

/// The kernel's parameters with defaults resolved, for the JSON output.
pub fn kernel_params_json(kernel: &Kernel, d: usize) -> serde_json::Value {
    let g = |g: Option<f64>| g.unwrap_or(1.0 / d as f64);
    match *kernel {
        Kernel::Polynomial {
            gamma,
            coef0,
            degree,
        } => serde_json::json!({ "gamma": gamma, "coef0": coef0, "degree": degree }),
        Kernel::Gaussian { gamma } => serde_json::json!({ "gamma": g(gamma) }),
        Kernel::Sigmoid { gamma, coef0 } => {
            serde_json::json!({ "gamma": g(gamma), "coef0": coef0 })
        }
        Kernel::Linear | Kernel::Precomputed => serde_json::json!({}),
    }
}

/// The initialisation named by the flags, seeded by `-s`.
pub fn init_from_flags(cli: &Cli) -> Init {
    match cli.init {
        InitName::Mod => Init::Mod,
        InitName::Random => Init::Random { seed: cli.seed },
        InitName::KMeansPlusPlus => Init::KMeansPlusPlus { seed: cli.seed },
    }
}

/// The init's name as on the command line.
pub fn init_name(init: &Init) -> &'static str {
    match init {
        Init::Mod => "mod",
        Init::Random { .. } => "random",
        Init::KMeansPlusPlus { .. } => "kmeans++",
        Init::Labels(_) => "given labels",
    }
}

/// The builder for `k` clusters with `kernel` and every other parameter from the flags.
pub fn builder(cli: &Cli, kernel: Kernel, k: usize, device: DeviceSpec) -> KernelKMeans {
    KernelKMeans::new(k)
        .kernel(kernel)
        .init(init_from_flags(cli))
        .max_iter(cli.max_iter)
        .tol(cli.tol)
        .check_convergence(cli.check_convergence)
        .stop_at_fixed_point(!cli.all_iterations)
        .n_init(cli.runs)
        .zscore(cli.zscore)
        .precision(match (cli.precision, cli.tf32) {
            (ProductPrecision::Strict, true) => ProductPrecision::Tf32,
            (precision, _) => precision,
        })
        .kernel_storage(cli.kernel_storage.0)
        .algorithm(cli.algorithm)
        .memory_limit(cli.memory_limit)
        .device(device)
        .dtype(cli.dtype)
}
