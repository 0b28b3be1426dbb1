//! Tensor names and shapes as a GGUF writes them: llama.cpp's names, row length first.

use crate::model::config::{DecoderConfig, Family, TensorSpec};

/// HF tensor name → llama.cpp's GGUF name (Qwen2 and Qwen3 need no Q/K permutation: they use
/// NeoX RoPE). A mixture's experts share one 3-D tensor a layer in a GGUF (`ffn_gate_exps`), so
/// every expert's name maps to it. Gemma 3's `post_attention_layernorm` follows the attention
/// (`post_attention_norm`); its `pre_feedforward_layernorm` is the others' `ffn_norm`.
pub fn gguf_name(hf: &str, family: Family) -> String {
    if let Some(parts) = gpt_oss_experts(hf) {
        return parts[0].0.clone();
    }
    if family == Family::GptOss {
        let oss = [
            (".self_attn.sinks", ".attn_sinks.weight"),
            (".mlp.router.", ".ffn_gate_inp."),
            ("post_attention_layernorm", "post_attention_norm"),
        ];
        if let Some((a, b)) = oss.iter().find(|(a, _)| hf.contains(a)) {
            return gguf_name(&hf.replace(a, b), Family::Qwen2);
        }
    }
    if family.post_norms() {
        let gemma = [
            ("post_attention_layernorm", "post_attention_norm"),
            ("pre_feedforward_layernorm", "ffn_norm"),
            ("post_feedforward_layernorm", "post_ffw_norm"),
        ];
        if let Some((a, b)) = gemma.iter().find(|(a, _)| hf.contains(a)) {
            return gguf_name(&hf.replace(a, b), Family::Qwen2);
        }
    }
    if let Some((layer, rest)) = hf.split_once(".mlp.experts.").or_else(|| hf.split_once(".block_sparse_moe.experts."))
    {
        let part = rest.split('.').nth(1).unwrap_or("");
        let merged = match part {
            "gate_proj" | "w1" => "ffn_gate_exps",
            "up_proj" | "w3" => "ffn_up_exps",
            _ => "ffn_down_exps",
        };
        return format!("{}.{merged}.weight", layer.replace("model.layers.", "blk."));
    }
    let map = [
        ("mlp.gate.", "ffn_gate_inp."),
        ("block_sparse_moe.gate.", "ffn_gate_inp."),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("model.embed_tokens.", "token_embd."),
        ("model.norm.", "output_norm."),
        ("lm_head.", "output."),
        ("model.layers.", "blk."),
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
        ("post_attention_layernorm", "ffn_norm"),
        ("input_layernorm", "attn_norm"),
    ];
    map.iter().fold(hf.to_string(), |s, (a, b)| s.replace(a, b))
}

/// Which values of a checkpoint tensor a GGUF tensor holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Whole,
    /// The last two dimensions swapped: gpt-oss's `down_proj`, stored input rows first (`x @ W`).
    Transposed,
    /// The even (gate) or odd (up) entries of gpt-oss's interleaved `gate_up_proj` along its last
    /// dimension, a matrix transposed first (llama.cpp's converter, conversion/gpt_oss.py).
    Gate,
    Up,
}

impl Part {
    /// The checkpoint shape (`torch` order) of the part.
    pub fn shape(self, shape: &[usize]) -> Vec<usize> {
        let mut s = shape.to_vec();
        let n = s.len();
        if n >= 3 && self != Part::Whole {
            s.swap(n - 1, n - 2);
        }
        if matches!(self, Part::Gate | Part::Up) {
            let split = if n >= 3 { n - 2 } else { n - 1 };
            s[split] /= 2;
        }
        s
    }
}

/// gpt-oss's expert tensors (`mlp.experts.gate_up_proj`, `down_proj` and their biases), each as
/// the GGUF tensors it becomes; None for any other name.
fn gpt_oss_experts(hf: &str) -> Option<Vec<(String, Part)>> {
    let (layer, rest) = hf.split_once(".mlp.experts.")?;
    let parts: &[(&str, Part)] = match rest {
        "gate_up_proj" => &[("ffn_gate_exps.weight", Part::Gate), ("ffn_up_exps.weight", Part::Up)],
        "gate_up_proj_bias" => &[("ffn_gate_exps.bias", Part::Gate), ("ffn_up_exps.bias", Part::Up)],
        "down_proj" => &[("ffn_down_exps.weight", Part::Transposed)],
        "down_proj_bias" => &[("ffn_down_exps.bias", Part::Whole)],
        _ => return None,
    };
    let blk = layer.replace("model.layers.", "blk.");
    Some(parts.iter().map(|(n, p)| (format!("{blk}.{n}"), *p)).collect())
}

