//! Picking the device: CUDA when built in and present, else CPU.

use crate::error::{LabError, Result};
use candle_core::Device;

/// `auto` (CUDA if there is one), `cpu`, `cuda` or `cuda:N`.
pub fn pick(choice: &str) -> Result<Device> {
    match choice {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(if cfg!(feature = "cuda") { Device::cuda_if_available(0).unwrap_or(Device::Cpu) } else { Device::Cpu }),
        c if c == "cuda" || c.starts_with("cuda:") => {
            if !cfg!(feature = "cuda") {
                return Err(LabError::Unsupported(
                    "this build has no CUDA: rebuild with `cargo build --release --features cuda`".into(),
                ));
            }
            let ordinal = c.strip_prefix("cuda:").map(|n| n.parse::<usize>()).transpose()
                .map_err(|_| LabError::input(format!("bad device `{c}`: use cuda:N")))?
                .unwrap_or(0);
            Device::new_cuda(ordinal).map_err(|e| LabError::Unsupported(format!("no usable CUDA device {ordinal}: {e}")))
        }
        other => Err(LabError::input(format!("unknown device `{other}`: use auto, cpu, cuda or cuda:N"))),
    }
}

/// A one-line description: "cpu (16 threads)" or "cuda:0 NVIDIA H200".
pub fn describe(device: &Device) -> String {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => format!("cuda:0 {}", crate::memory::cuda::name(dev)),
        _ => format!("cpu ({} threads)", candle_core::utils::get_num_threads()),
    }
}

/// The GPU's name, None on CPU.
pub fn gpu_name(device: &Device) -> Option<String> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => Some(crate::memory::cuda::name(dev)),
        _ => None,
    }
}

/// The card preset matching this device's GPU (for its bandwidth), if any.
pub fn own_card(device: &Device) -> Option<crate::memory::Card> {
    let name = gpu_name(device)?.to_ascii_lowercase();
    let key = ["h200", "h100", "a100", "l40s", "4090", "3090", "a4000"].into_iter().find(|k| name.contains(k))?;
    crate::memory::Card::presets().into_iter().find(|c| c.name.contains(key))
}
