//! The memory the peer sum (`kernels::peer_sum`) works in: one 2 MiB block per rank, allocated
//! outside candle's pool (peer access reaches `cuMemAlloc` memory; a stream-ordered pool's would
//! need its own access list), zeroed, and its address given to every rank while the group forms.
//! Every rank of a GPU group holds its block, so the ledger counts the same 2 MiB on every GPU; the
//! kernel is used only where every GPU reaches every other's memory (NVLink or PCIe peer access:
//! not between two RTX 4090s, whose driver has no peer access) and `VRAM_LAB_PEER_SUM` is not `0`.

use crate::error::{LabError, Result};
use crate::model::kernels::peer_sum::{self, PeerSlot};
use candle_core::cuda_backend::cudarc::driver::{sys, CudaContext};
use candle_core::CudaDevice;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::Duration;

/// What the ranks exchange while they join: each one's block, device and context.
pub struct PeerExchange {
    ranks: usize,
    seen: Mutex<Vec<Option<(u64, sys::CUdevice, usize)>>>,
    barrier: Barrier,
    reach: AtomicBool,
    /// Ranks whose blocks are done with: a block is freed once every rank's is (until then
    /// another rank may still read it), or kept when one never comes.
    released: Mutex<usize>,
    all_released: Condvar,
}

/// A rank's block; `slot` when the group sums through it.
pub struct PeerBlock {
    ctx: Arc<CudaContext>,
    base: u64,
    group: Arc<PeerExchange>,
    pub slot: Option<PeerSlot>,
}

// The block is freed by the rank's thread when its communicator goes; the raw address is only
// ever used on that rank's context.
unsafe impl Send for PeerBlock {}
unsafe impl Sync for PeerBlock {}

fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(LabError::other(format!("peer sum: {what}: {r:?}")))
    }
}

impl PeerExchange {
    pub fn new(ranks: usize) -> Self {
        Self {
            ranks,
            seen: Mutex::new(vec![None; ranks]),
            barrier: Barrier::new(ranks),
            reach: AtomicBool::new(true),
            released: Mutex::new(0),
            all_released: Condvar::new(),
        }
    }

    /// Rank `rank`'s block on `dev`: every rank of the group calls this at once (it waits for
    /// them). A rank that cannot allocate or reach a peer turns the kernel off for the group (the
    /// sums then go through NCCL); it never leaves the others waiting.
    pub fn join(self: &Arc<Self>, dev: &CudaDevice, rank: usize) -> Result<PeerBlock> {
        let ctx = dev.cuda_stream().context().clone();
        let mine = allocate(&ctx);
        // The kernel's table has room for `peer_sum::RANKS` ranks; a larger group sums with NCCL.
        let off = std::env::var("VRAM_LAB_PEER_SUM").is_ok_and(|v| v == "0");
        if mine.is_err() || self.ranks > peer_sum::RANKS || off || peer_sum::load(dev).is_err() {
            self.reach.store(false, SeqCst);
        }
        let base = *mine.as_ref().unwrap_or(&0);
        if let Ok(mut seen) = self.seen.lock() {
            seen[rank] = Some((base, ctx.cu_device(), ctx.cu_ctx() as usize));
        }
        self.barrier.wait();
        let seen: Vec<_> = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        if enable_peers(&ctx, &seen, rank).is_err() {
            self.reach.store(false, SeqCst);
        }
        self.barrier.wait();
        let base = mine?;
        let mut block = PeerBlock { ctx, base, group: self.clone(), slot: None };
        if !self.reach.load(SeqCst) {
            return Ok(block);
        }
        let bases: Vec<u64> = seen.iter().map(|s| s.map_or(0, |(b, _, _)| b)).collect();
        let mut table = [0u64; 2 * peer_sum::RANKS];
        for (r, b) in bases.iter().enumerate() {
            table[r] = *b;
            table[peer_sum::RANKS + r] = b + peer_sum::FLAGS_AT as u64;
        }
        // SAFETY: the table's bytes fit the block at TABLE_AT (checked in `kernels::peer_sum`).
        check(
            unsafe {
                sys::cuMemcpyHtoD_v2(
                    base + peer_sum::TABLE_AT as u64,
                    table.as_ptr().cast(),
                    std::mem::size_of_val(&table),
                )
            },
            "writing the table",
        )?;
        block.slot = Some(PeerSlot { base, rank, ranks: self.ranks });
        Ok(block)
    }
}

