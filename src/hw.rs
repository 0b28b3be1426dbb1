//! What a machine is: the card presets (capacity, bandwidth, PCIe) and which device to run on.
//! Nothing here measures; `memory/` does.

use crate::error::{LabError, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Card {
    pub name: String,
    pub label: String,
    /// What the driver reports as total on that card, in MiB.
    pub total_mib: f64,
    pub total_source: String,
    /// Memory bandwidth (vendor figure), GB/s; unknown for a card given as a size.
    pub bandwidth_gbs: Option<f64>,
    pub pcie: String,
    pub pcie_gbs: Option<f64>,
}

/// `24GiB`, `5gib`, `512MiB` (G/GB and M/MB read as GiB and MiB) in MiB; None if not a size.
fn size_mib(s: &str) -> Option<f64> {
    let key = s.trim().to_ascii_lowercase();
    let (num, unit) = key.split_at(key.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(key.len()));
    let mib = match (num.trim().parse::<f64>(), unit) {
        (Ok(n), "gib" | "g" | "gb") => n * 1024.0,
        (Ok(n), "mib" | "m" | "mb") => n,
        _ => return None,
    };
    mib.is_finite().then_some(mib)
}

/// A size in MiB from 1 KiB to 1 PiB: no card or budget is larger, its bytes fit u64, and one
/// smaller than a KiB holds nothing (a fraction of a byte would pass "above 0" and round to 0).
fn checked_mib(s: &str, mib: f64) -> Result<f64> {
    if mib >= 1.0 / 1024.0 && mib <= crate::limits::MAX_MIB as f64 {
        Ok(mib)
    } else {
        Err(LabError::out_of_range(format!("the size `{s}`"), format!("{mib} MiB"), "at least 1 KiB and at most 1 PiB"))
    }
}

/// A size such as `5GiB` or `512MiB`, in bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let mib = size_mib(s).ok_or_else(|| LabError::input(format!("`{s}` is not a size: write e.g. 5GiB or 512MiB")))?;
    Ok((checked_mib(s, mib)? * 1024.0 * 1024.0) as u64)
}

/// The RTX 4090 scaled to the model run (`--card scaled`; `estimate::scaled` makes it).
pub const SCALED: &str = "scaled";

const CARDS_JSON: &str = include_str!("../data/cards.json");

impl Card {
    pub fn presets() -> Vec<Card> {
        // The file is embedded and checked by a test; an error here is a build defect.
        serde_json::from_str(CARDS_JSON).unwrap_or_default()
    }

    /// A preset name (`rtx4090`, `a4000`, …) or a size (`24GiB`, `16gib`, `512MiB`).
    pub fn parse(s: &str) -> Result<Card> {
        let key = s.trim().to_ascii_lowercase();
        if let Some(card) = Self::presets().into_iter().find(|c| c.name == key) {
            return Ok(card);
        }
        let Some(mib) = size_mib(&key) else {
            let names: Vec<_> = Self::presets().into_iter().map(|c| c.name).collect();
            return Err(LabError::input(format!(
                "unknown card `{s}`: use one of {}, a size such as 24GiB, {SCALED} or none",
                names.join(", ")
            )));
        };
        let mib = checked_mib(s, mib)?;
        Ok(Card {
            name: key.clone(),
            label: format!("a {} card", crate::units::fmt_bytes((mib * 1024.0 * 1024.0) as u64)),
            total_mib: mib,
            total_source: "given on the command line".into(),
            bandwidth_gbs: None,
            pcie: String::new(),
            pcie_gbs: None,
        })
    }

    /// A scaled replica's capacity includes the scaled share of a GPU's context, so the process's
    /// own context (on CPU: its heap and the matrix library's buffers) is counted outside it.
    pub fn is_scaled(&self) -> bool {
        self.name == SCALED
    }

    pub fn total_bytes(&self) -> u64 {
        (self.total_mib * 1024.0 * 1024.0) as u64
    }
}

