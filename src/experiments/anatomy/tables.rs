//! The anatomy stage's tables: their columns, the CSVs' names, the views and charts the report draws.

use crate::experiments::oom;
use crate::stage::{ChartSpec, Flag, Series, Style, View};

/// Column names of the stage's tables.
pub mod col {
    pub const PRECISION: &str = "precision";
    pub const OUTCOME: &str = "outcome";
    pub const PREDICTED_WEIGHTS_GIB: &str = "predicted_weights_gib";
    pub const LOADED_ALLOCATED_GIB: &str = "loaded_allocated_gib";
    pub const WEIGHTS_MEASURED_GIB: &str = "weights_measured_gib";
    pub const WEIGHTS_VS_PREDICTED_PCT: &str = "weights_vs_predicted_pct";
    pub const LOADED_RESERVED_GIB: &str = "loaded_reserved_gib";
    pub const LOADED_PEAK_GIB: &str = "loaded_peak_gib";
    pub const AFTER_ALLOCATED_GIB: &str = "after_allocated_gib";
    pub const AFTER_RESERVED_GIB: &str = "after_reserved_gib";
    pub const AFTER_PEAK_GIB: &str = "after_peak_gib";
    pub const KV_ACT_DELTA_MIB: &str = "kv_act_delta_mib";
    pub const KV_CACHE_MIB: &str = "kv_cache_mib";
    pub const LOAD_S: &str = "load_s";
    pub const PROMPT_TOKENS: &str = "prompt_tokens";
    pub const NEW_TOKENS: &str = "new_tokens";
    pub const PREFILL_TOK_S: &str = "prefill_tok_s";
    pub const DECODE_TOK_S: &str = "decode_tok_s";
    pub const DECODE_CEILING_TOK_S: &str = "decode_ceiling_tok_s";
    pub const OOM_REQUEST_MIB: &str = "oom_request_mib";
    pub const OOM_DURING: &str = "oom_during";
    pub const REPORT_ALLOCATED_GIB: &str = "report_allocated_gib";
    pub const REPORT_RESERVED_GIB: &str = "report_reserved_gib";
    pub const REPORT_PEAK_GIB: &str = "report_peak_gib";
    pub const PYTORCH_H200_ALLOCATED_GIB: &str = "pytorch_h200_allocated_gib";
}

/// Table names.
pub const TABLE: &str = "anatomy";

pub const TIMELINE_TABLE: &str = "anatomy_timeline";

pub const OOM_TABLE: &str = "anatomy_oom";

/// Per precision: predicted weights beside measured allocated, peak, and the report's figure.
const MEMORY_CHART: ChartSpec = ChartSpec {
    title: "显存解剖 VRAM anatomy: weights and peak by precision",
    x: col::PRECISION,
    x_title: "precision",
    y_title: "GiB",
    series: &[
        Series::column("predicted weights", &[(col::PREDICTED_WEIGHTS_GIB, 1.0)]),
        Series::column("allocated after load (this run)", &[(col::LOADED_ALLOCATED_GIB, 1.0)]),
        Series::column("peak during generation (this run)", &[(col::AFTER_PEAK_GIB, 1.0)]),
        Series::column("allocated, report (RTX 4090, PyTorch)", &[(col::REPORT_ALLOCATED_GIB, 1.0)]),
    ],
    // A precision that ran out of memory has only its prediction to draw: the mark says why.
    flag: Some(Flag { column: col::OUTCOME, value: "oom", text: "OOM 显存不足 ({oom_request_mib} MiB asked)" }),
    ..ChartSpec::BARS
};

/// Allocated, reserved and peak over the timeline of snapshots.
const TIMELINE_CHART: ChartSpec = ChartSpec {
    title: "Memory timeline 显存时间线",
    x: "label",
    x_title: "snapshot",
    y_title: "MiB",
    series: &[
        Series::styled("allocated", &[("allocated_mib", 1.0)], Style::LinesMarkers),
        Series::styled("reserved", &[("reserved_mib", 1.0)], Style::LinesMarkers),
        Series::styled("peak", &[("peak_mib", 1.0)], Style::LinesMarkers),
    ],
    ..ChartSpec::LINES
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "memory",
            table: TABLE,
            caption: "Stage 1 — memory after loading and after generating (GiB): prediction, this run, the report (RTX 4090, PyTorch)",
            columns: &[PRECISION, OUTCOME, PREDICTED_WEIGHTS_GIB, LOADED_ALLOCATED_GIB, WEIGHTS_VS_PREDICTED_PCT, LOADED_RESERVED_GIB, LOADED_PEAK_GIB, AFTER_ALLOCATED_GIB, AFTER_PEAK_GIB, REPORT_ALLOCATED_GIB, REPORT_RESERVED_GIB, PYTORCH_H200_ALLOCATED_GIB],
            group_by: &[],
            chart: Some(MEMORY_CHART),
            explain: "BF16 权重 = 参数 × 2 字节,内存池里正好是预测的字节数;Q4_K_M 的权重是 GGUF 块(约 4.9 位/权重),以 BF16 计算,KV cache 和 logits 与 BF16 相同。reserved − allocated 是分配器留作复用的部分。F32 需要 28.37 GiB,超过这张卡的 23.52 GiB:加载中途 OOM(图中的红叉),失败的请求被记录下来,下一个精度照常运行。<br>BF16 weights are parameters × 2 bytes: the pool holds exactly the predicted bytes. Q4_K_M holds GGUF blocks (about 4.9 bits a weight) and computes in BF16, so its KV cache and logits are BF16's (the lab's Q4 before 2026-11-23 and `q4_k_m-f32` compute in F32). Reserved − allocated is what the allocator keeps for reuse; candle's stream-ordered pool returns freed memory at the next synchronisation, so it stays small. F32 needs 28.37 GiB, more than the card's 23.52: the load stops (the red cross on the chart), the request that failed is recorded, the next precision runs.",
        },
        View {
            name: "speed",
            table: TABLE,
            caption: "Stage 1 — speed and OOM (decode ceiling = bandwidth ÷ bytes read per token)",
            columns: &[PRECISION, LOAD_S, PROMPT_TOKENS, NEW_TOKENS, PREFILL_TOK_S, DECODE_TOK_S, DECODE_CEILING_TOK_S, KV_CACHE_MIB, OOM_REQUEST_MIB, OOM_DURING],
            group_by: &[],
            chart: None,
            explain: "解码一个 token 要读一遍全部权重:tokens/s ≤ 带宽 ÷ 每个 token 读取的字节。Decoding reads every weight once per token, so the ceiling is the memory bandwidth over the weight (and cache) bytes; the report's 38 tok/s on an RTX 4090 sits below its 66 tok/s ceiling.",
        },
        View {
            name: "timeline",
            table: TIMELINE_TABLE,
            caption: "Memory timeline / 显存时间线 (MiB)",
            columns: &["label", "allocated_mib", "reserved_mib", "peak_mib", "delta_allocated_mib", "device_used_mib", "process_used_mib"],
            group_by: &[],
            chart: Some(TIMELINE_CHART),
            explain: "After generating, allocated is back at the weights: the KV cache is freed when generation ends; the peak keeps it, with the transient activations.",
        },
        oom::view("oom", OOM_TABLE, "Stage 1 — why F32 did not load / OOM 诊断 (MiB)"),
    ]
}
