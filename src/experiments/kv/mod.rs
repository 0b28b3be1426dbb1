//! Stage 2, the KV cache: a prefill sweep (the report's: batch fixed, sequence doubled until OOM)
//! with a ledger that attributes the bytes held after each step to the KV cache, the logits and
//! the rest, and the transient peak above them, beside the GQA-correct and the report's formula;
//! bisection to the longest context that fits; a long decode with a preallocated and a
//! concatenating cache; a batch sweep; and the prefill again with stock candle's attention.

pub mod decode;
pub mod limit;
pub mod sweep;
pub mod tables;

use crate::error::{LabError, Result};
use crate::estimate;
use crate::experiments::oom;
use crate::limits;
use crate::memory::{fmt_bytes, mib};
use crate::model::{AttentionMode, CacheKind, Decoder, Logits, Precision};
use crate::reference::report;
use crate::session::Session;
use crate::stage::{Finding, Scale, Stage, StageOutput, View};
use decode::{decode_sweep, ledger_pct, DecodePoint};
use limit::{find_limit, ContextLimit};
use serde::{Deserialize, Serialize};
use sweep::{batch_sweep, doubling, prefill_sweep};
use tables::{
    decode_table, limit_table, prefill_table, BATCH_TABLE, DECODE_TABLE, LIMIT_TABLE, OOM_TABLE, PREFILL_TABLE,
};

pub use sweep::{random_ids, step, PrefillStep};

pub struct Kv;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Sweep {
    /// Doubling lengths until OOM, then bisection to the longest that fits
    Prefill,
    /// A long decode, preallocated vs concatenating cache
    Decode,
    /// Batch 1, 2, 4, … at a fixed length
    Batch,
    /// The prefill sweep with attention as stock candle-transformers computes it
    Naive,
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct KvConfig {
    /// Precisions, each loaded once and swept in turn
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().precisions)]
    pub precisions: Vec<Precision>,
    /// Sweeps to run
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().sweeps)]
    pub sweeps: Vec<Sweep>,
    /// Logits the prefill keeps, one sweep each: all (as model(input_ids) in transformers) or last
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KvConfig::default().logits)]
    pub logits: Vec<Logits>,
    /// Prefill lengths (default: doubling from --start until OOM or --max)
    #[arg(long, value_delimiter = ',', value_parser = limits::count(limits::MAX_SEQ))]
    pub lengths: Option<Vec<usize>>,
    #[arg(long, default_value_t = KvConfig::default().start, value_parser = limits::count(limits::MAX_SEQ))]
    pub start: usize,
    #[arg(long, default_value_t = KvConfig::default().max, value_parser = limits::count(limits::MAX_SEQ))]
    pub max: usize,
    /// After the first OOM, bisect to the longest prefill that fits, to within this many tokens (0: no bisection)
    #[arg(long, default_value_t = KvConfig::default().resolution, value_parser = limits::count_or_none(limits::MAX_SEQ))]
    pub resolution: usize,
    /// Decode sweep: fill the cache token by token up to this length, reading at 256, 512, …
    #[arg(long, default_value_t = KvConfig::default().decode_to, value_parser = limits::count(limits::MAX_SEQ))]
    pub decode_to: usize,
    /// Batch sweep: the sequence length
    #[arg(long, default_value_t = KvConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// Batch sweep: the largest batch tried
    #[arg(long, default_value_t = KvConfig::default().max_batch, value_parser = limits::count(limits::MAX_BATCH))]
    pub max_batch: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        Self {
            precisions: vec![Precision::Bf16, Precision::Q4KM],
            sweeps: vec![Sweep::Prefill, Sweep::Decode, Sweep::Batch, Sweep::Naive],
            logits: vec![Logits::All, Logits::Last],
            lengths: None,
            start: 1024,
            max: 131072,
            resolution: 256,
            decode_to: 4096,
            seq: 1024,
            max_batch: 256,
        }
    }
}

impl KvConfig {
    fn prefill_lengths(&self) -> Vec<usize> {
        self.lengths.clone().unwrap_or_else(|| doubling(self.start, self.max))
    }
}

/// Everything the sweeps measured, before it becomes tables.
#[derive(Default)]
struct KvResults {
    prefill: Vec<PrefillStep>,
    limits: Vec<ContextLimit>,
    decode: Vec<DecodePoint>,
    batch: Vec<PrefillStep>,
    /// (precision, KV bytes per token and logits bytes per token in its activation dtype)
    per_token: Vec<(Precision, u64, u64, u64)>,
    /// The report's figures stand beside this run only for the report's model.
    report_model: bool,
    /// One diagnosis per sweep that ran out of memory.
    diagnoses: Vec<oom::Diagnosis>,
}

