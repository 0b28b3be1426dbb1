//! Stage 1, VRAM anatomy: load the model in BF16, Q4 and F32 (in that order, as the report, since
//! F32 is the one expected to run out of memory), snapshot memory at init, after loading and after
//! generating N tokens, and put each figure beside its prediction and the report's.

pub mod tables;

use crate::error::{LabError, Result};
use crate::estimate::{self, Workload};
use crate::experiments::oom;
use crate::limits;
use crate::memory::{fmt_bytes, gib, guarded, mib, Category, HeldBytes, Snapshot, Timeline};
use crate::model::{self, GenerateConfig, Logits, Precision};
use crate::reference::{self, pytorch_h200, report};
use crate::session::Session;
use crate::stage::{Finding, Outcome, Scale, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use tables::{col, OOM_TABLE, TABLE, TIMELINE_TABLE};

pub struct Anatomy;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct AnatomyConfig {
    /// Precisions in order (the report runs F32 last)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = AnatomyConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Tokens generated after the report's prompt
    #[arg(long, default_value_t = AnatomyConfig::default().max_new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub max_new_tokens: usize,
    /// The report's prompt cut to its first N tokens (default: all of it, 160 tokens)
    #[arg(long, value_parser = limits::count(limits::MAX_SEQ))]
    #[serde(default)]
    pub prompt_tokens: Option<usize>,
}

impl Default for AnatomyConfig {
    fn default() -> Self {
        Self {
            precisions: vec![Precision::Bf16, Precision::Q4KM, Precision::F32],
            max_new_tokens: 200,
            prompt_tokens: None,
        }
    }
}

/// One scenario (one precision), every figure in bytes or seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Scenario {
    pub precision: String,
    pub outcome: Outcome,
    pub predicted_weights: u64,
    pub init: Option<Snapshot>,
    pub loaded: Option<Snapshot>,
    pub after: Option<Snapshot>,
    pub load_s: f64,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    /// Bandwidth ÷ bytes read per decoded token, for this machine's GPU when known.
    pub decode_ceiling_tok_s: Option<f64>,
    pub kv_cache_bytes: u64,
    pub oom_request: Option<u64>,
    pub oom_during: String,
    pub oom_summary: String,
    pub first_tokens: Vec<u32>,
    /// The model has the report's shapes, so its figures stand beside this scenario.
    pub report_model: bool,
    /// Why it ran out of memory, when it did (its own table).
    #[serde(skip)]
    pub diagnosis: Vec<oom::Diagnosis>,
}

#[derive(Debug, Clone, Default)]
struct AnatomyResult {
    pub scenarios: Vec<Scenario>,
    pub timeline: Timeline,
    /// The report's figures stand beside this run only for the report's model.
    pub report_model: bool,
}

/// The report's (allocated, reserved, peak) after loading, and the PyTorch-on-H200 allocated.
fn report_figures(p: Precision, report_model: bool) -> (Option<(f64, f64, f64)>, Option<f64>) {
    if !report_model {
        return (None, None);
    }
    match p {
        Precision::Bf16 => (Some(report::BF16_LOADED), Some(pytorch_h200::BF16_LOADED.0)),
        Precision::Q4 | Precision::Q4KM | Precision::Q4KMF32 => (Some(report::INT4_LOADED), None),
        Precision::F32 => (None, Some(pytorch_h200::FP32_UNCAPPED_LOADED.0)),
        Precision::F16 => (None, None),
    }
}

/// The report's prompt through the tokenizer, or as many seeded random ids without one.
pub fn report_prompt(tokenizer: Option<&tokenizers::Tokenizer>, vocab: usize, seed: u64) -> Result<Vec<u32>> {
    match tokenizer {
        Some(t) => {
            let text = reference::REPORT_PROMPT.repeat(reference::REPORT_PROMPT_REPEAT);
            let enc = t.encode(text, false).map_err(|e| LabError::other(format!("tokenizer: {e}")))?;
            Ok(enc.get_ids().to_vec())
        }
        None => {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            Ok((0..reference::REPORT_PROMPT_TOKENS).map(|_| rng.random_range(0..vocab as u32)).collect())
        }
    }
}

