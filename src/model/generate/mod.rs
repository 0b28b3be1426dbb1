//! Prefill + decode loop with timings: the token generator behind `vram-lab generate` and the
//! anatomy stage; the decoder that captures the static step (its inputs and kernels:
//! `model::layers::step`) as a CUDA graph and replays it (`graph`), sampling, and the logits of one
//! decoder beside a reference's on the same tokens (`parity`).

pub mod graph;
pub mod parity;
pub mod sampling;

pub use crate::model::layers::step::{OwnKernels, StepInputs, Tables};
pub use graph::StaticDecoder;

use crate::error::{LabError, Result};
use crate::limits::{check_count, MAX_NEW_TOKENS, MAX_SEQ};
use crate::model::decoder::{last_logits, Decoder, Logits};
use crate::model::generate::sampling::{check_finite, Sampler};
use candle_core::Tensor;
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
    /// Seconds to capture the decoding step as a CUDA graph (once per generation; 0 for the
    /// loop), outside `decode_s`, and the decoding steps it ran (their tokens are in
    /// `generated_ids`, not in `decode_s`).
    pub capture_s: f64,
    pub capture_steps: usize,
}

impl Generation {
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_ids.len() as f64 / self.prefill_s.max(1e-9)
    }

    /// Decode speed: tokens after the first (which the prefill produced) and the capture's over
    /// decode time.
    pub fn decode_tok_s(&self) -> f64 {
        self.generated_ids.len().saturating_sub(1 + self.capture_steps) as f64 / self.decode_s.max(1e-9)
    }
}

/// A short untimed run first, so module loading, cuBLAS handles and kernel compilation stay out of
/// the timed numbers.
pub fn warmup(model: &Decoder, prompt: &[u32]) -> Result<()> {
    let cfg = GenerateConfig { max_new_tokens: 2, ..Default::default() };
    generate(model, &prompt[..prompt.len().min(8)], &cfg).map(|_| ())
}

/// Generates up to `cfg.max_new_tokens` after `prompt`.
pub fn generate(model: &Decoder, prompt: &[u32], cfg: &GenerateConfig) -> Result<Generation> {
    generate_with(model, prompt, cfg, |_| {})
}

/// `generate`, calling `on_token` with the count of tokens generated so far (a progress bar).
/// Greedy decoding with every layer on a GPU runs the lab's fastest loop (`generate_static`).
pub fn generate_with(
    model: &Decoder,
    prompt: &[u32],
    cfg: &GenerateConfig,
    mut on_token: impl FnMut(usize),
) -> Result<Generation> {
    check_request(model.cfg.vocab_size, prompt, cfg)?;
    // A tensor-parallel rank takes the static step when its sums can be captured with it (NCCL),
    // else the loop below (threads meeting on the host); a mixture takes the loop, its routing is
    // read on the host every layer.
    if cfg.temperature.is_none() && model.all_on_gpu() && model.sums_capturable() && model.cfg.experts().is_none() {
        return generate_static(model, prompt, cfg, on_token);
    }
    let device = model.device();
    let mut cache = model.new_cache(1, prompt.len() + cfg.max_new_tokens)?;
    let mut sampler = Sampler::new(cfg.seed, cfg.temperature.unwrap_or(1.0), cfg.top_p);
    // Greedy picks the id on the device: one u32 crosses PCIe per token, not the vocabulary's logits.
    let greedy = cfg.temperature.is_none();
    let mut step = 0usize;
    let mut pick = |pieces: &[Tensor]| -> Result<u32> {
        let logits = last_logits(pieces)?;
        check_finite(&logits, step)?;
        step += 1;
        if greedy {
            Ok(argmax(&logits)?[0])
        } else {
            Ok(sampler.sample(&logits.squeeze(0)?)?)
        }
    };
    let eos = model.cfg.eos_ids();
    let mut out = Vec::with_capacity(cfg.max_new_tokens);

    let t0 = Instant::now();
    let ids = Tensor::new(prompt, device)?.unsqueeze(0)?;
    let logits = model.forward(&ids, &mut cache, Logits::Last)?;
    let mut next = pick(&logits)?;
    device.synchronize()?;
    let prefill_s = t0.elapsed().as_secs_f64();
    out.push(next);

    let t1 = Instant::now();
    while out.len() < cfg.max_new_tokens && !(cfg.stop_at_eos && eos.contains(&next)) {
        let ids = Tensor::new(&[next], device)?.unsqueeze(0)?;
        let logits = model.forward(&ids, &mut cache, Logits::Last)?;
        next = pick(&logits)?;
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
        capture_s: 0.0,
        capture_steps: 0,
    })
}

