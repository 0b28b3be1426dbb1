//! The commands that are not stages: `generate` (the quickest check that a model loaded right),
//! `quantize` (write a Q4 GGUF) and `info` (device, cards, presets).

use crate::error::{LabError, Result};
use crate::hw::{self, Card};
use crate::memory::{fmt_bytes, guarded, MemoryProbe};
use crate::model::{self, GenerateConfig, ModelSource, Precision, Qwen2Config};
use crate::session::{default_model, SessionArgs};
use std::path::Path;

#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    #[arg(long, value_enum, default_value_t = Precision::Bf16)]
    pub precision: Precision,
    #[arg(long, default_value = "显存管理是高性能计算的核心,")]
    pub prompt: String,
    /// Token ids instead of a prompt (comma separated)
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// Sampling temperature (default: greedy)
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Stop at the end-of-sequence token
    #[arg(long)]
    pub stop_at_eos: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Loads the model, generates, and returns what to print (text, or one JSON object).
pub fn generate(args: &SessionArgs, g: &GenerateArgs) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut probe = MemoryProbe::new(&device);
    if let Some(card) = args.card_for(&device, false)? {
        probe.emulate(&card)?;
    }
    let lm = guarded(&probe, "loading", || model::source::load(&source, &args.source_options(), g.precision, &device, &probe, None))?;
    let ids = match (&g.prompt_ids, &lm.tokenizer) {
        (Some(ids), _) => ids.clone(),
        (None, Some(t)) => t.encode(g.prompt.as_str(), false).map_err(|e| LabError::other(format!("tokenizer: {e}")))?.get_ids().to_vec(),
        (None, None) => {
            return Err(LabError::input("this model has no tokenizer: pass --tokenizer <tokenizer.json> or --prompt-ids 1,2,3"))
        }
    };
    if ids.is_empty() {
        return Err(LabError::input("the prompt has no tokens"));
    }
    let cfg = GenerateConfig {
        max_new_tokens: g.max_new_tokens,
        temperature: g.temperature,
        top_p: g.top_p,
        seed: args.seed,
        stop_at_eos: g.stop_at_eos,
    };
    let before = probe.snapshot("before");
    let out = guarded(&probe, "generating", || {
        model::generate::warmup(&lm.model, &ids)?;
        model::generate(&lm.model, &ids, &cfg)
    })?;
    let after = probe.snapshot("after");
    let text = lm.tokenizer.as_ref().and_then(|t| t.decode(&out.generated_ids, true).ok());
    if g.json {
        return Ok(serde_json::json!({
            "model": source.label(),
            "precision": g.precision.name(),
            "prompt_ids": out.prompt_ids,
            "generated_ids": out.generated_ids,
            "text": text,
            "prefill_tok_s": out.prefill_tok_s(),
            "decode_tok_s": out.decode_tok_s(),
            "allocated_bytes": after.allocated,
            "peak_bytes": after.peak,
        })
        .to_string());
    }
    let mut lines = vec![
        format!("model: {} ({}, {})", source.label(), g.precision, lm.describe),
        format!("prompt ids ({}): {:?}", out.prompt_ids.len(), out.prompt_ids),
        format!("generated ids ({}): {:?}", out.generated_ids.len(), out.generated_ids),
    ];
    if let Some(t) = text {
        lines.push(format!("text: {t}"));
    }
    lines.push(format!(
        "prefill {:.1} tok/s, decode {:.2} tok/s; allocated {} (weights {}), peak {}",
        out.prefill_tok_s(),
        out.decode_tok_s(),
        fmt_bytes(after.allocated),
        fmt_bytes(before.allocated),
        fmt_bytes(after.peak)
    ));
    Ok(lines.join("\n"))
}

/// Writes a Q4 GGUF of the session's model to `to`; returns the summary lines.
pub fn quantize(args: &SessionArgs, to: &Path) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut opened = model::source::open(&source, &args.source_options())?;
    let n = opened.cfg.tensor_specs().len() as u64;
    let pb = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(n) };
    let rows = model::quantize::write_gguf(&opened.cfg, opened.weights.as_mut(), to, |_| pb.inc(1))?;
    pb.finish_and_clear();
    let total: u64 = rows.iter().map(|r| r.bytes).sum();
    let mut lines = vec![format!("wrote {} ({} tensors, {})", to.display(), rows.len(), fmt_bytes(total))];
    for (dtype, bytes) in model::quantize::bytes_by_dtype(&rows) {
        lines.push(format!("  {dtype:>5}: {}", fmt_bytes(bytes)));
    }
    Ok(lines.join("\n"))
}

/// The device, its memory summary, the card presets and the model presets.
pub fn info(args: &SessionArgs) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let probe = MemoryProbe::new(&device);
    let mut lines = vec![
        format!("device: {}", hw::describe(&device)),
        format!("cuda built in: {}", cfg!(feature = "cuda")),
        probe.summary(),
        "cards:".to_string(),
    ];
    for c in Card::presets() {
        lines.push(format!("  {:<9} {:>9.1} MiB  {:>6} GB/s  {}", c.name, c.total_mib, c.bandwidth_gbs.unwrap_or(f64::NAN), c.total_source));
    }
    lines.push("model presets (synthetic:<name>):".into());
    for (name, _) in model::config::PRESETS {
        lines.push(format!("  {:<13} {:>14} parameters", name, Qwen2Config::preset(name)?.param_count()));
    }
    Ok(lines.join("\n"))
}
