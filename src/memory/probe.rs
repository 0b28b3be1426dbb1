//! The probe: reads memory on one device (CUDA pool and driver, or the CPU heap) into snapshots,
//! holds the card emulation, and turns an OOM into a captured report.

#[cfg(feature = "cuda")]
use super::cuda;
use super::{alloc_hook, host, summary, CardEmulation, Snapshot};
use crate::error::{LabError, OomReport, Result};
use crate::hw::Card;
use crate::units::fmt_bytes;
use candle_core::Device;
use std::time::Instant;

/// Reads memory on one device, and holds that device's card emulation while there is one.
pub struct MemoryProbe {
    device: Device,
    start: Instant,
    emulation: Option<CardEmulation>,
}

impl MemoryProbe {
    pub fn new(device: &Device) -> Self {
        Self { device: device.clone(), start: Instant::now(), emulation: None }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A snapshot once the device has finished what was queued on it.
    pub fn settled(&self, label: &str) -> Result<Snapshot> {
        self.device.synchronize()?;
        Ok(self.snapshot(label))
    }

    /// Runs one kernel and waits for it: a CUDA context reserves memory of its own at its first
    /// launch, which must not be read as the next library's (NCCL's buffers, say).
    pub fn warm_up(&self) -> Result<()> {
        candle_core::Tensor::ones(256, candle_core::DType::F32, &self.device)?.sum_all()?.to_scalar::<f32>()?;
        self.device.synchronize()?;
        Ok(())
    }

    /// Makes this device look like `card` until `stop_emulating` or drop.
    pub fn emulate(&mut self, card: &Card) -> Result<&CardEmulation> {
        self.emulation = None; // release a previous ballast before measuring free memory
        Ok(self.emulation.insert(CardEmulation::start(card, &self.device)?))
    }

    /// A scaled card on CPU counts above the heap held now: each stage starts with the card
    /// empty, as the report's stages each ran in a fresh process (what an earlier stage left in
    /// the heap — tables, file buffers — is context, not the card's).
    pub fn rebase_context(&mut self) {
        if let Some(e) = self.emulation.as_mut() {
            e.rebase();
        }
    }

    pub fn stop_emulating(&mut self) {
        self.emulation = None;
    }

    pub fn card(&self) -> Option<&Card> {
        self.emulation.as_ref().map(|e| &e.card)
    }

    fn ballast(&self) -> u64 {
        self.emulation.as_ref().map(|e| e.ballast).unwrap_or(0)
    }

    pub fn snapshot(&self, label: &str) -> Snapshot {
        let t_s = self.start.elapsed().as_secs_f64();
        let ballast = self.ballast();
        match &self.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => {
                let pool = cuda::pool_stats(dev).unwrap_or_default();
                let info = cuda::mem_info(dev).ok();
                // The ballast is not part of the emulated card: take it out of total and used.
                let total = info.map(|(_, t)| t.saturating_sub(ballast));
                let free = info.map(|(f, _)| f);
                Snapshot {
                    label: label.into(),
                    t_s,
                    allocated: pool.used,
                    reserved: pool.reserved,
                    peak: pool.used_high,
                    reserved_peak: pool.reserved_high,
                    device_used: total.zip(free).map(|(t, f)| t.saturating_sub(f)),
                    device_free: free,
                    device_total: total,
                    process_used: cuda::process_used(dev).map(|b| b.saturating_sub(ballast)),
                    ballast,
                }
            }
            _ => {
                let (rss, hwm) = host::rss().unwrap_or((0, 0));
                let (allocated, peak) = if host::counting() { (host::allocated(), host::peak()) } else { (rss, hwm) };
                let (total, free) = match host::cap() {
                    Some(cap) => (Some(cap), Some(cap.saturating_sub(allocated))),
                    None => host::meminfo().map(|(t, a)| (Some(t), Some(a))).unwrap_or((None, None)),
                };
                Snapshot {
                    label: label.into(),
                    t_s,
                    allocated,
                    reserved: rss.max(allocated),
                    peak,
                    reserved_peak: hwm.max(peak),
                    device_used: total.zip(free).map(|(t, f)| t.saturating_sub(f)),
                    device_free: free,
                    device_total: total,
                    process_used: Some(rss),
                    ballast,
                }
            }
        }
    }

