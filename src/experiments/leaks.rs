//! Stage 3, leaks: the related articles' three causes of inference memory that grows until it
//! overflows, each as a pair — one run that leaks and one that does not — watched by the
//! `MemoryMonitor`:
//! - KV caches kept alive across requests (a conversation history holding `past_key_values`) vs
//!   dropped after each request;
//! - a batch larger than the card vs the largest batch the ledger says fits (the overflow ends in
//!   an OOM, diagnosed);
//! - a forward pass whose weights are trainable `Var`s (candle keeps each output's graph alive,
//!   as PyTorch without `torch.no_grad()`), its outputs kept in a list, vs plain tensors.
//! The monitor flags growth of allocated bytes above a threshold between marks; reserved memory
//! that only looks like a leak is shown and not flagged.

use crate::limits;
use crate::error::{LabError, Result};
use crate::estimate::{self, Workload};
use crate::experiments::oom;
use crate::hw::Card;
use crate::memory::{fmt_bytes, guarded, mib, tensor_bytes, Category, Held, MemoryMonitor};
use crate::model::qwen2::last_logits;
use crate::model::{Logits, Precision, Qwen2};
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use candle_core::Tensor;
use polars::prelude::*;
use serde::{Deserialize, Serialize};

pub struct Leaks;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Demo {
    /// KV caches kept across requests vs dropped
    Kv,
    /// A batch that overflows vs the largest batch the ledger says fits
    Batch,
    /// Trainable weights (autograd graph kept) vs plain tensors
    Autograd,
}

impl Demo {
    fn name(self) -> &'static str {
        match self {
            Self::Kv => "kv_cache_kept",
            Self::Batch => "batch_overflow",
            Self::Autograd => "autograd_graph_kept",
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct LeaksConfig {
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = LeaksConfig::default().demos)]
    pub demos: Vec<Demo>,
    #[arg(long, value_enum, default_value_t = LeaksConfig::default().precision)]
    pub precision: Precision,
    /// Requests (kv demo) and forward passes (autograd demo) per run
    #[arg(long, default_value_t = LeaksConfig::default().requests, value_parser = limits::count(limits::MAX_REPEATS))]
    pub requests: usize,
    /// Prompt length of each request / forward pass
    #[arg(long, default_value_t = LeaksConfig::default().prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt: usize,
    /// Tokens generated per request (kv demo)
    #[arg(long, default_value_t = LeaksConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// Tokens of each forward pass of the autograd demo (its trainable run keeps every layer's activations during the pass)
    #[arg(long, default_value_t = LeaksConfig::default().graph_prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub graph_prompt: usize,
    /// Sequence length of the batch demo
    #[arg(long, default_value_t = LeaksConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// Growth of allocated memory between two marks above this is flagged (the article: 100 MB)
    #[arg(long, default_value_t = LeaksConfig::default().threshold_mib, value_parser = limits::mib_f64)]
    pub threshold_mib: f64,
    /// A slow leak: three consecutive growths each above this are flagged too, MiB
    #[arg(long, default_value_t = LeaksConfig::default().noise_mib, value_parser = limits::mib_f64)]
    pub noise_mib: f64,
    /// Batch demo without an emulated card: the capacity given above the weights, MiB (0: the device's own)
    #[arg(long, default_value_t = LeaksConfig::default().batch_room_mib, value_parser = limits::mib_f64)]
    pub batch_room_mib: f64,
}

impl Default for LeaksConfig {
    fn default() -> Self {
        Self {
            demos: vec![Demo::Kv, Demo::Batch, Demo::Autograd],
            precision: Precision::Bf16,
            requests: 4,
            prompt: 2048,
            new_tokens: 16,
            graph_prompt: 256,
            seq: 1024,
            threshold_mib: 100.0,
            noise_mib: 1.0,
            batch_room_mib: 0.0,
        }
    }
}

pub mod col {
    pub const DEMO: &str = "demo";
    pub const VARIANT: &str = "variant";
    pub const MARK: &str = "mark";
    pub const OUTCOME: &str = "outcome";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const RESERVED_MIB: &str = "reserved_mib";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const GROWTH_MIB: &str = "growth_mib";
    pub const RESERVED_GROWTH_MIB: &str = "reserved_growth_mib";
    pub const KV_CACHE_MIB: &str = "kv_cache_mib";
    pub const LOGITS_MIB: &str = "logits_mib";
    pub const UNATTRIBUTED_MIB: &str = "unattributed_mib";
    pub const FLAGGED: &str = "flagged";
    // leaks_summary
    pub const FLAGGED_STEPS: &str = "flagged_steps";
    pub const SUSTAINED: &str = "sustained";
    pub const STEPS: &str = "steps";
    pub const GROWTH_PER_STEP_MIB: &str = "growth_per_step_mib";
    pub const PREDICTED_PER_STEP_MIB: &str = "predicted_per_step_mib";
    pub const MAIN_CATEGORY: &str = "main_category";
    pub const VERDICT: &str = "verdict";
    pub const NOTE: &str = "note";
}

