//! Training memory per GPU: weights, gradients, an F32 master copy under mixed precision, the
//! optimizer's states, and what ZeRO divides across GPUs; and the activations of the lab's own F32
//! training step (`model::train`), with and without gradient checkpointing, counted tensor by
//! tensor from candle's forward and backward.
//!
//! The related articles' "FP32 training of a 7B model needs 112 GB" is 4 B of weights + 4 B of
//! gradients + 8 B of Adam states per parameter: 16 × 7e9. Qwen2.5-7B has 7,615,616,512
//! parameters, so the same rule gives 121.8 GB (113.5 GiB) for it.

use serde::{Deserialize, Serialize};

/// The optimizer whose states are kept per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Two moments per parameter, in F32
    Adamw,
    /// Two moments per parameter, in BF16
    AdamwBf16,
    /// Two moments per parameter, 8-bit blocks (1 B each plus one F32 scale per 2,048 values)
    Adamw8bit,
    /// Plain SGD without momentum: no state
    Sgd,
}

impl Optimizer {
    /// State bytes for `params` parameters.
    pub fn state_bytes(self, params: u64) -> u64 {
        match self {
            Self::Adamw => 2 * 4 * params,
            Self::AdamwBf16 => 2 * 2 * params,
            Self::Adamw8bit => 2 * (params + 4 * params.div_ceil(2048)),
            Self::Sgd => 0,
        }
    }
}

/// How a model is trained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainSetup {
    /// Bytes per weight as the forward pass reads it (4 in F32, 2 in BF16).
    pub weight_bytes: u64,
    /// An F32 master copy of the weights that the optimizer updates (mixed precision).
    pub master_f32: bool,
    pub optimizer: Optimizer,
    /// ZeRO stage 0–3: 1 splits optimizer states (and master weights) across GPUs, 2 gradients
    /// too, 3 the weights too.
    pub zero: u8,
    pub gpus: u64,
}

impl TrainSetup {
    /// The articles' rule: F32 weights, F32 gradients, F32 Adam, one GPU.
    pub fn fp32_adam() -> Self {
        Self { weight_bytes: 4, master_f32: false, optimizer: Optimizer::Adamw, zero: 0, gpus: 1 }
    }

    /// BF16 weights and gradients, an F32 master copy and F32 Adam states (the usual mixed precision).
    pub fn mixed_bf16() -> Self {
        Self { weight_bytes: 2, master_f32: true, optimizer: Optimizer::Adamw, zero: 0, gpus: 1 }
    }
}

/// Bytes per GPU of what a training step keeps besides activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TrainLedger {
    pub weights: u64,
    pub gradients: u64,
    pub master: u64,
    pub optimizer: u64,
}

impl TrainLedger {
    pub fn total(&self) -> u64 {
        self.weights + self.gradients + self.master + self.optimizer
    }
}

/// The ledger of `params` parameters under `setup`. Gradients have the weights' dtype; ZeRO
/// divides a part by the GPU count (rounded up) from the stage that shards it.
pub fn ledger(params: u64, setup: &TrainSetup) -> TrainLedger {
    let gpus = setup.gpus.max(1);
    let shard = |bytes: u64, from_stage: u8| if setup.zero >= from_stage { bytes.div_ceil(gpus) } else { bytes };
    TrainLedger {
        weights: shard(params * setup.weight_bytes, 3),
        gradients: shard(params * setup.weight_bytes, 2),
        master: shard(if setup.master_f32 { 4 * params } else { 0 }, 1),
        optimizer: shard(setup.optimizer.state_bytes(params), 1),
    }
}

// ---------------------------------------------------------------------------------------------
// Activations of the lab's F32 training step

use crate::model::DecoderConfig;

/// A batch of `batch` sequences of `seq` tokens, trained in F32 (4 B per element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainShape {
    pub batch: usize,
    pub seq: usize,
}

const F32: u64 = 4;

impl TrainShape {
    fn tokens(&self) -> u64 {
        (self.batch * self.seq) as u64
    }

    /// One layer's score matrix, [batch, heads, seq, seq], in elements.
    fn scores(&self, cfg: &DecoderConfig) -> u64 {
        (self.batch * cfg.num_attention_heads) as u64 * (self.seq * self.seq) as u64
    }
}

