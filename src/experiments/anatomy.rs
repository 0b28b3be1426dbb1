//! Stage 1, VRAM anatomy: load the model in BF16, Q4 and F32 (in that order, as the report, since
//! F32 is the one expected to run out of memory), snapshot memory at init, after loading and after
//! generating N tokens, and put each figure beside its prediction and the report's.

use super::Lab;
use crate::error::{LabError, Result};
use crate::estimate;
use crate::memory::{fmt_bytes, gib, guarded, mib, Snapshot, Timeline};
use crate::model::{self, GenerateConfig, Precision};
use crate::reference::{self, pytorch_h200, report};
use polars::prelude::*;

#[derive(Debug, Clone)]
pub struct AnatomyConfig {
    pub precisions: Vec<Precision>,
    pub max_new_tokens: usize,
}

impl Default for AnatomyConfig {
    fn default() -> Self {
        Self { precisions: vec![Precision::Bf16, Precision::Q4, Precision::F32], max_new_tokens: 200 }
    }
}

/// One scenario (one precision), every figure in bytes or seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Scenario {
    pub precision: String,
    pub outcome: String,
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
}

#[derive(Debug, Clone, Default)]
pub struct AnatomyResult {
    pub scenarios: Vec<Scenario>,
    pub timeline: Timeline,
}

