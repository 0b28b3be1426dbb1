//! Tensor names and shapes as a GGUF writes them: llama.cpp's names, row length first.

use crate::model::qwen2::config::{Qwen2Config, TensorSpec};

/// HF tensor name → llama.cpp's GGUF name (Qwen2 needs no Q/K permutation: it uses NeoX RoPE).
pub fn gguf_name(hf: &str) -> String {
    let map = [
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
pub fn gguf_tensors(cfg: &Qwen2Config) -> Vec<(String, Vec<u64>)> {
    cfg.tensor_specs().iter().map(gguf_tensor).collect()
}
