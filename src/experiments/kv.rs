//! Stage 2, the KV cache: a prefill sweep (the report's: batch fixed, sequence doubled until OOM)
//! with a ledger that attributes the bytes held after each step to the KV cache, the logits and
//! the rest, and the transient peak above them, beside the GQA-correct and the report's formula.

use super::Lab;
use crate::error::{LabError, Result};
use crate::estimate;
use crate::memory::{fmt_bytes, guarded, mib};
use crate::model::{AttentionMode, Logits, Qwen2};
use candle_core::Tensor;
use polars::prelude::*;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct PrefillConfig {
    /// Sequence lengths in order; the sweep stops at the first OOM.
    pub lengths: Vec<usize>,
    pub batch: usize,
    pub logits: Logits,
}

impl PrefillConfig {
    /// The report's sweep: 1024, 2048, … up to `max`.
    pub fn doubling(start: usize, max: usize) -> Vec<usize> {
        std::iter::successors(Some(start.max(1)), |&n| Some(n * 2)).take_while(|&n| n <= max).collect()
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PrefillStep {
    pub seq: usize,
    pub batch: usize,
    pub outcome: String,
    /// Allocated before the step (the weights and whatever the runtime keeps).
    pub base: u64,
    /// Allocated after the step, the cache and logits still held.
    pub after: u64,
    pub peak: u64,
    pub kv_bytes: u64,
    pub logits_bytes: u64,
    pub predicted_kv_gqa: u64,
    pub predicted_kv_naive: u64,
    pub predicted_logits: u64,
    pub seconds: f64,
    pub oom_request: Option<u64>,
    pub oom_during: String,
}

impl PrefillStep {
    /// Held after the step, above the base.
    pub fn held(&self) -> u64 {
        self.after.saturating_sub(self.base)
    }
    /// Held bytes neither the cache nor the logits explain.
    pub fn other(&self) -> i64 {
        self.held() as i64 - self.kv_bytes as i64 - self.logits_bytes as i64
    }
    /// How far the peak rose above what stayed held: attention scores, MLP activations.
    pub fn transient(&self) -> u64 {
        self.peak.saturating_sub(self.after)
    }
}

fn random_ids(batch: usize, seq: usize, vocab: usize, seed: u64, device: &candle_core::Device) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ seq as u64);
    // The report draws ids below 1000.
    let v: Vec<u32> = (0..batch * seq).map(|_| rng.random_range(0..vocab.min(1000) as u32)).collect();
    Ok(Tensor::from_vec(v, (batch, seq), device)?)
}

fn step(lab: &Lab, model: &Qwen2, cfg: &PrefillConfig, seq: usize) -> PrefillStep {
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let mut st = PrefillStep {
        seq,
        batch: cfg.batch,
        predicted_kv_gqa: estimate::kv_bytes_per_token(&model.cfg, dtype_bytes) * (seq * cfg.batch) as u64,
        predicted_kv_naive: estimate::naive_kv_bytes_per_token(&model.cfg, dtype_bytes) * (seq * cfg.batch) as u64,
        predicted_logits: match cfg.logits {
            Logits::All => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * (seq * cfg.batch) as u64,
            Logits::Last => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * cfg.batch as u64,
        },
        ..Default::default()
    };
    lab.probe.clear_pending();
    lab.probe.empty_cache();
    lab.probe.reset_peak();
    st.base = lab.probe.snapshot("before").allocated;
    let t0 = Instant::now();
    let out = guarded(&lab.probe, &format!("prefill of {seq} tokens"), || {
        let ids = random_ids(cfg.batch, seq, model.cfg.vocab_size, lab.opts.seed, model.device())?;
        let mut cache = model.new_cache(cfg.batch, seq)?;
        let logits = model.forward(&ids, &mut cache, cfg.logits)?;
        model.device().synchronize()?;
        let s = lab.probe.snapshot("after");
        let logits_bytes = logits.iter().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum();
        Ok((s, cache.bytes(), logits_bytes))
    });
    st.seconds = t0.elapsed().as_secs_f64();
    match out {
        Ok((s, kv, lg)) => {
            st.outcome = "ok".into();
            st.after = s.allocated;
            st.peak = s.peak;
            st.kv_bytes = kv;
            st.logits_bytes = lg;
        }
        Err(LabError::Oom(r)) => {
            st.outcome = "oom".into();
            st.oom_request = r.request_bytes;
            st.oom_during = r.during.clone();
            st.peak = r.snapshot.as_ref().map(|s| s.peak).unwrap_or(0);
        }
        Err(e) => {
            st.outcome = format!("error: {e}");
        }
    }
    st
}

