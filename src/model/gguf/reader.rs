//! A GGUF file as a weight source: its header read once, each tensor read when loaded.

use crate::error::{cause, LabError, Result};
use crate::model::config::{DecoderConfig, Family, TensorSpec};
use crate::model::gguf::header::Header;
use crate::model::gguf::names::gguf_name;
use crate::model::gguf::permute;
use crate::model::load::weights::{check_shape, Weight, WeightSource};
use crate::model::precision::Precision;
use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::Device;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

/// A GGUF file as a weight source: its header read once, each tensor read when loaded.
pub struct Gguf {
    pub header: Header,
    /// None for a header fetched alone (`model::load::hub::headers`): priced, not loaded.
    file: Option<std::fs::File>,
}

impl Gguf {
    /// The file, whole: a truncated one is refused before any tensor is read.
    pub fn open(path: &Path) -> Result<Self> {
        let (gguf, truncated) = Self::open_header(path)?;
        match truncated {
            Some(e) => Err(e),
            None => Ok(gguf),
        }
    }

    /// The header alone (metadata and tensor infos), and whether the file is shorter than it says
    /// (`LabError::Truncated`): the estimator prices a file from its header even then.
    pub fn open_header(path: &Path) -> Result<(Self, Option<LabError>)> {
        let header = Header::read(path)?;
        header.check_types()?;
        let (file, _) = crate::paths::open_regular(path, u64::MAX, true)?;
        let truncated = header.truncated();
        Ok((Self { header, file: Some(file) }, truncated))
    }

    /// A header read without its file (the first bytes of a Hub file, by Range requests).
    pub fn from_header(header: Header) -> Result<Self> {
        header.check_types()?;
        Ok(Self { header, file: None })
    }

    fn path(&self) -> String {
        self.header.path.display().to_string()
    }

    /// `tokenizer.chat_template`, as llama.cpp's converter writes it.
    pub fn chat_template(&self) -> Option<String> {
        self.header.str("tokenizer.chat_template").map(str::to_string)
    }

    fn md_uint(&self, key: &str) -> Result<usize> {
        let v = self
            .header
            .uint(key)
            .ok_or_else(|| LabError::input(format!("{}: GGUF metadata has no integer {key}", self.path())))?;
        usize::try_from(v).map_err(|_| LabError::input(format!("{}: {key} = {v} is too large", self.path())))
    }

