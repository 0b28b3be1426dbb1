//! Each committed step and limit beside the estimator: the transient and peak of every prefill
//! that fitted, the weights, the longest context the ledger's search finds.

use super::runs::{find, kv_folders, relative, run_context, Folder};
use crate::error::Result;
use crate::estimate::fit::{self, Runtime};
use crate::estimate::{sweep, weight_bytes};
use crate::frame::{floats, strings};
use crate::memory::mib;
use crate::model::{Logits, Precision};
use crate::session::run_folder::read_csv;
use std::path::Path;

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

/// The prefill and batch steps that fitted, under `root`, each predicted for the process it ran
/// in (a Q4 process carries the quantized buffer of its longest prefill so far).
pub fn steps(root: &Path) -> Result<Vec<StepCheck>> {
    Ok(steps_of(&kv_folders(root)?))
}

pub fn steps_of(folders: &[Folder]) -> Vec<StepCheck> {
    let mut out = Vec::new();
    for f in folders {
        for (a, &seen) in f.attempts.iter().zip(&f.seen).filter(|(a, _)| a.ok) {
            let l = fit::ledger_routed(&f.cfg, &a.w, 0, seen, a.routed);
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

/// What loading added in each anatomy run, as (file, precision, measured, predicted) MiB: the
/// allocated bytes after loading less those before, which hold an earlier precision's leftovers
/// (candle's quantized-matmul buffer after Q4_K_M: 17.7 MiB before F32 in
/// `data/results/h200/2026-11-28-pages-stages/call-1/stage-anatomy`).
pub fn weights(root: &Path) -> Result<Vec<(String, Precision, f64, f64)>> {
    let mut files = Vec::new();
    find(root, "anatomy.csv", &mut files);
    let mut out = Vec::new();
    for f in files {
        let (cfg, _) = run_context(&f)?;
        let df = read_csv(&f)?;
        let (outcome, prec, loaded) =
            (strings(&df, "outcome")?, strings(&df, "precision")?, floats(&df, "weights_measured_gib")?);
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

pub fn limits_of(folders: &[Folder]) -> Vec<LimitCheck> {
    let runtime = Runtime::assumed().bytes();
    let mut out = Vec::new();
    for f in folders {
        let Some(card) = &f.card else { continue };
        for l in &f.limits {
            let w = f.attempts[l.first].w;
            let (predicted, _) = sweep::longest_context(
                &f.cfg,
                &w,
                runtime,
                card.total_bytes(),
                &l.doubling,
                l.resolution,
                f.seen[l.first],
            );
            out.push(LimitCheck {
                file: f.limit_file.clone(),
                card: card.name.clone(),
                precision: w.precision,
                logits: w.logits,
                attention: w.attention.name().to_string(),
                batch: w.batch,
                max_context: l.max_context,
                predicted_max_context: predicted,
                retried: l.retried,
                resolution: l.resolution,
            });
        }
    }
    out
}
