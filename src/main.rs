//! The `vram-lab` command: one subcommand per stage, thin — parse, call the crate, print, save.

use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use vram_lab::error::{LabError, Result};
use vram_lab::experiments::{anatomy, Lab};
use vram_lab::memory::{host::CountingAlloc, Card, CardEmulation};
use vram_lab::model::{self, ModelSource, Precision, SourceOptions};
use vram_lab::report::{Env, OutputDir};

// Heap bytes counted, so CPU runs report allocated / peak exactly and can emulate a card.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

// Request sizes for CUDA OOMs (see memory/alloc_hook.rs).
vram_lab::cuda_alloc_hook!();

#[derive(Parser)]
#[command(name = "vram-lab", version, about = "GPU memory of LLM inference, taken apart byte by byte")]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Args, Clone)]
struct Common {
    /// auto (CUDA when built in and present), cpu, cuda or cuda:N
    #[arg(long, global = true, default_value = "auto")]
    device: String,
    /// Model: synthetic:<preset>, a directory (config.json + *.safetensors), a .gguf file, or a
    /// Hugging Face repo id. Default: synthetic:qwen2.5-7b on a GPU, synthetic:tiny on CPU.
    #[arg(long, global = true)]
    model: Option<String>,
    /// Emulate a smaller card: rtx4090, rtx3090, a4000, l40s, a100-40g, a100-80g, h100, h200 or a
    /// size such as 24GiB. Default for `lab` on a GPU: rtx4090, as the report.
    #[arg(long, global = true)]
    card: Option<String>,
    /// tokenizer.json (GGUF files and synthetic models carry none)
    #[arg(long, global = true)]
    tokenizer: Option<PathBuf>,
    /// hf-hub download cache (AutoDL: /root/autodl-tmp/hf); default $HF_HOME/hub
    #[arg(long, global = true, env = "VRAM_LAB_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Seed of synthetic weights and random prompts
    #[arg(long, global = true, default_value_t = 42)]
    seed: u64,
    /// Output folder (default out/<date>-<command>)
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// No progress bars
    #[arg(long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// The whole lab: every stage on the default model (the default command)
    Lab,
    /// Stage 1: load in BF16 / Q4 / F32, snapshot memory, generate, catch the OOM
    Anatomy {
        /// Precisions in order (the report runs F32 last)
        #[arg(long, value_delimiter = ',', default_value = "bf16,q4,f32")]
        precisions: Vec<String>,
        #[arg(long, default_value_t = 200)]
        max_new_tokens: usize,
    },
    /// Stage 2: the KV cache — prefill, decode and batch sweeps with a byte ledger, and the
    /// longest context that fits
    Kv {
        /// prefill, decode, batch or all
        #[arg(long, default_value = "all")]
        sweep: String,
        #[arg(long, default_value = "bf16")]
        precision: String,
        /// Prefill lengths (default: doubling from --start until OOM or --max)
        #[arg(long, value_delimiter = ',')]
        lengths: Option<Vec<usize>>,
        #[arg(long, default_value_t = 1024)]
        start: usize,
        #[arg(long, default_value_t = 131072)]
        max: usize,
        /// After the first OOM, bisect to the longest prefill that fits, to within this many tokens (0: no bisection)
        #[arg(long, default_value_t = 256)]
        resolution: usize,
        /// Keep logits of every position (as model(input_ids) in transformers) or the last only
        #[arg(long, default_value = "all")]
        logits: String,
        /// bounded (query chunks, GQA without copies) or naive (as stock candle-transformers)
        #[arg(long, default_value = "bounded")]
        attention: String,
        /// Decode sweep: fill the cache token by token up to this length
        #[arg(long, default_value_t = 4096)]
        decode_to: usize,
        /// Batch sweep: sequence length, and the largest batch tried
        #[arg(long, default_value_t = 1024)]
        seq: usize,
        #[arg(long, default_value_t = 256)]
        max_batch: usize,
    },
    /// Generate text: the quickest check that a model loaded correctly
    Generate {
        #[arg(long, default_value = "bf16")]
        precision: String,
        #[arg(long, default_value = "显存管理是高性能计算的核心,")]
        prompt: String,
        /// Token ids instead of a prompt (comma separated)
        #[arg(long, value_delimiter = ',')]
        prompt_ids: Option<Vec<u32>>,
        #[arg(long, default_value_t = 32)]
        max_new_tokens: usize,
        /// Sampling temperature (default: greedy)
        #[arg(long)]
        temperature: Option<f64>,
        #[arg(long)]
        top_p: Option<f64>,
        /// Stop at the end-of-sequence token
        #[arg(long)]
        stop_at_eos: bool,
        /// Print one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Write a Q4 GGUF (Q4_K matrices, Q6_K output) from safetensors or a synthetic preset
    Quantize {
        /// The .gguf file to write
        #[arg(long)]
        to: PathBuf,
    },
    /// The device, the card presets and the model presets
    Info,
}

fn default_model(device: &candle_core::Device) -> &'static str {
    if device.is_cuda() {
        "synthetic:qwen2.5-7b"
    } else {
        "synthetic:tiny"
    }
}

