//! Stage 4b, offload: the report's "offload penalty" (38.23 tok/s on the GPU, 0.61 with accelerate
//! keeping 5 GiB on the GPU), taken apart. The same weights run in every mode, beside the ceiling
//! the bandwidths measured in the same run allow:
//! - full: everything on the GPU;
//! - split: as many layers as the budget holds on the GPU, the rest computed on the CPU from host
//!   memory (llama.cpp's `-ngl`);
//! - streamed: the rest in pinned host memory, copied layer by layer into two GPU buffers on a
//!   copy stream, overlapped with compute (accelerate copies the same bytes without the overlap);
//! - hybrid: the rest shared between streaming and CPU compute in the ratio of the two bandwidths;
//! - unified memory (the related article): managed weights with no advice, preferred location
//!   CPU, read-mostly, and prefetched — never more managed memory than the GPU has free.
//! Then the article's oversubscription (a 14B model on a 24 GB card), predicted from the measured
//! bandwidths for each mode.
//!
//! Why one file of ~620 lines: every mode shares `Row` and its ceiling; the stage becomes
//! `experiments/offload/` with the other stages' folders (issue 25).

use crate::limits;
use crate::error::{LabError, Result};
use crate::estimate;
use crate::hw::{self, Card};
use crate::memory::{fmt_bytes, gib, Snapshot};
use crate::model::placement::{Bandwidths, Home, PartBytes, Placement, Strategy};
use crate::model::{self, generate, GenerateConfig, Precision, Qwen2, Qwen2Config};
use crate::reference;
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use polars::prelude::*;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub struct Offload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// everything on the GPU (no budget)
    Full,
    /// the first layers on the GPU, the rest computed on the CPU (llama.cpp's -ngl)
    Split,
    /// the rest copied layer by layer into two GPU buffers, overlapped with compute
    Streamed,
    /// the rest shared between streaming and CPU compute by bandwidth
    Hybrid,
    /// cudaMallocManaged, no advice
    Managed,
    /// managed, preferred location CPU
    ManagedPreferCpu,
    /// managed, read-mostly
    ManagedReadMostly,
    /// managed, prefetched to the GPU before generating
    ManagedPrefetch,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Managed => "managed",
            Self::ManagedPreferCpu => "managed-prefer-cpu",
            Self::ManagedReadMostly => "managed-read-mostly",
            Self::ManagedPrefetch => "managed-prefetch",
            placed => placed.strategy().map(Strategy::name).unwrap_or_default(),
        }
    }

    fn strategy(self) -> Option<Strategy> {
        match self {
            Self::Full => Some(Strategy::Full),
            Self::Split => Some(Strategy::Split),
            Self::Streamed => Some(Strategy::Streamed),
            Self::Hybrid => Some(Strategy::Hybrid),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct OffloadConfig {
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = OffloadConfig::default().modes)]
    pub modes: Vec<Mode>,
    /// What the lab may allocate on the GPU for split/streamed/hybrid (the report: 5GiB)
    #[arg(long, default_value_t = OffloadConfig::default().gpu_budget)]
    pub gpu_budget: String,
    /// Part of the budget kept for the KV cache, activations and workspace, MiB
    #[arg(long, default_value_t = OffloadConfig::default().reserve_mib, value_parser = limits::mib_f64)]
    pub reserve_mib: f64,
    #[arg(long, value_enum, default_value_t = OffloadConfig::default().precision)]
    pub precision: Precision,
    #[arg(long, default_value_t = OffloadConfig::default().prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt: usize,
    /// Tokens decoded per mode (the report: 50)
    #[arg(long, default_value_t = OffloadConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// Allow more managed memory than the GPU has free. Only on your own workstation: on a
    /// shared GPU it can hang the whole device. Never used in tests or CI.
    #[arg(long, default_value_t = false)]
    pub oversubscribe: bool,
    /// JSON lines of `scripts/reference/pytorch_reference.py offload` run on the same GPU
    #[arg(long)]
    pub pytorch: Option<PathBuf>,
    /// The oversubscription case predicted on paper: this model …
    #[arg(long, default_value_t = OffloadConfig::default().predict_model)]
    pub predict_model: String,
    /// … on this card
    #[arg(long, default_value_t = OffloadConfig::default().predict_card)]
    pub predict_card: String,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            modes: vec![Mode::Full, Mode::Split, Mode::Streamed, Mode::Hybrid, Mode::Managed, Mode::ManagedPreferCpu, Mode::ManagedReadMostly, Mode::ManagedPrefetch],
            gpu_budget: "5GiB".into(),
            reserve_mib: 512.0,
            precision: Precision::Bf16,
            prompt: 32,
            new_tokens: 32,
            oversubscribe: false,
            pytorch: None,
            predict_model: "qwen2.5-14b".into(),
            predict_card: "rtx4090".into(),
        }
    }
}

