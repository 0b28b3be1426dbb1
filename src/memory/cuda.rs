//! CUDA readings: the device's default memory pool (where candle's cuMemAllocAsync allocations
//! live), cuMemGetInfo, NVML's per-process usage, and a plain cuMemAlloc ballast.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaContext};
use candle_core::cuda_backend::CudaDevice;
use std::sync::Arc;

pub(super) fn check(rc: sys::CUresult, what: &str) -> Result<()> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(LabError::other(format!("{what}: {rc:?}")))
    }
}

pub fn context(dev: &CudaDevice) -> Arc<CudaContext> {
    dev.cuda_stream().context().clone()
}

/// The default pool's four counters, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolStats {
    pub used: u64,
    pub reserved: u64,
    pub used_high: u64,
    pub reserved_high: u64,
}

pub(super) fn default_pool(ctx: &CudaContext) -> Result<sys::CUmemoryPool> {
    ctx.bind_to_thread().map_err(LabError::other)?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: plain driver call with a valid out-pointer and device handle.
    check(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }, "cuDeviceGetDefaultMemPool")?;
    Ok(pool)
}

pub(super) fn pool_attr(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: these attributes are cuuint64_t.
    check(unsafe { sys::cuMemPoolGetAttribute(pool, attr, &mut v as *mut u64 as *mut _) }, "cuMemPoolGetAttribute")?;
    Ok(v)
}

fn set_release_threshold(pool: sys::CUmemoryPool, mut bytes: u64) -> Result<()> {
    // SAFETY: the release threshold is a cuuint64_t.
    check(
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut bytes as *mut u64 as *mut _,
            )
        },
        "cuMemPoolSetAttribute(release threshold)",
    )
}

/// While alive, the default pool keeps what is freed (its release threshold at the maximum) where
/// a synchronisation would give it back to the driver, so a timed pass finds its memory mapped, as
/// PyTorch's caching allocator keeps its blocks between a bench's repeats. Dropped: the threshold
/// restored and the pool trimmed, as `torch.cuda.empty_cache` after each length.
pub struct KeptPool {
    ctx: Arc<CudaContext>,
    pool: sys::CUmemoryPool,
    saved: u64,
}

impl KeptPool {
    pub fn new(dev: &CudaDevice) -> Result<Self> {
        let ctx = context(dev);
        let pool = default_pool(&ctx)?;
        let saved = pool_attr(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)?;
        set_release_threshold(pool, u64::MAX)?;
        Ok(Self { ctx, pool, saved })
    }
}

impl Drop for KeptPool {
    fn drop(&mut self) {
        let _ = self.ctx.synchronize();
        let _ = set_release_threshold(self.pool, self.saved);
        // SAFETY: trimming keeps every live allocation.
        let _ = unsafe { sys::cuMemPoolTrimTo(self.pool, 0) };
    }
}

pub fn pool_stats(dev: &CudaDevice) -> Result<PoolStats> {
    use sys::CUmemPool_attribute::*;
    let ctx = context(dev);
    // Frees are stream-ordered: synchronise so the counters describe what the host has dropped.
    ctx.synchronize().map_err(LabError::other)?;
    let pool = default_pool(&ctx)?;
    // With `--allocator pages` candle's tensors are in pages and the pool holds only what was made
    // before or inside a graph's capture: the sum is what the device holds. The high marks are
    // each one's own, so their sum is exact while only one of them grows (a prefill's pages).
    let pages = super::pages::stats(ctx.cu_device()).unwrap_or_default();
    Ok(PoolStats {
        used: pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)? + pages.used,
        reserved: pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)? + pages.mapped,
        used_high: pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH)? + pages.used_high,
        reserved_high: pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)? + pages.mapped_high,
    })
}

/// torch.cuda.reset_peak_memory_stats: the high-water marks restart from the current values.
pub fn reset_peak(dev: &CudaDevice) -> Result<()> {
    use sys::CUmemPool_attribute::*;
    let ctx = context(dev);
    ctx.synchronize().map_err(LabError::other)?;
    let pool = default_pool(&ctx)?;
    super::pages::reset_peak(ctx.cu_device());
    for attr in [CU_MEMPOOL_ATTR_USED_MEM_HIGH, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH] {
        let mut zero: u64 = 0;
        // SAFETY: the high-water attributes may only be set to zero, which resets them.
        check(
            unsafe { sys::cuMemPoolSetAttribute(pool, attr, &mut zero as *mut u64 as *mut _) },
            "cuMemPoolSetAttribute",
        )?;
    }
    Ok(())
}

