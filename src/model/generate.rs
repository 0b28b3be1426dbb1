//! Prefill + decode loop with timings: the token generator behind `vram-lab generate` and the
//! anatomy stage.

use super::qwen2::{last_logits, Logits, Qwen2};
use crate::error::Result;
use candle_core::Tensor;
use candle_transformers::generation::LogitsProcessor;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    /// None = greedy (argmax).
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: u64,
    /// Stop at an end-of-sequence id; the report's runs ignore EOS to time a fixed count.
    pub stop_at_eos: bool,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        Self { max_new_tokens: 200, temperature: None, top_p: None, seed: 299792458, stop_at_eos: false }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    pub prefill_s: f64,
    pub decode_s: f64,
    /// KV cache bytes held at the end (the preallocated capacity).
    pub kv_cache_bytes: u64,
}

impl Generation {
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_s.max(1e-9)
    }

    /// Decode speed: tokens after the first (which the prefill produced) over decode time.
    pub fn decode_tok_s(&self) -> f64 {
        self.generated_ids.len().saturating_sub(1) as f64 / self.decode_s.max(1e-9)
    }
}

/// A short untimed run first, so module loading, cuBLAS handles and kernel compilation stay out of
/// the timed numbers.
pub fn warmup(model: &Qwen2, prompt: &[u32]) -> Result<()> {
    let cfg = GenerateConfig { max_new_tokens: 2, ..Default::default() };
    generate(model, &prompt[..prompt.len().min(8)], &cfg).map(|_| ())
}

/// Generates up to `cfg.max_new_tokens` after `prompt`.
pub fn generate(model: &Qwen2, prompt: &[u32], cfg: &GenerateConfig) -> Result<Generation> {
    generate_with(model, prompt, cfg, |_| {})
}

/// `generate`, calling `on_token` with the count of tokens generated so far (a progress bar).
pub fn generate_with(model: &Qwen2, prompt: &[u32], cfg: &GenerateConfig, mut on_token: impl FnMut(usize)) -> Result<Generation> {
    let device = model.device();
    let mut cache = model.new_cache(1, prompt.len() + cfg.max_new_tokens)?;
    let mut sampler = LogitsProcessor::new(cfg.seed, cfg.temperature, cfg.top_p);
    let eos = model.cfg.eos_ids();
    let mut out = Vec::with_capacity(cfg.max_new_tokens);

    let t0 = Instant::now();
    let ids = Tensor::new(prompt, device)?.unsqueeze(0)?;
    let logits = last_logits(&model.forward(&ids, &mut cache, Logits::Last)?)?;
    let mut next = sampler.sample(&logits.squeeze(0)?)?;
    device.synchronize()?;
    let prefill_s = t0.elapsed().as_secs_f64();
    out.push(next);

    let t1 = Instant::now();
    while out.len() < cfg.max_new_tokens && !(cfg.stop_at_eos && eos.contains(&next)) {
        let ids = Tensor::new(&[next], device)?.unsqueeze(0)?;
        let logits = last_logits(&model.forward(&ids, &mut cache, Logits::Last)?)?;
        next = sampler.sample(&logits.squeeze(0)?)?;
        out.push(next);
        on_token(out.len());
    }
    device.synchronize()?;
    let decode_s = t1.elapsed().as_secs_f64();
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        generated_ids: out,
        prefill_s,
        decode_s,
        kv_cache_bytes: cache.bytes(),
    })
}
