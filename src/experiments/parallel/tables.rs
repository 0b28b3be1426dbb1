//! The parallel stage's table: one row per rank of the tensor-parallel group and one for the whole
//! model on one device, each measured figure beside the ledger's (`estimate::parallel`).

use crate::error::Result;
use crate::memory::mib;
use crate::stage::{ChartSpec, Series, View};
use polars::prelude::*;

/// One rank (or the one-device run): measured and predicted, bytes.
#[derive(Debug, Clone, Default)]
pub struct GpuRow {
    pub layout: String,
    pub rank: usize,
    pub device: String,
    pub weights: Option<u64>,
    pub weights_predicted: u64,
    pub nccl: Option<u64>,
    pub nccl_predicted: u64,
    pub kv_cache: Option<u64>,
    pub kv_predicted: u64,
    pub peak_above_weights: Option<u64>,
    pub peak_above_predicted: u64,
    pub load_peak: Option<u64>,
    pub prefill_tok_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    /// Decode's ceiling: the bytes a token reads on this device over its measured read bandwidth.
    pub ceiling_tok_s: Option<f64>,
    /// A rank's decode with its sums skipped (`ranks::RankRun`): the step's own work.
    pub decode_tok_s_without_sums: Option<f64>,
    /// Generated tokens equal to the one-device run's, counted from the first.
    pub tokens_equal: Option<usize>,
    pub tokens: usize,
    pub outcome: String,
}

pub mod col {
    pub const LAYOUT: &str = "layout";
    pub const RANK: &str = "rank";
    pub const DEVICE: &str = "device";
    pub const WEIGHTS_MIB: &str = "weights_mib";
    pub const WEIGHTS_PREDICTED_MIB: &str = "weights_predicted_mib";
    pub const WEIGHTS_ERROR_PCT: &str = "weights_error_pct";
    pub const NCCL_MIB: &str = "nccl_mib";
    pub const NCCL_PREDICTED_MIB: &str = "nccl_predicted_mib";
    pub const KV_MIB: &str = "kv_cache_mib";
    pub const KV_PREDICTED_MIB: &str = "kv_cache_predicted_mib";
    pub const PEAK_ABOVE_MIB: &str = "peak_above_weights_mib";
    pub const PEAK_ABOVE_PREDICTED_MIB: &str = "peak_above_weights_predicted_mib";
    pub const PEAK_ABOVE_ERROR_PCT: &str = "peak_above_weights_error_pct";
    pub const LOAD_PEAK_MIB: &str = "load_peak_mib";
    pub const PREFILL_TOK_S: &str = "prefill_tok_s";
    pub const DECODE_TOK_S: &str = "decode_tok_s";
    pub const CEILING_TOK_S: &str = "decode_ceiling_tok_s";
    pub const WITHOUT_SUMS_TOK_S: &str = "decode_without_sums_tok_s";
    pub const SUMS_MS: &str = "sums_ms_per_token";
    pub const TOKENS_EQUAL: &str = "tokens_equal_to_one_device";
    pub const TOKENS: &str = "tokens";
    pub const OUTCOME: &str = "outcome";
}

pub const TABLE: &str = "parallel_ranks";

/// (predicted − measured) / measured, percent.
fn error_pct(measured: Option<u64>, predicted: u64) -> Option<f64> {
    measured.filter(|&m| m > 0).map(|m| 100.0 * (predicted as f64 - m as f64) / m as f64)
}