/// The batch demo's second measurement: the ledger's cost of one more sequence comes from 1 → PROBE.
const PROBE: usize = 4;
/// The ledger's batch is never taken above this (twice it is the overflow).
const MAX_BATCH: usize = 1024;

pub const MARKS_TABLE: &str = "leaks_marks";
pub const SUMMARY_TABLE: &str = "leaks_summary";
pub const OOM_TABLE: &str = "leaks_oom";

/// One run of a demo, as the monitor saw it.
pub struct Run {
    pub demo: Demo,
    pub variant: &'static str,
    /// Whether this run is the one meant to leak (or overflow).
    pub leaks: bool,
    pub monitor: MemoryMonitor,
    /// Outcome per mark (an OOM ends a run).
    pub outcomes: Vec<Outcome>,
    /// What the lab expects each step to leave behind, in bytes (0 for a clean run).
    pub predicted_per_step: Option<u64>,
    pub note: String,
}

impl Run {
    fn new(demo: Demo, variant: &'static str, leaks: bool, cfg: &LeaksConfig) -> Self {
        let mut monitor = MemoryMonitor::new((cfg.threshold_mib * crate::memory::MIB) as u64);
        monitor.noise = (cfg.noise_mib * crate::memory::MIB) as u64;
        Self { demo, variant, leaks, monitor, outcomes: Vec::new(), predicted_per_step: None, note: String::new() }
    }

    fn mark(&mut self, s: &Session, label: &str, held: Held, outcome: Outcome) {
        self.monitor.mark(&s.probe, label, held);
        self.outcomes.push(outcome);
    }

    /// Flagged: a growth above the threshold, a sustained growth, or an OOM.
    pub fn flagged(&self) -> bool {
        self.monitor.flagged() || self.outcomes.contains(&Outcome::Oom)
    }

    /// Median allocated growth per step (a one-time allocation of the runtime does not move it).
    pub fn growth_per_step(&self) -> Option<f64> {
        let mut g: Vec<i64> = self.monitor.growth().iter().map(|x| x.allocated).collect();
        g.sort();
        match g.len() {
            0 => None,
            n if n % 2 == 1 => Some(g[n / 2] as f64),
            n => Some((g[n / 2 - 1] + g[n / 2]) as f64 / 2.0),
        }
    }
}

fn random_ids(s: &Session, model: &Qwen2, batch: usize, seq: usize, salt: u64) -> Result<Tensor> {
    crate::experiments::kv::random_ids(batch, seq, model.cfg.vocab_size, s.opts.seed ^ salt, model.device())
}

/// Requests of a prompt and a few generated tokens, each with its own cache; the leaky run keeps
/// every cache in a history, the clean one drops it.
fn kv_pair(s: &mut Session, model: &Qwen2, cfg: &LeaksConfig) -> Result<Vec<Run>> {
    let weights = model.weight_bytes();
    let len = cfg.prompt + cfg.new_tokens;
    let per_request = estimate::kv_bytes_per_token(&model.cfg, model.act_dtype().size_in_bytes()) * len as u64;
    let mut runs = Vec::new();
    for (variant, keep) in [("caches kept", true), ("caches dropped", false)] {
        s.console.step(format!("leaks: {} requests, {variant}", cfg.requests));
        let mut run = Run::new(Demo::Kv, variant, keep, cfg);
        run.predicted_per_step = Some(if keep { per_request } else { 0 });
        run.note = format!("each request: {} prompt + {} generated tokens, a cache of {}", cfg.prompt, cfg.new_tokens, fmt_bytes(per_request));
        let mut history = Vec::new();
        let request = |r: usize| {
            guarded(&s.probe, &format!("request {r}"), || {
                let mut cache = model.new_cache(1, len)?;
                let mut logits = model.forward(&random_ids(s, model, 1, cfg.prompt, r as u64)?, &mut cache, Logits::Last)?;
                for _ in 0..cfg.new_tokens {
                    let next = last_logits(&logits)?.argmax(candle_core::D::Minus1)?.unsqueeze(1)?;
                    logits = model.forward(&next, &mut cache, Logits::Last)?;
                }
                model.device().synchronize()?;
                Ok(cache)
            })
        };
        // One request first, dropped: buffers the runtime keeps for good are not a leak.
        drop(request(usize::MAX)?);
        run.mark(s, "start", Held::of(&[(Category::Weights, weights)]), Outcome::Ok);
        for r in 0..cfg.requests {
            s.check_stop()?;
            let step = request(r);
            let outcome = match step {
                Ok(cache) => {
                    if keep {
                        history.push(cache);
                    }
                    Outcome::Ok
                }
                Err(e @ LabError::Oom(_)) => Outcome::from_error(&e),
                Err(e) => return Err(e),
            };
            let kv: u64 = history.iter().map(|c| c.bytes()).sum();
            run.mark(s, &format!("request {}", r + 1), Held::of(&[(Category::Weights, weights), (Category::KvCache, kv)]), outcome.clone());
            if outcome == Outcome::Oom {
                break;
            }
        }
        drop(history);
        runs.push(run);
    }
    Ok(runs)
}