    /// The config from `<arch>.*` metadata (qwen2, qwen3, qwen3moe, llama — Llama, Mistral and,
    /// with experts, Mixtral —, gemma3, gpt-oss); the vocabulary size from the embedding's shape.
    pub fn config(&self) -> Result<DecoderConfig> {
        let h = &self.header;
        let arch = h
            .str("general.architecture")
            .ok_or_else(|| LabError::input(format!("{}: GGUF metadata has no general.architecture", self.path())))?;
        let experts = h.uint(&format!("{arch}.expert_count")).filter(|&n| n > 0);
        let family = match (arch, experts) {
            ("qwen2", None) => Family::Qwen2,
            ("qwen3", None) => Family::Qwen3,
            ("qwen3moe", Some(_)) => Family::Qwen3Moe,
            ("llama", None) => Family::Llama,
            ("llama", Some(_)) => Family::Mixtral,
            ("gemma3", None) => Family::Gemma3,
            ("gpt-oss", Some(_)) => Family::GptOss,
            _ => {
                return Err(LabError::input(format!(
                    "{}: architecture `{}`, the lab reads qwen2, qwen3, qwen3moe, llama, gemma3 and gpt-oss",
                    self.path(),
                    arch.escape_debug()
                )))
            }
        };
        let embd = h
            .tensor("token_embd.weight")
            .ok_or_else(|| LabError::input(format!("{}: no token_embd.weight", self.path())))?;
        let vocab = embd.shape().first().copied().unwrap_or(0);
        let key = |k: &str| format!("{arch}.{k}");
        let f = |k: &str| {
            h.float(&key(k))
                .ok_or_else(|| LabError::input(format!("{}: GGUF metadata has no number {}", self.path(), key(k))))
        };
        let heads = self.md_uint(&key("attention.head_count"))?;
        let hidden = self.md_uint(&key("embedding_length"))?;
        let head_dim = self.md_uint(&key("attention.key_length")).ok().filter(|&d| d * heads != hidden);
        let (num_experts, num_experts_per_tok, moe_intermediate_size) = match experts {
            None => (None, None, None),
            Some(n) => (
                Some(n as usize),
                Some(self.md_uint(&key("expert_used_count"))?),
                (family == Family::Qwen3Moe).then(|| self.md_uint(&key("expert_feed_forward_length"))).transpose()?,
            ),
        };
        let cfg = DecoderConfig {
            model_type: family,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: self.md_uint(&key("feed_forward_length"))?,
            num_hidden_layers: self.md_uint(&key("block_count"))?,
            num_attention_heads: heads,
            num_key_value_heads: self.md_uint(&key("attention.head_count_kv"))?,
            rms_norm_eps: f("attention.layer_norm_rms_epsilon")?,
            rope_theta: f("rope.freq_base").unwrap_or(10000.0),
            max_position_embeddings: self.md_uint(&key("context_length"))?,
            tie_word_embeddings: h.tensor("output.weight").is_none(),
            hidden_act: if family == Family::Gemma3 { "gelu_pytorch_tanh" } else { "silu" }.into(),
            bos_token_id: h.uint("tokenizer.ggml.bos_token_id").map(|v| v as u32),
            eos_token_id: h.uint("tokenizer.ggml.eos_token_id").map(|v| serde_json::json!(v)),
            torch_dtype: None,
            head_dim,
            // Llama 3.1's scaled frequencies travel as a tensor (rope_freqs.weight), read where it is computed.
            rope_scaling: None,
            // Gemma 3's and gpt-oss's window; a per-layer pattern other than llama.cpp's default
            // is refused (the lab does not read GGUF arrays beyond a tokenizer's).
            sliding_window: matches!(family, Family::Gemma3 | Family::GptOss)
                .then(|| self.md_uint(&key("attention.sliding_window")))
                .transpose()?,
            sliding_window_pattern: match h.get(&key("attention.sliding_window_pattern")) {
                None => None,
                Some(_) => Some(self.md_uint(&key("attention.sliding_window_pattern")).map_err(|_| {
                    LabError::input(format!(
                        "{}: {} is a list of layers; the lab reads a pattern of one number",
                        self.path(),
                        key("attention.sliding_window_pattern")
                    ))
                })?),
            },
            layer_types: None,
            num_experts,
            num_experts_per_tok,
            moe_intermediate_size,
            // llama.cpp's qwen3moe graph renormalises the picked experts' weights.
            norm_topk_prob: (family == Family::Qwen3Moe).then_some(true),
        };
        let json = serde_json::to_string(&cfg)?;
        DecoderConfig::from_json(&json, &self.path())
    }

    /// The bytes `cfg`'s weights take once loaded in `precision`, as `load` makes them: under Q4
    /// each block-quantized tensor as the file stores it and the rest in the activation dtype
    /// (F32, or BF16 for q4_k_m); dequantized to the
    /// precision's dtype otherwise.
    pub fn loaded_bytes(&self, cfg: &DecoderConfig, precision: Precision) -> u64 {
        let mut names: Vec<String> = cfg.tensor_specs().iter().map(|s| gguf_name(&s.name, cfg.model_type)).collect();
        // A mixture's experts map to one tensor a layer: counted once.
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        names
            .iter()
            .filter_map(|n| self.header.tensor(n))
            .map(|t| match (precision.dense_dtype(), t.ggml_type()) {
                (None, Some(ty)) if ty.is_block_quantized() => t.stored_bytes(),
                (dense, _) => t.values() * dense.unwrap_or(precision.act_dtype()).size_in_bytes() as u64,
            })
            .fold(0, u64::saturating_add)
    }

