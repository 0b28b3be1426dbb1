//! The leak stage's tables: their columns, the CSVs' names, each run's verdict, the views.

use super::demos::Run;
use crate::error::Result;
use crate::experiments::oom;
use crate::memory::{mib, Category};
use crate::stage::{Outcome, View};
use polars::prelude::*;

pub mod col {
    pub const DEMO: &str = "demo";
    pub const VARIANT: &str = "variant";
    pub const MARK: &str = "mark";
    pub const OUTCOME: &str = "outcome";
    pub const ALLOCATED_MIB: &str = "allocated_mib";
    pub const RESERVED_MIB: &str = "reserved_mib";
    pub const PEAK_MIB: &str = "peak_mib";
    pub const GROWTH_MIB: &str = "growth_mib";
    pub const RESERVED_GROWTH_MIB: &str = "reserved_growth_mib";
    pub const KV_CACHE_MIB: &str = "kv_cache_mib";
    pub const LOGITS_MIB: &str = "logits_mib";
    pub const UNATTRIBUTED_MIB: &str = "unattributed_mib";
    pub const FLAGGED: &str = "flagged";
    // leaks_summary
    pub const FLAGGED_STEPS: &str = "flagged_steps";
    pub const SUSTAINED: &str = "sustained";
    pub const STEPS: &str = "steps";
    pub const GROWTH_PER_STEP_MIB: &str = "growth_per_step_mib";
    pub const PREDICTED_PER_STEP_MIB: &str = "predicted_per_step_mib";
    pub const MAIN_CATEGORY: &str = "main_category";
    pub const VERDICT: &str = "verdict";
    pub const NOTE: &str = "note";
}

pub const MARKS_TABLE: &str = "leaks_marks";

pub const SUMMARY_TABLE: &str = "leaks_summary";

pub const OOM_TABLE: &str = "leaks_oom";

pub fn marks_table(runs: &[Run]) -> Result<DataFrame> {
    let mut demo = Vec::new();
    let mut variant = Vec::new();
    let mut mark = Vec::new();
    let mut outcome = Vec::new();
    let mut peak = Vec::new();
    let (mut alloc, mut res, mut growth, mut rgrowth, mut kv, mut lg, mut unattr, mut flagged) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for r in runs {
        let g = r.monitor.growth();
        for (i, m) in r.monitor.marks.iter().enumerate() {
            demo.push(r.demo.name());
            variant.push(r.variant);
            mark.push(m.label.clone());
            outcome.push(r.outcomes.get(i).map(|o| o.as_str()).unwrap_or_default());
            alloc.push(mib(m.snapshot.allocated));
            res.push(mib(m.snapshot.reserved));
            peak.push(mib(m.snapshot.peak));
            kv.push(mib(m.held.get(Category::KvCache)));
            lg.push(mib(m.held.get(Category::Logits)));
            let prev = i.checked_sub(1).map(|j| &g[j]);
            growth.push(prev.map(|x| x.allocated as f64 / crate::memory::MIB));
            rgrowth.push(prev.map(|x| x.reserved as f64 / crate::memory::MIB));
            unattr.push(prev.map(|x| x.unattributed as f64 / crate::memory::MIB));
            flagged.push(prev.map(|x| x.flagged).unwrap_or(false) || r.outcomes.get(i) == Some(&Outcome::Oom));
        }
    }
    Ok(df!(
        col::DEMO => demo, col::VARIANT => variant, col::MARK => mark, col::OUTCOME => outcome,
        col::ALLOCATED_MIB => alloc, col::PEAK_MIB => peak, col::RESERVED_MIB => res, col::GROWTH_MIB => growth, col::RESERVED_GROWTH_MIB => rgrowth,
        col::KV_CACHE_MIB => kv, col::LOGITS_MIB => lg, col::UNATTRIBUTED_MIB => unattr, col::FLAGGED => flagged,
    )?)
}

