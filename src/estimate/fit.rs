//! Does a workload fit a card, and what is the most it can take: the inference ledger of `mod.rs`
//! and `transient.rs` summed with the runtime's fixed overhead, and inverted for the largest
//! batch and context. Pure: cards and overheads come in as data.

use super::bytes::{kv_bytes_per_token, weight_bytes};
use super::transient::{self, Prefill};
use super::workspace;
use crate::error::{LabError, Result};
use crate::limits::{check_count, MAX_BATCH, MAX_SEQ, MAX_TERM_BYTES};
use crate::memory::policy::Allocator;
#[cfg(test)]
use crate::memory::policy::POOL_SLACK;
use crate::model::layers::attention::AttentionMode;
use crate::model::{DecoderConfig, Logits, Precision};
use crate::units::grouped;
use serde::{Deserialize, Serialize};

const RUNTIME_JSON: &str = include_str!("../../data/runtime.json");

/// Device memory a process uses outside the allocator's pool (CUDA context, cuBLAS, kernels),
/// measured per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Runtime {
    pub gpu: String,
    pub cuda: String,
    pub driver: String,
    pub outside_pool_mib: f64,
    pub what: String,
    pub source: String,
}

impl Runtime {
    pub fn measured() -> Vec<Runtime> {
        // Embedded and checked by a test; an error here is a build defect.
        serde_json::from_str(RUNTIME_JSON).unwrap_or_default()
    }

    /// The overhead the planner assumes on any card: the one measured (on other GPUs the
    /// context differs by tens of MiB; the fit table says which GPU it comes from).
    pub fn assumed() -> Runtime {
        Self::measured().into_iter().next().unwrap_or(Runtime {
            gpu: "none measured".into(),
            cuda: String::new(),
            driver: String::new(),
            outside_pool_mib: 0.0,
            what: String::new(),
            source: String::new(),
        })
    }

    pub fn bytes(&self) -> u64 {
        (self.outside_pool_mib * 1024.0 * 1024.0) as u64
    }
}

/// One inference workload: a prefill of `batch × seq` tokens that keeps `logits`, in `precision`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inference {
    pub precision: Precision,
    pub seq: usize,
    pub batch: usize,
    pub logits: Logits,
    pub attention: AttentionMode,
    /// The weights' bytes as a file holds them once loaded (a GGUF's own tensors, each by its
    /// type), where the precision's plan would only guess; None: priced by the plan.
    pub stored: Option<u64>,
    /// Where the tensors live: the allocator's slack beyond the live bytes (`--allocator`).
    pub allocator: Allocator,
}

impl Inference {
    pub fn weights(&self, cfg: &DecoderConfig) -> u64 {
        self.stored.unwrap_or_else(|| weight_bytes(cfg, self.precision))
    }

    /// The workload's prefill, as `transient::phases` prices it.
    pub fn prefill(&self) -> Prefill {
        Prefill {
            seq: self.seq,
            batch: self.batch,
            act_bytes: self.precision.act_dtype().size_in_bytes(),
            logits: self.logits,
            attention: self.attention,
            cast: self.precision.casts_products(),
        }
    }
}

/// What a workload needs on the device, part by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Ledger {
    pub weights: u64,
    /// candle's quantized-matmul scratch a Q4 process keeps (`workspace`); 0 for dense weights.
    pub workspace: u64,
    pub kv_cache: u64,
    pub logits: u64,
    /// Above the weights, the cache and the kept logits at the prefill's busiest moment.
    pub transient: u64,
    pub peak_at: &'static str,
    /// What the allocator maps beyond the live bytes at its busiest moment: the pool maps whole
    /// 32 MiB chunks, so after the lab's trim-and-retry the chunks live allocations touch stay
    /// mapped (`memory::policy::POOL_SLACK` per chunk of them, each counted up to one); the page
    /// allocator keeps partly filled 2 MiB pages (`PAGE_SLACK` per chunk).
    pub pool: u64,
    pub runtime: u64,
}

impl Ledger {
    /// What stays allocated after the prefill.
    pub fn allocated(&self) -> u64 {
        self.weights + self.workspace + self.kv_cache + self.logits
    }
    pub fn peak(&self) -> u64 {
        self.allocated() + self.transient
    }
    /// The peak, the pool's chunks around it and the runtime outside the pool: what the card
    /// must have.
    pub fn device(&self) -> u64 {
        self.peak() + self.pool + self.runtime
    }
}

/// The workload as the first prefill of a fresh process.
pub fn ledger(cfg: &DecoderConfig, w: &Inference, runtime: u64) -> Ledger {
    ledger_after(cfg, w, runtime, 0)
}

