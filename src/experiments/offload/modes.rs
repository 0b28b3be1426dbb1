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
    pub profile: Option<model::profile::StepProfile>,
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
        model.take_profile();
        generate(model, &prompt, &gen_cfg)
    })?;
    row.profile = Some(model.take_profile());
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
    let mut opened = model::source::open(&s.source, &s.opts)?;
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

/// Where managed-split keeps each layer: split's placement for the budget, the layers it leaves
/// off the GPU read by GPU kernels through the managed mapping (shown as streamed: their bytes
/// cross PCIe every token, though no buffer copies them).
pub fn managed_split_placement(parts: &PartBytes, budget: u64, reserve: u64) -> Result<Placement> {
    let mut p = Placement::for_budget(Strategy::Split, parts, budget, reserve, None)?;
    p.layers.iter_mut().filter(|h| **h == Home::Cpu).for_each(|h| *h = Home::Streamed);
    Ok(p)
}

/// The fastest a managed-split token can be: GPU kernels read the resident bytes from device
/// memory and then the managed layers over PCIe, one after the other (nothing overlaps a read
/// through the mapping). The embedding's one row per token is left out.
pub fn managed_split_ceiling(p: &Placement, parts: &PartBytes, device_gbs: f64, pcie_gbs: f64) -> f64 {
    let remote = p.count(Home::Streamed) as u64 * parts.layer;
    let resident = p.gpu_bytes(parts);
    1.0 / (resident as f64 / (device_gbs * 1e9) + remote as f64 / (pcie_gbs * 1e9))
}

/// Why a managed mode runs with the card lifted: its block is larger than what the emulated card
/// has free (less the margin), so on the card it could only run by oversubscribing, which the
/// lab never does. On the whole GPU it is measured, and the card's figure is predicted from it
/// (`prediction`). `None` when it runs on the card (or no card is emulated).
#[cfg(feature = "cuda")]
pub fn whole_gpu_reason(
    s: &Session,
    cfg: &OffloadConfig,
    mode: Mode,
    model: &crate::model::DecoderConfig,
) -> Result<Option<String>> {
    let (Some(card), candle_core::Device::Cuda(dev)) = (s.card(), &s.device) else { return Ok(None) };
    if mode == Mode::ManagedSplit || cfg.oversubscribe {
        return Ok(None);
    }
    let block = crate::estimate::weight_bytes(model, cfg.precision);
    let (free, _) = crate::memory::cuda::mem_info(dev)?;
    Ok((block + crate::memory::unified::MARGIN > free).then(|| {
        format!(
            "{}: run on the whole GPU: its {} managed block is more than the emulated {} has free ({} less a {} margin); on the card it would oversubscribe, so the card's figure is predicted from this run",
            mode.name(),
            fmt_bytes(block),
            card.name,
            fmt_bytes(free),
            fmt_bytes(crate::memory::unified::MARGIN)
        )
    }))
}

#[cfg(not(feature = "cuda"))]
pub fn whole_gpu_reason(
    _s: &Session,
    _cfg: &OffloadConfig,
    _mode: Mode,
    _model: &crate::model::DecoderConfig,
) -> Result<Option<String>> {
    Ok(None)
}