fn memory_line(s: &Snapshot) -> String {
    format!("allocated {} reserved {} peak {}", fmt_bytes(s.allocated), fmt_bytes(s.reserved), fmt_bytes(s.peak))
}

fn run_scenario(s: &mut Session, p: Precision, cfg: &AnatomyConfig, timeline: &mut Timeline) -> Result<Scenario> {
    s.check_stop()?;
    let mut sc = Scenario { precision: p.name().into(), ..Default::default() };
    // Opened once: the config gives the prediction, the same source is then loaded. A source
    // that cannot be read fails the stage; only running out of memory is a result.
    let opened = model::source::open(&s.source, &s.opts)?;
    let model_cfg = opened.cfg.clone();
    // A GGUF's own tensors where the file fixes them, else the precision's plan.
    let planned = estimate::weight_bytes(&model_cfg, p);
    sc.predicted_weights = opened.weights.stored_bytes(&model_cfg, p).unwrap_or(planned);
    sc.report_model = reference::is_report_model(&model_cfg);
    // The bandwidths behind the decode ceiling are measured once per session, with a 2 GiB
    // buffer: before the peak restarts, so the buffer is not in this scenario's peak.
    let bandwidths = s.bandwidths().ok();
    s.probe.empty_cache();
    s.probe.clear_pending();
    s.probe.reset_peak();
    let init = s.probe.snapshot(&format!("{p}: init"));
    timeline.push(init.clone());
    sc.init = Some(init);
    s.say(format!("\n{p}: load {} (predicted weights {})", s.source.label(), fmt_bytes(sc.predicted_weights)));

    let loaded = s.load_opened(opened, p);
    let result = loaded.and_then(|lm| {
        sc.load_s = lm.load_s;
        let snap = s.probe.snapshot(&format!("{p}: loaded"));
        s.say(format!("loaded in {:.2} s: {}", lm.load_s, memory_line(&snap)));
        timeline.push(snap.clone());
        sc.loaded = Some(snap);
        let mut prompt = report_prompt(lm.tokenizer.as_ref(), model_cfg.vocab_size, s.opts.seed)?;
        prompt.truncate(cfg.prompt_tokens.unwrap_or(prompt.len()).max(1));
        sc.prompt_tokens = prompt.len();
        let gen_cfg = GenerateConfig { max_new_tokens: cfg.max_new_tokens, ..Default::default() };
        s.console.step(format!("generating {} tokens in {p}", cfg.max_new_tokens));
        let pb = s.console.bar(cfg.max_new_tokens as u64, &format!("generate {p}"), "tokens");
        let gen = guarded(&s.probe, &format!("generating in {p}"), || {
            model::generate::warmup(&lm.model, &prompt)?;
            model::generate::generate_with(&lm.model, &prompt, &gen_cfg, |n| pb.set_position(n as u64))
        });
        pb.finish_and_clear();
        let gen = gen?;
        sc.new_tokens = gen.generated_ids.len();
        sc.prefill_tok_s = gen.prefill_tok_s();
        sc.decode_tok_s = gen.decode_tok_s();
        sc.kv_cache_bytes = gen.kv_cache_bytes;
        sc.first_tokens = gen.generated_ids.iter().take(8).copied().collect();
        // What a step reads (the weights but an untied embedding table, plus the cache at the
        // mean context): the speed stage's ceiling.
        // (A GGUF's own types: the plan's bytes moved by the difference.)
        let bytes_per_token = (estimate::decode_read_bytes(&model_cfg, p, sc.prompt_tokens + sc.new_tokens / 2, 1)
            + sc.predicted_weights)
            .saturating_sub(planned);
        sc.decode_ceiling_tok_s = bandwidths.map(|bw| estimate::decode_ceiling_tok_s(bw.device, bytes_per_token));
        let snap = s.probe.snapshot(&format!("{p}: after generating {}", sc.new_tokens));
        s.say(format!(
            "generated {} tokens: prefill {:.1} tok/s, decode {:.2} tok/s; {}",
            sc.new_tokens,
            sc.prefill_tok_s,
            sc.decode_tok_s,
            memory_line(&snap)
        ));
        timeline.push(snap.clone());
        sc.after = Some(snap);
        Ok(())
    });
    match result {
        Ok(()) => sc.outcome = Outcome::Ok,
        Err(LabError::Oom(r)) => {
            sc.outcome = Outcome::Oom;
            sc.oom_request = r.request_bytes;
            sc.oom_during = r.during.clone();
            sc.oom_summary = r.summary.clone();
            let capacity = s.probe.snapshot("capacity").device_total.unwrap_or(u64::MAX);
            let expected =
                if sc.predicted_weights > capacity { ", as predicted: the weights alone exceed the card" } else { "" };
            s.say(format!(
                "{p}: {}{expected}; captured (summary in anatomy/oom_summary_{p}.txt), the next precision runs",
                r.headline()
            ));
            if let Some(at) = &r.at {
                timeline.push(Snapshot::from_failure(&format!("{p}: oom"), at));
            }
            // The weights loaded so far are what was held; the workload is the report's prompt
            // and the tokens to generate. Nothing of this precision fitted, so no transient.
            let held = HeldBytes::of(&[(Category::Weights, r.at.as_ref().map(|s| s.peak).unwrap_or(0))]);
            let w = Workload {
                precision: p,
                seq: crate::reference::REPORT_PROMPT_TOKENS + cfg.max_new_tokens,
                batch: 1,
                logits: Logits::Last,
            };
            let measured = oom::Measured { transient_per_token: 0.0, pool_factor: 1.0 };
            sc.diagnosis = oom::diagnose(s, &format!("{p} load"), &r, &model_cfg, &w, &held, measured);
        }
        Err(e) => return Err(e),
    }
    // Everything of the scenario is dropped by now; hand the memory back as the report's cleanup.
    s.probe.empty_cache();
    timeline.push(s.probe.snapshot(&format!("{p}: cleaned up")));
    Ok(sc)
}

