//! Pure formulas: bytes a model, its KV cache and its logits take (here), and what training adds
//! (`training`). No measurement, no experiment.

use crate::model::config::{Qwen2Config, TensorSpec};
use crate::model::gguf::recipe::use_more_bits;
use crate::model::precision::Precision;
use crate::model::Logits;

pub mod fit;
pub mod sweep;
pub mod training;
pub mod transient;
pub mod workspace;

/// Weight bytes of `cfg` in `precision`, tensor by tensor (each as `Precision::held` holds it).
pub fn weight_bytes(cfg: &Qwen2Config, precision: Precision) -> u64 {
    sum_over_tensors(cfg, |s| precision.held(cfg, s).bytes(s.elem_count()))
}

/// `price` summed over every tensor of `cfg`, one layer of each kind priced and multiplied: the
/// searches call this hundreds of times, and a 4,096-layer config has 49,000 tensors to name.
/// Layers differ only where llama.cpp's `use_more_bits` promotes one (Q4_K_M's attn_v and
/// ffn_down), so there are at most two kinds.
pub fn sum_over_tensors(cfg: &Qwen2Config, price: impl Fn(&TensorSpec) -> u64) -> u64 {
    let n = cfg.num_hidden_layers;
    let outside: u64 = with_layers(cfg, 0).tensor_specs().iter().map(&price).sum();
    let first: Vec<TensorSpec> = with_layers(cfg, 1).tensor_specs().into_iter().filter(|s| s.name.starts_with("model.layers.0.")).collect();
    let layer = |i: usize| -> u64 {
        let prefix = format!("model.layers.{i}.");
        first.iter().map(|s| price(&TensorSpec { name: s.name.replacen("model.layers.0.", &prefix, 1), shape: s.shape.clone() })).sum()
    };
    let more = |i: usize| use_more_bits(i as i64, n as i64);
    let promoted = (0..n).filter(|&i| more(i)).count();
    [(true, promoted), (false, n - promoted)]
        .into_iter()
        .filter_map(|(kind, count)| (0..n).find(|&i| more(i) == kind).map(|i| count as u64 * layer(i)))
        .sum::<u64>()
        + outside
}

/// `cfg` with `n` layers: its tensors are the outside ones and the first `n` layers'.
pub fn with_layers(cfg: &Qwen2Config, n: usize) -> Qwen2Config {
    Qwen2Config { num_hidden_layers: n, ..cfg.clone() }
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

/// Bytes one batch-1 or batched decoding step reads from device memory: every weight once,
/// except an untied embedding table (one row per token is looked up; a tied table is the head and
/// is read whole), and the KV cache of each sequence at `context` tokens. Its ceiling is the
/// device's read bandwidth ÷ these bytes.
pub fn decode_read_bytes(cfg: &Qwen2Config, precision: Precision, context: usize, batch: usize) -> u64 {
    let embed = with_layers(cfg, 0).tensor_specs().into_iter().find(|s| s.name == "model.embed_tokens.weight");
    let table = match (cfg.tie_word_embeddings, embed) {
        (false, Some(s)) => precision.held(cfg, &s).bytes(s.elem_count()),
        _ => 0,
    };
    weight_bytes(cfg, precision) - table + kv_bytes_per_token(cfg, precision.act_dtype().size_in_bytes()) * (context * batch) as u64
}

/// A prefill: `batch` sequences of `seq` tokens in `precision`, keeping `logits`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    pub precision: Precision,
    pub seq: usize,
    pub batch: usize,
    pub logits: Logits,
}

/// Bytes a prefill needs at its peak: the weights, the KV cache and the logits it keeps (in the
/// activation dtype: F32 for the lab's Q4, which computes in F32), and the transient above them,
/// given per token (measured by the caller at a size that fitted).
pub fn prefill_need(cfg: &Qwen2Config, w: &Workload, transient_per_token: f64) -> u64 {
    let act = w.precision.act_dtype().size_in_bytes();
    let tokens = (w.seq * w.batch) as u64;
    let logit_rows = match w.logits {
        Logits::All => tokens,
        Logits::Last => w.batch as u64,
    };
    weight_bytes(cfg, w.precision) + kv_bytes_per_token(cfg, act) * tokens + logits_bytes_per_token(cfg, act) * logit_rows + (transient_per_token * tokens as f64) as u64
}