/// The workload in a process whose earlier prefills reached `seen` tokens (batch × seq): a Q4
/// process keeps the quantized matmul's buffer for the longest of them, and growing it holds the
/// old and the new buffer at once, in the first layer's down projection.
pub fn ledger_after(cfg: &DecoderConfig, w: &Inference, runtime: u64, seen: u64) -> Ledger {
    ledger_routed(cfg, w, runtime, seen, None)
}

/// As `ledger_after`, a mixture's busiest expert taking `routed` tokens (as a run recorded
/// them; None: every token, what a plan must leave room for).
pub fn ledger_routed(cfg: &DecoderConfig, w: &Inference, runtime: u64, seen: u64, routed: Option<u64>) -> Ledger {
    let act = w.precision.act_dtype().size_in_bytes();
    let p = transient::phases_routed(cfg, &w.prefill(), routed);
    let tokens = (w.seq * w.batch) as u64;
    let kept = workspace::held(cfg, w.precision, seen.max(tokens));
    let growth = p.down_proj + workspace::at_growth(cfg, w.precision, seen, tokens) - kept;
    let (transient, peak_at) =
        if growth > p.peak() { (growth - p.logits_kept, "workspace") } else { (p.transient(), p.peak_at()) };
    // The pool's slack: Q4's kept buffers are allocations of every moment; while the buffer
    // grows, the down projection holds the new, the old and the fixup buffer.
    let kept_share = transient::chunk_share(workspace::held_parts(cfg, w.precision, seen.max(tokens)));
    let growing = transient::chunk_share(workspace::at_growth_parts(cfg, w.precision, seen, tokens));
    let slack = w.allocator.slack();
    let with_slack = (p.peak_with(slack) + transient::pool_slack(kept_share, slack))
        .max(growth + transient::pool_slack(p.chunked.down_proj + growing, slack));
    Ledger {
        weights: w.weights(cfg),
        workspace: kept,
        kv_cache: kv_bytes_per_token(cfg, act) * tokens,
        logits: p.logits_kept,
        transient,
        peak_at,
        pool: with_slack - p.peak().max(growth),
        runtime,
    }
}

/// A workload the estimator can price: `seq` and `batch` counted within the lab's ceilings, and
/// its largest terms (every position's widest activations or logits, the KV cache, a naive
/// attention's score matrices) each below `limits::MAX_TERM_BYTES`, so the ledger's sums of a
/// few dozen terms stay inside u64. Checked in u128, before any of the ledger's arithmetic.
pub fn check(cfg: &DecoderConfig, w: &Inference) -> Result<()> {
    cfg.computed()?;
    check_count("seq (tokens per sequence)", w.seq, MAX_SEQ)?;
    check_count("batch (sequences)", w.batch, MAX_BATCH)?;
    let (b, s) = (w.batch as u128, w.seq as u128);
    let a = w.precision.act_dtype().size_in_bytes() as u128;
    let widest = cfg.vocab_size.max(cfg.intermediate_size).max(cfg.hidden_size) as u128;
    let scores = match w.attention {
        AttentionMode::Naive | AttentionMode::Differentiable => b * cfg.num_attention_heads as u128 * s * s * a,
        AttentionMode::Bounded { .. } | AttentionMode::Flash => 0,
    };
    let terms = [
        ("the widest activations of every position", b * s * widest * a),
        ("the KV cache", b * s * kv_bytes_per_token(cfg, a as usize) as u128),
        ("the attention scores", scores),
    ];
    for (what, bytes) in terms {
        if bytes > MAX_TERM_BYTES {
            return Err(LabError::TooLarge(format!(
                "{} sequence(s) of {} tokens are too large to price: {what} alone would be {:.3e} B, past the 2^58 B (256 PiB) the lab counts",
                grouped(w.batch as u64),
                grouped(w.seq as u64),
                bytes as f64
            )));
        }
    }
    Ok(())
}

/// The largest `n` in 1..=`upto` with `fits(n)` (monotone), 0 if none.
pub fn largest(upto: usize, fits: impl Fn(usize) -> bool) -> usize {
    crate::search::bisect(0, upto as u64 + 1, 1, |n| Ok(fits(n as usize))).map(|(n, _)| n as usize).unwrap_or(0)
}

/// The longest context at `w.batch` and the largest batch at `w.seq` that fit `capacity` bytes
/// (contexts up to the model's trained maximum, batches up to 4,096).
pub fn limits(cfg: &DecoderConfig, w: &Inference, runtime: u64, capacity: u64) -> (usize, usize) {
    // A workload too large to price fits no card.
    let fits = |w: Inference| check(cfg, &w).is_ok() && ledger(cfg, &w, runtime).device() <= capacity;
    let max_context =
        largest(cfg.max_position_embeddings.max(w.seq).min(MAX_SEQ), |s| fits(Inference { seq: s, ..*w }));
    let max_batch = largest(4096, |b| fits(Inference { batch: b, ..*w }));
    (max_context, max_batch)
}