/// What grew in the steps that grew most (or "oom").
fn main_cause(r: &Run) -> &'static str {
    if r.outcomes.contains(&Outcome::Oom) {
        return "oom";
    }
    if !r.flagged() {
        return "";
    }
    r.monitor.growth().iter().max_by_key(|g| g.allocated).and_then(|g| g.main_cause()).unwrap_or("")
}

pub fn verdict(r: &Run) -> &'static str {
    match (r.flagged(), r.leaks) {
        (true, true) => "flagged, as expected",
        (false, false) => "passed, as expected",
        (true, false) => "flagged, NOT expected",
        (false, true) => "passed, NOT expected",
    }
}

pub fn summary_table(runs: &[Run]) -> Result<DataFrame> {
    Ok(df!(
        col::DEMO => runs.iter().map(|r| r.demo.name()).collect::<Vec<_>>(),
        col::VARIANT => runs.iter().map(|r| r.variant).collect::<Vec<_>>(),
        col::STEPS => runs.iter().map(|r| r.monitor.growth().len() as u64).collect::<Vec<_>>(),
        col::FLAGGED_STEPS => runs.iter().map(|r| r.monitor.leaks().len() as u64).collect::<Vec<_>>(),
        col::SUSTAINED => runs.iter().map(|r| r.monitor.sustained().is_some()).collect::<Vec<_>>(),
        col::GROWTH_PER_STEP_MIB => runs.iter().map(|r| r.growth_per_step().map(|b| b / crate::memory::MIB)).collect::<Vec<_>>(),
        col::PREDICTED_PER_STEP_MIB => runs.iter().map(|r| r.predicted_per_step.map(mib)).collect::<Vec<_>>(),
        col::RESERVED_GROWTH_MIB => runs.iter().map(|r| {
            let m = &r.monitor.marks;
            m.first().zip(m.last()).map(|(a, b)| (b.snapshot.reserved as f64 - a.snapshot.reserved as f64) / crate::memory::MIB)
        }).collect::<Vec<_>>(),
        col::MAIN_CATEGORY => runs.iter().map(|r| main_cause(r)).collect::<Vec<_>>(),
        col::VERDICT => runs.iter().map(verdict).collect::<Vec<_>>(),
        col::NOTE => runs.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )?)
}

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "summary",
            table: SUMMARY_TABLE,
            caption: "Stage 3 — leaks: each cause, leaky vs clean, as the monitor judged it",
            columns: &[DEMO, VARIANT, STEPS, FLAGGED_STEPS, SUSTAINED, GROWTH_PER_STEP_MIB, PREDICTED_PER_STEP_MIB, RESERVED_GROWTH_MIB, MAIN_CATEGORY, VERDICT, NOTE],
            group_by: &[],
            chart: None,
            explain: "A kept KV cache grows memory by exactly its size per request; a kept output of a forward with trainable weights holds every tensor that forward allocated (candle records each op's inputs, as PyTorch without torch.no_grad()); the oversized batch ends in an OOM, diagnosed below. 泄漏按类别归因;reserved 的增长不算泄漏。",
        },
        View {
            name: "marks",
            table: MARKS_TABLE,
            caption: "Stage 3 — leaks: the monitor's marks (MiB)",
            columns: &[MARK, OUTCOME, ALLOCATED_MIB, PEAK_MIB, GROWTH_MIB, KV_CACHE_MIB, LOGITS_MIB, UNATTRIBUTED_MIB, RESERVED_MIB, RESERVED_GROWTH_MIB, FLAGGED],
            group_by: &[DEMO, VARIANT],
            chart: None,
            explain: "Growth is allocated bytes between consecutive marks; the categories are what the lab knows it holds (the history of caches, the kept logits); unattributed growth is what no category explains — the autograd graph.",
        },
        oom::view("oom", OOM_TABLE, "Stage 3 — the oversized batch's OOM, diagnosed (MiB)"),
    ]
}