/// One prefill of `batch` × `seq` (last-token logits) with its own cache, read after.
fn prefill(s: &Session, model: &Qwen2, batch: usize, seq: usize) -> Result<(u64, u64)> {
    guarded(&s.probe, &format!("prefill of {batch} × {seq} tokens"), || {
        let mut cache = model.new_cache(batch, seq)?;
        let logits = model.forward(&random_ids(s, model, batch, seq, 7)?, &mut cache, Logits::Last)?;
        model.device().synchronize()?;
        Ok((cache.bytes(), tensor_bytes(&logits)))
    })
}

/// The batch pair: one sequence measured, the largest batch that the measured bytes per sequence
/// say fits, then twice that. The overflow's OOM is diagnosed.
fn batch_pair(s: &mut Session, model: &Qwen2, cfg: &LeaksConfig, diagnoses: &mut Vec<oom::Row>) -> Result<Vec<Run>> {
    let weights = model.weight_bytes();
    // On CPU the capacity is the counting allocator's: without it (a notebook kernel) nothing
    // would stop an oversized batch but the host itself.
    if !s.device.is_cuda() && !crate::memory::host::counting() {
        s.say("batch demo skipped: on CPU it needs the lab's counting allocator (the vram-lab binary), which this process lacks");
        return Ok(Vec::new());
    }
    // Without an emulated card, a temporary one: the weights and `batch_room_mib` (CPU tests).
    let temporary = s.probe.card().is_none() && cfg.batch_room_mib > 0.0;
    if temporary {
        let base = s.probe.snapshot("base").allocated;
        let card = Card::parse(&format!("{}MiB", mib(base) + cfg.batch_room_mib))?;
        s.probe.emulate(&card)?;
    }
    let runs = batch_runs(s, model, cfg, weights, diagnoses);
    if temporary {
        s.probe.stop_emulating();
    }
    runs
}

