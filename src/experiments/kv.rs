//! Stage 2, the KV cache: a prefill sweep (the report's: batch fixed, sequence doubled until OOM)
//! with a ledger that attributes the bytes held after each step to the KV cache, the logits and
//! the rest, and the transient peak above them, beside the GQA-correct and the report's formula;
//! bisection to the longest context that fits; a long decode with a preallocated and a
//! concatenating cache; a batch sweep; and the prefill again with stock candle's attention.
//!
//! Why one file of ~790 lines: the sweeps, the bisection, the decode and batch runs and the tables
//! share the `PrefillStep` ledger and the OOM diagnosis; issue 25 makes the stage a folder
//! (`experiments/kv/{mod,sweep,limit,tables}.rs`) with the report layer reading its charts from
//! declared views, a change to make once for every stage rather than this one alone.

use crate::limits;
use crate::error::{LabError, Result};
use crate::estimate::{self, Workload};
use crate::experiments::oom;
use crate::memory::{fmt_bytes, guarded, mib, tensor_bytes, Category, Held};
use crate::model::qwen2::last_logits;
use crate::model::{AttentionMode, CacheKind, Logits, Precision, Qwen2};
use crate::reference::report;
use crate::search::bisect;
use crate::report::charts;
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use candle_core::Tensor;
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

pub struct KvCache;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Sweep {
    /// Doubling lengths until OOM, then bisection to the longest that fits
    Prefill,
    /// A long decode, preallocated vs concatenating cache
    Decode,
    /// Batch 1, 2, 4, … at a fixed length
    Batch,
    /// The prefill sweep with attention as stock candle-transformers computes it
    Naive,
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct KvConfig {
    /// Precisions, each loaded once and swept in turn
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Sweeps to run
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().sweeps)]
    pub sweeps: Vec<Sweep>,
    /// Logits the prefill keeps, one sweep each: all (as model(input_ids) in transformers) or last
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().logits)]
    pub logits: Vec<Logits>,
    /// Prefill lengths (default: doubling from --start until OOM or --max)
    #[arg(long, value_delimiter = ',', value_parser = limits::count(limits::MAX_SEQ))]
    pub lengths: Option<Vec<usize>>,
    #[arg(long, default_value_t = KvConfig::default().start, value_parser = limits::count(limits::MAX_SEQ))]
    pub start: usize,
    #[arg(long, default_value_t = KvConfig::default().max, value_parser = limits::count(limits::MAX_SEQ))]
    pub max: usize,
    /// After the first OOM, bisect to the longest prefill that fits, to within this many tokens (0: no bisection)
    #[arg(long, default_value_t = KvConfig::default().resolution, value_parser = limits::count(limits::MAX_SEQ))]
    pub resolution: usize,
    /// Decode sweep: fill the cache token by token up to this length, reading at 256, 512, …
    #[arg(long, default_value_t = KvConfig::default().decode_to, value_parser = limits::count(limits::MAX_SEQ))]
    pub decode_to: usize,
    /// Batch sweep: the sequence length
    #[arg(long, default_value_t = KvConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// Batch sweep: the largest batch tried
    #[arg(long, default_value_t = KvConfig::default().max_batch, value_parser = limits::count(limits::MAX_BATCH))]
    pub max_batch: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        Self {
            precisions: vec![Precision::Bf16, Precision::Q4KM],
            sweeps: vec![Sweep::Prefill, Sweep::Decode, Sweep::Batch, Sweep::Naive],
            logits: vec![Logits::All, Logits::Last],
            lengths: None,
            start: 1024,
            max: 131072,
            resolution: 256,
            decode_to: 4096,
            seq: 1024,
            max_batch: 256,
        }
    }
}

impl KvConfig {
    fn prefill_lengths(&self) -> Vec<usize> {
        self.lengths.clone().unwrap_or_else(|| doubling(self.start, self.max))
    }
}

/// Column names of the stage's tables.
pub mod col {
    pub const PRECISION: &str = "precision";
    pub const ATTENTION: &str = "attention";
    pub const LOGITS: &str = "logits";
    pub const SEQ: &str = "seq";
    pub const BATCH: &str = "batch";
    pub const OUTCOME: &str = "outcome";
    pub const BASE_MIB: &str = "base_mib";
    pub const HELD_MIB: &str = "held_mib";
    pub const GROWTH_VS_PREVIOUS_MIB: &str = "growth_vs_previous_mib";
    pub const KV_MIB: &str = "kv_mib";
    pub const KV_MEASURED_MIB: &str = "kv_measured_mib";
    pub const KV_GQA_FORMULA_MIB: &str = "kv_gqa_formula_mib";
    pub const KV_VS_GQA_PCT: &str = "kv_vs_gqa_pct";
    pub const KV_NAIVE_FORMULA_MIB: &str = "kv_naive_formula_mib";
    pub const LOGITS_MIB: &str = "logits_mib";
    pub const LOGITS_FORMULA_MIB: &str = "logits_formula_mib";
    pub const OTHER_MIB: &str = "other_mib";
    pub const GROWTH_PER_1K_TOKENS_MIB: &str = "growth_per_1k_tokens_mib";
    pub const RESERVED_MIB: &str = "reserved_mib";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const TRANSIENT_MIB: &str = "transient_mib";
    pub const RESERVED_PEAK_MIB: &str = "reserved_peak_mib";
    pub const OUTSIDE_POOL_MIB: &str = "outside_pool_mib";
    pub const SECONDS: &str = "seconds";
    pub const PREFILL_TOK_S: &str = "prefill_tok_s";
    pub const OOM_REQUEST_MIB: &str = "oom_request_mib";
    pub const OOM_DURING: &str = "oom_during";
    // kv_limit
    pub const CARD: &str = "card";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const FIRST_OOM: &str = "first_oom";
    pub const RESOLUTION: &str = "resolution";
    pub const TRIALS: &str = "trials";
    pub const OOM_RETRY: &str = "oom_retry";
    // kv_decode
    pub const CACHE: &str = "cache";
    pub const TOKENS: &str = "tokens";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const LEDGER_MIB: &str = "ledger_mib";
    pub const LEDGER_VS_ALLOCATED_PCT: &str = "ledger_vs_allocated_pct";
    pub const CACHED_MIB: &str = "cached_mib";
    pub const PEAK_ABOVE_ALLOCATED_MIB: &str = "peak_above_allocated_mib";
    pub const TOK_S: &str = "tok_s";
}

