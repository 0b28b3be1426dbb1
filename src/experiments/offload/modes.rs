//! Each mode run and measured: the model placed (or its weights in managed memory) within the
//! budget, decoded, its memory and speed in one row.

use super::config::{Mode, OffloadConfig};
use crate::error::{LabError, Result};
use crate::memory::{fmt_bytes, Snapshot};
use crate::model::offload::placement::{Bandwidths, Home, PartBytes, Placement, Strategy};
use crate::model::{self, generate, Decoder, GenerateConfig};
use crate::session::Session;
use crate::stage::Outcome;
use rand::{Rng, SeedableRng};

/// One mode's result.
#[derive(Debug, Clone, Default)]
pub struct ModeRow {
    pub mode: String,
    pub run_by: String,
    pub outcome: Outcome,
    pub placement: Option<Placement>,
    pub budget: Option<u64>,
    pub predicted_gpu: Option<u64>,
    pub loaded: Option<Snapshot>,
    pub after: Option<Snapshot>,
    /// Device memory in use beyond what it was before the mode (managed pages included).
    pub device_used: Option<u64>,
    pub host_bytes: Option<u64>,
    pub first_pass_s: Option<f64>,
    pub tok_s: Option<f64>,
    pub pcie_per_token: Option<u64>,
    pub host_per_token: Option<u64>,
    pub ceiling: Option<f64>,
    /// What sets the ceiling (placed modes).
    pub bound: Option<String>,
    /// Per decode step: wall time in CPU layers, in their matrix-vector products and in
    /// CPU↔GPU crossings.
    pub profile: Option<model::offload::profile::StepProfile>,
    pub note: String,
}

fn prompt_ids(vocab: usize, n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..vocab as u32)).collect()
}

impl ModeRow {
    /// The row of a mode whose run ended with `result`: an OOM or another error is the row's
    /// outcome (the next mode still runs); only Ctrl-C stops the stage.
    fn settle(mut self, result: Result<()>) -> Result<ModeRow> {
        match result {
            Err(LabError::Interrupted) => Err(LabError::Interrupted),
            Err(e) => {
                self.outcome = Outcome::from_error(&e);
                self.note = e.to_string();
                Ok(self)
            }
            Ok(()) => Ok(self),
        }
    }
}

/// Measures decode speed and memory of a built model; `before` is the snapshot taken before the
/// mode loaded anything (device memory used beyond it includes managed pages).
fn generate_in(
    s: &mut Session,
    model: &Decoder,
    cfg: &OffloadConfig,
    row: &mut ModeRow,
    before: &Snapshot,
) -> Result<()> {
    row.loaded = Some(s.probe.snapshot(&format!("{}: loaded", row.mode)));
    let prompt = prompt_ids(model.cfg.vocab_size, cfg.prompt, s.opts.seed);
    let gen_cfg = GenerateConfig { max_new_tokens: cfg.new_tokens, stop_at_eos: false, ..Default::default() };
    s.console.step(format!("{}: generating {} tokens", row.mode, cfg.new_tokens));
    let g = crate::memory::guarded(&s.probe, &format!("generating ({})", row.mode), || {
        // The first pass is timed apart: managed memory migrates there.
        let t = std::time::Instant::now();
        model::generate::warmup(model, &prompt)?;
        row.first_pass_s = Some(t.elapsed().as_secs_f64());
        model::offload::profile::take();
        generate(model, &prompt, &gen_cfg)
    })?;
    row.profile = Some(model::offload::profile::take());
    row.tok_s = Some(g.decode_tok_s());
    let after = s.probe.snapshot(&format!("{}: after generating", row.mode));
    row.device_used = after.device_used.zip(before.device_used).map(|(a, b)| a.saturating_sub(b));
    row.after = Some(after);
    Ok(())
}