/// A prefill sweep, then the bisection when it ran out of memory; the trials join the steps.
fn prefill_with_limit(
    s: &mut Session,
    model: &Decoder,
    cfg: &KvConfig,
    logits: Logits,
    r: &mut KvResults,
) -> Result<()> {
    let mut steps = prefill_sweep(s, model, &cfg.prefill_lengths(), logits, &mut r.diagnoses)?;
    if cfg.resolution > 0 {
        if let Some(limit) = find_limit(s, model, &steps, logits, cfg.resolution)? {
            s.say(format!(
                "max context on {} in {} ({} logits, {} attention): {} tokens fit, {} do not",
                s.card_name(),
                limit.precision,
                logits.name(),
                limit.attention,
                limit.max_ok,
                limit.first_oom
            ));
            steps.extend(limit.trials.iter().cloned());
            steps.sort_by_key(|st| st.seq);
            r.limits.push(limit);
        }
    }
    r.prefill.extend(steps);
    Ok(())
}

fn run_precision(s: &mut Session, cfg: &KvConfig, precision: Precision, r: &mut KvResults) -> Result<()> {
    s.check_stop()?;
    let mut lm = match s.load(precision) {
        Ok(lm) => lm,
        Err(LabError::Oom(o)) => {
            s.say(format!("{precision}: the model does not fit ({}); its sweeps are skipped", o.headline()));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let m = &lm.model;
    let dtype_bytes = m.act_dtype().size_in_bytes();
    let (kv, naive, lg) = (
        estimate::kv_bytes_per_token(&m.cfg, dtype_bytes),
        estimate::naive_kv_bytes_per_token(&m.cfg, dtype_bytes),
        estimate::logits_bytes_per_token(&m.cfg, dtype_bytes),
    );
    r.per_token.push((precision, kv, naive, lg));
    r.report_model = crate::reference::is_report_model(&m.cfg);
    s.say(format!(
        "\n{precision}: weights loaded, allocated {}; KV {kv} B/token ({}), the report's formula {naive} B/token",
        fmt_bytes(s.probe.snapshot("loaded").allocated),
        m.act_dtype().as_str(),
    ));
    if cfg.sweeps.contains(&Sweep::Prefill) {
        for &logits in &cfg.logits {
            prefill_with_limit(s, &lm.model, cfg, logits, r)?;
        }
    }
    if cfg.sweeps.contains(&Sweep::Decode) {
        let checkpoints = doubling(256, cfg.decode_to);
        for kind in [CacheKind::Preallocated, CacheKind::Concat] {
            let points = decode_sweep(s, &lm.model, kind, 128, &checkpoints)?;
            r.decode.extend(points);
        }
    }
    if cfg.sweeps.contains(&Sweep::Batch) {
        let steps = batch_sweep(s, &lm.model, cfg.seq, cfg.max_batch, Logits::All, &mut r.diagnoses)?;
        r.batch.extend(steps);
    }
    if cfg.sweeps.contains(&Sweep::Naive) {
        lm.model.attention = AttentionMode::Naive;
        prefill_with_limit(s, &lm.model, cfg, Logits::All, r)?;
    }
    Ok(())
}

impl KvResults {
    fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for &(p, kv, naive, lg) in &self.per_token {
            let name = p.name();
            let bounded_all = |st: &&PrefillStep| {
                st.precision == name && st.attention == "bounded" && st.logits == "all" && st.outcome.is_ok()
            };
            // The largest step that fit: the per-token figures least disturbed by fixed overheads.
            if let Some(st) = self.prefill.iter().filter(bounded_all).max_by_key(|st| st.seq * st.batch) {
                let tokens = (st.seq * st.batch) as f64;
                out.push(
                    Finding::new(format!("{p} KV cache per token"), "B", Some(st.kv_measured as f64 / tokens))
                        .predicted(kv as f64)
                        .report((p == Precision::Bf16).then_some(naive as f64))
                        .note("prediction: GQA 2·layers·kv_heads·head_dim·bytes; the report's formula 2·layers·hidden·bytes ignores GQA"),
                );
                out.push(
                    Finding::new(
                        format!("{p} memory per 1k tokens, all logits kept"),
                        "MiB",
                        Some(mib(st.held()) / tokens * 1024.0),
                    )
                    .predicted(mib((kv + lg) * 1024))
                    .report((self.report_model && p == Precision::Bf16).then_some(report::KV_GROWTH_PER_1K_MIB))
                    .note(format!("at {} tokens: KV cache + every position's logits", st.seq)),
                );
            }
            for l in self.limits.iter().filter(|l| l.precision == name) {
                let report_seq =
                    (self.report_model && p == Precision::Bf16 && l.logits == Logits::All && l.attention == "bounded")
                        .then_some(report::KV_FIRST_OOM_SEQ);
                out.push(
                    Finding::new(
                        format!(
                            "{p} first length that runs out of memory, {} logits, {} attention",
                            l.logits.name(),
                            l.attention
                        ),
                        "tokens",
                        Some(l.first_oom as f64),
                    )
                    .report(report_seq)
                    .note(format!("longest that fits: {} tokens (bisection to {})", l.max_ok, l.resolution)),
                );
            }
            let worst = self
                .decode
                .iter()
                .filter(|d| d.precision == name)
                .filter_map(ledger_pct)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| if v.abs() > m.abs() { v } else { m })));
            if let Some(w) = worst {
                out.push(
                    Finding::new(format!("{p} decode: ledger vs allocated, worst"), "%", Some(w))
                        .predicted(0.0)
                        .note("weights + cache + one step's logits against the allocator's count"),
                );
            }
        }
        out
    }
}

