//! One decoder config for every family the lab computes and prices (config.json field names):
//! Qwen2/2.5, Qwen3, Llama 2/3.x, Mistral and the mixtures Qwen3-MoE and Mixtral (Gemma 3 and
//! gpt-oss for llama.cpp's pricing only). A family is a set of
//! parts (a bias, a q/k norm, a router), not a copy of the model; the tensor layout follows.

use crate::error::{LabError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

mod family;
mod fields;
mod layout;

pub use family::Family;
pub use layout::TensorSpec;

/// Llama 3.1's RoPE scaling (`rope_type` llama3): long wavelengths slowed by `factor`, short
/// ones kept, the band between blended (transformers' `_compute_llama3_parameters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeScaling {
    #[serde(alias = "type")]
    pub rope_type: String,
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecoderConfig {
    #[serde(default)]
    pub model_type: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// The dense MLP's width; Mixtral's experts' too.
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    #[serde(default = "default_max_position_embeddings")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// An integer or a list in HF configs.
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub torch_dtype: Option<String>,
    /// Qwen3 and Llama 3.1 write it; Qwen3-0.6B's 128 is not hidden / heads (64). A
    /// tensor-parallel rank's config also sets it: it computes a share of the heads at full size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    /// Mistral v0.1's window (4096) and Gemma 3's (1024 in its windowed layers): attention sees
    /// only the last `sliding_window` positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Gemma 3: every `sliding_window_pattern`-th layer attends to all positions, the others
    /// through the window (6, also llama.cpp's default for the family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window_pattern: Option<usize>,
    /// Gemma 3 in newer transformers: each layer's attention, `sliding_attention` or
    /// `full_attention` (the pattern written out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_types: Option<Vec<String>>,
    /// Experts of a mixture (Qwen3-MoE `num_experts`, Mixtral `num_local_experts`).
    #[serde(default, alias = "num_local_experts", skip_serializing_if = "Option::is_none")]
    pub num_experts: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<usize>,
    /// One Qwen3-MoE expert's width (Mixtral's is `intermediate_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<usize>,
    /// Qwen3-MoE: the picked experts' weights renormalised to sum to 1 (Mixtral always does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
}

/// A mixture of experts in every layer: `experts` MLPs of `width`, `active` of them per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Experts {
    pub experts: usize,
    pub active: usize,
    pub width: usize,
    /// The picked experts' router weights divided by their sum.
    pub renormalize: bool,
}

/// llama.cpp's pattern for Gemma 3 when the file names none (`load_swa_pattern(ml, 6)`).
pub const GEMMA3_PATTERN: usize = 6;

/// llama.cpp's pattern for gpt-oss (`load_swa_pattern(ml, 2)`): every other layer windowed.
pub const GPT_OSS_PATTERN: usize = 2;

/// Whether layer `il` is windowed under a pattern of `p` (`llama_hparams::set_swa_pattern`: all
/// but every `p`-th layer, counting from 1).
pub fn windowed_in_pattern(il: usize, p: usize) -> bool {
    il % p < p - 1
}

fn default_max_position_embeddings() -> usize {
    32768
}
fn default_hidden_act() -> String {
    "silu".into()
}

