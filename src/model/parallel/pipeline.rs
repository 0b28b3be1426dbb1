//! Pipeline placement: whole layers on each device (the split `estimate::parallel::pipeline_split`
//! makes from the weights, or llama.cpp's `llamacpp_split`), the embedding on the first (or in
//! host memory, as llama.cpp keeps it), the final norm and the head on the output's device (a tied
//! table: a copy there). A token's hidden state crosses to the next device between stages
//! (candle copies it through the host: one hidden-sized vector a token, no collective). One
//! thread drives the stages in turn, as a pipeline serving one request does: each device waits
//! while the others compute.

use crate::error::{LabError, Result};
use crate::memory::MemoryProbe;
use crate::model::load::weights::WeightSource;
use crate::model::{Decoder, DecoderConfig, Precision};
use candle_core::Device;
use std::collections::HashMap;

/// Where a pipeline keeps what is not a layer: the token embedding (a stage, or None for host
/// memory) and the final norm and head (a stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    pub embed: Option<usize>,
    pub head: usize,
}

impl Ends {
    /// The lab's own: the embedding on the first stage, the head on the last.
    pub fn first_and_last(stages: usize) -> Self {
        Self { embed: Some(0), head: stages.saturating_sub(1) }
    }
}

/// The stage (index into `split`) that holds tensor `name`; None: host memory.
pub fn stage_of(name: &str, split: &[(usize, usize)], ends: Ends) -> Result<Option<usize>> {
    if split.is_empty() {
        return Err(LabError::input("a pipeline of no stages"));
    }
    if name == "model.embed_tokens.weight" {
        return Ok(ends.embed);
    }
    if name == "model.norm.weight" || name == "lm_head.weight" {
        return Ok(Some(ends.head));
    }
    let layer = name
        .strip_prefix("model.layers.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|l| l.parse::<usize>().ok())
        .ok_or_else(|| LabError::input(format!("tensor {name} belongs to no pipeline stage")))?;
    split
        .iter()
        .position(|&(a, b)| (a..b).contains(&layer))
        .map(Some)
        .ok_or_else(|| LabError::input(format!("layer {layer} is in no pipeline stage")))
}

/// The model with stage `i`'s tensors loaded straight onto `devices[i]` (the embedding in host
/// memory where `ends` says); the model's own device (its rotary table, the logits) is the head's.
/// `probes[i]` captures an OOM on device `i`.
pub fn load_pipeline(
    cfg: &DecoderConfig,
    precision: Precision,
    source: &mut dyn WeightSource,
    devices: &[Device],
    split: &[(usize, usize)],
    ends: Ends,
    probes: &[MemoryProbe],
) -> Result<Decoder> {
    if devices.len() != split.len()
        || split.last().map(|s| s.1) != Some(cfg.num_hidden_layers)
        || ends.head >= devices.len()
    {
        return Err(LabError::input(format!(
            "{} devices for a pipeline of {} stages over {} layers",
            devices.len(),
            split.len(),
            cfg.num_hidden_layers
        )));
    }
    // (name held under, tensor, stage) for every tensor; a tied head is the embedding table, so the
    // head's stage holds its own copy of it (drawn again: the same values) unless both are there.
    let mut plan = Vec::new();
    for spec in cfg.tensor_specs() {
        let stage = stage_of(&spec.name, split, ends)?;
        if spec.name == "model.embed_tokens.weight" && cfg.tie_word_embeddings && stage != Some(ends.head) {
            plan.push(("lm_head.weight".to_string(), spec.clone(), Some(ends.head)));
        }
        plan.push((spec.name.clone(), spec, stage));
    }
    let mut w = HashMap::new();
    for (name, spec, stage) in plan {
        // What goes to host memory is made on the first device, where a load onto one device
        // makes it (synthetic weights are drawn differently on a GPU), then moved.
        let home = stage.map_or(Device::Cpu, |i| devices[i].clone());
        let at = stage.map_or("host memory".to_string(), |i| format!("pipeline stage {i} of {}", devices.len()));
        let t = source.load(&spec, precision, &devices[stage.unwrap_or(0)]).and_then(|w| w.to_device(&home)).map_err(
            |e| MemoryProbe::capture_in(stage.and_then(|i| probes.get(i)), e, &format!("loading {name} ({at})")),
        )?;
        w.insert(name, t);
    }
    Decoder::new(cfg, precision, w, &devices[ends.head])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_by_hand() {
        // 4 layers over 2 stages: 0..3 and 3..4.
        let split = [(0, 3), (3, 4)];
        let ends = Ends::first_and_last(2);
        assert_eq!(stage_of("model.embed_tokens.weight", &split, ends).unwrap(), Some(0));
        assert_eq!(stage_of("model.layers.2.mlp.up_proj.weight", &split, ends).unwrap(), Some(0));
        assert_eq!(stage_of("model.layers.3.self_attn.q_proj.bias", &split, ends).unwrap(), Some(1));
        assert_eq!(stage_of("model.norm.weight", &split, ends).unwrap(), Some(1));
        assert_eq!(stage_of("lm_head.weight", &split, ends).unwrap(), Some(1));
        assert!(stage_of("model.layers.4.mlp.up_proj.weight", &split, ends).is_err());
        assert!(stage_of("model.layers.x.mlp.up_proj.weight", &split, ends).is_err());
        // llama.cpp's: the embedding in host memory.
        let host = Ends { embed: None, head: 1 };
        assert_eq!(stage_of("model.embed_tokens.weight", &split, host).unwrap(), None);
    }
}
