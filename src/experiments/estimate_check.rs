//! The estimator beside every measurement stages 1–2 committed: for each run folder under
//! `--results`, the weights after loading (anatomy.csv), what each prefill and batch step left
//! allocated and its peak (kv_prefill.csv, kv_batch.csv), and the longest context the bisection
//! found (kv_limit.csv), each with the formula's figure and the error. Reads CSVs only: it runs
//! anywhere, and `tests/estimate_check.rs` holds it to 3 %.

use crate::error::{LabError, Result};
use crate::estimate::fit::{self, Inference, Runtime};
use crate::estimate::sweep;
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
    pub const OOM_RETRY: &str = "oom_retry";
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
    /// Whether the run retried a failed request after trimming the pool (later runs do).
    pub retried: bool,
    /// The bisection's step: the measured edge is known to within it.
    pub resolution: usize,
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
/// in the folder above (a `run` with a folder per stage). The model is a synthetic preset's
/// config, or None for a model file (a GGUF), which is not committed beside its run.
fn run_context(csv: &Path) -> Result<(Option<Qwen2Config>, Option<String>)> {
    for dir in csv.ancestors().skip(1).take(2) {
        for name in ["env.json", "manifest.json"] {
            let Ok(text) = std::fs::read_to_string(dir.join(name)) else { continue };
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", dir.join(name).display())))?;
            let Some(model) = v.get("model").and_then(|m| m.as_str()) else { continue };
            let preset = model.strip_prefix("synthetic:");
            let card = match v.get("card") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(obj) => obj.get("name").and_then(|n| n.as_str()).map(String::from),
                None => None,
            };
            return Ok((preset.map(Qwen2Config::preset).transpose()?, card));
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

/// One prefill a KV folder's process ran, as its CSV row records it.
#[derive(Clone)]
struct Attempt {
    file: String,
    w: Inference,
    ok: bool,
    /// base + held, peak, transient (MiB), for the steps that fitted.
    measured: (f64, f64, f64),
}

/// A bisection's row of kv_limit.csv, with the sweep it closed.
struct SweepLimit {
    /// Where in the folder's `attempts` the sweep starts.
    first: usize,
    /// The sweep's doubling lengths, up to the first that failed.
    doubling: Vec<usize>,
    resolution: usize,
    max_context: usize,
    retried: bool,
}

/// A folder's sweeps: its attempts in the order the process ran them, the tokens the quantized
/// buffer was sized for before each, and the bisections' limits.
struct Folder {
    cfg: Qwen2Config,
    card: Option<Card>,
    attempts: Vec<Attempt>,
    seen: Vec<u64>,
    limit_file: String,
    limits: Vec<SweepLimit>,
}

/// The runs under `root` that hold a KV sweep (kv_prefill.csv or kv_batch.csv).
fn kv_folders(root: &Path) -> Result<Vec<Folder>> {
    let mut files = Vec::new();
    find(root, "kv_prefill.csv", &mut files);
    find(root, "kv_batch.csv", &mut files);
    let mut dirs: Vec<PathBuf> = files.iter().filter_map(|f| f.parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    dirs.iter().map(|d| kv_folder(d, root)).collect()
}

/// The rows of one CSV as attempts, grouped by sweep (precision, logits, attention) in the
/// order the groups first appear, each group's rows sorted by (seq, batch).
fn read_attempts(f: &Path, root: &Path) -> Result<Vec<Vec<Attempt>>> {
    let df = read_csv(f)?;
    let n = df.height();
    let (outcome, prec, att) = (strings(&df, "outcome")?, strings(&df, "precision")?, strings(&df, "attention")?);
    let lg: Vec<Option<Logits>> = match strings(&df, "logits") {
        Ok(v) => v.iter().map(|s| logits(s).map(Some)).collect::<Result<_>>()?,
        Err(_) => vec![folder_logits(f)?; n],
    };
    let (seq, batch) = (floats(&df, "seq")?, floats(&df, "batch")?);
    let (base, held, peak, transient) = (floats(&df, "base_mib")?, floats(&df, "held_mib")?, floats(&df, "peak_mib")?, floats(&df, "transient_mib")?);
    let mut groups: Vec<(String, Vec<Attempt>)> = Vec::new();
    for r in 0..n {
        let Some(logits) = lg[r] else { continue };
        let w = Inference { precision: Precision::parse(&prec[r])?, seq: seq[r] as usize, batch: batch[r] as usize, logits, attention: AttentionMode::parse(&att[r])?, stored: None };
        let key = format!("{}/{}/{}", prec[r], logits.name(), att[r]);
        let a = Attempt { file: relative(f, root), w, ok: outcome[r] == "ok", measured: (base[r] + held[r], peak[r], transient[r]) };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(a),
            None => groups.push((key, vec![a])),
        }
    }
    Ok(groups
        .into_iter()
        .map(|(_, mut g)| {
            g.sort_by_key(|a| (a.w.seq, a.w.batch));
            g
        })
        .collect())
}

/// A sweep's rows (sorted) in the order the KV stage ran them: the doubling lengths up to the
/// first that failed (the longest row), then the bisection's trials between the last doubling
/// length that fitted and it. Returns the order and the doubling lengths.
fn run_order(rows: &[Attempt], resolution: usize) -> (Vec<usize>, Vec<usize>) {
    let ascending: Vec<usize> = (0..rows.len()).collect();
    let Some(top) = rows.len().checked_sub(1).filter(|&t| !rows[t].ok) else { return (ascending, vec![]) };
    let outcome = |seq: u64| rows.iter().position(|a| a.w.seq as u64 == seq);
    // The bisection's lower bound: the shortest fitted length whose search tries exactly the rows
    // between it and the longest.
    for lo in (0..top).filter(|&i| rows[i].ok) {
        let between: Vec<usize> = (lo + 1..top).collect();
        let mut tried = Vec::new();
        let found = crate::search::bisect(rows[lo].w.seq as u64, rows[top].w.seq as u64, resolution as u64, |n| {
            let i = outcome(n).ok_or_else(|| LabError::other("not a row"))?;
            tried.push(i);
            Ok(rows[i].ok)
        });
        let mut sorted = tried.clone();
        sorted.sort();
        if found.is_ok() && sorted == between {
            let doubling: Vec<usize> = (0..=lo).chain([top]).collect();
            let lengths = doubling.iter().map(|&i| rows[i].w.seq).collect();
            return (doubling.into_iter().chain(tried).collect(), lengths);
        }
    }
    (ascending, rows.iter().map(|a| a.w.seq).collect())
}

/// One KV folder: its sweeps in the order the KV stage runs them (per precision: the prefill
/// sweeps, then the batch sweep), each with its bisection.
fn kv_folder(dir: &Path, root: &Path) -> Result<Folder> {
    let any = ["kv_prefill.csv", "kv_batch.csv"].iter().map(|n| dir.join(n)).find(|p| p.is_file()).ok_or_else(|| LabError::other("no KV CSV"))?;
    let (cfg, card) = run_context(&any)?;
    let cfg = cfg.ok_or_else(|| LabError::input(format!("{}: the KV runs of a model file are not checked (its config is not committed)", any.display())))?;
    let card = card.and_then(|c| Card::parse(&c).ok());
    let capacity = card.as_ref().map(|c| c.total_bytes()).unwrap_or(u64::MAX);
    let prefill = if dir.join("kv_prefill.csv").is_file() { read_attempts(&dir.join("kv_prefill.csv"), root)? } else { vec![] };
    let batch = if dir.join("kv_batch.csv").is_file() { read_attempts(&dir.join("kv_batch.csv"), root)? } else { vec![] };
    let limit_file = dir.join("kv_limit.csv");
    // (precision, logits, attention, batch) → (resolution, measured longest, retried)
    let mut limit_rows: Vec<((String, String, String, usize), (usize, usize, bool))> = Vec::new();
    if limit_file.is_file() {
        let df = read_csv(&limit_file)?;
        let (prec, lg, batch, max, res) = (strings(&df, "precision")?, strings(&df, "logits")?, floats(&df, "batch")?, floats(&df, "max_context")?, floats(&df, "resolution")?);
        // Older folders ran one attention each, named in their prefill sweep.
        let att = match strings(&df, "attention") {
            Ok(v) => v,
            Err(_) => vec![prefill.first().map(|g| g[0].w.attention.name().to_string()).unwrap_or_default(); df.height()],
        };
        // Runs before the allocation hook retried a failed request after a trim have no column.
        let retry = match strings(&df, "oom_retry") {
            Ok(v) => v.iter().map(|s| s == "true").collect(),
            Err(_) => vec![false; df.height()],
        };
        for r in 0..df.height() {
            limit_rows.push(((prec[r].clone(), lg[r].clone(), att[r].clone(), batch[r] as usize), (res[r] as usize, max[r] as usize, retry[r])));
        }
    }
    let mut precisions: Vec<Precision> = Vec::new();
    for p in prefill.iter().chain(&batch).map(|g| g[0].w.precision) {
        if !precisions.contains(&p) {
            precisions.push(p);
        }
    }
    let mut attempts = Vec::new();
    let mut limits = Vec::new();
    for p in precisions {
        for group in prefill.iter().filter(|g| g[0].w.precision == p) {
            let w = group[0].w;
            let key = (p.name().to_string(), w.logits.name().to_string(), w.attention.name().to_string(), w.batch);
            let limit = limit_rows.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let (order, doubling) = run_order(group, limit.map(|l| l.0).unwrap_or(1));
            if let Some((resolution, max_context, retried)) = limit {
                limits.push(SweepLimit { first: attempts.len(), doubling, resolution, max_context, retried });
            }
            attempts.extend(order.into_iter().map(|i| group[i].clone()));
        }
        for group in batch.iter().filter(|g| g[0].w.precision == p) {
            attempts.extend(group.iter().cloned());
        }
    }
    let order: Vec<(Inference, bool)> = attempts.iter().map(|a| (a.w, a.ok)).collect();
    let seen = sweep::seen_before(&cfg, Runtime::assumed().bytes(), capacity, &order, 0);
    Ok(Folder { cfg, card, attempts, seen, limit_file: relative(&limit_file, root), limits })
}

/// The prefill and batch steps that fitted, under `root`, each predicted for the process it ran
/// in (a Q4 process carries the quantized buffer of its longest prefill so far).
pub fn steps(root: &Path) -> Result<Vec<StepCheck>> {
    Ok(steps_of(&kv_folders(root)?))
}

fn steps_of(folders: &[Folder]) -> Vec<StepCheck> {
    let mut out = Vec::new();
    for f in folders {
        for (a, &seen) in f.attempts.iter().zip(&f.seen).filter(|(a, _)| a.ok) {
            let l = fit::ledger_after(&f.cfg, &a.w, 0, seen);
            out.push(StepCheck {
                file: a.file.clone(),
                precision: a.w.precision,
                logits: a.w.logits,
                attention: a.w.attention.name().to_string(),
                seq: a.w.seq,
                batch: a.w.batch,
                allocated_mib: a.measured.0,
                predicted_allocated_mib: mib(l.allocated()),
                peak_mib: a.measured.1,
                predicted_peak_mib: mib(l.peak()),
                transient_mib: a.measured.2,
                predicted_transient_mib: mib(l.transient),
                peak_at: l.peak_at,
            });
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
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
        // A model file's prediction is its header's tensor bytes, which the run recorded.
        let recorded = floats(&df, "predicted_weights_gib")?;
        for r in 0..df.height() {
            if outcome[r] == "ok" {
                let p = Precision::parse(&prec[r])?;
                let predicted = match &cfg {
                    Some(cfg) => mib(weight_bytes(cfg, p)),
                    None => recorded[r] * 1024.0,
                };
                out.push((relative(&f, root), p, loaded[r] * 1024.0, predicted));
            }
        }
    }
    Ok(out)
}

/// The longest contexts the bisections found on an emulated card, beside the longest the same
/// search finds on the ledger (the card's total less the runtime's overhead, the quantized buffer
/// carried from the process's earlier prefills).
pub fn limits(root: &Path) -> Result<Vec<LimitCheck>> {
    Ok(limits_of(&kv_folders(root)?))
}

fn limits_of(folders: &[Folder]) -> Vec<LimitCheck> {
    let runtime = Runtime::assumed().bytes();
    let mut out = Vec::new();
    for f in folders {
        let Some(card) = &f.card else { continue };
        for l in &f.limits {
            let w = f.attempts[l.first].w;
            let (predicted, _) = sweep::longest_context(&f.cfg, &w, runtime, card.total_bytes(), &l.doubling, l.resolution, f.seen[l.first]);
            out.push(LimitCheck { file: f.limit_file.clone(), card: card.name.clone(), precision: w.precision, logits: w.logits, attention: w.attention.name().to_string(), batch: w.batch, max_context: l.max_context, predicted_max_context: predicted, retried: l.retried, resolution: l.resolution });
        }
    }
    out
}

impl Stage for Check {
    const NAME: &'static str = "check";
    const TITLE: &'static str = "Estimator check — 估算 vs 实测: every committed measurement of stages 1–2";
    const ABOUT: &'static str = "The estimator beside every committed GPU measurement of stages 1–2 (weights, allocated, peak, transient, the bisected longest context), with the error";
    const INTRO: &'static str = "Each formula of the estimator against what the GPU runs committed under data/results measured: weights after loading, what a prefill leaves allocated (KV cache, logits and, for Q4, candle's quantized-matmul buffer), its peak (the transient counted tensor by tensor), and the longest context the bisection found. 估算器逐项对照已提交的 GPU 实测,并给出误差。";
    type Config = CheckConfig;

    fn run(s: &mut Session, c: &CheckConfig) -> Result<StageOutput> {
        if !c.results.is_dir() {
            // `vram-lab run` from outside the repository: nothing to check, said, not an error.
            s.say(format!("no results folder {}: nothing to check (run from the repository root, or give --results)", c.results.display()));
            return Ok(StageOutput::default());
        }
        let folders = kv_folders(&c.results)?;
        let (st, lim) = (steps_of(&folders), limits_of(&folders));
        let wt = weights(&c.results)?;
        let mut out = StageOutput::default();
        let worst = |v: Vec<f64>| v.into_iter().fold(0.0f64, |m, e| m.max(e.abs()));
        let worst_alloc = worst(st.iter().map(|x| x.allocated_err_pct()).chain(wt.iter().map(|w| 100.0 * (w.3 - w.2) / w.2)).collect());
        let worst_peak = worst(st.iter().map(|x| x.peak_err_pct()).collect());
        s.say(format!("{} steps and {} loads: allocated within {worst_alloc:.2} %, peak within {worst_peak:.2} %", st.len(), wt.len()));
        out.findings.push(Finding::new("allocated: the worst error of the estimate", "%", Some(worst_alloc)).note(format!("{} prefill/batch steps and {} loads committed", st.len(), wt.len())));
        out.findings.push(Finding::new("peak: the worst error of the estimate", "%", Some(worst_peak)));
        for retried in [true, false] {
            let Some(l) = lim.iter().filter(|l| l.retried == retried).max_by(|a, b| a.err_pct().abs().total_cmp(&b.err_pct().abs())) else { continue };
            let what = if retried { "longest context, OOM retried after a trim: the worst error" } else { "longest context, runs before the retry: the worst error" };
            let why = if retried { "the ledger counts the pool's 32 MiB chunks: a measured slack per chunk of live allocations" } else { "the pool's mapped memory, not the live bytes, hit the card" };
            let step = 100.0 * l.resolution as f64 / l.max_context as f64;
            out.findings.push(Finding::new(what, "%", Some(l.err_pct())).note(format!("{} {} {} on {}: measured {}, the ledger's search {} (one bisection step is {step:.1} % there); {why}", l.precision, l.logits.name(), l.attention, l.card, l.max_context, l.predicted_max_context)));
        }
        // How many land within 2 %: the bar for the runs with the retry.
        let retried: Vec<&LimitCheck> = lim.iter().filter(|l| l.retried).collect();
        if !retried.is_empty() {
            let within = retried.iter().filter(|l| l.err_pct().abs() <= 2.0).count();
            let within_step = retried.iter().filter(|l| l.err_pct().abs() > 2.0 && l.err_pct().abs() <= 100.0 * l.resolution as f64 / l.max_context as f64 + 1e-9).count();
            s.say(format!("longest context with the OOM retry: {within} of {} bisections within 2 % of the ledger's search, {within_step} more within one bisection step", retried.len()));
            out.findings.push(Finding::new("longest context, OOM retried: bisections within 2 % of the ledger's search", "count", Some(within as f64)).note(format!("of {}; {within_step} more within one bisection step", retried.len())));
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
                OOM_RETRY => lim.iter().map(|r| r.retried).collect::<Vec<_>>(),
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
                explain: "allocated = the weights, candle's quantized-matmul buffer (Q4: 21,312 B per token of the longest prefill the process ran, kept for good, and 16 MiB), the KV cache and the logits a prefill leaves (loads: the weights alone); peak adds the transient the formula counts tensor by tensor at the forward's busiest moment (peak_at; `workspace`: a Q4 prefill longer than any before grows the buffer in its first down projection, old and new live together). The sweeps are replayed in the order the process ran them. 已分配与峰值:实测 vs 公式(Q4 含 candle 量化矩阵乘的常驻缓冲)。",
            },
            View {
                name: "limits",
                table: LIMITS,
                caption: "Estimator check — the longest context, bisected vs the ledger",
                columns: &[CARD, PRECISION, LOGITS, ATTENTION, BATCH, MAX_CONTEXT, PREDICTED_MAX_CONTEXT, CONTEXT_ERR_PCT, OOM_RETRY],
                group_by: &[FILE],
                chart: None,
                explain: "predicted_max_context: the KV stage's own search (the same doubling lengths, the same bisection grid) run on the ledger, the card's total less the runtime outside the pool. The ledger counts the pool's chunks: CUDA's pool maps 32 MiB at a time and after a trim keeps every chunk a live allocation touches: 25.1 MiB per chunk of live allocations (each counted up to a chunk) at the traced worst layer (data/results/h200/2026-11-23-pool). With oom_retry (a failed request retried after the pool is trimmed, as PyTorch retries after releasing its cache) the bisections land within about 1 % of it, whether the edge is the logits, the attention or the MLP, on an RTX 4090 and an A4000, 7B and 3B; the A4000's BF16 edge at 3,584 tokens is one bisection step (7 %) above; the same command in two processes differed by one step (24,064 and 24,320). Runs before the retry stopped where the pool's mapped memory hit the card: 16,128 tokens instead of 24,064. 最长上下文:同一搜索在账本上的结果(计入内存池 32 MiB 分块的余量);失败后整理内存池再重试,误差约 1 %(A4000 BF16 短上下文差一个二分步长)。",
            },
        ]
    }
}
