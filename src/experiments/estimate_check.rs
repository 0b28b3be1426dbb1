//! The estimator beside every measurement stages 1–2 committed: for each run folder under
//! `--results`, the weights after loading (anatomy.csv), what each prefill and batch step left
//! allocated and its peak (kv_prefill.csv, kv_batch.csv), and the longest context the bisection
//! found (kv_limit.csv), each with the formula's figure and the error. Reads CSVs only: it runs
//! anywhere, and `tests/estimate_check.rs` holds it to 3 %.

use crate::error::{LabError, Result};
use crate::estimate::fit::{self, Inference, Runtime};
use crate::estimate::weight_bytes;
use crate::hw::Card;
use crate::memory::mib;
use crate::model::attention::AttentionMode;
use crate::model::{Logits, Precision, Qwen2Config};
use crate::report::format::{floats, strings};
use crate::report::manifest::read_csv;
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub struct Check;

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct CheckConfig {
    /// The folder of committed runs to check (searched recursively)
    #[arg(long, default_value = "data/results")]
    pub results: PathBuf,
}

impl Default for CheckConfig {
    fn default() -> Self {
        Self { results: PathBuf::from("data/results") }
    }
}

pub mod col {
    pub const FILE: &str = "file";
    pub const PRECISION: &str = "precision";
    pub const LOGITS: &str = "logits";
    pub const ATTENTION: &str = "attention";
    pub const SEQ: &str = "seq";
    pub const BATCH: &str = "batch";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const PREDICTED_ALLOCATED_MIB: &str = "predicted_allocated_mib";
    pub const ALLOCATED_ERR_PCT: &str = "allocated_err_pct";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const PREDICTED_PEAK_MIB: &str = "predicted_peak_mib";
    pub const PEAK_ERR_PCT: &str = "peak_err_pct";
    pub const TRANSIENT_MIB: &str = "transient_mib";
    pub const PREDICTED_TRANSIENT_MIB: &str = "predicted_transient_mib";
    pub const PEAK_AT: &str = "peak_at";
    pub const CARD: &str = "card";
    pub const MAX_CONTEXT: &str = "max_context";
    pub const PREDICTED_MAX_CONTEXT: &str = "predicted_max_context";
    pub const CONTEXT_ERR_PCT: &str = "context_err_pct";
}

pub const PREFILL: &str = "check_prefill";
pub const LIMITS: &str = "check_limits";

/// One prefill or batch step: measured and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCheck {
    pub file: String,
    pub precision: Precision,
    pub logits: Logits,
    pub attention: String,
    pub seq: usize,
    pub batch: usize,
    pub allocated_mib: f64,
    pub predicted_allocated_mib: f64,
    pub peak_mib: f64,
    pub predicted_peak_mib: f64,
    pub transient_mib: f64,
    pub predicted_transient_mib: f64,
    pub peak_at: &'static str,
}

impl StepCheck {
    pub fn allocated_err_pct(&self) -> f64 {
        100.0 * (self.predicted_allocated_mib - self.allocated_mib) / self.allocated_mib
    }
    pub fn peak_err_pct(&self) -> f64 {
        100.0 * (self.predicted_peak_mib - self.peak_mib) / self.peak_mib
    }
}

/// One bisected longest context: measured and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitCheck {
    pub file: String,
    pub card: String,
    pub precision: Precision,
    pub logits: Logits,
    pub attention: String,
    pub batch: usize,
    pub max_context: usize,
    pub predicted_max_context: usize,
}

impl LimitCheck {
    pub fn err_pct(&self) -> f64 {
        100.0 * (self.predicted_max_context as f64 - self.max_context as f64) / self.max_context as f64
    }
}

/// Every CSV called `name` under `dir`, sorted.
fn find(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            find(&p, name, out);
        } else if p.file_name().is_some_and(|f| f == name) {
            out.push(p);
        }
    }
}

/// The run's model and card: env.json beside the CSV (one stage per folder) or manifest.json
/// in the folder above (a `run` with a folder per stage).
fn run_context(csv: &Path) -> Result<(Qwen2Config, Option<String>)> {
    for dir in csv.ancestors().skip(1).take(2) {
        for name in ["env.json", "manifest.json"] {
            let Ok(text) = std::fs::read_to_string(dir.join(name)) else { continue };
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", dir.join(name).display())))?;
            let Some(model) = v.get("model").and_then(|m| m.as_str()) else { continue };
            let preset = model.strip_prefix("synthetic:").ok_or_else(|| LabError::input(format!("{}: model {model} is not a synthetic preset", csv.display())))?;
            let card = match v.get("card") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(obj) => obj.get("name").and_then(|n| n.as_str()).map(String::from),
                None => None,
            };
            return Ok((Qwen2Config::preset(preset)?, card));
        }
    }
    Err(LabError::input(format!("{}: no env.json or manifest.json names its model", csv.display())))
}

