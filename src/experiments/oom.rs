//! The OOM diagnosis a stage gives when it catches an out-of-memory: what was held at that moment
//! (weights, KV cache, logits, activations and workspace), the request, what the device had left
//! and who else uses it, and which remedy would have made it fit, with the numbers. A helper for
//! the stages, not a stage.

use crate::error::OomReport;
use crate::estimate::{self, Workload};
use crate::memory::{mib, Category, HeldBytes};
use crate::model::DecoderConfig;
use crate::session::Session;
use polars::prelude::*;

pub mod col {
    pub const CONTEXT: &str = "context";
    pub const SECTION: &str = "section";
    pub const ITEM: &str = "item";
    pub const MIB: &str = "mib";
    pub const FITS: &str = "fits";
    pub const NOTE: &str = "note";
}

#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub context: String,
    pub section: &'static str,
    pub item: String,
    pub mib: Option<f64>,
    pub fits: String,
    pub note: String,
}

fn row(
    context: &str,
    section: &'static str,
    item: impl Into<String>,
    bytes: Option<u64>,
    note: impl Into<String>,
) -> Diagnosis {
    Diagnosis {
        context: context.into(),
        section,
        item: item.into(),
        mib: bytes.map(mib),
        fits: String::new(),
        note: note.into(),
    }
}

/// What the last step that fitted measured: the transient per token (peak above what it held)
/// and the pool's factor (bytes it mapped per byte it handed out above the weights).
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub transient_per_token: f64,
    pub pool_factor: f64,
}

impl Measured {
    /// From a step's base (allocated before), peak, what it held after, its reserved high-water
    /// mark and its tokens.
    pub fn from_step(base: u64, peak: u64, after: u64, reserved_peak: u64, tokens: usize) -> Self {
        let above = peak.saturating_sub(base).max(1) as f64;
        Self {
            transient_per_token: peak.saturating_sub(after) as f64 / tokens.max(1) as f64,
            pool_factor: (reserved_peak.saturating_sub(base) as f64 / above).max(1.0),
        }
    }
}

/// One table's rows for one OOM. `held` names what the caller knows it held (weights, KV cache,
/// logits); the rest of the peak is activations and workspace. `m` comes from the last step of
/// the same kind that fitted.
pub fn diagnose(
    s: &Session,
    context: &str,
    report: &OomReport,
    cfg: &DecoderConfig,
    w: &Workload,
    held: &HeldBytes,
    m: Measured,
) -> Vec<Diagnosis> {
    let transient_per_token = m.transient_per_token;
    // The CPU heap has no pool: its reserved figures are the process's RSS.
    let m = if s.device.is_cuda() { m } else { Measured { pool_factor: 1.0, ..m } };
    let mut rows = Vec::new();
    let snap = report.at.as_ref();
    let peak = snap.map(|s| s.peak).unwrap_or(0);
    for c in [Category::Weights, Category::KvCache, Category::Logits] {
        rows.push(row(context, "held", c.name(), Some(held.get(c)), ""));
    }
    rows.push(row(
        context,
        "held",
        "activations + workspace",
        Some(peak.saturating_sub(held.total())),
        "the pool's peak during the step, less the above",
    ));
    rows.push(row(context, "device", "request", report.request_bytes, format!("failed during {}", report.during)));
    let cap = snap.and_then(|s| s.pool_capacity());
    rows.push(row(
        context,
        "device",
        "capacity for the pool",
        cap,
        "the card less the CUDA context and modules outside the pool",
    ));
    if let (Some(cap), Some(snap)) = (cap, snap) {
        rows.push(row(
            context,
            "device",
            "free at the failure",
            Some(cap.saturating_sub(snap.reserved_peak)),
            "capacity less what the pool had mapped at its busiest",
        ));
    }
    rows.push(row(
        context,
        "device",
        "largest free block now",
        s.probe.largest_free_block(),
        "after the failed step's tensors were freed (bisection)",
    ));
    let others = s.probe.other_processes();
    let other_bytes: u64 = others.iter().map(|(_, b)| b).sum();
    let pids: Vec<String> = others.iter().map(|(p, _)| p.to_string()).collect();
    rows.push(row(
        context,
        "device",
        "other processes",
        Some(other_bytes),
        if pids.is_empty() { "none".to_string() } else { format!("pids {}", pids.join(", ")) },
    ));
    if let Some(cap) = cap {
        let need = estimate::prefill_need(cfg, w, transient_per_token);
        let mut r = row(
            context,
            "need",
            "allocated by this workload",
            Some(need),
            format!("weights + KV + logits + transient {transient_per_token:.0} B/token"),
        );
        r.fits = if need <= cap { "yes" } else { "no" }.into();
        rows.push(r);
        let mapped = estimate::mapped_need(cfg, w, transient_per_token, m.pool_factor);
        let why = if m.pool_factor > 1.0 {
            format!(
                "the pool mapped {:.2}× what it handed out above the weights at the last size that fitted",
                m.pool_factor
            )
        } else {
            "as allocated: no size fitted to measure the pool's overhead, or no pool".to_string()
        };
        let mut r = row(context, "need", "mapped by the pool for it", Some(mapped), why);
        r.fits = if mapped <= cap { "yes" } else { "no" }.into();
        rows.push(r);
        for m in estimate::remedies(cfg, w, cap, transient_per_token, m.pool_factor) {
            let mut r = row(context, "remedy", m.what, Some(m.need), m.change);
            r.fits = if m.fits { "yes" } else { "no" }.into();
            rows.push(r);
        }
    }
    rows
}

pub fn table(rows: &[Diagnosis]) -> PolarsResult<DataFrame> {
    df!(
        col::CONTEXT => rows.iter().map(|r| r.context.clone()).collect::<Vec<_>>(),
        col::SECTION => rows.iter().map(|r| r.section).collect::<Vec<_>>(),
        col::ITEM => rows.iter().map(|r| r.item.clone()).collect::<Vec<_>>(),
        col::MIB => rows.iter().map(|r| r.mib).collect::<Vec<_>>(),
        col::FITS => rows.iter().map(|r| r.fits.clone()).collect::<Vec<_>>(),
        col::NOTE => rows.iter().map(|r| r.note.clone()).collect::<Vec<_>>(),
    )
}

/// The view every stage with OOMs declares for its diagnosis table.
pub fn view(name: &'static str, table: &'static str, caption: &'static str) -> crate::stage::View {
    use col::*;
    crate::stage::View {
        name,
        table,
        caption,
        columns: &[SECTION, ITEM, MIB, FITS, NOTE],
        group_by: &[CONTEXT],
        chart: None,
        explain: "OOM 诊断:失败时各部分占用、请求大小、剩余与最大空闲块,以及哪种补救能装下。What was held when the request failed, what the device had left, and which remedy fits, from the lab's formulas with the transient per token measured at the last step that fitted.",
    }
}