impl Stage for Kv {
    const NAME: &'static str = "kv";
    const TITLE: &'static str = "Stage 2 — the KV cache / KV Cache 的线性增长";
    const ABOUT: &'static str = "Stage 2: the KV cache — prefill, decode and batch sweeps with a byte ledger, and the longest context that fits";
    const INTRO: &'static str = "固定 batch = 1,序列长度从 1k 翻倍直到 OOM,再二分找到最长上下文;每一步把显存拆成 KV cache、logits 和其余部分。<br>Batch 1, the sequence doubled from 1k until OOM, then bisection to the longest context that fits; each step's bytes are attributed to the KV cache, the logits and the rest. The report (RTX 4090): \"KV Cache 增量\" 352.50 MB per added 1k tokens, OOM at 16,384 tokens; its formula 2 × layers × hidden × seq × batch × bytes ignores grouped-query attention (Qwen2.5-7B: 4 KV heads of 128, 57,344 B per token in BF16, 7× less). Most of its growth is logits: <code>model(input_ids)</code> keeps every position's 152,064 logits (304,128 B per token in BF16).";
    type Config = KvConfig;

    fn cpu_config() -> KvConfig {
        // The tiny model on CPU: long enough to show linear growth, short enough for a first run.
        KvConfig { max: 4096, decode_to: 1024, max_batch: 8, ..Default::default() }
    }

    /// The report's sweep in BF16 with all logits kept (the report's), bisected to 1,024 tokens,
    /// and the batch sweep: the last-logits, Q4_K_M, decode and stock-attention sweeps are `--full`'s.
    fn quick_config() -> KvConfig {
        KvConfig {
            precisions: vec![Precision::Bf16],
            logits: vec![Logits::All],
            sweeps: vec![Sweep::Prefill, Sweep::Batch],
            resolution: 1024,
            ..Default::default()
        }
    }

    /// The report's sweep in the model's tokens: the same share of the card per step. The decode
    /// sweep reads from 256 tokens on, so it keeps the CPU's length.
    fn scaled_config(scale: Scale) -> KvConfig {
        let d = KvConfig::default();
        KvConfig {
            start: scale.tokens(d.start, 8),
            max: scale.tokens(d.max, 64),
            resolution: scale.tokens(d.resolution, 1),
            seq: scale.tokens(d.seq, 8),
            decode_to: 1024,
            ..d
        }
    }

    fn run(s: &mut Session, cfg: &KvConfig) -> Result<StageOutput> {
        if cfg.lengths.is_none() && cfg.start > cfg.max {
            return Err(crate::error::LabError::out_of_range(
                "--start",
                cfg.start,
                format!("at most --max ({})", cfg.max),
            ));
        }
        let mut r = KvResults::default();
        for &p in &cfg.precisions {
            run_precision(s, cfg, p, &mut r)?;
        }
        let mut out = StageOutput::default();
        if !r.prefill.is_empty() {
            out.table(PREFILL_TABLE, prefill_table(&r.prefill)?);
        }
        if !r.limits.is_empty() {
            out.table(LIMIT_TABLE, limit_table(&r.limits, &s.card_name())?);
        }
        if !r.decode.is_empty() {
            out.table(DECODE_TABLE, decode_table(&r.decode)?);
        }
        if !r.batch.is_empty() {
            out.table(BATCH_TABLE, prefill_table(&r.batch)?);
        }
        if !r.diagnoses.is_empty() {
            out.table(OOM_TABLE, oom::table(&r.diagnoses)?);
        }
        out.findings = r.findings();
        Ok(out)
    }