/// `--out`, or out/<date>-<command>.
fn out_path(common: &Common, name: &str) -> PathBuf {
    common.out.clone().unwrap_or_else(|| PathBuf::from("out").join(format!("{}-{name}", chrono::Utc::now().format("%Y-%m-%d-%H%M%S"))))
}

fn make_lab(common: &Common) -> Result<Lab> {
    let device = vram_lab::device::pick(&common.device)?;
    let model = common.model.clone().unwrap_or_else(|| default_model(&device).to_string());
    let source = ModelSource::parse(&model)?;
    let opts = SourceOptions { tokenizer: common.tokenizer.clone(), cache_dir: common.cache_dir.clone(), seed: common.seed };
    let mut lab = Lab::new(device, source, opts);
    lab.show_progress = !common.quiet;
    Ok(lab)
}

fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

fn print_table(lab: &mut Lab, title: &str, df: &polars::prelude::DataFrame, cols: &[&str]) -> Result<()> {
    let shown = df.select(cols.iter().copied())?;
    lab.say(format!("\n{title}"));
    lab.say(format!("{shown}"));
    Ok(())
}

/// Prints the named columns of a stage's table and writes the whole table as `<name>.csv`.
fn publish(lab: &mut Lab, out: &OutputDir, name: &str, title: &str, df: &polars::prelude::DataFrame, cols: &[&str]) -> Result<()> {
    print_table(lab, title, df, cols)?;
    out.write_csv(name, df)?;
    Ok(())
}

fn run_anatomy(common: &Common, card: Option<&str>, cfg: &anatomy::AnatomyConfig, out: &Path) -> Result<()> {
    let (mut lab, _emulation, out, env) = begin(common, card, out)?;
    let result = anatomy::run(&mut lab, cfg)?;
    let table = result.table()?;
    print_table(
        &mut lab,
        "Stage 1 — memory (GiB): prediction, this run, the report (RTX 4090, PyTorch)",
        &table,
        &[
            "precision",
            "outcome",
            "predicted_weights_gib",
            "loaded_allocated_gib",
            "weights_measured_gib",
            "weights_vs_predicted_pct",
            "loaded_reserved_gib",
            "loaded_peak_gib",
            "after_allocated_gib",
            "after_peak_gib",
            "report_allocated_gib",
            "report_reserved_gib",
        ],
    )?;
    print_table(
        &mut lab,
        "Stage 1 — speed and OOM",
        &table,
        &["precision", "load_s", "prompt_tokens", "new_tokens", "prefill_tok_s", "decode_tok_s", "decode_ceiling_tok_s", "kv_cache_mib", "oom_request_mib", "oom_during"],
    )?;
    out.write_csv("anatomy", &table)?;
    out.write_csv("anatomy_timeline", &result.timeline.to_dataframe()?)?;
    for sc in result.scenarios.iter().filter(|s| !s.oom_summary.is_empty()) {
        out.write_text(&format!("oom_summary_{}.txt", sc.precision), &sc.oom_summary)?;
    }
    finish(&mut lab, &out, &env)
}