fn batch_runs(s: &mut Session, model: &Qwen2, cfg: &LeaksConfig, weights: u64, diagnoses: &mut Vec<oom::Row>) -> Result<Vec<Run>> {
    s.console.step(format!("leaks: batches of 1 and {PROBE} sequences of {} tokens, measured", cfg.seq));
    let _ = prefill(s, model, 1, cfg.seq.min(16)); // runtime workspaces into the base
    // What the device had to give for `b` sequences: on a GPU what the pool mapped (it maps more
    // than it hands out during a forward: stage 2's OOMs come from that), on CPU the heap's peak.
    let probe = |s: &Session, b: usize| -> Result<(u64, crate::memory::Snapshot, crate::memory::Snapshot)> {
        s.probe.clear_pending();
        s.probe.empty_cache();
        s.probe.reset_peak();
        let base = s.probe.snapshot("base");
        prefill(s, model, b, cfg.seq)?;
        let after = s.probe.snapshot("after");
        let need = if s.device.is_cuda() { after.reserved_peak.saturating_sub(base.reserved) } else { after.peak.saturating_sub(base.allocated) };
        Ok((need, base, after))
    };
    let (one_need, base, one) = probe(s, 1)?;
    let (probe_need, _, _) = probe(s, PROBE)?;
    // The ledger: the first sequence, then the cost of each one more (from 1 to PROBE sequences).
    let per_seq = (probe_need.saturating_sub(one_need) / (PROBE as u64 - 1)).max(one_need / 2).max(1);
    let measured = oom::Measured::from_step(base.allocated, one.peak, one.allocated, one.reserved_peak, cfg.seq);
    let capacity = base.pool_capacity().unwrap_or(u64::MAX);
    let free = capacity.saturating_sub(base.reserved.max(base.allocated));
    let fit = if free < one_need { 1 } else { 1 + ((free - one_need) / per_seq) as usize }.min(MAX_BATCH);
    s.say(format!(
        "batch demo: {} tokens a sequence; the first needs {}, each one more {} (from batches of 1 and {PROBE}); {} free for the pool → the ledger's largest batch {fit}",
        cfg.seq,
        fmt_bytes(one_need),
        fmt_bytes(per_seq),
        fmt_bytes(free)
    ));
    let mut runs = Vec::new();
    for (variant, batch, over) in [("twice the ledger's batch", fit * 2, true), ("the ledger's batch", fit, false)] {
        s.check_stop()?;
        s.console.step(format!("leaks: prefill batch {batch} × {}", cfg.seq));
        let mut run = Run::new(Demo::Batch, variant, over, cfg);
        run.predicted_per_step = None;
        run.note = format!("batch {batch} × {} tokens; the ledger: {} for the first sequence, {} for each one more, {} free for the pool", cfg.seq, fmt_bytes(one_need), fmt_bytes(per_seq), fmt_bytes(free));
        s.probe.clear_pending();
        s.probe.reset_peak();
        run.mark(s, "start", Held::of(&[(Category::Weights, weights)]), Outcome::Ok);
        let outcome = match prefill(s, model, batch, cfg.seq) {
            Ok(_) => Outcome::Ok,
            Err(LabError::Oom(r)) => {
                let w = Workload { precision: model.precision, seq: cfg.seq, batch, logits: Logits::Last };
                let kv = estimate::kv_bytes_per_token(&model.cfg, model.act_dtype().size_in_bytes()) * (batch * cfg.seq) as u64;
                let held = Held::of(&[(Category::Weights, weights), (Category::KvCache, kv)]);
                let context = format!("{} batch {batch} × {}", model.precision, cfg.seq);
                diagnoses.extend(oom::diagnose(s, &context, &r, &model.cfg, &w, &held, measured));
                s.say(format!("batch {batch}: {}", r.headline()));
                Outcome::Oom
            }
            Err(e) => return Err(e),
        };
        // The peak is what this run needed; the mark after holds only what stayed.
        let peak = s.probe.snapshot("peak").peak;
        run.mark(s, &format!("batch {batch}"), Held::of(&[(Category::Weights, weights)]), outcome);
        run.note.push_str(&format!("; peak {}", fmt_bytes(peak)));
        runs.push(run);
    }
    Ok(runs)
}

/// Forward passes whose last-token logits are kept in a list: with plain weights each keeps a
/// row of logits; with trainable weights each keeps its graph. Returns the model, trainable.
fn autograd_pair(s: &mut Session, model: Qwen2, cfg: &LeaksConfig) -> Result<(Vec<Run>, Qwen2)> {
    let plain = autograd_run(s, &model, cfg, false)?;
    s.console.step("leaks: weights made trainable (Var)");
    let model = model.into_trainable()?;
    let trainable = autograd_run(s, &model, cfg, true)?;
    Ok((vec![plain, trainable], model))
}

