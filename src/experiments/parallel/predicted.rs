//! What the parallel stage's rows are measured against: the ledger of one rank (or of the whole
//! model on one device), and the decode ceiling of the bytes a device reads per token.

use super::ranks::RankRun;
use super::tables::GpuRow;
use crate::error::Result;
use crate::estimate::fit::Inference;
use crate::estimate::parallel::tensor_parallel;
use crate::model::layers::attention::AttentionMode;
use crate::model::parallel::rank_ledger;
use crate::model::{DecoderConfig, Logits, Precision};
use crate::stage::Outcome;

/// What the ledger predicts for one of `gpus` ranks (1: the whole model) generating
/// `new_tokens` after `prompt` tokens.
pub fn predicted(
    cfg: &DecoderConfig,
    precision: Precision,
    prompt: usize,
    new_tokens: usize,
    gpus: usize,
) -> Result<GpuRow> {
    let w = Inference {
        precision,
        seq: prompt,
        batch: 1,
        logits: Logits::Last,
        attention: AttentionMode::default(),
        stored: None,
        allocator: Default::default(),
    };
    // One GPU: the one-device ledger, quantized weights included (their matmul buffer is transient
    // to this table: it comes with the first prefill).
    let need = if gpus == 1 {
        let l = crate::estimate::fit::ledger(cfg, &w, 0);
        crate::estimate::parallel::GpuNeed {
            gpu: 0,
            layers: (0, cfg.num_hidden_layers),
            weights: l.weights,
            kv_cache: l.kv_cache,
            transient: l.transient + l.workspace,
            logits: l.logits,
            nccl: 0,
            pool: l.pool,
            runtime: 0,
        }
    } else {
        tensor_parallel(cfg, &w, gpus, 0)?.remove(0)
    };
    // generate holds a cache for the prompt and every new token.
    let dtype = precision.dense_dtype().map(|d| d.size_in_bytes() as u64).unwrap_or(2);
    let kv = rank_ledger(cfg, gpus, dtype, (prompt + new_tokens) as u64, precision.act_dtype().size_in_bytes() as u64)?
        .kv_cache;
    Ok(GpuRow {
        weights_predicted: need.weights,
        nccl_predicted: need.nccl,
        kv_predicted: kv,
        peak_above_predicted: kv + need.transient + need.logits,
        ..Default::default()
    })
}

/// Decode's ceiling on a device reading `bytes` a token at `read_gbs`.
pub fn ceiling(bytes: u64, read_gbs: f64) -> Option<f64> {
    (bytes > 0 && read_gbs > 0.0).then(|| read_gbs * 1e9 / bytes as f64)
}

/// The bytes a decoding step reads: the weights but the embedding table (one row of it is read),
/// unless the head reads it too (tied).
pub fn read_per_token(cfg: &DecoderConfig, weights: u64, kv: u64, act: u64) -> u64 {
    let table = if cfg.tie_word_embeddings { 0 } else { (cfg.vocab_size * cfg.hidden_size) as u64 * act };
    weights.saturating_sub(table) + kv
}

pub fn rank_row(r: &RankRun, p: &GpuRow, gpus: usize, ceiling_tok_s: Option<f64>) -> GpuRow {
    GpuRow {
        layout: format!("tensor-parallel × {gpus}"),
        rank: r.rank,
        device: r.device.clone(),
        weights: Some(r.weights),
        nccl: r.nccl,
        kv_cache: Some(r.kv_cache),
        peak_above_weights: r.peak_above_weights,
        load_peak: r.load_peak,
        prefill_tok_s: Some(r.prefill_tok_s),
        decode_tok_s: Some(r.decode_tok_s),
        decode_tok_s_without_sums: r.decode_tok_s_without_sums,
        ceiling_tok_s,
        tokens: r.tokens.len(),
        outcome: Outcome::OK.into(),
        // Per rank, as NCCL connects its peers; none where the ranks are threads (`p` says 0).
        nccl_predicted: if p.nccl_predicted > 0 { crate::estimate::parallel::comm_bytes(gpus, r.rank) } else { 0 },
        ..p.clone()
    }
}