/// Device, model source, output folder, env.json and (while the returned guard lives) the card.
fn begin(common: &Common, card: Option<&str>, out: &Path) -> Result<(Lab, Option<CardEmulation>, OutputDir, Env)> {
    let mut lab = make_lab(common)?;
    let card = card.map(Card::parse).transpose()?;
    let out = OutputDir::create(out)?;
    let env = Env::capture(&lab.device, &command_line(), card.as_ref().map(|c| c.name.as_str()), &lab.source.label());
    lab.say(format!("vram-lab {} on {}", env.vram_lab, env.device));
    lab.say(format!("model {}", lab.source.label()));
    let emulation = match &card {
        Some(c) => {
            let e = CardEmulation::start(c, &lab.device)?;
            lab.say(format!(
                "emulating {} ({:.2} GiB, {}); ballast {}",
                c.label,
                c.total_mib / 1024.0,
                c.total_source,
                vram_lab::memory::fmt_bytes(e.ballast)
            ));
            Some(e)
        }
        None => None,
    };
    Ok((lab, emulation, out, env))
}

fn finish(lab: &mut Lab, out: &OutputDir, env: &Env) -> Result<()> {
    out.write_env(env)?;
    lab.say(format!("\nwrote {}", out.path.display()));
    out.write_text("console.txt", &lab.console.text)?;
    Ok(())
}

struct KvArgs {
    sweep: String,
    precision: String,
    lengths: Option<Vec<usize>>,
    start: usize,
    max: usize,
    resolution: usize,
    logits: String,
    attention: String,
    decode_to: usize,
    seq: usize,
    max_batch: usize,
}

fn run_kv(common: &Common, card: Option<&str>, a: KvArgs, out: &Path) -> Result<()> {
    use vram_lab::experiments::kv;
    let precision = Precision::parse(&a.precision)?;
    let logits = match a.logits.as_str() {
        "all" => model::Logits::All,
        "last" => model::Logits::Last,
        o => return Err(LabError::input(format!("unknown --logits `{o}`: use all or last"))),
    };
    let attention = model::AttentionMode::parse(&a.attention)?;
    let sweeps: &[&str] = match a.sweep.as_str() {
        "all" => &["prefill", "decode", "batch"],
        "prefill" => &["prefill"],
        "decode" => &["decode"],
        "batch" => &["batch"],
        o => return Err(LabError::input(format!("unknown --sweep `{o}`: use prefill, decode, batch or all"))),
    };
    let (mut lab, emulation, out, env) = begin(common, card, out)?;
    let card = emulation.as_ref().map(|e| e.card.name.clone()).unwrap_or_else(|| "none".into());
    let pb = lab.progress_bar("load");
    let loaded = vram_lab::memory::guarded(&lab.probe, &format!("loading in {precision}"), || {
        model::source::load(&lab.source, &lab.opts, precision, &lab.device, &lab.probe, pb.as_ref())
    });
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let mut lm = loaded.map_err(|e| match e {
        LabError::Oom(r) => LabError::Unsupported(format!("the model does not fit: {}\n{}", r.headline(), r.summary)),
        e => e,
    })?;
    lm.model.attention = attention;
    let m = &lm.model;
    lab.say(format!(
        "weights loaded: allocated {}; KV {} B/token ({}), the report's formula {} B/token",
        vram_lab::memory::fmt_bytes(lab.probe.snapshot("loaded").allocated),
        vram_lab::estimate::kv_bytes_per_token(&m.cfg, m.act_dtype().size_in_bytes()),
        m.act_dtype().as_str(),
        vram_lab::estimate::naive_kv_bytes_per_token(&m.cfg, m.act_dtype().size_in_bytes())
    ));
    let cfg = kv::KvConfig {
        prefill: sweeps.contains(&"prefill"),
        decode: sweeps.contains(&"decode"),
        batch: sweeps.contains(&"batch"),
        lengths: a.lengths.clone().unwrap_or_else(|| kv::PrefillConfig::doubling(a.start, a.max)),
        resolution: a.resolution,
        logits,
        decode_to: a.decode_to,
        seq: a.seq,
        max_batch: a.max_batch,
    };
    let tables = kv::run(&mut lab, m, &cfg, &card)?;
    if let Some(t) = &tables.limit {
        out.write_csv("kv_limit", t)?;
    }
    if let Some(t) = &tables.prefill {
        let cols = ["seq", "outcome", "held_mib", "growth_per_1k_tokens_mib", "kv_measured_mib", "kv_gqa_formula_mib", "kv_naive_formula_mib", "logits_mib", "other_mib", "transient_mib", "prefill_tok_s", "oom_request_mib"];
        publish(&mut lab, &out, "kv_prefill", "Stage 2 — prefill ledger (MiB)", t, &cols)?;
    }
    if let Some(t) = &tables.decode {
        let cols = ["cache", "tokens", "outcome", "allocated_mib", "ledger_mib", "ledger_vs_allocated_pct", "kv_mib", "reserved_mib", "peak_above_allocated_mib", "tok_s"];
        publish(&mut lab, &out, "kv_decode", "Stage 2 — decode ledger (MiB): preallocated vs concatenating cache", t, &cols)?;
    }
    if let Some(t) = &tables.batch {
        let cols = ["batch", "seq", "outcome", "held_mib", "kv_measured_mib", "kv_gqa_formula_mib", "logits_mib", "transient_mib", "peak_mib", "prefill_tok_s"];
        publish(&mut lab, &out, "kv_batch", "Stage 2 — batch sweep (MiB)", t, &cols)?;
    }
    finish(&mut lab, &out, &env)
}

