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
//!   CPU, read-mostly, and prefetched — never more managed memory than the GPU has free: a block
//!   the emulated card cannot hold runs with the card lifted, and the card's figure is predicted;
//! - managed-split: split's GPU layers in device memory, the rest managed and preferred on the CPU,
//!   read by the GPU through the mapping (what fits the card, what crosses PCIe every token).
//!
//! Then the article's oversubscription (a 14B model on a 24 GB card), predicted from the measured
//! bandwidths for each mode.

pub mod config;
pub mod modes;
pub mod prediction;
pub mod pytorch;
pub mod tables;

use crate::error::Result;
use crate::hw::{self, Card};
use crate::model::{self, DecoderConfig, Precision};
use crate::reference;
use crate::session::Session;
use crate::stage::{Finding, Outcome, Scale, Stage, StageOutput, View};
use modes::{run_managed, run_placed, whole_gpu_reason, ModeRow};
use prediction::predict;
use pytorch::{llamacpp_rows, pytorch_rows};
use tables::{bandwidths_table, predict_table, table, BANDWIDTHS_TABLE, PREDICT_TABLE, TABLE};

pub use config::{Mode, OffloadConfig};

pub struct Offload;

fn findings(rows: &[ModeRow], report_model: bool) -> Vec<Finding> {
    let rep = |v: f64| report_model.then_some(v);
    let ok = |m: &str| rows.iter().find(|r| r.mode == m && r.outcome.is_ok());
    let mut out = Vec::new();
    if let Some(r) = ok("full") {
        out.push(
            Finding::new("full GPU decode", "tok/s", r.tok_s)
                .ceiling(r.ceiling)
                .report(rep(reference::report::BF16_DECODE_TOK_S)),
        );
    }
    if let Some(r) = ok("streamed") {
        out.push(
            Finding::new("streamed offload decode", "tok/s", r.tok_s)
                .ceiling(r.ceiling)
                .report(rep(reference::report::OFFLOAD_5GIB_TOK_S))
                .note("ceiling: the streamed bytes over the pinned PCIe bandwidth measured in this run"),
        );
    }
    let best = rows
        .iter()
        .filter(|r| r.outcome.is_ok() && r.run_by == "vram-lab" && r.mode != "full" && r.budget.is_some())
        .max_by(|a, b| a.tok_s.partial_cmp(&b.tok_s).unwrap_or(std::cmp::Ordering::Equal));
    if let Some(r) = best {
        let llama = rows
            .iter()
            .filter(|r| r.run_by.starts_with("llama.cpp") && r.tok_s.is_some())
            .max_by(|a, b| a.tok_s.partial_cmp(&b.tok_s).unwrap_or(std::cmp::Ordering::Equal));
        let note = match llama {
            Some(l) => format!("{} (same GPU, same call): {:.2} tok/s", l.mode, l.tok_s.unwrap_or_default()),
            None => format!("llama.cpp -ngl 10 on an H200: {} tok/s", reference::LLAMACPP_H200_NGL10_TOK_S),
        };
        out.push(
            Finding::new(format!("best offload mode within the budget ({})", r.mode), "tok/s", r.tok_s)
                .ceiling(r.ceiling)
                .note(note),
        );
    }
    if let Some(r) = rows.iter().find(|r| r.mode == "pytorch accelerate") {
        out.push(
            Finding::new("accelerate, same budget (PyTorch reference)", "tok/s", r.tok_s)
                .report(rep(reference::report::OFFLOAD_5GIB_TOK_S)),
        );
    }
    out
}