/// Bytes one layer's forward leaves in the graph (candle keeps every op's output while the loss
/// lives), per token unless noted, in F32 elements:
/// - two composed RMS norms (x², x/rms, × weight: 3 H each, plus 4 per-row scalars each);
/// - q, k, v products and their biases (2 H + 2·2 KV), heads-first copies of q and k (H + KV),
///   V copied into the cache (KV);
/// - composed rotary for q and k: x·cos, −x₂, the rotated concat, ·sin, the sum (4.5 H + 4.5 KV),
///   plus cos and sin concatenated twice per call (4 · seq · head_dim, shared by the batch);
/// - K and V repeated for every query head (2 H), the attention output and its reshaped copy
///   (2 H), the o product and the residual (2 H);
/// - the naive scores: product, scaled, masked, max-subtracted, exp, normalised (6 score
///   matrices) plus the row max and sum (2 · heads), and the u8 causal mask (seq² B);
/// - the MLP: gate, up, silu, product (4 I), down and the residual (2 H).
pub fn graph_layer(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    let (n, h, kv, i) = (sh.tokens(), cfg.hidden_size as u64, cfg.kv_dim() as u64, cfg.intermediate_size as u64);
    let heads = cfg.num_attention_heads as u64;
    // 21.5 H and 10.5 KV per token, kept as halves.
    let halves = n * (43 * h + 21 * kv) / 2;
    F32 * (halves + n * (4 * i + 8 + 2 * heads) + 6 * sh.scores(cfg) + 4 * (sh.seq * cfg.head_dim()) as u64)
        + (sh.seq * sh.seq) as u64
}

/// The head's graph: the embedding output (H), the final norm (3 H + 4), the logits (V), and
/// cross-entropy's log-softmax (max-subtracted, exp, log-probabilities: 3 V, plus 4 per-row
/// scalars).
pub fn graph_head(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    let (n, h, v) = (sh.tokens(), cfg.hidden_size as u64, cfg.vocab_size as u64);
    F32 * n * (h + 3 * h + 4 + 4 * v + 4)
}

/// Everything a forward with trainable weights keeps until the backward ends.
pub fn graph(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    cfg.num_hidden_layers as u64 * graph_layer(cfg, sh) + graph_head(cfg, sh)
}

/// Gradients candle computes for constants a layer's graph uses, kept in the gradient store
/// until it is dropped: the masked fill's −∞ (a score matrix), and rotary's broadcast cos and sin
/// for q and k (H, H, KV, KV), each holding the chain it was computed from (its zeros, the
/// product with the activation, the upstream gradient: 4× its size).
pub fn constant_grads_layer(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    let (n, h, kv) = (sh.tokens(), cfg.hidden_size as u64, cfg.kv_dim() as u64);
    F32 * (sh.scores(cfg) + 4 * n * (2 * h + 2 * kv))
}

/// The head's backward at its busiest, measured (CPU and H200 alike) rather than derived from
/// candle's backward one line at a time: cross-entropy's holds seven logits-sized tensors at once
/// (a gradient computed from an output of the graph — exp's, the log-probabilities' — records its
/// inputs, so a running sum keeps its addends alive until it is consumed); the head's product
/// holds the logits' gradient and five weight-sized tensors. Qwen's 151,936-word vocabulary makes
/// the first the larger from a few hundred tokens on.
pub fn head_backward(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    let (n, v) = (sh.tokens(), cfg.vocab_size as u64);
    let table = (cfg.hidden_size * cfg.vocab_size) as u64;
    F32 * (7 * n * v).max(n * v + 5 * table)
}

/// What a training step holds above weights and optimizer states, at its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepActivations {
    /// What the forward keeps for the backward (the graph, or with checkpointing the layer inputs).
    pub forward: u64,
    /// The gradients of every parameter (F32).
    pub gradients: u64,
    /// The peak above weights and states.
    pub peak: u64,
    /// Where the peak falls.
    pub phase: &'static str,
    /// The AdamW update's peak above weights and states: the gradients, and three tensors the size
    /// of the largest weight (`model::train::optim`, which updates in place: the second moment's line).
    /// candle_nn's AdamW, which records its update's ops, held 14.
    pub optimizer_peak: u64,
}

impl StepActivations {
    /// The step's busiest moment above weights and states: the backward or the update.
    pub fn above_states(&self) -> u64 {
        self.peak.max(self.optimizer_peak)
    }
}