    fn views() -> Vec<View> {
        tables::views()
    }
}

#[cfg(test)]
mod tests {
    use super::tables::col;
    use super::*;

    #[test]
    fn doubling_lengths() {
        assert_eq!(doubling(1024, 9000), vec![1024, 2048, 4096, 8192]);
    }

    #[test]
    fn ledger_arithmetic() {
        let st = PrefillStep {
            base: 100,
            after: 1100,
            peak: 1500,
            kv_measured: 300,
            logits_bytes: 600,
            ..Default::default()
        };
        assert_eq!(st.held(), 1000);
        assert_eq!(st.other(), 100);
        assert_eq!(st.transient(), 400);
        let t = prefill_table(&[st]).unwrap();
        assert_eq!(t.height(), 1);
        assert!(t.column(col::GROWTH_PER_1K_TOKENS_MIB).is_ok());
    }

    #[test]
    fn growth_restarts_at_each_sweep() {
        let step = |logits: &str, seq: usize, held: u64| PrefillStep {
            logits: logits.into(),
            seq,
            batch: 1,
            after: held,
            ..Default::default()
        };
        let t = prefill_table(&[step("all", 1, 10 << 20), step("all", 2, 25 << 20), step("last", 1, 4 << 20)]).unwrap();
        let g: Vec<Option<f64>> = t.column(col::GROWTH_VS_PREVIOUS_MIB).unwrap().f64().unwrap().iter().collect();
        assert_eq!(g, vec![Some(10.0), Some(15.0), Some(4.0)]);
    }

    /// `run` on a GPU without --full: the report's BF16 sweep, coarser; --full is the default's.
    #[test]
    fn quick_sizes_shorten_the_sweep() {
        let stage = crate::stage::register::<Kv>();
        let quick = stage.default_config(crate::stage::Sizes::Quick).unwrap();
        let full = stage.default_config(crate::stage::Sizes::Report).unwrap();
        assert_eq!(quick["precisions"], serde_json::json!(["bf16"]));
        assert_eq!(quick["logits"], serde_json::json!(["all"]));
        assert_eq!((quick["start"].as_u64(), quick["resolution"].as_u64()), (Some(1024), Some(1024)));
        assert_eq!(full["resolution"].as_u64(), Some(256));
        assert_eq!(full["sweeps"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn flags_given_go_over_the_device_defaults() {
        let stage = crate::stage::register::<Kv>();
        let m = stage.command().get_matches_from(["kv", "--max", "2048"]);
        let cpu = stage.config_from(&m, crate::stage::Sizes::Cpu).unwrap();
        assert_eq!(
            (cpu["max"].as_u64(), cpu["decode_to"].as_u64(), cpu["max_batch"].as_u64()),
            (Some(2048), Some(1024), Some(8))
        );
        let gpu = stage.config_from(&m, crate::stage::Sizes::Report).unwrap();
        assert_eq!(
            (gpu["max"].as_u64(), gpu["decode_to"].as_u64(), gpu["max_batch"].as_u64()),
            (Some(2048), Some(4096), Some(256))
        );
    }

    #[test]
    fn config_defaults_are_the_flags_defaults() {
        use clap::{Args, FromArgMatches};
        let cmd = KvConfig::augment_args(clap::Command::new("kv"));
        let parsed = KvConfig::from_arg_matches(&cmd.get_matches_from(["kv"])).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), serde_json::to_value(KvConfig::default()).unwrap());
        let cmd = KvConfig::augment_args(clap::Command::new("kv"));
        let parsed = KvConfig::from_arg_matches(&cmd.get_matches_from([
            "kv",
            "--precisions",
            "q4",
            "--sweeps",
            "prefill,naive",
            "--logits",
            "last",
        ]))
        .unwrap();
        assert_eq!(parsed.precisions, vec![Precision::Q4]);
        assert_eq!(parsed.sweeps, vec![Sweep::Prefill, Sweep::Naive]);
        assert_eq!(parsed.logits, vec![Logits::Last]);
    }
}
