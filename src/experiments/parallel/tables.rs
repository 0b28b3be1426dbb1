//! The parallel stage's table: one row per rank of the tensor-parallel group and one for the whole
//! model on one device, each measured figure beside the ledger's (`estimate::parallel`).

use crate::error::Result;
use crate::memory::mib;
use crate::stage::View;
use polars::prelude::*;

/// One rank (or the one-device run): measured and predicted, bytes.
#[derive(Debug, Clone, Default)]
pub struct Row {
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
    pub const TOKENS_EQUAL: &str = "tokens_equal_to_one_device";
    pub const TOKENS: &str = "tokens";
    pub const OUTCOME: &str = "outcome";
}

pub const TABLE: &str = "parallel_ranks";

/// (predicted − measured) / measured, percent.
fn error_pct(measured: Option<u64>, predicted: u64) -> Option<f64> {
    measured.filter(|&m| m > 0).map(|m| 100.0 * (predicted as f64 - m as f64) / m as f64)
}

pub fn table(rows: &[Row]) -> Result<DataFrame> {
    use col::*;
    let m = |f: fn(&Row) -> Option<u64>| rows.iter().map(|r| f(r).map(mib)).collect::<Vec<_>>();
    let p = |f: fn(&Row) -> u64| rows.iter().map(|r| mib(f(r))).collect::<Vec<_>>();
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
        TOKENS_EQUAL => rows.iter().map(|r| r.tokens_equal.map(|n| n as u32)).collect::<Vec<_>>(),
        TOKENS => rows.iter().map(|r| r.tokens as u32).collect::<Vec<_>>(),
        OUTCOME => rows.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>(),
    )?)
}

pub fn views() -> Vec<View> {
    use col::*;
    vec![View {
        name: "ranks",
        table: TABLE,
        caption: "Tensor parallelism — every rank's bytes, measured beside the ledger, and decode beside one device",
        columns: &[LAYOUT, RANK, DEVICE, WEIGHTS_MIB, WEIGHTS_PREDICTED_MIB, WEIGHTS_ERROR_PCT, NCCL_MIB, NCCL_PREDICTED_MIB, KV_MIB, KV_PREDICTED_MIB, PEAK_ABOVE_MIB, PEAK_ABOVE_PREDICTED_MIB, PEAK_ABOVE_ERROR_PCT, LOAD_PEAK_MIB, PREFILL_TOK_S, DECODE_TOK_S, CEILING_TOK_S, TOKENS_EQUAL, TOKENS, OUTCOME],
        group_by: &[],
        chart: None,
        explain: "Each rank holds its heads of q/k/v and its columns of gate/up (rows of o and down), the embedding, norms and head whole, and its K/V heads' share of the cache; one all-reduce after attention and one after the MLP join the ranks. NCCL's own memory (its communicator and channel buffers) is outside candle's pool: read as the device's used bytes that the pool does not explain. A rank decodes with candle's ops and an all-reduce per half-layer; the one-device row runs the lab's fused step, and the row below it the ranks' loop on one device. Greedy tokens are counted against that loop (the same arithmetic; the loop row against the fused step): in BF16 a sum made in another order rounds differently, and a synthetic model's logits are nearly flat, so a rounding can change the greedy pick — F32 shows the layouts agree. A pipeline's stages run in turn on one thread: each GPU waits while the others compute. On the CPU the ranks are threads sharing one heap: weights are the tensors' bytes, and no peak is read. 每个 rank 持有自己的注意力头和 MLP 列;嵌入、归一化和输出层每个 rank 都有完整一份。NCCL 自身的显存在 candle 的内存池之外。",
    }]
}
