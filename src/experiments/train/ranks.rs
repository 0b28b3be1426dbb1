//! The training step on several ranks, data-parallel (`model::parallel::data`): a thread per GPU
//! (per CPU rank), each with the whole model and its own micro-batch, the gradients averaged across
//! the group, ZeRO's stages sharding the AdamW moments (1) and the gradients kept (2). Every rank
//! reads its own device: weights, states, the gradients it keeps and the step's peak.

use crate::error::{LabError, Result};
use crate::experiments::kv::random_ids;
use crate::memory::{guarded, MemoryProbe};
use crate::model::optim::ParamsAdamW;
use crate::model::parallel::data::DataParallel;
use crate::model::parallel::{group, Group};
use crate::model::source::{self, ModelSource, SourceOptions};
use crate::model::weights::load_all;
use crate::model::{train, Precision, Qwen2, Qwen2Config};
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
}

pub struct Setup<'a> {
    pub cfg: &'a Qwen2Config,
    pub source: &'a ModelSource,
    pub opts: &'a SourceOptions,
    pub batch: usize,
    pub seq: usize,
    pub checkpoint: bool,
    pub zero: u8,
    pub steps: usize,
}

fn held(probe: &MemoryProbe, device: &Device) -> Result<u64> {
    device.synchronize()?;
    Ok(probe.snapshot("").allocated)
}

fn run_rank(s: &Setup, g: &Group, rank: usize, device: Device) -> Result<RankStep> {
    let probe = MemoryProbe::new(&device);
    let cuda = device.is_cuda();
    let comm = g.meet.settle("joining the group", g.join(rank, &device))?;
    let base = held(&probe, &device)?;
    let model = g.meet.settle(
        "loading",
        guarded(&probe, "loading", || {
            let mut weights = source::open(s.source, s.opts)?.weights;
            let w = load_all(s.cfg, weights.as_mut(), Precision::F32, &device, Some(&probe), |_, _| Ok(()))?;
            train::trainable(Qwen2::new(s.cfg, Precision::F32, w, &device)?)
        }),
    )?;
    let vars = model.vars()?;
    let var_bytes: u64 = vars.iter().map(|v| v.elem_count() as u64 * 4).sum();
    let weights = if cuda { held(&probe, &device)? - base } else { var_bytes };
    let mut dp = g.meet.settle("making the optimizer", DataParallel::new(vars, ParamsAdamW { lr: 1e-5, ..Default::default() }, s.zero, comm))?;
    let states = if cuda { held(&probe, &device)? - base - weights } else { dp.state_elems() as u64 * 8 };
    let mut out = RankStep { rank, device: crate::hw::describe(&device), weights, states, ..Default::default() };
    for step in 0..s.steps {
        // Each rank its own sequences (the seed by rank), as a sampler gives each its share.
        let ids = random_ids(s.batch, s.seq + 1, s.cfg.vocab_size, 11 + (step * 1000 + rank) as u64, &device)?;
        let (input, target) = train::shift(&ids)?;
        drop(ids);
        let before = held(&probe, &device)?;
        probe.reset_peak();
        let r = guarded(&probe, "training step", || {
            let grads = train::gradients(&model, &input, &target, s.checkpoint, &mut || ())?;
            let kept = dp.step(grads.grads)?;
            device.synchronize()?;
            Ok((grads.loss, kept, probe.snapshot("step").peak))
        });
        let (loss, kept, peak) = g.meet.settle("training", r)?;
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
    Ok(std::thread::scope(|scope| {
        let hs: Vec<_> = devs.into_iter().enumerate().map(|(rank, dev)| {
            let g = &g;
            scope.spawn(move || run_rank(s, g, rank, dev))
        }).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(LabError::other("a rank's thread panicked")))).collect()
    }))
}