/// Table names.
pub const PREFILL_TABLE: &str = "kv_prefill";
pub const LIMIT_TABLE: &str = "kv_limit";
pub const DECODE_TABLE: &str = "kv_decode";
pub const BATCH_TABLE: &str = "kv_batch";
pub const OOM_TABLE: &str = "kv_oom";

/// The report's sweep: 1024, 2048, … up to `max`.
pub fn doubling(start: usize, max: usize) -> Vec<usize> {
    std::iter::successors(Some(start.max(1)), |&n| Some(n * 2)).take_while(|&n| n <= max).collect()
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PrefillStep {
    pub precision: String,
    pub attention: String,
    pub logits: String,
    pub seq: usize,
    pub batch: usize,
    pub outcome: Outcome,
    /// Allocated before the step (the weights and whatever the runtime keeps).
    pub base: u64,
    /// Allocated after the step, the cache and logits still held.
    pub after: u64,
    pub peak: u64,
    pub reserved: u64,
    /// What the allocator had mapped at its busiest during the step (at the OOM, if one).
    pub reserved_peak: u64,
    /// Device memory of this process outside the pool (context, modules, workspaces).
    pub outside_pool: Option<u64>,
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
    /// The OOM as captured, for the diagnosis.
    #[serde(skip)]
    pub oom: Option<Box<crate::error::OomReport>>,
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

/// `batch` × `seq` random ids below 1000 (as the report draws them), seeded by `seed` and `seq`.
pub fn random_ids(batch: usize, seq: usize, vocab: usize, seed: u64, device: &candle_core::Device) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ seq as u64);
    // The report draws ids below 1000.
    let v: Vec<u32> = (0..batch * seq).map(|_| rng.random_range(0..vocab.min(1000) as u32)).collect();
    Ok(Tensor::from_vec(v, (batch, seq), device)?)
}

