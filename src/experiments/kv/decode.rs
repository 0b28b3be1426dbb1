//! A long decode with a preallocated and a concatenating cache: allocated and peak as the cache
//! fills, beside the ledger.

use super::sweep::{random_ids, warm_up};
use crate::error::{LabError, Result};
use crate::estimate;
use crate::memory::{fmt_bytes, guarded, tensor_bytes};
use crate::model::decoder::last_logits;
use crate::model::{CacheKind, Decoder, Logits};
use crate::session::Session;
use crate::stage::Outcome;
use std::time::Instant;

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
pub fn decode_sweep(
    s: &mut Session,
    model: &Decoder,
    kind: CacheKind,
    prompt_len: usize,
    checkpoints: &[usize],
) -> Result<Vec<DecodePoint>> {
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
        Err(e) => points.push(DecodePoint {
            precision,
            cache: kind.name().into(),
            outcome: Outcome::from_error(&e),
            base,
            ..Default::default()
        }),
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

pub fn ledger_pct(p: &DecodePoint) -> Option<f64> {
    (p.allocated > 0).then(|| (p.predicted as f64 / p.allocated as f64 - 1.0) * 100.0)
}
