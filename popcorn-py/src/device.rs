//! Devices by name (`"auto"`, `"cpu"`, `"cuda"`, `"cuda:N"`) and what popcorn finds of the GPU.

use crate::errors::{runtime_error, value_error};
use popcorn::dsl::Target;
use popcorn::runtime::backend::Backend;
use popcorn::runtime::cpu_backend::CpuBackend;
use popcorn::runtime::cuda::cuda_available;
use popcorn::{Context, DeviceSpec};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::OnceLock;

/// The device named `name`, `"auto"` resolved once per process (so the notice that no GPU is
/// usable is printed once, not at every fit). An unknown name is a `ValueError`; a GPU asked
/// for that is not usable, a `RuntimeError` saying why.
pub fn device_spec(name: &str) -> PyResult<DeviceSpec> {
    let spec: DeviceSpec = name
        .parse()
        .map_err(|e: popcorn::RuntimeError| value_error(e.to_string()))?;
    match spec {
        DeviceSpec::Auto => {
            static AUTO: OnceLock<DeviceSpec> = OnceLock::new();
            // Auto never fails: without a GPU it is the CPU.
            Ok(*AUTO.get_or_init(|| DeviceSpec::Auto.resolve().unwrap_or(DeviceSpec::Cpu)))
        }
        spec => spec.resolve().map_err(runtime_error),
    }
}

/// What the CPU backend plans for: its threads and rates.
pub fn cpu_target() -> Target {
    CpuBackend::new().target()
}

/// What popcorn finds: a dict with `cuda_available`, `devices` (for each GPU its `device`
/// name to pass as `device=`, `description` and `free_memory`/`total_memory` in bytes), the
/// CUDA `libraries` loaded, `reason` (why no GPU is usable, else `None`), `default_device`
/// (what `device="auto"` runs on) and `cpu_threads`.
#[pyfunction]
pub fn device_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let found = py.detach(cuda_available);
    let info = PyDict::new(py);
    let devices = PyList::empty(py);
    match &found {
        Ok(count) => {
            for ordinal in 0..*count {
                let ctx = py
                    .detach(|| Context::new(DeviceSpec::Cuda(ordinal)))
                    .map_err(runtime_error)?;
                let gpu = PyDict::new(py);
                gpu.set_item("device", DeviceSpec::Cuda(ordinal).to_string())?;
                gpu.set_item("description", ctx.describe())?;
                if let Some((free, total)) = ctx.memory_info() {
                    gpu.set_item("free_memory", free)?;
                    gpu.set_item("total_memory", total)?;
                }
                devices.append(gpu)?;
            }
            info.set_item("cuda_available", true)?;
            info.set_item(
                "libraries",
                ["CUDA driver", "cuBLAS", "cuSPARSE", "NVRTC"].to_vec(),
            )?;
            info.set_item("reason", py.None())?;
            info.set_item("default_device", DeviceSpec::Cuda(0).to_string())?;
        }
        Err(why) => {
            info.set_item("cuda_available", false)?;
            info.set_item("libraries", PyList::empty(py))?;
            info.set_item("reason", why)?;
            info.set_item("default_device", DeviceSpec::Cpu.to_string())?;
        }
    }
    info.set_item("devices", devices)?;
    info.set_item("cpu_threads", cpu_target().parallelism)?;
    Ok(info)
}