    /// Other processes on this GPU and the bytes each uses (none on CPU).
    pub fn other_processes(&self) -> Vec<(u32, u64)> {
        match &self.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => cuda::other_processes(dev),
            _ => Vec::new(),
        }
    }

    /// The largest single block the device would give now: by bisection with the driver on a
    /// GPU (the ballast of an emulated card stays held), the room left under the cap on CPU.
    pub fn largest_free_block(&self) -> Option<u64> {
        match &self.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => cuda::largest_free_block(dev).ok(),
            _ => host::cap().map(|c| c.saturating_sub(host::allocated())),
        }
    }

    /// torch.cuda.reset_peak_memory_stats.
    pub fn reset_peak(&self) {
        match &self.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => {
                let _ = cuda::reset_peak(dev);
            }
            _ => host::reset_peak(),
        }
    }

    /// torch.cuda.empty_cache: return cached memory to the driver.
    pub fn empty_cache(&self) {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = &self.device {
            let _ = cuda::trim(dev);
        }
    }

    /// The memory summary at this moment, as a text table (torch.cuda.memory_summary).
    pub fn summary(&self) -> String {
        summary::memory_summary(&self.snapshot("summary"), alloc_hook::counts())
    }

    /// The lab's checkpoint for emulated capacity on CPU: an allocation that crossed the card's
    /// capacity since the last check becomes an OOM here. On CUDA the driver refuses by itself.
    pub fn check(&self) -> Result<()> {
        match host::take_over_cap() {
            Some(bytes) if !self.device.is_cuda() => Err(self.oom_report(bytes, "emulated card capacity exceeded")),
            _ => Ok(()),
        }
    }

    /// Forgets a capacity crossing recorded while a failed stage was cleaning up.
    pub fn clear_pending(&self) {
        let _ = host::take_over_cap();
        let _ = self.failed_request();
    }

    /// The size of the allocation on this device that failed last, from whichever hook saw it.
    fn failed_request(&self) -> Option<u64> {
        match &self.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) => alloc_hook::take_failed_request(cuda::ordinal(dev)),
            _ => host::take_over_cap(),
        }
    }

    fn oom_report(&self, bytes: u64, message: &str) -> LabError {
        LabError::Oom(Box::new(OomReport { request_bytes: Some(bytes), message: message.into(), ..Default::default() }))
    }

    /// `err` said to have happened `during`; an OOM captured by `probe` where there is one.
    pub fn capture_in(probe: Option<&MemoryProbe>, err: LabError, during: &str) -> LabError {
        match probe {
            Some(p) => p.capture(err, during),
            None => err.during(during),
        }
    }

    /// Fills an OOM with the request size, the snapshot and the summary of this moment; other
    /// errors pass through.
    pub fn capture(&self, err: LabError, during: &str) -> LabError {
        match err.during(during) {
            LabError::Oom(mut r) => {
                if r.request_bytes.is_none() {
                    r.request_bytes = self.failed_request();
                }
                if r.at.is_none() {
                    r.at = Some(self.snapshot("oom").at_failure());
                    r.summary = self.summary();
                }
                LabError::Oom(r)
            }
            other => other,
        }
    }
}

/// Runs `f` and turns an OOM inside it (or one the CPU cap recorded) into a captured report.
/// Refuses a CUDA managed (unified) allocation of `bytes` above the GPU's `free` memory less
/// `margin`: oversubscribing managed memory can hang the whole GPU, not just this process. Only
/// `oversubscribe` (documented for one's own workstation) lets it through.
pub fn check_managed_request(bytes: u64, free: u64, margin: u64, oversubscribe: bool) -> Result<()> {
    if bytes > free.saturating_sub(margin) && !oversubscribe {
        return Err(LabError::Unsupported(format!(
            "refusing {} of CUDA managed memory: the GPU has {} free, and asking for more than free minus {} \
             can hang the whole GPU. On your own workstation only, --oversubscribe allows it",
            fmt_bytes(bytes),
            fmt_bytes(free),
            fmt_bytes(margin)
        )));
    }
    Ok(())
}

pub fn guarded<T>(probe: &MemoryProbe, during: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    // A crossing recorded before this step (while an earlier failure unwound, say) is not its:
    // if the heap is still above the cap, the step's own allocations cross it again.
    if !probe.device.is_cuda() {
        probe.clear_pending();
    }
    let out = f().and_then(|v| probe.check().map(|_| v));
    out.map_err(|e| probe.capture(e, during))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_requests_above_free_are_refused() {
        const GIB: u64 = 1 << 30;
        // 15 GiB of weights with 22 GiB free and 1 GiB kept: allowed.
        assert!(check_managed_request(15 * GIB, 22 * GIB, GIB, false).is_ok());
        // The article's 27 GB model on a 24 GB card: refused, saying how much is free.
        let e = check_managed_request(27 * GIB, 22 * GIB, GIB, false).unwrap_err().to_string();
        assert!(e.contains("22.00 GiB free") && e.contains("--oversubscribe"), "{e}");
        // Within the margin is refused too; the flag lets it through.
        assert!(check_managed_request(21 * GIB + 1, 22 * GIB, GIB, false).is_err());
        assert!(check_managed_request(27 * GIB, 22 * GIB, GIB, true).is_ok());
    }
}