impl Stage for Anatomy {
    const NAME: &'static str = "anatomy";
    const TITLE: &'static str = "Stage 1 — anatomy / 显存解剖: BF16, Q4, F32";
    const ABOUT: &'static str = "Stage 1: load in BF16 / Q4 / F32, snapshot memory, generate, catch the OOM";
    const INTRO: &'static str = "加载 Qwen2.5-7B(BF16、4-bit 的 Q4_K_M(以 BF16 计算)、FP32),在加载前后和生成 200 个 token 后读取 allocated / reserved / peak;FP32 在 24 GB 卡上 OOM,OOM 被当作一个结果记录下来,下一个精度照常运行。<br>Load the model in BF16, Q4 and F32; read allocated / reserved / peak after loading and after generating 200 tokens. The report (RTX 4090, PyTorch): BF16 14.19 / 14.21 / 14.19 GB; Int4 (bitsandbytes) 5.46 / 6.71 / 6.59 GB; FP32 OOM \"Tried to allocate 2.03 GiB\". BF16 weights are exactly parameters × 2 bytes (7,615,616,512 × 2 B = 14.185 GiB); the lab's Q4_K_M is llama.cpp's mix (Q4_K, with Q6_K for the output layer and half the layers' attn_v and ffn_down; about 4.9 bits a weight) computing in BF16, while bitsandbytes keeps the embedding and lm_head in BF16 (2.03 GiB), hence its 5.46 GB.";
    type Config = AnatomyConfig;

    fn cpu_config() -> AnatomyConfig {
        AnatomyConfig { max_new_tokens: 32, ..Default::default() }
    }

    /// The report's 160-token prompt scaled (a small model's activations per token are large
    /// beside its weights), 32 new tokens as on CPU.
    fn scaled_config(scale: Scale) -> AnatomyConfig {
        AnatomyConfig { prompt_tokens: Some(scale.tokens(reference::REPORT_PROMPT_TOKENS, 4)), ..Self::cpu_config() }
    }

    fn run(s: &mut Session, cfg: &AnatomyConfig) -> Result<StageOutput> {
        let mut result = AnatomyResult::default();
        for &p in &cfg.precisions {
            let sc = run_scenario(s, p, cfg, &mut result.timeline)?;
            result.scenarios.push(sc);
        }
        result.report_model = result.scenarios.iter().any(|sc| sc.report_model);
        let mut out = StageOutput::default();
        out.table(TABLE, result.table()?);
        out.table(TIMELINE_TABLE, result.timeline.to_dataframe()?);
        for sc in result.scenarios.iter().filter(|sc| !sc.oom_summary.is_empty()) {
            out.text(&format!("oom_summary_{}.txt", sc.precision), sc.oom_summary.clone());
        }
        let diagnoses: Vec<oom::Diagnosis> = result.scenarios.iter().flat_map(|sc| sc.diagnosis.clone()).collect();
        if !diagnoses.is_empty() {
            out.table(OOM_TABLE, oom::table(&diagnoses)?);
        }
        out.findings = result.findings();
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}

