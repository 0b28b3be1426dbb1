//! The prefill's transient peak: the bytes the lab's forward pass holds above the weights and the
//! (preallocated) KV cache at its busiest moment, counted tensor by tensor from
//! `model::decoder::Layer::forward` and `model::layers::attention`. Four moments compete:
//! - attention: the layer's live tensors plus one query chunk's scores, probabilities and output;
//! - the o projection's residual add, and the MLP's `silu(gate) * up` (four I-sized tensors);
//! - the logits: the final norm's input and output beside the logits kept.
//!
//! Per token of `batch × seq` (H = hidden × bytes, KV = kv_heads × head_dim × bytes, I =
//! intermediate × bytes) the layer keeps through its MLP: the residual, both norms' outputs, q
//! after the head transpose and after rotary, the attention output and its reshaped copy (7 H);
//! k after the transpose and after rotary, and v's projection (3 KV); the rotary table (cos and
//! sin, head_dim × bytes per position, shared by the batch). With the fused attention kernel
//! (`AttentionMode::Flash`) there are no scores and the output has no reshaped copy (6 H).
//! Checked on CPU against the counting
//! allocator (tests/transient.rs) and against every committed GPU prefill (tests/estimate_check.rs).

use crate::memory::policy::POOL_CHUNK;
use crate::model::config::DecoderConfig;
use crate::model::layers::attention::AttentionMode;
use crate::model::Logits;

/// A prefill from an empty cache: `batch` sequences of `seq` tokens, activations of `act_bytes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prefill {
    pub seq: usize,
    pub batch: usize,
    pub act_bytes: usize,
    pub logits: Logits,
    pub attention: AttentionMode,
    /// Quantized products on 16-bit activations (`Precision::casts_products`): over 8 rows each
    /// holds an F32 copy of its input and its F32 output beside the result.
    pub cast: bool,
}

/// Bytes above the weights and the KV cache at each moment that can be the peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Phases {
    pub attention: u64,
    pub o_proj: u64,
    pub mlp: u64,
    /// When the MLP's down projection is called: its input alone is left of the MLP's tensors
    /// (below `mlp`; where a Q4 process grows its quantized buffer, `workspace`).
    pub down_proj: u64,
    /// The final norm's input and output, and the logits kept.
    pub logits: u64,
    /// The logits the forward returns (they stay after it).
    pub logits_kept: u64,
    /// The live allocations of each moment above the weights, each up to one pool chunk.
    pub chunked: Chunked,
}

/// The bytes of each moment's live allocations (the one being requested included, the cache
/// as one run), each counted up to one chunk (`memory::policy::POOL_CHUNK`): what the pool keeps
/// mapped beyond the live bytes grows with it (`memory::policy::POOL_SLACK` per chunk of it): a
/// large tensor's ends leave parts of chunks free, a small one's neighbours leave gaps its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Chunked {
    pub attention: u64,
    pub o_proj: u64,
    pub mlp: u64,
    pub down_proj: u64,
    pub logits: u64,
}

impl Phases {
    /// The peak above the weights and the KV cache.
    pub fn peak(&self) -> u64 {
        self.attention.max(self.o_proj).max(self.mlp).max(self.logits)
    }

    /// What the lab's stages report as transient: the peak less what stays (the logits).
    pub fn transient(&self) -> u64 {
        self.peak() - self.logits_kept
    }

    /// The moments that can be the peak, in the order a prefill reaches them: (bytes, chunked).
    pub fn moments(&self) -> [(u64, u64); 4] {
        let c = &self.chunked;
        [(self.attention, c.attention), (self.o_proj, c.o_proj), (self.mlp, c.mlp), (self.logits, c.logits)]
    }

    /// The busiest moment with the pool's slack: `slack` bytes per chunk of `chunked`.
    pub fn peak_with(&self, slack: u64) -> u64 {
        self.moments().iter().map(|&(bytes, n)| bytes + pool_slack(n, slack)).max().unwrap_or(0)
    }

    /// Which moment is the peak.
    pub fn peak_at(&self) -> &'static str {
        let p = self.peak();
        if p == self.mlp {
            "mlp"
        } else if p == self.logits {
            "logits"
        } else if p == self.attention {
            "attention"
        } else {
            "o_proj"
        }
    }
}

