//! Pure formulas: bytes a model, its KV cache and its logits take (`bytes`), what a prefill needs
//! and the ways out of an OOM (`need`), the transient and the library workspaces, the fit and the
//! longest context, what training adds (`training`), PyTorch's data-parallel layouts per GPU
//! (`data_parallel`), the allocator's pool (`pool`), and the report's card scaled to another model
//! (`scaled`). No measurement, no experiment. This file only names the parts.

pub mod bytes;
pub mod caching;
pub mod data_parallel;
pub mod fit;
pub mod llamacpp;
pub mod need;
pub mod parallel;
pub mod pool;
pub mod scaled;
pub mod sweep;
pub mod training;
pub mod transformers;
pub mod transient;
pub mod workspace;

pub use bytes::{
    decode_ceiling_tok_s, decode_read_bytes, idle_expert_bytes, kv_bytes_per_token, logits_bytes_per_token,
    naive_kv_bytes_per_token, sum_over_tensors, weight_bytes, with_layers,
};
pub use need::{mapped_need, prefill_need, remedies, Remedy, Workload};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DecoderConfig, Logits, Precision};

    /// Pricing one layer (of each kind) and multiplying gives every tensor's sum, for every
    /// preset and precision.
    #[test]
    fn one_layer_times_layers_is_every_tensor() {
        for (name, _) in crate::model::config::PRESETS {
            let cfg = DecoderConfig::preset(name).unwrap();
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
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let vectors = 28 * (2 * 3584 + 3584 + 2 * 512) + 3584;
        assert_eq!(vectors, 333_312);
        assert_eq!(weight_bytes(&cfg, Precision::Q4KMF32), 4_677_120_000);
        assert_eq!(weight_bytes(&cfg, Precision::Q4KM), 4_677_120_000 - 2 * vectors);
    }

    #[test]
    fn seven_b_figures() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
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

    /// A mixture's token reads the router and its active experts: Qwen3-30B-A3B in BF16 reads
    /// its 3,353,032,704 active parameters (8 of 128 experts) less the untied embedding table.
    #[test]
    fn decode_of_a_mixture_reads_the_active_experts() {
        let cfg = DecoderConfig::preset("qwen3-30b-a3b").unwrap();
        let table = 151_936 * 2048;
        assert_eq!(decode_read_bytes(&cfg, Precision::Bf16, 0, 1), (3_353_032_704 - table) * 2);
        assert_eq!(idle_expert_bytes(&cfg, Precision::Bf16), 120 * 3 * 2048 * 768 * 48 * 2);
        assert_eq!(idle_expert_bytes(&DecoderConfig::preset("qwen3-8b").unwrap(), Precision::Bf16), 0);
        // Q4_K_M holds every expert of a layer alike: the idle share is exact, below BF16's.
        let q = idle_expert_bytes(&cfg, Precision::Q4KM);
        assert!(q > 0 && q < idle_expert_bytes(&cfg, Precision::Bf16) / 3);
    }

    #[test]
    fn decode_reads_the_weights_but_the_embedding_table() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        // 15,231,233,024 B of BF16 weights less the 152,064 × 3,584 × 2 = 1,089,994,752 B table.
        assert_eq!(decode_read_bytes(&cfg, Precision::Bf16, 0, 1), 14_141_238_272);
        // Plus 57,344 B of cache per token of each sequence.
        assert_eq!(decode_read_bytes(&cfg, Precision::Bf16, 1000, 2), 14_141_238_272 + 2000 * 57_344);
        // A tied table (0.5B) is the head: read whole.
        let small = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
        assert_eq!(decode_read_bytes(&small, Precision::Bf16, 0, 1), weight_bytes(&small, Precision::Bf16));
    }

    #[test]
    fn remedies_for_the_report_oom() {
        // 7B BF16, 16,384 tokens with all logits, 19 GiB for the pool, no transient.
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
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
        let shorter =
            remedies(&cfg, &w, cap, 100_000.0, 1.0).into_iter().find(|x| x.what == "shorter context").unwrap();
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
            ("qwen2.5-0.5b", 12_288u64, 7.0), // 24 layers × 2 KV heads × 64
            ("qwen2.5-1.5b", 28_672, 6.0),    // 28 × 2 × 128
            ("qwen2.5-3b", 36_864, 8.0),      // 36 × 2 × 128
            ("qwen2.5-7b", 57_344, 7.0),      // 28 × 4 × 128
            ("qwen2.5-14b", 196_608, 5.0),    // 48 × 8 × 128
            ("qwen2.5-32b", 262_144, 5.0),    // 64 × 8 × 128
            ("qwen2.5-72b", 327_680, 8.0),    // 80 × 8 × 128
        ];
        for (name, bytes, ratio) in want {
            let cfg = DecoderConfig::preset(name).unwrap();
            assert_eq!(kv_bytes_per_token(&cfg, 2), bytes, "{name}");
            assert_eq!(naive_kv_bytes_per_token(&cfg, 2) as f64 / bytes as f64, ratio, "{name}");
        }
    }
}