/// What a generation asks for, checked on the host before any kernel runs: a non-empty prompt of
/// ids inside the vocabulary (on a GPU an id past it trips the embedding kernel's device-side
/// assert, which poisons the CUDA context for the rest of the process), and 1 to
/// `limits::MAX_NEW_TOKENS` new tokens.
pub fn check_request(vocab: usize, prompt: &[u32], cfg: &GenerateConfig) -> Result<()> {
    if prompt.is_empty() {
        return Err(LabError::input("the prompt has no tokens"));
    }
    if let Some(&id) = prompt.iter().find(|&&id| id as usize >= vocab) {
        return Err(LabError::TokenOutOfVocab { id: id as u64, vocab });
    }
    check_count("max_new_tokens", cfg.max_new_tokens, MAX_NEW_TOKENS)?;
    check_count("prompt + new tokens", prompt.len() + cfg.max_new_tokens, MAX_SEQ)?;
    Ok(())
}

/// Greedy generation through the static decoder (`graph.rs`) with the lab's kernels: the step
/// captured once as a CUDA graph and replayed, one launch per token (the speed stage's `own`
/// variant). The prefill is the model's forward, as in the loop, so its memory is what stages
/// 1-2 measured; the cache holds the same prompt + new tokens.
fn generate_static(
    model: &Decoder,
    prompt: &[u32],
    cfg: &GenerateConfig,
    mut on_token: impl FnMut(usize),
) -> Result<Generation> {
    let eos = model.cfg.eos_ids();
    let done = |out: &[u32]| {
        out.len() >= cfg.max_new_tokens || (cfg.stop_at_eos && out.last().is_some_and(|id| eos.contains(id)))
    };
    let t0 = Instant::now();
    let ids = Tensor::new(prompt, model.device())?.unsqueeze(0)?;
    let mut dec = crate::model::generate::StaticDecoder::prefill(
        model,
        &ids,
        prompt.len() + cfg.max_new_tokens,
        crate::model::generate::OwnKernels::All,
    )?;
    let mut out = dec.ids()?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut capture_steps = 0;
    if !done(&out) && dec.capture()? {
        // The capture's warm-up step decoded a token.
        capture_steps = 1;
        out.extend(dec.ids()?);
        on_token(out.len());
    }
    let capture_s = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    while !done(&out) {
        dec.advance()?;
        out.extend(dec.ids()?);
        on_token(out.len());
    }
    let decode_s = t2.elapsed().as_secs_f64();
    Ok(Generation {
        prompt_ids: prompt.to_vec(),
        generated_ids: out,
        prefill_s,
        decode_s,
        kv_cache_bytes: dec.cache_bytes(),
        capture_s,
        capture_steps,
    })
}

/// The greedy ids of `logits` ([batch, vocab]), picked on their device.
pub fn argmax(logits: &Tensor) -> Result<Vec<u32>> {
    Ok(logits.argmax(candle_core::D::Minus1)?.to_vec1::<u32>()?)
}

/// One timed batch-1 or batched greedy decode: the prefill, then each step's time to issue its
/// kernels (the forward returning) and to finish (the picked ids read back).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DecodeTiming {
    pub batch: usize,
    pub prompt: usize,
    pub prefill_s: f64,
    /// Seconds from a step's start to its forward returning: the host's share.
    pub issue_s: Vec<f64>,
    /// Seconds from a step's start to its ids on the host.
    pub step_s: Vec<f64>,
    /// The first sequence's ids, the prefill's first: what two loops must agree on.
    pub ids: Vec<u32>,
}

impl DecodeTiming {
    /// Median seconds per step.
    pub fn step_median_s(&self) -> f64 {
        median(&self.step_s)
    }

    pub fn issue_median_s(&self) -> f64 {
        median(&self.issue_s)
    }

    /// Tokens per second over every sequence of the batch, at the median step.
    pub fn tok_s(&self) -> f64 {
        self.batch as f64 / self.step_median_s().max(1e-12)
    }
}

