//! Choosing the device: `POPCORN_DEVICE=cpu|cuda|cuda:N`, or the first usable GPU.

use crate::error::RuntimeError;
use std::fmt;
use std::str::FromStr;

/// Which device a [`crate::Context`] runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The first usable GPU, else the CPU (with a one-line notice on stderr).
    Auto,
    /// The CPU backend.
    Cpu,
    /// The CUDA device with this ordinal; an error if it is not usable.
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<DeviceSpec, RuntimeError> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "" | "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(|n| n.parse::<usize>()) {
                Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
                _ => Err(RuntimeError::Device(format!(
                    "unknown device `{s}`; expected cpu, cuda, cuda:N or auto"
                ))),
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// The device named by `POPCORN_DEVICE`, or `Auto`.
    pub fn from_env() -> Result<DeviceSpec, RuntimeError> {
        match &popcorn_dsl::settings::settings().device {
            Some(v) => v.parse(),
            None => Ok(DeviceSpec::Auto),
        }
    }

    /// Resolves `Auto` to a concrete device, and checks that a requested GPU exists.
    pub fn resolve(self) -> Result<DeviceSpec, RuntimeError> {
        match self {
            DeviceSpec::Cpu => Ok(DeviceSpec::Cpu),
            DeviceSpec::Auto => match crate::cuda::cuda_available() {
                Ok(n) if n > 0 => Ok(DeviceSpec::Cuda(0)),
                Ok(_) => {
                    eprintln!("popcorn: no CUDA device found; running on the CPU");
                    Ok(DeviceSpec::Cpu)
                }
                Err(why) => {
                    eprintln!("popcorn: no usable GPU ({why}); running on the CPU");
                    Ok(DeviceSpec::Cpu)
                }
            },
            DeviceSpec::Cuda(n) => match crate::cuda::cuda_available() {
                Ok(count) if n < count => Ok(DeviceSpec::Cuda(n)),
                Ok(count) => Err(RuntimeError::Device(format!(
                    "cuda:{n} was requested but this machine has {count} CUDA device(s); use POPCORN_DEVICE=cpu to run on the CPU"
                ))),
                Err(why) => Err(RuntimeError::Device(format!(
                    "cuda:{n} was requested but CUDA is not usable here: {why}; use POPCORN_DEVICE=cpu to run on the CPU"
                ))),
            },
        }
    }
}
