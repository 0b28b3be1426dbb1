//! The planner: for one card, per precision, the longest context, the largest batch at the context
//! wanted and the decode ceiling; the best choice first.

pub mod cards;
pub mod llamacpp;

use crate::error::{LabError, Result};
use crate::estimate::fit::{self, CardFit, Runtime};
use crate::experiments::estimate::engine::Engine;
use crate::experiments::estimate::inputs::{model_config, workload};
use crate::experiments::estimate::tables;
use crate::experiments::estimate::tables::{col, PLAN};
use crate::hw::Card;
use crate::limits;
use crate::memory::mib;
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::Gguf;
use crate::model::{DecoderConfig, Logits, Precision};
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub struct Plan;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct PlanConfig {
    /// The context wanted, tokens
    #[arg(long, default_value_t = PlanConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// A config.json to plan for instead of --model
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Two cards or more of one host (e.g. 24GiB,24GiB or rtx4090,a4000): the model pipelined over
    /// them as llama.cpp's --split-mode layer places it
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub cards: Vec<String>,
    /// With --cards: the layers' shares per card, as llama.cpp's --tensor-split (default: each card's memory)
    #[arg(long, value_delimiter = ',', requires = "cards")]
    #[serde(default)]
    pub split: Vec<f64>,
    /// Whose memory: the lab's runtime, or llama.cpp's (the llama-server flags that fit)
    #[arg(long, value_enum, default_value_t = Engine::Lab)]
    #[serde(default)]
    pub engine: Engine,
    /// --engine llama.cpp: MiB of the card left free beyond the whole process's need
    #[arg(long, default_value_t = 256.0, value_parser = limits::mib_f64)]
    #[serde(default = "default_margin")]
    pub margin_mib: f64,
    /// --engine llama.cpp: the GGUF types to plan a preset or config.json in (a GGUF file is
    /// planned in its own)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![FileType::Q4KM])]
    #[serde(default = "default_types")]
    pub gguf_types: Vec<FileType>,
    /// Print the answer as one JSON document on stdout (docs/commands.md), nothing else
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
}

fn default_margin() -> f64 {
    256.0
}

fn default_types() -> Vec<FileType> {
    vec![FileType::Q4KM]
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            seq: 4096,
            config: None,
            cards: Vec::new(),
            split: Vec::new(),
            engine: Engine::Lab,
            margin_mib: default_margin(),
            gguf_types: default_types(),
            json: false,
        }
    }
}

impl Stage for Plan {
    const NAME: &'static str = "plan";
    const TITLE: &'static str = "Planner — 部署规划: the best precision, context and batch for a card";
    const ABOUT: &'static str =
        "For one card: per precision, the longest context, the largest batch at the context wanted, and the decode ceiling; the best choice first";
    const INTRO: &'static str = "The estimator inverted: given a card, which precision keeps the context wanted with the most headroom and the fastest decoding? Higher precision is preferred when it fits; Q4 otherwise. 给定一张卡,选精度、上下文和批量。";
    type Config = PlanConfig;
    const REPEATABLE: &'static [&'static str] = &["cards", "split"];

    fn run(s: &mut Session, c: &PlanConfig) -> Result<StageOutput> {
        let allocator = s.manifest().allocator;
        let (cfg, gguf) = model_config(s, &c.config)?;
        match c.engine {
            Engine::LlamaCpp if !c.cards.is_empty() => {
                let (cards, _) = cards::cards_and_shares(&c.cards, &c.split, 0)?;
                return llamacpp::plan_cards(s, &cfg, gguf.as_ref(), &c.gguf_types, &cards, &c.split, c.margin_mib);
            }
            Engine::LlamaCpp => return llamacpp::plan(s, &cfg, gguf.as_ref(), &c.gguf_types, c.seq, c.margin_mib),
            Engine::Transformers => return Err(LabError::input(
                "plan --engine transformers is not built: `estimate --engine transformers` prices the report's sweep"
                    .to_string(),
            )),
            Engine::Lab => {}
        }
        let defaults = PlanConfig::default();
        if c.margin_mib != defaults.margin_mib || c.gguf_types != defaults.gguf_types {
            return Err(LabError::input(
                "--margin-mib and --gguf-types are flags of --engine llama.cpp; the lab's plan has no such setting"
                    .to_string(),
            ));
        }
        if !c.cards.is_empty() {
            return plan_cards(s, c, &cfg, gguf.as_ref());
        }
        // The session's --card (rtx4090, a4000, …, or a size), else the report's RTX 4090.
        let card = match s.card() {
            Some(card) => card.clone(),
            None => Card::parse("rtx4090")?,
        };
        let runtime = Runtime::assumed();
        let cap = card.total_bytes();
        fit::check(&cfg, &workload(&cfg, None, Precision::F32, c.seq, 1, Logits::Last, allocator))?;
        let rows: Vec<(Precision, CardFit)> = [Precision::F32, Precision::Bf16, Precision::Q4KM]
            .into_iter()
            .map(|p| {
                (
                    p,
                    fit::on_card(
                        &cfg,
                        &workload(&cfg, gguf.as_ref(), p, c.seq, 1, Logits::Last, allocator),
                        runtime.bytes(),
                        cap,
                        card.bandwidth_gbs,
                    ),
                )
            })
            .collect();
        let best = best(rows.iter().map(|r| (r.1.fits(), r.1.max_context)));
        let mut out = StageOutput::default();
        let (p, f) = rows[best];
        let (need, ctx, batch, ceiling) = (f.need, f.max_context, f.max_batch, f.decode_ceiling_tok_s);
        let verdict = if need <= cap {
            format!(
                "{p}: {} tokens fit with {:.2} GiB to spare; up to {ctx} tokens at batch 1, {batch} sequences of {} tokens; decode ceiling {}",
                c.seq,
                (cap - need) as f64 / (1u64 << 30) as f64,
                c.seq,
                ceiling.map(|t| format!("{t:.1} tok/s")).unwrap_or_else(|| "unknown (no bandwidth for this card)".into())
            )
        } else if ctx > 0 {
            format!("{} tokens fit in no precision; {p} reaches {ctx} tokens", c.seq)
        } else {
            format!(
                "the model fits this card in no precision (Q4 needs {:.2} GiB at 1 token)",
                fit::ledger(
                    &cfg,
                    &workload(&cfg, gguf.as_ref(), Precision::Q4KM, 1, 1, Logits::Last, allocator),
                    runtime.bytes()
                )
                .device() as f64
                    / (1u64 << 30) as f64
            )
        };
        s.say(format!("{}: {verdict}", card.label));
        out.findings
            .push(Finding::new(format!("plan for {}", card.label), "tok/s", None).ceiling(ceiling).note(verdict));
        out.table(
            PLAN,
            df!(
                col::RANK => rows.iter().enumerate().map(|(i, _)| if i == best { "best" } else { "" }).collect::<Vec<_>>(),
                col::PRECISION => rows.iter().map(|r| r.0.to_string()).collect::<Vec<_>>(),
                col::NEED_MIB => rows.iter().map(|r| mib(r.1.need)).collect::<Vec<_>>(),
                col::FITS => rows.iter().map(|r| r.1.fits()).collect::<Vec<_>>(),
                col::HEADROOM_MIB => rows.iter().map(|r| r.1.headroom() as f64 / crate::units::MIB).collect::<Vec<_>>(),
                col::MAX_CONTEXT => rows.iter().map(|r| r.1.max_context as u64).collect::<Vec<_>>(),
                col::MAX_BATCH => rows.iter().map(|r| r.1.max_batch as u64).collect::<Vec<_>>(),
                col::DECODE_CEILING => rows.iter().map(|r| r.1.decode_ceiling_tok_s).collect::<Vec<_>>(),
            )?,
        );
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::plan_views()
    }
}

