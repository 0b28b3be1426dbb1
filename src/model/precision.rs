//! Precisions the lab loads a model in, and their plans: which tensor gets which GGUF block type
//! (the lab's Q4 plan, or llama.cpp's Q4_K_M recipe), and the dtype the model computes in.

use crate::error::{LabError, Result};
use crate::model::config::{DecoderConfig, TensorSpec};
use crate::model::gguf::recipe::{self, FileType, ModelClass};
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
    /// The lab's own Q4 plan, Q4_K for the matrices and Q6_K for the output layer (see
    /// `ggml_dtype_for`), computing in F32: what stages 1-2 measured up to 2026-11-23.
    #[value(alias = "q4k", alias = "q4_k", alias = "int4")]
    Q4,
    /// llama.cpp's Q4_K_M mix (`gguf::recipe`), computing in BF16 as llama.cpp (F16) and the
    /// report's Int4 run (BF16) do: a 16-bit KV cache and logits.
    #[value(name = "q4_k_m", alias = "q4km")]
    #[serde(rename = "q4_k_m", alias = "q4km")]
    Q4KM,
    /// The same Q4_K_M weights computing in F32 (`--compute f32`): twice the cache per token.
    #[value(name = "q4_k_m-f32", alias = "q4km-f32")]
    #[serde(rename = "q4_k_m-f32")]
    Q4KMF32,
}

/// The dtype a quantized model computes in (`--compute`); dense weights compute in their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compute {
    F32,
    Bf16,
}

/// How one tensor is held once loaded: dense in a dtype, or as GGUF blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Dense(DType),
    Blocks(GgmlDType),
}

impl Held {
    pub fn bytes(self, elems: usize) -> u64 {
        match self {
            Self::Dense(d) => (elems * d.size_in_bytes()) as u64,
            Self::Blocks(q) => ggml_bytes(q, elems),
        }
    }
}

impl Precision {
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "f16" | "fp16" | "float16" => Ok(Self::F16),
            "q4" | "q4k" | "q4_k" | "int4" | "gguf-q4" => Ok(Self::Q4),
            "q4_k_m" | "q4km" => Ok(Self::Q4KM),
            "q4_k_m-f32" | "q4km-f32" => Ok(Self::Q4KMF32),
            _ => Err(LabError::input(format!("unknown precision `{s}`: use f32, bf16, f16, q4_k_m, q4_k_m-f32 or q4"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
            Self::Q4 => "q4",
            Self::Q4KM => "q4_k_m",
            Self::Q4KMF32 => "q4_k_m-f32",
        }
    }

    /// The dtype dense weights are held in; None for block-quantized weights.
    pub fn dense_dtype(self) -> Option<DType> {
        match self {
            Self::F32 => Some(DType::F32),
            Self::Bf16 => Some(DType::BF16),
            Self::F16 => Some(DType::F16),
            Self::Q4 | Self::Q4KM | Self::Q4KMF32 => None,
        }
    }

    /// Activations, KV cache and logits. Q4_K_M computes in BF16 (candle's CUDA quantized matmul
    /// takes BF16; on the CPU the lab casts around it); the lab's Q4 and `q4_k_m-f32` in F32.
    pub fn act_dtype(self) -> DType {
        match self {
            Self::Q4KM => DType::BF16,
            _ => self.dense_dtype().unwrap_or(DType::F32),
        }
    }

    pub fn is_quantized(self) -> bool {
        self.dense_dtype().is_none()
    }

    /// Whether the quantized products take 16-bit activations: candle's quantized matmul over
    /// more than 8 rows (MMQ) then casts its input to F32 and its F32 output back, so each such
    /// product holds an F32 copy of its input and its F32 output beside the result
    /// (`estimate::transient`); the lab's CPU path does the same.
    pub fn casts_products(self) -> bool {
        self.is_quantized() && self.act_dtype() != DType::F32
    }

    /// This precision computing in `compute`: only Q4_K_M has a choice (dense weights compute in
    /// their own dtype; the lab's Q4 plan in F32, as its committed runs did).
    pub fn with_compute(self, compute: Option<Compute>) -> Self {
        match (self, compute) {
            (Self::Q4KM | Self::Q4KMF32, Some(Compute::F32)) => Self::Q4KMF32,
            (Self::Q4KM | Self::Q4KMF32, Some(Compute::Bf16)) => Self::Q4KM,
            (p, _) => p,
        }
    }

    /// How `spec` of `cfg` is held once loaded: dense in its dtype; under the Q4 plans, GGUF
    /// blocks for the matrices and the activation dtype for vectors (norms, biases).
    pub fn held(self, cfg: &DecoderConfig, spec: &TensorSpec) -> Held {
        if let Some(d) = self.dense_dtype() {
            return Held::Dense(d);
        }
        let q = match self {
            Self::Q4 => ggml_dtype_for(spec, cfg.tie_word_embeddings),
            _ => q4_k_m_type(cfg, spec),
        };
        match q {
            GgmlDType::F32 | GgmlDType::BF16 => Held::Dense(self.act_dtype()),
            q => Held::Blocks(q),
        }
    }
}

impl Compute {
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
        }
    }
}

