//! The offload stage's tables: their columns, the CSVs' names, the views and charts the report
//! draws.

use super::modes::ModeRow;
use super::prediction::Prediction;
use super::pytorch::report_and_article;
use crate::error::Result;
use crate::memory::gib;
use crate::model::offload::placement::{Bandwidths, Home};
use crate::stage::{ChartSpec, Series, View};
use polars::prelude::*;

pub mod col {
    pub const MODE: &str = "mode";
    pub const RUN_BY: &str = "run_by";
    pub const OUTCOME: &str = "outcome";
    pub const GPU_LAYERS: &str = "gpu_layers";
    pub const CPU_LAYERS: &str = "cpu_layers";
    pub const STREAMED_LAYERS: &str = "streamed_layers";
    pub const BUDGET_GIB: &str = "gpu_budget_gib";
    pub const PREDICTED_GPU_GIB: &str = "predicted_gpu_gib";
    pub const ALLOCATED_GIB: &str = "allocated_gib";
    pub const PEAK_GIB: &str = "peak_gib";
    pub const DEVICE_USED_GIB: &str = "device_used_gib";
    pub const HOST_GIB: &str = "host_weights_gib";
    pub const PREFILL_S: &str = "first_pass_s";
    pub const TOK_S: &str = "decode_tok_s";
    pub const PCIE_MIB_TOKEN: &str = "pcie_mib_per_token";
    pub const HOST_MIB_TOKEN: &str = "host_mib_per_token";
    pub const CEILING_TOK_S: &str = "ceiling_tok_s";
    pub const BOUND_BY: &str = "ceiling_bound_by";
    pub const MS_PER_TOKEN: &str = "ms_per_token";
    pub const HOST_KERNEL_MS: &str = "host_kernel_ms_per_token";
    pub const HOST_KERNEL_GBS: &str = "host_kernel_gb_s";
    pub const CPU_LAYERS_MS: &str = "cpu_layers_ms_per_token";
    pub const CROSSINGS_MS: &str = "crossings_ms_per_token";
    pub const PCT_CEILING: &str = "pct_of_ceiling";
    pub const SLOWDOWN_PCT: &str = "slowdown_vs_full_pct";
    pub const VS_ACCELERATE: &str = "x_accelerate";
    pub const REPORT_TOK_S: &str = "report_tok_s";
    pub const ARTICLE_TOK_S: &str = "article_tok_s";
    pub const ARTICLE_GPU_MIB: &str = "article_gpu_mib";
    pub const NOTE: &str = "note";
    // offload_bandwidths
    pub const WHAT: &str = "what";
    pub const GBS: &str = "gb_s";
    // offload_predict
    pub const CASE: &str = "case";
    pub const CARD: &str = "card";
    pub const MODEL_GIB: &str = "model_gib";
    pub const PREDICTED_TOK_S: &str = "predicted_tok_s";
    pub const BASIS: &str = "basis";
}

pub const TABLE: &str = "offload";

pub const BANDWIDTHS_TABLE: &str = "offload_bandwidths";

pub const PREDICT_TABLE: &str = "offload_predict";