/// One tensor of a `family` model as a GGUF names and shapes it (row length first).
pub fn gguf_tensor(spec: &TensorSpec, family: Family) -> (String, Vec<u64>) {
    (gguf_name(&spec.name, family), spec.shape.iter().rev().map(|&d| d as u64).collect())
}

/// The tensors a config implies, as a GGUF names and shapes them: a layer's experts stacked in
/// one tensor of `[row, rows, experts]` (where the first expert stands), as llama.cpp's converter
/// merges them.
pub fn gguf_tensors(cfg: &DecoderConfig) -> Vec<(String, Vec<u64>)> {
    gguf_groups(cfg).into_iter().map(|g| (g.name, g.ne)).collect()
}

/// One GGUF tensor and the checkpoint tensors it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub name: String,
    pub ne: Vec<u64>,
    /// Indices into `tensor_specs`: one, or a mixture's experts in order for a merged tensor.
    pub held: Vec<usize>,
    pub part: Part,
}

/// `gguf_tensors` with the checkpoint tensors each one holds.
pub fn gguf_groups(cfg: &DecoderConfig) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    let mut merged = std::collections::HashMap::new();
    for (i, spec) in cfg.tensor_specs().iter().enumerate() {
        if let Some(parts) = gpt_oss_experts(&spec.name) {
            for (name, part) in parts {
                let ne = part.shape(&spec.shape).iter().rev().map(|&d| d as u64).collect();
                out.push(Group { name, ne, held: vec![i], part });
            }
            continue;
        }
        let (name, ne) = gguf_tensor(spec, cfg.model_type);
        if !name.contains("_exps.") {
            out.push(Group { name, ne, held: vec![i], part: Part::Whole });
            continue;
        }
        match merged.get(&name) {
            Some(&k) => {
                let group: &mut Group = &mut out[k];
                group.held.push(i);
                let n = group.held.len() as u64;
                if let Some(last) = group.ne.last_mut() {
                    *last = n;
                }
            }
            None => {
                merged.insert(name.clone(), out.len());
                out.push(Group { name, ne: [ne, vec![1]].concat(), held: vec![i], part: Part::Whole });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gpt-oss-20b's layer 0 as llama.cpp's converter writes it: gate and up split from
    /// gate_up_proj as [2880, 2880, 32] each, down transposed, the biases beside them, the
    /// sinks and router under llama.cpp's names.
    #[test]
    fn gpt_oss_experts_split_and_transposed() {
        let cfg = DecoderConfig::preset("gpt-oss-20b").unwrap();
        let t = gguf_tensors(&cfg);
        let ne = |n: &str| t.iter().find(|(name, _)| name == n).map(|(_, ne)| ne.clone()).unwrap_or_default();
        assert_eq!(ne("blk.0.ffn_gate_exps.weight"), [2880, 2880, 32]);
        assert_eq!(ne("blk.0.ffn_up_exps.weight"), [2880, 2880, 32]);
        assert_eq!(ne("blk.0.ffn_down_exps.weight"), [2880, 2880, 32]);
        assert_eq!(ne("blk.0.ffn_gate_exps.bias"), [2880, 32]);
        assert_eq!(ne("blk.0.ffn_down_exps.bias"), [2880, 32]);
        assert_eq!(ne("blk.0.attn_sinks.weight"), [64]);
        assert_eq!(ne("blk.0.ffn_gate_inp.bias"), [32]);
        assert_eq!(ne("blk.0.post_attention_norm.weight"), [2880]);
        assert_eq!(ne("blk.0.attn_output.bias"), [2880]);
        assert!(!t.iter().any(|(n, _)| n.contains("ffn_norm")));
        // A shape that tells gate from down: a tiny model whose experts are narrower than it.
        let shape = Part::Gate.shape(&[8, 256, 2 * 96]);
        assert_eq!(shape, [8, 96, 256]);
        assert_eq!(Part::Transposed.shape(&[8, 96, 256]), [8, 256, 96]);
        assert_eq!(Part::Up.shape(&[8, 192]), [8, 96]);
    }
}