/// The best of the rows, each (fits the context wanted, its longest context), most precise first:
/// the first that fits, else the one with the longest context.
fn best(rows: impl Iterator<Item = (bool, usize)> + Clone) -> usize {
    rows.clone()
        .position(|(fits, _)| fits)
        .unwrap_or_else(|| rows.enumerate().max_by_key(|(_, (_, context))| *context).map(|(i, _)| i).unwrap_or(0))
}

/// The plan over several cards (`cards`): per precision the largest card's need, the longest
/// context and largest batch every card holds; the best as for one card.
fn plan_cards(s: &mut Session, c: &PlanConfig, cfg: &DecoderConfig, gguf: Option<&Gguf>) -> Result<StageOutput> {
    // Several cards run as a pipeline of whole layers, each GPU with the pool (the page allocator
    // serves one GPU), so the cards are priced with the pool's slack.
    let allocator = s.manifest().allocator;
    if allocator != crate::memory::policy::Allocator::Pool {
        return Err(LabError::Unsupported(format!(
            "plan --cards prices a pipeline over several GPUs, which runs on the pool: --allocator {} serves one GPU",
            allocator.name()
        )));
    }
    let runtime = Runtime::assumed().bytes();
    let (cards, shares) = cards::cards_and_shares(&c.cards, &c.split, runtime)?;
    let caps: Vec<u64> = cards.iter().map(Card::total_bytes).collect();
    fit::check(cfg, &workload(cfg, None, Precision::F32, c.seq, 1, Logits::Last, allocator))?;
    let rows = [Precision::F32, Precision::Bf16, Precision::Q4KM]
        .into_iter()
        .map(|p| cards::fit_cards(cfg, gguf, p, c.seq, &cards, &shares, runtime))
        .collect::<Result<Vec<_>>>()?;
    let best = best(rows.iter().map(|r| (r.fits(&caps), r.max_context)));
    let r = &rows[best];
    let names = cards.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(" + ");
    let layers: Vec<String> = r.gpus.iter().map(|g| format!("{}..{}", g.layers.0, g.layers.1)).collect();
    let verdict = if r.fits(&caps) {
        format!(
            "{}: {} tokens fit, layers {} (llama.cpp's split {:?}); up to {} tokens at batch 1, {} sequences of {} tokens",
            r.precision,
            c.seq,
            layers.join(" / "),
            shares.iter().map(|x| (x * 1000.0 / shares.iter().sum::<f64>()).round() / 1000.0).collect::<Vec<_>>(),
            r.max_context,
            r.max_batch,
            c.seq
        )
    } else if r.max_context > 0 {
        format!("{} tokens fit in no precision; {} reaches {} tokens", c.seq, r.precision, r.max_context)
    } else {
        "the model fits these cards in no precision".to_string()
    };
    s.say(format!("{names}: {verdict}"));
    let mut out = StageOutput::default();
    out.findings
        .push(Finding::new(format!("plan for {names}"), "tok/s", None).ceiling(r.decode_ceiling_tok_s).note(verdict));
    cards::tables(&mut out, &rows, &cards, best)?;
    Ok(out)
}
