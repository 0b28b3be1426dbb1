//! The estimator and the planner: "will this model, at this precision, context and batch, fit on
//! my card — and what is the most that does?" Pure formulas (`crate::estimate`), no GPU: the byte
//! ledger per precision, a fit table over every card preset (headroom, longest context, largest
//! batch, the decode ceiling from the card's bandwidth), memory against context per precision,
//! and, with `--train`, what a training step keeps per GPU beside the articles' 16 B/parameter.
//! `plan` inverts it for one card.

use crate::error::Result;
use crate::estimate::fit::{self, CardFit, Inference, Runtime};
use crate::estimate::training::{self, Optimizer, TrainSetup};
use crate::estimate;
use crate::hw::Card;
use crate::limits;
use crate::limits::grouped;
use crate::memory::mib;
use crate::model::attention::AttentionMode;
use crate::model::gguf::Gguf;
use crate::model::{self, Logits, Precision, Qwen2Config};

const MIB: f64 = (1u64 << 20) as f64;
use crate::report::charts;
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub struct Estimate;
pub struct Plan;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct EstimateConfig {
    /// Precisions to estimate
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = EstimateConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Context: tokens per sequence
    #[arg(long, default_value_t = EstimateConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// Sequences per batch
    #[arg(long, default_value_t = EstimateConfig::default().batch, value_parser = limits::count(limits::MAX_BATCH))]
    pub batch: usize,
    /// Logits the prefill keeps
    #[arg(long, value_enum, default_value_t = EstimateConfig::default().logits)]
    pub logits: Logits,
    /// A config.json to estimate instead of --model (no weights needed)
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Also estimate a training step (weights, gradients, master copy, optimizer states per GPU)
    #[arg(long)]
    pub train: bool,
    /// Optimizer for --train
    #[arg(long, value_enum, default_value_t = Optimizer::Adamw)]
    pub optimizer: Optimizer,
    /// ZeRO stage for --train (0–3)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: u8,
    /// GPUs ZeRO divides across
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=limits::MAX_GPUS))]
    pub gpus: u64,
}

