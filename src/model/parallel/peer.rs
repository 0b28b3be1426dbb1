//! The small sums of a decoding step over peer memory: a group whose GPUs reach each other's
//! memory (NVLink, or PCIe with peer access; not RTX 4090s, whose driver refuses it) sums a
//! step's few KB with one kernel (`kernels::peer_sum`) instead of NCCL's, whose fixed cost per sum
//! set a tensor-parallel step's time (two sums a layer). Each rank holds one buffer outside
//! candle's pool, allocated when it joins; every rank takes the path or none does, since a sum must
//! be the same collective on every rank. `VRAM_LAB_PEER_SUM=0` keeps every sum on NCCL.

use super::comm::Rendezvous;
use crate::error::{LabError, Result};
use crate::model::kernels::peer_sum::{PeerSumKernel, BUFFER_BYTES, MAX_RANKS, TABLE};
use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaContext};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};
use std::sync::{Arc, Mutex};

/// Where a group's ranks publish their buffers and agree on the path.
pub struct PeerTable {
    /// Per rank: its context and device (as integers: raw handles) and its buffer's address.
    slots: Mutex<Vec<Option<(usize, i32, u64)>>>,
    meet: Rendezvous,
}

impl PeerTable {
    pub fn new(ranks: usize) -> Self {
        Self { slots: Mutex::new(vec![None; ranks]), meet: Rendezvous::new(ranks) }
    }
}

/// One rank's side of the path: its buffer and the kernel for each activation dtype.
pub struct PeerSum {
    ctx: Arc<CudaContext>,
    base: u64,
    rank: usize,
    ranks: usize,
    bf16: Option<PeerSumKernel>,
    f32: Option<PeerSumKernel>,
}

// The buffer is device memory the rank's thread allocated and frees; the kernels are launched on
// the rank's stream only. The model's layers hold the communicator behind an Arc.
unsafe impl Send for PeerSum {}
unsafe impl Sync for PeerSum {}

fn cuda(what: &str) -> impl Fn(result::DriverError) -> LabError + '_ {
    move |e| LabError::other(format!("peer sum: {what}: {e:?}"))
}

impl PeerSum {
    /// Joins `table` as `rank` of `ranks` on `dev` (every rank calls it at once): Some when every
    /// rank allocated its buffer and reaches every other's, None (every rank) otherwise.
    pub fn join(dev: &CudaDevice, rank: usize, ranks: usize, table: &PeerTable) -> Option<Self> {
        let ctx = dev.cuda_stream().context().clone();
        let off = std::env::var("VRAM_LAB_PEER_SUM").is_ok_and(|v| v == "0");
        let base = (|| {
            if off || !(2..=MAX_RANKS).contains(&ranks) {
                return Err(LabError::other("peer sums off"));
            }
            ctx.bind_to_thread().map_err(cuda("binding the context"))?;
            // SAFETY: a plain allocation in the rank's context, zeroed before any kernel reads it.
            let base = unsafe { result::malloc_sync(BUFFER_BYTES) }.map_err(cuda("allocating"))?;
            unsafe { result::memset_d8_sync(base, 0, BUFFER_BYTES) }.map_err(cuda("zeroing"))?;
            Ok(base)
        })();
        let me = base.as_ref().ok().map(|&b| (ctx.cu_ctx() as usize, ctx.cu_device(), b));
        if let Ok(mut slots) = table.slots.lock() {
            slots[rank] = me;
        }
        let mut out = Self { ctx, base: base.unwrap_or(0), rank, ranks, bf16: None, f32: None };
        if !table.meet.meet(me.is_some()) {
            return None;
        }
        let reached = out.reach(table).and_then(|_| out.load(dev));
        table.meet.meet(reached.is_ok()).then_some(out)
    }

    /// Peer access to every other rank's context, the table of every buffer written into this
    /// rank's, and the kernels loaded.
    fn reach(&mut self, table: &PeerTable) -> Result<()> {
        let slots: Vec<(usize, i32, u64)> = table
            .slots
            .lock()
            .map_err(|_| LabError::other("peer sum: a rank panicked"))?
            .iter()
            .map(|s| s.ok_or_else(|| LabError::other("peer sum: a rank has no buffer")))
            .collect::<Result<_>>()?;
        for (j, &(peer_ctx, peer_dev, _)) in slots.iter().enumerate() {
            if j == self.rank {
                continue;
            }
            let mut can = 0;
            // SAFETY: both devices are live handles of this process's contexts.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), peer_dev) }
                .result()
                .map_err(cuda("asking for peer access"))?;
            if can == 0 {
                return Err(LabError::other(format!("peer sum: rank {} cannot reach rank {j}'s memory", self.rank)));
            }
            match unsafe { sys::cuCtxEnablePeerAccess(peer_ctx as sys::CUcontext, 0) } {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                e => return Err(LabError::other(format!("peer sum: enabling peer access: {e:?}"))),
            }
        }
        let bases: Vec<u64> = slots.iter().map(|s| s.2).collect();
        // SAFETY: the table's place lies inside this rank's buffer.
        unsafe { result::memcpy_htod_sync(self.base + TABLE as u64, &bases) }.map_err(cuda("writing the table"))?;
        Ok(())
    }

    /// Loads the kernels on the rank's device (the one candle computes on).
    fn load(&mut self, dev: &CudaDevice) -> Result<()> {
        self.bf16 = PeerSumKernel::new(dev, DType::BF16)?;
        self.f32 = PeerSumKernel::new(dev, DType::F32)?;
        Ok(())
    }

    /// `res` + the group's sum of `x` through peer memory, or None where the path does not take
    /// the tensor (too large, F16, a view): the caller then sums through NCCL.
    pub fn sum(&self, x: &Tensor, res: Option<&Tensor>) -> Result<Option<Tensor>> {
        let kernel = match x.dtype() {
            DType::BF16 => self.bf16.as_ref(),
            DType::F32 => self.f32.as_ref(),
            _ => None,
        };
        match kernel {
            Some(k) => k.sum(self.base + TABLE as u64, self.rank, self.ranks, x, res),
            None => Ok(None),
        }
    }
}

impl Drop for PeerSum {
    fn drop(&mut self) {
        if self.base != 0 && self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `join` in this context; every kernel reading it ran on the
            // rank's stream, synchronised before the model is dropped.
            let _ = unsafe { result::free_sync(self.base) };
        }
    }
}
