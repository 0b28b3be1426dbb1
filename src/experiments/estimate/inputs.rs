//! What the estimator and the planner start from: the model's config (a preset, a directory or a
//! GGUF's header), the workload, and the ledger's rows.

use crate::error::Result;
use crate::estimate;
use crate::estimate::fit::{self, Inference, Runtime};
use crate::memory::policy::Allocator;
use crate::model::gguf::Gguf;
use crate::model::layers::attention::AttentionMode;
use crate::model::load::hub::headers;
use crate::model::{self, DecoderConfig, Logits, Precision};
use crate::session::Session;
use crate::units::{fmt_bytes, grouped};
use std::path::{Path, PathBuf};

/// The model's config: --config, else the session's model; and the GGUF file when the model is
/// one, whose tensors price its weights. A Hub model is priced from its headers alone (Range
/// requests; `model::load::hub::headers`), never downloaded.
pub fn model_config(s: &mut Session, path: &Option<PathBuf>) -> Result<(DecoderConfig, Option<Gguf>)> {
    if let Some(p) = path {
        return Ok((DecoderConfig::from_file(p)?, None));
    }
    let cache = s.opts.cache_dir.clone();
    match s.source.clone() {
        model::ModelSource::HubFile { repo, file } => {
            let (header, got) = headers::gguf_header_from_hub(&repo, &file, cache.as_deref())?;
            s.say(fetched_line(&format!("{repo}:{file}"), "its header", got));
            let gguf = Gguf::from_header(header)?;
            Ok((gguf.config()?, Some(gguf)))
        }
        model::ModelSource::Hub(repo) => {
            let (config, shards, got) = headers::safetensors_headers_from_hub(&repo, cache.as_deref())?;
            let dir = config.parent().unwrap_or(Path::new("."));
            let cfg = model::source::dir_config(dir)?;
            let params: u128 = shards.iter().map(|h| h.params()).sum();
            let dtypes: std::collections::BTreeSet<&str> =
                shards.iter().flat_map(|h| h.tensors.iter().map(|(_, d, _)| d.as_str())).collect();
            let what = format!("config.json and the headers of {} safetensors file(s)", shards.len());
            s.say(fetched_line(&repo, &what, got));
            s.say(format!(
                "{repo}: the headers list {} parameters in {}; config.json implies {}",
                grouped_u128(params),
                dtypes.into_iter().collect::<Vec<_>>().join(", "),
                grouped(cfg.param_count() as u64)
            ));
            Ok((cfg, None))
        }
        // A GGUF's header is enough to price it, even when the file was cut short.
        model::ModelSource::Gguf(file) => {
            let (gguf, truncated) = Gguf::open_header(&file)?;
            if let Some(e) = truncated {
                s.say(format!("{e}: priced from its header"));
            }
            Ok((gguf.config()?, Some(gguf)))
        }
        // A folder is priced from its config.json alone, as a user copies it from a model card:
        // the weights' bytes follow from the shapes and the precision asked for.
        model::ModelSource::Dir(dir) => Ok((model::source::dir_config(&dir)?, None)),
        source => Ok((model::source::open(&source, &s.opts)?.cfg, None)),
    }
}

/// What sizing a Hub model fetched, beside the size of the files it priced.
fn fetched_line(model: &str, what: &str, got: headers::Fetched) -> String {
    let share = if got.of > 0 {
        format!(" ({:.4} % of them)", 100.0 * got.bytes as f64 / got.of as f64)
    } else {
        String::new()
    };
    format!(
        "{model}: priced from {what}: {} fetched by Range requests of {} in the files{share}",
        fmt_bytes(got.bytes),
        if got.of > 0 { fmt_bytes(got.of) } else { "an unknown size".into() }
    )
}

fn grouped_u128(n: u128) -> String {
    u64::try_from(n).map(grouped).unwrap_or_else(|_| n.to_string())
}

/// A workload of the model: a GGUF's weights priced by its own tensors.
pub fn workload(
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    precision: Precision,
    seq: usize,
    batch: usize,
    logits: Logits,
    allocator: Allocator,
) -> Inference {
    let stored = gguf.map(|g| g.loaded_bytes(cfg, precision));
    Inference { precision, seq, batch, logits, attention: AttentionMode::default(), stored, allocator }
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
        ("pool", l.pool, match w.allocator {
            Allocator::Pool => format!("the pool maps 32 MiB chunks: {:.1} MiB kept beyond the live bytes per chunk of live allocations at the busiest moment (each counted up to a chunk; measured on an H200)", crate::memory::policy::POOL_SLACK as f64 / (1u64 << 20) as f64),
            Allocator::Pages => "the page allocator maps 2 MiB pages: at most a partly filled page at each end of each live allocation at the busiest moment (4 MiB per chunk of them)".into(),
        }),
        ("runtime", l.runtime, format!("CUDA context, cuBLAS and kernels outside the pool, measured on {}", runtime.gpu)),
        ("total", l.device(), "what the card must have".into()),
    ]);
    rows
}