/// The median of `v` (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// `batch` sequences of `prompt` seeded ids prefilled, then `steps` greedy steps, each timed.
pub fn time_decode(model: &Decoder, batch: usize, prompt: usize, steps: usize, seed: u64) -> Result<DecodeTiming> {
    let device = model.device();
    let ids = seeded_ids(batch * prompt, model.cfg.vocab_size, seed);
    let mut cache = model.new_cache(batch, prompt + steps + 1)?;
    device.synchronize()?;
    let t0 = Instant::now();
    let ids = Tensor::from_vec(ids, (batch, prompt), device)?;
    let mut next = argmax(&last_logits(&model.forward(&ids, &mut cache, Logits::Last)?)?)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut t = DecodeTiming { batch, prompt, prefill_s, ids: vec![next[0]], ..Default::default() };
    for _ in 0..steps {
        let start = Instant::now();
        let ids = Tensor::from_vec(next, (batch, 1), device)?;
        let pieces = model.forward(&ids, &mut cache, Logits::Last)?;
        t.issue_s.push(start.elapsed().as_secs_f64());
        next = argmax(&last_logits(&pieces)?)?;
        t.step_s.push(start.elapsed().as_secs_f64());
        t.ids.push(next[0]);
    }
    Ok(t)
}

/// `time_decode` through the static decoder (`graph.rs`): on CUDA the step is captured once as
/// a graph and each token is one launch; elsewhere the static step runs kernel by kernel. The
/// first step after the prefill fills candle's parameter cache and is not timed.
/// `own`: which of the lab's kernels the step takes in place of candle's.
pub fn time_decode_graph(
    model: &Decoder,
    batch: usize,
    prompt: usize,
    steps: usize,
    seed: u64,
    own: crate::model::generate::OwnKernels,
) -> Result<DecodeTiming> {
    let device = model.device();
    let ids = Tensor::from_vec(seeded_ids(batch * prompt, model.cfg.vocab_size, seed), (batch, prompt), device)?;
    device.synchronize()?;
    let t0 = Instant::now();
    let mut dec = crate::model::generate::StaticDecoder::prefill(model, &ids, prompt + steps + 2, own)?;
    let first = dec.ids()?[0];
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut t = DecodeTiming { batch, prompt, prefill_s, ids: vec![first], ..Default::default() };
    if dec.capture()? {
        // The capture's warm-up ran one real step.
        t.ids.push(dec.ids()?[0]);
    }
    for _ in 0..steps {
        let start = Instant::now();
        dec.advance()?;
        t.issue_s.push(start.elapsed().as_secs_f64());
        let ids = dec.ids()?;
        t.step_s.push(start.elapsed().as_secs_f64());
        t.ids.push(ids[0]);
    }
    Ok(t)
}

/// Seconds of one prefill of `batch` × `seq` seeded ids from an empty cache (synchronised).
pub fn time_prefill(model: &Decoder, batch: usize, seq: usize, logits: Logits, seed: u64) -> Result<f64> {
    let device = model.device();
    let ids = seeded_ids(batch * seq, model.cfg.vocab_size, seed);
    let mut cache = model.new_cache(batch, seq)?;
    let ids = Tensor::from_vec(ids, (batch, seq), device)?;
    device.synchronize()?;
    let t0 = Instant::now();
    let out = model.forward(&ids, &mut cache, logits)?;
    device.synchronize()?;
    let s = t0.elapsed().as_secs_f64();
    drop(out);
    Ok(s)
}

/// `n` seeded ids below `vocab` (a synthetic model's prompt: its values do not change the time).
pub fn seeded_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    (0..n as u64).map(|i| ((i * 2654435761 + seed * 40503) % vocab as u64) as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_checked_before_any_kernel() {
        let cfg = GenerateConfig { max_new_tokens: 4, ..Default::default() };
        assert!(check_request(1024, &[0, 1023], &cfg).is_ok());
        let e = check_request(152_064, &[5, 999_999_999], &cfg).unwrap_err();
        assert!(matches!(e, LabError::TokenOutOfVocab { id: 999_999_999, vocab: 152_064 }), "{e}");
        assert_eq!(e.to_string(), "token id 999999999 is outside the vocabulary (152,064 tokens)");
        // The vocabulary's size itself is one past the last id.
        assert!(check_request(1024, &[1024], &cfg).is_err());
        assert!(check_request(1024, &[], &cfg).is_err());
        let none = GenerateConfig { max_new_tokens: 0, ..Default::default() };
        assert!(check_request(1024, &[1], &none).unwrap_err().to_string().contains("max_new_tokens = 0"));
    }
}
