//! Tensor parallelism of a dense decoder over N ranks (Megatron's split): which rows and columns
//! of each weight a rank holds (`shard`), and the sum that joins the ranks' partial outputs
//! (`model::layers::comm`: threads of one process on any device; NCCL across GPUs, `nccl`, with the small
//! sums of a decoding step through the GPUs' peer memory, `peer`). Data-parallel
//! training with ZeRO's sharded states and gradients: `data`. A rank is an ordinary `Decoder`
//! built from its shard whose o and down are row-parallel linear layers (`Decoder::into_rank`):
//! they sum the attention's and the MLP's outputs across ranks before each residual.

pub mod data;
pub mod group;
#[cfg(feature = "nccl")]
pub mod nccl;
#[cfg(feature = "nccl")]
pub mod peer;
pub mod pipeline;
pub mod shard;

pub use crate::model::layers::comm::{AllReduce, Rendezvous, ThreadComm};
pub use group::Group;
pub use shard::{rank_ledger, shard_config, shard_tensor, shard_weights, RankLedger};

use crate::error::Result;
use crate::memory::MemoryProbe;
use crate::model::load::weights::{Weight, WeightSource};
use crate::model::{Decoder, DecoderConfig, Precision};
use candle_core::Device;
use std::collections::HashMap;
use std::sync::Arc;

/// The model of rank `comm.rank()`: its shard of the whole model's weights, on `device`.
pub fn rank_model(
    cfg: &DecoderConfig,
    precision: Precision,
    weights: HashMap<String, Weight>,
    device: &Device,
    comm: Arc<dyn AllReduce>,
) -> Result<Decoder> {
    let rank_cfg = shard_config(cfg, comm.ranks())?;
    let w = shard_weights(weights, cfg, comm.rank(), comm.ranks())?;
    Decoder::new(&rank_cfg, precision, w, device)?.into_rank(comm)
}

/// Rank `comm.rank()`'s model read from `source` tensor by tensor, each cut to the rank's part as
/// it arrives (synthetic weights draw the part alone): a rank never holds more than its shard and
/// one whole tensor, so a model loads on GPUs that could not hold it whole. An OOM is captured by `probe` (the rank's device).
pub fn load_rank(
    cfg: &DecoderConfig,
    precision: Precision,
    source: &mut dyn WeightSource,
    device: &Device,
    comm: Arc<dyn AllReduce>,
    probe: Option<&MemoryProbe>,
) -> Result<Decoder> {
    let (rank, ranks) = (comm.rank(), comm.ranks());
    let rank_cfg = shard_config(cfg, ranks)?;
    let mut w = HashMap::new();
    for spec in cfg.tensor_specs() {
        let part = source.load_part(&spec, precision, device, shard::slice_of(&spec.name, cfg, rank, ranks));
        match part {
            Ok(p) => w.insert(spec.name.clone(), p),
            Err(e) => {
                return Err(MemoryProbe::capture_in(
                    probe,
                    e,
                    &format!("loading {} (rank {rank} of {ranks})", spec.name),
                ))
            }
        };
    }
    Decoder::new(&rank_cfg, precision, w, device)?.into_rank(comm)
}
