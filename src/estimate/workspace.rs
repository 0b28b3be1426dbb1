//! The scratch buffers candle's quantized matmul keeps on the device (candle-core 0.11,
//! `quantized/fast_mmq.rs` and `fast_mmvq.rs`): the input rows quantized to Q8_1 before the
//! integer kernels. They are per device, grow only and are never freed, so a Q4 process holds,
//! beyond its weights, the buffer its longest prefill so far asked for:
//! - MMQ (more than 8 rows): rows × blocks of 128 values of the padded row × 144 B, plus 128
//!   blocks of slack, and a stream-k fixup buffer of 256 × 128 × 128 F32 (16 MiB) once;
//! - MMVQ (1-8 rows, decoding): rows × blocks of 32 values × 36 B.
//!
//! A grown buffer is allocated before the old one is dropped, so at that moment both are live.
//! Qwen2.5-7B: the widest quantized row is down_proj's 18,944 values, 148 blocks of 144 B:
//! 21,312 B per prefill token, as the committed Q4 runs' base grew.

use crate::model::config::DecoderConfig;
use crate::model::precision::{Held, Precision};
use candle_core::quantized::GgmlDType;

/// candle pads a quantized row to 512 values (`MATRIX_ROW_PADDING`).
const ROW_PADDING: u64 = 512;
const MMQ_BLOCK: u64 = 128;
const MMQ_BLOCK_BYTES: u64 = 144;
const MMQ_SLACK_BLOCKS: u64 = 128;
const MMVQ_BLOCK: u64 = 32;
const MMVQ_BLOCK_BYTES: u64 = 36;
/// candle's vector path (MMVQ) takes up to 8 rows; more go through MMQ.
pub const MMVQ_MAX_ROWS: u64 = 8;
/// 256 SMs × 128 × 128 F32 partial tiles.
pub const FIXUP_BYTES: u64 = 256 * 128 * 128 * 4;

/// The widest row (input features) of a matrix the quantized matmul multiplies: every quantized
/// matrix but the embedding table, which is gathered (unless tied, when it is also the head).
fn widest_row(cfg: &DecoderConfig, precision: Precision) -> u64 {
    // Every layer is alike: the outside tensors and one layer's hold every width.
    super::bytes::with_layers(cfg, cfg.num_hidden_layers.min(1))
        .tensor_specs()
        .iter()
        .filter(|s| s.shape.len() == 2 && (s.name != "model.embed_tokens.weight" || cfg.tie_word_embeddings))
        .filter(|s| matches!(precision.held(cfg, s), Held::Blocks(q) if !matches!(q, GgmlDType::F16 | GgmlDType::F32 | GgmlDType::BF16)))
        .map(|s| s.shape[1] as u64)
        .max()
        .unwrap_or(0)
}

fn padded(k: u64, to: u64) -> u64 {
    k.div_ceil(ROW_PADDING) * ROW_PADDING / to * to
}

/// The MMQ buffer's own part for `rows` input rows of `k` values (0 for the vector path).
fn mmq_main(rows: u64, k: u64) -> u64 {
    if rows <= MMVQ_MAX_ROWS {
        return 0;
    }
    (rows * (padded(k, MMQ_BLOCK) / MMQ_BLOCK) + MMQ_SLACK_BLOCKS) * MMQ_BLOCK_BYTES
}

/// Bytes of the MMQ buffers after a matmul over `rows` input rows of the widest row (0 when no
/// such call yet).
pub fn mmq_bytes(cfg: &DecoderConfig, precision: Precision, rows: u64) -> u64 {
    if rows <= MMVQ_MAX_ROWS {
        return 0;
    }
    mmq_main(rows, widest_row(cfg, precision)) + FIXUP_BYTES
}

/// Bytes of the MMVQ buffer after a matmul over `rows` ≤ 8 input rows.
pub fn mmvq_bytes(cfg: &DecoderConfig, precision: Precision, rows: u64) -> u64 {
    let blocks = padded(widest_row(cfg, precision), MMVQ_BLOCK) / MMVQ_BLOCK;
    rows.min(MMVQ_MAX_ROWS) * blocks * MMVQ_BLOCK_BYTES
}

/// What a process in `precision` holds for the quantized matmul after prefills of at most
/// `tokens` (batch × seq) tokens: the MMQ buffer (decode's MMVQ buffer, a few hundred KB, is
/// left out). Zero for dense precisions.
pub fn held(cfg: &DecoderConfig, precision: Precision, tokens: u64) -> u64 {
    if precision.is_quantized() {
        mmq_bytes(cfg, precision, tokens)
    } else {
        0
    }
}

