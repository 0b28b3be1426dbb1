//! The machine a run measured: device, GPU, driver, CUDA, host, and the library versions
//! Cargo.lock pinned at build time.

use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Env {
    pub vram_lab: String,
    /// Versions from Cargo.lock at build time (candle-core, cudarc, polars, …).
    pub versions: BTreeMap<String, String>,
    pub device: String,
    pub gpu: Option<String>,
    pub compute_capability: Option<String>,
    pub driver: Option<String>,
    pub cuda_driver_api: Option<String>,
    pub device_total_mib: Option<f64>,
    pub cuda_built_in: bool,
    pub host_cpus: usize,
    pub host_mem_gib: Option<f64>,
}

/// The versions build.rs read from Cargo.lock.
pub fn locked_versions() -> BTreeMap<String, String> {
    env!("VRAM_LAB_LOCKED_VERSIONS")
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Env {
    pub fn capture(device: &Device) -> Self {
        #[allow(unused_mut)]
        let mut env = Self {
            vram_lab: env!("CARGO_PKG_VERSION").into(),
            versions: locked_versions(),
            device: crate::hw::describe(device),
            cuda_built_in: cfg!(feature = "cuda"),
            host_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            host_mem_gib: crate::memory::host::meminfo().map(|(t, _)| crate::memory::gib(t)),
            ..Default::default()
        };
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = device {
            use crate::memory::cuda;
            env.gpu = Some(cuda::name(dev));
            env.compute_capability = cuda::compute_capability(dev).map(|(a, b)| format!("{a}.{b}"));
            env.driver = crate::memory::nvml::driver_version();
            env.cuda_driver_api = cuda::driver_cuda_version().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
            env.device_total_mib = cuda::mem_info(dev).ok().map(|(_, t)| crate::memory::mib(t));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_come_from_the_lock_file() {
        let v = super::locked_versions();
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
        let candle = &v["candle-core"];
        assert!(lock.contains(&format!("name = \"candle-core\"\nversion = \"{candle}\"")), "{candle}");
        assert!(v.contains_key("polars"));
    }
}
