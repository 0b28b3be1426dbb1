//! The Qwen2 configuration (config.json field names) and the tensor layout it implies.

use crate::error::{LabError, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Qwen2Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
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
    /// The size of one head where it is not hidden_size / num_attention_heads: a tensor-parallel
    /// rank computes a share of the heads at their full size (`model::parallel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
}

fn default_max_position_embeddings() -> usize {
    32768
}
fn default_hidden_act() -> String {
    "silu".into()
}

/// The config.json fields the lab reads or that change nothing it computes (training-only
/// settings, bookkeeping). Any other field is refused by name: a model that sets something the
/// lab does not implement would compute or price something else without a word.
const KNOWN_FIELDS: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "hidden_act",
    "bos_token_id",
    "eos_token_id",
    "torch_dtype",
    "dtype",
    "head_dim",
    "model_type",
    // checked below: only their off or default values are taken
    "rope_scaling",
    "rope_parameters",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "layer_types",
    "use_mrope",
    "quantization_config",
    // nothing the lab computes depends on these
    "architectures",
    "attention_dropout",
    "initializer_range",
    "transformers_version",
    "use_cache",
    "pad_token_id",
    "_name_or_path",
];

/// The first field of `obj` the lab does not implement, as a sentence naming it.
fn unimplemented_field(obj: &serde_json::Map<String, serde_json::Value>) -> std::result::Result<(), String> {
    use serde_json::Value;
    let off = |k: &str| matches!(obj.get(k), None | Some(Value::Null) | Some(Value::Bool(false)));
    if let Some(k) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(format!("field `{}` is not one the lab implements for a dense Qwen2 model", k.escape_debug()));
    }
    if !off("rope_scaling") {
        return Err(format!(
            "`rope_scaling` = {} is set: the lab computes plain RoPE (no YaRN, linear, dynamic or llama3 scaling)",
            obj["rope_scaling"]
        ));
    }
    if let Some(p) = obj.get("rope_parameters").filter(|p| !p.is_null()) {
        let plain = p.as_object().is_some_and(|m| {
            m.keys().all(|k| k == "rope_theta" || k == "rope_type") && m.get("rope_type").is_none_or(|t| t == "default")
        });
        if !plain {
            return Err(format!("`rope_parameters` = {p} asks for more than plain RoPE (rope_type default and rope_theta): the lab computes plain RoPE"));
        }
    }
    if !off("use_sliding_window") {
        return Err(
            "`use_sliding_window` is on: the lab computes full attention in every layer (no sliding window)".into()
        );
    }
    if let Some(types) = obj.get("layer_types").filter(|t| !t.is_null()) {
        if !types.as_array().is_some_and(|a| a.iter().all(|t| t == "full_attention")) {
            return Err("`layer_types` names a layer that is not full_attention: the lab computes full attention in every layer".into());
        }
    }
    if !off("use_mrope") {
        return Err("`use_mrope` is on: the lab computes one-dimensional RoPE (no multimodal RoPE)".into());
    }
    if !off("quantization_config") {
        return Err("`quantization_config` is set: the lab reads F32, F16 and BF16 checkpoints (GPTQ, AWQ and bitsandbytes weights are not priced or computed; use a GGUF)".into());
    }
    Ok(())
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
];

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

