//! Tensor parallelism of Qwen2 over N ranks (Megatron's split): which rows and columns of each
//! weight a rank holds (`shard`), and the sum that joins the ranks' partial outputs (`comm`:
//! threads of one process on any device, NCCL across GPUs). A rank is an ordinary `Qwen2` built
//! from its shard with a communicator: its layers sum the attention and MLP outputs across ranks
//! before each residual.

pub mod comm;
pub mod shard;

pub use comm::{AllReduce, ThreadComm};
pub use shard::{rank_ledger, shard_config, shard_weights, RankLedger};

use crate::error::Result;
use crate::model::weights::Weight;
use crate::model::{Precision, Qwen2, Qwen2Config};
use candle_core::Device;
use std::collections::HashMap;
use std::sync::Arc;

/// The model of rank `comm.rank()`: its shard of the whole model's weights, on `device`.
pub fn rank_model(cfg: &Qwen2Config, precision: Precision, weights: HashMap<String, Weight>, device: &Device, comm: Arc<dyn AllReduce>) -> Result<Qwen2> {
    let rank_cfg = shard_config(cfg, comm.ranks())?;
    let w = shard_weights(weights, cfg, comm.rank(), comm.ranks())?;
    Ok(Qwen2::new(&rank_cfg, precision, w, device)?.into_rank(comm))
}