pub fn table(rows: &[GpuRow]) -> Result<DataFrame> {
    use col::*;
    let m = |f: fn(&GpuRow) -> Option<u64>| rows.iter().map(|r| f(r).map(mib)).collect::<Vec<_>>();
    let p = |f: fn(&GpuRow) -> u64| rows.iter().map(|r| mib(f(r))).collect::<Vec<_>>();
    Ok(df!(
        LAYOUT => rows.iter().map(|r| r.layout.clone()).collect::<Vec<_>>(),
        RANK => rows.iter().map(|r| r.rank as u32).collect::<Vec<_>>(),
        DEVICE => rows.iter().map(|r| r.device.clone()).collect::<Vec<_>>(),
        WEIGHTS_MIB => m(|r| r.weights),
        WEIGHTS_PREDICTED_MIB => p(|r| r.weights_predicted),
        WEIGHTS_ERROR_PCT => rows.iter().map(|r| error_pct(r.weights, r.weights_predicted)).collect::<Vec<_>>(),
        NCCL_MIB => m(|r| r.nccl),
        NCCL_PREDICTED_MIB => p(|r| r.nccl_predicted),
        KV_MIB => m(|r| r.kv_cache),
        KV_PREDICTED_MIB => p(|r| r.kv_predicted),
        PEAK_ABOVE_MIB => m(|r| r.peak_above_weights),
        PEAK_ABOVE_PREDICTED_MIB => p(|r| r.peak_above_predicted),
        PEAK_ABOVE_ERROR_PCT => rows.iter().map(|r| error_pct(r.peak_above_weights, r.peak_above_predicted)).collect::<Vec<_>>(),
        LOAD_PEAK_MIB => m(|r| r.load_peak),
        PREFILL_TOK_S => rows.iter().map(|r| r.prefill_tok_s).collect::<Vec<_>>(),
        DECODE_TOK_S => rows.iter().map(|r| r.decode_tok_s).collect::<Vec<_>>(),
        CEILING_TOK_S => rows.iter().map(|r| r.ceiling_tok_s).collect::<Vec<_>>(),
        WITHOUT_SUMS_TOK_S => rows.iter().map(|r| r.decode_tok_s_without_sums).collect::<Vec<_>>(),
        // What a token's sums cost: the summed step's time less the step's without them.
        SUMS_MS => rows.iter().map(|r| match (r.decode_tok_s, r.decode_tok_s_without_sums) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(1000.0 / a - 1000.0 / b),
            _ => None,
        }).collect::<Vec<_>>(),
        TOKENS_EQUAL => rows.iter().map(|r| r.tokens_equal.map(|n| n as u32)).collect::<Vec<_>>(),
        TOKENS => rows.iter().map(|r| r.tokens as u32).collect::<Vec<_>>(),
        OUTCOME => rows.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>(),
    )?)
}

/// Each GPU's bytes as one stacked bar, beside the ledger's: weights, the KV cache, what the
/// generation's peak adds above them (activations, logits) and NCCL's buffers outside the pool.
const PER_GPU_CHART: ChartSpec = ChartSpec {
    title: "每张卡的显存 Every GPU's memory — {layout}: measured beside the ledger",
    x: "rank {rank}",
    x_title: "GPU (rank): measured, then the ledger",
    y_title: "MiB",
    series: &[
        Series::stacked("measured", "weights", &[(col::WEIGHTS_MIB, 1.0)]),
        Series::stacked("measured", "KV cache", &[(col::KV_MIB, 1.0)]),
        Series::stacked(
            "measured",
            "transient (peak above weights − KV cache)",
            &[(col::PEAK_ABOVE_MIB, 1.0), (col::KV_MIB, -1.0)],
        ),
        Series::stacked("measured", "NCCL", &[(col::NCCL_MIB, 1.0)]),
        Series::stacked("ledger", "weights", &[(col::WEIGHTS_PREDICTED_MIB, 1.0)]),
        Series::stacked("ledger", "KV cache", &[(col::KV_PREDICTED_MIB, 1.0)]),
        Series::stacked(
            "ledger",
            "transient (peak above weights − KV cache)",
            &[(col::PEAK_ABOVE_PREDICTED_MIB, 1.0), (col::KV_PREDICTED_MIB, -1.0)],
        ),
        Series::stacked("ledger", "NCCL", &[(col::NCCL_PREDICTED_MIB, 1.0)]),
    ],
    ..ChartSpec::STACKED
};

/// Decode on one GPU and over the tensor-parallel group, each beside its ceiling. The pipeline is
/// left out: its stages run in turn, so a stage's own ceiling is not the pipeline's.
const DECODE_CHART: ChartSpec = ChartSpec {
    title: "解码速度 Decode on one GPU and over N, beside the ceiling",
    x: col::LAYOUT,
    x_title: "layout (a group's ranks decode together: its first rank shown)",
    y_title: "tok/s",
    only: Some((col::LAYOUT, &["one device*", "tensor-parallel*"])),
    series: &[
        Series::column("decode, measured", &[(col::DECODE_TOK_S, 1.0)]),
        Series::column("ceiling: a rank's bytes ÷ the measured read bandwidth", &[(col::CEILING_TOK_S, 1.0)]),
    ],
    ..ChartSpec::BARS
};

pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "ranks",
            table: TABLE,
            caption: "Tensor parallelism — every rank's bytes, measured beside the ledger, and decode beside one device",
            columns: &[LAYOUT, RANK, DEVICE, WEIGHTS_MIB, WEIGHTS_PREDICTED_MIB, WEIGHTS_ERROR_PCT, NCCL_MIB, NCCL_PREDICTED_MIB, KV_MIB, KV_PREDICTED_MIB, PEAK_ABOVE_MIB, PEAK_ABOVE_PREDICTED_MIB, PEAK_ABOVE_ERROR_PCT, LOAD_PEAK_MIB, PREFILL_TOK_S, DECODE_TOK_S, CEILING_TOK_S, TOKENS_EQUAL, TOKENS, OUTCOME],
            group_by: &[],
            chart: None,
            explain: "Each rank holds its heads of q/k/v and its columns of gate/up (rows of o and down), its rows of an untied head (each rank's logits gathered to all through one more sum), the embedding and norms whole, and its K/V heads' share of the cache; one all-reduce after attention and one after the MLP join the ranks. NCCL's own memory (its communicator and channel buffers) is outside candle's pool: read as the device's used bytes that the pool does not explain. On GPUs a rank decodes with the lab's static step captured as one CUDA graph, NCCL's two sums a layer inside it; the one-device row runs the same step unsplit, and the row below it the ranks' loop (candle's ops, one launch at a time) on one device. Greedy tokens are counted against that loop (the same arithmetic; the loop row against the fused step): in BF16 a sum made in another order rounds differently, and a synthetic model's logits are nearly flat, so a rounding can change the greedy pick — F32 shows the layouts agree. A pipeline's stages run in turn on one thread: each GPU waits while the others compute. On the CPU the ranks are threads sharing one heap: weights are the tensors' bytes, and no peak is read. 每个 rank 持有自己的注意力头和 MLP 列;未共享权重的输出层按词表行切分(logits 再汇总到每个 rank);嵌入和归一化每个 rank 都有完整一份。NCCL 自身的显存在 candle 的内存池之外。",
        },
        View {
            name: "per_gpu",
            table: TABLE,
            caption: "Every GPU's bytes, stacked: weights, KV cache, transient, NCCL — measured beside the ledger (MiB)",
            columns: &[RANK, DEVICE, WEIGHTS_MIB, WEIGHTS_PREDICTED_MIB, KV_MIB, KV_PREDICTED_MIB, PEAK_ABOVE_MIB, PEAK_ABOVE_PREDICTED_MIB, NCCL_MIB, NCCL_PREDICTED_MIB, OUTCOME],
            group_by: &[LAYOUT],
            chart: Some(PER_GPU_CHART),
            explain: "每张卡一根柱:权重、KV cache、生成峰值在权重之上多出的瞬时部分(激活与 logits)、NCCL 的缓冲(在 candle 内存池之外);右边浅色的柱是估算器逐卡账本的同一分解。张量并行的每张卡都持有完整的嵌入,所以权重多于总量的 1/N;NCCL 在各卡上不同,取决于它连接几个对端。<br>One bar per GPU: the weights, the KV cache, what generation's peak adds above the weights besides the cache (activations, logits), and NCCL's buffers outside candle's pool; the paler bar beside it is the ledger's same split (`estimate --tp N`). A tensor-parallel GPU holds the embedding whole, so more than 1/N of the weights; NCCL differs per GPU with the peers it connects to. The KV cache and the transient are a few MiB against GiB of weights: read them in the table.",
        },
        View {
            name: "decode",
            table: TABLE,
            caption: "Decode over 1, 2 or 4 GPUs beside its ceiling (tok/s)",
            columns: &[LAYOUT, RANK, DEVICE, PREFILL_TOK_S, DECODE_TOK_S, CEILING_TOK_S, TOKENS_EQUAL, TOKENS, OUTCOME],
            group_by: &[],
            chart: Some(DECODE_CHART),
            explain: "上限 = 每个 token 读取的字节 ÷ 实测读带宽:N 张卡各读 1/N 的权重,上限约为 N 倍;每层两次 all-reduce 的固定开销让实测低于上限。2026-11-27 之前的运行(如下面两个文件夹)中 rank 用 candle 的算子逐个启动内核解码,没有随卡数变快;此后每个 rank 的解码步被捕获为一个 CUDA graph。流水线不在图中:各阶段轮流运行,速度见表。<br>The ceiling is the bytes a token reads ÷ the read bandwidth measured: N GPUs each read about 1/N of the weights, so N times the ceiling; two sums a layer, each with its fixed cost, keep the measured decode below it. Runs before 2026-11-27 (such as the two folders below) decoded a rank with candle's ops launched one at a time and did not speed up with more GPUs; since then each rank's step is one captured CUDA graph. \"one device, the ranks' loop\" is candle's loop on one GPU. The pipeline is left out of the chart (its stages run in turn: a stage's own ceiling is not the pipeline's); its decode is in the table. Two run folders drawn as one (`h200x4/2026-11-26-four-gpus/tp7-g2` and `tp7`) give 1, 2 and 4 GPUs.",
        },
    ]
}
