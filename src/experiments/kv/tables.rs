//! Stage 2's tables: their columns, the CSVs' names, the views and charts the report draws.

use super::decode::{ledger_pct, DecodePoint};
use super::limit::ContextLimit;
use super::sweep::PrefillStep;
use crate::error::Result;
use crate::experiments::oom;
use crate::memory::mib;
use crate::stage::{Axis, ChartSpec, Outcome, Series, Style, View};
use polars::prelude::*;

/// Column names of the stage's tables.
pub mod col {
    pub const PRECISION: &str = "precision";
    pub const ATTENTION: &str = "attention";
    pub const LOGITS: &str = "logits";
    pub const SEQ: &str = "seq";
    pub const BATCH: &str = "batch";
    pub const OUTCOME: &str = "outcome";
    pub const BASE_MIB: &str = "base_mib";
    pub const HELD_MIB: &str = "held_mib";
    pub const GROWTH_VS_PREVIOUS_MIB: &str = "growth_vs_previous_mib";
    pub const KV_MIB: &str = "kv_mib";
    pub const KV_MEASURED_MIB: &str = "kv_measured_mib";
    pub const KV_GQA_FORMULA_MIB: &str = "kv_gqa_formula_mib";
    pub const KV_VS_GQA_PCT: &str = "kv_vs_gqa_pct";
    pub const KV_NAIVE_FORMULA_MIB: &str = "kv_naive_formula_mib";
    pub const LOGITS_MIB: &str = "logits_mib";
    pub const LOGITS_FORMULA_MIB: &str = "logits_formula_mib";
    pub const OTHER_MIB: &str = "other_mib";
    pub const GROWTH_PER_1K_TOKENS_MIB: &str = "growth_per_1k_tokens_mib";
    pub const RESERVED_MIB: &str = "reserved_mib";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const TRANSIENT_MIB: &str = "transient_mib";
    pub const RESERVED_PEAK_MIB: &str = "reserved_peak_mib";
    pub const OUTSIDE_POOL_MIB: &str = "outside_pool_mib";
    pub const SECONDS: &str = "seconds";
    pub const PREFILL_TOK_S: &str = "prefill_tok_s";
    pub const OOM_REQUEST_MIB: &str = "oom_request_mib";
    pub const OOM_DURING: &str = "oom_during";
    /// A mixture's runs only: the most tokens one expert took (`PrefillStep::busiest_expert`).
    pub const BUSIEST_EXPERT_TOKENS: &str = "busiest_expert_tokens";
    // kv_limit
    pub const CARD: &str = "card";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const FIRST_OOM: &str = "first_oom";
    pub const RESOLUTION: &str = "resolution";
    pub const TRIALS: &str = "trials";
    pub const OOM_RETRY: &str = "oom_retry";
    // kv_decode
    pub const CACHE: &str = "cache";
    pub const TOKENS: &str = "tokens";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const LEDGER_MIB: &str = "ledger_mib";
    pub const LEDGER_VS_ALLOCATED_PCT: &str = "ledger_vs_allocated_pct";
    pub const CACHED_MIB: &str = "cached_mib";
    pub const PEAK_ABOVE_ALLOCATED_MIB: &str = "peak_above_allocated_mib";
    pub const TOK_S: &str = "tok_s";
}

/// Table names.
pub const PREFILL_TABLE: &str = "kv_prefill";

pub const LIMIT_TABLE: &str = "kv_limit";

pub const DECODE_TABLE: &str = "kv_decode";

pub const BATCH_TABLE: &str = "kv_batch";

pub const OOM_TABLE: &str = "kv_oom";

pub fn limit_table(limits: &[ContextLimit], card: &str) -> Result<DataFrame> {
    Ok(df!(
        col::CARD => vec![card.to_string(); limits.len()],
        col::PRECISION => limits.iter().map(|l| l.precision.clone()).collect::<Vec<_>>(),
        col::LOGITS => limits.iter().map(|l| l.logits.name().to_string()).collect::<Vec<_>>(),
        col::ATTENTION => limits.iter().map(|l| l.attention.clone()).collect::<Vec<_>>(),
        col::BATCH => limits.iter().map(|l| l.batch as u64).collect::<Vec<_>>(),
        col::MAX_CONTEXT => limits.iter().map(|l| l.max_ok as u64).collect::<Vec<_>>(),
        col::FIRST_OOM => limits.iter().map(|l| l.first_oom as u64).collect::<Vec<_>>(),
        col::RESOLUTION => limits.iter().map(|l| l.resolution as u64).collect::<Vec<_>>(),
        col::TRIALS => limits.iter().map(|l| l.trials.len() as u64).collect::<Vec<_>>(),
        col::OOM_RETRY => limits.iter().map(|l| l.oom_retry).collect::<Vec<_>>(),
    )?)
}

