//! Raw device allocations under one of three policies, for the allocator stage: the device's
//! default stream-ordered pool as candle uses it (release threshold 0), the same pool with the
//! threshold at its maximum (a caching allocator), or plain synchronous cuMemAlloc / cuMemFree.
//!
//! The pool is the one candle allocates from; the caching policy raises its threshold only while
//! the arena lives (`KeptPool`, which puts it back and trims on drop), so every way out leaves
//! candle's pool as it was.

use super::cuda::{check, context, default_pool, mem_info, pool_attr as pool_u64, KeptPool};
use super::DeviceAllocator;
use crate::error::{LabError, OomReport, Result};
use crate::memory::policy::{round_up, Policy};
use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaContext};
use candle_core::cuda_backend::CudaDevice;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct DeviceArena {
    pub policy: Policy,
    dev: CudaDevice,
    ctx: Arc<CudaContext>,
    pool: sys::CUmemoryPool,
    /// The caching policy's raised threshold (put back when the arena drops).
    _kept: Option<KeptPool>,
    /// The pool's reserved bytes when the arena started (candle's own, after a trim).
    base_reserved: u64,
    /// Whether the allocation hook retried failed requests before (restored on drop).
    saved_retry: bool,
    /// Whether the page allocator served candle's requests before (restored on drop).
    saved_pages: bool,
    /// handle → (pointer, bytes asked)
    live: BTreeMap<u64, (sys::CUdeviceptr, u64)>,
    next: u64,
}

impl DeviceArena {
    pub fn new(dev: &CudaDevice, policy: Policy) -> Result<Self> {
        let ctx = context(dev);
        ctx.synchronize().map_err(LabError::other)?;
        let pool = default_pool(&ctx)?;
        // SAFETY: trimming keeps every live allocation; it starts each policy from the same state.
        check(unsafe { sys::cuMemPoolTrimTo(pool, 0) }, "cuMemPoolTrimTo")?;
        let _kept = if policy == Policy::Caching { Some(KeptPool::new(dev)?) } else { None };
        let base_reserved = pool_u64(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        // The policies are driven raw: a trim-and-retry would hide the pool's own failures.
        let saved_retry = crate::memory::alloc_hook::set_retry(false);
        // Its requests go to the pool it measures, whatever `--allocator` says for candle's.
        let saved_pages = super::pages::set_enabled(false);
        Ok(Self {
            policy,
            dev: dev.clone(),
            ctx,
            pool,
            _kept,
            base_reserved,
            saved_retry,
            saved_pages,
            live: BTreeMap::new(),
            next: 1,
        })
    }

    fn stream(&self) -> sys::CUstream {
        self.dev.cuda_stream().cu_stream()
    }
}

impl DeviceAllocator for DeviceArena {
    /// A new block of `bytes`; a refusal is an OOM value carrying the request.
    fn alloc(&mut self, bytes: u64) -> Result<u64> {
        self.ctx.bind_to_thread().map_err(LabError::other)?;
        // SAFETY: the pointers are freed once, in `free` or on drop.
        let ptr = unsafe {
            match self.policy {
                Policy::Sync => result::malloc_sync(bytes as usize),
                Policy::Pool | Policy::Caching => result::malloc_async(self.stream(), bytes as usize),
            }
        };
        match ptr {
            Ok(p) => {
                let h = self.next;
                self.next += 1;
                self.live.insert(h, (p, bytes));
                Ok(h)
            }
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(LabError::Oom(Box::new(OomReport {
                request_bytes: Some(bytes),
                message: format!("{:?} ({})", e.0, self.policy.name()),
                ..Default::default()
            }))),
            Err(e) => Err(LabError::other(format!("allocating {bytes} B ({}): {e:?}", self.policy.name()))),
        }
    }

    fn free(&mut self, handle: u64) {
        let Some((ptr, _)) = self.live.remove(&handle) else { return };
        let _ = self.ctx.bind_to_thread();
        // SAFETY: ptr came from this arena's allocation call and is freed once.
        let _ = unsafe {
            match self.policy {
                Policy::Sync => result::free_sync(ptr),
                Policy::Pool | Policy::Caching => result::free_async(ptr, self.stream()),
            }
        };
    }

    fn synchronize(&mut self) -> Result<()> {
        self.ctx.synchronize().map_err(LabError::other)
    }

    /// Bytes asked for by the live blocks.
    fn allocated(&self) -> u64 {
        self.live.values().map(|(_, b)| b).sum()
    }

    /// Bytes this arena holds from the driver: the pool's reserved above where it started, or
    /// for plain cuMemAlloc the live blocks in whole pages.
    fn reserved(&self) -> u64 {
        match self.policy {
            Policy::Sync => self.live.values().map(|(_, b)| round_up(*b)).sum(),
            _ => pool_u64(self.pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
                .unwrap_or(0)
                .saturating_sub(self.base_reserved),
        }
    }

    /// cuMemGetInfo's free bytes.
    fn device_free(&self) -> u64 {
        mem_info(&self.dev).map(|(f, _)| f).unwrap_or(0)
    }

    /// Would `bytes` be allocated now? Tried for real, then undone: freed, synchronised, and for
    /// the caching pool trimmed back to what it held before, so the trial leaves no block behind.
    fn fits(&mut self, bytes: u64) -> Result<bool> {
        self.synchronize()?;
        let before = pool_u64(self.pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
        let ok = match self.alloc(bytes) {
            Ok(h) => {
                self.free(h);
                true
            }
            Err(LabError::Oom(_)) => false,
            Err(e) => return Err(e),
        };
        self.synchronize()?;
        if self.policy == Policy::Caching {
            // SAFETY: trimming keeps live allocations; it gives back what the trial mapped.
            check(unsafe { sys::cuMemPoolTrimTo(self.pool, before as usize) }, "cuMemPoolTrimTo")?;
        }
        // The failed request is the lab's own probe, not an OOM to report.
        let _ = super::alloc_hook::take_failed_request(super::cuda::ordinal(&self.dev));
        Ok(ok)
    }

    /// cuMemPoolTrimTo(0) — torch.cuda.empty_cache — for the pool policies.
    fn trim(&mut self) -> Result<()> {
        self.synchronize()?;
        // SAFETY: trimming keeps every live allocation.
        check(unsafe { sys::cuMemPoolTrimTo(self.pool, 0) }, "cuMemPoolTrimTo")
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        let handles: Vec<u64> = self.live.keys().copied().collect();
        for h in handles {
            self.free(h);
        }
        let _ = self.synchronize();
        // SAFETY: trimming keeps candle's live allocations (`_kept` restores the threshold after).
        let _ = unsafe { sys::cuMemPoolTrimTo(self.pool, 0) };
        crate::memory::alloc_hook::set_retry(self.saved_retry);
        super::pages::set_enabled(self.saved_pages);
    }
}
