//! The ceilings on what the lab accepts. Every number that enters — a flag, a config.json value,
//! a workload — is checked against these before any arithmetic or allocation, so byte counts stay
//! inside u64 and every search ends in milliseconds. They lie far above any real model or card
//! (Llama-3.1-405B: hidden 16,384, intermediate 53,248, 126 layers, vocabulary 128,256;
//! Qwen2.5-72B: 80 layers, 131,072 positions).

use crate::error::{LabError, Result};
use crate::units::grouped;
use clap::builder::RangedU64ValueParser;

pub const MAX_VOCAB: usize = 1 << 24;
pub const MAX_HIDDEN: usize = 1 << 18;
pub const MAX_INTERMEDIATE: usize = 1 << 20;
pub const MAX_LAYERS: usize = 1 << 12;
pub const MAX_HEADS: usize = 1 << 12;
/// Experts of one mixture-of-experts layer (DeepSeek-V3: 256).
pub const MAX_EXPERTS: usize = 1 << 10;
/// Tokens of one sequence: a config's `max_position_embeddings`, `--seq`, a sweep's end.
pub const MAX_SEQ: usize = 1 << 24;
pub const MAX_BATCH: usize = 1 << 16;
/// Tokens one `generate` may add.
pub const MAX_NEW_TOKENS: usize = 1 << 20;
/// Repeats, steps, blocks: anything counted that costs time per unit.
pub const MAX_REPEATS: usize = 10_000;
/// Sizes given in MiB (a block, a budget): up to 1 PiB.
pub const MAX_MIB: u64 = 1 << 30;
/// GPUs a ZeRO or parallel estimate divides across.
pub const MAX_GPUS: u64 = 1 << 16;
/// The largest byte count one term of the estimator may reach (256 PiB): its sums of a few
/// dozen such terms stay inside u64.
pub const MAX_TERM_BYTES: u128 = 1 << 58;

/// A clap parser for a count in 1..=max (0 is never a count the lab can run).
pub fn count(max: usize) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::<usize>::new().range(1..=max as u64)
}

/// A clap parser for a count in 0..=max where 0 means none (`kv --resolution 0`: no bisection).
pub fn count_or_none(max: usize) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::<usize>::new().range(0..=max as u64)
}

/// A clap parser for a size in MiB in 1..=MAX_MIB.
pub fn mib() -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::<u64>::new().range(1..=MAX_MIB)
}

/// A clap parser for a size in MiB given as a number (a threshold, a reserve): finite, 0 to
/// MAX_MIB.
pub fn mib_f64(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of MiB"))?;
    if !(v.is_finite() && (0.0..=MAX_MIB as f64).contains(&v)) {
        return Err(format!("{s} MiB is outside 0 to {} MiB", grouped(MAX_MIB)));
    }
    Ok(v)
}

/// A clap parser for a probability-like setting in (0, 1] (top-p).
pub fn unit_interval(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v > 0.0 && v <= 1.0) {
        return Err(format!("{s} is outside (0, 1]"));
    }
    Ok(v)
}

/// A clap parser for a sampling temperature: finite and ≥ 0 (0 is greedy).
pub fn temperature(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
        return Err(format!("{s} is outside 0 to 100"));
    }
    Ok(v)
}

/// `value` in 1..=max, or an error naming `what`.
pub fn check_count(what: &str, value: usize, max: usize) -> Result<usize> {
    if value == 0 || value > max {
        return Err(LabError::out_of_range(what, grouped(value as u64), format!("1 to {}", grouped(max as u64))));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outside_their_range_are_named() {
        assert_eq!(check_count("--batch", 3, 4).unwrap(), 3);
        let e = check_count("--batch", 0, 4).unwrap_err().to_string();
        assert_eq!(e, "--batch = 0 is out of range: 1 to 4");
        assert!(check_count("--seq", 5, 4).is_err());
    }

    /// The ceilings keep the largest dense tensor and the whole model's F32 bytes inside u64
    /// with room for the estimator's sums.
    #[test]
    fn ceilings_keep_model_bytes_in_u64() {
        let (h, i) = (MAX_HIDDEN as u128, MAX_INTERMEDIATE as u128);
        // q, k, v, o at most hidden² each, gate, up, down hidden × intermediate; embeddings and head.
        let layer = (4 * h * h + 3 * h * i) * 4;
        let model = layer * MAX_LAYERS as u128 + 2 * MAX_VOCAB as u128 * h * 4;
        assert!(model <= MAX_TERM_BYTES, "{model}");
    }
}