/// Runs the sweep on a loaded model; stops after the first step that does not fit.
pub fn prefill_sweep(lab: &mut Lab, model: &Qwen2, cfg: &PrefillConfig) -> Vec<PrefillStep> {
    let mut steps = Vec::new();
    for &seq in &cfg.lengths {
        let st = step(lab, model, cfg, seq);
        lab.say(format!(
            "prefill {seq:>6} × {} ({}, {:?} logits, {} attention): {} — held {}, peak {}, KV {} (GQA formula {}), logits {}, {:.2} s{}",
            cfg.batch,
            model.precision,
            cfg.logits,
            model.attention.name(),
            st.outcome,
            fmt_bytes(st.held()),
            fmt_bytes(st.peak),
            fmt_bytes(st.kv_bytes),
            fmt_bytes(st.predicted_kv_gqa),
            fmt_bytes(st.logits_bytes),
            st.seconds,
            st.oom_request.map(|b| format!(", OOM asking for {}", fmt_bytes(b))).unwrap_or_default()
        ));
        let stop = st.outcome != "ok";
        steps.push(st);
        if stop {
            break;
        }
    }
    steps
}

fn pct(measured: u64, predicted: u64) -> Option<f64> {
    (predicted > 0 && measured > 0).then(|| (measured as f64 - predicted as f64) / predicted as f64 * 100.0)
}

/// The ledger, one row a step, in MiB.
pub fn prefill_table(steps: &[PrefillStep], attention: AttentionMode, precision: &str) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&PrefillStep) -> u64| steps.iter().map(|s| mib(f(s))).collect::<Vec<f64>>();
    let ok = |s: &PrefillStep| s.outcome == "ok";
    let growth: Vec<Option<f64>> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let prev = if i == 0 { 0 } else { steps[i - 1].held() };
            (ok(s) && (i == 0 || ok(&steps[i - 1]))).then(|| mib(s.held()) - mib(prev))
        })
        .collect();
    Ok(df!(
        "precision" => vec![precision.to_string(); steps.len()],
        "attention" => vec![attention.name().to_string(); steps.len()],
        "seq" => steps.iter().map(|s| s.seq as u64).collect::<Vec<_>>(),
        "batch" => steps.iter().map(|s| s.batch as u64).collect::<Vec<_>>(),
        "outcome" => steps.iter().map(|s| s.outcome.clone()).collect::<Vec<_>>(),
        "base_mib" => m(&|s| s.base),
        "held_mib" => m(&|s| s.held()),
        "growth_vs_previous_mib" => growth,
        "kv_mib" => m(&|s| s.kv_bytes),
        "kv_gqa_formula_mib" => m(&|s| s.predicted_kv_gqa),
        "kv_vs_gqa_pct" => steps.iter().map(|s| pct(s.kv_bytes, s.predicted_kv_gqa)).collect::<Vec<_>>(),
        "kv_naive_formula_mib" => m(&|s| s.predicted_kv_naive),
        "logits_mib" => m(&|s| s.logits_bytes),
        "logits_formula_mib" => m(&|s| s.predicted_logits),
        "other_mib" => steps.iter().map(|s| s.other() as f64 / crate::memory::MIB).collect::<Vec<_>>(),
        "peak_mib" => m(&|s| s.peak),
        "transient_mib" => m(&|s| s.transient()),
        "seconds" => steps.iter().map(|s| s.seconds).collect::<Vec<_>>(),
        "prefill_tok_s" => steps.iter().map(|s| if ok(s) { (s.seq * s.batch) as f64 / s.seconds.max(1e-9) } else { f64::NAN }).collect::<Vec<_>>(),
        "oom_request_mib" => steps.iter().map(|s| s.oom_request.map(mib)).collect::<Vec<_>>(),
        "oom_during" => steps.iter().map(|s| s.oom_during.clone()).collect::<Vec<_>>(),
    )?)
}
