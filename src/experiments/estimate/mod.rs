//! The estimator and the planner: "will this model, at this precision, context and batch, fit on
//! my card — and what is the most that does?" Pure formulas (`crate::estimate`), no GPU: the byte
//! ledger per precision, a fit table over every card preset (headroom, longest context, largest
//! batch, the decode ceiling from the card's bandwidth), memory against context per precision,
//! and, with `--train`, what a training step keeps per GPU beside the articles' 16 B/parameter.
//! `plan` inverts it for one card.

pub mod engine;
pub mod inputs;
pub mod tables;
pub mod training_tables;
pub mod transformers;

use crate::error::Result;
use crate::estimate::fit::{self, CardFit, Runtime};
use crate::estimate::parallel;
use crate::estimate::training::{self, Optimizer};
use crate::hw::Card;
use crate::limits;
use crate::memory::{gib, mib};
use crate::model::gguf::Gguf;
use crate::model::{DecoderConfig, Logits, Precision};
use engine::LlamaCppFlags;
use inputs::{ledger_rows, model_config, workload};
use tables::{col, CURVE, FIT, LEDGER, PARALLEL, TRAINING, TRAIN_CARDS, TRAIN_DP, TRAIN_STEP};
use training_tables::{train_cards_table, train_dp_table, train_step_table, training_table};

const MIB: f64 = (1u64 << 20) as f64;
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub struct Estimate;

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
    /// With --train: cards (names or sizes: rtx4090,16GiB) trained on together under data
    /// parallelism — each card's largest micro-batch, and an even split beside it; with --engine
    /// llama.cpp: the GPUs llama.cpp splits the layers over (each card's free memory its share)
    #[arg(long, value_delimiter = ',')]
    pub cards: Vec<String>,
    /// With --train --cards: gradient checkpointing on
    #[arg(long)]
    pub checkpointing: bool,
    /// Inference with tensor parallelism over this many GPUs: what each GPU holds
    #[arg(long, value_parser = limits::count(MAX_PARALLEL))]
    pub tp: Option<usize>,
    /// Inference as a pipeline over this many GPUs (whole layers per GPU, split by weight)
    #[arg(long, conflicts_with = "tp", value_parser = limits::count(MAX_PARALLEL))]
    pub pp: Option<usize>,
    /// `--engine llama.cpp` and its flags
    #[command(flatten)]
    #[serde(flatten)]
    pub llama: LlamaCppFlags,
    /// Print the answer as one JSON document on stdout (docs/commands.md), nothing else
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
}

/// GPUs of one host a tensor-parallel or pipeline plan is priced for.
const MAX_PARALLEL: usize = 64;

impl Default for EstimateConfig {
    fn default() -> Self {
        Self {
            precisions: vec![Precision::Bf16, Precision::Q4KM, Precision::F32],
            seq: 4096,
            batch: 1,
            logits: Logits::Last,
            config: None,
            train: false,
            optimizer: Optimizer::Adamw,
            zero: 0,
            gpus: 1,
            cards: vec![],
            checkpointing: false,
            tp: None,
            pp: None,
            llama: LlamaCppFlags::default(),
            json: false,
        }
    }
}

