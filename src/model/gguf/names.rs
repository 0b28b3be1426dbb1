//! Tensor names and shapes as a GGUF writes them: llama.cpp's names, row length first.

use crate::model::config::{DecoderConfig, Family, TensorSpec};

/// HF tensor name → llama.cpp's GGUF name (Qwen2 and Qwen3 need no Q/K permutation: they use
/// NeoX RoPE). A mixture's experts share one 3-D tensor a layer in a GGUF (`ffn_gate_exps`), so
/// every expert's name maps to it. Gemma 3's `post_attention_layernorm` follows the attention
/// (`post_attention_norm`); its `pre_feedforward_layernorm` is the others' `ffn_norm`.
pub fn gguf_name(hf: &str, family: Family) -> String {
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

/// One tensor of a `family` model as a GGUF names and shapes it (row length first).
pub fn gguf_tensor(spec: &TensorSpec, family: Family) -> (String, Vec<u64>) {
    (gguf_name(&spec.name, family), spec.shape.iter().rev().map(|&d| d as u64).collect())
}

/// The tensors a config implies, as a GGUF names and shapes them: a layer's experts stacked in
/// one tensor of `[row, rows, experts]` (where the first expert stands), as llama.cpp's converter
/// merges them.
pub fn gguf_tensors(cfg: &DecoderConfig) -> Vec<(String, Vec<u64>)> {
    gguf_groups(cfg).into_iter().map(|(name, ne, _)| (name, ne)).collect()
}

/// `gguf_tensors` with the checkpoint tensors each one holds (indices into `tensor_specs`, one a
/// tensor, the experts in order for a merged one).
pub fn gguf_groups(cfg: &DecoderConfig) -> Vec<(String, Vec<u64>, Vec<usize>)> {
    let mut out: Vec<(String, Vec<u64>, Vec<usize>)> = Vec::new();
    let mut merged = std::collections::HashMap::new();
    for (i, spec) in cfg.tensor_specs().iter().enumerate() {
        let (name, ne) = gguf_tensor(spec, cfg.model_type);
        if !name.contains("_exps.") {
            out.push((name, ne, vec![i]));
            continue;
        }
        match merged.get(&name) {
            Some(&k) => {
                let group: &mut (String, Vec<u64>, Vec<usize>) = &mut out[k];
                group.2.push(i);
                let n = group.2.len() as u64;
                if let Some(last) = group.1.last_mut() {
                    *last = n;
                }
            }
            None => {
                merged.insert(name.clone(), out.len());
                out.push((name, [ne, vec![1]].concat(), vec![i]));
            }
        }
    }
    out
}