/// The F32 AdamW step's peak: weights and states (12 B per parameter) and its busiest moment.
pub fn step_peak(cfg: &DecoderConfig, params: u64, sh: TrainShape, checkpoint: bool) -> u64 {
    let l = ledger(params, &TrainSetup::fp32_adam());
    l.weights + l.optimizer + step_activations(cfg, params, sh, checkpoint).above_states()
}

/// The lab's F32 training step on `cfg` with `params` parameters.
/// - Plain: the peak is at the end of the backward, the embedding's gradient being added: the
///   whole graph, every gradient, the constants' gradients, the table's new sum and the incoming
///   [tokens, hidden] gradient; or earlier, at the head, if its backward outweighs the gradients.
/// - Checkpointed: the forward keeps each layer's input ((L + 1) · tokens · H); the peak is the largest
///   of the head's phase (inputs, head graph, its backward), a layer's (every gradient, the layer
///   recomputed with its constants' gradients, four score matrices of its backward, its input and
///   output gradients), and the embedding's (every gradient, the table's gradient and its sum).
pub fn step_activations(cfg: &DecoderConfig, params: u64, sh: TrainShape, checkpoint: bool) -> StepActivations {
    step_activations_updating(cfg, params, sh, checkpoint, crate::model::train::optim::UPDATE_COPIES)
}

/// candle_nn's AdamW, which the committed training runs before 2026-11-24 used: its update records
/// its ops, so the new moments, their bias-corrected copies, the step and the new weight hold every
/// intermediate until the weight is done: 3 + 3 + 1 + 1 + 1 + 3 + 2 tensors of its size.
pub const CANDLE_NN_ADAMW_COPIES: u64 = 14;

/// `step_activations` with an AdamW update that holds `update_copies` tensors of the largest
/// weight's size beside the gradients.
pub fn step_activations_updating(
    cfg: &DecoderConfig,
    params: u64,
    sh: TrainShape,
    checkpoint: bool,
    update_copies: u64,
) -> StepActivations {
    let (n, h, layers) = (sh.tokens(), cfg.hidden_size as u64, cfg.num_hidden_layers as u64);
    let table = F32 * (cfg.hidden_size * cfg.vocab_size) as u64;
    let gradients = F32 * params;
    let hidden = F32 * n * h;
    let head = graph_head(cfg, sh) + head_backward(cfg, sh);
    let largest = cfg.tensor_specs().iter().map(|t| t.elem_count() as u64).max().unwrap_or(0);
    let optimizer_peak = gradients + update_copies * F32 * largest;
    if !checkpoint {
        let forward = graph(cfg, sh);
        let end = forward + gradients + layers * constant_grads_layer(cfg, sh) + table + hidden;
        let head = forward + head_backward(cfg, sh);
        let (peak, phase) = if head > end { (head, "head backward") } else { (end, "embedding backward") };
        return StepActivations { forward, gradients, peak, phase, optimizer_peak };
    }
    // Each layer's input, the last layer's output, and the rotary table (cos and sin).
    let forward = (layers + 1) * hidden + F32 * (sh.seq * cfg.head_dim()) as u64;
    let phases = [
        (forward + head, "head backward"),
        (
            gradients + graph_layer(cfg, sh) + constant_grads_layer(cfg, sh) + F32 * 4 * sh.scores(cfg) + 3 * hidden,
            "layer backward",
        ),
        (gradients + 2 * table + 2 * hidden, "embedding backward"),
    ];
    let (peak, phase) = phases.into_iter().max_by_key(|p| p.0).unwrap_or((0, ""));
    StepActivations { forward, gradients, peak, phase, optimizer_peak }
}

/// The least a PyTorch step with F32 weights and `torch.optim.AdamW` (its default `foreach`
/// implementation) peaks at: weights, gradients and the two moments (16 B per parameter), and
/// during the update one F32 copy of every parameter at once (the multi-tensor ops' results): 20 B
/// per parameter.
pub fn pytorch_update_peak(params: u64) -> u64 {
    20 * params
}

/// What one layer of transformers' Qwen2 keeps for the backward in an F32 step with SDPA, per
/// token in F32 elements: each RMS norm its input, the normalised rows and the product with the
/// weight that the next projections save (3 H, two norms); attention its scaled query, K and V
/// repeated for every query head (SDPA's math path: F32 with grouped K/V heads has no fused
/// kernel), its softmax (heads × seq) and the output the o projection saves (4 H); the MLP gate,
/// up, silu and their product (4 I). Rotary and the residual adds save nothing of that size.
pub fn pytorch_layer_keeps(cfg: &DecoderConfig, sh: TrainShape) -> u64 {
    let (n, h, i) = (sh.tokens(), cfg.hidden_size as u64, cfg.intermediate_size as u64);
    F32 * (n * (10 * h + 4 * i) + sh.scores(cfg))
}

