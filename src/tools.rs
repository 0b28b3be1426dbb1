//! The commands that are not stages: `generate` (the quickest check that a model loaded right),
//! `quantize` (write a GGUF with one of llama.cpp's recipes), `info` (device, cards, presets) and `watch` (a process's GPU
//! memory over time, as the related article's pynvml monitor).

use crate::error::{LabError, Result};
use crate::hw::{self, Card};
use crate::limits::{self, grouped};
use crate::memory::{fmt_bytes, guarded, MemoryProbe};
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::writer::{self, Plan};
use crate::model::{self, GenerateConfig, ModelSource, Precision, Qwen2Config};
use crate::session::{default_model, SessionArgs};
use std::path::{Path, PathBuf};

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
    if let Some(card) = args.card_for(&device, false)? {
        probe.emulate(&card)?;
    }
    let precision = g.precision.with_compute(args.compute);
    let lm = guarded(&probe, "loading", || model::source::load(&source, &args.source_options(), precision, &device, &probe, None))?;
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

/// Writes a GGUF of the session's model to `to` with llama.cpp's recipe `ftype` (and the model's
/// tokenizer in its metadata, when it has one); returns the summary lines.
pub fn quantize(args: &SessionArgs, to: &Path, ftype: FileType) -> Result<String> {
    let device = hw::pick(&args.device)?;
    let source = ModelSource::parse(args.model.as_deref().unwrap_or(default_model(&device)))?;
    let mut opened = model::source::open(&source, &args.source_options())?;
    let n = opened.cfg.tensor_specs().len() as u64;
    let pb = if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(n) };
    let rows = writer::write_gguf(&opened.cfg, opened.weights.as_mut(), to, Plan::Llama(ftype), opened.tokenizer.as_ref(), |_| pb.inc(1))?;
    pb.finish_and_clear();
    let total: u64 = rows.iter().map(|r| r.bytes()).sum();
    let tok = if opened.tokenizer.is_some() { ", with its tokenizer" } else { "" };
    let mut lines = vec![format!("wrote {} ({ftype}: {} tensors, {} B = {} of tensor data{tok})", to.display(), rows.len(), grouped(total), fmt_bytes(total))];
    for (ty, n, bytes) in writer::bytes_by_type(&rows) {
        lines.push(format!("  {ty:>5}: {n:>4} tensors, {}", fmt_bytes(bytes)));
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

#[derive(clap::Args, Debug, Clone)]
pub struct WatchArgs {
    /// The process to watch (default: the command after --, else the whole GPU)
    #[arg(long)]
    pub pid: Option<u32>,
    /// The GPU's index, as nvidia-smi numbers them
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    #[arg(long, default_value_t = 200)]
    pub interval_ms: u64,
    /// Stop after this many seconds (default: when the process ends; Ctrl-C stops too)
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Write the samples here
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// A jump of the process's memory between two samples above this is flagged, MiB
    #[arg(long, default_value_t = 100.0)]
    pub threshold_mib: f64,
    /// A command to start and watch (after --)
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Samples a process's GPU memory (NVML; its RSS where there is no NVML) until it ends, the
/// duration passes or Ctrl-C; writes the CSV and returns the summary.
pub fn watch(args: &SessionArgs, w: &WatchArgs) -> Result<String> {
    use crate::memory::nvml::{Sampler, Source};
    if w.pid.is_none() && w.command.is_empty() && w.duration_s.is_none() {
        return Err(LabError::input("watch what? give --pid PID, a command after --, or --duration-s to watch the whole GPU"));
    }
    if w.interval_ms == 0 {
        return Err(LabError::input("--interval-ms must be above 0"));
    }
    let mut child = match w.command.split_first() {
        Some((prog, rest)) => Some(
            std::process::Command::new(prog).args(rest).spawn().map_err(|e| LabError::input(format!("cannot start `{prog}`: {e}")))?,
        ),
        None => None,
    };
    let pid = w.pid.or(child.as_ref().map(|c| c.id()));
    if let Some(p) = w.pid {
        if !Path::new(&format!("/proc/{p}")).exists() {
            return Err(LabError::input(format!("no process {p}")));
        }
    }
    let sampler = Sampler::new(pid, w.gpu);
    let what = match (pid, sampler.source) {
        (Some(p), Source::Nvml) => format!("process {p} on GPU {} (NVML)", w.gpu),
        (Some(p), Source::Rss) => format!("process {p}: no NVML here, its host RSS instead"),
        (None, Source::Nvml) => format!("GPU {} (NVML)", w.gpu),
        (None, Source::Rss) => return Err(LabError::Unsupported("no NVML here (no NVIDIA driver): give --pid or a command to watch its RSS".into())),
    };
    let bar = if args.silent { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new_spinner() };
    let mut samples = Vec::new();
    let mut status = None;
    loop {
        let s = sampler.sample();
        bar.set_message(format!(
            "{what}: {:.1} s, {} · device {}",
            s.t_s,
            s.process_used.map(fmt_bytes).unwrap_or_else(|| "—".into()),
            s.device_used.map(fmt_bytes).unwrap_or_else(|| "—".into())
        ));
        bar.tick();
        samples.push(s);
        if let Some(c) = child.as_mut() {
            if let Some(st) = c.try_wait()? {
                status = Some(st);
                break;
            }
        } else if let Some(p) = pid {
            if !Path::new(&format!("/proc/{p}")).exists() {
                break;
            }
        }
        if w.duration_s.is_some_and(|d| samples.last().map(|s| s.t_s).unwrap_or(0.0) >= d) || crate::session::stop_requested() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(w.interval_ms));
    }
    bar.finish_and_clear();
    if let Some(c) = child.as_mut() {
        if status.is_none() {
            let _ = c.kill();
            status = c.wait().ok();
        }
    }
    let used: Vec<Option<u64>> = samples.iter().map(|s| s.process_used.or(if pid.is_none() { s.device_used } else { None })).collect();
    let threshold = (w.threshold_mib * crate::memory::MIB) as i64;
    let jumps: Vec<(f64, i64)> = samples
        .windows(2)
        .zip(used.windows(2))
        .filter_map(|(s, u)| Some((s[1].t_s, u[1]? as i64 - u[0]? as i64)))
        .filter(|(_, d)| *d > threshold)
        .collect();
    if let Some(path) = &w.csv {
        let df = polars::df!(
            "t_s" => samples.iter().map(|s| s.t_s).collect::<Vec<_>>(),
            "pid" => samples.iter().map(|s| s.pid).collect::<Vec<_>>(),
            "process_used_mib" => samples.iter().map(|s| s.process_used.map(crate::memory::mib)).collect::<Vec<_>>(),
            "device_used_mib" => samples.iter().map(|s| s.device_used.map(crate::memory::mib)).collect::<Vec<_>>(),
            "device_total_mib" => samples.iter().map(|s| s.device_total.map(crate::memory::mib)).collect::<Vec<_>>(),
            "source" => samples.iter().map(|s| format!("{:?}", s.source).to_lowercase()).collect::<Vec<_>>(),
        )?;
        crate::report::manifest::write_csv(path, &df)?;
    }
    let peak = used.iter().flatten().max().copied();
    let first = used.iter().flatten().next().copied();
    let last = used.iter().flatten().last().copied();
    let mut lines = vec![format!("watched {what}: {} samples over {:.1} s", samples.len(), samples.last().map(|s| s.t_s).unwrap_or(0.0))];
    lines.push(format!(
        "first {}, last {}, peak {}",
        first.map(fmt_bytes).unwrap_or_else(|| "—".into()),
        last.map(fmt_bytes).unwrap_or_else(|| "—".into()),
        peak.map(fmt_bytes).unwrap_or_else(|| "—".into())
    ));
    lines.push(match jumps.len() {
        0 => format!("no jump above {} MiB between samples", w.threshold_mib),
        n => format!("{n} jumps above {} MiB, the first at {:.1} s (+{})", w.threshold_mib, jumps[0].0, fmt_bytes(jumps[0].1 as u64)),
    });
    if let Some(st) = status {
        lines.push(format!("the command ended: {st}"));
    }
    if let Some(path) = &w.csv {
        lines.push(format!("wrote {}", path.display()));
    }
    Ok(lines.join("\n"))
}