impl Default for EstimateConfig {
    fn default() -> Self {
        Self { precisions: vec![Precision::Bf16, Precision::Q4KM, Precision::F32], seq: 4096, batch: 1, logits: Logits::Last, config: None, train: false, optimizer: Optimizer::Adamw, zero: 0, gpus: 1 }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct PlanConfig {
    /// The context wanted, tokens
    #[arg(long, default_value_t = PlanConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// A config.json to plan for instead of --model
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self { seq: 4096, config: None }
    }
}

pub mod col {
    pub const PRECISION: &str = "precision";
    pub const ITEM: &str = "item";
    pub const MIB: &str = "mib";
    pub const FORMULA: &str = "formula";
    pub const CARD: &str = "card";
    pub const CARD_MIB: &str = "card_mib";
    pub const NEED_MIB: &str = "need_mib";
    pub const FITS: &str = "fits";
    pub const HEADROOM_MIB: &str = "headroom_mib";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const MAX_BATCH: &str = "max_batch";
    pub const BANDWIDTH_GBS: &str = "bandwidth_gb_s";
    pub const DECODE_CEILING: &str = "decode_ceiling_tok_s";
    pub const SEQ: &str = "seq";
    pub const NEED_GIB: &str = "need_gib";
    pub const SETUP: &str = "setup";
    pub const BYTES_PER_PARAM: &str = "bytes_per_param";
    pub const GIB_PER_GPU: &str = "gib_per_gpu";
    pub const RANK: &str = "rank";
    pub const NOTE: &str = "note";
    pub const WITHOUT_CHECKPOINTING_GIB: &str = "without_checkpointing_gib";
    pub const WITH_CHECKPOINTING_GIB: &str = "with_checkpointing_gib";
}

pub const LEDGER: &str = "estimate_ledger";
pub const FIT: &str = "estimate_fit";
pub const CURVE: &str = "estimate_curve";
pub const TRAINING: &str = "estimate_training";
pub const TRAIN_STEP: &str = "estimate_train_step";
pub const PLAN: &str = "plan";

/// The model's config: --config, else the session's model; and the GGUF file when the model is
/// one, whose tensors price its weights.
fn model_config(s: &mut Session, path: &Option<PathBuf>) -> Result<(Qwen2Config, Option<Gguf>)> {
    // A Hub GGUF file is fetched (or found in the cache) only when it is what gets priced.
    let source = if path.is_some() { s.source.clone() } else { s.source.fetched(&s.opts)? };
    match (path, &source) {
        (Some(p), _) => Ok((Qwen2Config::from_file(p)?, None)),
        // A GGUF's header is enough to price it, even when the file was cut short.
        (None, model::ModelSource::Gguf(file)) => {
            let (gguf, truncated) = Gguf::open_header(file)?;
            if let Some(e) = truncated {
                s.say(format!("{e}: priced from its header"));
            }
            Ok((gguf.config()?, Some(gguf)))
        }
        (None, source) => Ok((model::source::open(source, &s.opts)?.cfg, None)),
    }
}

/// A workload of the model: a GGUF's weights priced by its own tensors.
fn workload(cfg: &Qwen2Config, gguf: Option<&Gguf>, precision: Precision, seq: usize, batch: usize, logits: Logits) -> Inference {
    let stored = gguf.map(|g| g.loaded_bytes(cfg, precision));
    Inference { precision, seq, batch, logits, attention: AttentionMode::default(), stored }
}

fn ledger_rows(cfg: &Qwen2Config, w: &Inference, runtime: &Runtime, gguf: Option<&Gguf>) -> Vec<(&'static str, u64, String)> {
    let l = fit::ledger(cfg, w, runtime.bytes());
    let act = w.precision.act_dtype().size_in_bytes();
    let tokens = w.seq * w.batch;
    let weights = match gguf {
        Some(g) if w.precision.is_quantized() => {
            let by: Vec<String> = g.header.bytes_by_type().iter().map(|(t, n, b)| format!("{t} {n} × = {}", grouped(*b))).collect();
            format!("the file's tensors as stored, each by its type: {} B", by.join(", "))
        }
        _ if w.precision == Precision::Q4 => "Q4_K blocks per tensor, Q6_K for the output layer (the lab's plan, `ggml_dtype_for`)".into(),
        _ if w.precision.is_quantized() => "llama.cpp's Q4_K_M mix per tensor (Q6_K for the output layer and the `use_more_bits` layers' attn_v and ffn_down), vectors in the compute dtype".into(),
        _ => format!("{} parameters × {act} B", cfg.param_count()),
    };
    let mut rows = vec![("weights", l.weights, weights)];
    if l.workspace > 0 {
        rows.push(("workspace", l.workspace, format!("candle's quantized matmul keeps its inputs as Q8_1 for the longest prefill ({tokens} tokens), and a 16 MiB fixup buffer")));
    }
    rows.extend([
        ("kv_cache", l.kv_cache, format!("{} B/token (2 × {} layers × {} KV heads × {} × {act} B) × {tokens} tokens", estimate::kv_bytes_per_token(cfg, act), cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim())),
        ("logits", l.logits, format!("{} × {act} B × {} rows", cfg.vocab_size, if w.logits == Logits::All { tokens } else { w.batch })),
        ("transient", l.transient, format!("the prefill's busiest moment ({}), above what stays", l.peak_at)),
        ("pool", l.pool, format!("the pool maps 32 MiB chunks: {:.1} MiB kept beyond the live bytes per chunk of live allocations at the busiest moment (each counted up to a chunk; measured on an H200)", crate::alloc_model::POOL_SLACK as f64 / (1u64 << 20) as f64)),
        ("runtime", l.runtime, format!("CUDA context, cuBLAS and kernels outside the pool, measured on {}", runtime.gpu)),
        ("total", l.device(), "what the card must have".into()),
    ]);
    rows
}

impl Stage for Estimate {
    const NAME: &'static str = "estimate";
    const TITLE: &'static str = "Estimator — 显存估算: ledger and fit table";
    const ABOUT: &'static str = "The byte ledger of a workload and whether it fits each card: headroom, longest context, largest batch, decode ceiling (no GPU needed)";
    const INTRO: &'static str = "The articles size a model with parameters × 2 B, a KV formula without grouped-query attention (7× too high for Qwen2.5-7B), and activations = batch × seq × hidden × layers × 4 B. The lab's formulas count what its forward pass holds, tensor by tensor, and each is checked against every GPU run committed (`vram-lab check`). 估算器:逐项字节账本,以及在每张卡上能否装下、余量、最长上下文、最大批量和解码上限。";
    type Config = EstimateConfig;

