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
}

impl Family {
    pub const ALL: [Family; 6] =
        [Family::Qwen2, Family::Qwen3, Family::Llama, Family::Mistral, Family::Qwen3Moe, Family::Mixtral];

    pub fn name(self) -> &'static str {
        match self {
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Mixtral => "mixtral",
        }
    }

    /// Qwen2 alone biases q, k and v (transformers' `Qwen2Attention`).
    pub fn qkv_bias(self) -> bool {
        self == Family::Qwen2
    }

    /// Qwen3 normalises each head of q and k before RoPE (`q_norm`, `k_norm`, one weight of head_dim).
    pub fn qk_norm(self) -> bool {
        matches!(self, Family::Qwen3 | Family::Qwen3Moe)
    }

    pub fn is_moe(self) -> bool {
        matches!(self, Family::Qwen3Moe | Family::Mixtral)
    }
}
