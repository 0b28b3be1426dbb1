//! Which part of each Qwen2 weight a tensor-parallel rank holds. q, k, v (weights and biases) and
//! gate, up are split by output rows, whole heads to a rank; o and down by input columns, so each
//! rank's attention and MLP produce a partial sum of the full output (one all-reduce after each).
//! An untied head is split by vocabulary rows (each rank's logits gathered to all); the
//! embedding and the norms stay whole on every rank. K/V heads are split too: the
//! rank count must divide them (Qwen2.5-7B's 4 allow 2 or 4 ranks).

use crate::error::{LabError, Result};
use crate::model::load::weights::Weight;
use crate::model::DecoderConfig;
use std::collections::HashMap;

/// The config a rank computes with: its heads, K/V heads and MLP width; the head size kept.
pub fn shard_config(cfg: &DecoderConfig, ranks: usize) -> Result<DecoderConfig> {
    check(cfg, ranks)?;
    let mut c = cfg.clone();
    c.head_dim = Some(cfg.head_dim());
    c.num_attention_heads /= ranks;
    c.num_key_value_heads /= ranks;
    c.intermediate_size /= ranks;
    Ok(c)
}

/// Whether `ranks` divides what is split.
pub fn check(cfg: &DecoderConfig, ranks: usize) -> Result<()> {
    if ranks == 0 {
        return Err(LabError::input("tensor parallelism needs at least one rank"));
    }
    if cfg.model_type.is_moe() {
        return Err(LabError::input(format!(
            "{} is a mixture of experts: the lab splits dense models over GPUs (expert parallelism is not built)",
            cfg.model_type.name()
        )));
    }
    for (what, n) in [
        ("key/value heads", cfg.num_key_value_heads),
        ("attention heads", cfg.num_attention_heads),
        ("intermediate_size", cfg.intermediate_size),
    ] {
        if n % ranks != 0 {
            return Err(LabError::input(format!("{ranks} tensor-parallel ranks do not divide the model's {n} {what}")));
        }
    }
    Ok(())
}

/// The slice of tensor `name` that `rank` of `ranks` holds: (dimension, start, length), or None
/// for a tensor every rank holds whole.
pub fn slice_of(name: &str, cfg: &DecoderConfig, rank: usize, ranks: usize) -> Option<(usize, usize, usize)> {
    let d = cfg.head_dim();
    let q = cfg.num_attention_heads * d / ranks;
    let kv = cfg.num_key_value_heads * d / ranks;
    let mlp = cfg.intermediate_size / ranks;
    let part = |dim: usize, len: usize| Some((dim, rank * len, len));
    // An untied head is split by vocabulary where the ranks divide it (a tied one is the
    // embedding, which every rank holds whole).
    if name == "lm_head.weight" {
        return (!cfg.tie_word_embeddings && cfg.vocab_size.is_multiple_of(ranks))
            .then(|| (0, rank * cfg.vocab_size / ranks, cfg.vocab_size / ranks));
    }
    let leaf = name.strip_prefix("model.layers.")?.split_once('.')?.1;
    match leaf {
        "self_attn.q_proj.weight" | "self_attn.q_proj.bias" => part(0, q),
        "self_attn.k_proj.weight" | "self_attn.k_proj.bias" | "self_attn.v_proj.weight" | "self_attn.v_proj.bias" => {
            part(0, kv)
        }
        "self_attn.o_proj.weight" => part(1, q),
        "mlp.gate_proj.weight" | "mlp.up_proj.weight" => part(0, mlp),
        "mlp.down_proj.weight" => part(1, mlp),
        _ => None,
    }
}

/// Rank `rank`'s weights: its slices copied out (so the whole tensors can be freed), the rest
/// shared. Dense weights only: a quantized block does not split at a head's boundary.
pub fn shard_weights(
    w: HashMap<String, Weight>,
    cfg: &DecoderConfig,
    rank: usize,
    ranks: usize,
) -> Result<HashMap<String, Weight>> {
    check(cfg, ranks)?;
    w.into_iter().map(|(name, weight)| Ok((name.clone(), shard_tensor(&name, weight, cfg, rank, ranks)?))).collect()
}

/// Rank `rank`'s part of one tensor (the tensor itself when every rank holds it whole).
pub fn shard_tensor(name: &str, weight: Weight, cfg: &DecoderConfig, rank: usize, ranks: usize) -> Result<Weight> {
    weight.part(name, slice_of(name, cfg, rank, ranks))
}

/// Bytes one rank holds, by what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct RankLedger {
    /// Attention and MLP weights: this rank's share.
    pub sharded: u64,
    /// Embedding, norms, and the head where it is tied or the ranks do not divide the vocabulary:
    /// whole on every rank.
    pub replicated: u64,
    /// The KV cache for `tokens` tokens: this rank's K/V heads.
    pub kv_cache: u64,
}