/// A PyTorch F32 step (transformers' Qwen2, SDPA, `torch.optim.AdamW`) above weights and states,
/// the same items as the lab's. Its forward keeps cross-entropy's log-probabilities (V a token),
/// the final norm's three tensors (3 H) and every layer's `pytorch_layer_keeps` (checkpointed: a
/// layer's input, H). Its backward peaks at the head (everything kept and two logits-sized
/// tensors: the log-softmax's gradient and the logits') or at the end, where the embedding's
/// gradient meets the tied head's (every gradient and two tables); its update at 20 B per
/// parameter (`pytorch_update_peak`). Counted from what each op saves, no fitted constant; on an
/// H100 (`data/results/h100/2026-11-24-train`) the forward's keeps of 0.5B, 1.5B and 3B land within
/// 1.4 % of PyTorch's, its backward peaks within 1.3 % (`data/results/record.rs`).
pub fn pytorch_step(cfg: &DecoderConfig, params: u64, sh: TrainShape, checkpoint: bool) -> StepActivations {
    let (n, h, v, layers) = (sh.tokens(), cfg.hidden_size as u64, cfg.vocab_size as u64, cfg.num_hidden_layers as u64);
    let logits = F32 * n * v;
    let per_layer = if checkpoint { F32 * n * h } else { pytorch_layer_keeps(cfg, sh) };
    let forward = logits + F32 * n * 3 * h + layers * per_layer;
    let l = ledger(params, &TrainSetup::fp32_adam());
    let gradients = l.gradients;
    let table = F32 * h * v;
    let (head, end) = (forward + 2 * logits, gradients + 2 * table);
    let (peak, phase) = if head > end { (head, "head backward") } else { (end, "embedding backward") };
    let optimizer_peak = pytorch_update_peak(params) - l.weights - l.optimizer;
    StepActivations { forward, gradients, peak, phase, optimizer_peak }
}