#[cfg(feature = "cuda")]
pub fn run_managed(s: &mut Session, cfg: &OffloadConfig, mode: Mode, bw: &Bandwidths, budget: u64) -> Result<ModeRow> {
    use crate::memory::unified::{Advice, Managed};
    let mut row = ModeRow { mode: mode.name().into(), run_by: "vram-lab".into(), ..Default::default() };
    let dev = match &s.device {
        candle_core::Device::Cuda(d) => d.clone(),
        _ => return Err(LabError::Unsupported("unified memory needs a CUDA GPU".into())),
    };
    let mut opened = model::source::open(&s.source, &s.opts)?;
    let mcfg = opened.cfg.clone();
    let weight_bytes = crate::estimate::weight_bytes(&mcfg, cfg.precision);
    let parts = PartBytes::new(&mcfg, cfg.precision.act_dtype().size_in_bytes());
    // managed-split keeps split's GPU layers in device memory; every other mode manages it all.
    let split = match mode {
        Mode::ManagedSplit => {
            Some(managed_split_placement(&parts, budget, (cfg.reserve_mib * crate::memory::MIB) as u64)?)
        }
        _ => None,
    };
    // A tied embedding is the head, which stays on the GPU: only an untied table is managed.
    let embed_managed = if mcfg.tie_word_embeddings { 0 } else { parts.embed };
    let remote_layers = split.as_ref().map(|p| p.count(Home::Streamed) as u64 * parts.layer);
    let managed_bytes = remote_layers.map_or(weight_bytes, |r| r + embed_managed);
    if managed_bytes == 0 {
        // Every layer fits the budget and the table is the head's: the mode would be `full`, and
        // the driver refuses advice on no bytes (cuMemAdvise: invalid argument, Qwen2.5-1.5B in
        // `data/results/h200/2026-11-28-pages-stages`).
        let why =
            format!("{}: every layer fits the GPU budget, nothing is left to manage (the mode is full)", mode.name());
        return row.settle(Err(LabError::Unsupported(why)));
    }
    row.host_bytes = Some(managed_bytes);
    row.pcie_per_token = Some(match (mode, remote_layers) {
        (Mode::ManagedPreferCpu, _) => weight_bytes,
        (Mode::ManagedSplit, Some(r)) => r + parts.hidden,
        _ => 0,
    });
    row.ceiling = Some(match (&split, mode) {
        (Some(p), _) => managed_split_ceiling(p, &parts, bw.device, bw.pcie),
        (None, Mode::ManagedPreferCpu) => crate::estimate::decode_ceiling_tok_s(bw.pcie, weight_bytes),
        _ => crate::estimate::decode_ceiling_tok_s(bw.device, weight_bytes),
    });
    if let Some(p) = &split {
        row.budget = Some(budget);
        row.predicted_gpu = Some(p.gpu_bytes(&parts));
        row.bound = Some("GPU reads of the resident layers, then PCIe reads of the managed ones".into());
        row.placement = Some(p.clone());
    }
    s.probe.empty_cache();
    s.probe.reset_peak();
    let before = s.probe.snapshot("before");
    s.say(format!("\n{}: {} of weights in CUDA managed memory", mode.name(), fmt_bytes(managed_bytes)));
    let result = (|| -> Result<()> {
        let device = s.device.clone();
        // Made on the GPU (fast), kept in host memory, then written into the managed block (the
        // block is asked for before split's layers fill the card: the free-memory rule sees it).
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
        let tied_embed = |name: &str| mcfg.tie_word_embeddings && name == "model.embed_tokens.weight";
        let resident = |name: &str| split.as_ref().is_some_and(|p| p.home_of(name) == Home::Gpu || tied_embed(name));
        let align = |n: usize| n.div_ceil(256) * 256;
        let total: usize = host.iter().filter(|(n, _)| !resident(n)).map(|(_, w)| align(w.bytes() as usize)).sum();
        let mut block = Managed::alloc(&dev, total, cfg.oversubscribe)?;
        let mut weights = std::collections::HashMap::new();
        let mut on_gpu = Vec::new();
        let mut at = 0;
        for (name, w) in host {
            if resident(&name) {
                on_gpu.push((name, w));
                continue;
            }
            let t = w.dense()?;
            let n = crate::memory::cuda_copy::with_host_bytes(&t, |b| block.write(at, b).map(|_| b.len()))??;
            let mt = block.tensor(at, t.shape(), t.dtype())?;
            weights.insert(name, model::load::weights::Weight::Dense(mt));
            at += align(n);
        }
        crate::memory::guarded(&s.probe, "uploading the resident layers", || {
            for (name, w) in on_gpu {
                weights.insert(name, model::load::weights::Weight::Dense(w.dense()?.to_device(&device)?));
            }
            Ok(())
        })?;
        match mode {
            Mode::ManagedPreferCpu | Mode::ManagedSplit => block.advise(Advice::PreferCpu)?,
            Mode::ManagedReadMostly => block.advise(Advice::ReadMostly)?,
            Mode::ManagedPrefetch => block.prefetch_to_gpu()?,
            _ => {}
        }
        let model = Decoder::new(&mcfg, cfg.precision, weights, &device)?;
        let measured = generate_in(s, &model, cfg, &mut row, &before);
        // The model's tensors before the block they live in.
        drop(model);
        drop(block);
        measured
    })();
    row.settle(result)
}

#[cfg(not(feature = "cuda"))]
pub fn run_managed(
    _s: &mut Session,
    _cfg: &OffloadConfig,
    mode: Mode,
    _bw: &Bandwidths,
    _budget: u64,
) -> Result<ModeRow> {
    Ok(ModeRow {
        mode: mode.name().into(),
        run_by: "vram-lab".into(),
        outcome: Outcome::Error("unified memory needs a CUDA build on a GPU".into()),
        note: "unified memory needs a CUDA build on a GPU".into(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DecoderConfig;

    #[test]
    fn managed_split_keeps_what_fits_and_reads_the_rest_over_pcie() {
        let cfg = DecoderConfig::preset("qwen3-14b").unwrap();
        let parts = PartBytes::new(&cfg, 2);
        let reserve = 512 << 20;
        let small = managed_split_placement(&parts, 12 << 30, reserve).unwrap();
        let large = managed_split_placement(&parts, 22 << 30, reserve).unwrap();
        for p in [&small, &large] {
            // No layer is computed on the CPU: every layer is resident or read through the mapping.
            assert_eq!(p.count(Home::Cpu), 0);
            assert_eq!(p.count(Home::Gpu) + p.count(Home::Streamed), cfg.num_hidden_layers);
            assert!(p.gpu_bytes(&parts) + reserve <= if p == &small { 12 << 30 } else { 22 << 30 });
        }
        assert!(large.count(Home::Gpu) > small.count(Home::Gpu));
        let (device, pcie) = (1000.0, 25.0);
        let ceiling = |p: &Placement| managed_split_ceiling(p, &parts, device, pcie);
        // Between reading everything over PCIe and everything from device memory, and faster
        // the more the card holds.
        let all_remote = crate::estimate::decode_ceiling_tok_s(pcie, parts.total());
        let all_device = crate::estimate::decode_ceiling_tok_s(device, parts.total());
        assert!(all_remote < ceiling(&small) && ceiling(&small) < ceiling(&large) && ceiling(&large) < all_device);
    }
}