/// A zeroed block on `ctx` (made current on this thread).
fn allocate(ctx: &Arc<CudaContext>) -> Result<u64> {
    ctx.bind_to_thread().map_err(|e| LabError::other(format!("peer sum: {e:?}")))?;
    let mut base = 0;
    // SAFETY: a fresh allocation of BYTES, zeroed and waited for before any rank writes into it.
    unsafe {
        check(sys::cuMemAlloc_v2(&mut base, peer_sum::BYTES), "allocating its block")?;
        check(sys::cuMemsetD8_v2(base, 0, peer_sum::BYTES), "zeroing its block")?;
        check(sys::cuCtxSynchronize(), "zeroing its block")?;
    }
    Ok(base)
}

/// Lets this rank's context read and write every other rank's memory.
fn enable_peers(ctx: &Arc<CudaContext>, seen: &[Option<(u64, sys::CUdevice, usize)>], rank: usize) -> Result<()> {
    ctx.bind_to_thread().map_err(|e| LabError::other(format!("peer sum: {e:?}")))?;
    for (r, s) in seen.iter().enumerate() {
        let Some((_, dev, peer_ctx)) = *s else { return Err(LabError::other("peer sum: a rank has no block")) };
        if r == rank {
            continue;
        }
        let mut can = 0;
        // SAFETY: both devices are the group's, the peer context is alive while the group is.
        unsafe {
            check(sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), dev), "asking for peer access")?;
            if can != 1 {
                return Err(LabError::other("peer sum: no peer access"));
            }
            let r = sys::cuCtxEnablePeerAccess(peer_ctx as sys::CUcontext, 0);
            if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                check(r, "enabling peer access")?;
            }
        }
    }
    Ok(())
}

impl PeerExchange {
    /// Counts this rank's block as released and waits (up to 10 s) for every rank's: whether all
    /// came, so no kernel of any rank reads the blocks any more.
    fn everyone_released(&self) -> bool {
        let ranks = self.ranks;
        let Ok(mut n) = self.released.lock() else { return false };
        *n += 1;
        self.all_released.notify_all();
        self.all_released
            .wait_timeout_while(n, Duration::from_secs(10), |n| *n < ranks)
            .is_ok_and(|(_, waited)| !waited.timed_out())
    }
}

impl PeerBlock {
    /// An error when a sum of this rank waited past its limit for another rank (its outputs, and
    /// every later one's, are then wrong).
    pub fn failed(&self) -> Result<()> {
        let mut word = 0u32;
        self.ctx.bind_to_thread().map_err(|e| LabError::other(format!("peer sum: {e:?}")))?;
        // SAFETY: the failure word lies inside the block.
        check(
            unsafe { sys::cuMemcpyDtoH_v2((&mut word as *mut u32).cast(), self.base + peer_sum::FAILED_AT as u64, 4) },
            "reading its failure word",
        )?;
        if word != 0 {
            return Err(LabError::other(
                "peer sum: a rank waited over 10 s for another rank's part; its sums are wrong",
            ));
        }
        Ok(())
    }
}

impl Drop for PeerBlock {
    fn drop(&mut self) {
        if self.base == 0 || self.ctx.bind_to_thread().is_err() {
            return;
        }
        // SAFETY: waits for this rank's kernels, the last that could read another rank's block.
        let _ = unsafe { sys::cuCtxSynchronize() };
        if self.slot.is_some() && !self.group.everyone_released() {
            return; // another rank may still read it: kept (2 MiB) rather than freed under a reader
        }
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated on this context; no rank's kernel reads it any more.
            let _ = unsafe { sys::cuMemFree_v2(self.base) };
        }
    }
}
