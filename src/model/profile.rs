//! Where a decoding step's time goes when its layers live on different devices: wall time in
//! CPU layers, in their matrix-vector products (`host_linear`), and in the CPU↔GPU crossings (a
//! crossing to the CPU waits for the GPU work queued before it). Decode steps only (one new
//! token); a prefill is compute-bound and timed as a whole. Each decoder keeps its own counters
//! (`Decoder::take_profile`) and each host product times itself, as candle-transformers'
//! `with_tracing` wraps a layer, so two models in one process never mix their figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

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

/// Nanoseconds and bytes summed since the last `take`; a copy starts its own count.
#[derive(Debug, Default)]
pub struct Timer {
    nanos: AtomicU64,
    bytes: AtomicU64,
}

impl Clone for Timer {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl Timer {
    pub(crate) fn record(&self, since: Instant, bytes: u64) {
        self.nanos.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// (nanoseconds, bytes) since the last call, and a fresh count.
    pub(crate) fn take(&self) -> (u64, u64) {
        (self.nanos.swap(0, Ordering::Relaxed), self.bytes.swap(0, Ordering::Relaxed))
    }
}

/// A decoder's own counters: its decode steps, its CPU layers and its crossings.
#[derive(Debug, Default)]
pub struct Profiler {
    cpu_layers: Timer,
    crossings: Timer,
    steps: AtomicU64,
}

impl Clone for Profiler {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl Profiler {
    pub(crate) fn step(&self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cpu_layer(&self, since: Instant) {
        self.cpu_layers.record(since, 0);
    }

    pub(crate) fn crossing(&self, since: Instant) {
        self.crossings.record(since, 0);
    }

    /// Per step since the last call, with `kernel` the host products' (nanoseconds, bytes).
    pub(crate) fn take(&self, (kernel_ns, kernel_bytes): (u64, u64)) -> StepProfile {
        let steps = self.steps.swap(0, Ordering::Relaxed).max(1) as f64;
        StepProfile {
            steps: steps as u64,
            cpu_layers_s: self.cpu_layers.take().0 as f64 / steps / 1e9,
            kernel_s: kernel_ns as f64 / steps / 1e9,
            kernel_bytes: kernel_bytes as f64 / steps,
            crossings_s: self.crossings.take().0 as f64 / steps / 1e9,
        }
    }
}
