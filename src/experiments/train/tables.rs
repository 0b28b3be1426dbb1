//! The train stage's tables: their columns, the CSVs' names, the views and charts the report draws.

use crate::error::Result;
use crate::estimate::training::{self, step_peak, TrainSetup, TrainShape};
use crate::memory::mib;
use crate::model::DecoderConfig;
use crate::stage::{ChartSpec, Series, View};
use polars::prelude::*;

/// One row: an item measured, the lab's formula, the articles' where they have one.
pub struct ItemRow {
    pub checkpointing: bool,
    pub item: &'static str,
    pub measured: Option<u64>,
    pub lab: u64,
    pub articles: Option<u64>,
    pub note: String,
}

pub fn pct(measured: Option<u64>, predicted: Option<u64>) -> Option<f64> {
    match (measured, predicted) {
        (Some(m), Some(p)) if m > 0 => Some(100.0 * (p as f64 - m as f64) / m as f64),
        _ => None,
    }
}

pub mod col {
    pub const CHECKPOINTING: &str = "checkpointing";
    pub const ITEM: &str = "item";
    pub const MEASURED_MIB: &str = "measured_mib";
    pub const LAB_MIB: &str = "lab_mib";
    pub const LAB_ERROR_PCT: &str = "lab_error_pct";
    pub const ARTICLES_MIB: &str = "articles_mib";
    pub const ARTICLES_ERROR_PCT: &str = "articles_error_pct";
    pub const NOTE: &str = "note";
    pub const CASE: &str = "case";
    pub const GB: &str = "gb";
    pub const RANK: &str = "rank";
    pub const DEVICE: &str = "device";
    pub const ZERO: &str = "zero";
    pub const LAYOUT: &str = "layout";
    pub const CARD: &str = "card";
    pub const MICRO_BATCH: &str = "micro_batch";
}

pub const MEMORY: &str = "train_memory";

pub const SCALE: &str = "train_scale";

pub const RANKS: &str = "train_ranks";

/// One rank's item under data parallelism: measured beside the lab's ledger.
#[derive(Clone)]
pub struct RankRow {
    /// "planned" / "even" with unequal cards, "given" with --batches, else empty.
    pub layout: &'static str,
    pub rank: usize,
    /// The card the rank emulates (empty: its whole device).
    pub card: String,
    pub batch: usize,
    pub device: String,
    pub zero: u8,
    pub item: &'static str,
    pub measured: Option<u64>,
    pub lab: u64,
    pub note: String,
}

