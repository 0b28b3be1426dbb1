//! The families the lab knows, and the parts each has.

use serde::{Deserialize, Serialize};

/// The `model_type` of config.json (GGUF's `general.architecture` maps onto it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    #[default]
    Qwen2,
    Qwen3,
    Llama,
    Mistral,
    Qwen3Moe,
    Mixtral,
    /// Gemma 3's text model (`gemma3_text`): priced for llama.cpp and written as a GGUF; the
    /// lab's own decoder does not compute its layers (`DecoderConfig::computed`).
    #[serde(rename = "gemma3_text")]
    Gemma3,
    /// OpenAI's gpt-oss (`gpt_oss`): a mixture with biases everywhere, attention sinks and
    /// windowed layers beside global ones; priced for llama.cpp and written as a GGUF like Gemma 3.
    GptOss,
}

impl Family {
    pub const ALL: [Family; 8] = [
        Family::Qwen2,
        Family::Qwen3,
        Family::Llama,
        Family::Mistral,
        Family::Qwen3Moe,
        Family::Mixtral,
        Family::Gemma3,
        Family::GptOss,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Mixtral => "mixtral",
            Family::Gemma3 => "gemma3_text",
            Family::GptOss => "gpt_oss",
        }
    }

    /// Qwen2 biases q, k and v (transformers' `Qwen2Attention`); gpt-oss o_proj too
    /// (`attention_bias`), and its experts and router (`biases`).
    pub fn qkv_bias(self) -> bool {
        matches!(self, Family::Qwen2 | Family::GptOss)
    }

    /// gpt-oss biases the attention's output, the router and each expert's projections, and adds
    /// a learned sink to each head's softmax (`self_attn.sinks`).
    pub fn biases(self) -> bool {
        self == Family::GptOss
    }

    /// Qwen3 and Gemma 3 normalise each head of q and k before RoPE (`q_norm`, `k_norm`, one
    /// weight of head_dim).
    pub fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3)
    }

    /// Gemma 3 normalises the attention's and the MLP's outputs too, before each residual sum
    /// (`post_attention_layernorm`, `post_feedforward_layernorm`; `pre_feedforward_layernorm`
    /// is the others' `post_attention_layernorm`).
    pub fn post_norms(self) -> bool {
        self == Family::Gemma3
    }

    pub fn is_moe(self) -> bool {
        matches!(self, Family::Qwen3Moe | Family::Mixtral | Family::GptOss)
    }
}