/// One prefill of `batch` × `seq` random ids from an empty cache, memory read before and after.
pub fn step(s: &Session, model: &Qwen2, seq: usize, batch: usize, logits: Logits) -> PrefillStep {
    s.console.step(format!("prefill {} {batch} × {seq}, {} logits, {} attention", model.precision, logits.name(), model.attention.name()));
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let tokens = (seq * batch) as u64;
    let mut st = PrefillStep {
        precision: model.precision.name().into(),
        attention: model.attention.name().into(),
        logits: logits.name().into(),
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
    s.probe.clear_pending();
    s.probe.empty_cache();
    s.probe.reset_peak();
    crate::memory::alloc_hook::trace_mark(&format!("prefill {} {batch} x {seq} {} logits {} attention", model.precision, logits.name(), model.attention.name()));
    st.base = s.probe.snapshot("before").allocated;
    let t0 = Instant::now();
    let out = guarded(&s.probe, &format!("prefill of {batch} × {seq} tokens"), || {
        let ids = random_ids(batch, seq, model.cfg.vocab_size, s.opts.seed, model.device())?;
        let mut cache = model.new_cache(batch, seq)?;
        // The cache as the pool saw it being allocated, apart from the tensor arithmetic.
        let kv_measured = s.probe.snapshot("cache").allocated.saturating_sub(st.base);
        let logits = model.forward(&ids, &mut cache, logits)?;
        model.device().synchronize()?;
        let snap = s.probe.snapshot("after");
        let logits_bytes = tensor_bytes(&logits);
        Ok((snap, cache.bytes(), kv_measured, logits_bytes))
    });
    st.seconds = t0.elapsed().as_secs_f64();
    match out {
        Ok((snap, kv, kv_measured, lg)) => {
            st.outcome = Outcome::Ok;
            st.after = snap.allocated;
            st.reserved = snap.reserved;
            st.peak = snap.peak;
            st.reserved_peak = snap.reserved_peak;
            st.outside_pool = snap.outside_pool();
            st.kv_bytes = kv;
            st.kv_measured = kv_measured;
            st.logits_bytes = lg;
        }
        Err(e) => {
            st.outcome = Outcome::from_error(&e);
            if let LabError::Oom(r) = e {
                st.oom_request = r.request_bytes;
                st.oom_during = r.during.clone();
                if let Some(snap) = &r.snapshot {
                    st.peak = snap.peak;
                    st.reserved_peak = snap.reserved_peak;
                    st.outside_pool = snap.outside_pool();
                }
                st.oom = Some(r);
            }
        }
    }
    st
}

fn say_step(s: &mut Session, st: &PrefillStep) {
    s.say(format!(
        "prefill {} × {:>6} ({}, {} logits, {} attention): {} — held {}, peak {}, KV {} (GQA formula {}), logits {}, {:.2} s{}",
        st.batch,
        st.seq,
        st.precision,
        st.logits,
        st.attention,
        st.outcome.as_str(),
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

/// Steps over `sizes` (a length at a fixed batch, or a batch at a fixed length) until the first
/// one that does not fit.
fn sweep(s: &mut Session, model: &Qwen2, sizes: impl Iterator<Item = (usize, usize)>, logits: Logits, diagnoses: &mut Vec<oom::Row>) -> Result<Vec<PrefillStep>> {
    warm_up(model);
    let sizes: Vec<(usize, usize)> = sizes.collect();
    let pb = s.console.bar(sizes.len() as u64, &format!("{} sweep", model.precision), "steps");
    let mut steps = Vec::new();
    for (seq, batch) in sizes {
        s.check_stop()?;
        let st = step(s, model, seq, batch, logits);
        pb.inc(1);
        say_step(s, &st);
        let stop = !st.outcome.is_ok();
        steps.push(st);
        if stop {
            break;
        }
    }
    pb.finish_and_clear();
    diagnose_last(s, model, &steps, logits, diagnoses);
    Ok(steps)
}

/// The diagnosis of a sweep's OOM: what the failed step held and what would have made it fit,
/// with the transient per token of the last step that fitted.
fn diagnose_last(s: &Session, model: &Qwen2, steps: &[PrefillStep], logits: Logits, out: &mut Vec<oom::Row>) {
    let Some(failed) = steps.last().filter(|st| st.outcome == Outcome::Oom) else { return };
    let Some(report) = &failed.oom else { return };
    let measured = steps
        .iter()
        .rev()
        .find(|st| st.outcome.is_ok())
        .map(|st| oom::Measured::from_step(st.base, st.peak, st.after, st.reserved_peak, st.seq * st.batch))
        .unwrap_or(oom::Measured { transient_per_token: 0.0, pool_factor: 1.0 });
    let held = Held::of(&[(Category::Weights, model.weight_bytes()), (Category::KvCache, failed.predicted_kv_gqa)]);
    let w = Workload { precision: model.precision, seq: failed.seq, batch: failed.batch, logits };
    let context = format!("{} {} × {} ({} logits, {} attention)", failed.precision, failed.batch, failed.seq, failed.logits, failed.attention);
    out.extend(oom::diagnose(s, &context, report, &model.cfg, &w, &held, measured));
}

/// The report's prefill sweep on a loaded model: batch 1, `lengths` in order.
pub fn prefill_sweep(s: &mut Session, model: &Qwen2, lengths: &[usize], logits: Logits, diagnoses: &mut Vec<oom::Row>) -> Result<Vec<PrefillStep>> {
    sweep(s, model, lengths.iter().map(|&n| (n, 1)), logits, diagnoses)
}

/// Batch 1, 2, 4, … at a fixed length.
pub fn batch_sweep(s: &mut Session, model: &Qwen2, seq: usize, max_batch: usize, logits: Logits, diagnoses: &mut Vec<oom::Row>) -> Result<Vec<PrefillStep>> {
    let batches = std::iter::successors(Some(1usize), |b| Some(b * 2)).take_while(|&b| b <= max_batch);
    sweep(s, model, batches.map(|b| (seq, b)), logits, diagnoses)
}

/// The longest prefill that fits on this (emulated) card.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContextLimit {
    pub precision: String,
    pub attention: String,
    pub logits: Logits,
    pub batch: usize,
    pub max_ok: usize,
    pub first_oom: usize,
    pub resolution: usize,
    pub trials: Vec<PrefillStep>,
    /// Whether a failed request was retried after a trim (the allocation hook, on a GPU).
    pub oom_retry: bool,
}

/// After a sweep that ended in an OOM, finds the longest prefill that fits to within `resolution`.
pub fn find_limit(s: &mut Session, model: &Qwen2, sweep: &[PrefillStep], logits: Logits, resolution: usize) -> Result<Option<ContextLimit>> {
    let Some(oom) = sweep.iter().find(|st| st.outcome == Outcome::Oom) else { return Ok(None) };
    let ok = sweep.iter().filter(|st| st.outcome.is_ok() && st.seq < oom.seq).map(|st| st.seq).max().unwrap_or(0);
    let batch = oom.batch;
    let mut trials = Vec::new();
    let (max_ok, _) = bisect(ok as u64, oom.seq as u64, resolution as u64, |n| {
        s.check_stop()?;
        let st = step(s, model, n as usize, batch, logits);
        say_step(s, &st);
        let fits = st.outcome.is_ok();
        trials.push(st);
        Ok(fits)
    })?;
    let first_oom = trials.iter().filter(|st| !st.outcome.is_ok()).map(|st| st.seq).min().unwrap_or(oom.seq);
    Ok(Some(ContextLimit {
        precision: model.precision.name().into(),
        attention: model.attention.name().into(),
        logits,
        batch,
        max_ok: max_ok as usize,
        first_oom,
        resolution,
        trials,
        oom_retry: crate::memory::alloc_hook::active() && crate::memory::alloc_hook::retry_enabled(),
    }))
}

pub fn limit_table(limits: &[ContextLimit], card: &str) -> Result<DataFrame> {
    Ok(df!(
        col::CARD => vec![card.to_string(); limits.len()],
        col::PRECISION => limits.iter().map(|l| l.precision.clone()).collect::<Vec<_>>(),
        col::LOGITS => limits.iter().map(|l| l.logits.name().to_string()).collect::<Vec<_>>(),
        col::ATTENTION => limits.iter().map(|l| l.attention.clone()).collect::<Vec<_>>(),
        col::BATCH => limits.iter().map(|l| l.batch as u64).collect::<Vec<_>>(),
        col::MAX_CONTEXT => limits.iter().map(|l| l.max_ok as u64).collect::<Vec<_>>(),
        col::FIRST_OOM => limits.iter().map(|l| l.first_oom as u64).collect::<Vec<_>>(),
        col::RESOLUTION => limits.iter().map(|l| l.resolution as u64).collect::<Vec<_>>(),
        col::TRIALS => limits.iter().map(|l| l.trials.len() as u64).collect::<Vec<_>>(),
        col::OOM_RETRY => limits.iter().map(|l| l.oom_retry).collect::<Vec<_>>(),
    )?)
}

fn pct(measured: u64, predicted: u64) -> Option<f64> {
    (predicted > 0 && measured > 0).then(|| (measured as f64 - predicted as f64) / predicted as f64 * 100.0)
}

/// The ledger, one row a step, in MiB. Steps of several sweeps may be stacked: the growth
/// against the previous row is taken within the same sweep (precision, logits, attention, batch).
pub fn prefill_table(steps: &[PrefillStep]) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&PrefillStep) -> u64| steps.iter().map(|st| mib(f(st))).collect::<Vec<f64>>();
    let same_sweep = |a: &PrefillStep, b: &PrefillStep| a.precision == b.precision && a.logits == b.logits && a.attention == b.attention && a.batch == b.batch;
    let growth: Vec<Option<f64>> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let prev = (i > 0 && same_sweep(&steps[i - 1], st)).then(|| &steps[i - 1]);
            match prev {
                Some(p) => (st.outcome.is_ok() && p.outcome.is_ok()).then(|| mib(st.held()) - mib(p.held())),
                None => st.outcome.is_ok().then(|| mib(st.held())),
            }
        })
        .collect();
    Ok(df!(
        col::PRECISION => steps.iter().map(|st| st.precision.clone()).collect::<Vec<_>>(),
        col::ATTENTION => steps.iter().map(|st| st.attention.clone()).collect::<Vec<_>>(),
        col::LOGITS => steps.iter().map(|st| st.logits.clone()).collect::<Vec<_>>(),
        col::SEQ => steps.iter().map(|st| st.seq as u64).collect::<Vec<_>>(),
        col::BATCH => steps.iter().map(|st| st.batch as u64).collect::<Vec<_>>(),
        col::OUTCOME => steps.iter().map(|st| st.outcome.as_str()).collect::<Vec<_>>(),
        col::BASE_MIB => m(&|st| st.base),
        col::HELD_MIB => m(&|st| st.held()),
        col::GROWTH_VS_PREVIOUS_MIB => growth,
        col::KV_MIB => m(&|st| st.kv_bytes),
        col::KV_MEASURED_MIB => m(&|st| st.kv_measured),
        col::KV_GQA_FORMULA_MIB => m(&|st| st.predicted_kv_gqa),
        col::KV_VS_GQA_PCT => steps.iter().map(|st| pct(st.kv_bytes, st.predicted_kv_gqa)).collect::<Vec<_>>(),
        col::KV_NAIVE_FORMULA_MIB => m(&|st| st.predicted_kv_naive),
        col::LOGITS_MIB => m(&|st| st.logits_bytes),
        col::LOGITS_FORMULA_MIB => m(&|st| st.predicted_logits),
        col::OTHER_MIB => steps.iter().map(|st| st.other() as f64 / crate::memory::MIB).collect::<Vec<_>>(),
        col::GROWTH_PER_1K_TOKENS_MIB => steps.iter().map(|st| st.outcome.is_ok().then(|| mib(st.held()) / (st.seq * st.batch) as f64 * 1024.0)).collect::<Vec<_>>(),
        col::RESERVED_MIB => m(&|st| st.reserved),
        col::PEAK_MIB => m(&|st| st.peak),
        col::TRANSIENT_MIB => m(&|st| st.transient()),
        col::RESERVED_PEAK_MIB => m(&|st| st.reserved_peak),
        col::OUTSIDE_POOL_MIB => steps.iter().map(|st| st.outside_pool.map(mib)).collect::<Vec<_>>(),
        col::SECONDS => steps.iter().map(|st| st.seconds).collect::<Vec<_>>(),
        col::PREFILL_TOK_S => steps.iter().map(|st| if st.outcome.is_ok() { (st.seq * st.batch) as f64 / st.seconds.max(1e-9) } else { f64::NAN }).collect::<Vec<_>>(),
        col::OOM_REQUEST_MIB => steps.iter().map(|st| st.oom_request.map(mib)).collect::<Vec<_>>(),
        col::OOM_DURING => steps.iter().map(|st| st.oom_during.clone()).collect::<Vec<_>>(),
    )?)
}

