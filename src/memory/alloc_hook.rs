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
        let (mut dev, mut pool) = (0, std::ptr::null_mut());
        // SAFETY: the stream is the one the failed request named; the queries take valid
        // out-pointers; trimming keeps every live allocation.
        unsafe {
            if sys::cuStreamSynchronize(stream as sys::CUstream) != sys::CUresult::CUDA_SUCCESS
                || sys::cuCtxGetDevice(&mut dev) != sys::CUresult::CUDA_SUCCESS
                || sys::cuDeviceGetMemPool(&mut pool, dev) != sys::CUresult::CUDA_SUCCESS
            {
                return false;
            }
            sys::cuMemPoolTrimTo(pool, 0) == sys::CUresult::CUDA_SUCCESS
        }
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

pub fn on_free(ptr: u64) {
    if let Ok(mut live) = LIVE.lock() {
        if let Some(bytes) = live.get_or_insert_with(HashMap::new).remove(&ptr) {
            FREES.fetch_add(1, Relaxed);
            FREE_BYTES.fetch_add(bytes, Relaxed);
        }
    }
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
                unsafe { vram_lab::memory::alloc_hook::libc::dlsym(vram_lab::memory::alloc_hook::libc::RTLD_NEXT, name.as_ptr()) as usize }
            }

            #[no_mangle]
            pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void) -> u32 {
                static REAL: OnceLock<usize> = OnceLock::new();
                let f = *REAL.get_or_init(|| real(c"cuMemAllocAsync"));
                if f == 0 {
                    return 999; // CUDA_ERROR_UNKNOWN: no driver library behind us
                }
                // SAFETY: f is the driver's cuMemAllocAsync, same signature.
                let alloc = unsafe { std::mem::transmute::<usize, AllocFn>(f) };
                let mut rc = unsafe { alloc(dptr, bytes, stream) };
                // CUDA_ERROR_OUT_OF_MEMORY: once more after the pool gave back what nothing uses.
                if rc == 2 && vram_lab::memory::alloc_hook::release_for_retry(stream) {
                    rc = unsafe { alloc(dptr, bytes, stream) };
                    if rc == 0 {
                        vram_lab::memory::alloc_hook::on_retried();
                    }
                }
                let ptr = if rc == 0 { unsafe { *dptr } } else { 0 };
                vram_lab::memory::alloc_hook::on_alloc(ptr, bytes as u64, rc);
                rc
            }

            #[no_mangle]
            pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, stream: *mut c_void) -> u32 {
                static REAL: OnceLock<usize> = OnceLock::new();
                let f = *REAL.get_or_init(|| real(c"cuMemFreeAsync"));
                if f == 0 {
                    return 999;
                }
                vram_lab::memory::alloc_hook::on_free(dptr);
                // SAFETY: f is the driver's cuMemFreeAsync, same signature.
                unsafe { std::mem::transmute::<usize, FreeFn>(f)(dptr, stream) }
            }
        }
    };
}

pub use libc;
