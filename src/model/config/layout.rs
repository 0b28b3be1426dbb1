//! The tensors a config implies, as HF checkpoints name and shape them, and the parameter counts.

use crate::model::config::family::Family;
use crate::model::config::DecoderConfig;

/// One weight tensor of the checkpoint: its HF name and shape (rows = output features).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
}

impl TensorSpec {
    pub fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }
}

impl DecoderConfig {
    /// Every weight tensor in module order (embedding, layers, final norm, lm_head), as HF names them.
    pub fn tensor_specs(&self) -> Vec<TensorSpec> {
        let (h, i, q, kv, d) = (self.hidden_size, self.intermediate_size, self.q_dim(), self.kv_dim(), self.head_dim());
        let spec = |name: String, shape: Vec<usize>| TensorSpec { name, shape };
        let family = self.model_type;
        let mut out = vec![spec("model.embed_tokens.weight".into(), vec![self.vocab_size, h])];
        for l in 0..self.num_hidden_layers {
            let p = format!("model.layers.{l}");
            if family.biases() {
                out.push(spec(format!("{p}.self_attn.sinks"), vec![self.num_attention_heads]));
            }
            out.push(spec(format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
            if family.qkv_bias() {
                out.push(spec(format!("{p}.self_attn.q_proj.bias"), vec![q]));
            }
            out.push(spec(format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
            if family.qkv_bias() {
                out.push(spec(format!("{p}.self_attn.k_proj.bias"), vec![kv]));
            }
            out.push(spec(format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
            if family.qkv_bias() {
                out.push(spec(format!("{p}.self_attn.v_proj.bias"), vec![kv]));
            }
            out.push(spec(format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
            if family.biases() {
                out.push(spec(format!("{p}.self_attn.o_proj.bias"), vec![h]));
            }
            if family.qk_norm() {
                out.push(spec(format!("{p}.self_attn.q_norm.weight"), vec![d]));
                out.push(spec(format!("{p}.self_attn.k_norm.weight"), vec![d]));
            }
            match (family, self.experts()) {
                (Family::Mixtral, Some(e)) => {
                    out.push(spec(format!("{p}.block_sparse_moe.gate.weight"), vec![e.experts, h]));
                    for x in 0..e.experts {
                        let ex = format!("{p}.block_sparse_moe.experts.{x}");
                        out.push(spec(format!("{ex}.w1.weight"), vec![e.width, h]));
                        out.push(spec(format!("{ex}.w2.weight"), vec![h, e.width]));
                        out.push(spec(format!("{ex}.w3.weight"), vec![e.width, h]));
                    }
                }
                // transformers' GptOssExperts: every expert in one tensor, gate and up interleaved
                // in gate_up_proj's last dimension, each product `x @ W` (input rows first).
                (Family::GptOss, Some(e)) => out.extend([
                    spec(format!("{p}.mlp.router.weight"), vec![e.experts, h]),
                    spec(format!("{p}.mlp.router.bias"), vec![e.experts]),
                    spec(format!("{p}.mlp.experts.gate_up_proj"), vec![e.experts, h, 2 * e.width]),
                    spec(format!("{p}.mlp.experts.gate_up_proj_bias"), vec![e.experts, 2 * e.width]),
                    spec(format!("{p}.mlp.experts.down_proj"), vec![e.experts, e.width, h]),
                    spec(format!("{p}.mlp.experts.down_proj_bias"), vec![e.experts, h]),
                ]),
                (_, Some(e)) => {
                    out.push(spec(format!("{p}.mlp.gate.weight"), vec![e.experts, h]));
                    for x in 0..e.experts {
                        let ex = format!("{p}.mlp.experts.{x}");
                        out.push(spec(format!("{ex}.gate_proj.weight"), vec![e.width, h]));
                        out.push(spec(format!("{ex}.up_proj.weight"), vec![e.width, h]));
                        out.push(spec(format!("{ex}.down_proj.weight"), vec![h, e.width]));
                    }
                }
                (_, None) => out.extend([
                    spec(format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                    spec(format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                    spec(format!("{p}.mlp.down_proj.weight"), vec![h, i]),
                ]),
            }
            out.push(spec(format!("{p}.input_layernorm.weight"), vec![h]));
            out.push(spec(format!("{p}.post_attention_layernorm.weight"), vec![h]));
            if family.post_norms() {
                out.push(spec(format!("{p}.pre_feedforward_layernorm.weight"), vec![h]));
                out.push(spec(format!("{p}.post_feedforward_layernorm.weight"), vec![h]));
            }
        }
        out.push(spec("model.norm.weight".into(), vec![h]));
        if !self.tie_word_embeddings {
            out.push(spec("lm_head.weight".into(), vec![self.vocab_size, h]));
        }
        out
    }

    pub fn param_count(&self) -> usize {
        self.tensor_specs().iter().map(TensorSpec::elem_count).sum()
    }

    /// The parameters one token reads: every tensor but the experts a token's router does not
    /// pick (the whole model for a dense one). Decode's ceiling follows from these bytes.
    pub fn active_param_count(&self) -> usize {
        let Some(e) = self.experts() else { return self.param_count() };
        let idle = (e.experts - e.active) * 3 * self.hidden_size * e.width * self.num_hidden_layers;
        // gpt-oss's idle experts' biases too (2 × width for gate and up, hidden for down).
        let idle = idle
            + self.model_type.biases() as usize
                * (e.experts - e.active)
                * (2 * e.width + self.hidden_size)
                * self.num_hidden_layers;
        self.param_count() - idle
    }
}