impl Stage for Offload {
    const NAME: &'static str = "offload";
    const TITLE: &'static str = "Stage 4b — offload and unified memory / 卸载与统一内存";
    const ABOUT: &'static str = "Stage 4: the model with a GPU budget (report: 5 GiB) — split, streamed, hybrid and unified-memory modes beside their ceilings";
    const INTRO: &'static str = "报告第四阶段:全 GPU 38.23 tok/s,accelerate 只给 GPU 5 GiB 后降到 0.61 tok/s(−98.4%),结论是 PCIe 是细吸管。这里把同一份权重按不同方式放置,每种都和本次实测带宽给出的上限放在一起;统一内存从不申请超过 GPU 空闲显存的托管内存,managed-split 把放得下的层留在显存,其余留在主机由 GPU 经映射读取。<br>The report's stage 4: 38.23 tok/s on the GPU, 0.61 tok/s when accelerate keeps 5 GiB on the GPU and the rest in host RAM. Here the same weights run in every mode beside the ceiling the bandwidths measured in the same run allow: split (the rest computed on the CPU, llama.cpp's -ngl), streamed (the rest copied layer by layer into two GPU buffers, overlapped with compute), hybrid (both, in the ratio of the two bandwidths), and the related article's CUDA unified memory modes (managed, preferred location CPU, read-mostly; and prefetched), always with the managed total below what the GPU has free (a block the emulated card cannot hold runs on the whole GPU), and managed-split (what fits the budget in device memory, the rest managed on the host and read by the GPU through the mapping). Then the article's 27 GB-model-on-a-24 GB-card case, predicted from these measurements.";
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

    /// The placements within the budget, 16 tokens a mode: unified memory (the article's four
    /// modes, 2-3 tok/s each) is `--full`'s.
    fn quick_config() -> OffloadConfig {
        OffloadConfig {
            modes: vec![Mode::Full, Mode::Split, Mode::Streamed, Mode::Hybrid],
            new_tokens: 16,
            ..Default::default()
        }
    }

    /// The CPU's budget (one of the tiny model's two layers: the report's 5 GiB scaled, 1.15 MiB,
    /// holds less than a layer), the report's reserve scaled.
    fn scaled_config(scale: Scale) -> OffloadConfig {
        OffloadConfig { reserve_mib: scale.mib(OffloadConfig::default().reserve_mib), ..Self::cpu_config() }
    }

    fn run(s: &mut Session, cfg: &OffloadConfig) -> Result<StageOutput> {
        let budget = hw::parse_size(&cfg.gpu_budget)?;
        s.console.step("measuring bandwidths");
        let bw = s.bandwidths()?;
        s.say(format!(
            "bandwidths: device read {:.0} GB/s, host→device pinned {:.1} GB/s, host read {:.1} GB/s",
            bw.device, bw.pcie, bw.host
        ));
        // On CPU the "GPU" layers and the host layers share one heap: a scaled card's cap would
        // count the host's copy too. The budget stands for the card here; the cap is lifted.
        let lift = s.card().is_some_and(|c| c.is_scaled()) && !s.device.is_cuda();
        let why =
            format!("CPU: the scaled card is lifted in this stage; the GPU budget ({}) stands for it", cfg.gpu_budget);
        let model_cfg = model::source::open(&s.source, &s.opts)?.cfg;
        let mut rows = Vec::new();
        s.whole_device(lift, &why, |s| {
            for &mode in &cfg.modes {
                s.check_stop()?;
                let row = match mode.strategy() {
                    Some(st) => run_placed(s, cfg, st, &bw, budget)?,
                    None => {
                        let whole = whole_gpu_reason(s, cfg, mode, &model_cfg)?;
                        let why = whole.clone().unwrap_or_default();
                        let mut row =
                            s.whole_device(whole.is_some(), &why, |s| run_managed(s, cfg, mode, &bw, budget))?;
                        if let Some(w) = whole {
                            row.note = if row.note.is_empty() { w } else { format!("{w}; {}", row.note) };
                        }
                        row
                    }
                };
                match (&row.outcome, row.tok_s) {
                    (Outcome::Ok, Some(t)) => {
                        s.say(format!("{}: {:.2} tok/s (ceiling {:.2})", row.mode, t, row.ceiling.unwrap_or(f64::NAN)))
                    }
                    (o, _) => s.say(format!("{}: {}", row.mode, o.as_str())),
                }
                rows.push(row);
            }
            Ok(())
        })?;
        if let Some(p) = &cfg.pytorch {
            rows.extend(pytorch_rows(p)?);
        }
        if let Some(p) = &cfg.llama_cpp {
            rows.extend(llamacpp_rows(p, cfg.precision, model_cfg.num_hidden_layers)?);
        }
        let report_model = reference::is_report_model(&model_cfg);
        let mut out = StageOutput::default();
        out.table(TABLE, table(&rows, report_model)?);
        out.table(BANDWIDTHS_TABLE, bandwidths_table(&bw, s.device.is_cuda())?);
        let target = DecoderConfig::preset(&cfg.predict_model)?;
        let card = Card::parse(&cfg.predict_card)?;
        let own = hw::own_card(&s.device);
        let p = predict(&rows, &bw, own.as_ref(), &target, &card, cfg.precision);
        out.table(PREDICT_TABLE, predict_table(&p)?);
        out.findings = findings(&rows, report_model);
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}
