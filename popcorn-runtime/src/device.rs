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
            spec => spec.resolve_with(crate::cuda::cuda_available()),
        }
    }

    /// [`DeviceSpec::resolve`] given what the CUDA probe found: the number of devices, or why
    /// none is usable. `Auto` falls back to the CPU with a notice on stderr; a GPU asked for
    /// by name is an error naming the reason.
    fn resolve_with(self, available: Result<usize, String>) -> Result<DeviceSpec, RuntimeError> {
        match self {
            DeviceSpec::Cpu => Ok(DeviceSpec::Cpu),
            DeviceSpec::Auto => match available {
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
            DeviceSpec::Cuda(n) => match available {
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

#[cfg(test)]
mod tests {
    use super::DeviceSpec;

    /// A missing CUDA library (as the probe reports it): `auto` runs on the CPU, a GPU asked
    /// for is an error naming the library, what to install, and the CPU alternative.
    #[test]
    fn a_missing_library_falls_back_or_is_named() {
        let missing = || {
            Err("cuSPARSE (libcusparse) could not be loaded; install the CUDA toolkit's cuSPARSE and add its lib directory to LD_LIBRARY_PATH".to_string())
        };
        assert_eq!(
            DeviceSpec::Auto.resolve_with(missing()).ok(),
            Some(DeviceSpec::Cpu)
        );
        let err = DeviceSpec::Cuda(0)
            .resolve_with(missing())
            .expect_err("a requested GPU without cuSPARSE")
            .to_string();
        assert!(
            err.contains("cuSPARSE (libcusparse) could not be loaded"),
            "{err}"
        );
        assert!(err.contains("POPCORN_DEVICE=cpu"), "{err}");
        assert_eq!(
            DeviceSpec::Cuda(1).resolve_with(Ok(1)).unwrap_err().to_string(),
            "cuda:1 was requested but this machine has 1 CUDA device(s); use POPCORN_DEVICE=cpu to run on the CPU"
        );
        assert_eq!(
            DeviceSpec::Auto.resolve_with(Ok(2)).ok(),
            Some(DeviceSpec::Cuda(0))
        );
    }
}
