//! env.json: what ran where, so a committed result says which GPU, driver and versions made it.

use candle_core::Device;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Env {
    pub date: String,
    pub command: String,
    pub vram_lab: String,
    pub candle: String,
    pub device: String,
    pub gpu: Option<String>,
    pub compute_capability: Option<String>,
    pub driver: Option<String>,
    pub cuda_driver_api: Option<String>,
    pub device_total_mib: Option<f64>,
    pub cuda_built_in: bool,
    pub host_cpus: usize,
    pub host_mem_gib: Option<f64>,
    pub card: Option<String>,
    pub model: String,
}

/// candle-core's version, as Cargo.lock pins it (Cargo.toml asks for 0.11.1).
const CANDLE_VERSION: &str = "0.11.1";

impl Env {
    pub fn capture(device: &Device, command: &str, card: Option<&str>, model: &str) -> Self {
        #[allow(unused_mut)]
        let mut env = Self {
            date: chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            command: command.into(),
            vram_lab: env!("CARGO_PKG_VERSION").into(),
            candle: CANDLE_VERSION.into(),
            device: crate::device::describe(device),
            gpu: None,
            compute_capability: None,
            driver: None,
            cuda_driver_api: None,
            device_total_mib: None,
            cuda_built_in: cfg!(feature = "cuda"),
            host_cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            host_mem_gib: crate::memory::host::meminfo().map(|(t, _)| crate::memory::gib(t)),
            card: card.map(str::to_string),
            model: model.into(),
        };
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = device {
            use crate::memory::cuda;
            env.gpu = Some(cuda::name(dev));
            env.compute_capability = cuda::compute_capability(dev).map(|(a, b)| format!("{a}.{b}"));
            env.driver = cuda::driver_version();
            env.cuda_driver_api = cuda::driver_cuda_version().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
            env.device_total_mib = cuda::mem_info(dev).ok().map(|(_, t)| crate::memory::mib(t));
        }
        env
    }
}
