//! Sees every CUDA allocation candle makes, so an OOM can say how much was asked for
//! (as PyTorch's "Tried to allocate 2.03 GiB") and the summary can count allocations.
//!
//! candle allocates through cudarc's `cuMemAllocAsync` / `cuMemFreeAsync`. The binary defines
//! those two symbols with `cuda_alloc_hook!()`; the linker binds cudarc's calls to them, and they
//! forward to the driver's functions found with `dlsym(RTLD_NEXT)`. Without the macro (e.g. in a
//! notebook) nothing is counted and request sizes are reported as unknown. A failed request is
//! kept per device (the context current when it failed), so two GPUs in one process do not mix;
//! the counts for the summary are the process's.
//!
//! A failed request is retried once after the stream is synchronised and the pool trimmed, as
//! PyTorch's caching allocator releases its cached blocks and retries: candle's pool (release
//! threshold 0) keeps freed blocks until the next synchronisation, and a prefill issues none, so
//! without the retry a request fails while the pool holds gigabytes nothing uses (measured on an
//! H200 emulating an RTX 4090: the pool's mapped high-water mark at the card's edge with 3-4 GiB
//! live less, 2026-11-22). The allocator stage turns it off to drive the raw policies.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

static ACTIVE: AtomicBool = AtomicBool::new(false);
const MAX_DEVICES: usize = 16;
static LAST_FAILED: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static FREE_BYTES: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static LIVE: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static LIVE_PEAK: AtomicU64 = AtomicU64::new(0);
static RETRY: AtomicBool = AtomicBool::new(true);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct AllocCounts {
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub free_bytes: u64,
    pub failures: u64,
    pub live: u64,
    pub live_peak: u64,
    pub largest_live: u64,
    /// Failed requests that succeeded after a trim.
    pub retried: u64,
}

/// Called by a binary that used `cuda_alloc_hook!()`: its requests pass through here.
pub fn set_installed() {
    INSTALLED.store(true, Relaxed);
}

/// Whether this process's CUDA requests pass through the hook (the binary, not a notebook).
pub fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// Whether a failed request is retried after a trim (on by default); returns the previous value.
pub fn set_retry(on: bool) -> bool {
    RETRY.swap(on, Relaxed)
}

pub fn retry_enabled() -> bool {
    RETRY.load(Relaxed)
}

/// After a failed request on `stream`: when retrying is on, waits for the stream (its frees land
/// in the pool), gives the pool's unused memory back and says to try again.
pub fn release_for_retry(stream: *mut std::ffi::c_void) -> bool {
    if !RETRY.load(Relaxed) {
        return false;
    }
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::sys;
        // SAFETY: the stream is the one the failed request named.
        if unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) } != sys::CUresult::CUDA_SUCCESS {
            return false;
        }
        let Some(pool) = current_pool() else { return false };
        trace("synced", 0, 0, stream);
        // SAFETY: trimming keeps every live allocation.
        let ok = unsafe { sys::cuMemPoolTrimTo(pool, 0) } == sys::CUresult::CUDA_SUCCESS
            && (!super::pages::enabled() || super::pages::trim_current());
        trace(if ok { "trimmed" } else { "trim failed" }, 0, 0, stream);
        ok
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = stream;
        false
    }
}

/// Called when a retried request succeeded.
pub fn on_retried() {
    RETRIES.fetch_add(1, Relaxed);
}

/// The allocation trace: with `VRAM_LAB_ALLOC_TRACE=<file>` every request, free, failure and
/// trim is a CSV line with the pool's reserved and used bytes after it — how the pool maps
/// memory for a prefill, which the live bytes alone do not say (a diagnosis, off by default).
static TRACE: Mutex<Option<std::fs::File>> = Mutex::new(None);
static TRACING: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn tracing() -> bool {
    *TRACING.get_or_init(|| {
        let Some(path) = std::env::var_os("VRAM_LAB_ALLOC_TRACE") else { return false };
        let Ok(mut f) = std::fs::File::create(&path) else {
            eprintln!("VRAM_LAB_ALLOC_TRACE: cannot create {}: no trace", std::path::Path::new(&path).display());
            return false;
        };
        use std::io::Write;
        let _ = writeln!(f, "event,ptr,bytes,reserved,used,touched,runs");
        TRACE.lock().map(|mut t| *t = Some(f)).is_ok()
    })
}