pub fn ranks_table(rows: &[RankRow]) -> Result<DataFrame> {
    use col::*;
    Ok(df!(
        LAYOUT => rows.iter().map(|r| r.layout).collect::<Vec<_>>(),
        RANK => rows.iter().map(|r| r.rank as u32).collect::<Vec<_>>(),
        CARD => rows.iter().map(|r| r.card.clone()).collect::<Vec<_>>(),
        MICRO_BATCH => rows.iter().map(|r| r.batch as u32).collect::<Vec<_>>(),
        DEVICE => rows.iter().map(|r| r.device.clone()).collect::<Vec<_>>(),
        ZERO => rows.iter().map(|r| r.zero as u32).collect::<Vec<_>>(),
        ITEM => rows.iter().map(|r| r.item).collect::<Vec<_>>(),
        MEASURED_MIB => rows.iter().map(|r| r.measured.map(mib)).collect::<Vec<_>>(),
        LAB_MIB => rows.iter().map(|r| mib(r.lab)).collect::<Vec<_>>(),
        LAB_ERROR_PCT => rows.iter().map(|r| pct(r.measured, Some(r.lab))).collect::<Vec<_>>(),
        NOTE => rows.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

pub fn memory_table(rows: &[ItemRow]) -> Result<DataFrame> {
    use col::*;
    let opt_mib = |v: Option<u64>| v.map(mib);
    Ok(df!(
        CHECKPOINTING => rows.iter().map(|r| r.checkpointing).collect::<Vec<_>>(),
        ITEM => rows.iter().map(|r| r.item).collect::<Vec<_>>(),
        MEASURED_MIB => rows.iter().map(|r| opt_mib(r.measured)).collect::<Vec<_>>(),
        LAB_MIB => rows.iter().map(|r| mib(r.lab)).collect::<Vec<_>>(),
        LAB_ERROR_PCT => rows.iter().map(|r| pct(r.measured, Some(r.lab))).collect::<Vec<_>>(),
        ARTICLES_MIB => rows.iter().map(|r| opt_mib(r.articles)).collect::<Vec<_>>(),
        ARTICLES_ERROR_PCT => rows.iter().map(|r| pct(r.measured, r.articles)).collect::<Vec<_>>(),
        NOTE => rows.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

/// The articles' "FP32 training of a 7B model needs 112 GB" beside the lab's estimate of the
/// same case (Qwen2.5-7B, F32 AdamW, this run's batch and context), with and without checkpointing.
pub fn scale_table(sh: TrainShape) -> Result<DataFrame> {
    let cfg = DecoderConfig::preset("qwen2.5-7b")?;
    let p = cfg.param_count() as u64;
    let states = training::ledger(p, &TrainSetup::fp32_adam()).total();
    let gb = |b: u64| b as f64 / 1e9;
    let lab = |ckpt| step_peak(&cfg, p, sh, ckpt);
    let cases = [
        (
            "articles: 16 B × 7e9 parameters".to_string(),
            112e9 as u64,
            "weights 4 + gradients 4 + Adam 8 B per parameter; no activations".to_string(),
        ),
        ("articles' rule, Qwen2.5-7B's 7,615,616,512 parameters".into(), states, "the same 16 B per parameter".into()),
        (
            format!("lab: step peak, {} × {} tokens, no checkpointing", sh.batch, sh.seq),
            lab(false),
            "weights + states + the peak above them".into(),
        ),
        (format!("lab: step peak, {} × {} tokens, checkpointing", sh.batch, sh.seq), lab(true), "".into()),
    ];
    Ok(df!(
        col::CASE => cases.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
        col::GB => cases.iter().map(|c| gb(c.1)).collect::<Vec<_>>(),
        col::NOTE => cases.iter().map(|c| c.2.clone()).collect::<Vec<_>>(),
    )?)
}

/// The items of a rank that add up to what its device held at the step's peak.
const PER_GPU_ITEMS: &[&str] =
    &["weights", "optimizer states", "step peak above weights + states", "NCCL's device memory"];

/// Each rank's training step as one stacked bar beside the ledger's: weights, AdamW's states, the
/// step's peak above them (gradients and activations) and NCCL's buffers outside the pool.
const PER_GPU_CHART: ChartSpec = ChartSpec {
    title: "每张卡的训练显存 Every GPU's training step: measured beside the ledger",
    x: "rank {rank}",
    x_title: "GPU (rank): measured, then the ledger",
    y_title: "MiB",
    split_by: Some(col::ITEM),
    only: Some((col::ITEM, PER_GPU_ITEMS)),
    series: &[
        Series::stacked("measured", "", &[(col::MEASURED_MIB, 1.0)]),
        Series::stacked("ledger", "", &[(col::LAB_MIB, 1.0)]),
    ],
    ..ChartSpec::STACKED
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "memory",
            table: MEMORY,
            caption: "Training step — measured, lab formula, articles' formula",
            columns: &[CHECKPOINTING, ITEM, MEASURED_MIB, LAB_MIB, LAB_ERROR_PCT, ARTICLES_MIB, ARTICLES_ERROR_PCT, NOTE],
            group_by: &[CHECKPOINTING],
            chart: None,
            explain: "Weights, AdamW states and gradients are exact byte counts. Without checkpointing candle keeps every tensor the forward made (an op holds its inputs) until the backward ends: far more than the articles' one hidden-sized tensor per layer and token. Checkpointing keeps each layer's input; the peak then moves to the head's backward, where Qwen's 151,936-word vocabulary makes logits-sized tensors the largest. 权重、优化器状态、梯度按字节精确;峰值与公式对照。",
        },
        View {
            name: "scale",
            table: SCALE,
            caption: "The articles' 112 GB for 7B beside the lab's estimate",
            columns: &[CASE, GB, NOTE],
            group_by: &[],
            chart: None,
            explain: "16 B × 7e9 is 112 GB; Qwen2.5-7B has 7.6e9 parameters, so the same rule gives 121.8 GB before any activation. 文章的 112 GB 与实验室对同一情形的估计。",
        },
        View {
            name: "ranks",
            table: RANKS,
            caption: "Data-parallel training — every rank's bytes beside the ledger (ZeRO's per-GPU formulas)",
            columns: &[LAYOUT, RANK, CARD, MICRO_BATCH, DEVICE, ZERO, ITEM, MEASURED_MIB, LAB_MIB, LAB_ERROR_PCT, NOTE],
            group_by: &[ZERO, LAYOUT],
            chart: None,
            explain: "With --gpus N every rank holds the whole model and trains on its own micro-batch; the gradients are averaged across ranks. ZeRO-1 keeps each rank's AdamW moments for its share of the weights only (8 B × Ψ / N in F32), ZeRO-2 also only its share's gradients after the exchange (4 B × Ψ / N): the ZeRO paper's per-GPU formulas, in F32. With --cards each rank emulates its card (a ballast outside the pool): the planner's micro-batch per card (`estimate --train --cards`), then the same global batch split evenly, which overflows the smaller card. On the CPU the ranks are threads sharing one heap: the tensors' bytes, and no peak. 数据并行:每个 rank 的权重、优化器状态、梯度与峰值,与 ZeRO 的逐卡公式对照。",
        },
        View {
            name: "per_gpu",
            table: RANKS,
            caption: "Data-parallel training — every GPU's step peak, stacked, beside the ledger (MiB)",
            columns: &[RANK, CARD, MICRO_BATCH, ITEM, MEASURED_MIB, LAB_MIB, LAB_ERROR_PCT],
            group_by: &[ZERO, LAYOUT],
            chart: Some(PER_GPU_CHART),
            explain: "每张卡一根柱,高度是训练一步的峰值加上 NCCL:权重、AdamW 的两个矩(ZeRO-1/2 只保留本卡那一份)、峰值在两者之上多出的部分(梯度与激活)、NCCL 的缓冲(在内存池之外);右边浅色的柱是账本的同一分解。<br>One bar per GPU, as high as the step's peak plus NCCL: the weights, AdamW's two moments (ZeRO-1 and 2 keep this GPU's share only), what the peak adds above them (the gradients and the activations) and NCCL's buffers outside the pool; the paler bar beside it is the ledger's same split. Under ZeRO-2 the peak does not drop: candle's backward returns every gradient at once, before the exchange.",
        },
    ]
}
