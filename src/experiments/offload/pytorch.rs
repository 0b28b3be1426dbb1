//! PyTorch's rows (full GPU and accelerate's offload with the same budget) from the reference
//! script in the same call, llama.cpp's (`llama-bench -ngl N`) likewise, and the report's and the
//! unified-memory article's figures.

use super::modes::ModeRow;
use crate::error::Result;
use crate::reference;

/// PyTorch rows from the reference script's JSON lines.
pub fn pytorch_rows(path: &std::path::Path) -> Result<Vec<ModeRow>> {
    let mut rows = Vec::new();
    for r in reference::pytorch_records(path, "offload")? {
        let case = r["case"].as_str().unwrap_or("");
        let (mode, note) = match case {
            "full_gpu" => ("pytorch full", "transformers generate, the model on the GPU".to_string()),
            "accelerate" => (
                "pytorch accelerate",
                format!(
                    "device_map=auto, max_memory {} on the GPU; {} GiB of weights in host RAM",
                    r["gpu_budget"].as_str().unwrap_or("?"),
                    r["offloaded_gib"]
                ),
            ),
            _ => continue,
        };
        rows.push(ModeRow {
            mode: mode.into(),
            run_by: "PyTorch (same GPU, same call)".into(),
            tok_s: r["tok_s"].as_f64(),
            note,
            ..Default::default()
        });
    }
    Ok(rows)
}

/// llama.cpp's rows from llama-bench's JSON lines: each decode test with some layers on the CPU
/// (`-ngl` below the model's layer count), in the precision `precision` (the GGUF's name).
pub fn llamacpp_rows(
    path: &std::path::Path,
    precision: crate::model::Precision,
    layers: usize,
) -> Result<Vec<ModeRow>> {
    Ok(reference::llamacpp_records(path)?
        .into_iter()
        .filter(|r| {
            r.precision == Some(precision) && r.n_gen > 0 && r.n_prompt == 0 && (r.n_gpu_layers as usize) < layers
        })
        .map(|r| ModeRow {
            mode: format!("llama.cpp -ngl {}", r.n_gpu_layers),
            run_by: "llama.cpp (same GPU and call)".into(),
            tok_s: Some(r.tok_s),
            note: format!(
                "{}: {} of {layers} layers on the GPU, the rest on the CPU; tg{}",
                r.label, r.n_gpu_layers, r.n_gen
            ),
            ..Default::default()
        })
        .collect())
}

/// The report's figure for a mode (only for the report's model) and the article's (GPU MiB, tok/s).
pub fn report_and_article(mode: &str, report_model: bool) -> (Option<f64>, Option<(f64, f64)>) {
    use reference::{report, unified_article as a};
    match mode {
        _ if !report_model && !mode.starts_with("managed") => (None, None),
        "full" | "pytorch full" => (Some(report::BF16_DECODE_TOK_S), None),
        // The report measured accelerate, not a streamer: its figure stands in its own category.
        "pytorch accelerate" => (Some(report::OFFLOAD_5GIB_TOK_S), None),
        "managed" => (None, Some(a::MANAGED)),
        "managed-prefer-cpu" => (None, Some(a::PREFER_CPU)),
        "managed-read-mostly" => (None, Some(a::READ_MOSTLY)),
        _ => (None, None),
    }
}