pub mod col {
    pub const MODE: &str = "mode";
    pub const RUN_BY: &str = "run_by";
    pub const OUTCOME: &str = "outcome";
    pub const GPU_LAYERS: &str = "gpu_layers";
    pub const CPU_LAYERS: &str = "cpu_layers";
    pub const STREAMED_LAYERS: &str = "streamed_layers";
    pub const BUDGET_GIB: &str = "gpu_budget_gib";
    pub const PREDICTED_GPU_GIB: &str = "predicted_gpu_gib";
    pub const ALLOCATED_GIB: &str = "allocated_gib";
    pub const PEAK_GIB: &str = "peak_gib";
    pub const DEVICE_USED_GIB: &str = "device_used_gib";
    pub const HOST_GIB: &str = "host_weights_gib";
    pub const PREFILL_S: &str = "first_pass_s";
    pub const TOK_S: &str = "decode_tok_s";
    pub const PCIE_MIB_TOKEN: &str = "pcie_mib_per_token";
    pub const HOST_MIB_TOKEN: &str = "host_mib_per_token";
    pub const CEILING_TOK_S: &str = "ceiling_tok_s";
    pub const MS_PER_TOKEN: &str = "ms_per_token";
    pub const HOST_KERNEL_MS: &str = "host_kernel_ms_per_token";
    pub const HOST_KERNEL_GBS: &str = "host_kernel_gb_s";
    pub const CPU_LAYERS_MS: &str = "cpu_layers_ms_per_token";
    pub const CROSSINGS_MS: &str = "crossings_ms_per_token";
    pub const PCT_CEILING: &str = "pct_of_ceiling";
    pub const SLOWDOWN_PCT: &str = "slowdown_vs_full_pct";
    pub const VS_ACCELERATE: &str = "x_accelerate";
    pub const REPORT_TOK_S: &str = "report_tok_s";
    pub const ARTICLE_TOK_S: &str = "article_tok_s";
    pub const ARTICLE_GPU_MIB: &str = "article_gpu_mib";
    pub const NOTE: &str = "note";
    // offload_bandwidths
    pub const WHAT: &str = "what";
    pub const GBS: &str = "gb_s";
    // offload_predict
    pub const CASE: &str = "case";
    pub const CARD: &str = "card";
    pub const MODEL_GIB: &str = "model_gib";
    pub const PREDICTED_TOK_S: &str = "predicted_tok_s";
    pub const BASIS: &str = "basis";
}

pub const TABLE: &str = "offload";
pub const BANDWIDTHS_TABLE: &str = "offload_bandwidths";
pub const PREDICT_TABLE: &str = "offload_predict";

/// One mode's result.
#[derive(Debug, Clone, Default)]
pub struct Row {
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
    /// Per decode step: wall time in CPU layers, in their matrix-vector products and in
    /// CPU↔GPU crossings.
    pub profile: Option<model::profile::StepProfile>,
    pub note: String,
}

fn prompt_ids(vocab: usize, n: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..vocab as u32)).collect()
}