/// The presets under data/models, embedded so the binary needs no data folder.
pub const PRESETS: &[(&str, &str)] = &[
    ("tiny", include_str!("../../../data/models/tiny.json")),
    ("qwen2.5-0.5b", include_str!("../../../data/models/qwen2.5-0.5b.json")),
    ("qwen2.5-1.5b", include_str!("../../../data/models/qwen2.5-1.5b.json")),
    ("qwen2.5-3b", include_str!("../../../data/models/qwen2.5-3b.json")),
    ("qwen2.5-7b", include_str!("../../../data/models/qwen2.5-7b.json")),
    ("qwen2.5-14b", include_str!("../../../data/models/qwen2.5-14b.json")),
    ("qwen2.5-32b", include_str!("../../../data/models/qwen2.5-32b.json")),
    ("qwen2.5-72b", include_str!("../../../data/models/qwen2.5-72b.json")),
    ("qwen3-8b", include_str!("../../../data/models/qwen3-8b.json")),
    ("qwen3-14b", include_str!("../../../data/models/qwen3-14b.json")),
    ("llama-2-7b", include_str!("../../../data/models/llama-2-7b.json")),
    ("llama-2-70b", include_str!("../../../data/models/llama-2-70b.json")),
    ("llama-3.1-8b", include_str!("../../../data/models/llama-3.1-8b.json")),
    ("mistral-7b", include_str!("../../../data/models/mistral-7b.json")),
    ("mistral-7b-v0.1", include_str!("../../../data/models/mistral-7b-v0.1.json")),
    ("qwen3-30b-a3b", include_str!("../../../data/models/qwen3-30b-a3b.json")),
    ("mixtral-8x7b", include_str!("../../../data/models/mixtral-8x7b.json")),
    ("gemma-3-4b", include_str!("../../../data/models/gemma-3-4b.json")),
    ("gemma-3-12b", include_str!("../../../data/models/gemma-3-12b.json")),
    ("gpt-oss-20b", include_str!("../../../data/models/gpt-oss-20b.json")),
    ("tiny-qwen3", include_str!("../../../data/models/tiny-qwen3.json")),
    ("tiny-llama", include_str!("../../../data/models/tiny-llama.json")),
    ("tiny-mistral", include_str!("../../../data/models/tiny-mistral.json")),
    ("tiny-moe", include_str!("../../../data/models/tiny-moe.json")),
    ("tiny-gemma", include_str!("../../../data/models/tiny-gemma.json")),
    ("tiny-gpt-oss", include_str!("../../../data/models/tiny-gpt-oss.json")),
];