/// Allocations of these sizes, each counted up to one chunk.
pub fn chunk_share(sizes: impl IntoIterator<Item = u64>) -> u64 {
    sizes.into_iter().map(|b| share(1, b)).sum()
}

/// `n` allocations of `bytes`, each counted up to one chunk.
fn share(n: u64, bytes: u64) -> u64 {
    n * bytes.min(POOL_CHUNK)
}

/// What the pool keeps beyond the live bytes for `chunked` bytes of allocations, at `slack`
/// bytes per full chunk.
pub fn pool_slack(chunked: u64, slack: u64) -> u64 {
    (chunked as u128 * slack as u128 / POOL_CHUNK as u128) as u64
}

/// The four moments of `p` on `cfg` (a mixture's busiest expert taking every token: the most a
/// router can send one expert, what a plan must leave room for).
pub fn phases(cfg: &DecoderConfig, p: &Prefill) -> Phases {
    phases_routed(cfg, p, None)
}

/// The four moments of `p` on `cfg`, a mixture's busiest expert taking `routed` tokens (a run
/// records it, `Decoder::take_busiest`; None: every token).
pub fn phases_routed(cfg: &DecoderConfig, p: &Prefill, routed: Option<u64>) -> Phases {
    let a = p.act_bytes as u64;
    let (b, s) = (p.batch as u64, p.seq as u64);
    let tokens = b * s;
    let h = cfg.hidden_size as u64 * a;
    // The query heads' width: the hidden size for a whole model, a tensor-parallel rank's share
    // of it (`parallel::shard_config`): q, the attention output and its copy are that wide.
    let qw = (cfg.num_attention_heads * cfg.head_dim()) as u64 * a;
    let kv = (cfg.num_key_value_heads * cfg.head_dim()) as u64 * a;
    let i = cfg.intermediate_size as u64 * a;
    let rope = s * cfg.head_dim() as u64 * a;
    // x, h1, q (transposed), q (rotary); k (transposed), k (rotary), v.
    let layer = tokens * (2 * h + 2 * qw + 3 * kv) + rope;
    let attention = layer
        + match p.attention {
            AttentionMode::Bounded { budget } => bounded(cfg, b, s, a, budget as u64).0,
            AttentionMode::Naive | AttentionMode::Differentiable => naive(cfg, b, s, a),
            // The fused kernel's output, [b, s, heads·d]: nothing else.
            AttentionMode::Flash => tokens * qw,
        };
    // The fused kernel writes the output as the projection reads it: no reshaped copy.
    let copies = if p.attention == AttentionMode::Flash { 0 } else { tokens * qw };
    // A cast product's F32 input and output (2 × the 16-bit bytes) beside its result: candle casts
    // over more rows than its vector path takes.
    let casts = |rows: u64| p.cast && rows > super::workspace::MMVQ_MAX_ROWS;
    let cast = casts(tokens);
    // x, h1, q, q, a, a reshaped, o(a), x + o(a); cast: a, a reshaped, a in F32, o(a) in F32
    // and in 16 bits.
    let o_proj = layer + copies + tokens * if cast { 6 * h } else { qw + 2 * h };
    // x + o(a), h1, q, q, a, a reshaped, h2; gate, silu(gate), up, silu(gate) * up; cast, at
    // up's cast back: gate, silu(gate), h2 in F32, up in F32 and in 16 bits.
    let mlp = layer + tokens * (qw + h + 4 * i) + copies + if cast { tokens * (i + 2 * h) } else { 0 };
    // Cast: the down projection's input in F32 too (the quantized buffer grows after the cast).
    let down_proj = layer + tokens * (qw + h + i) + copies + if cast { tokens * 2 * i } else { 0 };
    let logits_kept = b * cfg.vocab_size as u64 * a * if p.logits == Logits::All { s } else { 1 };
    // All logits come in pieces of at most 2^31 elements (candle indexes in 32 bits); with a
    // batch, each piece's rows of the final norm are copied out first, the last piece's copy
    // beside every logit.
    let rows = (i32::MAX as u64 / (b * cfg.vocab_size as u64)).max(1);
    let last_copy = if p.logits == Logits::All && b > 1 && rows < s { b * (s - (s - 1) / rows * rows) * h } else { 0 };
    // Cast: the head's product of a piece also holds its input and its logits in F32. The busiest
    // piece is the last (beside every kept logit) or, when the last is shorter, the last full
    // one (a larger F32 product beside the pieces before it).
    let v = cfg.vocab_size as u64 * a;
    let cast_of = |rows_of_piece: u64| if casts(rows_of_piece) { rows_of_piece * (2 * h + 2 * v) } else { 0 };
    let (full_rows, last_rows) = match p.logits {
        Logits::All if rows < s => (b * rows, b * (s - (s - 1) / rows * rows)),
        Logits::All => (0, tokens),
        Logits::Last => (0, b),
    };
    let at_last = logits_kept + last_copy + cast_of(last_rows);
    let at_full = if full_rows > 0 {
        logits_kept - last_rows * v + cast_of(full_rows) + if b > 1 { full_rows * h } else { 0 }
    } else {
        0
    };
    let logits = tokens * 2 * h + rope + at_last.max(at_full);
    // The allocations live at each moment, each counted up to one pool chunk: x, h1, q, q, k,
    // k, v, cos, sin and the cache (one run of 2 × layers tensors); attention's own (bounded:
    // the chunks' outputs so far, the scaled query chunk, the scores and the probabilities or
    // mask, the chunk's output; naive: k and v repeated, three score matrices, the output;
    // fused: the output); then one per tensor of the bytes above.
    let cache = 2 * cfg.num_hidden_layers as u64 * tokens * kv;
    let layer_share =
        share(2, tokens * h) + share(2, tokens * qw) + share(3, tokens * kv) + share(2, rope / 2) + share(1, cache);
    let heads = cfg.num_attention_heads as u64;
    let attention_share = match p.attention {
        AttentionMode::Bounded { budget } => bounded(cfg, b, s, a, budget as u64).1,
        AttentionMode::Naive | AttentionMode::Differentiable => share(3, tokens * h) + share(3, b * heads * s * s * a),
        AttentionMode::Flash => share(1, tokens * qw),
    };
    let copy_share = share(u64::from(copies > 0), tokens * qw);
    let pieces = if p.logits == Logits::All { s.div_ceil(rows) } else { 1 };
    let piece = logits_kept / pieces;
    let head_share = if at_full > at_last {
        share(pieces - 1, piece)
            + chunk_share([full_rows * 2 * h, full_rows * 2 * v])
            + if b > 1 { share(1, full_rows * h) } else { 0 }
    } else {
        share(pieces, piece)
            + share(1, last_copy)
            + if cast_of(last_rows) > 0 { chunk_share([last_rows * 2 * h, last_rows * 2 * v]) } else { 0 }
    };
    let mut chunked = Chunked {
        attention: layer_share + attention_share,
        o_proj: layer_share
            + copy_share
            + if cast {
                share(2, tokens * h) + share(2, tokens * 2 * h)
            } else {
                share(1, tokens * qw) + share(2, tokens * h)
            },
        mlp: layer_share
            + share(1, tokens * qw)
            + share(1, tokens * h)
            + copy_share
            + if cast {
                share(3, tokens * i) + share(1, tokens * 2 * i) + share(1, tokens * 2 * h)
            } else {
                share(4, tokens * i)
            },
        down_proj: layer_share
            + share(1, tokens * qw)
            + share(1, tokens * h)
            + share(1, tokens * i)
            + copy_share
            + if cast { share(1, tokens * 2 * i) } else { 0 },
        logits: share(2, tokens * h) + share(2, rope / 2) + share(1, cache) + head_share,
    };
    let (mut mlp, mut down_proj) = (mlp, down_proj);
    if let Some(e) = cfg.experts() {
        let before = layer + tokens * (qw + h) + copies;
        let before_share = layer_share + share(1, tokens * qw) + share(1, tokens * h) + copy_share;
        let m = mixture(e, h, a, tokens, routed.unwrap_or(tokens).min(tokens), p.cast);
        (mlp, chunked.mlp) = (before + m.peak.0, before_share + m.peak.1);
        (down_proj, chunked.down_proj) = (before + m.down.0, before_share + m.down.1);
    }
    Phases { attention, o_proj, mlp, down_proj, logits, logits_kept, chunked }
}