    fn run(s: &mut Session, c: &EstimateConfig) -> Result<StageOutput> {
        let (cfg, gguf) = model_config(s, &c.config)?;
        let runtime = Runtime::assumed();
        let cards = Card::presets();
        let (mut lp, mut li, mut lm, mut lf) = (vec![], vec![], vec![], vec![]);
        let mut fits: Vec<(Precision, &Card, CardFit)> = vec![];
        let mut curve: (Vec<String>, Vec<u64>, Vec<f64>) = (vec![], vec![], vec![]);
        let mut out = StageOutput::default();
        for &p in &c.precisions {
            let w = workload(&cfg, gguf.as_ref(), p, c.seq, c.batch, c.logits);
            fit::check(&cfg, &w)?;
            for (item, bytes, formula) in ledger_rows(&cfg, &w, &runtime, gguf.as_ref()) {
                lp.push(p.to_string());
                li.push(item);
                lm.push(mib(bytes));
                lf.push(formula);
            }
            let need = fit::ledger(&cfg, &w, runtime.bytes()).device();
            for card in &cards {
                fits.push((p, card, fit::on_card(&cfg, &w, runtime.bytes(), card.total_bytes(), card.bandwidth_gbs)));
            }
            // Memory against context: powers of two up to the model's positions.
            let mut seq = 256;
            while seq <= cfg.max_position_embeddings {
                curve.0.push(p.to_string());
                curve.1.push(seq as u64);
                curve.2.push(fit::ledger(&cfg, &workload(&cfg, gguf.as_ref(), p, seq, c.batch, c.logits), runtime.bytes()).device() as f64 / (1u64 << 30) as f64);
                seq *= 2;
            }
            let fits_on: Vec<&str> = fits.iter().filter(|(q, _, f)| *q == p && f.fits()).map(|(_, card, _)| card.name.as_str()).collect();
            s.say(format!("{p}: needs {:.2} GiB at {} × {} tokens; fits {}", need as f64 / (1u64 << 30) as f64, c.batch, c.seq, if fits_on.is_empty() { "no preset card".to_string() } else { fits_on.join(", ") }));
            out.findings.push(Finding::new(format!("{p}: memory for {} × {} tokens", c.batch, c.seq), "GiB", None).predicted(need as f64 / (1u64 << 30) as f64).note(format!("fits: {}", fits_on.join(", "))));
        }
        out.table(LEDGER, df!(col::PRECISION => lp, col::ITEM => li, col::MIB => lm, col::FORMULA => lf)?);
        out.table(
            FIT,
            df!(
                col::PRECISION => fits.iter().map(|r| r.0.to_string()).collect::<Vec<_>>(),
                col::CARD => fits.iter().map(|r| r.1.name.clone()).collect::<Vec<_>>(),
                col::CARD_MIB => fits.iter().map(|r| r.1.total_mib).collect::<Vec<_>>(),
                col::NEED_MIB => fits.iter().map(|r| mib(r.2.need)).collect::<Vec<_>>(),
                col::FITS => fits.iter().map(|r| r.2.fits()).collect::<Vec<_>>(),
                col::HEADROOM_MIB => fits.iter().map(|r| r.2.headroom() as f64 / MIB).collect::<Vec<_>>(),
                col::MAX_CONTEXT => fits.iter().map(|r| r.2.max_context as u64).collect::<Vec<_>>(),
                col::MAX_BATCH => fits.iter().map(|r| r.2.max_batch as u64).collect::<Vec<_>>(),
                col::BANDWIDTH_GBS => fits.iter().map(|r| r.1.bandwidth_gbs).collect::<Vec<_>>(),
                col::DECODE_CEILING => fits.iter().map(|r| r.2.decode_ceiling_tok_s).collect::<Vec<_>>(),
            )?,
        );
        out.table(CURVE, df!(col::PRECISION => curve.0, col::SEQ => curve.1, col::NEED_GIB => curve.2)?);
        if c.train {
            out.table(TRAINING, training_table(&cfg, c)?);
            out.table(TRAIN_STEP, train_step_table(&cfg, c)?);
        }
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![
            View {
                name: "ledger",
                table: LEDGER,
                caption: "Estimator — the byte ledger per precision (MiB)",
                columns: &[ITEM, MIB, FORMULA],
                group_by: &[PRECISION],
                chart: None,
                explain: "Weights from the tensor list (Q4: the GGUF block plan), the KV cache with grouped-query attention, the logits kept, the prefill's transient counted tensor by tensor from the lab's forward (the attention chunk, the MLP's four intermediate tensors or the logits' final norm, whichever is largest), and the runtime outside the pool. 权重、KV 缓存(GQA)、logits、前向瞬时峰值、运行时开销。",
            },
            View {
                name: "fit",
                table: FIT,
                caption: "Estimator — fit table over the card presets",
                columns: &[CARD, CARD_MIB, NEED_MIB, FITS, HEADROOM_MIB, MAX_CONTEXT, MAX_BATCH, BANDWIDTH_GBS, DECODE_CEILING],
                group_by: &[PRECISION],
                chart: None,
                explain: "Headroom = the card's total less the ledger's total. The longest context (at the batch given) and the largest batch (at the context given) are the edge of the same ledger: one more token or sequence does not fit. The decode ceiling is the card's bandwidth ÷ (weights + the cache at this context): batch-1 decoding reads both once per token. The stream-ordered pool maps more than it hands out near the edge (see `vram-lab check`): keep a margin. 每张卡:能否装下、余量、最长上下文、最大批量、解码上限。",
            },
            View {
                name: "curve",
                table: CURVE,
                caption: "Estimator — memory against context (GiB)",
                columns: &[PRECISION, SEQ, NEED_GIB],
                group_by: &[],
                chart: Some(charts::estimate_curve),
                explain: "The ledger's total for each context, against each card's capacity: where a line crosses a card is its longest context. 显存随上下文增长,与各卡容量的交点即最长上下文。",
            },
            View {
                name: "training",
                table: TRAINING,
                caption: "Estimator — a training step per GPU, beside the articles' 16 B/parameter",
                columns: &[SETUP, ITEM, BYTES_PER_PARAM, GIB_PER_GPU, NOTE],
                group_by: &[],
                chart: None,
                explain: "Weights, gradients, the F32 master copy (mixed precision), the optimizer's states, and what ZeRO divides across GPUs; the step's activations and peak are the next table. 训练:权重、梯度、主权重、优化器状态,以及 ZeRO 的切分。",
            },
            View {
                name: "train_step",
                table: TRAIN_STEP,
                caption: "Estimator — the lab's F32 training step at this batch and context (GiB)",
                columns: &[ITEM, WITHOUT_CHECKPOINTING_GIB, WITH_CHECKPOINTING_GIB, NOTE],
                group_by: &[],
                chart: None,
                explain: "The step `vram-lab train` runs (forward, backward, AdamW in F32), counted tensor by tensor from candle's forward and backward: what the forward keeps for the backward, the backward's busiest moment, the update's, and the peak the card must hold. Checked against the lab's measured steps (`vram-lab check`). 训练一步的激活与峰值,有无梯度检查点。",
            },
        ]
    }
}

/// The training ledger for the configured setup, beside FP32 Adam (the articles' rule) and BF16
/// mixed precision.
fn training_table(cfg: &Qwen2Config, c: &EstimateConfig) -> Result<DataFrame> {
    let params = cfg.param_count() as u64;
    let configured = TrainSetup { weight_bytes: 2, master_f32: true, optimizer: c.optimizer, zero: c.zero, gpus: c.gpus };
    let setups = [
        ("the articles: FP32 weights, gradients, Adam", TrainSetup::fp32_adam()),
        ("BF16 mixed precision, Adam", TrainSetup::mixed_bf16()),
        ("as configured (BF16 mixed precision)", configured),
    ];
    let (mut su, mut it, mut bp, mut gib, mut note) = (vec![], vec![], vec![], vec![], vec![]);
    for (name, setup) in setups {
        let l = training::ledger(params, &setup);
        let what = format!("{name}; {:?}, ZeRO {} on {} GPU(s)", setup.optimizer, setup.zero, setup.gpus);
        for (item, bytes) in [("weights", l.weights), ("gradients", l.gradients), ("master", l.master), ("optimizer", l.optimizer), ("total", l.total())] {
            su.push(what.clone());
            it.push(item);
            bp.push(bytes as f64 / params as f64);
            gib.push(bytes as f64 / (1u64 << 30) as f64);
            note.push(if item == "total" && setup == TrainSetup::fp32_adam() {
                format!("16 B × {params} parameters; the articles' 112 GB is 16 B × 7e9")
            } else {
                String::new()
            });
        }
    }
    Ok(df!(col::SETUP => su, col::ITEM => it, col::BYTES_PER_PARAM => bp, col::GIB_PER_GPU => gib, col::NOTE => note)?)
}

/// The lab's F32 training step at this batch and context (`vram-lab train`), without and with
/// gradient checkpointing: what it keeps, its busiest moments and its peak, beside the articles'
/// rule (16 B per parameter plus batch × seq × hidden × layers × 4 B of activations).
fn train_step_table(cfg: &Qwen2Config, c: &EstimateConfig) -> Result<DataFrame> {
    let params = cfg.param_count() as u64;
    let sh = training::TrainShape { batch: c.batch, seq: c.seq };
    let l = training::ledger(params, &TrainSetup::fp32_adam());
    let [off, on] = [false, true].map(|ck| training::step_activations(cfg, params, sh, ck));
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let articles = |ck| l.total() + training::articles_activations(cfg, sh, ck);
    let torch = training::pytorch_update_peak(params);
    let rows: [(&str, u64, u64, String); 9] = [
        ("weights (F32)", l.weights, l.weights, "4 B per parameter".into()),
        ("AdamW states", l.optimizer, l.optimizer, "two F32 moments".into()),
        ("gradients", off.gradients, on.gradients, "4 B per parameter".into()),
        ("what the forward keeps", off.forward, on.forward, "candle's graph; with checkpointing each layer's input".into()),
        ("backward peak above weights + states", off.peak, on.peak, format!("at the {} / the {}", off.phase, on.phase)),
        ("AdamW update peak above weights + states", off.optimizer_peak, on.optimizer_peak, "the gradients and 3 tensors the size of the largest weight (the update in place)".into()),
        ("step peak", l.weights + l.optimizer + off.above_states(), l.weights + l.optimizer + on.above_states(), format!("{} × {} tokens; what the card must hold beyond the CUDA runtime", c.batch, c.seq)),
        ("the articles' rule", articles(false), articles(true), "16 B per parameter + batch × seq × hidden × layers × 4 B (checkpointing: 35 % of it)".into()),
        ("PyTorch's step, at least", torch, torch, "F32 weights, torch.optim.AdamW (foreach): 20 B per parameter during its update; more where its backward holds more".into()),
    ];
    Ok(df!(
        col::ITEM => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        col::WITHOUT_CHECKPOINTING_GIB => rows.iter().map(|r| gib(r.1)).collect::<Vec<_>>(),
        col::WITH_CHECKPOINTING_GIB => rows.iter().map(|r| gib(r.2)).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.3.clone()).collect::<Vec<_>>(),
    )?)
}

