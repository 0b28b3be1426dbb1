//! Pipeline placement: whole layers on each device (the split `estimate::parallel::pipeline_split`
//! makes from the weights), the embedding on the first, the final norm and the head on the last
//! (a tied table: a copy there). A token's hidden state crosses to the next device between stages
//! (candle copies it through the host: one hidden-sized vector a token, no collective). One
//! thread drives the stages in turn, as a pipeline serving one request does: each device waits
//! while the others compute.

use crate::error::{LabError, Result};
use crate::memory::MemoryProbe;
use crate::model::weights::WeightSource;
use crate::model::{Decoder, DecoderConfig, Precision};
use candle_core::Device;
use std::collections::HashMap;

/// The stage (index into `split`) that holds tensor `name`.
pub fn stage_of(name: &str, split: &[(usize, usize)]) -> Result<usize> {
    let last = split.len().checked_sub(1).ok_or_else(|| LabError::input("a pipeline of no stages"))?;
    if name == "model.embed_tokens.weight" {
        return Ok(0);
    }
    if name == "model.norm.weight" || name == "lm_head.weight" {
        return Ok(last);
    }
    let layer = name
        .strip_prefix("model.layers.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|l| l.parse::<usize>().ok())
        .ok_or_else(|| LabError::input(format!("tensor {name} belongs to no pipeline stage")))?;
    split
        .iter()
        .position(|&(a, b)| (a..b).contains(&layer))
        .ok_or_else(|| LabError::input(format!("layer {layer} is in no pipeline stage")))
}

/// The model with stage `i`'s tensors loaded straight onto `devices[i]`; the model's own device
/// (its rotary table, the logits) is the last stage's. `probes[i]` captures an OOM on device `i`.
pub fn load_pipeline(
    cfg: &DecoderConfig,
    precision: Precision,
    source: &mut dyn WeightSource,
    devices: &[Device],
    split: &[(usize, usize)],
    probes: &[MemoryProbe],
) -> Result<Decoder> {
    if devices.len() != split.len() || split.last().map(|s| s.1) != Some(cfg.num_hidden_layers) {
        return Err(LabError::input(format!(
            "{} devices for a pipeline of {} stages over {} layers",
            devices.len(),
            split.len(),
            cfg.num_hidden_layers
        )));
    }
    let last = devices.len() - 1;
    // (name held under, tensor, stage) for every tensor; a tied head is the embedding table, so the
    // last stage holds its own copy of it (drawn again: the same values).
    let mut plan = Vec::new();
    for spec in cfg.tensor_specs() {
        let stage = stage_of(&spec.name, split)?;
        if spec.name == "model.embed_tokens.weight" && cfg.tie_word_embeddings && last > 0 {
            plan.push(("lm_head.weight".to_string(), spec.clone(), last));
        }
        plan.push((spec.name.clone(), spec, stage));
    }
    let mut w = HashMap::new();
    for (name, spec, stage) in plan {
        let t = source.load(&spec, precision, &devices[stage]).map_err(|e| {
            MemoryProbe::capture_in(
                probes.get(stage),
                e,
                &format!("loading {name} (pipeline stage {stage} of {})", devices.len()),
            )
        })?;
        w.insert(name, t);
    }
    Decoder::new(cfg, precision, w, &devices[last])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_by_hand() {
        // 4 layers over 2 stages: 0..3 and 3..4.
        let split = [(0, 3), (3, 4)];
        assert_eq!(stage_of("model.embed_tokens.weight", &split).unwrap(), 0);
        assert_eq!(stage_of("model.layers.2.mlp.up_proj.weight", &split).unwrap(), 0);
        assert_eq!(stage_of("model.layers.3.self_attn.q_proj.bias", &split).unwrap(), 1);
        assert_eq!(stage_of("model.norm.weight", &split).unwrap(), 1);
        assert_eq!(stage_of("lm_head.weight", &split).unwrap(), 1);
        assert!(stage_of("model.layers.4.mlp.up_proj.weight", &split).is_err());
        assert!(stage_of("model.layers.x.mlp.up_proj.weight", &split).is_err());
    }
}