impl DecoderConfig {
    pub fn preset(name: &str) -> Result<Self> {
        let key = name.to_ascii_lowercase();
        let key = key.strip_suffix("-instruct").unwrap_or(&key);
        let (_, json) = PRESETS.iter().find(|(n, _)| *n == key).ok_or_else(|| {
            let names: Vec<_> = PRESETS.iter().map(|(n, _)| *n).collect();
            LabError::input(format!("unknown preset `{name}`; known presets: {}", names.join(", ")))
        })?;
        Self::from_json(json, &format!("preset {key}"))
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        // A config.json is a few KiB; a larger file is not one.
        let text = crate::paths::read_regular_text(path, 16 << 20)?;
        Self::from_json(&text, &path.display().to_string())
    }

    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let bad = |e: &dyn std::fmt::Display| LabError::input(format!("{origin} is not a usable model config: {e}"));
        let mut json: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e))?;
        if !json.is_object() {
            return Err(bad(&"a config.json is one JSON object of named fields"));
        }
        if let Some(obj) = json.as_object_mut() {
            // transformers 5 moves rope_theta into rope_parameters ...
            if !obj.contains_key("rope_theta") {
                if let Some(theta) = obj.get("rope_parameters").and_then(|r| r.get("rope_theta")).cloned() {
                    obj.insert("rope_theta".into(), theta);
                }
            }
            // ... and renames torch_dtype to dtype.
            if !obj.contains_key("torch_dtype") {
                if let Some(dtype) = obj.get("dtype").cloned() {
                    obj.insert("torch_dtype".into(), dtype);
                }
            }
            // serde's own message for `-4` names no field: say which one.
            for key in [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "max_position_embeddings",
                "head_dim",
                "sliding_window",
                "sliding_window_pattern",
                "num_experts",
                "num_local_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
            ] {
                if let Some(v) = obj.get(key).filter(|v| !v.is_u64() && !v.is_null()) {
                    return Err(bad(&format!("{key} = {v} must be a whole number above 0")));
                }
            }
            let family = match obj.get("model_type") {
                None => Family::Qwen2,
                Some(t) => serde_json::from_value::<Family>(t.clone()).map_err(|_| {
                    let names: Vec<_> = Family::ALL.iter().map(|f| f.name()).collect();
                    // Gemma 3's checkpoints of 4B and up wrap the text model beside a vision tower.
                    let hint = match t.as_str() {
                        Some("gemma3") => " (Gemma 3's text model is its text_config)",
                        _ => "",
                    };
                    bad(&format!("model_type {t}: the lab knows {}{hint}", names.join(", ")))
                })?,
            };
            fields::unimplemented_field(family, obj).map_err(|e| bad(&e))?;
            // Llama 2's config.json has no rope_theta: transformers' default for the family.
            if !obj.contains_key("rope_theta") && family != Family::Qwen2 {
                let theta = if family == Family::Mixtral { 1e6 } else { 1e4 };
                obj.insert("rope_theta".into(), theta.into());
            }
            // A window only Mistral, Gemma 3 and gpt-oss use; the others write one that is off
            // (use_sliding_window), and their layer_types (checked above) say full attention.
            if !matches!(family, Family::Mistral | Family::Gemma3 | Family::GptOss) {
                obj.remove("sliding_window");
            }
            if !matches!(family, Family::Gemma3 | Family::GptOss) {
                obj.remove("layer_types");
            }
            // gpt-oss's YaRN (checked above) moves no byte llama.cpp allocates.
            if family == Family::GptOss {
                obj.remove("rope_scaling");
            }
            if family == Family::Gemma3 {
                // Gemma names its activation `hidden_activation`; its RoPE scaling (linear, in
                // the global layers of 4B and larger) moves no byte llama.cpp allocates, and no
                // engine that computes Gemma 3 is the lab's (`computed`).
                if let Some(act) = obj.remove("hidden_activation") {
                    obj.insert("hidden_act".into(), act);
                }
                // Gemma3TextConfig ties the head unless told otherwise; its config.json says nothing.
                obj.entry("tie_word_embeddings").or_insert(true.into());
                obj.remove("rope_scaling");
            }
            // Dense families take no expert fields; the checks above refused counts of experts.
            if !family.is_moe() {
                obj.remove("num_experts_per_tok");
                obj.remove("moe_intermediate_size");
                obj.remove("norm_topk_prob");
            }
        }
        let cfg: Self = serde_json::from_value(json).map_err(|e| bad(&e))?;
        cfg.validate().map_err(|e| LabError::input(format!("{origin}: {e}")))?;
        Ok(cfg)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        use crate::limits::{MAX_EXPERTS, MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_SEQ, MAX_VOCAB};
        use crate::units::grouped;
        // Ceilings far above any real model keep every byte count inside u64 (limits.rs).
        let counts = [
            ("vocab_size", Some(self.vocab_size), MAX_VOCAB),
            ("hidden_size", Some(self.hidden_size), MAX_HIDDEN),
            ("intermediate_size", Some(self.intermediate_size), MAX_INTERMEDIATE),
            ("num_hidden_layers", Some(self.num_hidden_layers), MAX_LAYERS),
            ("num_attention_heads", Some(self.num_attention_heads), MAX_HEADS),
            ("num_key_value_heads", Some(self.num_key_value_heads), MAX_HEADS),
            ("max_position_embeddings", Some(self.max_position_embeddings), MAX_SEQ),
            ("head_dim", self.head_dim, MAX_HIDDEN / 4),
            ("sliding_window", self.sliding_window, MAX_SEQ),
            ("sliding_window_pattern", self.sliding_window_pattern, MAX_LAYERS),
            ("num_experts", self.num_experts, MAX_EXPERTS),
            ("num_experts_per_tok", self.num_experts_per_tok, MAX_EXPERTS),
            ("moe_intermediate_size", self.moe_intermediate_size, MAX_INTERMEDIATE),
        ];
        for (name, value, max) in counts {
            let Some(value) = value else { continue };
            if value == 0 {
                return Err(format!("{name} must be positive"));
            }
            if value > max {
                return Err(format!(
                    "{name} = {} is above the lab's ceiling of {} (no real model comes near; a model this size cannot be priced)",
                    grouped(value as u64),
                    grouped(max as u64)
                ));
            }
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {} (and no head_dim is given)",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!("the head dimension (head_dim) {} must be even for RoPE", self.head_dim()));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0 && self.rms_norm_eps < 1.0) {
            return Err(format!("rms_norm_eps = {} must lie between 0 and 1", self.rms_norm_eps));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(format!("rope_theta = {} must be a finite number above 1", self.rope_theta));
        }
        if let Some(r) = &self.rope_scaling {
            let finite = [r.factor, r.low_freq_factor, r.high_freq_factor].iter().all(|v| v.is_finite() && *v > 0.0);
            if !finite || r.high_freq_factor <= r.low_freq_factor || r.original_max_position_embeddings == 0 {
                return Err(format!(
                    "rope_scaling needs a positive factor, low_freq_factor < high_freq_factor and original_max_position_embeddings: {r:?}"
                ));
            }
        }
        let act = if self.model_type == Family::Gemma3 { "gelu_pytorch_tanh" } else { "silu" };
        if self.hidden_act != act {
            return Err(format!(
                "hidden_act `{}` is not supported ({} uses {act})",
                self.hidden_act,
                self.model_type.name()
            ));
        }
        if let Some(types) = &self.layer_types {
            if types.len() != self.num_hidden_layers {
                return Err(format!(
                    "layer_types names {} layers, num_hidden_layers is {}",
                    types.len(),
                    self.num_hidden_layers
                ));
            }
            if let Some(t) = types.iter().find(|t| !matches!(t.as_str(), "sliding_attention" | "full_attention")) {
                return Err(format!(
                    "layer_types: `{}` is neither sliding_attention nor full_attention",
                    t.escape_debug()
                ));
            }
        }
        if matches!(self.model_type, Family::Gemma3 | Family::GptOss) && self.sliding_window.is_none() {
            return Err(format!("{} needs its `sliding_window`", self.model_type.name()));
        }
        if let Some(dtype) = &self.torch_dtype {
            // The dtypes a checkpoint's weights can be stored in and the lab can read; int8 or
            // fp8 checkpoints hold scales the lab does not apply.
            if !matches!(dtype.as_str(), "float32" | "float16" | "bfloat16" | "float" | "half") {
                return Err(format!("torch_dtype `{dtype}` is not one the lab computes (float32, float16, bfloat16)"));
            }
        }
        if let Some(e) = self.experts() {
            if e.active > e.experts {
                return Err(format!("num_experts_per_tok {} is above num_experts {}", e.active, e.experts));
            }
        } else if self.model_type.is_moe() {
            return Err(format!("{} needs num_experts_per_tok", self.model_type.name()));
        }
        Ok(())
    }

    /// Whether layer `il` attends through the sliding window: Mistral's every layer, Gemma 3's
    /// as `layer_types` or the pattern says (llama.cpp's `set_swa_pattern`: all but every
    /// `pattern`-th layer, counting from 1).
    pub fn is_swa(&self, il: usize) -> bool {
        if self.sliding_window.is_none() {
            return false;
        }
        if let Some(types) = &self.layer_types {
            return types.get(il).is_some_and(|t| t == "sliding_attention");
        }
        match self.model_type {
            Family::Gemma3 => windowed_in_pattern(il, self.sliding_window_pattern.unwrap_or(GEMMA3_PATTERN)),
            Family::GptOss => windowed_in_pattern(il, self.sliding_window_pattern.unwrap_or(GPT_OSS_PATTERN)),
            _ => true,
        }
    }

    /// Refused for the lab's own decoder, its estimator and the transformers engine: Gemma 3's
    /// layers (scaled embedding, four norms a layer, GELU, windows beside global layers) and
    /// gpt-oss's (sinks, biased experts, windows) are priced for llama.cpp only.
    pub fn computed(&self) -> Result<()> {
        let parts = match self.model_type {
            Family::Gemma3 => "Gemma 3's layers",
            Family::GptOss => "gpt-oss's layers (attention sinks, biased experts)",
            _ => return Ok(()),
        };
        Err(LabError::input(format!(
            "{}: the lab's own decoder does not compute {parts}; it prices llama.cpp (--engine llama.cpp) and writes its GGUF (quantize)",
            self.model_type.name()
        )))
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// The width of q and of o_proj's input: heads × head_dim (hidden_size in Qwen2 and Llama 2).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim()
    }

    /// Query heads that share one K/V head (grouped-query attention).
    pub fn gqa_group(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim()
    }

    pub fn experts(&self) -> Option<Experts> {
        let width = match self.model_type {
            Family::Mixtral | Family::GptOss => self.intermediate_size,
            _ => self.moe_intermediate_size?,
        };
        // gpt-oss takes a softmax over the picked experts' logits: their weights sum to 1 too.
        let renormalize =
            matches!(self.model_type, Family::Mixtral | Family::GptOss) || self.norm_topk_prob.unwrap_or(false);
        Some(Experts { experts: self.num_experts?, active: self.num_experts_per_tok?, width, renormalize })
    }

    /// RoPE's inverse frequencies, one per pair of the head's dimensions, with Llama 3.1's
    /// scaling where the config sets it (transformers' `_compute_llama3_parameters`).
    pub fn inv_freq(&self) -> Vec<f64> {
        let d = self.head_dim();
        let plain = (0..d / 2).map(|i| 1.0 / self.rope_theta.powf((2 * i) as f64 / d as f64));
        let Some(r) = &self.rope_scaling else { return plain.collect() };
        let old = r.original_max_position_embeddings as f64;
        let (low_wavelen, high_wavelen) = (old / r.low_freq_factor, old / r.high_freq_factor);
        plain
            .map(|f| {
                let wavelen = 2.0 * std::f64::consts::PI / f;
                if wavelen < high_wavelen {
                    f
                } else if wavelen > low_wavelen {
                    f / r.factor
                } else {
                    let smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
                    (1.0 - smooth) * f / r.factor + smooth * f
                }
            })
            .collect()
    }

    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_b_layout() {
        let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
        assert_eq!(cfg.head_dim(), 128);
        assert_eq!(cfg.gqa_group(), 7);
        assert_eq!(cfg.kv_dim(), 512);
        let specs = cfg.tensor_specs();
        assert_eq!(specs.len(), 339, "339 tensors, as the real checkpoint");
        assert_eq!(specs[0].name, "model.embed_tokens.weight");
        assert_eq!(specs.last().unwrap().name, "lm_head.weight");
    }

    /// The published parameter counts, written by hand from each model card or its safetensors
    /// index (`total_size` / 2 for a BF16 checkpoint), against the layout the config implies.
    #[test]
    fn published_parameter_counts() {
        for (preset, published) in [
            ("qwen2.5-7b", 7_615_616_512usize),
            ("qwen3-8b", 8_190_735_360),
            ("qwen3-14b", 14_768_307_200),
            ("llama-2-7b", 6_738_415_616),
            ("llama-2-70b", 68_976_648_192),
            ("llama-3.1-8b", 8_030_261_248),
            ("mistral-7b", 7_248_023_552),
            ("mistral-7b-v0.1", 7_241_732_096),
            ("qwen3-30b-a3b", 30_532_122_624),
            ("mixtral-8x7b", 46_702_792_704),
        ] {
            assert_eq!(DecoderConfig::preset(preset).unwrap().param_count(), published, "{preset}");
        }
    }

    /// gpt-oss-20b: the model card's 20.91B parameters and 3.61B active ones (the card counts
    /// the output layer but not the embedding as active); even layers windowed (128 positions),
    /// as layer_types and llama.cpp's pattern of 2 say; the lab's decoder refuses it by name.
    #[test]
    fn gpt_oss_counts_windows_and_refusal() {
        let cfg = DecoderConfig::preset("gpt-oss-20b").unwrap();
        let billions = |n: usize| (n as f64 / 1e7).round() / 100.0;
        assert_eq!(billions(cfg.param_count()), 20.91);
        let embedding = cfg.vocab_size * cfg.hidden_size;
        assert_eq!(billions(cfg.active_param_count() - embedding), 3.61);
        let windowed: Vec<usize> = (0..24).filter(|&il| cfg.is_swa(il)).collect();
        assert_eq!(windowed, (0..24).step_by(2).collect::<Vec<_>>());
        let mut unlisted = cfg.clone();
        unlisted.layer_types = None;
        assert!((0..24).all(|il| unlisted.is_swa(il) == cfg.is_swa(il)));
        assert_eq!(cfg.experts().map(|e| (e.experts, e.active, e.width)), Some((32, 4, 2880)));
        assert!(cfg.computed().unwrap_err().to_string().contains("gpt_oss"));
        // What llama.cpp's gpt-oss cannot run is refused by name.
        let json = include_str!("../../../data/models/gpt-oss-20b.json");
        for (field, value) in [("swiglu_limit", "8.0"), ("attention_bias", "false"), ("experts_per_token", "2")] {
            let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
            v[field] = serde_json::from_str(value).unwrap();
            let e = DecoderConfig::from_json(&v.to_string(), "t").unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["quantization_config"]["quant_method"] = "gptq".into();
        assert!(DecoderConfig::from_json(&v.to_string(), "t").unwrap_err().to_string().contains("quantization_config"));
        let qwen = include_str!("../../../data/models/tiny.json");
        let mut v: serde_json::Value = serde_json::from_str(qwen).unwrap();
        v["swiglu_limit"] = 7.0.into();
        assert!(DecoderConfig::from_json(&v.to_string(), "t").unwrap_err().to_string().contains("gpt-oss"));
    }

    /// Gemma 3: every sixth layer global (5, 11, …, 47 of 48), four norms a layer, heads of 256
    /// wider than hidden / heads; `layer_types` written out gives the same layers. The lab's
    /// decoder refuses it by name.
    #[test]
    fn gemma3_windows_norms_and_refusal() {
        let cfg = DecoderConfig::preset("gemma-3-12b").unwrap();
        let global: Vec<usize> = (0..48).filter(|&il| !cfg.is_swa(il)).collect();
        assert_eq!(global, vec![5, 11, 17, 23, 29, 35, 41, 47]);
        assert_eq!((cfg.head_dim(), cfg.q_dim(), cfg.hidden_size), (256, 4096, 3840));
        let names: Vec<String> = cfg.tensor_specs().into_iter().map(|s| s.name).collect();
        for n in ["pre_feedforward_layernorm", "post_feedforward_layernorm", "self_attn.q_norm"] {
            assert!(names.contains(&format!("model.layers.0.{n}.weight")), "{n}");
        }
        assert_eq!(names.len(), 1 + 48 * 13 + 1, "embed, 13 a layer, norm; the head tied");
        let mut json: serde_json::Value =
            serde_json::from_str(PRESETS.iter().find(|(n, _)| *n == "gemma-3-12b").unwrap().1).unwrap();
        let types: Vec<&str> =
            (0..48).map(|il| if cfg.is_swa(il) { "sliding_attention" } else { "full_attention" }).collect();
        json["layer_types"] = serde_json::json!(types);
        json.as_object_mut().unwrap().remove("sliding_window_pattern");
        let listed = DecoderConfig::from_json(&json.to_string(), "listed").unwrap();
        assert!((0..48).all(|il| listed.is_swa(il) == cfg.is_swa(il)));
        let e = cfg.computed().unwrap_err().to_string();
        assert!(e.contains("gemma3_text") && e.contains("--engine llama.cpp"), "{e}");
        assert!(DecoderConfig::preset("qwen2.5-7b").unwrap().computed().is_ok());
        // Soft-capping, and Gemma's fields on another family, are refused by name.
        json["final_logit_softcapping"] = serde_json::json!(30.0);
        let e = DecoderConfig::from_json(&json.to_string(), "capped").unwrap_err().to_string();
        assert!(e.contains("final_logit_softcapping"), "{e}");
        let qwen = serde_json::json!({"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
            "rope_theta": 1e6, "sliding_window_pattern": 6});
        let e = DecoderConfig::from_json(&qwen.to_string(), "qwen").unwrap_err().to_string();
        assert!(e.contains("sliding_window_pattern"), "{e}");
    }

    /// Active parameters per token: Qwen3-30B-A3B's card says 3.3B, Mixtral's 12.9B.
    #[test]
    fn active_parameters_of_the_mixtures() {
        let q = DecoderConfig::preset("qwen3-30b-a3b").unwrap();
        // 8 of 128 experts of 3 × 2048 × 768 in each of 48 layers
        assert_eq!(q.active_param_count(), 30_532_122_624 - 120 * 3 * 2048 * 768 * 48);
        assert!((3.3e9..3.4e9).contains(&(q.active_param_count() as f64)));
        let m = DecoderConfig::preset("mixtral-8x7b").unwrap();
        assert_eq!((m.active_param_count() as f64 / 1e8).round(), 129.0);
        assert_eq!(DecoderConfig::preset("qwen3-8b").unwrap().active_param_count(), 8_190_735_360);
    }

    #[test]
    fn family_parts_in_the_layout() {
        let names = |p: &str| -> Vec<String> {
            DecoderConfig::preset(p).unwrap().tensor_specs().into_iter().map(|s| s.name).collect()
        };
        let qwen3 = names("qwen3-8b");
        assert!(qwen3.contains(&"model.layers.0.self_attn.q_norm.weight".to_string()));
        assert!(!qwen3.iter().any(|n| n.ends_with(".bias")));
        let llama = names("llama-2-7b");
        assert_eq!(llama.len(), 2 + 32 * 9 + 1, "embed, 9 a layer, norm, lm_head");
        let q06 = DecoderConfig::from_json(
            &serde_json::json!({"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 1024, "intermediate_size": 3072,
                "num_hidden_layers": 1, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": true})
            .to_string(),
            "x",
        )
        .unwrap();
        let q_proj = &q06.tensor_specs()[1];
        assert_eq!(
            (q_proj.name.as_str(), q_proj.shape.clone()),
            ("model.layers.0.self_attn.q_proj.weight", vec![2048, 1024])
        );
    }

    #[test]
    fn fields_not_implemented_are_refused_by_name() {
        let base = serde_json::to_value(DecoderConfig::preset("tiny-llama").unwrap()).unwrap();
        for (field, value, said) in [
            ("rope_scaling", serde_json::json!({"rope_type": "yarn", "factor": 4.0}), "rope_scaling"),
            ("attention_bias", serde_json::json!(true), "attention_bias"),
            ("mlp_bias", serde_json::json!(true), "mlp_bias"),
            ("num_experts", serde_json::json!(8), "num_experts"),
            ("shared_expert_intermediate_size", serde_json::json!(64), "shared_expert_intermediate_size"),
            ("model_type", serde_json::json!("gemma3"), "gemma3"),
        ] {
            let mut v = base.clone();
            v[field] = value;
            let err = DecoderConfig::from_json(&v.to_string(), "x").unwrap_err().to_string();
            assert!(err.contains(said), "{field}: {err}");
        }
    }

    /// transformers' llama3 RoPE: wavelengths under 8192 / 4 kept, over 8192 / 1 divided by 8.
    #[test]
    fn llama3_rope_scaling() {
        let cfg = DecoderConfig::preset("llama-3.1-8b").unwrap();
        let plain = DecoderConfig { rope_scaling: None, ..cfg.clone() }.inv_freq();
        let scaled = cfg.inv_freq();
        assert_eq!(scaled[0], plain[0], "the fastest pair is kept");
        assert!((scaled[63] - plain[63] / 8.0).abs() < 1e-18, "the slowest is slowed 8 ×");
        let mid = scaled.iter().zip(&plain).filter(|(s, p)| *s < *p && **s > **p / 8.0).count();
        assert!(mid > 0, "a blended band");
    }

    #[test]
    fn transformers5_rope_parameters() {
        let mut v = serde_json::to_value(DecoderConfig::preset("tiny").unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("rope_theta");
        let err = DecoderConfig::from_json(&v.to_string(), "x").unwrap_err().to_string();
        assert!(err.contains("missing field `rope_theta`"), "{err}");
        v["rope_parameters"] = serde_json::json!({"rope_theta": 5e5, "rope_type": "default"});
        assert_eq!(DecoderConfig::from_json(&v.to_string(), "x").unwrap().rope_theta, 5e5);
    }

    #[test]
    fn eos_forms() {
        let mut cfg = DecoderConfig::preset("tiny").unwrap();
        cfg.eos_token_id = Some(serde_json::json!([5, 7]));
        assert_eq!(cfg.eos_ids(), vec![5, 7]);
        cfg.eos_token_id = Some(serde_json::json!(9));
        assert_eq!(cfg.eos_ids(), vec![9]);
    }
}