/// The report's (allocated, reserved, peak) after loading, and the PyTorch-on-H200 allocated.
fn report_figures(p: Precision) -> (Option<(f64, f64, f64)>, Option<f64>) {
    match p {
        Precision::Bf16 => (Some(report::BF16_LOADED), Some(pytorch_h200::BF16_LOADED.0)),
        Precision::Q4 => (Some(report::INT4_LOADED), None),
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

fn run_scenario(lab: &mut Lab, p: Precision, cfg: &AnatomyConfig, timeline: &mut Timeline) -> Scenario {
    let mut sc = Scenario { precision: p.name().into(), ..Default::default() };
    // Opened once: the config gives the prediction, the same source is then loaded.
    let opened = match model::source::open(&lab.source, &lab.opts) {
        Ok(o) => o,
        Err(e) => {
            sc.outcome = format!("error: {e}");
            return sc;
        }
    };
    let model_cfg = opened.cfg.clone();
    sc.predicted_weights = estimate::weight_bytes(&model_cfg, p);
    lab.probe.empty_cache();
    lab.probe.clear_pending();
    lab.probe.reset_peak();
    let init = lab.probe.snapshot(&format!("{p}: init"));
    timeline.push(init.clone());
    sc.init = Some(init);
    lab.say(format!("\n== {p}: load {} (predicted weights {}) ==", lab.source.label(), fmt_bytes(sc.predicted_weights)));

    let pb = lab.progress_bar(&format!("load {p}"));
    let loaded = guarded(&lab.probe, &format!("loading in {p}"), || {
        model::source::load_opened(opened, p, &lab.device, &lab.probe, pb.as_ref())
    });
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let result = loaded.and_then(|lm| {
        sc.load_s = lm.load_s;
        let s = lab.probe.snapshot(&format!("{p}: loaded"));
        lab.say(format!("loaded in {:.2} s: {}", lm.load_s, memory_line(&s)));
        timeline.push(s.clone());
        sc.loaded = Some(s);
        let prompt = report_prompt(lm.tokenizer.as_ref(), model_cfg.vocab_size, lab.opts.seed)?;
        sc.prompt_tokens = prompt.len();
        let gen_cfg = GenerateConfig { max_new_tokens: cfg.max_new_tokens, ..Default::default() };
        let gen = guarded(&lab.probe, &format!("generating in {p}"), || {
            model::generate::warmup(&lm.model, &prompt)?;
            model::generate(&lm.model, &prompt, &gen_cfg)
        })?;
        sc.new_tokens = gen.generated_ids.len();
        sc.prefill_tok_s = gen.prefill_tok_s();
        sc.decode_tok_s = gen.decode_tok_s();
        sc.kv_cache_bytes = gen.kv_cache_bytes;
        sc.first_tokens = gen.generated_ids.iter().take(8).copied().collect();
        let bytes_per_token = lm.model.weight_bytes() + gen.kv_cache_bytes;
        sc.decode_ceiling_tok_s = lab.own_bandwidth_gbs().map(|bw| estimate::decode_ceiling_tok_s(bw, bytes_per_token));
        let s = lab.probe.snapshot(&format!("{p}: after generating {}", sc.new_tokens));
        lab.say(format!(
            "generated {} tokens: prefill {:.1} tok/s, decode {:.2} tok/s; {}",
            sc.new_tokens,
            sc.prefill_tok_s,
            sc.decode_tok_s,
            memory_line(&s)
        ));
        timeline.push(s.clone());
        sc.after = Some(s);
        Ok(())
    });
    match result {
        Ok(()) => sc.outcome = "ok".into(),
        Err(LabError::Oom(r)) => {
            sc.outcome = "oom".into();
            sc.oom_request = r.request_bytes;
            sc.oom_during = r.during.clone();
            sc.oom_summary = r.summary.clone();
            lab.say(format!("OOM (captured): {}", r.headline()));
            lab.say(">>> memory summary at the OOM <<<".to_string());
            lab.say(r.summary.clone());
            if let Some(s) = &r.snapshot {
                let mut s = s.clone();
                s.label = format!("{p}: oom");
                timeline.push(s);
            }
        }
        Err(e) => {
            sc.outcome = format!("error: {e}");
            lab.say(format!("error: {e}"));
        }
    }
    // Everything of the scenario is dropped by now; hand the memory back as the report's cleanup.
    lab.probe.empty_cache();
    let s = lab.probe.snapshot(&format!("{p}: cleaned up"));
    timeline.push(s);
    sc
}

pub fn run(lab: &mut Lab, cfg: &AnatomyConfig) -> Result<AnatomyResult> {
    let mut out = AnatomyResult::default();
    for &p in &cfg.precisions {
        let sc = run_scenario(lab, p, cfg, &mut out.timeline);
        out.scenarios.push(sc);
    }
    Ok(out)
}

fn pct_err(measured: Option<f64>, predicted: f64) -> Option<f64> {
    measured.map(|m| (m - predicted) / predicted * 100.0)
}

impl AnatomyResult {
    /// One row per precision: prediction, measurement (GiB) and the report's figures.
    pub fn table(&self) -> Result<DataFrame> {
        let sc = &self.scenarios;
        let g = |f: &dyn Fn(&Scenario) -> Option<u64>| sc.iter().map(|s| f(s).map(gib)).collect::<Vec<Option<f64>>>();
        let precisions: Vec<Precision> = sc.iter().filter_map(|s| Precision::parse(&s.precision).ok()).collect();
        let rep = |i: usize| precisions.iter().map(|&p| report_figures(p).0.map(|r| [r.0, r.1, r.2][i])).collect::<Vec<_>>();
        let predicted: Vec<f64> = sc.iter().map(|s| gib(s.predicted_weights)).collect();
        let loaded_alloc = g(&|s| s.loaded.as_ref().map(|x| x.allocated));
        // What loading added: on CUDA the pool starts empty, on CPU the heap holds the runtime too.
        let weights = sc
            .iter()
            .map(|s| s.init.as_ref().zip(s.loaded.as_ref()).map(|(i, l)| l.delta_allocated(i) as f64 / crate::memory::GIB))
            .collect::<Vec<_>>();
        let err: Vec<Option<f64>> = weights.iter().zip(&predicted).map(|(m, p)| pct_err(*m, *p)).collect();
        let delta = sc
            .iter()
            .map(|s| s.loaded.as_ref().zip(s.after.as_ref()).map(|(l, a)| a.delta_allocated(l) as f64 / crate::memory::MIB))
            .collect::<Vec<_>>();
        Ok(df!(
            "precision" => sc.iter().map(|s| s.precision.clone()).collect::<Vec<_>>(),
            "outcome" => sc.iter().map(|s| s.outcome.clone()).collect::<Vec<_>>(),
            "predicted_weights_gib" => predicted,
            "init_allocated_gib" => g(&|s| s.init.as_ref().map(|x| x.allocated)),
            "loaded_allocated_gib" => loaded_alloc,
            "weights_measured_gib" => weights,
            "weights_vs_predicted_pct" => err,
            "loaded_reserved_gib" => g(&|s| s.loaded.as_ref().map(|x| x.reserved)),
            "loaded_peak_gib" => g(&|s| s.loaded.as_ref().map(|x| x.peak)),
            "after_allocated_gib" => g(&|s| s.after.as_ref().map(|x| x.allocated)),
            "after_reserved_gib" => g(&|s| s.after.as_ref().map(|x| x.reserved)),
            "after_peak_gib" => g(&|s| s.after.as_ref().map(|x| x.peak)),
            "kv_act_delta_mib" => delta,
            "kv_cache_mib" => sc.iter().map(|s| mib(s.kv_cache_bytes)).collect::<Vec<_>>(),
            "process_used_gib" => g(&|s| s.after.as_ref().or(s.loaded.as_ref()).and_then(|x| x.process_used)),
            "load_s" => sc.iter().map(|s| s.load_s).collect::<Vec<_>>(),
            "prompt_tokens" => sc.iter().map(|s| s.prompt_tokens as u64).collect::<Vec<_>>(),
            "new_tokens" => sc.iter().map(|s| s.new_tokens as u64).collect::<Vec<_>>(),
            "prefill_tok_s" => sc.iter().map(|s| s.prefill_tok_s).collect::<Vec<_>>(),
            "decode_tok_s" => sc.iter().map(|s| s.decode_tok_s).collect::<Vec<_>>(),
            "decode_ceiling_tok_s" => sc.iter().map(|s| s.decode_ceiling_tok_s).collect::<Vec<_>>(),
            "oom_request_mib" => sc.iter().map(|s| s.oom_request.map(mib)).collect::<Vec<_>>(),
            "oom_during" => sc.iter().map(|s| s.oom_during.clone()).collect::<Vec<_>>(),
            "report_allocated_gib" => rep(0),
            "report_reserved_gib" => rep(1),
            "report_peak_gib" => rep(2),
            "pytorch_h200_allocated_gib" => precisions.iter().map(|&p| report_figures(p).1).collect::<Vec<_>>(),
        )?)
    }
}