/// A reading during a long decode.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DecodePoint {
    pub precision: String,
    pub cache: String,
    pub tokens: usize,
    pub outcome: Outcome,
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

/// Fills a cache token by token (greedy decoding after a short prompt) up to the last
/// checkpoint, reading memory at each; `kind` picks the preallocated or the concatenating cache.
pub fn decode_sweep(s: &mut Session, model: &Qwen2, kind: CacheKind, prompt_len: usize, checkpoints: &[usize]) -> Result<Vec<DecodePoint>> {
    let max_len = checkpoints.iter().copied().max().unwrap_or(prompt_len).max(prompt_len + 1);
    let dtype_bytes = model.act_dtype().size_in_bytes();
    let per_token = estimate::kv_bytes_per_token(&model.cfg, dtype_bytes);
    let logits_bytes = estimate::logits_bytes_per_token(&model.cfg, dtype_bytes);
    let precision = model.precision.name().to_string();
    warm_up(model);
    s.probe.clear_pending();
    s.probe.empty_cache();
    let base = s.probe.snapshot("base").allocated;
    s.probe.reset_peak();
    s.console.step(format!("decode {precision} to {max_len} tokens, {} cache", kind.name()));
    let mut points = Vec::new();
    let run = guarded(&s.probe, &format!("decoding to {max_len} tokens ({} cache)", kind.name()), || {
        let mut cache = model.new_cache_of(kind, 1, max_len)?;
        let ids = random_ids(1, prompt_len, model.cfg.vocab_size, s.opts.seed, model.device())?;
        let mut logits = model.forward(&ids, &mut cache, Logits::Last)?;
        let mut t0 = Instant::now();
        let mut since = cache.len();
        for &at in checkpoints.iter().filter(|&&c| c > prompt_len) {
            s.check_stop()?;
            while cache.len() < at {
                let next = last_logits(&logits)?.argmax(candle_core::D::Minus1)?.unsqueeze(1)?;
                logits = model.forward(&next, &mut cache, Logits::Last)?;
            }
            model.device().synchronize()?;
            let tok_s = (cache.len() - since) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            let snap = s.probe.snapshot(&format!("{} {at}", kind.name()));
            let kv_tokens = if kind == CacheKind::Preallocated { cache.capacity() } else { cache.len() };
            points.push(DecodePoint {
                precision: precision.clone(),
                cache: kind.name().into(),
                tokens: cache.len(),
                outcome: Outcome::Ok,
                base,
                allocated: snap.allocated,
                reserved: snap.reserved,
                peak: snap.peak,
                kv_bytes: cache.bytes(),
                logits_bytes: tensor_bytes(&logits),
                predicted: base + per_token * kv_tokens as u64 + logits_bytes,
                tok_s,
            });
            s.probe.reset_peak();
            t0 = Instant::now();
            since = cache.len();
        }
        Ok(())
    });
    match run {
        Err(LabError::Interrupted) => return Err(LabError::Interrupted),
        Err(e) => points.push(DecodePoint { precision, cache: kind.name().into(), outcome: Outcome::from_error(&e), base, ..Default::default() }),
        Ok(()) => {}
    }
    for p in &points {
        s.say(format!(
            "decode ({} cache) at {:>6} tokens: {} — allocated {} (ledger {}), reserved {}, peak {}, KV {}, {:.1} tok/s",
            p.cache,
            p.tokens,
            p.outcome.as_str(),
            fmt_bytes(p.allocated),
            fmt_bytes(p.predicted),
            fmt_bytes(p.reserved),
            fmt_bytes(p.peak),
            fmt_bytes(p.kv_bytes),
            p.tok_s
        ));
    }
    Ok(points)
}

