//! `vram-lab generate`: load a model and generate, the quickest check that it loaded right.

use crate::error::{LabError, Result};
use crate::hw::{self};
use crate::limits;
use crate::memory::{fmt_bytes, guarded, MemoryProbe};
use crate::model::{self, GenerateConfig, ModelSource, Precision};
use crate::session::{default_model, SessionArgs};

#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    #[arg(long, value_enum, default_value_t = Precision::Bf16)]
    pub precision: Precision,
    #[arg(long, default_value = "显存管理是高性能计算的核心,")]
    pub prompt: String,
    /// Token ids instead of a prompt (comma separated)
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    #[arg(long, default_value_t = 32, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub max_new_tokens: usize,
    /// Sampling temperature (default: greedy)
    #[arg(long, value_parser = limits::temperature)]
    pub temperature: Option<f64>,
    #[arg(long, value_parser = limits::unit_interval)]
    pub top_p: Option<f64>,
    /// Stop at the end-of-sequence token
    #[arg(long)]
    pub stop_at_eos: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
    /// The prompt as it is, without the model's chat template
    #[arg(long)]
    pub raw: bool,
}

/// Loads the model, generates, and returns what to print (text, or one JSON object).
pub fn generate(args: &SessionArgs, g: &GenerateArgs) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut probe = MemoryProbe::new(&device);
    if let Some(card) = args.card_for(&device, &source, false)?.0 {
        probe.emulate(&card)?;
    }
    let precision = g.precision.with_compute(args.compute);
    let lm = guarded(&probe, "loading", || {
        model::source::load(&source, &args.source_options(), precision, &device, &probe, None)
    })?;
    let ids = match (&g.prompt_ids, &lm.tokenizer) {
        (Some(ids), _) => ids.clone(),
        (None, Some(t)) => {
            // An instruct model reads its chat template around the user's text.
            let text = match (&lm.chat, g.raw) {
                (Some(chat), false) => chat.apply(&g.prompt),
                _ => g.prompt.clone(),
            };
            t.encode(text.as_str(), false).map_err(|e| LabError::other(format!("tokenizer: {e}")))?.get_ids().to_vec()
        }
        (None, None) => {
            return Err(LabError::input(
                "this model has no tokenizer: pass --tokenizer <tokenizer.json> or --prompt-ids 1,2,3",
            ))
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
    })
    .or_else(|e| match e {
        // Which weight made it: the source read again, tensor by tensor, on the CPU.
        LabError::NonFinite { step, .. } => {
            let mut opened = model::source::open(&source, &args.source_options())?;
            let weight = model::load::weights::first_non_finite(&opened.cfg, opened.weights.as_mut())?;
            Err(LabError::NonFinite { step, weight })
        }
        e => Err(e),
    })?;
    let after = probe.snapshot("after");
    let text = lm.tokenizer.as_ref().and_then(|t| t.decode(&out.generated_ids, true).ok());
    if g.json {
        return Ok(serde_json::json!({
            "model": source.label(),
            "precision": precision.name(),
            "chat_template": lm.chat.is_some() && !g.raw && g.prompt_ids.is_none(),
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
        format!("model: {} ({}, {})", source.label(), precision, lm.describe),
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