/// A mixture's bytes above what the layer holds before it (`model::decoder::mixture`), with their
/// chunk shares: at its busiest and when the busiest expert's down projection is called.
struct MixtureMoments {
    peak: (u64, u64),
    down: (u64, u64),
}

/// `n` tokens, the busiest expert taking `m`; `h` the hidden bytes of a token, `a` an activation's.
/// The routing: the router's logits, their F32 copy and softmax. Then the output sum (n × h)
/// stays, and per expert its rows (u32) and weights (activation dtype) and the gathered input
/// (m × h) beside, in turn: gate, silu(gate), up and their product (cast: the input and up in
/// F32 too, as the dense MLP's); the product, the down projection and its weighted copy (cast:
/// the product and the projection in F32 too); the weighted copy and the new sum.
fn mixture(e: crate::model::config::Experts, h: u64, a: u64, n: u64, m: u64, cast: bool) -> MixtureMoments {
    let logits = n * e.experts as u64 * a;
    let f32_copy = if a == 4 { 0 } else { n * e.experts as u64 * 4 };
    let routing =
        (logits + f32_copy + n * e.experts as u64 * 4, chunk_share([logits, f32_copy, n * e.experts as u64 * 4]));
    let w = e.width as u64 * a;
    let cast = cast && m > super::workspace::MMVQ_MAX_ROWS;
    let held = n * h + m * (4 + a) + m * h;
    let held_share = share(1, n * h) + share(1, m * 4) + share(1, m * a) + share(1, m * h);
    let gated = (
        4 * m * w + if cast { m * (w + 2 * h) } else { 0 },
        share(4, m * w) + if cast { share(1, m * 2 * h) + share(1, m * 2 * w) } else { 0 },
    );
    let down_in = if cast { 3 * m * w } else { m * w };
    let down_in_share = share(1, m * w) + if cast { share(1, m * 2 * w) } else { 0 };
    // Cast: at the down projection's cast back its input and output in F32 and the output in
    // 16 bits (an expert is narrower than the hidden size, so this outgrows the gate and up).
    let down = if cast {
        (3 * m * w + 3 * m * h, share(1, m * w) + share(1, m * 2 * w) + share(1, m * 2 * h) + share(1, m * h))
    } else {
        (m * w + 2 * m * h, share(1, m * w) + share(2, m * h))
    };
    let add = (m * h + n * h, share(1, m * h) + share(1, n * h));
    let experts = [gated, down, add].into_iter().max_by_key(|x| x.0).unwrap_or_default();
    let peak = if routing.0 > held + experts.0 { routing } else { (held + experts.0, held_share + experts.1) };
    MixtureMoments { peak, down: (held + down_in, held_share + down_in_share) }
}