/// One line of the trace (nothing when it is off); `ptr` 0 where there is none. The pool is
/// not queried while `stream` is being captured into a graph (the query would invalidate it).
pub fn trace(event: &str, ptr: u64, bytes: u64, stream: *mut std::ffi::c_void) {
    if !tracing() {
        return;
    }
    // Empty fields while a graph is captured: the pool was not asked.
    let (reserved, used) = if capturing(stream) { (String::new(), String::new()) } else { pool_now() };
    // After a trim: what the live allocations alone would keep mapped, beside `reserved`.
    let layout = if event == "trimmed" { LIVE.lock().ok().and_then(|l| l.as_ref().map(live_layout)) } else { None };
    let (touched, runs) = layout.map(|(t, r)| (t.to_string(), r.to_string())).unwrap_or_default();
    if let Ok(mut t) = TRACE.lock() {
        if let Some(f) = t.as_mut() {
            use std::io::Write;
            let _ = writeln!(f, "{event},{ptr:#x},{bytes},{reserved},{used},{touched},{runs}");
        }
    }
}

/// The bytes of the pool's chunks (`memory::policy::POOL_CHUNK`) that live allocations touch, and
/// how many runs of adjacent allocations they form (a run shares its chunks; two runs do not).
pub fn live_layout(live: &HashMap<u64, u64>) -> (u64, u64) {
    let chunk = crate::memory::policy::POOL_CHUNK;
    let mut blocks: Vec<(u64, u64)> = live.iter().map(|(&p, &b)| (p, p + b.max(1))).collect();
    blocks.sort_unstable();
    let (mut chunks, mut runs) = (0u64, 0u64);
    // The last chunk counted, so chunks shared by neighbours count once.
    let mut last: Option<u64> = None;
    let mut end = 0u64;
    for (start, stop) in blocks {
        // Allocations are 512-byte aligned: a gap under a page is the alignment, not a hole.
        if runs == 0 || start > end + 4096 {
            runs += 1;
        }
        end = end.max(stop);
        let (first, final_) = (start / chunk, (stop - 1) / chunk);
        let from = match last {
            Some(l) if l >= first => l + 1,
            _ => first,
        };
        if final_ >= from {
            chunks += final_ - from + 1;
        }
        last = Some(last.map_or(final_, |l| l.max(final_)));
    }
    (chunks * chunk, runs)
}

/// A label in the trace, e.g. the prefill that follows.
pub fn trace_mark(label: &str) {
    trace(&format!("mark {}", label.replace(',', ";")), 0, 0, std::ptr::null_mut());
}

fn capturing(stream: *mut std::ffi::c_void) -> bool {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::sys;
        if stream.is_null() {
            return false;
        }
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a query on the stream the caller used, legal during a capture.
        let rc = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut status) };
        rc != sys::CUresult::CUDA_SUCCESS || status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = stream;
        false
    }
}

/// The current device's default pool: reserved and used bytes (empty without CUDA or when the
/// driver did not answer).
fn pool_now() -> (String, String) {
    #[cfg(feature = "cuda")]
    if let Some(pool) = current_pool() {
        use candle_core::cuda_backend::cudarc::driver::sys::CUmemPool_attribute::*;
        if let (Ok(reserved), Ok(used)) = (
            super::cuda::pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            super::cuda::pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
        ) {
            let pages = super::pages::current_device().and_then(super::pages::stats).unwrap_or_default();
            return ((reserved + pages.mapped).to_string(), (used + pages.used).to_string());
        }
    }
    (String::new(), String::new())
}

