//! Stage 3, leaks: the related articles' three causes of inference memory that grows until it
//! overflows, each as a pair — one run that leaks and one that does not — watched by the
//! `MemoryMonitor`:
//! - KV caches kept alive across requests (a conversation history holding `past_key_values`) vs
//!   dropped after each request;
//! - a batch larger than the card vs the largest batch the ledger says fits (the overflow ends in
//!   an OOM, diagnosed);
//! - a forward pass whose weights are trainable `Var`s (candle keeps each output's graph alive,
//!   as PyTorch without `torch.no_grad()`), its outputs kept in a list, vs plain tensors.
//!
//! The monitor flags growth of allocated bytes above a threshold between marks; reserved memory
//! that only looks like a leak is shown and not flagged.

pub mod config;
pub mod demos;
pub mod tables;

use crate::error::{LabError, Result};
use crate::experiments::oom;
use crate::memory::{fmt_bytes, mib};
use crate::model::Precision;
use crate::session::Session;
use crate::stage::{Finding, Scale, Stage, StageOutput, View};
use demos::{autograd_pair, batch_pair, kv_pair, Run};
use tables::{marks_table, summary_table, verdict, MARKS_TABLE, OOM_TABLE, SUMMARY_TABLE};

pub use config::{Demo, LeaksConfig};

pub struct Leaks;

fn findings(runs: &[Run]) -> Vec<Finding> {
    runs.iter()
        .filter(|r| r.demo != Demo::Batch)
        .map(|r| {
            Finding::new(
                format!("{} ({}): allocated growth per step", r.demo.name(), r.variant),
                "MiB",
                r.growth_per_step().map(|b| b / crate::memory::MIB),
            )
            .predicted(r.predicted_per_step.map(mib))
            .note(format!("{} — {}", verdict(r), r.note))
        })
        .collect()
}

impl Stage for Leaks {
    const NAME: &'static str = "leaks";
    const TITLE: &'static str = "Stage 3 — leaks: memory that grows until it overflows / 显存泄漏排查";
    const ABOUT: &'static str = "Stage 3: the articles' three causes of growing memory (kept KV caches, an oversized batch, autograd state), each leaky vs clean, under a memory monitor";
    const INTRO: &'static str = "相关文章列出推理显存持续增长的三个原因:KV cache 未释放、batch 过大、推理时仍有梯度图。每个原因跑一对:一个泄漏、一个干净,由 MemoryMonitor 标记增长超过阈值(文章:100 MB)的步骤。<br>The related articles name three causes of inference memory that grows until it overflows: KV caches never released, a batch too large for the card, and autograd state kept alive in inference. Each runs as a pair, one that leaks and one that does not, under a MemoryMonitor that marks labelled snapshots and flags growth of allocated memory above a threshold (the article's 100 MB), with the category that grew. Reserved memory that a pool keeps only looks like a leak: it is shown, not flagged.";
    type Config = LeaksConfig;

    fn cpu_config() -> LeaksConfig {
        LeaksConfig {
            precision: Precision::F32,
            prompt: 256,
            new_tokens: 8,
            seq: 128,
            threshold_mib: 0.1,
            noise_mib: 0.01,
            batch_room_mib: 48.0,
            ..Default::default()
        }
    }

    /// The report's lengths scaled to the model's tokens, in BF16 as the report.
    fn scaled_config(scale: Scale) -> LeaksConfig {
        let d = LeaksConfig::default();
        LeaksConfig {
            prompt: scale.tokens(d.prompt, 16),
            graph_prompt: scale.tokens(d.graph_prompt, 8),
            seq: scale.tokens(d.seq, 8),
            // Thresholds between what a clean step of a small model still grows (logits and
            // autograd's bookkeeping: 2 KiB) and a leaking one (7 KiB): the report's 100 MiB and
            // 1 MiB scaled (23 KiB, 235 B) would not separate them.
            threshold_mib: Self::cpu_config().threshold_mib,
            noise_mib: 0.004,
            ..d
        }
    }

    fn run(s: &mut Session, cfg: &LeaksConfig) -> Result<StageOutput> {
        if cfg.requests < 2 {
            return Err(LabError::input("--requests must be at least 2: a leak is growth between requests"));
        }
        if cfg.threshold_mib <= 0.0 || cfg.noise_mib < 0.0 || cfg.noise_mib >= cfg.threshold_mib {
            return Err(LabError::input("--threshold-mib must be above 0 and above --noise-mib (≥ 0)"));
        }
        let lm = match s.load(cfg.precision) {
            Ok(lm) => lm,
            Err(LabError::Oom(o)) => {
                return Err(LabError::Unsupported(format!(
                    "the model does not fit in {} ({})",
                    cfg.precision,
                    o.headline()
                )))
            }
            Err(e) => return Err(e),
        };
        let mut model = lm.model;
        let _ = crate::model::generate::warmup(&model, &[1, 2, 3, 4]);
        let mut runs = Vec::new();
        let mut diagnoses = Vec::new();
        if cfg.demos.contains(&Demo::Kv) {
            runs.extend(kv_pair(s, &model, cfg)?);
        }
        if cfg.demos.contains(&Demo::Batch) {
            runs.extend(batch_pair(s, &model, cfg, &mut diagnoses)?);
        }
        if cfg.demos.contains(&Demo::Autograd) {
            let (r, m) = autograd_pair(s, model, cfg)?;
            runs.extend(r);
            model = m;
        }
        drop(model);
        for r in &runs {
            s.say(format!(
                "{} ({}): {} of {} steps flagged, {:.2} MiB per step (predicted {}) — {}",
                r.demo.name(),
                r.variant,
                r.monitor.leaks().len(),
                r.monitor.growth().len(),
                r.growth_per_step().unwrap_or(0.0) / crate::memory::MIB,
                r.predicted_per_step.map(fmt_bytes).unwrap_or_else(|| "—".into()),
                verdict(r)
            ));
        }
        let mut out = StageOutput::default();
        out.table(MARKS_TABLE, marks_table(&runs)?);
        out.table(SUMMARY_TABLE, summary_table(&runs)?);
        if !diagnoses.is_empty() {
            out.table(OOM_TABLE, oom::table(&diagnoses)?);
        }
        out.findings = findings(&runs);
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}