impl Qwen2Config {
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
        let bad = |e: &dyn std::fmt::Display| LabError::input(format!("{origin} is not a usable Qwen2 config: {e}"));
        let mut json: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(&e))?;
        // transformers 5 moves rope_theta into rope_parameters.
        if let Some(obj) = json.as_object_mut() {
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
        }
        if let Some(obj) = json.as_object() {
            // serde's own message for `-4` names no field: say which one.
            for key in [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "max_position_embeddings",
            ] {
                if let Some(v) = obj.get(key).filter(|v| !v.is_u64()) {
                    return Err(bad(&format!("{key} = {v} must be a whole number above 0")));
                }
            }
            // The formulas and the forward pass are dense Qwen2's: a mixture of experts priced
            // as dense would be wrong by the experts' count, so it is refused, not guessed.
            if let Some(t) = obj.get("model_type").and_then(|t| t.as_str()).filter(|t| *t != "qwen2") {
                return Err(bad(&format!(
                    "model_type `{t}`: the lab computes and prices dense Qwen2 models (model_type qwen2)"
                )));
            }
            if let Some(key) =
                ["num_experts", "num_local_experts", "moe_intermediate_size"].iter().find(|k| obj.contains_key(**k))
            {
                return Err(bad(&format!(
                    "`{key}` marks a mixture of experts: the lab computes and prices dense Qwen2 models"
                )));
            }
            unimplemented_field(obj).map_err(|e| bad(&e))?;
        }
        let cfg: Self = serde_json::from_value(json).map_err(|e| bad(&e))?;
        cfg.validate().map_err(|e| LabError::input(format!("{origin}: {e}")))?;
        Ok(cfg)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        use crate::limits::{MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_SEQ, MAX_VOCAB};
        use crate::units::grouped;
        // Ceilings far above any real model keep every byte count inside u64 (limits.rs).
        let counts = [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("hidden_size", self.hidden_size, MAX_HIDDEN),
            ("intermediate_size", self.intermediate_size, MAX_INTERMEDIATE),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_key_value_heads, MAX_HEADS),
            ("max_position_embeddings", self.max_position_embeddings, MAX_SEQ),
        ];
        for (name, value, max) in counts {
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
        if let Some(d) = self.head_dim.filter(|&d| d.checked_mul(self.num_attention_heads) != Some(self.hidden_size)) {
            // Only a tensor-parallel rank's config (made by the lab, never read) has fewer heads.
            return Err(format!(
                "head_dim {d} × num_attention_heads {} is not hidden_size {}",
                self.num_attention_heads, self.hidden_size
            ));
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
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
            return Err(format!("the head dimension {} must be even for RoPE", self.head_dim()));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0 && self.rms_norm_eps < 1.0) {
            return Err(format!("rms_norm_eps = {} must lie between 0 and 1", self.rms_norm_eps));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(format!("rope_theta = {} must be a finite number above 1", self.rope_theta));
        }
        if self.hidden_act != "silu" {
            return Err(format!("hidden_act `{}` is not supported (Qwen2 uses silu)", self.hidden_act));
        }
        if let Some(dtype) = &self.torch_dtype {
            // The dtypes a checkpoint's weights can be stored in and the lab can read; int8 or
            // fp8 checkpoints hold scales the lab does not apply.
            if !matches!(dtype.as_str(), "float32" | "float16" | "bfloat16" | "float" | "half") {
                return Err(format!("torch_dtype `{dtype}` is not one the lab computes (float32, float16, bfloat16)"));
            }
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Query heads that share one K/V head (grouped-query attention).
    pub fn gqa_group(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim()
    }

    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
            _ => vec![],
        }
    }

    /// Every weight tensor in module order (embedding, layers, final norm, lm_head), as HF names them.
    pub fn tensor_specs(&self) -> Vec<TensorSpec> {
        let (h, i, kv) = (self.hidden_size, self.intermediate_size, self.kv_dim());
        let spec = |name: String, shape: Vec<usize>| TensorSpec { name, shape };
        let mut out = vec![spec("model.embed_tokens.weight".into(), vec![self.vocab_size, h])];
        for l in 0..self.num_hidden_layers {
            let p = format!("model.layers.{l}");
            out.extend([
                spec(format!("{p}.self_attn.q_proj.weight"), vec![h, h]),
                spec(format!("{p}.self_attn.q_proj.bias"), vec![h]),
                spec(format!("{p}.self_attn.k_proj.weight"), vec![kv, h]),
                spec(format!("{p}.self_attn.k_proj.bias"), vec![kv]),
                spec(format!("{p}.self_attn.v_proj.weight"), vec![kv, h]),
                spec(format!("{p}.self_attn.v_proj.bias"), vec![kv]),
                spec(format!("{p}.self_attn.o_proj.weight"), vec![h, h]),
                spec(format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                spec(format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                spec(format!("{p}.mlp.down_proj.weight"), vec![h, i]),
                spec(format!("{p}.input_layernorm.weight"), vec![h]),
                spec(format!("{p}.post_attention_layernorm.weight"), vec![h]),
            ]);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_b_layout() {
        let cfg = Qwen2Config::preset("qwen2.5-7b").unwrap();
        assert_eq!(cfg.head_dim(), 128);
        assert_eq!(cfg.gqa_group(), 7);
        assert_eq!(cfg.kv_dim(), 512);
        let specs = cfg.tensor_specs();
        assert_eq!(specs.len(), 339, "339 tensors, as the real checkpoint");
        assert_eq!(specs[0].name, "model.embed_tokens.weight");
        assert_eq!(specs.last().unwrap().name, "lm_head.weight");
    }

    #[test]
    fn transformers5_rope_parameters() {
        let mut v = serde_json::to_value(Qwen2Config::preset("tiny").unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("rope_theta");
        let err = Qwen2Config::from_json(&v.to_string(), "x").unwrap_err().to_string();
        assert!(err.contains("missing field `rope_theta`"), "{err}");
        v["rope_parameters"] = serde_json::json!({"rope_theta": 5e5, "rope_type": "default"});
        assert_eq!(Qwen2Config::from_json(&v.to_string(), "x").unwrap().rope_theta, 5e5);
    }

    #[test]
    fn eos_forms() {
        let mut cfg = Qwen2Config::preset("tiny").unwrap();
        cfg.eos_token_id = Some(serde_json::json!([5, 7]));
        assert_eq!(cfg.eos_ids(), vec![5, 7]);
        cfg.eos_token_id = Some(serde_json::json!(9));
        assert_eq!(cfg.eos_ids(), vec![9]);
    }
}
