//! Where a decoding step's time goes when its layers live on different devices: wall time in
//! CPU layers (their matrix products are counted apart by `host_linear`) and in the CPU↔GPU
//! crossings (a crossing to the CPU waits for the GPU work queued before it). Decode steps only
//! (one new token); a prefill is compute-bound and timed as a whole.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

static CPU_LAYERS: AtomicU64 = AtomicU64::new(0);
static CROSSINGS: AtomicU64 = AtomicU64::new(0);
static STEPS: AtomicU64 = AtomicU64::new(0);

/// Seconds per decode step since the last `take`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepProfile {
    pub steps: u64,
    pub cpu_layers_s: f64,
    pub crossings_s: f64,
}

pub fn take() -> StepProfile {
    let steps = STEPS.swap(0, Ordering::Relaxed);
    let per = |a: &AtomicU64| a.swap(0, Ordering::Relaxed) as f64 / 1e9 / steps.max(1) as f64;
    StepProfile { steps, cpu_layers_s: per(&CPU_LAYERS), crossings_s: per(&CROSSINGS) }
}

pub(super) fn step() {
    STEPS.fetch_add(1, Ordering::Relaxed);
}

pub(super) fn cpu_layer(since: Instant) {
    CPU_LAYERS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

pub(super) fn crossing(since: Instant) {
    CROSSINGS.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}