/// llama.cpp's Q4_K_M type for one tensor of `cfg` named as in the HF checkpoint (F32 for what
/// llama-quantize leaves alone: norms and biases).
fn q4_k_m_type(cfg: &DecoderConfig, spec: &TensorSpec) -> GgmlDType {
    let (name, ne) = super::gguf::gguf_tensor(spec, cfg.model_type);
    if !recipe::is_quantized(&name, &ne) {
        return GgmlDType::F32;
    }
    let n = cfg.num_hidden_layers as i64;
    let layer =
        spec.name.strip_prefix("model.layers.").and_then(|r| r.split('.').next()).and_then(|d| d.parse::<i64>().ok());
    let more_bits = layer.is_some_and(|i| recipe::use_more_bits(i, n));
    let class = ModelClass::of(cfg);
    let t = recipe::tensor_type(
        FileType::Q4KM,
        class,
        &recipe::Tensor { name: &name, ne: &ne },
        !cfg.tie_word_embeddings,
        more_bits,
    );
    // Every type the recipe gives Qwen2 (Q4_K, Q5_0, Q6_K, Q8_0, F16) is one candle computes.
    t.candle().unwrap_or(GgmlDType::F16)
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
    if row.is_multiple_of(preferred.block_size()) {
        preferred
    } else if row.is_multiple_of(GgmlDType::Q8_0.block_size()) {
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

    /// Q4_K_M as loaded is llama-quantize's file tensor by tensor: the writer's recipe (which
    /// walks the tensors in llama.cpp's order) gives each tensor the type `held` gives it.
    #[test]
    fn q4_k_m_holds_the_recipes_types() {
        use crate::model::gguf::writer::{plan, FileTypes};
        for name in ["qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-72b"] {
            let cfg = DecoderConfig::preset(name).unwrap();
            let planned = plan(&cfg, FileTypes::Llama(FileType::Q4KM));
            let specs = cfg.tensor_specs();
            assert_eq!(planned.len(), specs.len());
            let mut promoted = 0;
            for (s, p) in specs.iter().zip(&planned) {
                let want = match p.ty.candle().unwrap() {
                    GgmlDType::F32 => Held::Dense(DType::F32),
                    q => Held::Blocks(q),
                };
                assert_eq!(Precision::Q4KMF32.held(&cfg, s), want, "{name} {}", s.name);
                promoted += usize::from(s.name.contains("layers.") && p.ty.name == "Q6_K");
            }
            // Some layers' attn_v and ffn_down, not all (0.5B's attn_v rows of 896 fall back).
            assert!(promoted > 0 && promoted < 2 * cfg.num_hidden_layers, "{name}: {promoted}");
        }
    }
}