impl RankLedger {
    pub fn weights(&self) -> u64 {
        self.sharded + self.replicated
    }
}

/// What each rank of `ranks` holds of `cfg` at `dtype_bytes` per weight, with a KV cache of
/// `tokens` positions at `kv_bytes` per element.
pub fn rank_ledger(
    cfg: &DecoderConfig,
    ranks: usize,
    dtype_bytes: u64,
    tokens: u64,
    kv_bytes: u64,
) -> Result<RankLedger> {
    check(cfg, ranks)?;
    let mut out = RankLedger::default();
    for spec in cfg.tensor_specs() {
        let elems: u64 = spec.shape.iter().map(|&x| x as u64).product();
        match slice_of(&spec.name, cfg, 0, ranks) {
            Some(_) => out.sharded += elems / ranks as u64 * dtype_bytes,
            None => out.replicated += elems * dtype_bytes,
        }
    }
    out.kv_cache = 2
        * cfg.num_hidden_layers as u64
        * (cfg.num_key_value_heads / ranks) as u64
        * cfg.head_dim() as u64
        * tokens
        * kv_bytes;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> DecoderConfig {
        DecoderConfig::preset("tiny").unwrap()
    }

    #[test]
    fn the_tiny_models_slices_by_hand() {
        let c = tiny();
        // tiny: hidden 256, 4 heads of 64, 2 K/V heads, MLP 512 (data/models/tiny.json).
        assert_eq!(
            (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size, c.head_dim()),
            (256, 4, 2, 512, 64)
        );
        let at = |leaf: &str, rank| slice_of(&format!("model.layers.1.{leaf}"), &c, rank, 2);
        // Rank 1 of 2: query heads 2-3 (rows 128..256), K/V head 1 (rows 64..128), MLP rows 256..512.
        assert_eq!(at("self_attn.q_proj.weight", 1), Some((0, 128, 128)));
        assert_eq!(at("self_attn.q_proj.bias", 1), Some((0, 128, 128)));
        assert_eq!(at("self_attn.k_proj.weight", 1), Some((0, 64, 64)));
        assert_eq!(at("self_attn.v_proj.bias", 0), Some((0, 0, 64)));
        assert_eq!(at("self_attn.o_proj.weight", 1), Some((1, 128, 128)));
        assert_eq!(at("mlp.up_proj.weight", 1), Some((0, 256, 256)));
        assert_eq!(at("mlp.down_proj.weight", 0), Some((1, 0, 256)));
        assert_eq!(at("input_layernorm.weight", 1), None);
        assert_eq!(slice_of("model.embed_tokens.weight", &c, 1, 2), None);
        let s = shard_config(&c, 2).unwrap();
        assert_eq!((s.num_attention_heads, s.num_key_value_heads, s.intermediate_size, s.head_dim()), (2, 1, 256, 64));
        // 4 ranks would leave half a K/V head each.
        let e = shard_config(&c, 4).unwrap_err().to_string();
        assert!(e.contains("4 tensor-parallel ranks do not divide the model's 2 key/value heads"), "{e}");
    }

    #[test]
    fn ledger_of_the_tiny_model_by_hand() {
        let c = tiny();
        let one = rank_ledger(&c, 1, 2, 100, 2).unwrap();
        let two = rank_ledger(&c, 2, 2, 100, 2).unwrap();
        // Per layer: q 256·256+256, k and v 128·256+128 each, o 256·256, gate/up/down 3·512·256;
        // the untied head 1024·256, split by its vocabulary rows.
        let layer = 256 * 256 + 256 + 2 * (128 * 256 + 128) + 256 * 256 + 3 * 512 * 256;
        let head = 1024 * 256 * 2;
        assert_eq!(one.sharded, c.num_hidden_layers as u64 * layer * 2 + head);
        assert_eq!(two.sharded * 2, one.sharded);
        assert_eq!(two.replicated, one.replicated);
        assert_eq!(slice_of("lm_head.weight", &c, 1, 2), Some((0, 512, 512)));
        // Tied, the head is the embedding: whole on every rank.
        let tied = DecoderConfig { tie_word_embeddings: true, ..c.clone() };
        assert_eq!(slice_of("lm_head.weight", &tied, 1, 2), None);
        // KV: 2 (K and V) × layers × one K/V head per rank × 64 × 100 tokens × 2 B.
        assert_eq!(two.kv_cache, 2 * c.num_hidden_layers as u64 * 64 * 100 * 2);
        assert_eq!(one.kv_cache, 2 * two.kv_cache);
    }
}