impl Stage for Estimate {
    const NAME: &'static str = "estimate";
    const TITLE: &'static str = "Estimator — 显存估算: ledger and fit table";
    const ABOUT: &'static str =
        "The byte ledger of a workload and whether it fits each card: headroom, longest context, largest batch, decode ceiling (no GPU needed)";
    const INTRO: &'static str = "The articles size a model with parameters × 2 B, a KV formula without grouped-query attention (7× too high for Qwen2.5-7B), and activations = batch × seq × hidden × layers × 4 B. The lab's formulas count what its forward pass holds, tensor by tensor, and each is checked against every GPU run committed (`vram-lab check`). 估算器:逐项字节账本,以及在每张卡上能否装下、余量、最长上下文、最大批量和解码上限。";
    type Config = EstimateConfig;
    // One card per GPU: two RTX 4090s are the most common machine of two; one share per GPU.
    const REPEATABLE: &'static [&'static str] = &["cards", "ts"];

    fn run(s: &mut Session, c: &EstimateConfig) -> Result<StageOutput> {
        let allocator = s.manifest().allocator;
        // The other engines keep what their own programs keep (llama.cpp the last position's
        // logits, the report's script every position's): --logits is the lab's setting.
        let others = [
            ("--train", c.train),
            ("--tp", c.tp.is_some()),
            ("--pp", c.pp.is_some()),
            ("--batch", c.batch != 1),
            ("--logits", c.logits != EstimateConfig::default().logits),
        ];
        let launch = engine::launch(&c.llama, c.seq, &others)?;
        let (cfg, gguf) = model_config(s, &c.config)?;
        if let Some(mut l) = launch {
            if !c.cards.is_empty() || !c.llama.ts.is_empty() {
                l.tensor_split = engine::split(&c.cards, &c.llama.ts)?;
            }
            return engine::llamacpp(s, &cfg, gguf.as_ref(), &c.llama.gguf_types, &l);
        }
        // The lab's runtime and transformers' are priced for the families the lab computes.
        cfg.computed()?;
        if c.llama.engine == engine::Engine::Transformers {
            // The default list's Q4_K_M is llama.cpp's; transformers loads the dense dtypes.
            let dense = [Precision::Bf16, Precision::F32];
            let default = c.precisions == EstimateConfig::default().precisions;
            return transformers::sweep(s, &cfg, if default { &dense } else { &c.precisions }, c.seq);
        }
        let runtime = Runtime::assumed();
        // The card asked about (`--card 20GiB`) is answered first, beside every preset.
        let mut cards = Card::presets();
        if let Some(own) = s.card().filter(|c| !c.is_scaled() && !cards.iter().any(|p| p.name == c.name)) {
            cards.insert(0, own.clone());
        }
        let (mut lp, mut li, mut lm, mut lf) = (vec![], vec![], vec![], vec![]);
        let mut fits: Vec<(Precision, &Card, CardFit)> = vec![];
        let mut curve: (Vec<String>, Vec<u64>, Vec<f64>) = (vec![], vec![], vec![]);
        let mut out = StageOutput::default();
        for &p in &c.precisions {
            let w = workload(&cfg, gguf.as_ref(), p, c.seq, c.batch, c.logits, allocator);
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
                curve.2.push(
                    fit::ledger(
                        &cfg,
                        &workload(&cfg, gguf.as_ref(), p, seq, c.batch, c.logits, allocator),
                        runtime.bytes(),
                    )
                    .device() as f64
                        / (1u64 << 30) as f64,
                );
                seq *= 2;
            }
            let fits_on: Vec<&str> =
                fits.iter().filter(|(q, _, f)| *q == p && f.fits()).map(|(_, card, _)| card.name.as_str()).collect();
            s.say(format!(
                "{p}: needs {:.2} GiB at {} × {} tokens; fits {}",
                need as f64 / (1u64 << 30) as f64,
                c.batch,
                c.seq,
                if fits_on.is_empty() { "no preset card".to_string() } else { fits_on.join(", ") }
            ));
            out.findings.push(
                Finding::new(format!("{p}: memory for {} × {} tokens", c.batch, c.seq), "GiB", None)
                    .predicted(need as f64 / (1u64 << 30) as f64)
                    .note(format!("fits: {}", fits_on.join(", "))),
            );
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
        if let Some((layout, gpus)) = c.tp.map(|n| ("tp", n)).or(c.pp.map(|n| ("pp", n))) {
            let (df, found) = parallel_table(s, &cfg, gguf.as_ref(), c, layout, gpus, runtime.bytes())?;
            out.table(PARALLEL, df);
            out.findings.extend(found);
        }
        if c.train {
            out.table(TRAINING, training_table(&cfg, c.optimizer, c.zero, c.gpus)?);
            out.table(TRAIN_STEP, train_step_table(&cfg, training::TrainShape { batch: c.batch, seq: c.seq })?);
            if c.gpus > 1 {
                out.table(
                    TRAIN_DP,
                    train_dp_table(&cfg, training::TrainShape { batch: c.batch, seq: c.seq }, c.gpus, c.checkpointing)?,
                );
            }
            if !c.cards.is_empty() {
                let cards = c.cards.iter().map(|n| Card::parse(n)).collect::<Result<Vec<_>>>()?;
                let overhead = runtime.bytes() + parallel::comm_bytes_most(cards.len());
                out.table(TRAIN_CARDS, train_cards_table(&cfg, c.seq, c.checkpointing, &cards, overhead)?);
            }
        }
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}