/// A workload on one card: what it needs, the card's capacity, its limits and decode ceiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CardFit {
    pub need: u64,
    pub capacity: u64,
    pub max_context: usize,
    pub max_batch: usize,
    /// The card's bandwidth ÷ the bytes batch-1 decoding reads per token; None without a bandwidth.
    pub decode_ceiling_tok_s: Option<f64>,
}

impl CardFit {
    pub fn fits(&self) -> bool {
        self.need <= self.capacity
    }
    pub fn headroom(&self) -> i64 {
        self.capacity as i64 - self.need as i64
    }
}

pub fn on_card(cfg: &DecoderConfig, w: &Inference, runtime: u64, capacity: u64, bandwidth_gbs: Option<f64>) -> CardFit {
    let (max_context, max_batch) = limits(cfg, w, runtime, capacity);
    CardFit {
        need: ledger(cfg, w, runtime).device(),
        capacity,
        max_context,
        max_batch,
        decode_ceiling_tok_s: bandwidth_gbs.map(|bw| super::bytes::decode_ceiling_tok_s(bw, decode_bytes(cfg, w))),
    }
}

/// Bytes batch-1 decoding reads per token at context `w.seq`: every weight (of a mixture, the
/// experts one token picks) and the cache so far.
pub fn decode_bytes(cfg: &DecoderConfig, w: &Inference) -> u64 {
    w.weights(cfg).saturating_sub(super::bytes::idle_expert_bytes(cfg, w.precision))
        + kv_bytes_per_token(cfg, w.precision.act_dtype().size_in_bytes()) * w.seq as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(precision: Precision, seq: usize) -> Inference {
        Inference {
            precision,
            seq,
            batch: 1,
            logits: Logits::Last,
            attention: AttentionMode::default(),
            stored: None,
            allocator: Allocator::Pool,
        }
    }

    #[test]
    fn runtime_file_parses() {
        let r = Runtime::measured();
        assert!(!r.is_empty() && r.iter().all(|r| r.outside_pool_mib > 0.0 && !r.source.is_empty()));
    }

    /// 7B BF16 at 4,096 tokens: the parts add up, by hand.
    #[test]
    fn seven_b_ledger() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let l = ledger(&cfg, &w(Precision::Bf16, 4096), 0);
        assert_eq!(l.weights, 7_615_616_512 * 2);
        assert_eq!(l.kv_cache, 57_344 * 4096);
        assert_eq!(l.logits, 304_128);
        assert_eq!(l.transient, 205_056 * 4096 - 304_128);
        // The pool's slack at the MLP: seven hidden-sized tensors of 28 MiB, k, k, v of 4 MiB,
        // cos and sin of 512 KiB, and five of a chunk or more (the cache, four intermediate).
        const MIB: u64 = 1 << 20;
        use crate::memory::policy::POOL_CHUNK;
        let chunked = 7 * 28 * MIB + 3 * 4 * MIB + MIB + 5 * POOL_CHUNK;
        assert_eq!(l.pool, chunked * POOL_SLACK / POOL_CHUNK);
        assert_eq!(l.device(), l.weights + 57_344 * 4096 + 205_056 * 4096 + l.pool);
        // The page allocator: the same allocations, at most a partly filled 2 MiB page at each
        // end of each, and every other term unchanged.
        let pages = ledger(&cfg, &Inference { allocator: Allocator::Pages, ..w(Precision::Bf16, 4096) }, 0);
        assert_eq!(pages.pool, chunked * 4 * MIB / POOL_CHUNK);
        assert_eq!(pages.device() + l.pool, l.device() + pages.pool);
    }

    /// The limits are the edge: one more token or one more sequence does not fit.
    #[test]
    fn limits_are_the_edge() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        // 20 GiB: the edge lies below the model's 32,768 positions.
        let cap = 20u64 << 30;
        let base = w(Precision::Bf16, 2048);
        let (ctx, batch) = limits(&cfg, &base, 700 << 20, cap);
        let dev = |w: Inference| ledger(&cfg, &w, 700 << 20).device();
        assert!(
            ctx > 2048 && dev(Inference { seq: ctx, ..base }) <= cap && dev(Inference { seq: ctx + 1, ..base }) > cap,
            "{ctx}"
        );
        assert!(
            batch >= 1 && dev(Inference { batch, ..base }) <= cap && dev(Inference { batch: batch + 1, ..base }) > cap,
            "{batch}"
        );
        // F32 weights alone exceed 24 GiB: nothing fits.
        assert_eq!(limits(&cfg, &w(Precision::F32, 1), 0, cap), (0, 0));
    }
}