fn ledger_pct(p: &DecodePoint) -> Option<f64> {
    (p.allocated > 0).then(|| (p.predicted as f64 / p.allocated as f64 - 1.0) * 100.0)
}

pub fn decode_table(points: &[DecodePoint]) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&DecodePoint) -> u64| points.iter().map(|p| mib(f(p))).collect::<Vec<f64>>();
    Ok(df!(
        col::PRECISION => points.iter().map(|p| p.precision.clone()).collect::<Vec<_>>(),
        col::CACHE => points.iter().map(|p| p.cache.clone()).collect::<Vec<_>>(),
        col::TOKENS => points.iter().map(|p| p.tokens as u64).collect::<Vec<_>>(),
        col::OUTCOME => points.iter().map(|p| p.outcome.as_str()).collect::<Vec<_>>(),
        col::BASE_MIB => m(&|p| p.base),
        col::ALLOCATED_MIB => m(&|p| p.allocated),
        col::LEDGER_MIB => m(&|p| p.predicted),
        col::LEDGER_VS_ALLOCATED_PCT => points.iter().map(ledger_pct).collect::<Vec<_>>(),
        col::KV_MIB => m(&|p| p.kv_bytes),
        col::LOGITS_MIB => m(&|p| p.logits_bytes),
        col::RESERVED_MIB => m(&|p| p.reserved),
        col::CACHED_MIB => m(&|p| p.reserved.saturating_sub(p.allocated)),
        col::PEAK_MIB => m(&|p| p.peak),
        col::PEAK_ABOVE_ALLOCATED_MIB => m(&|p| p.peak.saturating_sub(p.allocated)),
        col::TOK_S => points.iter().map(|p| p.tok_s).collect::<Vec<_>>(),
    )?)
}

