//! NVML (the library behind nvidia-smi), loaded at run time: a CPU build reads GPU memory too.
//! And the sampler behind `vram-lab watch`: one process's GPU memory (or, without NVML, its RSS)
//! and the GPU's used memory, at an interval.

use std::sync::OnceLock;

pub fn nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: OnceLock<Option<nvml_wrapper::Nvml>> = OnceLock::new();
    NVML.get_or_init(|| nvml_wrapper::Nvml::init().ok()).as_ref()
}

pub fn driver_version() -> Option<String> {
    nvml()?.sys_driver_version().ok()
}

/// Where a sample's figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// NVML: the process's GPU memory as nvidia-smi shows it
    Nvml,
    /// No NVML (no driver): the process's resident host memory from /proc
    Rss,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub pid: Option<u32>,
    /// The watched process's memory (None once it holds none on the GPU, or has exited).
    pub process_used: Option<u64>,
    /// The GPU's used and total memory (NVML), or the host's (RSS mode).
    pub device_used: Option<u64>,
    pub device_total: Option<u64>,
    pub source: Source,
}

/// Reads one process (or, with `pid` None, the whole GPU) on GPU `index`.
pub struct Poller {
    pub pid: Option<u32>,
    pub index: u32,
    pub source: Source,
    start: std::time::Instant,
}

impl Poller {
    pub fn new(pid: Option<u32>, index: u32) -> Self {
        let source = match nvml().and_then(|n| n.device_by_index(index).ok()) {
            Some(_) => Source::Nvml,
            None => Source::Rss,
        };
        Self { pid, index, source, start: std::time::Instant::now() }
    }

    pub fn sample(&self) -> Sample {
        let t_s = self.start.elapsed().as_secs_f64();
        let (process_used, device_used, device_total) = match self.source {
            Source::Nvml => self.read_nvml(),
            Source::Rss => (self.pid.and_then(rss_of), None, None),
        };
        Sample { t_s, pid: self.pid, process_used, device_used, device_total, source: self.source }
    }

    fn read_nvml(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        let Some(dev) = nvml().and_then(|n| n.device_by_index(self.index).ok()) else { return (None, None, None) };
        let info = dev.memory_info().ok();
        let process = self.pid.and_then(|pid| {
            dev.running_compute_processes().ok()?.into_iter().find(|p| p.pid == pid).and_then(|p| {
                match p.used_gpu_memory {
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                    _ => None,
                }
            })
        });
        (process, info.as_ref().map(|i| i.used), info.as_ref().map(|i| i.total))
    }
}

/// VmRSS of process `pid`, from /proc.
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_of_this_process_is_read() {
        let me = rss_of(std::process::id()).unwrap();
        assert!(me > 1 << 20, "{me}");
        assert!(rss_of(u32::MAX).is_none());
    }
}
