//! The report's card scaled to another model: a card whose capacity stands to the model as the
//! RTX 4090's stands to Qwen2.5-7B, so a small model on a CPU tells the report's story (BF16
//! fits, F32 does not, the KV cache runs out at a length, offload within a budget). Sizes scale
//! with the weights; token counts scale so that a length holds the same share of the card; speed
//! does not scale at all.

use super::bytes::{kv_bytes_per_token, logits_bytes_per_token, weight_bytes};
use crate::error::Result;
use crate::hw::Card;
use crate::model::{DecoderConfig, Precision};

pub use crate::hw::SCALED;

/// How the report's sizes map onto a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    /// Bytes: the model's BF16 weights ÷ Qwen2.5-7B's.
    pub bytes: f64,
    /// Tokens: how many of the model's tokens take the share of its card that one token of
    /// Qwen2.5-7B takes of the RTX 4090 (KV cache + all-position logits, BF16).
    pub tokens: f64,
}

impl Scale {
    /// The report's model itself: nothing changes.
    pub const ONE: Scale = Scale { bytes: 1.0, tokens: 1.0 };

    pub fn of(cfg: &DecoderConfig) -> Result<Scale> {
        let report = DecoderConfig::preset("qwen2.5-7b")?;
        let per_token = |c: &DecoderConfig| (kv_bytes_per_token(c, 2) + logits_bytes_per_token(c, 2)) as f64;
        let bytes = weight_bytes(cfg, Precision::Bf16) as f64 / weight_bytes(&report, Precision::Bf16) as f64;
        Ok(Scale { bytes, tokens: bytes * per_token(&report) / per_token(cfg) })
    }

    /// A byte size of the report scaled, in MiB.
    pub fn mib(&self, report_mib: f64) -> f64 {
        report_mib * self.bytes
    }

    /// A token count of the report scaled, at least `floor`.
    pub fn tokens(&self, report_tokens: usize, floor: usize) -> usize {
        ((report_tokens as f64 * self.tokens).round() as usize).max(floor)
    }
}

/// The sizes a stage's default config is made for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizes {
    /// The report's: Qwen2.5-7B on an RTX 4090 (a GPU's default).
    Report,
    /// The report's sizes with the long parts shortened: `vram-lab run` on a GPU without
    /// `--full` (about five minutes; nothing above a few GB written).
    Quick,
    /// A CPU run of the tiny model with no card: short sweeps that show the shapes.
    Cpu,
    /// The report's card scaled to the model (`--card scaled`): the report's story in small.
    Scaled(Scale),
}

impl Sizes {
    /// The default config of a device with no card chosen.
    pub fn for_device(gpu: bool) -> Self {
        if gpu {
            Self::Report
        } else {
            Self::Cpu
        }
    }
}

/// The RTX 4090 scaled to `cfg` (`--card scaled`).
pub fn scaled_card(cfg: &DecoderConfig) -> Result<Card> {
    let rtx4090 = Card::parse("rtx4090")?;
    let scale = Scale::of(cfg)?;
    let total_mib = scale.mib(rtx4090.total_mib);
    Ok(Card {
        name: SCALED.into(),
        label: format!("the RTX 4090 scaled to this model ({})", crate::units::fmt_bytes((total_mib * 1024.0 * 1024.0) as u64)),
        total_mib,
        total_source: format!(
            "a scaled replica: the RTX 4090's {:.1} MiB × {:.3e} (this model's BF16 weights ÷ Qwen2.5-7B's); lengths × {:.3e}; speed does not scale",
            rtx4090.total_mib, scale.bytes, scale.tokens
        ),
        bandwidth_gbs: None,
        pcie: String::new(),
        pcie_gbs: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_model_gets_the_rtx4090() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        assert_eq!(Scale::of(&cfg).unwrap(), Scale::ONE);
        assert!((scaled_card(&cfg).unwrap().total_mib - 24084.5).abs() < 1e-6);
    }

    /// The tiny model's card holds its BF16 weights as the RTX 4090 holds 7B's (1.66 ×), and not
    /// its F32 weights; its lengths are shorter by what a token costs against the card.
    #[test]
    fn the_tiny_card_holds_bf16_not_f32() {
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let card = scaled_card(&cfg).unwrap();
        let bf16 = weight_bytes(&cfg, Precision::Bf16);
        let ratio = card.total_bytes() as f64 / bf16 as f64;
        let report =
            24084.5 * 1048576.0 / weight_bytes(&DecoderConfig::preset("qwen2.5-7b").unwrap(), Precision::Bf16) as f64;
        assert!((ratio - report).abs() < 1e-6, "{ratio} vs {report}");
        assert!(card.total_bytes() < weight_bytes(&cfg, Precision::F32));
        let s = Scale::of(&cfg).unwrap();
        // 7B: 361,472 B per token; tiny: 3,072 B per token.
        assert!((s.tokens / s.bytes - 361_472.0 / 3_072.0).abs() < 1e-9);
        assert_eq!(s.tokens(16_384, 1), (16_384.0 * s.tokens).round() as usize);
    }
}