/// The default pool of the device whose context is current on this thread (where candle's
/// requests go).
#[cfg(feature = "cuda")]
fn current_pool() -> Option<candle_core::cuda_backend::cudarc::driver::sys::CUmemoryPool> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let (mut dev, mut pool) = (0, std::ptr::null_mut());
    let ok = sys::CUresult::CUDA_SUCCESS;
    // SAFETY: queries with valid out-pointers.
    unsafe { (sys::cuCtxGetDevice(&mut dev) == ok && sys::cuDeviceGetMemPool(&mut pool, dev) == ok).then_some(pool) }
}

/// Called by the hook after the driver answered; `rc` is the CUresult (0 = success).
pub fn on_alloc(ptr: u64, bytes: u64, rc: u32) {
    ACTIVE.store(true, Relaxed);
    if rc != 0 {
        FAILURES.fetch_add(1, Relaxed);
        LAST_FAILED[current_device() % MAX_DEVICES].store(bytes, Relaxed);
        return;
    }
    ALLOCS.fetch_add(1, Relaxed);
    ALLOC_BYTES.fetch_add(bytes, Relaxed);
    if let Ok(mut live) = LIVE.lock() {
        let map = live.get_or_insert_with(HashMap::new);
        map.insert(ptr, bytes);
        LIVE_PEAK.fetch_max(map.len() as u64, Relaxed);
    }
}

/// Returns the bytes the allocation held (0 when the hook did not see it made).
pub fn on_free(ptr: u64) -> u64 {
    if let Ok(mut live) = LIVE.lock() {
        if let Some(bytes) = live.get_or_insert_with(HashMap::new).remove(&ptr) {
            FREES.fetch_add(1, Relaxed);
            FREE_BYTES.fetch_add(bytes, Relaxed);
            return bytes;
        }
    }
    0
}

pub fn active() -> bool {
    ACTIVE.load(Relaxed)
}

/// The ordinal of the device whose context is current on this thread (0 without CUDA).
fn current_device() -> usize {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::sys;
        let mut d = 0;
        // SAFETY: a query with a valid out-pointer; called after the driver answered an allocation.
        if unsafe { sys::cuCtxGetDevice(&mut d) } == sys::CUresult::CUDA_SUCCESS {
            return d.max(0) as usize;
        }
    }
    0
}

/// The size of the last allocation that failed on device `ordinal`, once.
pub fn take_failed_request(ordinal: usize) -> Option<u64> {
    Some(LAST_FAILED[ordinal % MAX_DEVICES].swap(0, Relaxed)).filter(|&b| b != 0)
}

pub fn counts() -> Option<AllocCounts> {
    if !active() {
        return None;
    }
    let (live, largest) = LIVE
        .lock()
        .ok()
        .and_then(|l| l.as_ref().map(|m| (m.len() as u64, m.values().copied().max().unwrap_or(0))))
        .unwrap_or((0, 0));
    Some(AllocCounts {
        allocs: ALLOCS.load(Relaxed),
        alloc_bytes: ALLOC_BYTES.load(Relaxed),
        frees: FREES.load(Relaxed),
        free_bytes: FREE_BYTES.load(Relaxed),
        failures: FAILURES.load(Relaxed),
        live,
        live_peak: LIVE_PEAK.load(Relaxed),
        largest_live: largest,
        retried: RETRIES.load(Relaxed),
    })
}