/// Everything the sweeps measured, before it becomes tables.
#[derive(Default)]
struct KvResults {
    prefill: Vec<PrefillStep>,
    limits: Vec<ContextLimit>,
    decode: Vec<DecodePoint>,
    batch: Vec<PrefillStep>,
    /// (precision, KV bytes per token and logits bytes per token in its activation dtype)
    per_token: Vec<(Precision, u64, u64, u64)>,
    /// The report's figures stand beside this run only for the report's model.
    report_model: bool,
    /// One diagnosis per sweep that ran out of memory.
    diagnoses: Vec<oom::Row>,
}

/// A prefill sweep, then the bisection when it ran out of memory; the trials join the steps.
fn prefill_with_limit(s: &mut Session, model: &Qwen2, cfg: &KvConfig, logits: Logits, r: &mut KvResults) -> Result<()> {
    let mut steps = prefill_sweep(s, model, &cfg.prefill_lengths(), logits, &mut r.diagnoses)?;
    if cfg.resolution > 0 {
        if let Some(limit) = find_limit(s, model, &steps, logits, cfg.resolution)? {
            s.say(format!(
                "max context on {} in {} ({} logits, {} attention): {} tokens fit, {} do not",
                s.card_name(),
                limit.precision,
                logits.name(),
                limit.attention,
                limit.max_ok,
                limit.first_oom
            ));
            steps.extend(limit.trials.iter().cloned());
            steps.sort_by_key(|st| st.seq);
            r.limits.push(limit);
        }
    }
    r.prefill.extend(steps);
    Ok(())
}

fn run_precision(s: &mut Session, cfg: &KvConfig, precision: Precision, r: &mut KvResults) -> Result<()> {
    s.check_stop()?;
    let mut lm = match s.load(precision) {
        Ok(lm) => lm,
        Err(LabError::Oom(o)) => {
            s.say(format!("{precision}: the model does not fit ({}); its sweeps are skipped", o.headline()));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let m = &lm.model;
    let dtype_bytes = m.act_dtype().size_in_bytes();
    let (kv, naive, lg) = (
        estimate::kv_bytes_per_token(&m.cfg, dtype_bytes),
        estimate::naive_kv_bytes_per_token(&m.cfg, dtype_bytes),
        estimate::logits_bytes_per_token(&m.cfg, dtype_bytes),
    );
    r.per_token.push((precision, kv, naive, lg));
    r.report_model = crate::reference::is_report_model(&m.cfg);
    s.say(format!(
        "\n{precision}: weights loaded, allocated {}; KV {kv} B/token ({}), the report's formula {naive} B/token",
        fmt_bytes(s.probe.snapshot("loaded").allocated),
        m.act_dtype().as_str(),
    ));
    if cfg.sweeps.contains(&Sweep::Prefill) {
        for &logits in &cfg.logits {
            prefill_with_limit(s, &lm.model, cfg, logits, r)?;
        }
    }
    if cfg.sweeps.contains(&Sweep::Decode) {
        let checkpoints = doubling(256, cfg.decode_to);
        for kind in [CacheKind::Preallocated, CacheKind::Concat] {
            let points = decode_sweep(s, &lm.model, kind, 128, &checkpoints)?;
            r.decode.extend(points);
        }
    }
    if cfg.sweeps.contains(&Sweep::Batch) {
        let steps = batch_sweep(s, &lm.model, cfg.seq, cfg.max_batch, Logits::All, &mut r.diagnoses)?;
        r.batch.extend(steps);
    }
    if cfg.sweeps.contains(&Sweep::Naive) {
        lm.model.attention = AttentionMode::Naive;
        prefill_with_limit(s, &lm.model, cfg, Logits::All, r)?;
    }
    Ok(())
}

impl KvResults {
    fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for &(p, kv, naive, lg) in &self.per_token {
            let name = p.name();
            let bounded_all = |st: &&PrefillStep| st.precision == name && st.attention == "bounded" && st.logits == "all" && st.outcome.is_ok();
            // The largest step that fit: the per-token figures least disturbed by fixed overheads.
            if let Some(st) = self.prefill.iter().filter(bounded_all).max_by_key(|st| st.seq * st.batch) {
                let tokens = (st.seq * st.batch) as f64;
                out.push(
                    Finding::new(format!("{p} KV cache per token"), "B", Some(st.kv_measured as f64 / tokens))
                        .predicted(kv as f64)
                        .report((p == Precision::Bf16).then_some(naive as f64))
                        .note("prediction: GQA 2·layers·kv_heads·head_dim·bytes; the report's formula 2·layers·hidden·bytes ignores GQA"),
                );
                out.push(
                    Finding::new(format!("{p} memory per 1k tokens, all logits kept"), "MiB", Some(mib(st.held()) / tokens * 1024.0))
                        .predicted(mib((kv + lg) * 1024))
                        .report((self.report_model && p == Precision::Bf16).then_some(report::KV_GROWTH_PER_1K_MIB))
                        .note(format!("at {} tokens: KV cache + every position's logits", st.seq)),
                );
            }
            for l in self.limits.iter().filter(|l| l.precision == name) {
                let report_seq = (self.report_model && p == Precision::Bf16 && l.logits == Logits::All && l.attention == "bounded").then_some(report::KV_FIRST_OOM_SEQ);
                out.push(
                    Finding::new(format!("{p} first length that runs out of memory, {} logits, {} attention", l.logits.name(), l.attention), "tokens", Some(l.first_oom as f64))
                        .report(report_seq)
                        .note(format!("longest that fits: {} tokens (bisection to {})", l.max_ok, l.resolution)),
                );
            }
            let worst = self.decode.iter().filter(|d| d.precision == name).filter_map(ledger_pct).fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| if v.abs() > m.abs() { v } else { m })));
            if let Some(w) = worst {
                out.push(Finding::new(format!("{p} decode: ledger vs allocated, worst"), "%", Some(w)).predicted(0.0).note("weights + cache + one step's logits against the allocator's count"));
            }
        }
        out
    }
}

