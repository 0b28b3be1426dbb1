//! `vram-lab quantize`: write a GGUF of the session's model with one of llama.cpp's recipes.

use crate::error::Result;
use crate::hw::{self};
use crate::memory::fmt_bytes;
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::writer::{self, FileTypes};
use crate::model::{self, ModelSource};
use crate::session::{default_model, SessionArgs};
use crate::units::grouped;
use std::path::Path;

/// Writes a GGUF of the session's model to `to` with llama.cpp's recipe `ftype` (and the model's
/// tokenizer in its metadata, when it has one); returns the summary lines.
pub fn quantize(args: &SessionArgs, to: &Path, ftype: FileType) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut opened = model::source::open(&source, &args.source_options())?;
    // llama.cpp loads no GGUF without a vocabulary: a synthetic model of a real vocabulary smaller
    // than Qwen2.5's (Mistral, Mixtral, Llama 2: 32,000 tokens) gets Qwen2.5's tokenizer cut to it.
    // The tiny test presets stay without one.
    if opened.tokenizer.is_none() && matches!(source, ModelSource::Synthetic(_)) && opened.cfg.vocab_size >= 32_000 {
        opened.tokenizer = Some(crate::model::load::tokenizer::qwen25()?);
    }
    let n = opened.cfg.tensor_specs().len() as u64;
    let pb = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(n) };
    let rows = writer::write_gguf(
        &opened.cfg,
        opened.weights.as_mut(),
        to,
        FileTypes::Llama(ftype),
        opened.tokenizer.as_ref(),
        |_| pb.inc(1),
    )?;
    pb.finish_and_clear();
    let total: u64 = rows.iter().map(|r| r.bytes()).sum();
    let tok = if opened.tokenizer.is_some() { ", with its tokenizer" } else { "" };
    let mut lines = vec![format!(
        "wrote {} ({ftype}: {} tensors, {} B = {} of tensor data{tok})",
        to.display(),
        rows.len(),
        grouped(total),
        fmt_bytes(total)
    )];
    for (ty, n, bytes) in writer::bytes_by_type(&rows) {
        lines.push(format!("  {ty:>5}: {n:>4} tensors, {}", fmt_bytes(bytes)));
    }
    Ok(lines.join("\n"))
}
