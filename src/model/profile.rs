//! Where a decoding step's time goes when its layers live on different devices: wall time in
//! CPU layers, in their matrix-vector products (`host_linear`), and in the CPU↔GPU crossings (a
//! crossing to the CPU waits for the GPU work queued before it). Decode steps only (one new
//! token); a prefill is compute-bound and timed as a whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

static CPU_LAYERS: AtomicU64 = AtomicU64::new(0);
static KERNEL: AtomicU64 = AtomicU64::new(0);
static KERNEL_BYTES: AtomicU64 = AtomicU64::new(0);
static CROSSINGS: AtomicU64 = AtomicU64::new(0);
static STEPS: AtomicU64 = AtomicU64::new(0);

/// Per decode step since the last `take`: seconds, and the weight bytes the host kernel read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepProfile {
    pub steps: u64,
    pub cpu_layers_s: f64,
    pub kernel_s: f64,
    pub kernel_bytes: f64,
    pub crossings_s: f64,
}

impl StepProfile {
    /// The host kernel's read speed, GB/s (None if no CPU layer ran).
    pub fn kernel_gbs(&self) -> Option<f64> {
        (self.kernel_s > 0.0).then(|| self.kernel_bytes / self.kernel_s / 1e9)
    }
}

pub fn take() -> StepProfile {
    let steps = STEPS.swap(0, Ordering::Relaxed).max(1) as f64;
    let per = |a: &AtomicU64| a.swap(0, Ordering::Relaxed) as f64 / steps;
    StepProfile {
        steps: steps as u64,
        cpu_layers_s: per(&CPU_LAYERS) / 1e9,
        kernel_s: per(&KERNEL) / 1e9,
        kernel_bytes: per(&KERNEL_BYTES),
        crossings_s: per(&CROSSINGS) / 1e9,
    }
}

pub(crate) fn step() {
    STEPS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn cpu_layer(since: Instant) {
    CPU_LAYERS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// A host matrix-vector product that read `bytes` of weights.
pub(crate) fn kernel(since: Instant, bytes: u64) {
    KERNEL.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    KERNEL_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

pub(crate) fn crossing(since: Instant) {
    CROSSINGS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}