impl Row {
    /// The row of a mode whose run ended with `result`: an OOM or another error is the row's
    /// outcome (the next mode still runs); only Ctrl-C stops the stage.
    fn settle(mut self, result: Result<()>) -> Result<Row> {
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
fn generate_in(s: &mut Session, model: &Qwen2, cfg: &OffloadConfig, row: &mut Row, before: &Snapshot) -> Result<()> {
    row.loaded = Some(s.probe.snapshot(&format!("{}: loaded", row.mode)));
    let prompt = prompt_ids(model.cfg.vocab_size, cfg.prompt, s.opts.seed);
    let gen_cfg = GenerateConfig { max_new_tokens: cfg.new_tokens, stop_at_eos: false, ..Default::default() };
    s.console.step(format!("{}: generating {} tokens", row.mode, cfg.new_tokens));
    let g = crate::memory::guarded(&s.probe, &format!("generating ({})", row.mode), || {
        // The first pass is timed apart: managed memory migrates there.
        let t = std::time::Instant::now();
        model::generate::warmup(model, &prompt)?;
        row.first_pass_s = Some(t.elapsed().as_secs_f64());
        model::profile::take();
        generate(model, &prompt, &gen_cfg)
    })?;
    row.profile = Some(model::profile::take());
    row.tok_s = Some(g.decode_tok_s());
    let after = s.probe.snapshot(&format!("{}: after generating", row.mode));
    row.device_used = after.device_used.zip(before.device_used).map(|(a, b)| a.saturating_sub(b));
    row.after = Some(after);
    Ok(())
}

fn run_placed(s: &mut Session, cfg: &OffloadConfig, strategy: Strategy, bw: &Bandwidths, budget: u64) -> Result<Row> {
    let mut row = Row { mode: strategy.name().into(), run_by: "vram-lab".into(), ..Default::default() };
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
            model::weights::load_placed(&mcfg, opened.weights.as_mut(), cfg.precision, &device, |n| placement.device_of(n, &device), Some(&s.probe), |_, _| s.probe.check())
        })?;
        let model = crate::memory::guarded(&s.probe, "placing the model", || Qwen2::new_placed(&mcfg, cfg.precision, weights, &device, &placement))?;
        generate_in(s, &model, cfg, &mut row, &before)
    })();
    row.settle(result)
}