fn run_generate(
    common: &Common,
    precision: &str,
    prompt: &str,
    prompt_ids: Option<Vec<u32>>,
    gen: model::GenerateConfig,
    json: bool,
) -> Result<()> {
    let lab = make_lab(common)?;
    let precision = Precision::parse(precision)?;
    let _emulation = common.card.as_deref().map(Card::parse).transpose()?.map(|c| CardEmulation::start(&c, &lab.device)).transpose()?;
    let lm = model::source::load(&lab.source, &lab.opts, precision, &lab.device, &lab.probe, None)?;
    let ids = match (prompt_ids, &lm.tokenizer) {
        (Some(ids), _) => ids,
        (None, Some(t)) => t.encode(prompt, false).map_err(|e| LabError::other(format!("tokenizer: {e}")))?.get_ids().to_vec(),
        (None, None) => {
            return Err(LabError::input(
                "this model has no tokenizer: pass --tokenizer <tokenizer.json> or --prompt-ids 1,2,3",
            ))
        }
    };
    if ids.is_empty() {
        return Err(LabError::input("the prompt has no tokens"));
    }
    let g = lab.probe.snapshot("before");
    let out = vram_lab::memory::guarded(&lab.probe, "generating", || {
        model::generate::warmup(&lm.model, &ids)?;
        model::generate(&lm.model, &ids, &gen)
    })?;
    let after = lab.probe.snapshot("after");
    let text = lm.tokenizer.as_ref().and_then(|t| t.decode(&out.generated_ids, true).ok());
    if json {
        let v = serde_json::json!({
            "model": lab.source.label(),
            "precision": precision.name(),
            "prompt_ids": out.prompt_ids,
            "generated_ids": out.generated_ids,
            "text": text,
            "prefill_tok_s": out.prefill_tok_s(),
            "decode_tok_s": out.decode_tok_s(),
            "allocated_bytes": after.allocated,
            "peak_bytes": after.peak,
        });
        println!("{v}");
    } else {
        println!("model: {} ({}, {})", lab.source.label(), precision, lm.describe);
        println!("prompt ids ({}): {:?}", out.prompt_ids.len(), out.prompt_ids);
        println!("generated ids ({}): {:?}", out.generated_ids.len(), out.generated_ids);
        if let Some(t) = text {
            println!("text: {t}");
        }
        println!(
            "prefill {:.1} tok/s, decode {:.2} tok/s; allocated {} (weights {}), peak {}",
            out.prefill_tok_s(),
            out.decode_tok_s(),
            vram_lab::memory::fmt_bytes(after.allocated),
            vram_lab::memory::fmt_bytes(g.allocated),
            vram_lab::memory::fmt_bytes(after.peak)
        );
    }
    Ok(())
}

