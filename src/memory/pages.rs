//! The lab's page allocator (`--allocator pages`), PyTorch's expandable segments in a few hundred
//! lines: each GPU gets one reserved address range, and physical memory is mapped into it in the
//! driver's 2 MiB pages, each its own handle, only where live allocations lie.
//!
//! Why: candle's stream-ordered pool maps 32 MiB chunks and can give back only the chunks no live
//! allocation touches. At a prefill's edge it kept 104-383 MiB beyond the live bytes, and how much
//! followed where it had placed earlier tensors, not their shapes, so the ledger's search had to
//! assume the worst and came up to four steps short (`data/results/h200/2026-11-28-family-edges`).
//! Here what stays mapped after a trim is the pages live allocations touch: at most a partly
//! filled page at each end of a run of neighbours, and the search comes within one step of every
//! edge measured (`data/results/h200/2026-11-28-pages`, `-pages-q4`).
//!
//! How: allocations of a page or more are placed in three quarters of the range, smaller ones in
//! the rest (a small tensor never pins a page between two large ones), each by best fit with free
//! neighbours merged. Freed pages stay mapped for the next request, as the pool keeps its chunks
//! until a synchronisation; `trim` (after a failed request, or `torch.cuda.empty_cache`'s place)
//! waits for the streams that freed memory and unmaps the pages nothing live touches.
//!
//! Streams: a range freed on one stream is reused by a request on the same stream in stream
//! order; a request on another stream first waits for the streams that freed since (the pool's
//! event dependencies, done by synchronising). Requests made while a stream is captured into a
//! graph go to the driver's pool (graph memory nodes); a page allocation freed during a capture
//! is never reused, since the graph may still read it when it replays.
//!
//! Served only through the binary's interposed `cuMemAllocAsync` (`alloc_hook`), for one GPU at a
//! time: peers cannot read these pages (the pool's `cuMemPoolSetAccess` does not reach them), so
//! the tensor-parallel stage refuses the allocator by name.

use super::ranges::Region;
use candle_core::cuda_backend::cudarc::driver::sys;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Whether it was ever on: frees are looked up here only then.
static EVER: AtomicBool = AtomicBool::new(false);
static SEGMENTS: Mutex<Option<HashMap<i32, Segment>>> = Mutex::new(None);

/// Requests are placed on 512-byte boundaries, as the pool places them (its traces).
const ALIGN: u64 = 512;
const OUT_OF_MEMORY: u32 = sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY as u32;

/// Serve candle's device allocations from pages (from now on; earlier ones stay in the pool and
/// are freed there). Returns whether it was on.
pub fn set_enabled(on: bool) -> bool {
    EVER.fetch_or(on, Relaxed);
    ENABLED.swap(on, Relaxed)
}

pub fn enabled_ever() -> bool {
    EVER.load(Relaxed)
}

pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// One GPU's counters, in bytes, as the pool's four.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageStats {
    /// The bytes live allocations asked for.
    pub used: u64,
    /// The pages mapped.
    pub mapped: u64,
    pub used_high: u64,
    pub mapped_high: u64,
}

/// One GPU's reserved range and its pages.
struct Segment {
    device: sys::CUdevice,
    base: u64,
    page: u64,
    small: Region,
    large: Region,
    /// Per page: its handle (0 = not mapped) and how many live allocations touch it.
    handles: Vec<sys::CUmemGenericAllocationHandle>,
    refs: Vec<u32>,
    /// pointer → (bytes asked, bytes placed)
    live: HashMap<u64, (u64, u64)>,
    /// Streams that freed since the last wait for them.
    freed_on: HashSet<usize>,
    stats: PageStats,
}