fn pct_err(measured: Option<f64>, predicted: f64) -> Option<f64> {
    measured.map(|m| (m - predicted) / predicted * 100.0)
}

impl AnatomyResult {
    /// Per precision: the weights against the prediction and the report, the decode speed
    /// against its ceiling, and the OOM's request against the report's.
    fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for sc in &self.scenarios {
            let Ok(p) = Precision::parse(&sc.precision) else { continue };
            let weights =
                sc.init.as_ref().zip(sc.loaded.as_ref()).map(|(i, l)| l.delta_allocated(i) as f64 / crate::memory::GIB);
            let report = report_figures(p, self.report_model).0.map(|r| r.0);
            out.push(
                Finding::new(format!("{p} weights after loading"), "GiB", weights)
                    .predicted(gib(sc.predicted_weights))
                    .report(report)
                    .note(sc.outcome.as_str()),
            );
            if sc.outcome.is_ok() {
                let report_tok_s = (self.report_model && p == Precision::Bf16).then_some(report::BF16_DECODE_TOK_S);
                out.push(
                    Finding::new(format!("{p} decode speed"), "tok/s", Some(sc.decode_tok_s))
                        .report(report_tok_s)
                        .ceiling(sc.decode_ceiling_tok_s)
                        .note("ceiling: the read bandwidth measured in this run ÷ the bytes a step reads (weights but an untied embedding table, plus the KV cache at the mean context); decoding runs the lab's loop (on a GPU the step captured as a CUDA graph, in the lab's kernels)"),
                );
            }
            if let Some(req) = sc.oom_request {
                let report_req =
                    (self.report_model && p == Precision::F32).then_some(report::FP32_OOM_REQUEST_GIB * 1024.0);
                out.push(
                    Finding::new(format!("{p} OOM request"), "MiB", Some(mib(req)))
                        .report(report_req)
                        .note(format!("during {}", sc.oom_during)),
                );
            }
        }
        out
    }

    /// One row per precision: prediction, measurement (GiB) and the report's figures.
    pub fn table(&self) -> Result<DataFrame> {
        let sc = &self.scenarios;
        let g = |f: &dyn Fn(&Scenario) -> Option<u64>| sc.iter().map(|s| f(s).map(gib)).collect::<Vec<Option<f64>>>();
        let precisions: Vec<Precision> = sc.iter().filter_map(|s| Precision::parse(&s.precision).ok()).collect();
        let rep = |i: usize| {
            precisions
                .iter()
                .map(|&p| report_figures(p, self.report_model).0.map(|r| [r.0, r.1, r.2][i]))
                .collect::<Vec<_>>()
        };
        let predicted: Vec<f64> = sc.iter().map(|s| gib(s.predicted_weights)).collect();
        let loaded_alloc = g(&|s| s.loaded.as_ref().map(|x| x.allocated));
        // What loading added: before it the GPU may hold an earlier precision's leftovers (candle's
        // quantized-matmul buffer after Q4_K_M), and on CPU the heap holds the runtime too.
        let weights = sc
            .iter()
            .map(|s| {
                s.init.as_ref().zip(s.loaded.as_ref()).map(|(i, l)| l.delta_allocated(i) as f64 / crate::memory::GIB)
            })
            .collect::<Vec<_>>();
        let err: Vec<Option<f64>> = weights.iter().zip(&predicted).map(|(m, p)| pct_err(*m, *p)).collect();
        let delta = sc
            .iter()
            .map(|s| {
                s.loaded.as_ref().zip(s.after.as_ref()).map(|(l, a)| a.delta_allocated(l) as f64 / crate::memory::MIB)
            })
            .collect::<Vec<_>>();
        Ok(df!(
            col::PRECISION => sc.iter().map(|s| s.precision.clone()).collect::<Vec<_>>(),
            col::OUTCOME => sc.iter().map(|s| s.outcome.as_str()).collect::<Vec<_>>(),
            col::PREDICTED_WEIGHTS_GIB => predicted,
            "init_allocated_gib" => g(&|s| s.init.as_ref().map(|x| x.allocated)),
            col::LOADED_ALLOCATED_GIB => loaded_alloc,
            col::WEIGHTS_MEASURED_GIB => weights,
            col::WEIGHTS_VS_PREDICTED_PCT => err,
            col::LOADED_RESERVED_GIB => g(&|s| s.loaded.as_ref().map(|x| x.reserved)),
            col::LOADED_PEAK_GIB => g(&|s| s.loaded.as_ref().map(|x| x.peak)),
            col::AFTER_ALLOCATED_GIB => g(&|s| s.after.as_ref().map(|x| x.allocated)),
            col::AFTER_RESERVED_GIB => g(&|s| s.after.as_ref().map(|x| x.reserved)),
            col::AFTER_PEAK_GIB => g(&|s| s.after.as_ref().map(|x| x.peak)),
            col::KV_ACT_DELTA_MIB => delta,
            col::KV_CACHE_MIB => sc.iter().map(|s| mib(s.kv_cache_bytes)).collect::<Vec<_>>(),
            "process_used_gib" => g(&|s| s.after.as_ref().or(s.loaded.as_ref()).and_then(|x| x.process_used)),
            col::LOAD_S => sc.iter().map(|s| s.load_s).collect::<Vec<_>>(),
            col::PROMPT_TOKENS => sc.iter().map(|s| s.prompt_tokens as u64).collect::<Vec<_>>(),
            col::NEW_TOKENS => sc.iter().map(|s| s.new_tokens as u64).collect::<Vec<_>>(),
            col::PREFILL_TOK_S => sc.iter().map(|s| s.prefill_tok_s).collect::<Vec<_>>(),
            col::DECODE_TOK_S => sc.iter().map(|s| s.decode_tok_s).collect::<Vec<_>>(),
            col::DECODE_CEILING_TOK_S => sc.iter().map(|s| s.decode_ceiling_tok_s).collect::<Vec<_>>(),
            col::OOM_REQUEST_MIB => sc.iter().map(|s| s.oom_request.map(mib)).collect::<Vec<_>>(),
            col::OOM_DURING => sc.iter().map(|s| s.oom_during.clone()).collect::<Vec<_>>(),
            col::REPORT_ALLOCATED_GIB => rep(0),
            col::REPORT_RESERVED_GIB => rep(1),
            col::REPORT_PEAK_GIB => rep(2),
            col::PYTORCH_H200_ALLOCATED_GIB => precisions.iter().map(|&p| report_figures(p, self.report_model).1).collect::<Vec<_>>(),
        )?)
    }
}
