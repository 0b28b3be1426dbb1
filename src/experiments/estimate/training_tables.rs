//! The training tables: bytes per parameter by optimizer and ZeRO stage, and the lab's F32 step
//! with and without checkpointing beside the articles' rule and PyTorch's step.

use super::tables::col;
use crate::error::Result;
use crate::estimate::training::{self, Optimizer, TrainSetup};
use crate::model::DecoderConfig;
use polars::prelude::*;

/// The training ledger for the configured setup, beside FP32 Adam (the articles' rule) and BF16
/// mixed precision.
pub fn training_table(cfg: &DecoderConfig, optimizer: Optimizer, zero: u8, gpus: u64) -> Result<DataFrame> {
    let params = cfg.param_count() as u64;
    let configured = TrainSetup { weight_bytes: 2, master_f32: true, optimizer, zero, gpus };
    let setups = [
        ("the articles: FP32 weights, gradients, Adam", TrainSetup::fp32_adam()),
        ("BF16 mixed precision, Adam", TrainSetup::mixed_bf16()),
        ("as configured (BF16 mixed precision)", configured),
    ];
    let (mut su, mut it, mut bp, mut gib, mut note) = (vec![], vec![], vec![], vec![], vec![]);
    for (name, setup) in setups {
        let l = training::ledger(params, &setup);
        let what = format!("{name}; {:?}, ZeRO {} on {} GPU(s)", setup.optimizer, setup.zero, setup.gpus);
        for (item, bytes) in [
            ("weights", l.weights),
            ("gradients", l.gradients),
            ("master", l.master),
            ("optimizer", l.optimizer),
            ("total", l.total()),
        ] {
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
pub fn train_step_table(cfg: &DecoderConfig, sh: training::TrainShape) -> Result<DataFrame> {
    let params = cfg.param_count() as u64;
    let l = training::ledger(params, &TrainSetup::fp32_adam());
    let [off, on] = [false, true].map(|ck| training::step_activations(cfg, params, sh, ck));
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let articles = |ck| l.total() + training::articles_activations(cfg, sh, ck);
    let [torch_off, torch_on] = [false, true].map(|ck| training::pytorch_step(cfg, params, sh, ck));
    let rows: [(&str, u64, u64, String); 11] = [
        ("weights (F32)", l.weights, l.weights, "4 B per parameter".into()),
        ("AdamW states", l.optimizer, l.optimizer, "two F32 moments".into()),
        ("gradients", off.gradients, on.gradients, "4 B per parameter".into()),
        ("what the forward keeps", off.forward, on.forward, "candle's graph; with checkpointing each layer's input".into()),
        ("backward peak above weights + states", off.peak, on.peak, format!("at the {} / the {}", off.phase, on.phase)),
        (
            "AdamW update peak above weights + states",
            off.optimizer_peak,
            on.optimizer_peak,
            "the gradients and 3 tensors the size of the largest weight (the update in place)".into(),
        ),
        (
            "step peak",
            l.weights + l.optimizer + off.above_states(),
            l.weights + l.optimizer + on.above_states(),
            format!("{} × {} tokens; what the card must hold beyond the CUDA runtime", sh.batch, sh.seq),
        ),
        ("the articles' rule", articles(false), articles(true), "16 B per parameter + batch × seq × hidden × layers × 4 B (checkpointing: 35 % of it)".into()),
        (
            "PyTorch: what the forward keeps",
            torch_off.forward,
            torch_on.forward,
            "transformers' Qwen2 in F32, SDPA: per layer 10 H + 4 I + heads × seq a token; with checkpointing each layer's input".into(),
        ),
        ("PyTorch: backward peak above weights + states", torch_off.peak, torch_on.peak, format!("at the {} / the {}", torch_off.phase, torch_on.phase)),
        (
            "PyTorch: step peak",
            l.weights + l.optimizer + torch_off.above_states(),
            l.weights + l.optimizer + torch_on.above_states(),
            "torch.optim.AdamW (foreach) holds one F32 copy of every parameter in its update: 20 B per parameter there".into(),
        ),
    ];
    Ok(df!(
        col::ITEM => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        col::WITHOUT_CHECKPOINTING_GIB => rows.iter().map(|r| gib(r.1)).collect::<Vec<_>>(),
        col::WITH_CHECKPOINTING_GIB => rows.iter().map(|r| gib(r.2)).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.3.clone()).collect::<Vec<_>>(),
    )?)
}

/// Unequal cards under data parallelism: the largest micro-batch each card holds (the lab's F32
/// step, `overhead` beside it), and the same global batch split evenly.
pub fn train_cards_table(
    cfg: &DecoderConfig,
    seq: usize,
    checkpoint: bool,
    cards: &[crate::hw::Card],
    overhead: u64,
) -> Result<DataFrame> {
    use crate::estimate::parallel::micro_batch;
    let params = cfg.param_count() as u64;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let planned: Vec<usize> =
        cards.iter().map(|c| micro_batch(cfg, seq, checkpoint, c.total_bytes(), overhead)).collect();
    let global: usize = planned.iter().sum();
    let equal = global.div_ceil(cards.len().max(1));
    let peak = |b: usize| {
        if b == 0 {
            0
        } else {
            training::step_peak(cfg, params, training::TrainShape { batch: b, seq }, checkpoint) + overhead
        }
    };
    Ok(df!(
        col::CARD => cards.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        col::CARD_GIB => cards.iter().map(|c| gib(c.total_bytes())).collect::<Vec<_>>(),
        col::PLANNED_MICRO_BATCH => planned.iter().map(|&b| b as u64).collect::<Vec<_>>(),
        col::PLANNED_PEAK_GIB => planned.iter().map(|&b| gib(peak(b))).collect::<Vec<_>>(),
        col::EQUAL_MICRO_BATCH => cards.iter().map(|_| equal as u64).collect::<Vec<_>>(),
        col::EQUAL_PEAK_GIB => cards.iter().map(|_| gib(peak(equal))).collect::<Vec<_>>(),
        col::EQUAL_FITS => cards.iter().map(|c| equal > 0 && peak(equal) <= c.total_bytes()).collect::<Vec<_>>(),
        col::NOTE => cards.iter().map(|_| format!("{seq} tokens a sequence; F32 AdamW; checkpointing {}; global batch {global}", if checkpoint { "on" } else { "off" })).collect::<Vec<_>>(),
    )?)
}

/// PyTorch's DataParallel beside DDP on `gpus` GPUs, each taking `per_gpu`, F32 AdamW
/// (`estimate::data_parallel`): what each GPU holds over a step.
pub fn train_dp_table(
    cfg: &DecoderConfig,
    per_gpu: training::TrainShape,
    gpus: u64,
    checkpoint: bool,
) -> Result<DataFrame> {
    let params = cfg.param_count() as u64;
    let (ddp, first, other) = crate::estimate::data_parallel::layouts(cfg, params, per_gpu, gpus, checkpoint);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let tokens = format!("{} × {} tokens a GPU, {gpus} GPUs", per_gpu.batch, per_gpu.seq);
    let rows = [
        (
            "weights (F32)",
            ddp.weights,
            first.weights,
            other.weights,
            "the others: a replica made at every forward".to_string(),
        ),
        (
            "gradients",
            ddp.gradients,
            first.gradients,
            other.gradients,
            "the others' are summed into the first GPU's in the backward".into(),
        ),
        ("AdamW states", ddp.states, first.states, other.states, "DataParallel: on the first GPU only".into()),
        (
            "what the forward keeps",
            ddp.activations,
            first.activations,
            other.activations,
            format!("PyTorch's (SDPA, checkpointing {}), {tokens}", if checkpoint { "on" } else { "off" }),
        ),
        (
            "gathered logits",
            ddp.gathered,
            first.gathered,
            other.gathered,
            "every replica's outputs on the first GPU".into(),
        ),
        (
            "total",
            ddp.total(),
            first.total(),
            other.total(),
            "the first GPU's surplus: the moments and the whole batch's logits".into(),
        ),
    ];
    Ok(df!(
        col::ITEM => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        col::DDP_GIB => rows.iter().map(|r| gib(r.1)).collect::<Vec<_>>(),
        col::DP_FIRST_GIB => rows.iter().map(|r| gib(r.2)).collect::<Vec<_>>(),
        col::DP_OTHER_GIB => rows.iter().map(|r| gib(r.3)).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.4.clone()).collect::<Vec<_>>(),
    )?)
}