impl Segment {
    /// Reserves twice the GPU's memory of addresses: a quarter for small requests, the rest for
    /// large ones (addresses cost nothing until pages are mapped).
    fn new(device: sys::CUdevice) -> Result<Self, u32> {
        let mut total = 0usize;
        // SAFETY: valid out-pointer and device handle.
        rc(unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) })?;
        let mut page = 0usize;
        let prop = prop(device);
        // SAFETY: valid out-pointer and property.
        rc(unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut page,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        let page = page.max(1) as u64;
        let bytes = (2 * total as u64).div_ceil(4 * page) * 4 * page;
        let mut base = 0;
        // SAFETY: reserves addresses only, for the life of the process (one range a GPU).
        rc(unsafe { sys::cuMemAddressReserve(&mut base, bytes as usize, page as usize, 0, 0) })?;
        let pages = (bytes / page) as usize;
        Ok(Self {
            device,
            base,
            page,
            small: Region::new(base, bytes / 4),
            large: Region::new(base + bytes / 4, bytes - bytes / 4),
            handles: vec![0; pages],
            refs: vec![0; pages],
            live: HashMap::new(),
            freed_on: HashSet::new(),
            stats: PageStats::default(),
        })
    }

    fn pages_of(&self, ptr: u64, len: u64) -> std::ops::RangeInclusive<usize> {
        (((ptr - self.base) / self.page) as usize)..=(((ptr + len - 1 - self.base) / self.page) as usize)
    }

    fn alloc(&mut self, bytes: u64, stream: usize) -> Result<u64, u32> {
        // A range another stream freed is reused only once that stream's work is done.
        for &s in self.freed_on.iter().filter(|&&s| s != stream) {
            // SAFETY: a stream that freed memory here. One destroyed since has finished its work,
            // so its error is no reason to wait.
            unsafe { sys::cuStreamSynchronize(s as sys::CUstream) };
        }
        self.freed_on.retain(|&s| s == stream);
        let len = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let region = if len < self.page { &mut self.small } else { &mut self.large };
        let ptr = region.take(len).ok_or(OUT_OF_MEMORY)?;
        for i in self.pages_of(ptr, len) {
            if self.handles[i] == 0 {
                if let Err(e) = self.map(i) {
                    let region = if len < self.page { &mut self.small } else { &mut self.large };
                    region.put(ptr, len);
                    return Err(e);
                }
            }
        }
        for i in self.pages_of(ptr, len) {
            self.refs[i] += 1;
        }
        self.live.insert(ptr, (bytes, len));
        self.stats.used += bytes;
        self.stats.used_high = self.stats.used_high.max(self.stats.used);
        Ok(ptr)
    }

    /// Maps page `i` (a new 2 MiB handle), readable and writable by this GPU.
    fn map(&mut self, i: usize) -> Result<(), u32> {
        let prop = prop(self.device);
        let mut handle = 0;
        // SAFETY: valid out-pointer and property; released in `unmap`.
        rc(unsafe { sys::cuMemCreate(&mut handle, self.page as usize, &prop, 0) })?;
        let va = self.base + i as u64 * self.page;
        // SAFETY: `va` is a page of our reservation with nothing mapped; the handle is a page long.
        let mapped = rc(unsafe { sys::cuMemMap(va, self.page as usize, 0, handle, 0) }).and_then(|_| {
            let access = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the page was just mapped.
            rc(unsafe { sys::cuMemSetAccess(va, self.page as usize, &access, 1) }).inspect_err(|_| unsafe {
                sys::cuMemUnmap(va, self.page as usize);
            })
        });
        if let Err(e) = mapped {
            // SAFETY: the handle is not mapped anywhere.
            unsafe { sys::cuMemRelease(handle) };
            return Err(e);
        }
        self.handles[i] = handle;
        self.stats.mapped += self.page;
        self.stats.mapped_high = self.stats.mapped_high.max(self.stats.mapped);
        Ok(())
    }

    /// Whether `ptr` was ours (then it is free again for requests on `stream`, in stream order).
    fn free(&mut self, ptr: u64, stream: usize, capturing: bool) -> bool {
        let Some(&(bytes, len)) = self.live.get(&ptr) else { return false };
        if capturing {
            // A graph being captured may read it when it replays: it stays live for good.
            return true;
        }
        self.live.remove(&ptr);
        for i in self.pages_of(ptr, len) {
            self.refs[i] -= 1;
        }
        let region = if len < self.page { &mut self.small } else { &mut self.large };
        region.put(ptr, len);
        self.stats.used -= bytes;
        self.freed_on.insert(stream);
        true
    }

    /// Unmaps every page no live allocation touches; the caller has waited for the GPU.
    fn trim(&mut self) {
        for i in 0..self.handles.len() {
            if self.handles[i] != 0 && self.refs[i] == 0 {
                let va = self.base + i as u64 * self.page;
                // SAFETY: nothing live lies in the page and the GPU is idle.
                unsafe {
                    sys::cuMemUnmap(va, self.page as usize);
                    sys::cuMemRelease(self.handles[i]);
                }
                self.handles[i] = 0;
                self.stats.mapped -= self.page;
            }
        }
        self.freed_on.clear();
    }
}

