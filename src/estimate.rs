//! Pure formulas: bytes a model, its KV cache and its logits take. No measurement, no experiment.

use crate::model::config::Qwen2Config;
use crate::model::precision::{ggml_bytes, ggml_dtype_for, Precision};

/// Weight bytes of `cfg` in `precision`, tensor by tensor (the Q4 plan per tensor for Q4).
pub fn weight_bytes(cfg: &Qwen2Config, precision: Precision) -> u64 {
    cfg.tensor_specs()
        .iter()
        .map(|s| match precision.dense_dtype() {
            Some(dtype) => (s.elem_count() * dtype.size_in_bytes()) as u64,
            None => ggml_bytes(ggml_dtype_for(s, cfg.tie_word_embeddings), s.elem_count()),
        })
        .sum()
}

/// KV cache bytes per token with grouped-query attention: 2 (K and V) × layers × kv_heads ×
/// head_dim × bytes. Qwen2.5-7B in BF16: 2 × 28 × 4 × 128 × 2 = 57,344 B.
pub fn kv_bytes_per_token(cfg: &Qwen2Config, dtype_bytes: usize) -> u64 {
    (2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim() * dtype_bytes) as u64
}

/// The report's formula, 2 × layers × hidden × bytes: right only without GQA (7× too big for 7B).
pub fn naive_kv_bytes_per_token(cfg: &Qwen2Config, dtype_bytes: usize) -> u64 {
    (2 * cfg.num_hidden_layers * cfg.hidden_size * dtype_bytes) as u64
}

/// Logits bytes per position kept: vocab × bytes (7B BF16: 304,128 B).
pub fn logits_bytes_per_token(cfg: &Qwen2Config, dtype_bytes: usize) -> u64 {
    (cfg.vocab_size * dtype_bytes) as u64
}

/// Decode's physical ceiling: every token reads every weight byte and the cache once, so
/// tokens/s ≤ bandwidth ÷ bytes moved per token.
pub fn decode_ceiling_tok_s(bandwidth_gbs: f64, bytes_per_token: u64) -> f64 {
    bandwidth_gbs * 1e9 / bytes_per_token.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_b_figures() {
        let cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
        assert_eq!(weight_bytes(&cfg, Precision::Bf16), 7_615_616_512 * 2);
        assert_eq!(weight_bytes(&cfg, Precision::F32), 7_615_616_512 * 4);
        assert_eq!(kv_bytes_per_token(&cfg, 2), 57_344);
        assert_eq!(naive_kv_bytes_per_token(&cfg, 2), 401_408);
        assert_eq!(logits_bytes_per_token(&cfg, 2), 304_128);
        // The report's 352.5 MB per added 1k tokens: KV + all-position logits.
        let per_1k = 1024 * (kv_bytes_per_token(&cfg, 2) + logits_bytes_per_token(&cfg, 2));
        assert!((per_1k as f64 / (1 << 20) as f64 - 353.0).abs() < 0.05);
        // Q4 plan: between 4.5 and 5 bits per weight on average.
        let q4 = weight_bytes(&cfg, Precision::Q4) as f64 * 8.0 / 7_615_616_512.0;
        assert!(q4 > 4.5 && q4 < 5.0, "{q4} bits/weight");
        assert!((decode_ceiling_tok_s(1000.0, 1_000_000_000) - 1000.0).abs() < 1e-9);
    }

    /// KV bytes per token for every preset, from the configs' layers, KV heads and head size
    /// (BF16): the GQA formula, and how far the report's formula overshoots.
    #[test]
    fn kv_per_token_every_preset() {
        let want = [
            ("qwen2.5-0.5b", 12_288u64, 7.0),   // 24 layers × 2 KV heads × 64
            ("qwen2.5-1.5b", 28_672, 6.0),      // 28 × 2 × 128
            ("qwen2.5-3b", 36_864, 8.0),        // 36 × 2 × 128
            ("qwen2.5-7b", 57_344, 7.0),        // 28 × 4 × 128
            ("qwen2.5-14b", 196_608, 5.0),      // 48 × 8 × 128
            ("qwen2.5-32b", 262_144, 5.0),      // 64 × 8 × 128
            ("qwen2.5-72b", 327_680, 8.0),      // 80 × 8 × 128
        ];
        for (name, bytes, ratio) in want {
            let cfg = Qwen2Config::preset(name).unwrap();
            assert_eq!(kv_bytes_per_token(&cfg, 2), bytes, "{name}");
            assert_eq!(naive_kv_bytes_per_token(&cfg, 2) as f64 / bytes as f64, ratio, "{name}");
        }
    }
}