/// One run of the autograd pair on `m`, whose weights are trainable or not.
fn autograd_run(s: &mut Session, m: &Qwen2, cfg: &LeaksConfig, trainable: bool) -> Result<Run> {
    let weights = m.weight_bytes();
    let variant = if trainable { "trainable weights" } else { "plain weights" };
    s.console.step(format!("leaks: {} forward passes, outputs kept, {} weights", cfg.requests, if trainable { "trainable" } else { "plain" }));
    let mut run = Run::new(Demo::Autograd, variant, trainable, cfg);
    let mut kept: Vec<Tensor> = Vec::new();
    let forward = |f: usize| {
        guarded(&s.probe, &format!("forward {f}"), || {
            let mut cache = m.new_cache(1, cfg.graph_prompt)?;
            let logits = m.forward(&random_ids(s, m, 1, cfg.graph_prompt, 100u64.wrapping_add(f as u64))?, &mut cache, Logits::Last)?;
            m.device().synchronize()?;
            Ok(logits)
        })
    };
    // Warm-up, as in the kv pair; an OOM here is this run's result, not the stage's end.
    let warm = forward(usize::MAX);
    run.mark(s, "start", Held::of(&[(Category::Weights, weights)]), Outcome::Ok);
    if let Err(e) = warm {
        if !matches!(e, LabError::Oom(_)) {
            return Err(e);
        }
        run.mark(s, "warm-up", Held::of(&[(Category::Weights, weights)]), Outcome::Oom);
    }
    let mut peaks = Vec::new();
    for f in 0..cfg.requests {
        if run.outcomes.contains(&Outcome::Oom) {
            break;
        }
        s.check_stop()?;
        s.probe.reset_peak();
        let out = forward(f);
        peaks.push(s.probe.snapshot("peak").peak);
        let outcome = match out {
            Ok(logits) => {
                kept.extend(logits);
                Outcome::Ok
            }
            Err(e @ LabError::Oom(_)) => Outcome::from_error(&e),
            Err(e) => return Err(e),
        };
        run.mark(s, &format!("forward {}", f + 1), Held::of(&[(Category::Weights, weights), (Category::Logits, tensor_bytes(&kept))]), outcome.clone());
        if outcome == Outcome::Oom {
            break;
        }
    }
    let act = m.act_dtype().size_in_bytes() as u64;
    let logits_row = estimate::logits_bytes_per_token(&m.cfg, act as usize);
    // candle's fused rms_norm records no backward op, so the graph an output keeps starts at
    // the final norm: its output (every position), the last row copied out, the logits.
    let graph = (cfg.graph_prompt as u64 + 1) * m.cfg.hidden_size as u64 * act;
    run.predicted_per_step = Some(if trainable { graph + logits_row } else { logits_row });
    let peak = peaks.iter().max().map(|&p| fmt_bytes(p.saturating_sub(weights))).unwrap_or_else(|| "—".into());
    run.note = if trainable {
        format!(
            "{} tokens a forward; during it the residual stream keeps every layer's activations alive for a backward pass (peak {peak} above the weights); a kept output holds its graph back to the final rms_norm (fused, no backward op): {} of hidden states + {} of logits",
            cfg.graph_prompt,
            fmt_bytes(graph),
            fmt_bytes(logits_row)
        )
    } else {
        format!("{} tokens a forward (peak {peak} above the weights); each kept output is one row of logits ({})", cfg.graph_prompt, fmt_bytes(logits_row))
    };
    Ok(run)
}

fn marks_table(runs: &[Run]) -> Result<DataFrame> {
    let mut demo = Vec::new();
    let mut variant = Vec::new();
    let mut mark = Vec::new();
    let mut outcome = Vec::new();
    let mut peak = Vec::new();
    let (mut alloc, mut res, mut growth, mut rgrowth, mut kv, mut lg, mut unattr, mut flagged) = (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for r in runs {
        let g = r.monitor.growth();
        for (i, m) in r.monitor.marks.iter().enumerate() {
            demo.push(r.demo.name());
            variant.push(r.variant);
            mark.push(m.label.clone());
            outcome.push(r.outcomes.get(i).map(|o| o.as_str()).unwrap_or_default());
            alloc.push(mib(m.snapshot.allocated));
            res.push(mib(m.snapshot.reserved));
            peak.push(mib(m.snapshot.peak));
            kv.push(mib(m.held.get(Category::KvCache)));
            lg.push(mib(m.held.get(Category::Logits)));
            let prev = i.checked_sub(1).map(|j| &g[j]);
            growth.push(prev.map(|x| x.allocated as f64 / crate::memory::MIB));
            rgrowth.push(prev.map(|x| x.reserved as f64 / crate::memory::MIB));
            unattr.push(prev.map(|x| x.unattributed as f64 / crate::memory::MIB));
            flagged.push(prev.map(|x| x.flagged).unwrap_or(false) || r.outcomes.get(i) == Some(&Outcome::Oom));
        }
    }
    Ok(df!(
        col::DEMO => demo, col::VARIANT => variant, col::MARK => mark, col::OUTCOME => outcome,
        col::ALLOCATED_MIB => alloc, col::PEAK_MIB => peak, col::RESERVED_MIB => res, col::GROWTH_MIB => growth, col::RESERVED_GROWTH_MIB => rgrowth,
        col::KV_CACHE_MIB => kv, col::LOGITS_MIB => lg, col::UNATTRIBUTED_MIB => unattr, col::FLAGGED => flagged,
    )?)
}

/// What grew in the steps that grew most (or "oom").
fn main_cause(r: &Run) -> &'static str {
    if r.outcomes.contains(&Outcome::Oom) {
        return "oom";
    }
    if !r.flagged() {
        return "";
    }
    r.monitor.growth().iter().max_by_key(|g| g.allocated).and_then(|g| g.main_cause()).unwrap_or("")
}

