//! The other stacks beside the lab's speed: PyTorch's reference script and llama.cpp's
//! llama-bench, both run on the same GPU in the same call; on an H200 without them, llama.cpp's
//! earlier figures from an H200.

use crate::model::Precision;
use crate::reference;

/// A PyTorch figure from the reference script's records: `case`, matched on precision (and seq).
pub(super) fn pytorch(
    records: &[serde_json::Value],
    case: &str,
    precision: Precision,
    seq: Option<usize>,
) -> Option<f64> {
    records
        .iter()
        .find(|r| {
            r["case"] == case
                && r["precision"] == precision.name()
                && seq.is_none_or(|s| r["seq"].as_u64() == Some(s as u64))
        })
        .and_then(|r| r["tok_s"].as_f64())
}

/// llama.cpp's figure for a row: from llama-bench in the same call when its records were given
/// (every layer on the GPU; a decode is a test with no prompt, a prefill one of `seq` tokens),
/// else its earlier H200 figures for the report's model (`reference`; `quoted` says whether the
/// row may show them), stock candle-transformers beside them in the label.
pub(super) fn other_stack(
    llama: Option<&[reference::LlamaBench]>,
    precision: Precision,
    seq: Option<usize>,
    quoted: bool,
) -> (Option<f64>, String) {
    if let Some(records) = llama {
        let same = |r: &&reference::LlamaBench| {
            r.precision == Some(precision)
                && r.n_gpu_layers >= 99
                && match seq {
                    None => r.n_prompt == 0 && r.n_gen > 0,
                    Some(s) => r.n_gen == 0 && r.n_prompt == s as u64,
                }
        };
        return match records.iter().find(same) {
            Some(r) => (
                Some(r.tok_s),
                format!(
                    "{} {}, same GPU, same call",
                    r.label,
                    if seq.is_some() { format!("pp{}", r.n_prompt) } else { format!("tg{}", r.n_gen) }
                ),
            ),
            None => (None, String::new()),
        };
    }
    if !quoted {
        return (None, String::new());
    }
    use reference::{candle_h200, llamacpp_h200};
    let decode = seq.is_none();
    match (precision, decode) {
        (Precision::Bf16, true) => (
            Some(llamacpp_h200::BF16_DECODE_TOK_S),
            format!("llama.cpp BF16, H200 (candle-transformers: {:.1})", candle_h200::BF16_DECODE_TOK_S),
        ),
        (p, true) if p.is_quantized() => (
            Some(llamacpp_h200::Q4KM_DECODE_TOK_S),
            format!("llama.cpp Q4_K_M, H200 (candle-transformers Q4_K: {:.1})", candle_h200::Q4K_DECODE_TOK_S),
        ),
        (Precision::Bf16, false) => {
            (Some(llamacpp_h200::BF16_PREFILL_160_TOK_S), "llama.cpp BF16 prefill of 160 tokens, H200".into())
        }
        _ => (None, String::new()),
    }
}
