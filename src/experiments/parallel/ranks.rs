//! One rank of a tensor-parallel group, run on its own thread: join the group, load the rank's
//! shard, generate, and read the rank's device at each step. The ranks wait for each other after
//! joining and after loading, so a rank that fails stops the others before they block in an
//! all-reduce it will never join.

use crate::error::{LabError, Result};
use crate::hw::Card;
use crate::memory::{guarded, MemoryProbe};
use crate::model::parallel::{load_rank, Group};
use crate::model::source::{self, ModelSource, SourceOptions};
use crate::model::{generate, DecoderConfig, GenerateConfig, Precision};
use candle_core::{Device, Tensor};

/// What one rank measured, bytes (None where its device cannot tell: the CPU's ranks share one heap).
#[derive(Debug, Clone, Default)]
pub struct RankRun {
    pub rank: usize,
    pub device: String,
    /// Device memory NCCL took when the rank joined and summed its first tensor (outside candle's pool).
    pub nccl: Option<u64>,
    pub weights: u64,
    /// The loading's peak above what was held before it: the shard and one whole tensor.
    pub load_peak: Option<u64>,
    /// Generation's peak above the weights: the KV cache, the prefill's transient and the logits.
    pub peak_above_weights: Option<u64>,
    pub kv_cache: u64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Decode with every sum skipped (wrong tokens, the step's own work): the profile of where
    /// the step's time goes. GPUs whose step is one captured graph only.
    pub decode_tok_s_without_sums: Option<f64>,
    pub tokens: Vec<u32>,
    /// How the rank's sums travelled (`AllReduce::route`).
    pub route: &'static str,
}

/// What every layout runs (the ranks of a group, a pipeline's stages): the model and the prompt.
pub struct Request<'a> {
    pub cfg: &'a DecoderConfig,
    pub precision: Precision,
    pub source: &'a ModelSource,
    pub opts: &'a SourceOptions,
    pub prompt: &'a [u32],
    pub gen: GenerateConfig,
}

/// What every rank shares: the request (model, prompt), where the ranks meet, and the card each
/// rank emulates (empty: every rank its whole device).
pub struct RankPlan<'a> {
    pub req: Request<'a>,
    pub group: Group,
    pub cards: Vec<Card>,
}

/// Rank `rank` of `plan.group` on `device`.
pub fn run_rank(plan: &RankPlan, rank: usize, device: Device) -> Result<RankRun> {
    let mut probe = MemoryProbe::new(&device);
    let cuda = device.is_cuda();
    probe.warm_up()?;
    let base = probe.settled("")?;
    let mut comm = None;
    plan.group.meet.settle(
        "joining the group",
        (|| {
            let c = plan.group.join(rank, &device)?;
            // The first sum sets up NCCL's connections and buffers.
            c.all_reduce_sum(&Tensor::zeros(plan.req.cfg.hidden_size, plan.req.precision.act_dtype(), &device)?)?;
            comm = Some(c);
            Ok(())
        })(),
    )?;
    let comm = comm.ok_or_else(|| LabError::other("no communicator"))?;
    let comm_health = comm.clone();
    // The card counts what the process already holds on the device (context, NCCL), as a real one
    // would; the CPU's ranks share one heap, where a card per rank is not held.
    let card = plan.cards.get(rank).filter(|_| cuda).map(|c| probe.emulate(c).map(|_| ()));
    plan.group.meet.settle("emulating the cards", card.unwrap_or(Ok(())))?;
    let joined = probe.settled("")?;
    let nccl = joined.outside_pool_since(&base).filter(|_| cuda);
    probe.reset_peak();
    let mut model = None;
    plan.group.meet.settle(
        "loading",
        guarded(&probe, "loading the shard", || {
            let mut weights = source::open(plan.req.source, plan.req.opts)?.weights;
            model = Some(load_rank(plan.req.cfg, plan.req.precision, weights.as_mut(), &device, comm, Some(&probe))?);
            Ok(())
        }),
    )?;
    let model = model.ok_or_else(|| LabError::other("no model"))?;
    let loaded = probe.settled("")?;
    if cuda {
        // Untimed first, as one device's run: the driver compiles each kernel module for a GPU at
        // its first use, which had put 19 s into a rank's timed prefill (7B F32 over two: 8.3 tok/s
        // in a fresh process, 322 in the next; data/results/h200x2/2026-11-28-tp-prefill-jit).
        plan.group.meet.settle("warming up", crate::model::generate::warmup(&model, plan.req.prompt))?;
    }
    probe.reset_peak();
    let g = guarded(&probe, "generating", || generate(&model, plan.req.prompt, &plan.req.gen))?;
    comm_health.healthy()?;
    let done = probe.settled("")?;
    let mut without_sums = None;
    if cuda && model.sums_capturable() {
        let skipped = model.skip_sums();
        plan.group.meet.settle("timing the step without its sums", Ok(()))?;
        let g = plan
            .group
            .meet
            .settle("timing the step without its sums", generate(&model, plan.req.prompt, &plan.req.gen))?;
        drop(skipped);
        without_sums = Some(g.decode_tok_s());
    }
    Ok(RankRun {
        rank,
        device: crate::hw::describe_as(&device, plan.cards.get(rank)),
        nccl,
        weights: if cuda { loaded.allocated.saturating_sub(joined.allocated) } else { model.weight_bytes() },
        load_peak: cuda.then(|| loaded.peak.saturating_sub(joined.allocated)),
        peak_above_weights: cuda.then(|| done.peak.saturating_sub(loaded.allocated)),
        kv_cache: g.kv_cache_bytes,
        prefill_tok_s: g.prefill_tok_s(),
        decode_tok_s: g.decode_tok_s(),
        decode_tok_s_without_sums: without_sums,
        tokens: g.generated_ids,
        route: comm_health.route(),
    })
}
