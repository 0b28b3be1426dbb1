//! Precisions the lab loads a model in, and the Q4 plan: which tensor gets which GGUF block type.

use super::config::TensorSpec;
use crate::error::{LabError, Result};
use candle_core::quantized::GgmlDType;
use candle_core::DType;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[value(alias = "fp32", alias = "float32")]
    F32,
    #[value(alias = "bfloat16")]
    Bf16,
    #[value(alias = "fp16", alias = "float16")]
    F16,
    /// GGUF k-quants: Q4_K for the matrices (see `ggml_dtype_for`).
    #[value(alias = "q4k", alias = "q4_k", alias = "int4")]
    Q4,
}

impl Precision {
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "f16" | "fp16" | "float16" => Ok(Self::F16),
            "q4" | "q4k" | "q4_k" | "int4" | "gguf-q4" => Ok(Self::Q4),
            _ => Err(LabError::input(format!("unknown precision `{s}`: use f32, bf16, f16 or q4"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
            Self::Q4 => "q4",
        }
    }

    /// The dtype dense weights are held in; None for block-quantized weights.
    pub fn dense_dtype(self) -> Option<DType> {
        match self {
            Self::F32 => Some(DType::F32),
            Self::Bf16 => Some(DType::BF16),
            Self::F16 => Some(DType::F16),
            Self::Q4 => None,
        }
    }

    /// Activations, KV cache and logits. Q4 runs in F32: candle's quantized matmul takes F32 on
    /// every backend (its CUDA fast paths also take BF16, its CPU path does not).
    pub fn act_dtype(self) -> DType {
        self.dense_dtype().unwrap_or(DType::F32)
    }

    pub fn is_quantized(self) -> bool {
        self == Self::Q4
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The lab's Q4 plan, which stages 1-2 measured: Q4_K for every matrix; Q6_K for the output layer
/// (lm_head, or the tied embedding that serves as one), the tensor most sensitive to rounding;
/// Q8_0 where a row is not a multiple of Q4_K's 256-element block (e.g. 0.5B's 896) but is of 32;
/// F16 where neither fits; F32 for norms and biases. llama.cpp's Q4_K_M also promotes half the
/// layers' attn_v and ffn_down to Q6_K (`gguf::recipe`): 5.4 % more bytes for Qwen2.5-7B.
pub fn ggml_dtype_for(spec: &TensorSpec, tied_embeddings: bool) -> GgmlDType {
    if spec.shape.len() != 2 {
        return GgmlDType::F32;
    }
    let row = spec.shape[1];
    let is_output = spec.name == "lm_head.weight" || (tied_embeddings && spec.name == "model.embed_tokens.weight");
    let preferred = if is_output { GgmlDType::Q6K } else { GgmlDType::Q4K };
    if row % preferred.block_size() == 0 {
        preferred
    } else if row % GgmlDType::Q8_0.block_size() == 0 {
        GgmlDType::Q8_0
    } else {
        GgmlDType::F16
    }
}

/// Bytes of `elems` values stored as `dtype` (GGUF block arithmetic).
pub fn ggml_bytes(dtype: GgmlDType, elems: usize) -> u64 {
    (elems / dtype.block_size() * dtype.type_size()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, shape: &[usize]) -> TensorSpec {
        TensorSpec { name: name.into(), shape: shape.to_vec() }
    }

    #[test]
    fn plan_and_sizes() {
        assert_eq!(ggml_dtype_for(&spec("model.layers.0.mlp.up_proj.weight", &[18944, 3584]), false), GgmlDType::Q4K);
        assert_eq!(ggml_dtype_for(&spec("lm_head.weight", &[152064, 3584]), false), GgmlDType::Q6K);
        assert_eq!(ggml_dtype_for(&spec("model.embed_tokens.weight", &[151936, 896]), true), GgmlDType::Q8_0);
        assert_eq!(ggml_dtype_for(&spec("model.embed_tokens.weight", &[152064, 3584]), false), GgmlDType::Q4K);
        assert_eq!(ggml_dtype_for(&spec("model.norm.weight", &[3584]), false), GgmlDType::F32);
        // Q4_K: 144 bytes per 256 values = 4.5 bits; Q6_K: 210 bytes = 6.5625 bits.
        assert_eq!(ggml_bytes(GgmlDType::Q4K, 256), 144);
        assert_eq!(ggml_bytes(GgmlDType::Q6K, 512), 420);
        assert_eq!(Precision::parse("BF16").unwrap(), Precision::Bf16);
        assert!(Precision::parse("int3").is_err());
    }
}