fn verdict(r: &Run) -> &'static str {
    match (r.flagged(), r.leaks) {
        (true, true) => "flagged, as expected",
        (false, false) => "passed, as expected",
        (true, false) => "flagged, NOT expected",
        (false, true) => "passed, NOT expected",
    }
}

fn summary_table(runs: &[Run]) -> Result<DataFrame> {
    Ok(df!(
        col::DEMO => runs.iter().map(|r| r.demo.name()).collect::<Vec<_>>(),
        col::VARIANT => runs.iter().map(|r| r.variant).collect::<Vec<_>>(),
        col::STEPS => runs.iter().map(|r| r.monitor.growth().len() as u64).collect::<Vec<_>>(),
        col::FLAGGED_STEPS => runs.iter().map(|r| r.monitor.leaks().len() as u64).collect::<Vec<_>>(),
        col::SUSTAINED => runs.iter().map(|r| r.monitor.sustained().is_some()).collect::<Vec<_>>(),
        col::GROWTH_PER_STEP_MIB => runs.iter().map(|r| r.growth_per_step().map(|b| b / crate::memory::MIB)).collect::<Vec<_>>(),
        col::PREDICTED_PER_STEP_MIB => runs.iter().map(|r| r.predicted_per_step.map(mib)).collect::<Vec<_>>(),
        col::RESERVED_GROWTH_MIB => runs.iter().map(|r| {
            let m = &r.monitor.marks;
            m.first().zip(m.last()).map(|(a, b)| (b.snapshot.reserved as f64 - a.snapshot.reserved as f64) / crate::memory::MIB)
        }).collect::<Vec<_>>(),
        col::MAIN_CATEGORY => runs.iter().map(|r| main_cause(r)).collect::<Vec<_>>(),
        col::VERDICT => runs.iter().map(verdict).collect::<Vec<_>>(),
        col::NOTE => runs.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

fn findings(runs: &[Run]) -> Vec<Finding> {
    runs.iter()
        .filter(|r| r.demo != Demo::Batch)
        .map(|r| {
            Finding::new(format!("{} ({}): allocated growth per step", r.demo.name(), r.variant), "MiB", r.growth_per_step().map(|b| b / crate::memory::MIB))
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
        LeaksConfig { precision: Precision::F32, prompt: 256, new_tokens: 8, seq: 128, threshold_mib: 0.1, noise_mib: 0.01, batch_room_mib: 48.0, ..Default::default() }
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
            Err(LabError::Oom(o)) => return Err(LabError::Unsupported(format!("the model does not fit in {} ({})", cfg.precision, o.headline()))),
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
        use col::*;
        vec![
            View {
                name: "summary",
                table: SUMMARY_TABLE,
                caption: "Stage 3 — leaks: each cause, leaky vs clean, as the monitor judged it",
                columns: &[DEMO, VARIANT, STEPS, FLAGGED_STEPS, SUSTAINED, GROWTH_PER_STEP_MIB, PREDICTED_PER_STEP_MIB, RESERVED_GROWTH_MIB, MAIN_CATEGORY, VERDICT, NOTE],
                group_by: &[],
                chart: None,
                explain: "A kept KV cache grows memory by exactly its size per request; a kept output of a forward with trainable weights holds every tensor that forward allocated (candle records each op's inputs, as PyTorch without torch.no_grad()); the oversized batch ends in an OOM, diagnosed below. 泄漏按类别归因;reserved 的增长不算泄漏。",
            },
            View {
                name: "marks",
                table: MARKS_TABLE,
                caption: "Stage 3 — leaks: the monitor's marks (MiB)",
                columns: &[MARK, OUTCOME, ALLOCATED_MIB, PEAK_MIB, GROWTH_MIB, KV_CACHE_MIB, LOGITS_MIB, UNATTRIBUTED_MIB, RESERVED_MIB, RESERVED_GROWTH_MIB, FLAGGED],
                group_by: &[DEMO, VARIANT],
                chart: None,
                explain: "Growth is allocated bytes between consecutive marks; the categories are what the lab knows it holds (the history of caches, the kept logits); unattributed growth is what no category explains — the autograd graph.",
            },
            oom::view("oom", OOM_TABLE, "Stage 3 — the oversized batch's OOM, diagnosed (MiB)"),
        ]
    }
}
