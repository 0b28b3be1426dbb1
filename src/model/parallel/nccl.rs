//! The all-reduce across GPUs: NCCL (through candle's cudarc), one communicator per rank on the
//! stream candle computes on, so the sum is ordered after the partial output it adds.
//! Ranks are threads of one process: the launcher makes the unique id and every rank joins with
//! it at once (`ncclCommInitRank` waits for all of them). Where every GPU reaches the others'
//! memory, the small sums of a decoding step go through the lab's one-kernel peer sum instead
//! (`kernels::peer_sum`, set up in `peer`), the rest through NCCL.

use crate::error::{LabError, Result};
use crate::model::kernels::peer_sum;
use crate::model::layers::comm::AllReduce;
use crate::model::parallel::peer::{PeerBlock, PeerExchange};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::nccl::safe::{Comm, Id, ReduceOp};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{CudaDevice, CustomOp1, DType, Layout, Shape, Tensor};
use half::{bf16, f16};
use std::sync::Arc;

/// The group's id, made once and given to every rank.
#[derive(Clone, Copy)]
pub struct GroupId([std::ffi::c_char; 128]);

impl GroupId {
    pub fn new() -> Result<Self> {
        // NVLink multicast (NVLS) buys nothing for the lab's small sums, and on a shared host a
        // program using it can take the GPUs out of service: off unless the user says otherwise.
        // Set before any rank's thread starts.
        // Connections made when a rank joins (NCCL otherwise connects each algorithm at its first
        // use): all of NCCL's buffers exist once the group is formed, where the lab measures them.
        // No registration of buffers a CUDA graph captured: a rank's captured step sums into
        // buffers the graph allocates and frees around each sum (a decode step's few KB go
        // through NCCL's own buffers either way).
        for (var, value) in [("NCCL_NVLS_ENABLE", "0"), ("NCCL_RUNTIME_CONNECT", "0"), ("NCCL_GRAPH_REGISTER", "0")] {
            if std::env::var_os(var).is_none() {
                std::env::set_var(var, value);
            }
        }
        let id = Id::new()
            .map_err(|e| LabError::other(format!("NCCL: no unique id ({e:?}): is libnccl.so.2 on LD_LIBRARY_PATH?")))?;
        Ok(Self(*id.internal()))
    }
}

/// One rank's communicator.
pub struct NcclComm {
    comm: Comm,
    peer: PeerBlock,
}

// A rank's communicator is made and used by that rank's thread only; the trait asks Send + Sync
// because the model's layers hold it behind an Arc.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

impl NcclComm {
    /// Joins the group as `rank` of `ranks` on `dev` (blocks until every rank has joined), with
    /// its block for the peer sum.
    pub fn join(dev: &CudaDevice, rank: usize, ranks: usize, id: GroupId, peers: &Arc<PeerExchange>) -> Result<Self> {
        let stream = dev.cuda_stream();
        // ncclCommInitRank joins on the thread's current device: cudarc does not make the rank's
        // context current here, and a fresh thread's default is GPU 0 (every rank on one GPU).
        stream.context().bind_to_thread().map_err(|e| LabError::other(format!("NCCL: rank {rank}: {e:?}")))?;
        let comm = Comm::from_rank(stream, rank, ranks, Id::uninit(id.0))
            .map_err(|e| LabError::other(format!("NCCL: rank {rank} of {ranks} could not join ({e:?})")))?;
        // One sum through NCCL itself: its connections and buffers are made at the first
        // collective, which would otherwise wait for the first sum too large for the peer kernel
        // (a prefill's) and land outside the memory measured at joining (186 MiB a GPU of two
        // H200s, data/results/h200x2/2026-11-28-peer-sum).
        let warm = |e: &dyn std::fmt::Debug| LabError::other(format!("NCCL: rank {rank}: first sum: {e:?}"));
        let src = dev.alloc_zeros::<f32>(256).map_err(|e| warm(&e))?;
        let mut dst = dev.alloc_zeros::<f32>(256).map_err(|e| warm(&e))?;
        comm.all_reduce(&src, &mut dst, &ReduceOp::Sum).map_err(|e| warm(&e))?;
        let peer = peers.join(dev, rank)?;
        Ok(Self { comm, peer })
    }

    /// The peer kernel's sum (+ `res`) where it takes the tensors, else None.
    fn peer_sum(&self, x: &Tensor, res: Option<&Tensor>) -> Result<Option<Tensor>> {
        match (self.peer.slot, x.device()) {
            (Some(slot), candle_core::Device::Cuda(dev)) => peer_sum::sum(dev, slot, x, res),
            _ => Ok(None),
        }
    }
}

impl AllReduce for NcclComm {
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    fn ranks(&self) -> usize {
        self.comm.world_size()
    }

    fn all_reduce_sum(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        match self.peer_sum(&x, None)? {
            Some(y) => Ok(y),
            None => Ok(x.apply_op1_no_bwd(self)?),
        }
    }

    fn all_reduce_sum_add(&self, x: &Tensor, res: Option<&Tensor>) -> Result<Tensor> {
        let x = x.contiguous()?;
        if let Some(y) = self.peer_sum(&x, res)? {
            return Ok(y);
        }
        crate::model::layers::comm::plus(x.apply_op1_no_bwd(self)?, res)
    }

    fn route(&self) -> &'static str {
        if self.peer.slot.is_some() {
            "one kernel over peer memory up to 1,020 KiB a sum (a decoding step's), NCCL beyond"
        } else {
            "NCCL (these GPUs do not reach each other's memory, or VRAM_LAB_PEER_SUM=0)"
        }
    }

    fn healthy(&self) -> Result<()> {
        self.peer.failed()
    }

    /// NCCL's collectives can be captured in a CUDA graph since 2.9 (NCCL's user guide, "Using
    /// NCCL with CUDA Graphs"); the output is allocated stream-ordered, which a graph records too.
    fn capturable(&self) -> bool {
        true
    }
}

impl CustomOp1 for NcclComm {
    fn name(&self) -> &'static str {
        "nccl-all-reduce-sum"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("NCCL sums tensors on GPUs only")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let n = l.shape().elem_count();
        let Some((start, end)) = l.contiguous_offsets() else {
            candle_core::bail!("all-reduce of a non-contiguous tensor")
        };
        let dev = s.device().clone();
        macro_rules! sum {
            ($t:ty) => {{
                let src = s.as_cuda_slice::<$t>()?.slice(start..end);
                // Safety: every element is written by the all-reduce before it is read.
                let mut dst = unsafe { dev.alloc::<$t>(n) }?;
                self.comm
                    .all_reduce(&src, &mut dst, &ReduceOp::Sum)
                    .map_err(|e| candle_core::Error::Msg(format!("NCCL all-reduce: {e:?}")))?;
                CudaStorage::wrap_cuda_slice(dst, dev)
            }};
        }
        let out = match s.dtype() {
            DType::BF16 => sum!(bf16),
            DType::F16 => sum!(f16),
            DType::F32 => sum!(f32),
            d => candle_core::bail!("NCCL all-reduce of {d:?}"),
        };
        Ok((out, l.shape().clone()))
    }
}