/// The articles' activation estimate: batch × seq × hidden × layers × 4 B ("FP32 for backward
/// pass"), and checkpointing saving 65 % of it.
pub fn articles_activations(cfg: &DecoderConfig, sh: TrainShape, checkpoint: bool) -> u64 {
    let full = F32 * sh.tokens() * (cfg.hidden_size * cfg.num_hidden_layers) as u64;
    if checkpoint {
        full * 35 / 100
    } else {
        full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P7: u64 = 7_615_616_512;

    #[test]
    fn the_articles_112_gb() {
        // 16 B per parameter: the articles' 7e9 parameters give 112 GB exactly.
        assert_eq!(ledger(7_000_000_000, &TrainSetup::fp32_adam()).total(), 112_000_000_000);
        // Qwen2.5-7B's real count: 121,849,864,192 B.
        assert_eq!(ledger(P7, &TrainSetup::fp32_adam()).total(), 16 * P7);
    }

    #[test]
    fn mixed_precision_saves_nothing_on_states() {
        // BF16 weights and grads (4 B) + F32 master (4 B) + F32 Adam (8 B): 16 B, the same as FP32.
        let mixed = ledger(P7, &TrainSetup::mixed_bf16());
        assert_eq!(mixed.total(), 16 * P7);
        assert_eq!((mixed.weights, mixed.gradients, mixed.master, mixed.optimizer), (2 * P7, 2 * P7, 4 * P7, 8 * P7));
        // BF16 states without a master copy: 8 B per parameter.
        let lean = TrainSetup { master_f32: false, optimizer: Optimizer::AdamwBf16, ..TrainSetup::mixed_bf16() };
        assert_eq!(ledger(P7, &lean).total(), 8 * P7);
        // 8-bit Adam: 2 B of moments plus a scale per 2,048 values each.
        assert_eq!(Optimizer::Adamw8bit.state_bytes(4096), 2 * (4096 + 8));
        assert_eq!(Optimizer::Sgd.state_bytes(P7), 0);
    }

    #[test]
    fn zero_stages_divide_what_they_shard() {
        let base = TrainSetup { gpus: 8, ..TrainSetup::mixed_bf16() };
        let at = |zero| ledger(P7, &TrainSetup { zero, ..base });
        assert_eq!(at(0).total(), 16 * P7);
        // Stage 1: master and states over 8 GPUs: 2 + 2 + 12 / 8 = 5.5 B per parameter.
        assert_eq!(at(1), TrainLedger { weights: 2 * P7, gradients: 2 * P7, master: P7 / 2, optimizer: P7 });
        // Stage 2: gradients too: 2 + (2 + 12) / 8 = 3.75 B.
        assert_eq!(at(2).gradients, (2 * P7).div_ceil(8));
        // Stage 3: everything: 16 / 8 = 2 B.
        assert_eq!(at(3).total(), 2 * P7);
        // One GPU: ZeRO changes nothing.
        assert_eq!(ledger(P7, &TrainSetup { zero: 3, gpus: 1, ..base }).total(), 16 * P7);
    }

    #[test]
    fn activations_of_the_tiny_model_by_hand() {
        // tiny: H 256, KV 128, I 512, 4 heads of 64, V 1024, 2 layers; one sequence of 64 tokens.
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let sh = TrainShape { batch: 1, seq: 64 };
        let scores = 4 * 64 * 64;
        // 21.5·256 + 10.5·128 + 4·512 + 8 + 2·4 = 8,912 per token; 6 score matrices; 4·64·64 of rotary.
        let layer = 4 * (64 * 8_912 + 6 * scores + 4 * 64 * 64) + 64 * 64;
        assert_eq!(graph_layer(&cfg, sh), layer);
        assert_eq!(graph_head(&cfg, sh), 4 * 64 * (4 * 256 + 4 * 1024 + 8));
        assert_eq!(constant_grads_layer(&cfg, sh), 4 * (scores + 64 * 4 * 768));
        // The head product (64·1024 + 5·262,144) beats seven logits-sized tensors (7·64·1024).
        assert_eq!(head_backward(&cfg, sh), 4 * (64 * 1024 + 5 * 262_144));
        let p = cfg.param_count() as u64;
        let plain = step_activations(&cfg, p, sh, false);
        assert_eq!(plain.phase, "embedding backward");
        assert_eq!(
            plain.peak,
            graph(&cfg, sh) + 4 * p + 2 * constant_grads_layer(&cfg, sh) + 4 * 262_144 + 4 * 64 * 256
        );
        let ckpt = step_activations(&cfg, p, sh, true);
        assert_eq!(ckpt.forward, 3 * 4 * 64 * 256 + 4 * 64 * 64);
        // AdamW in place: the gradients and 3 copies of the largest tensor (the 1,024 × 256 embedding).
        assert_eq!(plain.optimizer_peak, 4 * p + 3 * 4 * 262_144);
        assert!(ckpt.peak < plain.peak);
        // The articles': 64 · 256 · 2 · 4 B, and 35 % of it kept.
        assert_eq!(articles_activations(&cfg, sh, false), 131_072);
        assert_eq!(articles_activations(&cfg, sh, true), 45_875);
    }

    #[test]
    fn pytorch_step_of_the_tiny_model_by_hand() {
        // tiny: H 256, I 512, 4 heads, V 1024, 2 layers; one sequence of 64 tokens.
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let sh = TrainShape { batch: 1, seq: 64 };
        let p = cfg.param_count() as u64;
        // A layer: 64 · (10 · 256 + 4 · 512) + 4 · 64 · 64 elements.
        assert_eq!(pytorch_layer_keeps(&cfg, sh), 4 * (64 * 4_608 + 16_384));
        let plain = pytorch_step(&cfg, p, sh, false);
        // The log-probabilities (64 · 1024), the final norm (3 · 64 · 256), two layers.
        assert_eq!(plain.forward, 4 * (65_536 + 49_152) + 2 * pytorch_layer_keeps(&cfg, sh));
        // The head's two logits-sized tensors beside the gradients and two 1,024 × 256 tables.
        assert_eq!(plain.peak, (plain.forward + 8 * 65_536).max(4 * p + 8 * 262_144));
        let ckpt = pytorch_step(&cfg, p, sh, true);
        assert_eq!(ckpt.forward, 4 * (65_536 + 49_152 + 2 * 64 * 256));
        // The update: gradients and one F32 copy of every parameter (20 B less weights and states).
        assert_eq!(plain.optimizer_peak, 8 * p);
        assert!(ckpt.forward < plain.forward);
    }
}