fn pct(measured: u64, predicted: u64) -> Option<f64> {
    (predicted > 0 && measured > 0).then(|| (measured as f64 - predicted as f64) / predicted as f64 * 100.0)
}

/// The ledger, one row a step, in MiB. Steps of several sweeps may be stacked: the growth
/// against the previous row is taken within the same sweep (precision, logits, attention, batch).
pub fn prefill_table(steps: &[PrefillStep]) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&PrefillStep) -> u64| steps.iter().map(|st| mib(f(st))).collect::<Vec<f64>>();
    let same_sweep = |a: &PrefillStep, b: &PrefillStep| {
        a.precision == b.precision && a.logits == b.logits && a.attention == b.attention && a.batch == b.batch
    };
    let growth: Vec<Option<f64>> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let prev = (i > 0 && same_sweep(&steps[i - 1], st)).then(|| &steps[i - 1]);
            match prev {
                Some(p) => (st.outcome.is_ok() && p.outcome.is_ok()).then(|| mib(st.held()) - mib(p.held())),
                None => st.outcome.is_ok().then(|| mib(st.held())),
            }
        })
        .collect();
    Ok(df!(
        col::PRECISION => steps.iter().map(|st| st.precision.clone()).collect::<Vec<_>>(),
        col::ATTENTION => steps.iter().map(|st| st.attention.clone()).collect::<Vec<_>>(),
        col::LOGITS => steps.iter().map(|st| st.logits.clone()).collect::<Vec<_>>(),
        col::SEQ => steps.iter().map(|st| st.seq as u64).collect::<Vec<_>>(),
        col::BATCH => steps.iter().map(|st| st.batch as u64).collect::<Vec<_>>(),
        col::OUTCOME => steps.iter().map(|st| st.outcome.as_str()).collect::<Vec<_>>(),
        col::BASE_MIB => m(&|st| st.base),
        col::HELD_MIB => m(&|st| st.held()),
        col::GROWTH_VS_PREVIOUS_MIB => growth,
        col::KV_MIB => m(&|st| st.kv_bytes),
        col::KV_MEASURED_MIB => m(&|st| st.kv_measured),
        col::KV_GQA_FORMULA_MIB => m(&|st| st.predicted_kv_gqa),
        col::KV_VS_GQA_PCT => steps.iter().map(|st| pct(st.kv_bytes, st.predicted_kv_gqa)).collect::<Vec<_>>(),
        col::KV_NAIVE_FORMULA_MIB => m(&|st| st.predicted_kv_naive),
        col::LOGITS_MIB => m(&|st| st.logits_bytes),
        col::LOGITS_FORMULA_MIB => m(&|st| st.predicted_logits),
        col::OTHER_MIB => steps.iter().map(|st| st.other() as f64 / crate::memory::MIB).collect::<Vec<_>>(),
        col::GROWTH_PER_1K_TOKENS_MIB => steps.iter().map(|st| st.outcome.is_ok().then(|| mib(st.held()) / (st.seq * st.batch) as f64 * 1024.0)).collect::<Vec<_>>(),
        col::RESERVED_MIB => m(&|st| st.reserved),
        col::PEAK_MIB => m(&|st| st.peak),
        col::TRANSIENT_MIB => m(&|st| st.transient()),
        col::RESERVED_PEAK_MIB => m(&|st| st.reserved_peak),
        col::OUTSIDE_POOL_MIB => steps.iter().map(|st| st.outside_pool.map(mib)).collect::<Vec<_>>(),
        col::SECONDS => steps.iter().map(|st| st.seconds).collect::<Vec<_>>(),
        col::PREFILL_TOK_S => steps.iter().map(|st| if st.outcome.is_ok() { (st.seq * st.batch) as f64 / st.seconds.max(1e-9) } else { f64::NAN }).collect::<Vec<_>>(),
        col::OOM_REQUEST_MIB => steps.iter().map(|st| st.oom_request.map(mib)).collect::<Vec<_>>(),
        col::OOM_DURING => steps.iter().map(|st| st.oom_during.clone()).collect::<Vec<_>>(),
    )?
    .pipe(|df| with_busiest_expert(df, steps))?)
}

