//! What the estimator and the planner start from: the model's config (a preset, a directory or a
//! GGUF's header), the workload, and the ledger's rows.

use crate::error::Result;
use crate::estimate;
use crate::estimate::fit::{self, Inference, Runtime};
use crate::model::attention::AttentionMode;
use crate::model::gguf::Gguf;
use crate::model::{self, DecoderConfig, Logits, Precision};
use crate::session::Session;
use crate::units::grouped;
use std::path::PathBuf;

/// The model's config: --config, else the session's model; and the GGUF file when the model is
/// one, whose tensors price its weights.
pub fn model_config(s: &mut Session, path: &Option<PathBuf>) -> Result<(DecoderConfig, Option<Gguf>)> {
    // A Hub GGUF file is fetched (or found in the cache) only when it is what gets priced.
    let source = if path.is_some() { s.source.clone() } else { s.source.fetched(&s.opts)? };
    match (path, &source) {
        (Some(p), _) => Ok((DecoderConfig::from_file(p)?, None)),
        // A GGUF's header is enough to price it, even when the file was cut short.
        (None, model::ModelSource::Gguf(file)) => {
            let (gguf, truncated) = Gguf::open_header(file)?;
            if let Some(e) = truncated {
                s.say(format!("{e}: priced from its header"));
            }
            Ok((gguf.config()?, Some(gguf)))
        }
        // A folder is priced from its config.json alone, as a user copies it from a model card:
        // the weights' bytes follow from the shapes and the precision asked for.
        (None, model::ModelSource::Dir(dir)) => Ok((model::source::dir_config(dir)?, None)),
        (None, source) => Ok((model::source::open(source, &s.opts)?.cfg, None)),
    }
}

/// A workload of the model: a GGUF's weights priced by its own tensors.
pub fn workload(
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    precision: Precision,
    seq: usize,
    batch: usize,
    logits: Logits,
) -> Inference {
    let stored = gguf.map(|g| g.loaded_bytes(cfg, precision));
    Inference { precision, seq, batch, logits, attention: AttentionMode::default(), stored }
}

pub fn ledger_rows(
    cfg: &DecoderConfig,
    w: &Inference,
    runtime: &Runtime,
    gguf: Option<&Gguf>,
) -> Vec<(&'static str, u64, String)> {
    let l = fit::ledger(cfg, w, runtime.bytes());
    let act = w.precision.act_dtype().size_in_bytes();
    let tokens = w.seq * w.batch;
    let weights = match gguf {
        Some(g) if w.precision.is_quantized() => {
            let by: Vec<String> = g.header.bytes_by_type().iter().map(|(t, n, b)| format!("{t} {n} × = {}", grouped(*b))).collect();
            format!("the file's tensors as stored, each by its type: {} B", by.join(", "))
        }
        _ if w.precision == Precision::Q4 => "Q4_K blocks per tensor, Q6_K for the output layer (the lab's plan, `ggml_dtype_for`)".into(),
        _ if w.precision.is_quantized() => {
            "llama.cpp's Q4_K_M mix per tensor (Q6_K for the output layer and the `use_more_bits` layers' attn_v and ffn_down), vectors in the compute dtype"
                .into()
        }
        _ => format!("{} parameters × {act} B", cfg.param_count()),
    };
    let mut rows = vec![("weights", l.weights, weights)];
    if l.workspace > 0 {
        rows.push((
            "workspace",
            l.workspace,
            format!("candle's quantized matmul keeps its inputs as Q8_1 for the longest prefill ({tokens} tokens), and a 16 MiB fixup buffer"),
        ));
    }
    rows.extend([
        ("kv_cache", l.kv_cache, format!("{} B/token (2 × {} layers × {} KV heads × {} × {act} B) × {tokens} tokens", estimate::kv_bytes_per_token(cfg, act), cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim())),
        ("logits", l.logits, format!("{} × {act} B × {} rows", cfg.vocab_size, if w.logits == Logits::All { tokens } else { w.batch })),
        ("transient", l.transient, format!("the prefill's busiest moment ({}), above what stays", l.peak_at)),
        ("pool", l.pool, format!("the pool maps 32 MiB chunks: {:.1} MiB kept beyond the live bytes per chunk of live allocations at the busiest moment (each counted up to a chunk; measured on an H200)", crate::memory::policy::POOL_SLACK as f64 / (1u64 << 20) as f64)),
        ("runtime", l.runtime, format!("CUDA context, cuBLAS and kernels outside the pool, measured on {}", runtime.gpu)),
        ("total", l.device(), "what the card must have".into()),
    ]);
    rows
}