/// The separate allocations behind `held` (the MMQ buffer and its fixup buffer), empty when none.
pub fn held_parts(cfg: &DecoderConfig, precision: Precision, tokens: u64) -> Vec<u64> {
    let main = mmq_main(tokens, widest_row(cfg, precision));
    if precision.is_quantized() && main > 0 {
        vec![main, FIXUP_BYTES]
    } else {
        Vec::new()
    }
}

/// The separate allocations behind `at_growth`: the new buffer, the old one and the fixup while
/// the buffer grows; `held_parts` when nothing grows.
pub fn at_growth_parts(cfg: &DecoderConfig, precision: Precision, seen: u64, tokens: u64) -> Vec<u64> {
    let widest = widest_row(cfg, precision);
    if !precision.is_quantized() || mmq_main(tokens, widest) <= mmq_main(seen, widest) {
        return held_parts(cfg, precision, seen.max(tokens));
    }
    let old = mmq_main(seen, widest).max(mmq_main(tokens, cfg.hidden_size as u64));
    vec![mmq_main(tokens, widest), old, FIXUP_BYTES]
}

/// The buffers live while a prefill of `tokens` grows the buffer in its first down projection,
/// after earlier prefills of at most `seen` tokens: the new one beside the old, which the first
/// projections (over the hidden size) may already have grown. `held` once nothing grows.
pub fn at_growth(cfg: &DecoderConfig, precision: Precision, seen: u64, tokens: u64) -> u64 {
    let widest = widest_row(cfg, precision);
    if !precision.is_quantized() || mmq_main(tokens, widest) <= mmq_main(seen, widest) {
        return held(cfg, precision, seen.max(tokens));
    }
    let old = mmq_main(seen, widest).max(mmq_main(tokens, cfg.hidden_size as u64));
    FIXUP_BYTES + mmq_main(tokens, widest) + old
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen2.5-7B by hand: down_proj's 18,944 values pad to 18,944 (37 × 512), 148 blocks of 144 B.
    #[test]
    fn seven_b_by_hand() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        assert_eq!(widest_row(&cfg, Precision::Q4), 18_944);
        assert_eq!(mmq_bytes(&cfg, Precision::Q4, 1024), 1024 * 21_312 + 128 * 144 + 16 * 1024 * 1024);
        assert_eq!(mmq_bytes(&cfg, Precision::Q4, 8), 0);
        // Decoding: 592 blocks of 32 values, 36 B each, per row.
        assert_eq!(mmvq_bytes(&cfg, Precision::Q4, 1), 21_312);
        assert_eq!(held(&cfg, Precision::Bf16, 1 << 20), 0);
        assert_eq!(at_growth(&cfg, Precision::Q4, 2048, 1024), held(&cfg, Precision::Q4, 2048));
        // Growing from 512 to 4,096 tokens: the q projection (3,584 values, 28 blocks) already
        // grew the old buffer past 512 × 148 blocks.
        let main = |rows: u64, blocks: u64| (rows * blocks + 128) * 144;
        assert_eq!(at_growth(&cfg, Precision::Q4, 512, 4096), (16 << 20) + main(4096, 148) + main(4096, 28));
        assert_eq!(at_growth(&cfg, Precision::Q4, 2048, 4096), (16 << 20) + main(4096, 148) + main(2048, 148));
    }

    /// 0.5B: 896 is not a multiple of 256 (its matrices over the hidden size are Q8_0), down_proj's
    /// 4,864 values pad to 5,120 (10 × 512): 40 blocks.
    #[test]
    fn padding_rounds_up_to_512() {
        let cfg = DecoderConfig::preset("qwen2.5-0.5b").unwrap();
        assert_eq!(widest_row(&cfg, Precision::Q4), 4_864);
        assert_eq!(mmq_bytes(&cfg, Precision::Q4, 100) - FIXUP_BYTES, (100 * 40 + 128) * 144);
    }

    /// The parts are the totals' allocations: they add up to `held` and `at_growth`.
    #[test]
    fn parts_add_up() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        for (seen, tokens) in [(0, 4096), (4096, 512), (512, 32768), (32768, 32768)] {
            assert_eq!(
                at_growth_parts(&cfg, Precision::Q4, seen, tokens).iter().sum::<u64>(),
                at_growth(&cfg, Precision::Q4, seen, tokens)
            );
            assert_eq!(held_parts(&cfg, Precision::Q4, tokens).iter().sum::<u64>(), held(&cfg, Precision::Q4, tokens));
        }
        assert_eq!(at_growth_parts(&cfg, Precision::Q4, 0, 4096).len(), 3);
        assert!(held_parts(&cfg, Precision::Bf16, 4096).is_empty());
    }
}
