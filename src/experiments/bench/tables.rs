//! The speed stage's tables: their columns, the CSVs' names, the views and charts the report draws.

use crate::stage::{ChartSpec, Series, View};

pub mod col {
    pub const PRECISION: &str = "precision";
    pub const VARIANT: &str = "variant";
    pub const BATCH: &str = "batch";
    pub const SEQ: &str = "seq";
    pub const OUTCOME: &str = "outcome";
    pub const MS_PER_STEP: &str = "ms_per_step";
    pub const ISSUE_MS: &str = "issue_ms";
    pub const TOK_S: &str = "tok_s";
    pub const READ_GB: &str = "read_gb_per_step";
    pub const CEILING_TOK_S: &str = "ceiling_tok_s";
    pub const PCT_CEILING: &str = "pct_of_ceiling";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const LEDGER_PEAK_MIB: &str = "ledger_peak_mib";
    pub const PYTORCH_TOK_S: &str = "pytorch_tok_s";
    pub const VS_PYTORCH: &str = "x_pytorch";
    pub const OTHER_TOK_S: &str = "other_stack_tok_s";
    pub const VS_OTHER: &str = "x_other_stack";
    pub const OTHER: &str = "other_stack";
    pub const SAME_IDS: &str = "ids_as_fused_loop";
    pub const NOTE: &str = "note";
}

pub const DECODE_TABLE: &str = "bench_decode";

pub const PREFILL_TABLE: &str = "bench_prefill";

/// Batch-1 decode tok/s per precision and variant beside its ceiling and PyTorch's.
const DECODE_CHART: ChartSpec = ChartSpec {
    title: "速度 Decode speed beside its ceiling",
    x: "{precision} {variant} ×{batch}",
    x_title: "precision, variant, batch",
    y_title: "tok/s",
    series: &[
        Series::column("the lab (this run)", &[(col::TOK_S, 1.0)]),
        Series::column("ceiling: read bandwidth ÷ bytes per step", &[(col::CEILING_TOK_S, 1.0)]),
        Series::column("PyTorch (same GPU, same call)", &[(col::PYTORCH_TOK_S, 1.0)]),
        Series::column("llama.cpp (the other_stack column says which run)", &[(col::OTHER_TOK_S, 1.0)]),
    ],
    ..ChartSpec::BARS
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "decode",
            table: DECODE_TABLE,
            caption: "Speed — decoding: ms per step, the host's share, tok/s beside the ceiling (read bandwidth ÷ bytes per step), PyTorch in the same call, llama.cpp",
            columns: &[PRECISION, VARIANT, BATCH, OUTCOME, MS_PER_STEP, ISSUE_MS, TOK_S, READ_GB, CEILING_TOK_S, PCT_CEILING, PYTORCH_TOK_S, VS_PYTORCH, OTHER_TOK_S, VS_OTHER, OTHER, SAME_IDS],
            group_by: &[],
            chart: Some(DECODE_CHART),
            explain: "ceiling = this run's read-kernel bandwidth ÷ (weights but the embedding table + the KV cache at the mean context), × the batch. issue_ms close to ms_per_step means the GPU waits on the host launching kernels; far below it, the GPU's own time is the limit. The variants add one step each: separate (candle's defaults), untracked (cudarc's per-argument events off), fused (q|k|v and gate|up stacked), graph (the step captured once as a CUDA graph, one launch per token), kernel (the graph with the lab's kernel rotating q and k and storing k and v: seven of candle's kernels per layer in one), gemv (and the lab's matrix-vector kernel for every product, its bias, residual or silu·up in the same kernel), own (and the norms inside the products, attention in one kernel, the greedy pick on the device by the lab's kernel). 解码速度和它的带宽上限。",
        },
        View {
            name: "prefill",
            table: PREFILL_TABLE,
            caption: "Speed — prefill with last-token logits: tok/s, the memory peak beside the ledger's, PyTorch, llama.cpp",
            columns: &[PRECISION, VARIANT, SEQ, OUTCOME, TOK_S, PEAK_MIB, LEDGER_PEAK_MIB, PYTORCH_TOK_S, VS_PYTORCH, OTHER_TOK_S, VS_OTHER, OTHER, NOTE],
            group_by: &[],
            chart: None,
            explain: "A prefill is compute-bound: its tok/s is set by matrix products and attention, not by bandwidth. The memory peak must stay what stages 1–2 measured: the ledger's peak sits beside it. The fused variant's attention is bounded (chunks of scores in memory); own's, where its kernel runs (CUDA, BF16), is the lab's fused kernel: no scores in memory, so its peak is the ledger's flash row, lower. 预填充速度与显存峰值。",
        },
    ]
}