/// `auto` (CUDA if there is one), `cpu`, `cuda` or `cuda:N`.
pub fn pick(choice: &str) -> Result<Device> {
    match choice {
        "cpu" => Ok(Device::Cpu),
        "auto" => {
            let device =
                if cfg!(feature = "cuda") { Device::cuda_if_available(0).unwrap_or(Device::Cpu) } else { Device::Cpu };
            set_event_tracking(&device, false);
            Ok(device)
        }
        c if c == "cuda" || c.starts_with("cuda:") => {
            if !cfg!(feature = "cuda") {
                return Err(LabError::Unsupported(
                    "this build has no CUDA: rebuild with `cargo build --release --features cuda`".into(),
                ));
            }
            let ordinal = c
                .strip_prefix("cuda:")
                .map(|n| n.parse::<usize>())
                .transpose()
                .map_err(|_| LabError::input(format!("bad device `{c}`: use cuda:N")))?
                .unwrap_or(0);
            let device = Device::new_cuda(ordinal).map_err(|e| {
                LabError::Unsupported(format!("no usable CUDA device {ordinal}: {}", crate::error::cause(&e)))
            })?;
            set_event_tracking(&device, false);
            Ok(device)
        }
        other => Err(LabError::input(format!("unknown device `{other}`: use auto, cpu, cuda or cuda:N"))),
    }
}

/// The CUDA devices this process sees (0 without CUDA).
pub fn cuda_device_count() -> usize {
    #[cfg(feature = "cuda")]
    if let Ok(n) = candle_core::cuda_backend::cudarc::driver::CudaContext::device_count() {
        return n.max(0) as usize;
    }
    0
}

/// Turns cudarc's per-tensor event tracking on or off for the tensors made from now on. It is on
/// by default once a context has a stream of its own (candle makes one), and then every kernel
/// argument costs a cuStreamWaitEvent and a cuEventRecord on the host (0.11 ms of a BF16 decoding
/// step's 6.66 ms launch time: `vram-lab bench`, variants `separate` and `untracked`,
/// data/results/h200/2026-11-22-graph). The lab computes on candle's one
/// stream and orders its copy stream with explicit events (`memory::cuda_copy`), so it needs none;
/// a captured graph must not wait on events recorded outside it either.
pub fn set_event_tracking(device: &Device, on: bool) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(dev) = device {
        // SAFETY: with tracking off nothing orders two streams' uses of a tensor; the lab uses one
        // compute stream and orders its copy stream itself.
        unsafe {
            if on {
                dev.cuda_stream().context().enable_event_tracking();
            } else {
                dev.disable_event_tracking();
            }
        }
    }
    let _ = (device, on);
}

/// A one-line description: "cpu (16 threads)" or "cuda:0 NVIDIA H200".
pub fn describe(device: &Device) -> String {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => format!("cuda:{} {}", gpu_ordinal(dev), cuda_name(dev)),
        _ => format!("cpu ({} threads)", candle_core::utils::get_num_threads()),
    }
}

/// `describe`, with the card it emulates when there is one ("cuda:1 NVIDIA H200 as rtx4090").
pub fn describe_as(device: &Device, card: Option<&Card>) -> String {
    match card {
        Some(c) => format!("{} as {}", describe(device), c.name),
        None => describe(device),
    }
}

/// The ordinal of a CUDA device (cuda:N).
#[cfg(feature = "cuda")]
pub fn gpu_ordinal(dev: &candle_core::CudaDevice) -> usize {
    match Device::Cuda(dev.clone()).location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => gpu_id,
        _ => 0,
    }
}

/// The driver's name of a CUDA device ("NVIDIA H200").
#[cfg(feature = "cuda")]
pub fn cuda_name(dev: &candle_core::CudaDevice) -> String {
    dev.cuda_stream().context().name().unwrap_or_else(|_| "CUDA device".into())
}

/// The GPU's name, None on CPU.
pub fn gpu_name(device: &Device) -> Option<String> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => Some(cuda_name(dev)),
        _ => None,
    }
}

/// The card preset matching this device's GPU (for its bandwidth), if any.
pub fn own_card(device: &Device) -> Option<Card> {
    let name = gpu_name(device)?.to_ascii_lowercase();
    let key = ["h200", "h100", "a100", "l40s", "4090", "3090", "a4000"].into_iter().find(|k| name.contains(k))?;
    Card::presets().into_iter().find(|c| c.name.contains(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_sizes() {
        let cards = Card::presets();
        assert!(cards.len() >= 8);
        assert_eq!(Card::parse("RTX4090").unwrap().total_mib, 24084.5);
        assert_eq!(Card::parse("24GiB").unwrap().total_bytes(), 24 << 30);
        assert_eq!(Card::parse("512MiB").unwrap().total_bytes(), 512 << 20);
        assert!(Card::parse("rtx9090").is_err());
        assert!(Card::parse("0GiB").is_err());
    }
}