#[cfg(feature = "cuda")]
fn run_managed(s: &mut Session, cfg: &OffloadConfig, mode: Mode, bw: &Bandwidths) -> Result<Row> {
    use crate::memory::unified::{Advice, Managed};
    let mut row = Row { mode: mode.name().into(), run_by: "vram-lab".into(), ..Default::default() };
    let dev = match &s.device {
        candle_core::Device::Cuda(d) => d.clone(),
        _ => return Err(LabError::Unsupported("unified memory needs a CUDA GPU".into())),
    };
    let mut opened = model::source::open(&s.source, &s.opts)?;
    let mcfg = opened.cfg.clone();
    let weight_bytes = estimate::weight_bytes(&mcfg, cfg.precision);
    row.host_bytes = Some(weight_bytes);
    let prefer_cpu = mode == Mode::ManagedPreferCpu;
    row.pcie_per_token = Some(if prefer_cpu { weight_bytes } else { 0 });
    row.ceiling = Some(if prefer_cpu { estimate::decode_ceiling_tok_s(bw.pcie, weight_bytes) } else { estimate::decode_ceiling_tok_s(bw.device, weight_bytes) });
    s.probe.empty_cache();
    s.probe.reset_peak();
    let before = s.probe.snapshot("before");
    s.say(format!("\n{}: {} of weights in CUDA managed memory", mode.name(), fmt_bytes(weight_bytes)));
    let result = (|| -> Result<()> {
        let device = s.device.clone();
        // Made on the GPU (fast), kept in host memory, then written into the managed block.
        let host = crate::memory::guarded(&s.probe, "loading the weights to host memory", || {
            model::weights::load_placed(&mcfg, opened.weights.as_mut(), cfg.precision, &device, |_| candle_core::Device::Cpu, Some(&s.probe), |_, _| Ok(()))
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
            on_block.insert(name, model::weights::Weight::Dense(mt));
            at += align(n);
        }
        match mode {
            Mode::ManagedPreferCpu => block.advise(Advice::PreferCpu)?,
            Mode::ManagedReadMostly => block.advise(Advice::ReadMostly)?,
            Mode::ManagedPrefetch => block.prefetch_to_gpu()?,
            _ => {}
        }
        let model = Qwen2::new(&mcfg, cfg.precision, on_block, &device)?;
        let measured = generate_in(s, &model, cfg, &mut row, &before);
        // The model's tensors before the block they live in.
        drop(model);
        drop(block);
        measured
    })();
    row.settle(result)
}

#[cfg(not(feature = "cuda"))]
fn run_managed(_s: &mut Session, _cfg: &OffloadConfig, mode: Mode, _bw: &Bandwidths) -> Result<Row> {
    Ok(Row {
        mode: mode.name().into(),
        run_by: "vram-lab".into(),
        outcome: Outcome::Error("unified memory needs a CUDA build on a GPU".into()),
        note: "unified memory needs a CUDA build on a GPU".into(),
        ..Default::default()
    })
}

/// PyTorch rows from the reference script's JSON lines.
fn pytorch_rows(path: &std::path::Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for r in reference::pytorch_records(path, "offload")? {
        let case = r["case"].as_str().unwrap_or("");
        let (mode, note) = match case {
            "full_gpu" => ("pytorch full", "transformers generate, the model on the GPU".to_string()),
            "accelerate" => (
                "pytorch accelerate",
                format!("device_map=auto, max_memory {} on the GPU; {} GiB of weights in host RAM", r["gpu_budget"].as_str().unwrap_or("?"), r["offloaded_gib"]),
            ),
            _ => continue,
        };
        rows.push(Row {
            mode: mode.into(),
            run_by: "PyTorch (same GPU, same call)".into(),
            tok_s: r["tok_s"].as_f64(),
            note,
            ..Default::default()
        });
    }
    Ok(rows)
}

/// The report's figure for a mode (only for the report's model) and the article's (GPU MiB, tok/s).
fn report_and_article(mode: &str, report_model: bool) -> (Option<f64>, Option<(f64, f64)>) {
    use reference::{report, unified_article as a};
    match mode {
        _ if !report_model && !mode.starts_with("managed") => (None, None),
        "full" | "pytorch full" => (Some(report::BF16_DECODE_TOK_S), None),
        "pytorch accelerate" | "streamed" => (Some(report::OFFLOAD_5GIB_TOK_S), None),
        "managed" => (None, Some(a::MANAGED)),
        "managed-prefer-cpu" => (None, Some(a::PREFER_CPU)),
        "managed-read-mostly" => (None, Some(a::READ_MOSTLY)),
        _ => (None, None),
    }
}

fn table(rows: &[Row], report_model: bool) -> Result<DataFrame> {
    let full = rows.iter().find(|r| r.mode == "full" && r.outcome.is_ok()).and_then(|r| r.tok_s);
    let accel = rows.iter().find(|r| r.mode == "pytorch accelerate").and_then(|r| r.tok_s);
    let count = |r: &Row, h: Home| r.placement.as_ref().map(|p| p.count(h) as u64);
    let mib = |b: Option<u64>| b.map(|b| b as f64 / crate::memory::MIB);
    let gibo = |b: Option<u64>| b.map(gib);
    Ok(df!(
        col::MODE => rows.iter().map(|r| r.mode.clone()).collect::<Vec<_>>(),
        col::RUN_BY => rows.iter().map(|r| r.run_by.clone()).collect::<Vec<_>>(),
        col::OUTCOME => rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        col::GPU_LAYERS => rows.iter().map(|r| count(r, Home::Gpu)).collect::<Vec<_>>(),
        col::CPU_LAYERS => rows.iter().map(|r| count(r, Home::Cpu)).collect::<Vec<_>>(),
        col::STREAMED_LAYERS => rows.iter().map(|r| count(r, Home::Streamed)).collect::<Vec<_>>(),
        col::BUDGET_GIB => rows.iter().map(|r| gibo(r.budget)).collect::<Vec<_>>(),
        col::PREDICTED_GPU_GIB => rows.iter().map(|r| gibo(r.predicted_gpu)).collect::<Vec<_>>(),
        col::ALLOCATED_GIB => rows.iter().map(|r| r.loaded.as_ref().map(|s| gib(s.allocated))).collect::<Vec<_>>(),
        col::PEAK_GIB => rows.iter().map(|r| r.after.as_ref().map(|s| gib(s.peak))).collect::<Vec<_>>(),
        col::DEVICE_USED_GIB => rows.iter().map(|r| gibo(r.device_used)).collect::<Vec<_>>(),
        col::HOST_GIB => rows.iter().map(|r| gibo(r.host_bytes)).collect::<Vec<_>>(),
        col::PREFILL_S => rows.iter().map(|r| r.first_pass_s).collect::<Vec<_>>(),
        col::TOK_S => rows.iter().map(|r| r.tok_s).collect::<Vec<_>>(),
        col::PCIE_MIB_TOKEN => rows.iter().map(|r| mib(r.pcie_per_token)).collect::<Vec<_>>(),
        col::HOST_MIB_TOKEN => rows.iter().map(|r| mib(r.host_per_token)).collect::<Vec<_>>(),
        col::CEILING_TOK_S => rows.iter().map(|r| r.ceiling).collect::<Vec<_>>(),
        col::MS_PER_TOKEN => rows.iter().map(|r| r.tok_s.map(|t| 1e3 / t)).collect::<Vec<_>>(),
        col::HOST_KERNEL_MS => rows.iter().map(|r| r.profile.filter(|p| p.kernel_s > 0.0).map(|p| 1e3 * p.kernel_s)).collect::<Vec<_>>(),
        col::HOST_KERNEL_GBS => rows.iter().map(|r| r.profile.and_then(|p| p.kernel_gbs())).collect::<Vec<_>>(),
        col::CPU_LAYERS_MS => rows.iter().map(|r| r.profile.filter(|p| p.cpu_layers_s > 0.0).map(|p| 1e3 * p.cpu_layers_s)).collect::<Vec<_>>(),
        col::CROSSINGS_MS => rows.iter().map(|r| r.profile.filter(|p| p.crossings_s > 0.0).map(|p| 1e3 * p.crossings_s)).collect::<Vec<_>>(),
        col::PCT_CEILING => rows.iter().map(|r| Some(100.0 * r.tok_s? / r.ceiling?)).collect::<Vec<_>>(),
        col::SLOWDOWN_PCT => rows.iter().map(|r| Some(100.0 * (1.0 - r.tok_s? / full?))).collect::<Vec<_>>(),
        col::VS_ACCELERATE => rows.iter().map(|r| Some(r.tok_s? / accel?)).collect::<Vec<_>>(),
        col::REPORT_TOK_S => rows.iter().map(|r| report_and_article(&r.mode, report_model).0).collect::<Vec<_>>(),
        col::ARTICLE_TOK_S => rows.iter().map(|r| report_and_article(&r.mode, report_model).1.map(|a| a.1)).collect::<Vec<_>>(),
        col::ARTICLE_GPU_MIB => rows.iter().map(|r| report_and_article(&r.mode, report_model).1.map(|a| a.0)).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

/// What the oversubscription case would give, from this run's measurements.
pub struct Prediction {
    pub case: String,
    pub card: String,
    pub model_bytes: u64,
    pub tok_s: Option<f64>,
    pub article: Option<f64>,
    pub basis: String,
}

/// Predicts `model` on `card` for each unified mode and the lab's best placement. The card's
/// bandwidths are its vendor figures scaled by the efficiency measured here (measured ÷ this
/// GPU's vendor figure); the host is this one.
pub fn predict(rows: &[Row], bw: &Bandwidths, own: Option<&Card>, model: &Qwen2Config, card: &Card, precision: Precision) -> Vec<Prediction> {
    let m = estimate::weight_bytes(model, precision);
    let eff = |measured: f64, own_vendor: Option<f64>, card_vendor: Option<f64>| match (own_vendor, card_vendor) {
        (Some(o), Some(c)) => c * (measured / o).min(1.0),
        _ => measured,
    };
    let dev_bw = eff(bw.device, own.and_then(|c| c.bandwidth_gbs), card.bandwidth_gbs);
    let pcie_bw = eff(bw.pcie, own.and_then(|c| c.pcie_gbs), card.pcie_gbs);
    // What the pool can hold beside the context (~0.5 GiB) and a small cache: the resident part.
    let resident = card.total_bytes().saturating_sub(1 << 30).min(m);
    let excess = m - resident;
    let tok = |secs: f64| if secs > 0.0 { Some(1.0 / secs) } else { None };
    let row_of = |mode: &str| rows.iter().find(|r| r.mode == mode && r.outcome.is_ok());
    // Fault-driven migration: the managed mode's first pass moved every weight page to the GPU.
    let fault_bw = row_of("managed").and_then(|r| Some(r.host_bytes? as f64 / r.first_pass_s? / 1e9));
    // Remote reads: the prefer-CPU mode read every weight over PCIe each token.
    let remote_bw = row_of("managed-prefer-cpu").and_then(|r| Some(r.host_bytes? as f64 * r.tok_s? / 1e9));
    let mut out = Vec::new();
    let mut push = |case: &str, tok_s: Option<f64>, article: Option<f64>, basis: String| {
        out.push(Prediction { case: case.into(), card: card.name.clone(), model_bytes: m, tok_s, article, basis })
    };
    use reference::unified_article as a;
    push(
        "managed",
        fault_bw.and_then(|f| tok(2.0 * excess as f64 / (f * 1e9 * pcie_bw / bw.pcie) + resident as f64 / (dev_bw * 1e9))),
        Some(a::MANAGED.1),
        format!("{} resident; each token evicts and faults back the other {} at the fault-driven rate measured here, scaled to the card's PCIe", fmt_bytes(resident), fmt_bytes(excess)),
    );
    push(
        "managed-prefer-cpu",
        remote_bw.and_then(|r| tok(m as f64 / (r * 1e9 * pcie_bw / bw.pcie))),
        Some(a::PREFER_CPU.1),
        "every weight read over PCIe through the mapping each token, at the remote-read rate measured here, scaled to the card's PCIe".into(),
    );
    push(
        "managed-read-mostly",
        fault_bw.and_then(|f| tok(excess as f64 / (f * 1e9 * pcie_bw / bw.pcie) + resident as f64 / (dev_bw * 1e9))),
        Some(a::READ_MOSTLY.1),
        "as managed, but read-only copies are dropped, not written back: only the faults".into(),
    );
    let parts = PartBytes::new(model, precision.act_dtype().size_in_bytes());
    let card_bw = Bandwidths { device: dev_bw, pcie: pcie_bw, host: bw.host };
    let budget = card.total_bytes().saturating_sub(1 << 30);
    for strategy in [Strategy::Split, Strategy::Streamed, Strategy::Hybrid] {
        if let Ok(p) = Placement::for_budget(strategy, &parts, budget, 512 << 20, Some(&card_bw)) {
            push(
                &format!("vram-lab {} (ceiling)", strategy.name()),
                Some(p.ceiling_tok_s(&parts, &card_bw)),
                None,
                format!("{} layers on the GPU, {} on the CPU, {} streamed; this host's {:.0} GB/s", p.count(Home::Gpu), p.count(Home::Cpu), p.count(Home::Streamed), bw.host),
            );
        }
    }
    out
}

fn predict_table(p: &[Prediction]) -> Result<DataFrame> {
    Ok(df!(
        col::CASE => p.iter().map(|x| x.case.clone()).collect::<Vec<_>>(),
        col::CARD => p.iter().map(|x| x.card.clone()).collect::<Vec<_>>(),
        col::MODEL_GIB => p.iter().map(|x| gib(x.model_bytes)).collect::<Vec<_>>(),
        col::PREDICTED_TOK_S => p.iter().map(|x| x.tok_s).collect::<Vec<_>>(),
        col::ARTICLE_TOK_S => p.iter().map(|x| x.article).collect::<Vec<_>>(),
        col::BASIS => p.iter().map(|x| x.basis.clone()).collect::<Vec<_>>(),
    )?)
}

fn bandwidths_table(bw: &Bandwidths, gpu: bool) -> Result<DataFrame> {
    let note = if gpu { "measured in this run" } else { "CPU stand-in: the host read for all three" };
    Ok(df!(
        col::WHAT => ["device read (GPU layers)", "host → device, pinned (streamed layers)", "host read by the CPU (CPU layers)"],
        col::GBS => [bw.device, bw.pcie, bw.host],
        col::NOTE => [note, note, note],
    )?)
}

fn findings(rows: &[Row], report_model: bool) -> Vec<Finding> {
    let rep = |v: f64| report_model.then_some(v);
    let ok = |m: &str| rows.iter().find(|r| r.mode == m && r.outcome.is_ok());
    let mut out = Vec::new();
    if let Some(r) = ok("full") {
        out.push(Finding::new("full GPU decode", "tok/s", r.tok_s).ceiling(r.ceiling).report(rep(reference::report::BF16_DECODE_TOK_S)));
    }
    if let Some(r) = ok("streamed") {
        out.push(
            Finding::new("streamed offload decode", "tok/s", r.tok_s)
                .ceiling(r.ceiling)
                .report(rep(reference::report::OFFLOAD_5GIB_TOK_S))
                .note("ceiling: the streamed bytes over the pinned PCIe bandwidth measured in this run"),
        );
    }
    let best = rows.iter().filter(|r| r.outcome.is_ok() && r.run_by == "vram-lab" && r.mode != "full" && r.budget.is_some()).max_by(|a, b| a.tok_s.partial_cmp(&b.tok_s).unwrap_or(std::cmp::Ordering::Equal));
    if let Some(r) = best {
        out.push(Finding::new(format!("best offload mode within the budget ({})", r.mode), "tok/s", r.tok_s).ceiling(r.ceiling).note(format!("llama.cpp -ngl 10 on an H200: {} tok/s", reference::LLAMACPP_H200_NGL10_TOK_S)));
    }
    if let Some(r) = rows.iter().find(|r| r.mode == "pytorch accelerate") {
        out.push(Finding::new("accelerate, same budget (PyTorch reference)", "tok/s", r.tok_s).report(rep(reference::report::OFFLOAD_5GIB_TOK_S)));
    }
    out
}

impl Stage for Offload {
    const NAME: &'static str = "offload";
    const TITLE: &'static str = "Stage 4b — offload and unified memory / 卸载与统一内存";
    const ABOUT: &'static str = "Stage 4: the model with a GPU budget (report: 5 GiB) — split, streamed, hybrid and unified-memory modes beside their ceilings";
    const INTRO: &'static str = "报告第四阶段:全 GPU 38.23 tok/s,accelerate 只给 GPU 5 GiB 后降到 0.61 tok/s(−98.4%),结论是 PCIe 是细吸管。这里把同一份权重按不同方式放置,每种都和本次实测带宽给出的上限放在一起。<br>The report's stage 4: 38.23 tok/s on the GPU, 0.61 tok/s when accelerate keeps 5 GiB on the GPU and the rest in host RAM. Here the same weights run in every mode beside the ceiling the bandwidths measured in the same run allow: split (the rest computed on the CPU, llama.cpp's -ngl), streamed (the rest copied layer by layer into two GPU buffers, overlapped with compute), hybrid (both, in the ratio of the two bandwidths), and the related article's CUDA unified memory modes (managed, preferred location CPU, read-mostly; and prefetched), always with the managed total below what the GPU has free. Then the article's 27 GB-model-on-a-24 GB-card case, predicted from these measurements.";
    type Config = OffloadConfig;

    fn cpu_config() -> OffloadConfig {
        OffloadConfig {
            modes: vec![Mode::Full, Mode::Split, Mode::Streamed, Mode::Hybrid],
            // The tiny model's layers are 1.2 MB: one stays on the "GPU" (the CPU here).
            gpu_budget: "2.5MiB".into(),
            reserve_mib: 0.1,
            precision: Precision::Bf16,
            prompt: 16,
            new_tokens: 16,
            ..Default::default()
        }
    }

    fn run(s: &mut Session, cfg: &OffloadConfig) -> Result<StageOutput> {
        let budget = hw::parse_size(&cfg.gpu_budget)?;
        s.console.step("measuring bandwidths");
        let bw = s.bandwidths()?;
        s.say(format!("bandwidths: device read {:.0} GB/s, host→device pinned {:.1} GB/s, host read {:.1} GB/s", bw.device, bw.pcie, bw.host));
        let mut rows = Vec::new();
        for &mode in &cfg.modes {
            s.check_stop()?;
            let row = match mode.strategy() {
                Some(st) => run_placed(s, cfg, st, &bw, budget)?,
                None => run_managed(s, cfg, mode, &bw)?,
            };
            match (&row.outcome, row.tok_s) {
                (Outcome::Ok, Some(t)) => s.say(format!("{}: {:.2} tok/s (ceiling {:.2})", row.mode, t, row.ceiling.unwrap_or(f64::NAN))),
                (o, _) => s.say(format!("{}: {}", row.mode, o.as_str())),
            }
            rows.push(row);
        }
        if let Some(p) = &cfg.pytorch {
            rows.extend(pytorch_rows(p)?);
        }
        let report_model = reference::is_report_model(&model::source::open(&s.source, &s.opts)?.cfg);
        let mut out = StageOutput::default();
        out.table(TABLE, table(&rows, report_model)?);
        out.table(BANDWIDTHS_TABLE, bandwidths_table(&bw, s.device.is_cuda())?);
        let target = Qwen2Config::preset(&cfg.predict_model)?;
        let card = Card::parse(&cfg.predict_card)?;
        let own = hw::own_card(&s.device);
        let p = predict(&rows, &bw, own.as_ref(), &target, &card, cfg.precision);
        out.table(PREDICT_TABLE, predict_table(&p)?);
        out.findings = findings(&rows, report_model);
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![
            View {
                name: "modes",
                table: TABLE,
                caption: "Stage 4b — every mode on the same weights: GPU memory, tok/s, bytes crossing PCIe per token, and the ceiling from this run's bandwidths",
                columns: &[MODE, RUN_BY, OUTCOME, GPU_LAYERS, CPU_LAYERS, STREAMED_LAYERS, BUDGET_GIB, PREDICTED_GPU_GIB, ALLOCATED_GIB, PEAK_GIB, DEVICE_USED_GIB, PREFILL_S, TOK_S, PCIE_MIB_TOKEN, HOST_MIB_TOKEN, CEILING_TOK_S, PCT_CEILING, MS_PER_TOKEN, CPU_LAYERS_MS, HOST_KERNEL_MS, HOST_KERNEL_GBS, CROSSINGS_MS, SLOWDOWN_PCT, VS_ACCELERATE, REPORT_TOK_S, ARTICLE_TOK_S, ARTICLE_GPU_MIB, NOTE],
                group_by: &[],
                chart: Some(crate::report::charts::offload),
                explain: "Streaming moves every offloaded weight over PCIe once per token, so its ceiling is the pinned bandwidth ÷ those bytes; accelerate moves the same bytes but one layer at a time without overlap, from pageable memory. Computing the offloaded layers where they live (split) reads them at host-memory speed instead, several times PCIe. Unified memory with room for every page ends up resident on the GPU (managed, read-mostly, prefetched): no offload at all; preferred-location CPU reads every weight over PCIe each token (device_used is what the mode added on the GPU, managed pages included; the pool's peak includes loading, where each tensor is made on the GPU before it moves to its home — the 1.1 GiB of the managed rows is the embedding table passing through). 显存预算内最快的方式:在权重所在的地方计算,而不是搬运它们。",
            },
            View {
                name: "bandwidths",
                table: BANDWIDTHS_TABLE,
                caption: "Stage 4b — the bandwidths the placements were chosen and judged by (this run)",
                columns: &[WHAT, GBS, NOTE],
                group_by: &[],
                chart: None,
                explain: "Hybrid streams a share of the offloaded layers equal to PCIe ÷ (PCIe + host read) and computes the rest on the CPU, so both straws are busy at once.",
            },
            View {
                name: "predict",
                table: PREDICT_TABLE,
                caption: "Stage 4b — the article's oversubscription on paper: the predicted model on the predicted card, from this run's measurements",
                columns: &[CASE, CARD, MODEL_GIB, PREDICTED_TOK_S, ARTICLE_TOK_S, BASIS],
                group_by: &[],
                chart: None,
                explain: "Oversubscribing managed memory is never run here (it can hang a shared GPU): the unified modes are predicted from the migration and remote-read rates measured above, the lab's placements from their ceilings. 超额订阅只在纸面上预测。",
            },
        ]
    }
}