    /// The family whose names this file's tensors carry (only Gemma 3's and gpt-oss's differ).
    fn family(&self) -> Family {
        match self.header.str("general.architecture") {
            Some("gemma3") => Family::Gemma3,
            Some("gpt-oss") => Family::GptOss,
            _ => Family::Qwen2,
        }
    }

    /// The heads of `name` when its rows are in llama.cpp's RoPE order: a Llama file's q and k.
    fn permuted_heads(&self, name: &str) -> Result<Option<usize>> {
        if self.header.str("general.architecture") != Some("llama") {
            return Ok(None);
        }
        let key = if name.ends_with(".attn_q.weight") {
            "llama.attention.head_count"
        } else if name.ends_with(".attn_k.weight") {
            "llama.attention.head_count_kv"
        } else {
            return Ok(None);
        };
        Ok(Some(self.md_uint(key)?))
    }

    /// One tensor's bytes from the data section, as candle's quantized tensor on `device`.
    fn read(&mut self, name: &str, device: &Device) -> Result<candle_core::quantized::QTensor> {
        let path = self.path();
        let info =
            self.header.tensor(name).ok_or_else(|| LabError::input(format!("{path}: no tensor {name}")))?.clone();
        let ty =
            info.ggml_type().ok_or_else(|| LabError::input(format!("{path}: tensor {name} has an unknown type")))?;
        let dtype = ty.candle().ok_or_else(|| {
            LabError::input(format!("{path}: tensor {name} is {ty}: priced by `estimate`, but the lab computes F32, F16, BF16, Q4_0-Q8_0 and Q2_K-Q8_K only"))
        })?;
        let bytes = info.bytes().unwrap_or(u128::MAX);
        if bytes == 0 {
            return Err(LabError::input(format!("{path}: tensor {name} holds no values")));
        }
        let start = (self.header.data_offset as u128).saturating_add(info.offset as u128);
        if start.saturating_add(bytes) > self.header.file_len as u128 {
            return Err(LabError::Truncated {
                path,
                have: self.header.file_len,
                need: u64::try_from(start.saturating_add(bytes)).unwrap_or(u64::MAX),
            });
        }
        let mut raw = vec![0u8; bytes as usize];
        let file = self.file.as_mut().ok_or_else(|| {
            LabError::input(format!("{path}: only its header was fetched; download the file to load {name}"))
        })?;
        file.seek(SeekFrom::Start(start as u64))?;
        file.read_exact(&mut raw)?;
        // A Llama file's q and k rows are in llama.cpp's RoPE order (`permute`): back to the checkpoint's.
        if let Some(heads) = self.permuted_heads(name)? {
            let order = permute::inverse(&permute::file_to_checkpoint(info.shape()[0], heads)?);
            raw = permute::reorder_rows(&raw, &order)?;
        }
        qtensor_from_ggml(dtype, &raw, info.shape(), device)
            .map_err(|e| LabError::input(format!("{path}: tensor {name}: {}", cause(&e))))
    }
}

impl WeightSource for Gguf {
    fn load(&mut self, spec: &TensorSpec, precision: Precision, device: &Device) -> Result<Weight> {
        let name = gguf_name(&spec.name, self.family());
        // The header's shape first: nothing is read for a tensor the config does not expect.
        if let Some(info) = self.header.tensor(&name) {
            check_shape(&name, &info.shape(), &spec.shape)?;
        }
        let q = self.read(&name, device)?;
        let block_quantized = q.dtype().block_size() > 1;
        match precision.dense_dtype() {
            _ if precision.is_quantized() && block_quantized => Ok(Weight::Quant(Arc::new(q))),
            Some(dtype) => Ok(Weight::Dense(q.dequantize(device)?.to_dtype(dtype)?)),
            None => Ok(Weight::Dense(q.dequantize(device)?.to_dtype(precision.act_dtype())?)),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.header.tensor(&gguf_name(name, self.family())).is_some()
    }

    fn stored_bytes(&self, cfg: &DecoderConfig, precision: Precision) -> Option<u64> {
        Some(self.loaded_bytes(cfg, precision))
    }

    fn describe(&self) -> String {
        format!("gguf: {}", self.path())
    }
}