impl Stage for KvCache {
    const NAME: &'static str = "kv";
    const TITLE: &'static str = "Stage 2 — the KV cache / KV Cache 的线性增长";
    const ABOUT: &'static str = "Stage 2: the KV cache — prefill, decode and batch sweeps with a byte ledger, and the longest context that fits";
    const INTRO: &'static str = "固定 batch = 1,序列长度从 1k 翻倍直到 OOM,再二分找到最长上下文;每一步把显存拆成 KV cache、logits 和其余部分。<br>Batch 1, the sequence doubled from 1k until OOM, then bisection to the longest context that fits; each step's bytes are attributed to the KV cache, the logits and the rest. The report (RTX 4090): \"KV Cache 增量\" 352.50 MB per added 1k tokens, OOM at 16,384 tokens; its formula 2 × layers × hidden × seq × batch × bytes ignores grouped-query attention (Qwen2.5-7B: 4 KV heads of 128, 57,344 B per token in BF16, 7× less). Most of its growth is logits: <code>model(input_ids)</code> keeps every position's 152,064 logits (304,128 B per token in BF16).";
    type Config = KvConfig;

    fn cpu_config() -> KvConfig {
        // The tiny model on CPU: long enough to show linear growth, short enough for a first run.
        KvConfig { max: 4096, decode_to: 1024, max_batch: 8, ..Default::default() }
    }