/// Bounded attention's own bytes at its busiest chunk (`attention::bounded`): the outputs of
/// the chunks done, the scaled query chunk, and either the scores with the causal corner being
/// masked (mask and masked copy) or the scores, probabilities and the chunk's output. With the
/// chunk share of the same moment: every chunk's output is an allocation of its own.
fn bounded(cfg: &DecoderConfig, b: u64, s: u64, a: u64, budget: u64) -> (u64, u64) {
    let heads = cfg.num_attention_heads as u64;
    // A chunk's output is as wide as the query heads (Qwen3's q is wider than the hidden size).
    let h = (cfg.num_attention_heads * cfg.head_dim()) as u64 * a;
    let row_bytes = b * heads * s * a;
    let chunk = (budget / row_bytes.max(1)).clamp(1, s.max(1));
    // The chunk starting at s0, c queries long: its bytes and their chunk share.
    let at = |s0: u64, c: u64| {
        let t = s0 + c;
        let scores = b * heads * c * t * a;
        let masking = if c > 1 { scores + c * c + b * heads * c * c * a } else { 0 };
        let softmax = 2 * scores + b * c * h;
        let bytes = b * (s0 + c) * h + masking.max(softmax);
        let own = if masking > softmax {
            chunk_share([scores, c * c, b * heads * c * c * a])
        } else {
            chunk_share([scores, scores, b * c * h])
        };
        (bytes, share(s0 / chunk, b * chunk * h) + share(1, b * c * h) + own)
    };
    // Every full chunk holds more than the one before it (more outputs done, longer score rows),
    // so the busiest is the last full chunk or the shorter one after it: two candidates instead
    // of a walk over s / chunk chunks (millions at long contexts).
    let (full, rest) = (s / chunk, s % chunk);
    let mut candidates = Vec::with_capacity(2);
    if full > 0 {
        candidates.push(at((full - 1) * chunk, chunk));
    }
    if rest > 0 {
        candidates.push(at(full * chunk, rest));
    }
    let (mut worst, mut worst_share) = (0, 0);
    for (bytes, chunk_share) in candidates {
        if bytes > worst {
            (worst, worst_share) = (bytes, chunk_share);
        }
    }
    // Several chunks are concatenated: their outputs and the copy.
    if chunk < s && 2 * b * s * h > worst {
        (worst, worst_share) = (2 * b * s * h, share(s.div_ceil(chunk), b * chunk * h) + share(1, b * s * h));
    }
    (worst, worst_share)
}

