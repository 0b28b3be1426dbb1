//! A group of ranks on one host, one thread each: their devices (the first device and the ones
//! after it, or the CPU for every rank), how each joins (NCCL on GPUs, shared slots on the CPU)
//! and where they meet between phases.

use crate::error::{LabError, Result};
use crate::model::layers::comm::{AllReduce, Rendezvous, ThreadComm};
use candle_core::Device;
use std::sync::Arc;

#[cfg(feature = "nccl")]
type NcclId = crate::model::parallel::nccl::GroupId;
#[cfg(not(feature = "nccl"))]
type NcclId = ();

pub struct Group {
    threads: Vec<ThreadComm>,
    #[allow(dead_code)]
    nccl: Option<NcclId>,
    #[cfg(feature = "nccl")]
    peers: Arc<super::peer::PeerExchange>,
    pub meet: Rendezvous,
}

impl Group {
    /// A group of `ranks`; on several GPUs (`cuda`) joined by NCCL, which needs a build with
    /// `nccl`. A group of one has nothing to exchange: no NCCL, whose communicator alone would
    /// take about 1 GB of the GPU (1,004 MiB on an H100, data/results/h100/2026-11-26-run).
    pub fn new(ranks: usize, cuda: bool) -> Result<Self> {
        #[cfg(feature = "nccl")]
        let nccl = if cuda && ranks > 1 { Some(super::nccl::GroupId::new()?) } else { None };
        #[cfg(not(feature = "nccl"))]
        let nccl = {
            if cuda && ranks > 1 {
                return Err(LabError::Unsupported(
                    "this build has no NCCL: rebuild with `--features nccl` to run on several GPUs".into(),
                ));
            }
            None
        };
        Ok(Self {
            threads: ThreadComm::group(ranks),
            nccl,
            #[cfg(feature = "nccl")]
            peers: Arc::new(super::peer::PeerExchange::new(ranks)),
            meet: Rendezvous::new(ranks),
        })
    }

    pub fn ranks(&self) -> usize {
        self.threads.len()
    }

    /// Rank `rank`'s communicator on `device` (NCCL: blocks until every rank has joined).
    pub fn join(&self, rank: usize, device: &Device) -> Result<Arc<dyn AllReduce>> {
        match device {
            #[cfg(feature = "nccl")]
            Device::Cuda(dev) if self.ranks() > 1 => {
                let id = self.nccl.ok_or_else(|| LabError::other("no NCCL id"))?;
                Ok(Arc::new(super::nccl::NcclComm::join(dev, rank, self.ranks(), id, &self.peers)?))
            }
            _ => Ok(Arc::new(self.threads[rank].clone())),
        }
    }
}

/// `rank(i, device)` for every device on a thread of its own, joined in rank order; a rank whose
/// thread panicked is an error.
pub fn on_each<T: Send>(devices: Vec<Device>, rank: impl Fn(usize, Device) -> Result<T> + Sync) -> Vec<Result<T>> {
    std::thread::scope(|scope| {
        let rank = &rank;
        let hs: Vec<_> = devices.into_iter().enumerate().map(|(i, dev)| scope.spawn(move || rank(i, dev))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(LabError::other("a rank's thread panicked")))).collect()
    })
}

/// The devices of `ranks` ranks: `first` and the GPUs after it, or the CPU for each.
pub fn devices(first: &Device, ranks: usize) -> Result<Vec<Device>> {
    match first {
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => {
            let at = crate::hw::gpu_ordinal(dev);
            let mut out = vec![first.clone()];
            for r in 1..ranks {
                out.push(
                    crate::hw::pick(&format!("cuda:{}", at + r))
                        .map_err(|e| LabError::Unsupported(format!("{ranks} GPUs asked, from cuda:{at}: {e}")))?,
                );
            }
            Ok(out)
        }
        _ => Ok(vec![Device::Cpu; ranks]),
    }
}