pub fn run_placed(
    s: &mut Session,
    cfg: &OffloadConfig,
    strategy: Strategy,
    bw: &Bandwidths,
    budget: u64,
) -> Result<ModeRow> {
    let mut row = ModeRow { mode: strategy.name().into(), run_by: "vram-lab".into(), ..Default::default() };
    let mut opened = model::load::source::open(&s.source, &s.opts)?;
    let mcfg = opened.cfg.clone();
    let parts = PartBytes::new(&mcfg, cfg.precision.act_dtype().size_in_bytes());
    let reserve = (cfg.reserve_mib * crate::memory::MIB) as u64;
    let placement = Placement::for_budget(strategy, &parts, budget, reserve, Some(bw))?;
    row.budget = (strategy != Strategy::Full).then_some(budget);
    row.predicted_gpu = Some(placement.gpu_bytes(&parts));
    row.host_bytes = Some(placement.host_bytes(&parts));
    let traffic = placement.traffic(&parts);
    row.pcie_per_token = Some(traffic.pcie);
    row.host_per_token = Some(traffic.host);
    row.ceiling = Some(placement.ceiling_tok_s(&parts, bw));
    row.bound = Some(placement.bound(&parts, bw));
    row.placement = Some(placement.clone());
    s.probe.empty_cache();
    s.probe.reset_peak();
    let before = s.probe.snapshot("before");
    s.say(format!(
        "\n{}: {} layers on the GPU, {} on the CPU, {} streamed through {} buffers; model on the GPU {} (predicted)",
        strategy.name(),
        placement.count(Home::Gpu),
        placement.count(Home::Cpu),
        placement.count(Home::Streamed),
        placement.slots,
        fmt_bytes(placement.gpu_bytes(&parts))
    ));
    let result = (|| -> Result<()> {
        let device = s.device.clone();
        let weights = crate::memory::guarded(&s.probe, "loading the placed weights", || {
            model::load::weights::load_placed(
                &mcfg,
                opened.weights.as_mut(),
                cfg.precision,
                &device,
                |n| placement.device_of(n, &device),
                Some(&s.probe),
                |_, _| s.probe.check(),
            )
        })?;
        let model = crate::memory::guarded(&s.probe, "placing the model", || {
            Decoder::new_placed(&mcfg, cfg.precision, weights, &device, &placement)
        })?;
        generate_in(s, &model, cfg, &mut row, &before)
    })();
    row.settle(result)
}

#[cfg(feature = "cuda")]
pub fn run_managed(s: &mut Session, cfg: &OffloadConfig, mode: Mode, bw: &Bandwidths) -> Result<ModeRow> {
    use crate::memory::unified::{Advice, Managed};
    let mut row = ModeRow { mode: mode.name().into(), run_by: "vram-lab".into(), ..Default::default() };
    let dev = match &s.device {
        candle_core::Device::Cuda(d) => d.clone(),
        _ => return Err(LabError::Unsupported("unified memory needs a CUDA GPU".into())),
    };
    let mut opened = model::load::source::open(&s.source, &s.opts)?;
    let mcfg = opened.cfg.clone();
    let weight_bytes = crate::estimate::weight_bytes(&mcfg, cfg.precision);
    row.host_bytes = Some(weight_bytes);
    let prefer_cpu = mode == Mode::ManagedPreferCpu;
    row.pcie_per_token = Some(if prefer_cpu { weight_bytes } else { 0 });
    row.ceiling = Some(if prefer_cpu {
        crate::estimate::decode_ceiling_tok_s(bw.pcie, weight_bytes)
    } else {
        crate::estimate::decode_ceiling_tok_s(bw.device, weight_bytes)
    });
    s.probe.empty_cache();
    s.probe.reset_peak();
    let before = s.probe.snapshot("before");
    s.say(format!("\n{}: {} of weights in CUDA managed memory", mode.name(), fmt_bytes(weight_bytes)));
    let result = (|| -> Result<()> {
        let device = s.device.clone();
        // Made on the GPU (fast), kept in host memory, then written into the managed block.
        let host = crate::memory::guarded(&s.probe, "loading the weights to host memory", || {
            model::load::weights::load_placed(
                &mcfg,
                opened.weights.as_mut(),
                cfg.precision,
                &device,
                |_| candle_core::Device::Cpu,
                Some(&s.probe),
                |_, _| Ok(()),
            )
        })?;
        let align = |n: usize| n.div_ceil(256) * 256;
        let total: usize = host.values().map(|w| align(w.bytes() as usize)).sum();
        let mut block = Managed::alloc(&dev, total, cfg.oversubscribe)?;
        let mut on_block = std::collections::HashMap::new();
        let mut at = 0;
        for (name, w) in host {
            let t = w.dense()?;
            let n = crate::memory::cuda_copy::with_host_bytes(&t, |b| block.write(at, b).map(|_| b.len()))??;
            let mt = block.tensor(at, t.shape(), t.dtype())?;
            on_block.insert(name, model::load::weights::Weight::Dense(mt));
            at += align(n);
        }
        match mode {
            Mode::ManagedPreferCpu => block.advise(Advice::PreferCpu)?,
            Mode::ManagedReadMostly => block.advise(Advice::ReadMostly)?,
            Mode::ManagedPrefetch => block.prefetch_to_gpu()?,
            _ => {}
        }
        let model = Decoder::new(&mcfg, cfg.precision, on_block, &device)?;
        let measured = generate_in(s, &model, cfg, &mut row, &before);
        // The model's tensors before the block they live in.
        drop(model);
        drop(block);
        measured
    })();
    row.settle(result)
}

#[cfg(not(feature = "cuda"))]
pub fn run_managed(_s: &mut Session, _cfg: &OffloadConfig, mode: Mode, _bw: &Bandwidths) -> Result<ModeRow> {
    Ok(ModeRow {
        mode: mode.name().into(),
        run_by: "vram-lab".into(),
        outcome: Outcome::Error("unified memory needs a CUDA build on a GPU".into()),
        note: "unified memory needs a CUDA build on a GPU".into(),
        ..Default::default()
    })
}
