//! Host (CPU) memory: a counting global allocator, the CPU counterpart of the CUDA pool's
//! used / used-high, plus the process RSS from /proc.
//!
//! The counter also enforces an emulated card's capacity on CPU. A Rust allocator cannot fail an
//! allocation without aborting the process, so an allocation that crosses the cap succeeds, is
//! recorded, and the lab turns it into an OOM value at its next checkpoint (`check_cap`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static CAP: AtomicU64 = AtomicU64::new(u64::MAX);
static OVER_CAP_REQUEST: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Install in a binary with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

fn grow(size: u64) {
    let now = CURRENT.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(now, Relaxed);
    if now > CAP.load(Relaxed) {
        let _ = OVER_CAP_REQUEST.compare_exchange(0, size, Relaxed, Relaxed);
    }
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            INSTALLED.store(true, Relaxed);
            grow(layout.size() as u64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            INSTALLED.store(true, Relaxed);
            grow(layout.size() as u64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size() as u64, Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size() as u64, Relaxed);
            grow(new_size as u64);
        }
        p
    }
}

/// True once the counting allocator has seen an allocation (it is installed in this binary).
pub fn counting() -> bool {
    INSTALLED.load(Relaxed)
}

pub fn allocated() -> u64 {
    CURRENT.load(Relaxed)
}

pub fn peak() -> u64 {
    PEAK.load(Relaxed)
}

pub fn reset_peak() {
    PEAK.store(CURRENT.load(Relaxed), Relaxed);
    // VmHWM too, where the kernel allows it.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Sets (or with `None` lifts) the emulated capacity on CPU, in heap bytes.
pub fn set_cap(bytes: Option<u64>) {
    CAP.store(bytes.unwrap_or(u64::MAX), Relaxed);
    OVER_CAP_REQUEST.store(0, Relaxed);
}

pub fn cap() -> Option<u64> {
    Some(CAP.load(Relaxed)).filter(|&c| c != u64::MAX)
}

/// The size of the first allocation that crossed the cap since the last call, if any.
pub fn take_over_cap() -> Option<u64> {
    Some(OVER_CAP_REQUEST.swap(0, Relaxed)).filter(|&b| b != 0)
}

/// (VmRSS, VmHWM) in bytes from /proc/self/status; None off Linux.
pub fn rss() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Total and available host memory from /proc/meminfo.
pub fn meminfo() -> Option<(u64, u64)> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |key: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}