    fn run(s: &mut Session, cfg: &KvConfig) -> Result<StageOutput> {
        if cfg.lengths.is_none() && cfg.start > cfg.max {
            return Err(crate::error::LabError::out_of_range("--start", cfg.start, format!("at most --max ({})", cfg.max)));
        }
        let mut r = KvResults::default();
        for &p in &cfg.precisions {
            run_precision(s, cfg, p, &mut r)?;
        }
        let mut out = StageOutput::default();
        if !r.prefill.is_empty() {
            out.table(PREFILL_TABLE, prefill_table(&r.prefill)?);
        }
        if !r.limits.is_empty() {
            out.table(LIMIT_TABLE, limit_table(&r.limits, &s.card_name())?);
        }
        if !r.decode.is_empty() {
            out.table(DECODE_TABLE, decode_table(&r.decode)?);
        }
        if !r.batch.is_empty() {
            out.table(BATCH_TABLE, prefill_table(&r.batch)?);
        }
        if !r.diagnoses.is_empty() {
            out.table(OOM_TABLE, oom::table(&r.diagnoses)?);
        }
        out.findings = r.findings();
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![
            View {
                name: "prefill",
                table: PREFILL_TABLE,
                caption: "Stage 2 — prefill ledger (MiB)",
                columns: &[SEQ, OUTCOME, HELD_MIB, GROWTH_PER_1K_TOKENS_MIB, KV_MEASURED_MIB, KV_GQA_FORMULA_MIB, KV_NAIVE_FORMULA_MIB, LOGITS_MIB, OTHER_MIB, TRANSIENT_MIB, PEAK_MIB, RESERVED_PEAK_MIB, OUTSIDE_POOL_MIB, PREFILL_TOK_S, OOM_REQUEST_MIB],
                group_by: &[PRECISION, LOGITS, ATTENTION],
                chart: Some(charts::kv_prefill),
                explain: "KV + 全部位置的 logits = 353.0 MiB / 1k tokens in BF16 (57,344 + 304,128 B per token): the report's 352.5 MB. Held − KV − logits is \"other\"; the peak above what stays held is transient (attention scores, MLP activations). Stock candle-transformers' attention (naive) repeats K/V per head and materialises the whole score matrix, so it runs out of memory far earlier.",
            },
            View {
                name: "limit",
                table: LIMIT_TABLE,
                caption: "Stage 2 — the longest context that fits / 最长上下文 (tokens)",
                columns: &[CARD, PRECISION, LOGITS, ATTENTION, BATCH, MAX_CONTEXT, FIRST_OOM, RESOLUTION, TRIALS, OOM_RETRY],
                group_by: &[],
                chart: None,
                explain: "Without every position's logits (what generation needs) the limit moves from about 24k to about 33.5k tokens on an RTX 4090: the peak then comes from the MLP's activations during prefill, not the cache. Q4 frees about 10 GiB of weights but computes in F32, so its cache and logits are twice BF16's. oom_retry: a failed request was retried once after the pool gave back what nothing uses, as PyTorch retries after releasing its cache; without it candle's pool, which keeps freed blocks until a synchronisation, stops at about 16k. 失败的分配在整理内存池后重试一次(与 PyTorch 相同)。",
            },
            View {
                name: "decode",
                table: DECODE_TABLE,
                caption: "Stage 2 — a long decode: preallocated vs concatenating cache (MiB)",
                columns: &[CACHE, TOKENS, OUTCOME, ALLOCATED_MIB, LEDGER_MIB, LEDGER_VS_ALLOCATED_PCT, KV_MIB, RESERVED_MIB, PEAK_ABOVE_ALLOCATED_MIB, TOK_S],
                group_by: &[PRECISION],
                chart: Some(charts::kv_decode),
                explain: "The preallocated cache takes its full size at once and never moves; the concatenating cache grows by one token's bytes per step but copies the whole cache every step, so its peak rises above what it holds and the pool keeps more reserved. The ledger (weights + cache + one step's logits) sums to the allocated memory.",
            },
            View {
                name: "batch",
                table: BATCH_TABLE,
                caption: "Stage 2 — batch sweep (MiB, all logits kept)",
                columns: &[BATCH, SEQ, OUTCOME, HELD_MIB, KV_MEASURED_MIB, KV_GQA_FORMULA_MIB, LOGITS_MIB, TRANSIENT_MIB, PEAK_MIB, PREFILL_TOK_S],
                group_by: &[PRECISION],
                chart: None,
                explain: "Batch multiplies the cache and the logits alike: at a fixed length, memory grows linearly in the batch until the card is full.",
            },
            oom::view("oom", OOM_TABLE, "Stage 2 — why each sweep ran out of memory / OOM 诊断 (MiB)"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_lengths() {
        assert_eq!(doubling(1024, 9000), vec![1024, 2048, 4096, 8192]);
    }

    #[test]
    fn ledger_arithmetic() {
        let st = PrefillStep { base: 100, after: 1100, peak: 1500, kv_measured: 300, logits_bytes: 600, ..Default::default() };
        assert_eq!(st.held(), 1000);
        assert_eq!(st.other(), 100);
        assert_eq!(st.transient(), 400);
        let t = prefill_table(&[st]).unwrap();
        assert_eq!(t.height(), 1);
        assert!(t.column(col::GROWTH_PER_1K_TOKENS_MIB).is_ok());
    }

    #[test]
    fn growth_restarts_at_each_sweep() {
        let step = |logits: &str, seq: usize, held: u64| PrefillStep { logits: logits.into(), seq, batch: 1, after: held, ..Default::default() };
        let t = prefill_table(&[step("all", 1, 10 << 20), step("all", 2, 25 << 20), step("last", 1, 4 << 20)]).unwrap();
        let g: Vec<Option<f64>> = t.column(col::GROWTH_VS_PREVIOUS_MIB).unwrap().f64().unwrap().iter().collect();
        assert_eq!(g, vec![Some(10.0), Some(15.0), Some(4.0)]);
    }

    #[test]
    fn flags_given_go_over_the_device_defaults() {
        let stage = crate::stage::register::<KvCache>();
        let m = stage.command().get_matches_from(["kv", "--max", "2048"]);
        let cpu = stage.config_from(&m, false).unwrap();
        assert_eq!((cpu["max"].as_u64(), cpu["decode_to"].as_u64(), cpu["max_batch"].as_u64()), (Some(2048), Some(1024), Some(8)));
        let gpu = stage.config_from(&m, true).unwrap();
        assert_eq!((gpu["max"].as_u64(), gpu["decode_to"].as_u64(), gpu["max_batch"].as_u64()), (Some(2048), Some(4096), Some(256)));
    }

    #[test]
    fn config_defaults_are_the_flags_defaults() {
        use clap::{Args, FromArgMatches};
        let cmd = KvConfig::augment_args(clap::Command::new("kv"));
        let parsed = KvConfig::from_arg_matches(&cmd.get_matches_from(["kv"])).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), serde_json::to_value(KvConfig::default()).unwrap());
        let cmd = KvConfig::augment_args(clap::Command::new("kv"));
        let parsed = KvConfig::from_arg_matches(&cmd.get_matches_from(["kv", "--precisions", "q4", "--sweeps", "prefill,naive", "--logits", "last"])).unwrap();
        assert_eq!(parsed.precisions, vec![Precision::Q4]);
        assert_eq!(parsed.sweeps, vec![Sweep::Prefill, Sweep::Naive]);
        assert_eq!(parsed.logits, vec![Logits::Last]);
    }
}