/// Stock candle-transformers' attention (`attention::naive`): K and V repeated for every query
/// head, the scaled scores, the masked copy and the probabilities (three full score matrices),
/// and the output.
fn naive(cfg: &DecoderConfig, b: u64, s: u64, a: u64) -> u64 {
    let heads = cfg.num_attention_heads as u64;
    let h = cfg.hidden_size as u64 * a;
    let scores = b * heads * s * s * a;
    2 * b * s * h + 3 * scores + b * s * h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seven_b(seq: usize, logits: Logits, act_bytes: usize) -> Phases {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        phases(&cfg, &Prefill { seq, batch: 1, act_bytes, logits, attention: AttentionMode::default(), cast: false })
    }

    /// Qwen2.5-7B by hand: H = 3,584 × 2, KV = 512 × 2, I = 18,944 × 2, rotary 128 × 2 per token.
    #[test]
    fn seven_b_by_hand() {
        // MLP: 7 × 7,168 + 3 × 1,024 + 4 × 37,888 + 256 = 205,056 B per token.
        let p = seven_b(16384, Logits::Last, 2);
        assert_eq!(p.mlp, 205_056 * 16384);
        assert_eq!(p.peak_at(), "mlp");
        assert_eq!(p.transient(), 205_056 * 16384 - 304_128);
        // All logits: 304,128 B per token kept, 2 × 7,168 + 256 above them.
        let p = seven_b(16384, Logits::All, 2);
        assert_eq!(p.peak_at(), "logits");
        assert_eq!(p.transient(), 14_592 * 16384);
        // 2,048 tokens, one chunk: 28 × 2,048² × 2 B of scores and as many of probabilities, the
        // chunk's output, beside the layer's 4 H + 3 KV + rotary and the scaled query per token.
        let p = seven_b(2048, Logits::Last, 2);
        let scores = 28 * 2048 * 2048 * 2;
        assert_eq!(p.attention, 2048 * (6 * 7168 + 3 * 1024 + 256) + 2 * scores);
        assert_eq!(p.peak_at(), "attention");
        // Q4 computes in F32: twice the bytes per token.
        assert_eq!(seven_b(16384, Logits::Last, 4).mlp, 2 * 205_056 * 16384);
    }

    /// Allocations per moment by hand at 16,384 tokens: every tensor is a chunk or more but cos
    /// and sin (2 MiB each) and k, k, v (16 MiB each); the MLP holds x + o(a), h1, q, q, a, the
    /// reshaped a, h2, the cache and four intermediate-sized tensors (12 chunks) beside them. All logits come in two pieces of at most 2^31 elements.
    #[test]
    fn chunked_by_hand() {
        const MIB: u64 = 1 << 20;
        let p = seven_b(16384, Logits::Last, 2);
        assert_eq!(p.chunked.mlp, 12 * POOL_CHUNK + 3 * 16 * MIB + 2 * 2 * MIB);
        // The logits moment: the final norm's input and output, the cache, cos and sin, and the
        // last position's logits (297 KiB).
        assert_eq!(p.chunked.logits, 3 * POOL_CHUNK + 2 * 2 * MIB + 304_128);
        assert_eq!(seven_b(16384, Logits::All, 2).chunked.logits, 5 * POOL_CHUNK + 2 * 2 * MIB);
        // Short prompts: tensors under a chunk count their bytes (512 tokens: H is 3.5 MiB).
        assert_eq!(
            seven_b(512, Logits::Last, 2).chunked.o_proj,
            8 * 512 * 7168 + 3 * 512 * 1024 + 2 * 64 * 1024 + 28 * MIB
        );
        // No slack: the busiest moment's bytes; a chunk's worth per chunk: each moment's share.
        assert_eq!(p.peak_with(0), p.peak());
        assert_eq!(p.peak_with(POOL_CHUNK), p.mlp + p.chunked.mlp);
    }

    /// The chunks keep every score matrix under the budget; a larger budget never lowers the peak.
    #[test]
    fn chunks_bound_the_scores() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let at = |budget| {
            phases(
                &cfg,
                &Prefill {
                    seq: 32768,
                    batch: 1,
                    act_bytes: 2,
                    logits: Logits::Last,
                    attention: AttentionMode::Bounded { budget },
                    cast: false,
                },
            )
            .attention
        };
        assert!(at(64 << 20) < at(256 << 20));
        assert!(at(256 << 20) < at(1 << 30));
        let naive = phases(
            &cfg,
            &Prefill {
                seq: 32768,
                batch: 1,
                act_bytes: 2,
                logits: Logits::Last,
                attention: AttentionMode::Naive,
                cast: false,
            },
        )
        .attention;
        assert!(naive > 3 * 28 * 32768 * 32768 * 2);
    }

    /// The two candidates give what walking every chunk gives (the walk kept here as the
    /// reference), across batches, budgets and contexts that leave a shorter last chunk or none.
    #[test]
    fn last_chunks_are_the_busiest() {
        let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
        let (heads, a) = (cfg.num_attention_heads as u64, 2u64);
        let h = cfg.hidden_size as u64 * a;
        let walk = |b: u64, s: u64, budget: u64| {
            let chunk = (budget / (b * heads * s * a).max(1)).clamp(1, s.max(1));
            let (mut worst, mut worst_share, mut s0) = (0, 0, 0);
            while s0 < s {
                let c = chunk.min(s - s0);
                let scores = b * heads * c * (s0 + c) * a;
                let masking = if c > 1 { scores + c * c + b * heads * c * c * a } else { 0 };
                let softmax = 2 * scores + b * c * h;
                let bytes = b * (s0 + c) * h + masking.max(softmax);
                if bytes > worst {
                    let own = if masking > softmax {
                        chunk_share([scores, c * c, b * heads * c * c * a])
                    } else {
                        chunk_share([scores, scores, b * c * h])
                    };
                    (worst, worst_share) = (bytes, share(s0 / chunk, b * chunk * h) + share(1, b * c * h) + own);
                }
                s0 += c;
            }
            if chunk < s && 2 * b * s * h > worst {
                (worst, worst_share) = (2 * b * s * h, share(s.div_ceil(chunk), b * chunk * h) + share(1, b * s * h));
            }
            (worst, worst_share)
        };
        for b in [1, 3] {
            for s in [1, 2, 7, 100, 1000, 4097, 12345] {
                for budget in [1, 1 << 12, 1 << 16, 1 << 20, 1 << 30] {
                    assert_eq!(bounded(&cfg, b, s, a, budget), walk(b, s, budget), "b {b} s {s} budget {budget}");
                }
            }
        }
    }

    /// The fused kernel by hand at 32k tokens: attention holds the layer's 4 H + 3 KV + rotary
    /// and the output (H) only; the MLP one H less than bounded's (no reshaped copy of the output).
    #[test]
    fn flash_holds_no_scores() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let at = |attention| {
            phases(&cfg, &Prefill { seq: 32768, batch: 1, act_bytes: 2, logits: Logits::Last, attention, cast: false })
        };
        let (flash, bounded) = (at(AttentionMode::Flash), at(AttentionMode::default()));
        assert_eq!(flash.attention, 32768 * (5 * 7168 + 3 * 1024 + 256));
        assert_eq!(flash.mlp, 32768 * (6 * 7168 + 3 * 1024 + 4 * 37888 + 256));
        assert_eq!(bounded.mlp - flash.mlp, 32768 * 7168);
        assert!(flash.peak() < bounded.peak());
    }
}