fn prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which zero is every field's default.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

fn rc(r: sys::CUresult) -> Result<(), u32> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r as u32)
    }
}

/// The device of the context current on this thread.
pub fn current_device() -> Option<sys::CUdevice> {
    let mut d = 0;
    // SAFETY: a query with a valid out-pointer.
    (unsafe { sys::cuCtxGetDevice(&mut d) } == sys::CUresult::CUDA_SUCCESS).then_some(d)
}

fn capturing(stream: *mut c_void) -> bool {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a query on the caller's stream, legal during a capture.
    let r = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut status) };
    r != sys::CUresult::CUDA_SUCCESS || status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

fn with_segments<T>(f: impl FnOnce(&mut HashMap<i32, Segment>) -> T) -> Option<T> {
    SEGMENTS.lock().ok().map(|mut s| f(s.get_or_insert_with(HashMap::new)))
}

/// A request on the current context's GPU: `None` when the pages do not serve it (off, or the
/// stream is being captured), else the pointer or the CUresult of the failure.
pub fn alloc(bytes: usize, stream: *mut c_void) -> Option<Result<u64, u32>> {
    if !enabled() || capturing(stream) {
        return None;
    }
    let device = current_device()?;
    with_segments(|segs| {
        let seg = match segs.entry(device) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Segment::new(device)?),
        };
        seg.alloc(bytes as u64, stream as usize)
    })
}

/// Frees `ptr` if it is a page allocation (of any GPU); false when it is the pool's.
pub fn free(ptr: u64, stream: *mut c_void) -> bool {
    let capture = capturing(stream);
    with_segments(|segs| segs.values_mut().any(|s| s.free(ptr, stream as usize, capture))).unwrap_or(false)
}

/// Waits for the GPU of the current context and unmaps its pages nothing live touches (what a
/// failed request does before its retry). False when the wait failed.
pub fn trim_current() -> bool {
    let Some(device) = current_device() else { return false };
    // SAFETY: waits for every stream of the current context.
    if unsafe { sys::cuCtxSynchronize() } != sys::CUresult::CUDA_SUCCESS {
        return false;
    }
    with_segments(|segs| segs.get_mut(&device).map(Segment::trim)).is_some()
}

/// Device `device`'s counters (None when it never served a request).
pub fn stats(device: sys::CUdevice) -> Option<PageStats> {
    with_segments(|segs| segs.get(&device).map(|s| s.stats)).flatten()
}

/// The high-water marks restart from the current values.
pub fn reset_peak(device: sys::CUdevice) {
    with_segments(|segs| {
        if let Some(s) = segs.get_mut(&device) {
            s.stats.used_high = s.stats.used;
            s.stats.mapped_high = s.stats.mapped;
        }
    });
}

/// Unmaps device `device`'s pages nothing live touches; the caller has synchronised the context.
pub fn trim(device: sys::CUdevice) {
    with_segments(|segs| segs.get_mut(&device).map(Segment::trim));
}