pub fn table(rows: &[ModeRow], report_model: bool) -> Result<DataFrame> {
    let full = rows.iter().find(|r| r.mode == "full" && r.outcome.is_ok()).and_then(|r| r.tok_s);
    let accel = rows.iter().find(|r| r.mode == "pytorch accelerate").and_then(|r| r.tok_s);
    let count = |r: &ModeRow, h: Home| r.placement.as_ref().map(|p| p.count(h) as u64);
    let mib = |b: Option<u64>| b.map(|b| b as f64 / crate::memory::MIB);
    let gibo = |b: Option<u64>| b.map(gib);
    Ok(df!(
        col::MODE => rows.iter().map(|r| r.mode.clone()).collect::<Vec<_>>(),
        col::RUN_BY => rows.iter().map(|r| r.run_by.clone()).collect::<Vec<_>>(),
        col::OUTCOME => rows.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        col::GPU_LAYERS => rows.iter().map(|r| count(r, Home::Gpu)).collect::<Vec<_>>(),
        col::CPU_LAYERS => rows.iter().map(|r| count(r, Home::Cpu)).collect::<Vec<_>>(),
        col::STREAMED_LAYERS => rows.iter().map(|r| count(r, Home::Streamed)).collect::<Vec<_>>(),
        col::BUDGET_GIB => rows.iter().map(|r| gibo(r.budget)).collect::<Vec<_>>(),
        col::PREDICTED_GPU_GIB => rows.iter().map(|r| gibo(r.predicted_gpu)).collect::<Vec<_>>(),
        col::ALLOCATED_GIB => rows.iter().map(|r| r.loaded.as_ref().map(|s| gib(s.allocated))).collect::<Vec<_>>(),
        col::PEAK_GIB => rows.iter().map(|r| r.after.as_ref().map(|s| gib(s.peak))).collect::<Vec<_>>(),
        col::DEVICE_USED_GIB => rows.iter().map(|r| gibo(r.device_used)).collect::<Vec<_>>(),
        col::HOST_GIB => rows.iter().map(|r| gibo(r.host_bytes)).collect::<Vec<_>>(),
        col::PREFILL_S => rows.iter().map(|r| r.first_pass_s).collect::<Vec<_>>(),
        col::TOK_S => rows.iter().map(|r| r.tok_s).collect::<Vec<_>>(),
        col::PCIE_MIB_TOKEN => rows.iter().map(|r| mib(r.pcie_per_token)).collect::<Vec<_>>(),
        col::HOST_MIB_TOKEN => rows.iter().map(|r| mib(r.host_per_token)).collect::<Vec<_>>(),
        col::CEILING_TOK_S => rows.iter().map(|r| r.ceiling).collect::<Vec<_>>(),
        col::BOUND_BY => rows.iter().map(|r| r.bound.clone()).collect::<Vec<_>>(),
        col::MS_PER_TOKEN => rows.iter().map(|r| r.tok_s.map(|t| 1e3 / t)).collect::<Vec<_>>(),
        col::HOST_KERNEL_MS => rows.iter().map(|r| r.profile.filter(|p| p.kernel_s > 0.0).map(|p| 1e3 * p.kernel_s)).collect::<Vec<_>>(),
        col::HOST_KERNEL_GBS => rows.iter().map(|r| r.profile.and_then(|p| p.kernel_gbs())).collect::<Vec<_>>(),
        col::CPU_LAYERS_MS => rows.iter().map(|r| r.profile.filter(|p| p.cpu_layers_s > 0.0).map(|p| 1e3 * p.cpu_layers_s)).collect::<Vec<_>>(),
        col::CROSSINGS_MS => rows.iter().map(|r| r.profile.filter(|p| p.crossings_s > 0.0).map(|p| 1e3 * p.crossings_s)).collect::<Vec<_>>(),
        col::PCT_CEILING => rows.iter().map(|r| Some(100.0 * r.tok_s? / r.ceiling?)).collect::<Vec<_>>(),
        col::SLOWDOWN_PCT => rows.iter().map(|r| Some(100.0 * (1.0 - r.tok_s? / full?))).collect::<Vec<_>>(),
        col::VS_ACCELERATE => rows.iter().map(|r| Some(r.tok_s? / accel?)).collect::<Vec<_>>(),
        col::REPORT_TOK_S => rows.iter().map(|r| report_and_article(&r.mode, report_model).0).collect::<Vec<_>>(),
        col::ARTICLE_TOK_S => rows.iter().map(|r| report_and_article(&r.mode, report_model).1.map(|a| a.1)).collect::<Vec<_>>(),
        col::ARTICLE_GPU_MIB => rows.iter().map(|r| report_and_article(&r.mode, report_model).1.map(|a| a.0)).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

pub fn predict_table(p: &[Prediction]) -> Result<DataFrame> {
    Ok(df!(
        col::CASE => p.iter().map(|x| x.case.clone()).collect::<Vec<_>>(),
        col::CARD => p.iter().map(|x| x.card.clone()).collect::<Vec<_>>(),
        col::MODEL_GIB => p.iter().map(|x| gib(x.model_bytes)).collect::<Vec<_>>(),
        col::PREDICTED_TOK_S => p.iter().map(|x| x.tok_s).collect::<Vec<_>>(),
        col::ARTICLE_TOK_S => p.iter().map(|x| x.article).collect::<Vec<_>>(),
        col::BASIS => p.iter().map(|x| x.basis.clone()).collect::<Vec<_>>(),
    )?)
}

pub fn bandwidths_table(bw: &Bandwidths, gpu: bool) -> Result<DataFrame> {
    let note = if gpu { "measured in this run" } else { "CPU stand-in: the host read for all three" };
    Ok(df!(
        col::WHAT => ["device read (GPU layers)", "host → device, pinned (streamed layers)", "host read by the CPU (CPU layers)"],
        col::GBS => [bw.device, bw.pcie, bw.host],
        col::NOTE => [note, note, note],
    )?)
}

/// Decode tok/s per mode beside its ceiling (log scale: 0.6 to 200 tok/s).
const MODES_CHART: ChartSpec = ChartSpec {
    title: "卸载 Offload: decode speed by mode",
    x: col::MODE,
    x_title: "mode",
    y_title: "tok/s",
    y_log: true,
    series: &[
        Series::column("measured tok/s", &[(col::TOK_S, 1.0)]),
        Series::column("ceiling from this run's bandwidths", &[(col::CEILING_TOK_S, 1.0)]),
        Series::column("report (RTX 4090, PyTorch)", &[(col::REPORT_TOK_S, 1.0)]),
        Series::column("unified-memory article (14B on a 4090)", &[(col::ARTICLE_TOK_S, 1.0)]),
    ],
    ..ChartSpec::BARS
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "modes",
            table: TABLE,
            caption: "Stage 4b — every mode on the same weights: GPU memory, tok/s, bytes crossing PCIe per token, and the ceiling from this run's bandwidths",
            columns: &[MODE, RUN_BY, OUTCOME, GPU_LAYERS, CPU_LAYERS, STREAMED_LAYERS, BUDGET_GIB, PREDICTED_GPU_GIB, ALLOCATED_GIB, PEAK_GIB, DEVICE_USED_GIB, PREFILL_S, TOK_S, PCIE_MIB_TOKEN, HOST_MIB_TOKEN, CEILING_TOK_S, PCT_CEILING, MS_PER_TOKEN, CPU_LAYERS_MS, HOST_KERNEL_MS, HOST_KERNEL_GBS, CROSSINGS_MS, SLOWDOWN_PCT, VS_ACCELERATE, REPORT_TOK_S, ARTICLE_TOK_S, ARTICLE_GPU_MIB, NOTE],
            group_by: &[],
            chart: Some(MODES_CHART),
            explain: "Streaming moves every offloaded weight over PCIe once per token, so its ceiling is the pinned bandwidth ÷ those bytes; accelerate moves the same bytes but one layer at a time without overlap, from pageable memory. Computing the offloaded layers where they live (split) reads them at host-memory speed instead, several times PCIe. Unified memory with room for every page ends up resident on the GPU (managed, read-mostly, prefetched): no offload at all; preferred-location CPU reads every weight over PCIe each token (device_used is what the mode added on the GPU, managed pages included; the pool's peak includes loading, where each tensor is made on the GPU before it moves to its home — the 1.1 GiB of the managed rows is the embedding table passing through). 显存预算内最快的方式:在权重所在的地方计算,而不是搬运它们。",
        },
        View {
            name: "bandwidths",
            table: BANDWIDTHS_TABLE,
            caption: "Stage 4b — the bandwidths the placements were chosen and judged by (this run)",
            columns: &[WHAT, GBS, NOTE],
            group_by: &[],
            chart: None,
            explain: "Hybrid streams a share of the offloaded layers equal to PCIe ÷ (PCIe + host read) and computes the rest on the CPU, so both straws are busy at once.",
        },
        View {
            name: "predict",
            table: PREDICT_TABLE,
            caption: "Stage 4b — the article's oversubscription on paper: the predicted model on the predicted card, from this run's measurements",
            columns: &[CASE, CARD, MODEL_GIB, PREDICTED_TOK_S, ARTICLE_TOK_S, BASIS],
            group_by: &[],
            chart: None,
            explain: "Oversubscribing managed memory is never run here (it can hang a shared GPU): the unified modes are predicted from the migration and remote-read rates measured above, the lab's placements from their ceilings. 超额订阅只在纸面上预测。",
        },
    ]
}