/// torch.cuda.empty_cache: give the pool's unused memory back to the driver.
pub fn trim(dev: &CudaDevice) -> Result<()> {
    let ctx = context(dev);
    ctx.synchronize().map_err(LabError::other)?;
    let pool = default_pool(&ctx)?;
    super::pages::trim(ctx.cu_device());
    // SAFETY: trimming to zero keeps every live allocation.
    check(unsafe { sys::cuMemPoolTrimTo(pool, 0) }, "cuMemPoolTrimTo")
}

/// (free, total) from cuMemGetInfo.
pub fn mem_info(dev: &CudaDevice) -> Result<(u64, u64)> {
    let ctx = context(dev);
    ctx.bind_to_thread().map_err(LabError::other)?;
    let (free, total) = result::mem_get_info().map_err(LabError::other)?;
    Ok((free as u64, total as u64))
}

/// The device's ordinal (cuda:N).
pub use crate::hw::{cuda_name as name, gpu_ordinal as ordinal};

pub fn compute_capability(dev: &CudaDevice) -> Option<(i32, i32)> {
    context(dev).compute_capability().ok()
}

/// The device's streaming multiprocessors (what a grid that should fill the card is sized by).
pub fn sm_count(dev: &CudaDevice) -> Result<usize> {
    let n = context(dev).attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    Ok(n.map_err(LabError::other)? as usize)
}

pub fn driver_cuda_version() -> Option<i32> {
    let mut v = 0;
    // SAFETY: plain query with a valid out-pointer.
    (unsafe { sys::cuDriverGetVersion(&mut v) } == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

/// Device memory held outside the pool (plain cuMemAlloc) so that a larger GPU looks like a
/// smaller card. Freed on drop, so every path out of a stage releases it.
pub struct DeviceBallast {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    pub bytes: u64,
}

impl DeviceBallast {
    pub fn new(dev: &CudaDevice, bytes: u64) -> Result<Self> {
        let ctx = context(dev);
        ctx.bind_to_thread().map_err(LabError::other)?;
        // SAFETY: a plain allocation released in Drop.
        let ptr = unsafe { result::malloc_sync(bytes as usize) }.map_err(|e| {
            LabError::Unsupported(format!("could not hold a ballast of {}: {e}", super::fmt_bytes(bytes)))
        })?;
        Ok(Self { ctx, ptr, bytes })
    }
}

impl Drop for DeviceBallast {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: ptr came from malloc_sync and is freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

fn uuid_string(dev: &CudaDevice) -> Option<String> {
    let u = context(dev).uuid().ok()?;
    let b: Vec<u8> = u.bytes.iter().map(|&c| c as u8).collect();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Some(format!("GPU-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]))
}

/// This process's GPU memory as nvidia-smi shows it (pool + context + ballast + libraries).
pub fn process_used(dev: &CudaDevice) -> Option<u64> {
    let nvml = super::nvml::nvml()?;
    let device = nvml.device_by_uuid(uuid_string(dev)?).ok()?;
    let pid = std::process::id();
    device.running_compute_processes().ok()?.into_iter().find(|p| p.pid == pid).and_then(|p| match p.used_gpu_memory {
        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
        _ => None,
    })
}

/// Other processes using this GPU and their memory (NVML), as nvidia-smi lists them.
pub fn other_processes(dev: &CudaDevice) -> Vec<(u32, u64)> {
    let Some(nvml) = super::nvml::nvml() else { return Vec::new() };
    let Some(device) = uuid_string(dev).and_then(|u| nvml.device_by_uuid(u).ok()) else { return Vec::new() };
    let me = std::process::id();
    device
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.pid != me)
        .map(|p| match p.used_gpu_memory {
            nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => (p.pid, b),
            _ => (p.pid, 0),
        })
        .collect()
}

/// The largest block plain cuMemAlloc gives now, to 2 MiB, by bisection (each trial is freed).
pub fn largest_free_block(dev: &CudaDevice) -> Result<u64> {
    let ctx = context(dev);
    ctx.bind_to_thread().map_err(LabError::other)?;
    let (free, _) = mem_info(dev)?;
    let granule = crate::memory::policy::GRANULE;
    let (lo, _) = crate::search::bisect(0, free + granule, granule, |b| {
        // SAFETY: a trial allocation freed at once.
        Ok(match unsafe { result::malloc_sync(b as usize) } {
            Ok(p) => {
                let _ = unsafe { result::free_sync(p) };
                true
            }
            Err(_) => false,
        })
    })?;
    Ok(lo)
}
