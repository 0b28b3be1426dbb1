//! Bytes of the weights, the KV cache and the logits, and the decode ceiling they imply.

use crate::model::config::{DecoderConfig, TensorSpec};
use crate::model::gguf::recipe::use_more_bits;
use crate::model::precision::Precision;

/// Weight bytes of `cfg` in `precision`, tensor by tensor (each as `Precision::held` holds it).
pub fn weight_bytes(cfg: &DecoderConfig, precision: Precision) -> u64 {
    sum_over_tensors(cfg, |s| precision.held(cfg, s).bytes(s.elem_count()))
}

/// `price` summed over every tensor of `cfg`, one layer of each kind priced (`per_layer`): the
/// searches call this hundreds of times, and a 4,096-layer config has 49,000 tensors to name.
pub fn sum_over_tensors(cfg: &DecoderConfig, price: impl Fn(&TensorSpec) -> u64) -> u64 {
    let outside: u64 = with_layers(cfg, 0).tensor_specs().iter().map(&price).sum();
    outside + (0..cfg.num_hidden_layers).map(per_layer(cfg, &price)).sum::<u64>()
}

/// `price` summed over layer `i`'s tensors, as a function of `i`. Layers differ only where
/// llama.cpp's `use_more_bits` promotes one (Q4_K_M's attn_v and ffn_down), so there are at most
/// two kinds, and one layer of each is priced.
pub fn per_layer(cfg: &DecoderConfig, price: impl Fn(&TensorSpec) -> u64) -> impl Fn(usize) -> u64 {
    let n = cfg.num_hidden_layers;
    let first: Vec<TensorSpec> =
        with_layers(cfg, 1).tensor_specs().into_iter().filter(|s| s.name.starts_with("model.layers.0.")).collect();
    let layer = |i: usize| -> u64 {
        let prefix = format!("model.layers.{i}.");
        first
            .iter()
            .map(|s| {
                price(&TensorSpec { name: s.name.replacen("model.layers.0.", &prefix, 1), shape: s.shape.clone() })
            })
            .sum()
    };
    let more = move |i: usize| use_more_bits(i as i64, n as i64);
    let one = |kind: bool| (0..n).find(|&i| more(i) == kind).map(layer).unwrap_or(0);
    let (promoted, plain) = (one(true), one(false));
    move |i| if more(i) { promoted } else { plain }
}

/// The bytes of the experts a token's router does not pick (0 for a dense model): batch-1
/// decoding reads the router and `active` experts a layer, not all of them. Every expert of a
/// layer is held alike, so the idle ones are (experts − active) / experts of the experts' bytes.
pub fn idle_expert_bytes(cfg: &DecoderConfig, precision: Precision) -> u64 {
    let Some(e) = cfg.experts() else { return 0 };
    let experts = sum_over_tensors(cfg, |s| {
        if s.name.contains(".experts.") {
            precision.held(cfg, s).bytes(s.elem_count())
        } else {
            0
        }
    });
    experts / e.experts as u64 * (e.experts - e.active) as u64
}

/// `cfg` with `n` layers: its tensors are the outside ones and the first `n` layers'.
pub fn with_layers(cfg: &DecoderConfig, n: usize) -> DecoderConfig {
    DecoderConfig { num_hidden_layers: n, ..cfg.clone() }
}

/// KV cache bytes per token with grouped-query attention: 2 (K and V) × layers × kv_heads ×
/// head_dim × bytes. Qwen2.5-7B in BF16: 2 × 28 × 4 × 128 × 2 = 57,344 B.
pub fn kv_bytes_per_token(cfg: &DecoderConfig, dtype_bytes: usize) -> u64 {
    (2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim() * dtype_bytes) as u64
}

/// The report's formula, 2 × layers × hidden × bytes: right only without GQA (7× too big for 7B).
pub fn naive_kv_bytes_per_token(cfg: &DecoderConfig, dtype_bytes: usize) -> u64 {
    (2 * cfg.num_hidden_layers * cfg.hidden_size * dtype_bytes) as u64
}

/// Logits bytes per position kept: vocab × bytes (7B BF16: 304,128 B).
pub fn logits_bytes_per_token(cfg: &DecoderConfig, dtype_bytes: usize) -> u64 {
    (cfg.vocab_size * dtype_bytes) as u64
}

/// Decode's physical ceiling: every token reads every weight byte and the cache once, so
/// tokens/s ≤ bandwidth ÷ bytes moved per token.
pub fn decode_ceiling_tok_s(bandwidth_gbs: f64, bytes_per_token: u64) -> f64 {
    bandwidth_gbs * 1e9 / bytes_per_token.max(1) as f64
}

/// Bytes one batch-1 or batched decoding step reads from device memory: every weight once (of a
/// mixture, the experts one token picks),
/// except an untied embedding table (one row per token is looked up; a tied table is the head and
/// is read whole), and the KV cache of each sequence at `context` tokens. Its ceiling is the
/// device's read bandwidth ÷ these bytes.
pub fn decode_read_bytes(cfg: &DecoderConfig, precision: Precision, context: usize, batch: usize) -> u64 {
    let embed = with_layers(cfg, 0).tensor_specs().into_iter().find(|s| s.name == "model.embed_tokens.weight");
    let table = match (cfg.tie_word_embeddings, embed) {
        (false, Some(s)) => precision.held(cfg, &s).bytes(s.elem_count()),
        _ => 0,
    };
    weight_bytes(cfg, precision) - table - idle_expert_bytes(cfg, precision)
        + kv_bytes_per_token(cfg, precision.act_dtype().size_in_bytes()) * (context * batch) as u64
}