/// What the allocator must map for `w`: the weights, and the rest times `pool_factor`, the ratio
/// of bytes the pool mapped to bytes it handed out above the weights (measured at a size that
/// fitted; 1.0 for an allocator that reuses every freed byte). The stream-ordered pool maps more
/// than it hands out while a forward frees and allocates blocks of many sizes without a
/// synchronisation: its OOMs come from this, not from the allocated total.
pub fn mapped_need(cfg: &Qwen2Config, w: &Workload, transient_per_token: f64, pool_factor: f64) -> u64 {
    let weights = weight_bytes(cfg, w.precision);
    let above = prefill_need(cfg, w, transient_per_token) - weights;
    weights + (above as f64 * pool_factor.max(1.0)) as u64
}

use fit::largest;

/// One way out of an OOM and what it would need.
#[derive(Debug, Clone, PartialEq)]
pub struct Remedy {
    pub what: &'static str,
    pub change: String,
    pub need: u64,
    pub fits: bool,
}

/// What would have made `w` fit in `capacity` bytes: a shorter context, last-token logits, a
/// smaller batch, Q4 weights, or some layers' weights kept off the GPU (offload).
pub fn remedies(cfg: &Qwen2Config, w: &Workload, capacity: u64, transient_per_token: f64, pool_factor: f64) -> Vec<Remedy> {
    let need = |w: &Workload| mapped_need(cfg, w, transient_per_token, pool_factor);
    let mut out = Vec::new();
    let seq = largest(w.seq, |s| need(&Workload { seq: s, ..*w }) <= capacity);
    out.push(Remedy { what: "shorter context", change: format!("{} → {seq} tokens", w.seq), need: need(&Workload { seq: seq.max(1), ..*w }), fits: seq > 0 });
    if w.logits == Logits::All {
        let n = need(&Workload { logits: Logits::Last, ..*w });
        out.push(Remedy { what: "last-token logits", change: "all → last".into(), need: n, fits: n <= capacity });
    }
    if w.batch > 1 {
        let b = largest(w.batch, |b| need(&Workload { batch: b, ..*w }) <= capacity);
        out.push(Remedy { what: "smaller batch", change: format!("{} → {b}", w.batch), need: need(&Workload { batch: b.max(1), ..*w }), fits: b > 0 });
    }
    if !w.precision.is_quantized() {
        let n = need(&Workload { precision: Precision::Q4KM, ..*w });
        out.push(Remedy { what: "Q4 weights", change: format!("{} → q4_k_m (llama.cpp's mix, computing in BF16)", w.precision), need: n, fits: n <= capacity });
    }
    // Offload: each layer's weights moved to the host frees its share of the weights.
    let total = need(w);
    let per_layer = weight_bytes(cfg, w.precision) / (cfg.num_hidden_layers as u64 + 1).max(1);
    let over = total.saturating_sub(capacity);
    let layers = over.div_ceil(per_layer.max(1)) as usize;
    let n = cfg.num_hidden_layers;
    out.push(if layers <= n {
        Remedy { what: "offload", change: format!("{layers} of {n} layers' weights in host memory"), need: total - per_layer * layers as u64, fits: true }
    } else {
        Remedy { what: "offload", change: format!("not enough: all {n} layers' weights would leave {} too many", over.saturating_sub(per_layer * n as u64)), need: total - per_layer * n as u64, fits: false }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pricing one layer (of each kind) and multiplying gives every tensor's sum, for every
    /// preset and precision.
    #[test]
    fn one_layer_times_layers_is_every_tensor() {
        for (name, _) in crate::model::config::PRESETS {
            let cfg = Qwen2Config::preset(name).unwrap();
            for p in [Precision::F32, Precision::Bf16, Precision::Q4, Precision::Q4KM, Precision::Q4KMF32] {
                let each: u64 = cfg.tensor_specs().iter().map(|s| p.held(&cfg, s).bytes(s.elem_count())).sum();
                assert_eq!(weight_bytes(&cfg, p), each, "{name} {p}");
            }
        }
    }

    /// Q4_K_M for Qwen2.5-7B: llama.cpp's tensor bytes (4,677,120,000 B, the H100 and CPU runs'
    /// llama-quantize figure) less the vectors' F32 → BF16 (28 × (2 norms + 3 biases) + the final
    /// norm: 333,312 values, 2 B each saved); in F32 compute the file's bytes exactly.
    #[test]
    fn q4_k_m_is_llama_cpp_bytes() {
        let cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
        let vectors = 28 * (2 * 3584 + 3584 + 2 * 512) + 3584;
        assert_eq!(vectors, 333_312);
        assert_eq!(weight_bytes(&cfg, Precision::Q4KMF32), 4_677_120_000);
        assert_eq!(weight_bytes(&cfg, Precision::Q4KM), 4_677_120_000 - 2 * vectors);
    }

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

    #[test]
    fn decode_reads_the_weights_but_the_embedding_table() {
        let cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
        // 15,231,233,024 B of BF16 weights less the 152,064 × 3,584 × 2 = 1,089,994,752 B table.
        assert_eq!(decode_read_bytes(&cfg, Precision::Bf16, 0, 1), 14_141_238_272);
        // Plus 57,344 B of cache per token of each sequence.
        assert_eq!(decode_read_bytes(&cfg, Precision::Bf16, 1000, 2), 14_141_238_272 + 2000 * 57_344);
        // A tied table (0.5B) is the head: read whole.
        let small = Qwen2Config::preset("qwen2.5-0.5b").unwrap();
        assert_eq!(decode_read_bytes(&small, Precision::Bf16, 0, 1), weight_bytes(&small, Precision::Bf16));
    }

    #[test]
    fn remedies_for_the_report_oom() {
        // 7B BF16, 16,384 tokens with all logits, 19 GiB for the pool, no transient.
        let cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
        let w = Workload { precision: Precision::Bf16, seq: 16384, batch: 1, logits: Logits::All };
        let cap = 19u64 << 30;
        let weights = weight_bytes(&cfg, Precision::Bf16);
        let need = prefill_need(&cfg, &w, 0.0);
        assert_eq!(need, weights + 16384 * (57_344 + 304_128));
        assert!(need > cap);
        let r = remedies(&cfg, &w, cap, 0.0, 1.0);
        let get = |what: &str| r.iter().find(|x| x.what == what).unwrap().clone();
        // (19 GiB − the weights) / 361,472 B per token = 14,302 tokens.
        let shorter = get("shorter context");
        assert_eq!(shorter.change, "16384 → 14302 tokens");
        assert!(shorter.fits && shorter.need <= cap);
        assert!(get("last-token logits").fits);
        assert!(get("Q4 weights").fits);
        let off = get("offload");
        assert!(off.fits && off.need <= cap, "{off:?}");
        assert!(r.iter().all(|x| x.what != "smaller batch"));
        // A transient of 100 kB per token moves the limit.
        let shorter = remedies(&cfg, &w, cap, 100_000.0, 1.0).into_iter().find(|x| x.what == "shorter context").unwrap();
        assert_eq!(shorter.change, format!("16384 → {} tokens", (cap - weights) / 461_472));
        // A pool that maps 1.5× what it hands out: the limit falls by a third.
        assert_eq!(mapped_need(&cfg, &w, 0.0, 1.5), weights + 16384 * 361_472 * 3 / 2);
        let shorter = remedies(&cfg, &w, cap, 0.0, 1.5).into_iter().find(|x| x.what == "shorter context").unwrap();
        let expect = (0..=16384u64).rev().find(|&s| weights + ((s * 361_472) as f64 * 1.5) as u64 <= cap).unwrap();
        assert_eq!(shorter.change, format!("16384 → {expect} tokens"));
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
