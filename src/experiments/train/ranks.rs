//! The training step on several ranks, data-parallel (`model::parallel::data`): a thread per GPU
//! (per CPU rank), each with the whole model and its own micro-batch, the gradients averaged across
//! the group, ZeRO's stages sharding the AdamW moments (1) and the gradients kept (2). Every rank
//! reads its own device: weights, states, the gradients it keeps and the step's peak.

use crate::error::{LabError, Result};
use crate::experiments::kv::random_ids;
use crate::hw::Card;
use crate::memory::{guarded, MemoryProbe};
use crate::model::load::weights::load_all;
use crate::model::parallel::data::DataParallel;
use crate::model::parallel::{group, Group};
use crate::model::source::{self, ModelSource, SourceOptions};
use crate::model::train::optim::ParamsAdamW;
use crate::model::{train, Decoder, DecoderConfig, Precision};
use candle_core::Device;

/// What one rank held, bytes (CPU ranks share one heap: their tensors' bytes, and no peak).
#[derive(Debug, Clone, Default)]
pub struct RankStep {
    pub rank: usize,
    pub device: String,
    pub weights: u64,
    pub states: u64,
    /// The gradients held after the step (ZeRO-2: this rank's share).
    pub gradients: u64,
    /// The step's peak above weights and states (forward, backward, exchange, update).
    pub peak_above_states: Option<u64>,
    pub loss: f32,
    /// This rank's micro-batch (sequences).
    pub batch: usize,
    /// Device memory NCCL took when the rank joined (outside candle's pool; None off a GPU).
    pub nccl: Option<u64>,
}

pub struct Setup<'a> {
    pub cfg: &'a DecoderConfig,
    pub source: &'a ModelSource,
    pub opts: &'a SourceOptions,
    /// Each rank's micro-batch (sequences), in rank order; None: each rank plans its own from
    /// what its card has free once the group is formed (`estimate::parallel::micro_batch`).
    pub batches: Option<Vec<usize>>,
    pub seq: usize,
    pub checkpoint: bool,
    pub zero: u8,
    pub steps: usize,
    /// The card each rank emulates (empty: every rank its whole device).
    pub cards: Vec<Card>,
}

/// The largest micro-batch whose step (weights, states and the step's peak, the lab's formula)
/// fits what the rank's card has free now, as a planner asks each card (CUDA: cuMemGetInfo,
/// NCCL's buffers and the context already taken; the CPU: the whole card).
fn plan_batch(s: &Setup, probe: &MemoryProbe, rank: usize) -> Result<usize> {
    let free = match (probe.device().is_cuda(), s.cards.get(rank)) {
        (true, _) => probe.snapshot("plan").device_free,
        (false, card) => card.map(|c| c.total_bytes()),
    };
    let free = free.ok_or_else(|| LabError::input("planning micro-batches needs a card (--cards) or a GPU"))?;
    match crate::estimate::parallel::micro_batch(s.cfg, s.seq, s.checkpoint, free, 0) {
        0 => Err(LabError::input(format!(
            "{} free cannot train one sequence of {} tokens of this model",
            crate::units::fmt_bytes(free),
            s.seq
        ))),
        b => Ok(b),
    }
}

fn run_rank(s: &Setup, g: &Group, rank: usize, device: Device) -> Result<RankStep> {
    let mut probe = MemoryProbe::new(&device);
    let cuda = device.is_cuda();
    probe.warm_up()?;
    let unjoined = probe.settled("")?;
    let comm = g.meet.settle(
        "joining the group",
        g.join(rank, &device).and_then(|c| {
            c.all_reduce_sum(&candle_core::Tensor::zeros(1, candle_core::DType::F32, &device)?)?;
            Ok(c)
        }),
    )?;
    let nccl = probe.settled("")?.outside_pool_since(&unjoined).filter(|_| cuda);
    // The card counts what the process already holds on the device (context, NCCL), as a real one
    // would. The CPU's ranks share one heap and its one cap: a card per rank is planned, not held.
    let card = s.cards.get(rank).filter(|_| cuda).map(|c| probe.emulate(c).map(|_| ()));
    g.meet.settle("emulating the cards", card.unwrap_or(Ok(())))?;
    let base = probe.settled("")?.allocated;
    let batch = match &s.batches {
        Some(b) => b.get(rank).copied().ok_or_else(|| LabError::input(format!("no micro-batch given for rank {rank}"))),
        None => plan_batch(s, &probe, rank),
    };
    let batch = g.meet.settle("planning the micro-batches", batch)?;
    let model = g.meet.settle(
        "loading",
        guarded(&probe, "loading", || {
            let mut weights = source::open(s.source, s.opts)?.weights;
            let w = load_all(s.cfg, weights.as_mut(), Precision::F32, &device, Some(&probe), |_, _| Ok(()))?;
            train::trainable(Decoder::new(s.cfg, Precision::F32, w, &device)?)
        }),
    )?;
    let vars = model.vars()?;
    let var_bytes: u64 = vars.iter().map(|v| v.elem_count() as u64 * 4).sum();
    let weights = if cuda { probe.settled("")?.allocated - base } else { var_bytes };
    let mut dp = g.meet.settle(
        "making the optimizer",
        DataParallel::new(vars, ParamsAdamW { lr: 1e-5, ..Default::default() }, s.zero, comm),
    )?;
    let states = if cuda { probe.settled("")?.allocated - base - weights } else { dp.state_elems() as u64 * 8 };
    let device_name = crate::hw::describe_as(&device, s.cards.get(rank));
    let mut out = RankStep { rank, device: device_name, weights, states, batch, nccl, ..Default::default() };
    for step in 0..s.steps {
        // Each rank its own sequences (the seed by rank), as a sampler gives each its share.
        let ids = random_ids(batch, s.seq + 1, s.cfg.vocab_size, 11 + (step * 1000 + rank) as u64, &device)?;
        let (input, target) = train::shift(&ids)?;
        drop(ids);
        let before = probe.settled("")?.allocated;
        probe.reset_peak();
        // Two phases, the ranks meeting between them: a rank whose backward ran out of memory
        // stops the others before they block in an exchange it will never join.
        let grads = guarded(&probe, "forward and backward", || {
            train::gradients(&model, &input, &target, s.checkpoint, &mut || ())
        });
        let grads = g.meet.settle("the forward and backward", grads)?;
        let r = guarded(&probe, "exchange and update", || {
            let kept = dp.step(grads.grads)?;
            device.synchronize()?;
            Ok((kept, probe.snapshot("step").peak))
        });
        let (kept, peak) = g.meet.settle("the exchange and update", r)?;
        let loss = grads.loss;
        out.loss = loss;
        out.gradients = kept;
        out.peak_above_states = cuda.then(|| peak.saturating_sub(before));
    }
    Ok(out)
}

/// Every rank's step, in rank order; a rank that failed is its error.
pub fn run_group(s: &Setup, first: &Device, ranks: usize) -> Result<Vec<Result<RankStep>>> {
    let devs = group::devices(first, ranks)?;
    let g = Group::new(ranks, first.is_cuda())?;
    Ok(group::on_each(devs, |rank, dev| run_rank(s, &g, rank, dev)))
}
