//! The planner over several cards of one host (`plan --cards 24GiB,24GiB`): the model pipelined as
//! llama.cpp's `--split-mode layer` places it (`estimate::parallel::pipeline_llamacpp`), per
//! precision the longest context and the largest batch every card holds, and each card's share.

use crate::error::{LabError, Result};
use crate::estimate::fit::{self, Inference};
use crate::estimate::parallel::{pipeline_llamacpp, GpuNeed};
use crate::experiments::estimate::inputs::workload;
use crate::experiments::estimate::tables::{col, PLAN, PLAN_GPUS};
use crate::hw::Card;
use crate::limits::MAX_SEQ;
use crate::memory::mib;
use crate::memory::policy::Allocator;
use crate::model::gguf::Gguf;
use crate::model::{DecoderConfig, Logits, Precision};
use crate::stage::StageOutput;
use polars::prelude::*;

/// One precision over the cards: each card's need at the context wanted, and the limits.
pub struct CardsFit {
    pub precision: Precision,
    pub gpus: Vec<GpuNeed>,
    pub max_context: usize,
    pub max_batch: usize,
    pub decode_ceiling_tok_s: Option<f64>,
}

impl CardsFit {
    pub fn fits(&self, caps: &[u64]) -> bool {
        self.gpus.iter().zip(caps).all(|(g, cap)| g.total() <= *cap)
    }
}

/// The cards named (at least two) and the layers' shares: `split` as given (llama.cpp's `-ts`),
/// else each card's memory less the runtime's, as llama.cpp splits by free memory.
pub fn cards_and_shares(names: &[String], split: &[f64], runtime: u64) -> Result<(Vec<Card>, Vec<f64>)> {
    if names.len() < 2 {
        return Err(LabError::input("--cards names two cards or more (for one card, --card)"));
    }
    let cards = names.iter().map(|n| Card::parse(n)).collect::<Result<Vec<_>>>()?;
    let shares = if split.is_empty() {
        crate::estimate::parallel::shares_by_memory(&cards, runtime)
    } else if split.len() == cards.len() {
        split.to_vec()
    } else {
        return Err(LabError::input(format!("--split gives {} shares for {} cards", split.len(), cards.len())));
    };
    Ok((cards, shares))
}

/// `precision` over `cards` with `shares`: the need at `seq`, the longest context at batch 1 and
/// the largest batch at `seq` that every card holds, and the decode ceiling (the stages run in
/// turn: a token reads each card's weights and cache at its bandwidth).
pub fn fit_cards(
    cfg: &DecoderConfig,
    gguf: Option<&Gguf>,
    precision: Precision,
    seq: usize,
    cards: &[Card],
    shares: &[f64],
    runtime: u64,
) -> Result<CardsFit> {
    let caps: Vec<u64> = cards.iter().map(Card::total_bytes).collect();
    let w = workload(cfg, gguf, precision, seq, 1, Logits::Last, Allocator::Pool);
    let fits = |w: Inference| {
        fit::check(cfg, &w).is_ok()
            && pipeline_llamacpp(cfg, &w, shares, runtime)
                .is_ok_and(|g| g.iter().zip(&caps).all(|(g, cap)| g.total() <= *cap))
    };
    let gpus = pipeline_llamacpp(cfg, &w, shares, runtime)?;
    let max_context =
        fit::largest(cfg.max_position_embeddings.max(seq).min(MAX_SEQ), |s| fits(Inference { seq: s, ..w }));
    let max_batch = fit::largest(4096, |b| fits(Inference { batch: b, ..w }));
    let seconds: Option<f64> = gpus
        .iter()
        .zip(cards)
        .map(|(g, c)| c.bandwidth_gbs.map(|bw| (g.weights + g.kv_cache) as f64 / (bw * 1e9)))
        .sum();
    Ok(CardsFit {
        precision,
        gpus,
        max_context,
        max_batch,
        decode_ceiling_tok_s: seconds.filter(|s| *s > 0.0).map(|s| 1.0 / s),
    })
}

/// The planner's two tables over several cards: per precision (`plan`: the largest card's need,
/// whether every card holds it, the least headroom, the limits) and per card (`plan_gpus`).
pub fn tables(out: &mut StageOutput, rows: &[CardsFit], cards: &[Card], best: usize) -> Result<()> {
    let caps: Vec<u64> = cards.iter().map(Card::total_bytes).collect();
    let headroom = |r: &CardsFit| {
        r.gpus.iter().zip(&caps).map(|(g, &c)| c as f64 - g.total() as f64).fold(f64::INFINITY, f64::min)
    };
    out.table(
        PLAN,
        df!(
            col::RANK => rows.iter().enumerate().map(|(i, _)| if i == best { "best" } else { "" }).collect::<Vec<_>>(),
            col::PRECISION => rows.iter().map(|r| r.precision.to_string()).collect::<Vec<_>>(),
            col::NEED_MIB => rows.iter().map(|r| mib(r.gpus.iter().map(GpuNeed::total).max().unwrap_or(0))).collect::<Vec<_>>(),
            col::FITS => rows.iter().map(|r| r.fits(&caps)).collect::<Vec<_>>(),
            col::HEADROOM_MIB => rows.iter().map(|r| headroom(r) / crate::units::MIB).collect::<Vec<_>>(),
            col::MAX_CONTEXT => rows.iter().map(|r| r.max_context as u64).collect::<Vec<_>>(),
            col::MAX_BATCH => rows.iter().map(|r| r.max_batch as u64).collect::<Vec<_>>(),
            col::DECODE_CEILING => rows.iter().map(|r| r.decode_ceiling_tok_s).collect::<Vec<_>>(),
        )?,
    );
    let each = || rows.iter().flat_map(|r| r.gpus.iter().map(move |g| (r, g)));
    out.table(
        PLAN_GPUS,
        df!(
            col::PRECISION => each().map(|(r, _)| r.precision.to_string()).collect::<Vec<_>>(),
            col::GPU => each().map(|(_, g)| g.gpu as u64).collect::<Vec<_>>(),
            col::CARD => each().map(|(_, g)| cards[g.gpu].name.clone()).collect::<Vec<_>>(),
            col::LAYERS => each().map(|(_, g)| format!("{}..{}", g.layers.0, g.layers.1)).collect::<Vec<_>>(),
            col::WEIGHTS_MIB => each().map(|(_, g)| mib(g.weights)).collect::<Vec<_>>(),
            col::KV_CACHE_MIB => each().map(|(_, g)| mib(g.kv_cache)).collect::<Vec<_>>(),
            col::TRANSIENT_MIB => each().map(|(_, g)| mib(g.transient)).collect::<Vec<_>>(),
            col::LOGITS_MIB => each().map(|(_, g)| mib(g.logits)).collect::<Vec<_>>(),
            col::POOL_MIB => each().map(|(_, g)| mib(g.pool)).collect::<Vec<_>>(),
            col::RUNTIME_MIB => each().map(|(_, g)| mib(g.runtime)).collect::<Vec<_>>(),
            col::NEED_MIB => each().map(|(_, g)| mib(g.total())).collect::<Vec<_>>(),
            col::CARD_MIB => each().map(|(_, g)| mib(caps[g.gpu])).collect::<Vec<_>>(),
            col::FITS => each().map(|(_, g)| g.total() <= caps[g.gpu]).collect::<Vec<_>>(),
        )?,
    );
    Ok(())
}
