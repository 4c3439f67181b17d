//! Choosing the device: `POPCORN_DEVICE=cpu|cuda|cuda:N|cuda:N,M,...|cuda:all`, or the first
//! usable GPU.

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
    /// Several CUDA devices of this host, by ordinal (bit `i` set: `cuda:i`), driven by one
    /// process: plans are partitioned along the points, one rank per device in increasing
    /// ordinal, exchanging through NCCL.
    CudaSet(u64),
    /// Every CUDA device of this host (one rank each; a single device runs unpartitioned).
    CudaAll,
}

impl DeviceSpec {
    /// The ordinals of a set of devices, in increasing order (one for `Cuda(n)`, none else).
    pub fn ordinals(self) -> Vec<usize> {
        match self {
            DeviceSpec::Cuda(n) => vec![n],
            DeviceSpec::CudaSet(mask) => (0..64).filter(|i| mask >> i & 1 == 1).collect(),
            _ => Vec::new(),
        }
    }
}

/// `cuda:0,1,...`: several ordinals, each once.
fn parse_set(list: &str) -> Option<DeviceSpec> {
    let mut mask = 0u64;
    for part in list.split(',') {
        let n: u32 = part.trim().parse().ok()?;
        if n >= 64 || mask >> n & 1 == 1 {
            return None;
        }
        mask |= 1 << n;
    }
    Some(DeviceSpec::CudaSet(mask))
}

impl FromStr for DeviceSpec {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<DeviceSpec, RuntimeError> {
        let s = s.trim().to_ascii_lowercase();
        match s.as_str() {
            "" | "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            "cuda:all" => Ok(DeviceSpec::CudaAll),
            _ => match s.strip_prefix("cuda:") {
                Some(n) if !n.contains(',') && n.parse::<usize>().is_ok() => {
                    Ok(DeviceSpec::Cuda(n.parse().unwrap_or(0)))
                }
                Some(list) if list.contains(',') => parse_set(list).ok_or_else(|| {
                    RuntimeError::Device(format!(
                        "unknown device `{s}`; several GPUs are named cuda:0,1 (each ordinal \
                         below 64, once)"
                    ))
                }),
                _ => Err(RuntimeError::Device(format!(
                    "unknown device `{s}`; expected cpu, cuda, cuda:N, cuda:N,M,..., cuda:all or auto"
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
            DeviceSpec::CudaSet(_) => {
                let list: Vec<String> = self.ordinals().iter().map(|o| o.to_string()).collect();
                write!(f, "cuda:{}", list.join(","))
            }
            DeviceSpec::CudaAll => f.write_str("cuda:all"),
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
            DeviceSpec::CudaSet(mask) => {
                let count = available.map_err(|why| {
                    RuntimeError::Device(format!(
                        "{self} was requested but CUDA is not usable here: {why}; use POPCORN_DEVICE=cpu to run on the CPU"
                    ))
                })?;
                if let Some(missing) = self.ordinals().into_iter().find(|o| *o >= count) {
                    return Err(RuntimeError::Device(format!(
                        "{self} was requested but this machine has {count} CUDA device(s) (no cuda:{missing})"
                    )));
                }
                Ok(match self.ordinals()[..] {
                    [one] => DeviceSpec::Cuda(one),
                    _ => DeviceSpec::CudaSet(mask),
                })
            }
            DeviceSpec::CudaAll => match available {
                Ok(1) => Ok(DeviceSpec::Cuda(0)),
                Ok(count) if count > 1 => Ok(DeviceSpec::CudaSet(if count >= 64 {
                    u64::MAX
                } else {
                    (1u64 << count) - 1
                })),
                Ok(_) => Err(RuntimeError::Device(
                    "cuda:all was requested but this machine has no CUDA device; use POPCORN_DEVICE=cpu to run on the CPU".into(),
                )),
                Err(why) => Err(RuntimeError::Device(format!(
                    "cuda:all was requested but CUDA is not usable here: {why}; use POPCORN_DEVICE=cpu to run on the CPU"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceSpec;

    #[test]
    fn several_gpus_are_named_by_a_list_or_all() {
        let set: DeviceSpec = "cuda:1,0".parse().unwrap();
        assert_eq!(set, DeviceSpec::CudaSet(0b11));
        assert_eq!(set.ordinals(), vec![0, 1]);
        assert_eq!(set.to_string(), "cuda:0,1");
        assert_eq!(
            "CUDA:ALL".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::CudaAll
        );
        for bad in ["cuda:0,0", "cuda:0,", "cuda:64,1", "cuda:a,b"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("several GPUs are named cuda:0,1"), "{bad}: {e}");
        }
        assert_eq!(set.resolve_with(Ok(2)).unwrap(), set);
        assert_eq!(
            DeviceSpec::CudaSet(0b100).resolve_with(Ok(4)).unwrap(),
            DeviceSpec::Cuda(2)
        );
        let e = set.resolve_with(Ok(1)).unwrap_err().to_string();
        assert!(e.contains("has 1 CUDA device(s) (no cuda:1)"), "{e}");
        assert_eq!(
            DeviceSpec::CudaAll.resolve_with(Ok(3)).unwrap(),
            DeviceSpec::CudaSet(0b111)
        );
        assert_eq!(
            DeviceSpec::CudaAll.resolve_with(Ok(1)).unwrap(),
            DeviceSpec::Cuda(0)
        );
        assert!(DeviceSpec::CudaAll
            .resolve_with(Err("no driver".into()))
            .is_err());
    }

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
