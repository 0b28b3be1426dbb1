//! The demos, each a pair: the leaking way and the fixed one, measured mark by mark.

use super::config::{Demo, LeaksConfig};
use crate::error::{LabError, Result};
use crate::estimate::{self, Workload};
use crate::experiments::oom;
use crate::hw::Card;
use crate::memory::{fmt_bytes, guarded, mib, tensor_bytes, Category, HeldBytes, MemoryMonitor};
use crate::model::decoder::last_logits;
use crate::model::{Decoder, Logits};
use crate::session::Session;
use crate::stage::Outcome;
use candle_core::Tensor;

/// The batch demo's second measurement: the ledger's cost of one more sequence comes from 1 → PROBE.
const PROBE: usize = 4;

/// The ledger's batch is never taken above this (twice it is the overflow).
const MAX_BATCH: usize = 1024;

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
    pub fn new(demo: Demo, variant: &'static str, leaks: bool, cfg: &LeaksConfig) -> Self {
        let mut monitor = MemoryMonitor::new((cfg.threshold_mib * crate::memory::MIB) as u64);
        monitor.noise = (cfg.noise_mib * crate::memory::MIB) as u64;
        Self { demo, variant, leaks, monitor, outcomes: Vec::new(), predicted_per_step: None, note: String::new() }
    }

    pub fn mark(&mut self, s: &Session, label: &str, held: HeldBytes, outcome: Outcome) {
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

fn random_ids(s: &Session, model: &Decoder, batch: usize, seq: usize, salt: u64) -> Result<Tensor> {
    crate::experiments::kv::random_ids(batch, seq, model.cfg.vocab_size, s.opts.seed ^ salt, model.device())
}

/// Requests of a prompt and a few generated tokens, each with its own cache; the leaky run keeps
/// every cache in a history, the clean one drops it.
pub fn kv_pair(s: &mut Session, model: &Decoder, cfg: &LeaksConfig) -> Result<Vec<Run>> {
    let weights = model.weight_bytes();
    let len = cfg.prompt + cfg.new_tokens;
    let per_request = estimate::kv_bytes_per_token(&model.cfg, model.act_dtype().size_in_bytes()) * len as u64;
    let mut runs = Vec::new();
    for (variant, keep) in [("caches kept", true), ("caches dropped", false)] {
        s.console.step(format!("leaks: {} requests, {variant}", cfg.requests));
        let mut run = Run::new(Demo::Kv, variant, keep, cfg);
        run.predicted_per_step = Some(if keep { per_request } else { 0 });
        run.note = format!(
            "each request: {} prompt + {} generated tokens, a cache of {}",
            cfg.prompt,
            cfg.new_tokens,
            fmt_bytes(per_request)
        );
        let mut history = Vec::new();
        let request = |r: usize| {
            guarded(&s.probe, &format!("request {r}"), || {
                let mut cache = model.new_cache(1, len)?;
                let mut logits =
                    model.forward(&random_ids(s, model, 1, cfg.prompt, r as u64)?, &mut cache, Logits::Last)?;
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
        run.mark(s, "start", HeldBytes::of(&[(Category::Weights, weights)]), Outcome::Ok);
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
            run.mark(
                s,
                &format!("request {}", r + 1),
                HeldBytes::of(&[(Category::Weights, weights), (Category::KvCache, kv)]),
                outcome.clone(),
            );
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
fn prefill(s: &Session, model: &Decoder, batch: usize, seq: usize) -> Result<(u64, u64)> {
    guarded(&s.probe, &format!("prefill of {batch} × {seq} tokens"), || {
        let mut cache = model.new_cache(batch, seq)?;
        let logits = model.forward(&random_ids(s, model, batch, seq, 7)?, &mut cache, Logits::Last)?;
        model.device().synchronize()?;
        Ok((cache.bytes(), tensor_bytes(&logits)))
    })
}

/// The batch pair: one sequence measured, the largest batch that the measured bytes per sequence
/// say fits, then twice that. The overflow's OOM is diagnosed.
pub fn batch_pair(
    s: &mut Session,
    model: &Decoder,
    cfg: &LeaksConfig,
    diagnoses: &mut Vec<oom::Diagnosis>,
) -> Result<Vec<Run>> {
    let weights = model.weight_bytes();
    // On CPU the capacity is the counting allocator's: without it (a notebook kernel) nothing
    // would stop an oversized batch but the host itself.
    if !s.device.is_cuda() && !crate::memory::host::counting() {
        s.say("batch demo skipped: on CPU it needs the lab's counting allocator (the vram-lab binary), which this process lacks");
        return Ok(Vec::new());
    }
    // Without an emulated card, a temporary one: the weights and `batch_room_mib` (CPU tests).
    let temporary = s.card().is_none() && cfg.batch_room_mib > 0.0;
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

fn batch_runs(
    s: &mut Session,
    model: &Decoder,
    cfg: &LeaksConfig,
    weights: u64,
    diagnoses: &mut Vec<oom::Diagnosis>,
) -> Result<Vec<Run>> {
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
        let need = if s.device.is_cuda() {
            after.reserved_peak.saturating_sub(base.reserved)
        } else {
            after.peak.saturating_sub(base.allocated)
        };
        Ok((need, base, after))
    };
    let (one_need, base, one) = probe(s, 1)?;
    let (probe_need, _, _) = probe(s, PROBE)?;
    // The ledger: the first sequence, then the cost of each one more (from 1 to PROBE sequences).
    let per_seq = (probe_need.saturating_sub(one_need) / (PROBE as u64 - 1)).max(one_need / 2).max(1);
    let measured = oom::Measured::from_step(base.allocated, one.peak, one.allocated, one.reserved_peak, cfg.seq);
    let capacity = base.pool_capacity().unwrap_or(u64::MAX);
    // On CPU "reserved" is the process's RSS, not a pool inside the card: the heap counts.
    let used = if s.device.is_cuda() { base.reserved.max(base.allocated) } else { base.allocated };
    let free = capacity.saturating_sub(used);
    // Twice the batch must stay within candle's 32-bit indexing of the MLP's activation, or the
    // overflow run stops on that before the card runs out (a 0.5B model on a 24 GB card under
    // `--allocator pages`: 466 × 1,024 rows, `data/results/h200/2026-11-28-pages-stages`).
    let widest = model.cfg.intermediate_size.max(model.cfg.hidden_size);
    let by_index = (i32::MAX as usize / (2 * cfg.seq * widest).max(1)).max(1);
    let fit = if free < one_need { 1 } else { 1 + ((free - one_need) / per_seq) as usize }.min(MAX_BATCH).min(by_index);
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
        run.note = format!(
            "batch {batch} × {} tokens; the ledger: {} for the first sequence, {} for each one more, {} free for the pool",
            cfg.seq,
            fmt_bytes(one_need),
            fmt_bytes(per_seq),
            fmt_bytes(free)
        );
        s.probe.clear_pending();
        s.probe.reset_peak();
        run.mark(s, "start", HeldBytes::of(&[(Category::Weights, weights)]), Outcome::Ok);
        let outcome = match prefill(s, model, batch, cfg.seq) {
            Ok(_) => Outcome::Ok,
            Err(LabError::Oom(r)) => {
                let w = Workload { precision: model.precision, seq: cfg.seq, batch, logits: Logits::Last };
                let kv = estimate::kv_bytes_per_token(&model.cfg, model.act_dtype().size_in_bytes())
                    * (batch * cfg.seq) as u64;
                let held = HeldBytes::of(&[(Category::Weights, weights), (Category::KvCache, kv)]);
                let context = format!("{} batch {batch} × {}", model.precision, cfg.seq);
                diagnoses.extend(oom::diagnose(s, &context, &r, &model.cfg, &w, &held, measured));
                s.say(format!("batch {batch}: {}", r.headline()));
                Outcome::Oom
            }
            Err(e) => return Err(e),
        };
        // The peak is what this run needed; the mark after holds only what stayed.
        let peak = s.probe.snapshot("peak").peak;
        run.mark(s, &format!("batch {batch}"), HeldBytes::of(&[(Category::Weights, weights)]), outcome);
        run.note.push_str(&format!("; peak {}", fmt_bytes(peak)));
        runs.push(run);
    }
    Ok(runs)
}

/// Forward passes whose last-token logits are kept in a list: with plain weights each keeps a
/// row of logits; with trainable weights each keeps its graph. Returns the model, trainable.
pub fn autograd_pair(s: &mut Session, model: Decoder, cfg: &LeaksConfig) -> Result<(Vec<Run>, Decoder)> {
    let plain = autograd_run(s, &model, cfg, false)?;
    s.console.step("leaks: weights made trainable (Var)");
    let model = model.into_trainable()?;
    let trainable = autograd_run(s, &model, cfg, true)?;
    Ok((vec![plain, trainable], model))
}

/// One run of the autograd pair on `m`, whose weights are trainable or not.
fn autograd_run(s: &mut Session, m: &Decoder, cfg: &LeaksConfig, trainable: bool) -> Result<Run> {
    let weights = m.weight_bytes();
    let variant = if trainable { "trainable weights" } else { "plain weights" };
    s.console.step(format!(
        "leaks: {} forward passes, outputs kept, {} weights",
        cfg.requests,
        if trainable { "trainable" } else { "plain" }
    ));
    let mut run = Run::new(Demo::Autograd, variant, trainable, cfg);
    let mut kept: Vec<Tensor> = Vec::new();
    let forward = |f: usize| {
        guarded(&s.probe, &format!("forward {f}"), || {
            let mut cache = m.new_cache(1, cfg.graph_prompt)?;
            let logits = m.forward(
                &random_ids(s, m, 1, cfg.graph_prompt, 100u64.wrapping_add(f as u64))?,
                &mut cache,
                Logits::Last,
            )?;
            m.device().synchronize()?;
            Ok(logits)
        })
    };
    // Warm-up, as in the kv pair; an OOM here is this run's result, not the stage's end.
    let warm = forward(usize::MAX);
    run.mark(s, "start", HeldBytes::of(&[(Category::Weights, weights)]), Outcome::Ok);
    if let Err(e) = warm {
        if !matches!(e, LabError::Oom(_)) {
            return Err(e);
        }
        run.mark(s, "warm-up", HeldBytes::of(&[(Category::Weights, weights)]), Outcome::Oom);
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
        run.mark(
            s,
            &format!("forward {}", f + 1),
            HeldBytes::of(&[(Category::Weights, weights), (Category::Logits, tensor_bytes(&kept))]),
            outcome.clone(),
        );
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
        format!(
            "{} tokens a forward (peak {peak} above the weights); each kept output is one row of logits ({})",
            cfg.graph_prompt,
            fmt_bytes(logits_row)
        )
    };
    Ok(run)
}