/// Per GPU, for each precision the layout can hold: `tp` splits dense weights only.
fn parallel_table(
    s: &mut Session,
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    c: &EstimateConfig,
    layout: &str,
    gpus: usize,
    runtime: u64,
) -> Result<(DataFrame, Vec<Finding>)> {
    let allocator = s.manifest().allocator;
    let mut rows: Vec<(String, parallel::GpuNeed)> = vec![];
    let mut found = vec![];
    for &p in &c.precisions {
        let w = workload(cfg, gguf, p, c.seq, c.batch, c.logits, allocator);
        let needs = match layout {
            "tp" if p.is_quantized() => {
                s.say(format!("{p}: tensor parallelism splits dense weights; --pp places whole quantized layers"));
                continue;
            }
            "tp" => parallel::tensor_parallel(cfg, &w, gpus, runtime)?,
            _ => parallel::pipeline(cfg, &w, gpus, runtime)?,
        };
        let most = needs.iter().map(|g| g.total()).max().unwrap_or(0);
        let fits_on: Vec<String> =
            Card::presets().into_iter().filter(|card| card.total_bytes() >= most).map(|card| card.name).collect();
        s.say(format!(
            "{p}, {layout} over {gpus} GPUs: the fullest GPU needs {:.2} GiB; fits {}",
            gib(most),
            if fits_on.is_empty() { "no preset card".into() } else { fits_on.join(", ") }
        ));
        found.push(
            Finding::new(format!("{p}: {layout} over {gpus} GPUs, the fullest GPU at {} × {} tokens", c.batch, c.seq), "GiB", None).predicted(gib(most)).note(
                format!(
                    "NCCL's device memory per GPU as its log laid it out on two to four NVLink GPUs ({} channels; beyond four, its chains assumed); fits: {}",
                    parallel::nccl::CHANNELS,
                    fits_on.join(", ")
                ),
            ),
        );
        rows.extend(needs.into_iter().map(|g| (p.to_string(), g)));
    }
    let m = |f: fn(&parallel::GpuNeed) -> u64| rows.iter().map(|(_, g)| mib(f(g))).collect::<Vec<_>>();
    let df = df!(
        col::PRECISION => rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        col::LAYOUT => rows.iter().map(|_| layout.to_string()).collect::<Vec<_>>(),
        col::GPU => rows.iter().map(|r| r.1.gpu as u64).collect::<Vec<_>>(),
        col::LAYERS => rows.iter().map(|r| format!("{}..{}", r.1.layers.0, r.1.layers.1)).collect::<Vec<_>>(),
        col::WEIGHTS_MIB => m(|g| g.weights),
        col::KV_CACHE_MIB => m(|g| g.kv_cache),
        col::TRANSIENT_MIB => m(|g| g.transient),
        col::LOGITS_MIB => m(|g| g.logits),
        col::NCCL_MIB => m(|g| g.nccl),
        col::POOL_MIB => m(|g| g.pool),
        col::RUNTIME_MIB => m(|g| g.runtime),
        col::TOTAL_MIB => m(|g| g.total()),
    )?;
    Ok((df, found))
}
