//! Stage 2, the KV cache: a prefill sweep (the report's: batch fixed, sequence doubled until OOM)
//! with a ledger that attributes the bytes held after each step to the KV cache, the logits and
//! the rest, and the transient peak above them, beside the GQA-correct and the report's formula.

use super::Lab;
use crate::error::{LabError, Result};
use crate::estimate;
use crate::memory::{fmt_bytes, guarded, mib};
use crate::model::qwen2::last_logits;
use crate::model::{AttentionMode, CacheKind, Logits, Qwen2};
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
    pub reserved: u64,
    /// Bytes of the cache tensors, and what the pool's allocated count rose by when it was made.
    pub kv_bytes: u64,
    pub kv_measured: u64,
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
    /// Held bytes neither the cache (as the pool measured it) nor the logits explain.
    pub fn other(&self) -> i64 {
        self.held() as i64 - self.kv_measured as i64 - self.logits_bytes as i64
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

/// One prefill of `batch` × `seq` random ids from an empty cache, memory read before and after.
pub fn step(lab: &Lab, model: &Qwen2, seq: usize, batch: usize, logits: Logits) -> PrefillStep {
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let tokens = (seq * batch) as u64;
    let mut st = PrefillStep {
        seq,
        batch,
        predicted_kv_gqa: estimate::kv_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
        predicted_kv_naive: estimate::naive_kv_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
        predicted_logits: match logits {
            Logits::All => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * tokens,
            Logits::Last => estimate::logits_bytes_per_token(&model.cfg, dtype_bytes) * batch as u64,
        },
        ..Default::default()
    };
    lab.probe.clear_pending();
    lab.probe.empty_cache();
    lab.probe.reset_peak();
    st.base = lab.probe.snapshot("before").allocated;
    let t0 = Instant::now();
    let out = guarded(&lab.probe, &format!("prefill of {batch} × {seq} tokens"), || {
        let ids = random_ids(batch, seq, model.cfg.vocab_size, lab.opts.seed, model.device())?;
        let mut cache = model.new_cache(batch, seq)?;
        // The cache as the pool saw it being allocated, apart from the tensor arithmetic.
        let kv_measured = lab.probe.snapshot("cache").allocated.saturating_sub(st.base);
        let logits = model.forward(&ids, &mut cache, logits)?;
        model.device().synchronize()?;
        let s = lab.probe.snapshot("after");
        let logits_bytes = logits.iter().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum();
        Ok((s, cache.bytes(), kv_measured, logits_bytes))
    });
    st.seconds = t0.elapsed().as_secs_f64();
    match out {
        Ok((s, kv, kv_measured, lg)) => {
            st.outcome = "ok".into();
            st.after = s.allocated;
            st.reserved = s.reserved;
            st.peak = s.peak;
            st.kv_bytes = kv;
            st.kv_measured = kv_measured;
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

fn say_step(lab: &mut Lab, model: &Qwen2, st: &PrefillStep, logits: Logits) {
    let (seq, batch) = (st.seq, st.batch);
    lab.say(format!(
            "prefill {batch} × {seq:>6} ({}, {:?} logits, {} attention): {} — held {}, peak {}, KV {} (GQA formula {}), logits {}, {:.2} s{}",
            model.precision,
            logits,
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
}

/// One short forward, so buffers the runtime keeps for good (cuBLAS workspace, candle's quantized
/// matmul workspace, CPU GEMM packing) are in the base before the first reading.
fn warm_up(model: &Qwen2) {
    let _ = crate::model::generate::warmup(model, &[1, 2, 3, 4]);
}

/// Runs the sweep on a loaded model; stops after the first step that does not fit.
pub fn prefill_sweep(lab: &mut Lab, model: &Qwen2, cfg: &PrefillConfig) -> Vec<PrefillStep> {
    warm_up(model);
    let mut steps = Vec::new();
    for &seq in &cfg.lengths {
        let st = step(lab, model, seq, cfg.batch, cfg.logits);
        say_step(lab, model, &st, cfg.logits);
        let stop = st.outcome != "ok";
        steps.push(st);
        if stop {
            break;
        }
    }
    steps
}

/// Narrows [fits, does_not_fit) to within `resolution` by halving; returns the largest length
/// seen to fit and the lengths tried. `fits` runs one trial.
pub fn bisect(mut lo: usize, mut hi: usize, resolution: usize, mut fits: impl FnMut(usize) -> bool) -> (usize, Vec<usize>) {
    let mut tried = Vec::new();
    let resolution = resolution.max(1);
    while hi > lo + resolution {
        // Keep trial lengths on the resolution grid, strictly between the bounds.
        let mid = (lo + (hi - lo) / 2) / resolution * resolution;
        let mid = if mid <= lo { lo + resolution } else { mid };
        if mid >= hi {
            break;
        }
        tried.push(mid);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo, tried)
}

/// After a sweep that ended in an OOM, finds the longest prefill that fits to within `resolution`.
pub fn find_limit(lab: &mut Lab, model: &Qwen2, sweep: &[PrefillStep], logits: Logits, resolution: usize) -> Option<ContextLimit> {
    let oom = sweep.iter().find(|s| s.outcome == "oom")?;
    let ok = sweep.iter().filter(|s| s.outcome == "ok" && s.seq < oom.seq).map(|s| s.seq).max().unwrap_or(0);
    let batch = oom.batch;
    let mut trials = Vec::new();
    let (max_ok, _) = bisect(ok, oom.seq, resolution, |n| {
        let st = step(lab, model, n, batch, logits);
        say_step(lab, model, &st, logits);
        let fits = st.outcome == "ok";
        trials.push(st);
        fits
    });
    let first_oom = trials.iter().filter(|s| s.outcome != "ok").map(|s| s.seq).min().unwrap_or(oom.seq);
    Some(ContextLimit { precision: model.precision.name().into(), logits, batch, max_ok, first_oom, resolution, trials })
}

/// The longest prefill that fits on this (emulated) card.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContextLimit {
    pub precision: String,
    pub logits: Logits,
    pub batch: usize,
    pub max_ok: usize,
    pub first_oom: usize,
    pub resolution: usize,
    pub trials: Vec<PrefillStep>,
}

pub fn limit_table(limits: &[ContextLimit], card: &str) -> Result<DataFrame> {
    Ok(df!(
        "card" => vec![card.to_string(); limits.len()],
        "precision" => limits.iter().map(|l| l.precision.clone()).collect::<Vec<_>>(),
        "logits" => limits.iter().map(|l| format!("{:?}", l.logits).to_lowercase()).collect::<Vec<_>>(),
        "batch" => limits.iter().map(|l| l.batch as u64).collect::<Vec<_>>(),
        "max_context" => limits.iter().map(|l| l.max_ok as u64).collect::<Vec<_>>(),
        "first_oom" => limits.iter().map(|l| l.first_oom as u64).collect::<Vec<_>>(),
        "resolution" => limits.iter().map(|l| l.resolution as u64).collect::<Vec<_>>(),
        "trials" => limits.iter().map(|l| l.trials.len() as u64).collect::<Vec<_>>(),
    )?)
}

/// Batch sweep at a fixed length: batch 1, 2, 4, … until the first OOM.
pub fn batch_sweep(lab: &mut Lab, model: &Qwen2, seq: usize, max_batch: usize, logits: Logits) -> Vec<PrefillStep> {
    warm_up(model);
    let mut steps = Vec::new();
    for batch in std::iter::successors(Some(1usize), |b| Some(b * 2)).take_while(|&b| b <= max_batch) {
        let st = step(lab, model, seq, batch, logits);
        say_step(lab, model, &st, logits);
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
        "kv_measured_mib" => m(&|s| s.kv_measured),
        "kv_gqa_formula_mib" => m(&|s| s.predicted_kv_gqa),
        "kv_vs_gqa_pct" => steps.iter().map(|s| pct(s.kv_bytes, s.predicted_kv_gqa)).collect::<Vec<_>>(),
        "kv_naive_formula_mib" => m(&|s| s.predicted_kv_naive),
        "logits_mib" => m(&|s| s.logits_bytes),
        "logits_formula_mib" => m(&|s| s.predicted_logits),
        "other_mib" => steps.iter().map(|s| s.other() as f64 / crate::memory::MIB).collect::<Vec<_>>(),
        "growth_per_1k_tokens_mib" => steps.iter().map(|s| ok(s).then(|| mib(s.held()) / (s.seq * s.batch) as f64 * 1024.0)).collect::<Vec<_>>(),
        "reserved_mib" => m(&|s| s.reserved),
        "peak_mib" => m(&|s| s.peak),
        "transient_mib" => m(&|s| s.transient()),
        "seconds" => steps.iter().map(|s| s.seconds).collect::<Vec<_>>(),
        "prefill_tok_s" => steps.iter().map(|s| if ok(s) { (s.seq * s.batch) as f64 / s.seconds.max(1e-9) } else { f64::NAN }).collect::<Vec<_>>(),
        "oom_request_mib" => steps.iter().map(|s| s.oom_request.map(mib)).collect::<Vec<_>>(),
        "oom_during" => steps.iter().map(|s| s.oom_during.clone()).collect::<Vec<_>>(),
    )?)
}

/// A reading during a long decode.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DecodePoint {
    pub cache: String,
    pub tokens: usize,
    pub outcome: String,
    /// Allocated before the run: the weights and what the runtime keeps.
    pub base: u64,
    pub allocated: u64,
    pub reserved: u64,
    /// Peak since the previous reading.
    pub peak: u64,
    pub kv_bytes: u64,
    pub logits_bytes: u64,
    /// The ledger's prediction: base + the GQA formula (for the cache's size) + one step's logits.
    pub predicted: u64,
    pub tok_s: f64,
}

/// Fills a cache token by token (greedy decoding after a short prompt) up to `max_len`, reading
/// memory at each checkpoint; `kind` picks the preallocated or the concatenating cache.
pub fn decode_sweep(lab: &mut Lab, model: &Qwen2, kind: CacheKind, prompt_len: usize, checkpoints: &[usize]) -> Vec<DecodePoint> {
    let max_len = checkpoints.iter().copied().max().unwrap_or(prompt_len).max(prompt_len + 1);
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let per_token = estimate::kv_bytes_per_token(&model.cfg, dtype_bytes);
    let logits_bytes = estimate::logits_bytes_per_token(&model.cfg, dtype_bytes);
    warm_up(model);
    lab.probe.clear_pending();
    lab.probe.empty_cache();
    let base = lab.probe.snapshot("base").allocated;
    lab.probe.reset_peak();
    let mut points = Vec::new();
    let run = guarded(&lab.probe, &format!("decoding to {max_len} tokens ({} cache)", kind.name()), || {
        let mut cache = model.new_cache_of(kind, 1, max_len)?;
        let ids = random_ids(1, prompt_len, model.cfg.vocab_size, lab.opts.seed, model.device())?;
        let mut logits = model.forward(&ids, &mut cache, Logits::Last)?;
        let mut t0 = Instant::now();
        let mut since = cache.len();
        for &at in checkpoints.iter().filter(|&&c| c > prompt_len) {
            while cache.len() < at {
                let next = last_logits(&logits)?.argmax(candle_core::D::Minus1)?.unsqueeze(1)?;
                logits = model.forward(&next, &mut cache, Logits::Last)?;
            }
            model.device().synchronize()?;
            let tok_s = (cache.len() - since) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            let s = lab.probe.snapshot(&format!("{} {at}", kind.name()));
            let kv_tokens = if kind == CacheKind::Preallocated { cache.capacity() } else { cache.len() };
            points.push(DecodePoint {
                cache: kind.name().into(),
                tokens: cache.len(),
                outcome: "ok".into(),
                base,
                allocated: s.allocated,
                reserved: s.reserved,
                peak: s.peak,
                kv_bytes: cache.bytes(),
                logits_bytes: logits.iter().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum(),
                predicted: base + per_token * kv_tokens as u64 + logits_bytes,
                tok_s,
            });
            lab.probe.reset_peak();
            t0 = Instant::now();
            since = cache.len();
        }
        Ok(())
    });
    if let Err(e) = run {
        let outcome = if e.is_oom() { "oom".to_string() } else { format!("error: {e}") };
        points.push(DecodePoint { cache: kind.name().into(), outcome, base, ..Default::default() });
    }
    for p in &points {
        lab.say(format!(
            "decode ({} cache) at {:>6} tokens: {} — allocated {} (ledger {}), reserved {}, peak {}, KV {}, {:.1} tok/s",
            p.cache,
            p.tokens,
            p.outcome,
            fmt_bytes(p.allocated),
            fmt_bytes(p.predicted),
            fmt_bytes(p.reserved),
            fmt_bytes(p.peak),
            fmt_bytes(p.kv_bytes),
            p.tok_s
        ));
    }
    points
}

pub fn decode_table(points: &[DecodePoint], precision: &str) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&DecodePoint) -> u64| points.iter().map(|p| mib(f(p))).collect::<Vec<f64>>();
    Ok(df!(
        "precision" => vec![precision.to_string(); points.len()],
        "cache" => points.iter().map(|p| p.cache.clone()).collect::<Vec<_>>(),
        "tokens" => points.iter().map(|p| p.tokens as u64).collect::<Vec<_>>(),
        "outcome" => points.iter().map(|p| p.outcome.clone()).collect::<Vec<_>>(),
        "base_mib" => m(&|p| p.base),
        "allocated_mib" => m(&|p| p.allocated),
        "ledger_mib" => m(&|p| p.predicted),
        "ledger_vs_allocated_pct" => points.iter().map(|p| (p.allocated > 0).then(|| (p.predicted as f64 / p.allocated as f64 - 1.0) * 100.0)).collect::<Vec<_>>(),
        "kv_mib" => m(&|p| p.kv_bytes),
        "logits_mib" => m(&|p| p.logits_bytes),
        "reserved_mib" => m(&|p| p.reserved),
        "cached_mib" => m(&|p| p.reserved.saturating_sub(p.allocated)),
        "peak_mib" => m(&|p| p.peak),
        "peak_above_allocated_mib" => m(&|p| p.peak.saturating_sub(p.allocated)),
        "tok_s" => points.iter().map(|p| p.tok_s).collect::<Vec<_>>(),
    )?)
}

/// What a stage-2 run does: which sweeps, and their sizes.
#[derive(Debug, Clone)]
pub struct KvConfig {
    pub prefill: bool,
    pub decode: bool,
    pub batch: bool,
    /// Prefill lengths (the report's doubling by default).
    pub lengths: Vec<usize>,
    /// Bisect after the first OOM to within this many tokens; 0: no bisection.
    pub resolution: usize,
    pub logits: Logits,
    /// Decode sweep: fill the cache to this length, reading at 256, 512, 1024, …
    pub decode_to: usize,
    /// Batch sweep: this length, batches 1, 2, 4, … up to `max_batch`.
    pub seq: usize,
    pub max_batch: usize,
}

/// The tables of the sweeps that ran.
#[derive(Default)]
pub struct KvTables {
    pub prefill: Option<DataFrame>,
    pub limit: Option<DataFrame>,
    pub decode: Option<DataFrame>,
    pub batch: Option<DataFrame>,
}

/// Runs the configured sweeps on a loaded model; `card` names the (emulated) card in the tables.
pub fn run(lab: &mut Lab, model: &Qwen2, cfg: &KvConfig, card: &str) -> Result<KvTables> {
    let mut out = KvTables::default();
    let precision = model.precision.name();
    if cfg.prefill {
        let prefill = PrefillConfig { lengths: cfg.lengths.clone(), batch: 1, logits: cfg.logits };
        let mut steps = prefill_sweep(lab, model, &prefill);
        if cfg.resolution > 0 {
            if let Some(limit) = find_limit(lab, model, &steps, cfg.logits, cfg.resolution) {
                lab.say(format!(
                    "max context on {card} in {precision} ({:?} logits): {} tokens fit, {} do not",
                    cfg.logits, limit.max_ok, limit.first_oom
                ));
                out.limit = Some(limit_table(std::slice::from_ref(&limit), card)?);
                steps.extend(limit.trials);
                steps.sort_by_key(|s| s.seq);
            }
        }
        out.prefill = Some(prefill_table(&steps, model.attention, precision)?);
    }
    if cfg.decode {
        let checkpoints: Vec<usize> = PrefillConfig::doubling(256, cfg.decode_to);
        let mut points = Vec::new();
        for kind in [CacheKind::Preallocated, CacheKind::Concat] {
            points.extend(decode_sweep(lab, model, kind, 128, &checkpoints));
        }
        out.decode = Some(decode_table(&points, precision)?);
    }
    if cfg.batch {
        let steps = batch_sweep(lab, model, cfg.seq, cfg.max_batch, cfg.logits);
        out.batch = Some(prefill_table(&steps, model.attention, precision)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisection_finds_the_boundary_on_the_grid() {
        for limit in [1024usize, 1300, 2047, 4095] {
            let (found, tried) = bisect(1024, 4096, 256, |n| n <= limit);
            assert!(found <= limit && limit - found < 256, "limit {limit}: found {found}");
            assert!(tried.iter().all(|n| n % 256 == 0 && *n > 1024 && *n < 4096));
            assert!(tried.len() <= 4, "{tried:?}");
        }
        // Already within the resolution: nothing to try.
        assert_eq!(bisect(1024, 1200, 256, |_| unreachable!()), (1024, vec![]));
    }

    #[test]
    fn doubling_lengths() {
        assert_eq!(PrefillConfig::doubling(1024, 9000), vec![1024, 2048, 4096, 8192]);
    }

    #[test]
    fn ledger_arithmetic() {
        let st = PrefillStep { base: 100, after: 1100, peak: 1500, kv_measured: 300, logits_bytes: 600, ..Default::default() };
        assert_eq!(st.held(), 1000);
        assert_eq!(st.other(), 100);
        assert_eq!(st.transient(), 400);
        let t = prefill_table(&[st], AttentionMode::default(), "bf16").unwrap();
        assert_eq!(t.height(), 1);
        assert!(t.column("growth_per_1k_tokens_mib").is_ok());
    }
}