/// A mixture's tables gain the busiest expert's tokens; a dense model's stay as they were.
fn with_busiest_expert(mut df: DataFrame, steps: &[PrefillStep]) -> PolarsResult<DataFrame> {
    if steps.iter().any(|st| st.busiest_expert.is_some()) {
        let v: Vec<Option<u64>> = steps.iter().map(|st| st.busiest_expert).collect();
        df.with_column(Column::new(col::BUSIEST_EXPERT_TOKENS.into(), v))?;
    }
    Ok(df)
}

pub fn decode_table(points: &[DecodePoint]) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&DecodePoint) -> u64| points.iter().map(|p| mib(f(p))).collect::<Vec<f64>>();
    Ok(df!(
        col::PRECISION => points.iter().map(|p| p.precision.clone()).collect::<Vec<_>>(),
        col::CACHE => points.iter().map(|p| p.cache.clone()).collect::<Vec<_>>(),
        col::TOKENS => points.iter().map(|p| p.tokens as u64).collect::<Vec<_>>(),
        col::OUTCOME => points.iter().map(|p| p.outcome.as_str()).collect::<Vec<_>>(),
        col::BASE_MIB => m(&|p| p.base),
        col::ALLOCATED_MIB => m(&|p| p.allocated),
        col::LEDGER_MIB => m(&|p| p.predicted),
        col::LEDGER_VS_ALLOCATED_PCT => points.iter().map(ledger_pct).collect::<Vec<_>>(),
        col::KV_MIB => m(&|p| p.kv_bytes),
        col::LOGITS_MIB => m(&|p| p.logits_bytes),
        col::RESERVED_MIB => m(&|p| p.reserved),
        col::CACHED_MIB => m(&|p| p.reserved.saturating_sub(p.allocated)),
        col::PEAK_MIB => m(&|p| p.peak),
        col::PEAK_ABOVE_ALLOCATED_MIB => m(&|p| p.peak.saturating_sub(p.allocated)),
        col::TOK_S => points.iter().map(|p| p.tok_s).collect::<Vec<_>>(),
    )?)
}

/// Held bytes per prefill length against the GQA formula and the report's formula, on a linear
/// axis: the growth the title and the notebook call linear is a straight line only there.
const PREFILL_CHART: ChartSpec = ChartSpec {
    title: "KV cache 线性增长 prefill sweep",
    x: col::SEQ,
    x_title: "sequence length (tokens)",
    y_title: "MiB",
    only: Some((col::OUTCOME, &[Outcome::OK])),
    x_axis: Axis::Linear,
    series: &[
        Series::styled("measured: held after prefill, above the weights", &[(col::HELD_MIB, 1.0)], Style::LinesMarkers),
        Series::styled(
            "GQA formula: KV + logits",
            &[(col::KV_GQA_FORMULA_MIB, 1.0), (col::LOGITS_FORMULA_MIB, 1.0)],
            Style::Lines,
        ),
        Series::styled(
            "report's formula 2·L·H·S·B + logits",
            &[(col::KV_NAIVE_FORMULA_MIB, 1.0), (col::LOGITS_FORMULA_MIB, 1.0)],
            Style::Lines,
        ),
        Series::styled(
            "peak during the prefill, above the weights",
            &[(col::PEAK_MIB, 1.0), (col::BASE_MIB, -1.0)],
            Style::Markers,
        ),
    ],
    ..ChartSpec::LINES
};