fn logits(s: &str) -> Result<Logits> {
    <Logits as clap::ValueEnum>::from_str(s, true).map_err(|_| LabError::input(format!("unknown logits `{s}` in a results file")))
}

/// The logits a folder's steps kept when its CSV has no column for it (runs before it had one):
/// the `--logits` of the command in env.json, else its kv_limit.csv; the batch sweep keeps all.
fn folder_logits(csv: &Path) -> Result<Option<Logits>> {
    if csv.file_name().is_some_and(|f| f == "kv_batch.csv") {
        return Ok(Some(Logits::All));
    }
    if let Ok(text) = std::fs::read_to_string(csv.with_file_name("env.json")) {
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", csv.display())))?;
        let command = v.get("command").and_then(|c| c.as_str()).unwrap_or("");
        let mut words = command.split_whitespace().skip_while(|w| *w != "--logits").skip(1);
        if let Some(w) = words.next() {
            return logits(w).map(Some);
        }
    }
    let limit = csv.with_file_name("kv_limit.csv");
    if !limit.is_file() {
        return Ok(Some(Logits::All));
    }
    let df = read_csv(&limit)?;
    strings(&df, "logits")?.first().map(|s| logits(s)).transpose()
}

fn relative(p: &Path, root: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// The prefill and batch steps that fitted, under `root`.
pub fn steps(root: &Path) -> Result<Vec<StepCheck>> {
    let mut files = Vec::new();
    find(root, "kv_prefill.csv", &mut files);
    find(root, "kv_batch.csv", &mut files);
    let mut out = Vec::new();
    for f in files {
        let (cfg, _) = run_context(&f)?;
        let df = read_csv(&f)?;
        let n = df.height();
        let outcome = strings(&df, "outcome")?;
        let prec = strings(&df, "precision")?;
        let att = strings(&df, "attention")?;
        let lg: Vec<Option<Logits>> = match strings(&df, "logits") {
            Ok(v) => v.iter().map(|s| logits(s).map(Some)).collect::<Result<_>>()?,
            Err(_) => vec![folder_logits(&f)?; n],
        };
        let (seq, batch) = (floats(&df, "seq")?, floats(&df, "batch")?);
        let (base, held, peak, transient) = (floats(&df, "base_mib")?, floats(&df, "held_mib")?, floats(&df, "peak_mib")?, floats(&df, "transient_mib")?);
        for r in 0..n {
            let Some(logits) = lg[r] else { continue };
            if outcome[r] != "ok" {
                continue;
            }
            let p = Precision::parse(&prec[r])?;
            let w = Inference { precision: p, seq: seq[r] as usize, batch: batch[r] as usize, logits, attention: AttentionMode::parse(&att[r])? };
            let l = fit::ledger(&cfg, &w, 0);
            out.push(StepCheck {
                file: relative(&f, root),
                precision: p,
                logits,
                attention: att[r].clone(),
                seq: w.seq,
                batch: w.batch,
                allocated_mib: base[r] + held[r],
                predicted_allocated_mib: mib(l.allocated()),
                peak_mib: peak[r],
                predicted_peak_mib: mib(l.peak()),
                transient_mib: transient[r],
                predicted_transient_mib: mib(l.transient),
                peak_at: l.peak_at,
            });
        }
    }
    Ok(out)
}

/// The weights after loading in each anatomy run, as (file, precision, measured, predicted) MiB.
pub fn weights(root: &Path) -> Result<Vec<(String, Precision, f64, f64)>> {
    let mut files = Vec::new();
    find(root, "anatomy.csv", &mut files);
    let mut out = Vec::new();
    for f in files {
        let (cfg, _) = run_context(&f)?;
        let df = read_csv(&f)?;
        let (outcome, prec, loaded) = (strings(&df, "outcome")?, strings(&df, "precision")?, floats(&df, "loaded_allocated_gib")?);
        for r in 0..df.height() {
            if outcome[r] == "ok" {
                let p = Precision::parse(&prec[r])?;
                out.push((relative(&f, root), p, loaded[r] * 1024.0, mib(weight_bytes(&cfg, p))));
            }
        }
    }
    Ok(out)
}

/// The longest contexts the bisections found on an emulated card, beside the longest the ledger
/// fits in the card's total less the runtime's overhead.
pub fn limits(root: &Path) -> Result<Vec<LimitCheck>> {
    let mut files = Vec::new();
    find(root, "kv_limit.csv", &mut files);
    let runtime = Runtime::assumed().bytes();
    let mut out = Vec::new();
    for f in files {
        let (cfg, _) = run_context(&f)?;
        let df = read_csv(&f)?;
        let (card, prec, lg, batch, max) = (strings(&df, "card")?, strings(&df, "precision")?, strings(&df, "logits")?, floats(&df, "batch")?, floats(&df, "max_context")?);
        // Older folders ran one attention each, named in their prefill sweep.
        let att = match strings(&df, "attention") {
            Ok(v) => v,
            Err(_) => vec![strings(&read_csv(&f.with_file_name("kv_prefill.csv"))?, "attention")?.first().cloned().unwrap_or_default(); df.height()],
        };
        for r in 0..df.height() {
            let Ok(c) = Card::parse(&card[r]) else { continue };
            let p = Precision::parse(&prec[r])?;
            let w = Inference { precision: p, seq: 1, batch: batch[r] as usize, logits: logits(&lg[r])?, attention: AttentionMode::parse(&att[r])? };
            // Beyond the model's positions too: the bisections were not capped there.
            let predicted = fit::largest(1 << 20, |seq| fit::ledger(&cfg, &Inference { seq, ..w }, runtime).device() <= c.total_bytes());
            out.push(LimitCheck { file: relative(&f, root), card: c.name, precision: p, logits: w.logits, attention: att[r].clone(), batch: w.batch, max_context: max[r] as usize, predicted_max_context: predicted });
        }
    }
    Ok(out)
}

impl Stage for Check {
    const NAME: &'static str = "check";
    const TITLE: &'static str = "Estimator check — 估算 vs 实测: every committed measurement of stages 1–2";
    const ABOUT: &'static str = "The estimator beside every committed GPU measurement of stages 1–2 (weights, allocated, peak, transient, the bisected longest context), with the error";
    const INTRO: &'static str = "Each formula of the estimator against what the GPU runs committed under data/results measured: weights after loading, what a prefill leaves allocated (KV cache and logits), its peak (the transient counted tensor by tensor), and the longest context the bisection found. 估算器逐项对照已提交的 GPU 实测,并给出误差。";
    type Config = CheckConfig;

    fn run(s: &mut Session, c: &CheckConfig) -> Result<StageOutput> {
        if !c.results.is_dir() {
            // `vram-lab run` from outside the repository: nothing to check, said, not an error.
            s.say(format!("no results folder {}: nothing to check (run from the repository root, or give --results)", c.results.display()));
            return Ok(StageOutput::default());
        }
        let st = steps(&c.results)?;
        let wt = weights(&c.results)?;
        let lim = limits(&c.results)?;
        let mut out = StageOutput::default();
        let worst = |v: Vec<f64>| v.into_iter().fold(0.0f64, |m, e| m.max(e.abs()));
        let worst_alloc = worst(st.iter().map(|x| x.allocated_err_pct()).chain(wt.iter().map(|w| 100.0 * (w.3 - w.2) / w.2)).collect());
        let worst_peak = worst(st.iter().map(|x| x.peak_err_pct()).collect());
        s.say(format!("{} steps and {} loads: allocated within {worst_alloc:.2} %, peak within {worst_peak:.2} %", st.len(), wt.len()));
        out.findings.push(Finding::new("allocated: the worst error of the estimate", "%", Some(worst_alloc)).note(format!("{} prefill/batch steps and {} loads committed", st.len(), wt.len())));
        out.findings.push(Finding::new("peak: the worst error of the estimate", "%", Some(worst_peak)));
        if let Some(l) = lim.iter().max_by(|a, b| a.err_pct().abs().total_cmp(&b.err_pct().abs())) {
            out.findings.push(Finding::new("longest context: the worst error of the estimate", "%", Some(l.err_pct())).note(format!("{} {} {}: measured {}, the ledger fits {}; the pool maps more than it hands out near the edge", l.precision, l.logits.name(), l.attention, l.max_context, l.predicted_max_context)));
        }
        // The loads as rows of the same table: seq 0, allocated = the weights.
        let mut rows: Vec<StepCheck> = wt
            .iter()
            .map(|(file, p, measured, predicted)| StepCheck { file: file.clone(), precision: *p, logits: Logits::Last, attention: "load".into(), seq: 0, batch: 0, allocated_mib: *measured, predicted_allocated_mib: *predicted, peak_mib: *measured, predicted_peak_mib: *predicted, transient_mib: 0.0, predicted_transient_mib: 0.0, peak_at: "load" })
            .collect();
        rows.extend(st);
        use col::*;
        out.table(
            PREFILL,
            df!(
                FILE => rows.iter().map(|r| r.file.clone()).collect::<Vec<_>>(),
                PRECISION => rows.iter().map(|r| r.precision.to_string()).collect::<Vec<_>>(),
                LOGITS => rows.iter().map(|r| r.logits.name()).collect::<Vec<_>>(),
                ATTENTION => rows.iter().map(|r| r.attention.clone()).collect::<Vec<_>>(),
                SEQ => rows.iter().map(|r| r.seq as u64).collect::<Vec<_>>(),
                BATCH => rows.iter().map(|r| r.batch as u64).collect::<Vec<_>>(),
                ALLOCATED_MIB => rows.iter().map(|r| r.allocated_mib).collect::<Vec<_>>(),
                PREDICTED_ALLOCATED_MIB => rows.iter().map(|r| r.predicted_allocated_mib).collect::<Vec<_>>(),
                ALLOCATED_ERR_PCT => rows.iter().map(|r| r.allocated_err_pct()).collect::<Vec<_>>(),
                PEAK_MIB => rows.iter().map(|r| r.peak_mib).collect::<Vec<_>>(),
                PREDICTED_PEAK_MIB => rows.iter().map(|r| r.predicted_peak_mib).collect::<Vec<_>>(),
                PEAK_ERR_PCT => rows.iter().map(|r| r.peak_err_pct()).collect::<Vec<_>>(),
                TRANSIENT_MIB => rows.iter().map(|r| r.transient_mib).collect::<Vec<_>>(),
                PREDICTED_TRANSIENT_MIB => rows.iter().map(|r| r.predicted_transient_mib).collect::<Vec<_>>(),
                PEAK_AT => rows.iter().map(|r| r.peak_at).collect::<Vec<_>>(),
            )?,
        );
        out.table(
            LIMITS,
            df!(
                FILE => lim.iter().map(|r| r.file.clone()).collect::<Vec<_>>(),
                CARD => lim.iter().map(|r| r.card.clone()).collect::<Vec<_>>(),
                PRECISION => lim.iter().map(|r| r.precision.to_string()).collect::<Vec<_>>(),
                LOGITS => lim.iter().map(|r| r.logits.name()).collect::<Vec<_>>(),
                ATTENTION => lim.iter().map(|r| r.attention.clone()).collect::<Vec<_>>(),
                BATCH => lim.iter().map(|r| r.batch as u64).collect::<Vec<_>>(),
                MAX_CONTEXT => lim.iter().map(|r| r.max_context as u64).collect::<Vec<_>>(),
                PREDICTED_MAX_CONTEXT => lim.iter().map(|r| r.predicted_max_context as u64).collect::<Vec<_>>(),
                CONTEXT_ERR_PCT => lim.iter().map(|r| r.err_pct()).collect::<Vec<_>>(),
            )?,
        );
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![
            View {
                name: "prefill",
                table: PREFILL,
                caption: "Estimator check — allocated and peak, measured vs the formula (MiB)",
                columns: &[PRECISION, LOGITS, ATTENTION, SEQ, BATCH, ALLOCATED_MIB, PREDICTED_ALLOCATED_MIB, ALLOCATED_ERR_PCT, PEAK_MIB, PREDICTED_PEAK_MIB, PEAK_ERR_PCT, TRANSIENT_MIB, PREDICTED_TRANSIENT_MIB, PEAK_AT],
                group_by: &[FILE],
                chart: None,
                explain: "allocated = the weights, the KV cache and the logits a prefill leaves (loads: the weights alone); peak adds the transient the formula counts tensor by tensor at the forward's busiest moment (peak_at). Q4's measured allocated carries a buffer of candle's quantized path that grows with the longest prefill seen (about 10.4 KB per token), which the formula leaves out. 已分配与峰值:实测 vs 公式。",
            },
            View {
                name: "limits",
                table: LIMITS,
                caption: "Estimator check — the longest context, bisected vs the ledger",
                columns: &[CARD, PRECISION, LOGITS, ATTENTION, BATCH, MAX_CONTEXT, PREDICTED_MAX_CONTEXT, CONTEXT_ERR_PCT],
                group_by: &[FILE],
                chart: None,
                explain: "The ledger fits more than the bisection found: near the edge the stream-ordered pool maps more than it hands out (blocks freed by one layer are not the sizes the next requests ask for), and the same command found 16,128 tokens in one process and 15,616 in another. The allocated bytes are exact (the table above); the longest context is an upper bound. 最长上下文:账本给出上界,内存池在边缘映射得比分配的多。",
            },
        ]
    }
}
