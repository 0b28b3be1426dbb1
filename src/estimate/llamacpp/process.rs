//! What nvidia-smi counts for a llama.cpp process beyond the buffers llama.cpp reports: the CUDA
//! context with the kernels it loaded, cuBLAS's handle and workspace once a product goes through
//! cuBLAS, and ggml-cuda's scratch pool (`ggml_cuda_pool_vmm`: mapped in 2 MiB steps up to the most
//! its operations held at once; never given back).
//!
//! The pool's high-water mark, read from ggml-cuda: a quantized product quantizes its input to
//! q8_1 in the pool (`ggml_cuda_mul_mat_q`: tokens × the row padded to 512 × 36/32 B; the widest
//! input is the MLP's down projection); a 16-bit weight goes through cuBLAS with its input and
//! output converted in the pool (tokens × (hidden + intermediate) × 2 B); without flash attention
//! K·Q and the softmax times V go through cuBLAS too, with an F16 copy of the scores in the pool
//! (cells in use × tokens × heads × 2 B, plus Q in F16). A micro-batch sees the cells filled up to
//! its end (rounded up to 256). A mixture's widest quantized input is its experts' down projection
//! (tokens × experts used × the expert's row), and its router, kept in F32, goes through cuBLAS.
//!
//! The constants are the H200's (CUDA 13.0, driver 580), read off the 116 launches of
//! `data/results/h200/2026-11-27-llamacpp-memory`: what the launches with the smallest pool kept
//! beyond it, and what the cuBLAS launches kept more. Another card's context differs.

use super::{pad, Launch, CTX_PAD, MATRIX_ROW_PADDING};
use crate::model::config::DecoderConfig;

const MIB: u64 = 1 << 20;
/// The CUDA context and the kernels loaded, on the H200.
pub const CONTEXT: u64 = 597 * MIB;
/// cuBLAS's handle and workspace, once used.
pub const CUBLAS: u64 = 90 * MIB;
/// The pool maps memory in the driver's granularity.
const POOL_GRANULE: u64 = 2 * MIB;
/// `block_q8_1`: 32 values in 36 bytes.
const Q8_1_BYTES: (u64, u64) = (36, 32);

/// The process beyond llama.cpp's own buffers, term by term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beyond {
    pub context: u64,
    pub cublas: u64,
    pub pool: u64,
}

impl Beyond {
    pub fn total(&self) -> u64 {
        self.context + self.cublas + self.pool
    }
}

/// The micro-batches a prompt of `prompt` tokens is cut into: (cells filled at its end, tokens).
fn micro_batches(prompt: u64, batch: u64, ubatch: u64) -> Vec<(u64, u64)> {
    let (mut out, mut start) = (Vec::new(), 0);
    while start < prompt {
        let end = (start + batch.max(1)).min(prompt);
        while start < end {
            let n = ubatch.max(1).min(end - start);
            out.push((start + n, n));
            start += n;
        }
    }
    out
}

/// What a launch `l` keeps beyond its buffers after a prompt of `prompt` tokens, for weights
/// multiplied through MMQ (`quantized`) or through cuBLAS.
pub fn beyond(cfg: &DecoderConfig, l: &Launch, quantized: bool, prompt: u64) -> Beyond {
    let (h, inter) = (cfg.hidden_size as u64, cfg.intermediate_size as u64);
    // The rows of the widest quantized product's input, and their length.
    let (rows_per_token, row) = match cfg.experts() {
        Some(x) => (x.active as u64, x.width as u64),
        None => (1, inter),
    };
    let (heads, d) = (cfg.num_attention_heads as u64, cfg.head_dim() as u64);
    let cells = pad(l.ctx as u64, CTX_PAD);
    let high = micro_batches(prompt, l.batch as u64, l.ubatch as u64)
        .into_iter()
        .map(|(end, n)| {
            let product = if quantized {
                n * rows_per_token * pad(row, MATRIX_ROW_PADDING) * Q8_1_BYTES.0 / Q8_1_BYTES.1
            } else {
                n * (h + inter) * 2
            };
            let used = cells.min(pad(end, CTX_PAD));
            let attention = if l.flash { 0 } else { used * n * heads * 2 + n * heads * d * 2 };
            product.max(attention)
        })
        .max()
        .unwrap_or(0);
    let cublas = !quantized || !l.flash || cfg.experts().is_some();
    Beyond { context: CONTEXT, cublas: if cublas { CUBLAS } else { 0 }, pool: pad(high, POOL_GRANULE) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_cut_into_batches_then_micro_batches() {
        // -b 2048 -ub 512 over 3,900 tokens: four full micro-batches, then 512, 512, 512 and 316.
        let m = micro_batches(3900, 2048, 512);
        assert_eq!(m.len(), 8);
        assert_eq!(m[3], (2048, 512));
        assert_eq!(m[7], (3900, 316));
        assert!(micro_batches(0, 2048, 512).is_empty());
    }

    #[test]
    fn without_flash_attention_the_scores_fill_the_pool() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        let l = Launch { ctx: 16384, flash: false, ubatch: 2048, ..Launch::default() };
        let b = beyond(&cfg, &l, true, 3900);
        // The last micro-batch (1,852 tokens) sees 4,096 cells: 4096 × 1852 × 28 heads × 2 B.
        let scores = 4096 * 1852 * 28 * 2 + 1852 * 28 * 128 * 2;
        assert_eq!(b.pool, pad(scores, POOL_GRANULE));
        assert_eq!(b.cublas, CUBLAS);
        let fa = beyond(&cfg, &Launch { flash: true, ..l }, true, 3900);
        assert_eq!(fa.cublas, 0);
        assert!(fa.pool < b.pool / 5);
    }

    /// A mixture's router is F32 (cuBLAS, whatever the experts' type), and its widest quantized
    /// input is the experts' down projection: Qwen3-30B-A3B at -ub 512, 512 tokens × 8 experts ×
    /// 768 values padded to 1,024, in q8_1.
    #[test]
    fn a_mixtures_router_uses_cublas_and_its_experts_fill_the_pool() {
        let cfg = DecoderConfig::preset("qwen3-30b-a3b").unwrap();
        let b = beyond(&cfg, &Launch::default(), true, 3900);
        assert_eq!(b.cublas, CUBLAS);
        assert_eq!(b.pool, pad(512 * 8 * 1024 * 36 / 32, POOL_GRANULE));
    }
}