/// Allocated and peak during a long decode, per cache kind.
const DECODE_CHART: ChartSpec = ChartSpec {
    title: "Decode: preallocated vs concatenating KV cache",
    x: col::TOKENS,
    x_title: "tokens in cache",
    y_title: "MiB",
    split_by: Some(col::CACHE),
    series: &[
        Series::styled("allocated", &[(col::ALLOCATED_MIB, 1.0)], Style::LinesMarkers),
        Series::styled("peak", &[(col::PEAK_MIB, 1.0)], Style::Markers),
    ],
    ..ChartSpec::LINES
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "prefill",
            table: PREFILL_TABLE,
            caption: "Stage 2 — prefill ledger (MiB)",
            columns: &[SEQ, OUTCOME, HELD_MIB, GROWTH_PER_1K_TOKENS_MIB, KV_MEASURED_MIB, KV_GQA_FORMULA_MIB, KV_NAIVE_FORMULA_MIB, LOGITS_MIB, OTHER_MIB, TRANSIENT_MIB, PEAK_MIB, RESERVED_PEAK_MIB, OUTSIDE_POOL_MIB, PREFILL_TOK_S, OOM_REQUEST_MIB],
            group_by: &[PRECISION, LOGITS, ATTENTION],
            chart: Some(PREFILL_CHART),
            explain: "KV + 全部位置的 logits = 353.0 MiB / 1k tokens in BF16 (57,344 + 304,128 B per token): the report's 352.5 MB. Held − KV − logits is \"other\"; the peak above what stays held is transient (attention scores, MLP activations). Stock candle-transformers' attention (naive) repeats K/V per head and materialises the whole score matrix, so it runs out of memory far earlier.",
        },
        View {
            name: "limit",
            table: LIMIT_TABLE,
            caption: "Stage 2 — the longest context that fits / 最长上下文 (tokens)",
            columns: &[CARD, PRECISION, LOGITS, ATTENTION, BATCH, MAX_CONTEXT, FIRST_OOM, RESOLUTION, TRIALS, OOM_RETRY],
            group_by: &[],
            chart: None,
            explain: "只保留最后一个位置的 logits(生成只需要它)时,RTX 4090 上的极限从约 24k 升到约 33.5k token:峰值改由预填充时 MLP 的激活决定,而不是 cache。Q4_K_M 省下约 10 GiB 权重,以 BF16 计算,KV cache 与 logits 和 BF16 一样大;2026-11-23 之前的 Q4 和 q4_k_m-f32 以 F32 计算,是 BF16 的两倍。oom_retry:失败的分配在整理内存池后重试一次(与 PyTorch 相同);不重试时 candle 的内存池在约 16k 处停下。<br>Without every position's logits (what generation needs) the limit moves from about 24k to about 33.5k tokens on an RTX 4090: the peak then comes from the MLP's activations during prefill, not the cache. Q4_K_M frees about 10 GiB of weights and computes in BF16, so its cache and logits are BF16's; the lab's Q4 of the runs before 2026-11-23 and `q4_k_m-f32` compute in F32, twice BF16's. oom_retry: a failed request was retried once after the pool gave back what nothing uses, as PyTorch retries after releasing its cache; without it candle's pool, which keeps freed blocks until a synchronisation, stops at about 16k.",
        },
        View {
            name: "decode",
            table: DECODE_TABLE,
            caption: "Stage 2 — a long decode: preallocated vs concatenating cache (MiB)",
            columns: &[CACHE, TOKENS, OUTCOME, ALLOCATED_MIB, LEDGER_MIB, LEDGER_VS_ALLOCATED_PCT, KV_MIB, RESERVED_MIB, PEAK_ABOVE_ALLOCATED_MIB, TOK_S],
            group_by: &[PRECISION],
            chart: Some(DECODE_CHART),
            explain: "The preallocated cache takes its full size at once and never moves; the concatenating cache grows by one token's bytes per step but copies the whole cache every step, so its peak rises above what it holds and the pool keeps more reserved. The ledger (weights + cache + one step's logits) sums to the allocated memory.",
        },
        View {
            name: "batch",
            table: BATCH_TABLE,
            caption: "Stage 2 — batch sweep (MiB, all logits kept)",
            columns: &[BATCH, SEQ, OUTCOME, HELD_MIB, KV_MEASURED_MIB, KV_GQA_FORMULA_MIB, LOGITS_MIB, TRANSIENT_MIB, PEAK_MIB, PREFILL_TOK_S],
            group_by: &[PRECISION],
            chart: None,
            explain: "Batch multiplies the cache and the logits alike: at a fixed length, memory grows linearly in the batch until the card is full.",
        },
        oom::view("oom", OOM_TABLE, "Stage 2 — why each sweep ran out of memory / OOM 诊断 (MiB)"),
    ]
}
