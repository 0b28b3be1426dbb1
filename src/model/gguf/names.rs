//! Tensor names and shapes as a GGUF writes them: llama.cpp's names, row length first.

use crate::model::config::{DecoderConfig, TensorSpec};

/// HF tensor name → llama.cpp's GGUF name (Qwen2 and Qwen3 need no Q/K permutation: they use
/// NeoX RoPE). A mixture's experts share one 3-D tensor a layer in a GGUF (`ffn_gate_exps`), so
/// every expert's name maps to it.
pub fn gguf_name(hf: &str) -> String {
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

/// One tensor as a GGUF names and shapes it (row length first).
pub fn gguf_tensor(spec: &TensorSpec) -> (String, Vec<u64>) {
    (gguf_name(&spec.name), spec.shape.iter().rev().map(|&d| d as u64).collect())
}

/// The tensors a config implies, as a GGUF names and shapes them.
pub fn gguf_tensors(cfg: &DecoderConfig) -> Vec<(String, Vec<u64>)> {
    cfg.tensor_specs().iter().map(gguf_tensor).collect()
}
