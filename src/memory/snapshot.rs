//! One labelled reading of memory, plain numbers.

use crate::error::MemoryAtFailure;
use serde::Serialize;

/// Bytes of the tensors' elements.
pub fn tensor_bytes(tensors: &[candle_core::Tensor]) -> u64 {
    tensors.iter().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum()
}

/// One labelled reading. On CUDA: the default pool's used / reserved / used-high, cuMemGetInfo and
/// NVML. On CPU: bytes counted by the lab's allocator (or RSS without it), RSS, and host memory.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Snapshot {
    pub label: String,
    pub t_s: f64,
    /// Bytes held by live tensors (pool used / heap bytes).
    pub allocated: u64,
    /// Bytes the allocator holds from the driver / the OS (pool reserved / RSS).
    pub reserved: u64,
    /// High-water mark of `allocated` since the last reset.
    pub peak: u64,
    /// High-water mark of `reserved` since the last reset: what the allocator had to map at its
    /// busiest (above `peak` when its blocks did not fit what was asked).
    pub reserved_peak: u64,
    /// Device memory in use and free, as the (emulated) card sees it.
    pub device_used: Option<u64>,
    pub device_free: Option<u64>,
    pub device_total: Option<u64>,
    /// This process's usage as nvidia-smi shows it (CUDA) or its RSS (CPU).
    pub process_used: Option<u64>,
    /// Bytes held aside to emulate a smaller card (not counted in `device_used`).
    pub ballast: u64,
}

impl Snapshot {
    /// Device memory taken since `base` that the allocator's pool does not hold: a library's own
    /// allocations (NCCL's buffers, cuBLAS' workspace). None off a GPU.
    /// Signed: the pool may have returned memory to the driver meanwhile (its release threshold
    /// is 0), which lowers `device_used` as much as it lowers `reserved`.
    pub fn outside_pool_since(&self, base: &Snapshot) -> Option<u64> {
        let used = self.device_used? as i128 - base.device_used? as i128;
        let pool = self.reserved as i128 - base.reserved as i128;
        Some((used - pool).max(0) as u64)
    }

    /// Reserved but not allocated: what the allocator keeps for reuse.
    pub fn cached(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated)
    }

    /// Device memory this process uses outside the allocator's pool: the CUDA context, loaded
    /// kernel modules, library workspaces (on CPU: the rest of the process beside the heap).
    pub fn outside_pool(&self) -> Option<u64> {
        self.at_failure().outside_pool()
    }

    /// What the allocator's pool can have at most: the card less what the process holds outside
    /// the pool (CUDA context, modules; on CPU the cap, nothing outside).
    pub fn pool_capacity(&self) -> Option<u64> {
        self.at_failure().pool_capacity()
    }

    /// The counters an OOM carries.
    pub fn at_failure(&self) -> MemoryAtFailure {
        MemoryAtFailure {
            t_s: self.t_s,
            allocated: self.allocated,
            reserved: self.reserved,
            peak: self.peak,
            reserved_peak: self.reserved_peak,
            device_used: self.device_used,
            device_total: self.device_total,
        }
    }

    /// A timeline point from the counters an OOM carried.
    pub fn from_failure(label: &str, m: &MemoryAtFailure) -> Self {
        Self {
            label: label.into(),
            t_s: m.t_s,
            allocated: m.allocated,
            reserved: m.reserved,
            peak: m.peak,
            reserved_peak: m.reserved_peak,
            device_used: m.device_used,
            device_free: m.device_total.zip(m.device_used).map(|(t, u)| t.saturating_sub(u)),
            device_total: m.device_total,
            process_used: None,
            ballast: 0,
        }
    }

    /// Transient memory: how far the peak rose above what stayed allocated.
    pub fn transient(&self) -> u64 {
        self.peak.saturating_sub(self.allocated)
    }

    /// Allocated bytes gained since `earlier` (negative when memory was released).
    pub fn delta_allocated(&self, earlier: &Snapshot) -> i64 {
        self.allocated as i64 - earlier.allocated as i64
    }
}