impl Stage for Plan {
    const NAME: &'static str = "plan";
    const TITLE: &'static str = "Planner — 部署规划: the best precision, context and batch for a card";
    const ABOUT: &'static str = "For one card: per precision, the longest context, the largest batch at the context wanted, and the decode ceiling; the best choice first";
    const INTRO: &'static str = "The estimator inverted: given a card, which precision keeps the context wanted with the most headroom and the fastest decoding? Higher precision is preferred when it fits; Q4 otherwise. 给定一张卡,选精度、上下文和批量。";
    type Config = PlanConfig;

    fn run(s: &mut Session, c: &PlanConfig) -> Result<StageOutput> {
        let (cfg, gguf) = model_config(s, &c.config)?;
        // The session's --card (rtx4090, a4000, …, or a size), else the report's RTX 4090.
        let card = match s.probe.card() {
            Some(card) => card.clone(),
            None => Card::parse("rtx4090")?,
        };
        let runtime = Runtime::assumed();
        let cap = card.total_bytes();
        fit::check(&cfg, &workload(&cfg, None, Precision::F32, c.seq, 1, Logits::Last))?;
        let rows: Vec<(Precision, CardFit)> =
            [Precision::F32, Precision::Bf16, Precision::Q4KM].into_iter().map(|p| (p, fit::on_card(&cfg, &workload(&cfg, gguf.as_ref(), p, c.seq, 1, Logits::Last), runtime.bytes(), cap, card.bandwidth_gbs))).collect();
        // The best: the most precise that fits the context wanted (F32 > BF16 > Q4), else the one
        // with the longest context.
        let best = rows.iter().position(|r| r.1.fits()).unwrap_or_else(|| rows.iter().enumerate().max_by_key(|(_, r)| r.1.max_context).map(|(i, _)| i).unwrap_or(0));
        let mut out = StageOutput::default();
        let (p, f) = rows[best];
        let (need, ctx, batch, ceiling) = (f.need, f.max_context, f.max_batch, f.decode_ceiling_tok_s);
        let verdict = if need <= cap {
            format!("{p}: {} tokens fit with {:.2} GiB to spare; up to {ctx} tokens at batch 1, {batch} sequences of {} tokens; decode ceiling {}", c.seq, (cap - need) as f64 / (1u64 << 30) as f64, c.seq, ceiling.map(|t| format!("{t:.1} tok/s")).unwrap_or_else(|| "unknown (no bandwidth for this card)".into()))
        } else if ctx > 0 {
            format!("{} tokens fit in no precision; {p} reaches {ctx} tokens", c.seq)
        } else {
            format!("the model fits this card in no precision (Q4 needs {:.2} GiB at 1 token)", fit::ledger(&cfg, &workload(&cfg, gguf.as_ref(), Precision::Q4KM, 1, 1, Logits::Last), runtime.bytes()).device() as f64 / (1u64 << 30) as f64)
        };
        s.say(format!("{}: {verdict}", card.label));
        out.findings.push(Finding::new(format!("plan for {}", card.label), "tok/s", None).ceiling(ceiling).note(verdict));
        out.table(
            PLAN,
            df!(
                col::RANK => rows.iter().enumerate().map(|(i, _)| if i == best { "best" } else { "" }).collect::<Vec<_>>(),
                col::PRECISION => rows.iter().map(|r| r.0.to_string()).collect::<Vec<_>>(),
                col::NEED_MIB => rows.iter().map(|r| mib(r.1.need)).collect::<Vec<_>>(),
                col::FITS => rows.iter().map(|r| r.1.fits()).collect::<Vec<_>>(),
                col::HEADROOM_MIB => rows.iter().map(|r| r.1.headroom() as f64 / MIB).collect::<Vec<_>>(),
                col::MAX_CONTEXT => rows.iter().map(|r| r.1.max_context as u64).collect::<Vec<_>>(),
                col::MAX_BATCH => rows.iter().map(|r| r.1.max_batch as u64).collect::<Vec<_>>(),
                col::DECODE_CEILING => rows.iter().map(|r| r.1.decode_ceiling_tok_s).collect::<Vec<_>>(),
            )?,
        );
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![View {
            name: "plan",
            table: PLAN,
            caption: "Planner — per precision on the card (batch 1 unless said)",
            columns: &[RANK, PRECISION, NEED_MIB, FITS, HEADROOM_MIB, MAX_CONTEXT, MAX_BATCH, DECODE_CEILING],
            group_by: &[],
            chart: None,
            explain: "need = the ledger's total at the context wanted (batch 1, last-token logits, the runtime's overhead included). The decode ceiling is the card's bandwidth ÷ bytes read per token; stage 1 measures how close the lab's decoding comes to it on a GPU. 每种精度:所需显存、最长上下文、最大批量和解码上限。",
        }]
    }
}