fn run_quantize(common: &Common, to: &PathBuf) -> Result<()> {
    let lab = make_lab(common)?;
    let mut opened = model::source::open(&lab.source, &lab.opts)?;
    let n = opened.cfg.tensor_specs().len() as u64;
    let pb = if common.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(n) };
    let rows = model::quantize::write_gguf(&opened.cfg, opened.weights.as_mut(), to, |_| pb.inc(1))?;
    pb.finish_and_clear();
    let total: u64 = rows.iter().map(|r| r.bytes).sum();
    println!("wrote {} ({} tensors, {})", to.display(), rows.len(), vram_lab::memory::fmt_bytes(total));
    for (dtype, bytes) in model::quantize::bytes_by_dtype(&rows) {
        println!("  {dtype:>5}: {}", vram_lab::memory::fmt_bytes(bytes));
    }
    Ok(())
}

fn run_info(common: &Common) -> Result<()> {
    let device = vram_lab::device::pick(&common.device)?;
    let probe = vram_lab::memory::MemoryProbe::new(&device);
    println!("device: {}", vram_lab::device::describe(&device));
    println!("cuda built in: {}", cfg!(feature = "cuda"));
    println!("{}", probe.summary());
    println!("cards:");
    for c in Card::presets() {
        println!("  {:<9} {:>9.1} MiB  {:>6} GB/s  {}", c.name, c.total_mib, c.bandwidth_gbs, c.total_source);
    }
    println!("model presets (synthetic:<name>):");
    for (name, _) in model::config::PRESETS {
        let cfg = model::Qwen2Config::preset(name)?;
        println!("  {:<13} {:>14} parameters", name, cfg.param_count());
    }
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let common = &cli.common;
    match cli.cmd.unwrap_or(Cmd::Lab) {
        Cmd::Lab => {
            // Every stage, each in a folder of the run: on a GPU the report's setting (Qwen2.5-7B on
            // an emulated RTX 4090), on CPU the tiny model with sweeps sized for a CPU.
            let gpu = vram_lab::device::pick(&common.device)?.is_cuda();
            let card = common.card.clone().or_else(|| gpu.then(|| "rtx4090".to_string()));
            let base = out_path(common, "lab");
            run_anatomy(common, card.as_deref(), &anatomy::AnatomyConfig::default(), &base.join("anatomy"))?;
            let kv = KvArgs {
                sweep: "all".into(),
                precision: "bf16".into(),
                lengths: None,
                start: 1024,
                max: if gpu { 131072 } else { 8192 },
                resolution: 256,
                logits: "all".into(),
                attention: "bounded".into(),
                decode_to: if gpu { 4096 } else { 1024 },
                seq: 1024,
                max_batch: if gpu { 256 } else { 8 },
            };
            run_kv(common, card.as_deref(), kv, &base.join("kv"))
        }
        Cmd::Anatomy { precisions, max_new_tokens } => {
            let precisions = precisions.iter().map(|p| Precision::parse(p)).collect::<Result<Vec<_>>>()?;
            run_anatomy(common, common.card.as_deref(), &anatomy::AnatomyConfig { precisions, max_new_tokens }, &out_path(common, "anatomy"))
        }
        Cmd::Generate { precision, prompt, prompt_ids, max_new_tokens, temperature, top_p, stop_at_eos, json } => {
            let gen = model::GenerateConfig { max_new_tokens, temperature, top_p, seed: common.seed, stop_at_eos };
            run_generate(common, &precision, &prompt, prompt_ids, gen, json)
        }
        Cmd::Kv { sweep, precision, lengths, start, max, resolution, logits, attention, decode_to, seq, max_batch } => {
            let args = KvArgs { sweep, precision, lengths, start, max, resolution, logits, attention, decode_to, seq, max_batch };
            run_kv(common, common.card.as_deref(), args, &out_path(common, "kv"))
        }
        Cmd::Quantize { to } => run_quantize(common, &to),
        Cmd::Info => run_info(common),
    }
}

fn main() {
    // Show whole tables on the console.
    std::env::set_var("POLARS_FMT_MAX_COLS", "40");
    std::env::set_var("POLARS_FMT_MAX_ROWS", "60");
    std::env::set_var("POLARS_FMT_TABLE_HIDE_DATAFRAME_SHAPE_INFORMATION", "1");
    std::env::set_var("POLARS_FMT_TABLE_HIDE_COLUMN_DATA_TYPES", "1");
    std::env::set_var("POLARS_TABLE_WIDTH", "250");
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(match e {
            LabError::Input(_) => 2,
            _ => 1,
        });
    }
}