/// Defines the two interposed driver entry points. Use once, in the binary's main.rs.
#[macro_export]
macro_rules! cuda_alloc_hook {
    () => {
        #[cfg(feature = "cuda")]
        mod cuda_alloc_hook {
            use std::ffi::c_void;
            use std::sync::OnceLock;
            type AllocFn = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> u32;
            type FreeFn = unsafe extern "C" fn(u64, *mut c_void) -> u32;

            fn real(name: &std::ffi::CStr) -> usize {
                // SAFETY: dlsym with a valid C string; RTLD_NEXT skips this executable's definition.
                unsafe {
                    vram_lab::memory::alloc_hook::libc::dlsym(
                        vram_lab::memory::alloc_hook::libc::RTLD_NEXT,
                        name.as_ptr(),
                    ) as usize
                }
            }

            #[no_mangle]
            pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void) -> u32 {
                static REAL: OnceLock<usize> = OnceLock::new();
                let f = *REAL.get_or_init(|| real(c"cuMemAllocAsync"));
                if f == 0 {
                    return 999; // CUDA_ERROR_UNKNOWN: no driver library behind us
                }
                // SAFETY: f is the driver's cuMemAllocAsync, same signature.
                let driver = unsafe { std::mem::transmute::<usize, AllocFn>(f) };
                // `--allocator pages` serves the request unless it is captured into a graph.
                let alloc = |dptr: *mut u64, bytes: usize, stream: *mut c_void| {
                    match vram_lab::memory::pages::alloc(bytes, stream) {
                        Some(Ok(ptr)) => {
                            // SAFETY: the caller's out-pointer, as the driver would write it.
                            unsafe { *dptr = ptr };
                            0
                        }
                        Some(Err(rc)) => rc,
                        None => unsafe { driver(dptr, bytes, stream) },
                    }
                };
                let mut rc = alloc(dptr, bytes, stream);
                // CUDA_ERROR_OUT_OF_MEMORY: once more after the pool gave back what nothing uses.
                if rc == 2 {
                    vram_lab::memory::alloc_hook::trace("fail", 0, bytes as u64, stream);
                }
                if rc == 2 && vram_lab::memory::alloc_hook::release_for_retry(stream) {
                    rc = alloc(dptr, bytes, stream);
                    if rc == 0 {
                        vram_lab::memory::alloc_hook::on_retried();
                    }
                }
                let ptr = if rc == 0 { unsafe { *dptr } } else { 0 };
                vram_lab::memory::alloc_hook::on_alloc(ptr, bytes as u64, rc);
                vram_lab::memory::alloc_hook::trace(if rc == 0 { "alloc" } else { "oom" }, ptr, bytes as u64, stream);
                rc
            }

            #[no_mangle]
            pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, stream: *mut c_void) -> u32 {
                static REAL: OnceLock<usize> = OnceLock::new();
                let f = *REAL.get_or_init(|| real(c"cuMemFreeAsync"));
                if f == 0 {
                    return 999;
                }
                let bytes = vram_lab::memory::alloc_hook::on_free(dptr);
                let paged = vram_lab::memory::pages::enabled_ever() && vram_lab::memory::pages::free(dptr, stream);
                let rc = if paged {
                    0
                } else {
                    // SAFETY: f is the driver's cuMemFreeAsync, same signature.
                    unsafe { std::mem::transmute::<usize, FreeFn>(f)(dptr, stream) }
                };
                vram_lab::memory::alloc_hook::trace("free", dptr, bytes, stream);
                rc
            }
        }
    };
}

pub use libc;

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Chunks shared by neighbours count once; a gap starts a new run.
    #[test]
    fn live_layout_counts_touched_chunks() {
        let c = crate::memory::policy::POOL_CHUNK;
        // Two neighbours inside one chunk: one chunk, one run.
        let live = HashMap::from([(0, 10 * MIB), (10 * MIB, 5 * MIB)]);
        assert_eq!(live_layout(&live), (c, 1));
        // From 31 MiB: 33 MiB ends at a chunk's edge (two chunks), 34 MiB does not (three).
        assert_eq!(live_layout(&HashMap::from([(31 * MIB, 33 * MIB)])), (2 * c, 1));
        assert_eq!(live_layout(&HashMap::from([(31 * MIB, 34 * MIB)])), (3 * c, 1));
        // Two runs a chunk apart: the chunk between them is not touched.
        let live = HashMap::from([(0, MIB), (2 * c, MIB)]);
        assert_eq!(live_layout(&live), (2 * c, 2));
        // A run ending in the chunk where the next begins shares it.
        let live = HashMap::from([(0, c + MIB), (c + 8 * MIB, MIB)]);
        assert_eq!(live_layout(&live), (2 * c, 2));
        assert_eq!(live_layout(&HashMap::new()), (0, 0));
    }
}
