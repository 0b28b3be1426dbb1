//! Stage 3, the allocator: the report's fragmentation sequence (ten 500 MB blocks, the odd ones
//! freed, 2 GB asked) under three allocator policies, and a false-OOM experiment (a full card of
//! blocks, every other one freed, one request larger than any hole but smaller than the holes
//! together). Every step is run on the device and, in step with it, on the lab's allocator model
//! (`alloc_model`), so each measured figure stands beside its prediction; PyTorch's figures from
//! the reference script run on the same GPU join the same tables. On CPU the model alone runs.
//!
//! Why one file of ~690 lines: the lockstep of device and model, the two experiments and their
//! tables are one stage; it becomes `experiments/frag/` with the other stages' folders (issue 25),
//! when the tables move next to their declared views.

use crate::limits;
use crate::alloc_model::{self, AllocModel, Policy, GRANULE};
use crate::error::{LabError, Result};
use crate::hw::Card;
use crate::memory::{gib, mib, DeviceAllocator, MemoryProbe};
use crate::reference::{pytorch_records, report};
use crate::report::charts;
use crate::search::bisect;
use crate::session::Session;
use crate::stage::{Finding, Outcome, Stage, StageOutput, View};
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub struct Frag;

/// How the false-OOM experiment lays its blocks out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Each block mapped afresh
    Fresh,
    /// The blocks carved out of one large allocation freed just before (a model's activations, say)
    Reused,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Reused => "reused",
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct FragConfig {
    /// Allocator policies, each run in turn
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = FragConfig::default().policies)]
    pub policies: Vec<Policy>,
    /// The report's sequence: this many blocks…
    #[arg(long, default_value_t = FragConfig::default().blocks, value_parser = limits::count(limits::MAX_REPEATS))]
    pub blocks: usize,
    /// …of this many MiB each (the report's "500 MB" is 500 × 1024² bytes)
    #[arg(long, default_value_t = FragConfig::default().block_mib, value_parser = limits::mib())]
    pub block_mib: u64,
    /// …then one request of this many MiB
    #[arg(long, default_value_t = FragConfig::default().request_mib, value_parser = limits::mib())]
    pub request_mib: u64,
    /// False OOM: layouts to try
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = FragConfig::default().layouts)]
    pub layouts: Vec<Layout>,
    /// False OOM: the blocks that fill the card, MiB
    #[arg(long, default_value_t = FragConfig::default().hole_mib, value_parser = limits::mib())]
    pub hole_mib: u64,
    /// False OOM: the request, MiB (larger than a hole, smaller than the holes together)
    #[arg(long, default_value_t = FragConfig::default().hole_request_mib, value_parser = limits::mib())]
    pub hole_request_mib: u64,
    /// PyTorch's figures from `scripts/reference/pytorch_reference.py frag` on the same GPU (JSON lines)
    #[arg(long)]
    pub pytorch: Option<PathBuf>,
    /// The card the model stands for when no GPU runs (CPU)
    #[arg(long, default_value_t = FragConfig::default().model_card)]
    pub model_card: String,
}

impl Default for FragConfig {
    fn default() -> Self {
        Self {
            policies: vec![Policy::Pool, Policy::Caching, Policy::Sync],
            blocks: 10,
            block_mib: 500,
            request_mib: 2048,
            layouts: vec![Layout::Fresh, Layout::Reused],
            hole_mib: 512,
            hole_request_mib: 2048,
            pytorch: None,
            model_card: "rtx4090".into(),
        }
    }
}

pub mod col {
    pub const ALLOCATOR: &str = "allocator";
    pub const STEP: &str = "step";
    pub const OUTCOME: &str = "outcome";
    pub const MODEL_OUTCOME: &str = "model_outcome";
    pub const ALLOCATED_GIB: &str = "allocated_gib";
    pub const MODEL_ALLOCATED_GIB: &str = "model_allocated_gib";
    pub const REPORT_ALLOCATED_GIB: &str = "report_allocated_gib";
    pub const RESERVED_GIB: &str = "reserved_gib";
    pub const MODEL_RESERVED_GIB: &str = "model_reserved_gib";
    pub const REPORT_RESERVED_GIB: &str = "report_reserved_gib";
    pub const DEVICE_FREE_GIB: &str = "device_free_gib";
    pub const PROCESS_USED_GIB: &str = "process_used_gib";
    pub const LARGEST_BLOCK_GIB: &str = "largest_block_gib";
    pub const MODEL_LARGEST_BLOCK_GIB: &str = "model_largest_block_gib";
    pub const ALLOCATED_BYTES: &str = "allocated_bytes";
    pub const RESERVED_BYTES: &str = "reserved_bytes";
    pub const LARGEST_BLOCK_BYTES: &str = "largest_block_bytes";
    // frag_false_oom
    pub const LAYOUT: &str = "layout";
    pub const BLOCKS: &str = "blocks";
    pub const HOLE_MIB: &str = "hole_mib";
    pub const FREED_MIB: &str = "freed_mib";
    pub const REQUEST_MIB: &str = "request_mib";
    pub const RESERVED_BEFORE_MIB: &str = "reserved_before_mib";
    pub const RESERVED_AFTER_MIB: &str = "reserved_after_mib";
    pub const MODEL_RESERVED_AFTER_MIB: &str = "model_reserved_after_mib";
    pub const DEVICE_FREE_BEFORE_MIB: &str = "device_free_before_mib";
    pub const DEVICE_FREE_AFTER_MIB: &str = "device_free_after_mib";
    pub const LARGEST_BLOCK_MIB: &str = "largest_block_mib";
    pub const MODEL_LARGEST_BLOCK_MIB: &str = "model_largest_block_mib";
}

pub const STEPS_TABLE: &str = "frag_steps";
pub const FALSE_OOM_TABLE: &str = "frag_false_oom";

/// The steps of the report's sequence, as both the lab and the reference script name them.
pub mod step {
    pub const START: &str = "start";
    pub const BLOCKS: &str = "blocks_allocated";
    pub const ODD_FREED: &str = "odd_freed";
    pub const REQUEST: &str = "request";
    pub const ALL_FREED: &str = "all_freed";
    pub const EMPTIED: &str = "cache_emptied";
}

/// One reading of the report's sequence.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub allocator: String,
    pub step: String,
    /// The request's outcome on the device ("" where nothing ran or nothing was asked).
    pub outcome: String,
    pub model_outcome: String,
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
    pub device_free: Option<u64>,
    pub process_used: Option<u64>,
    pub largest_block: Option<u64>,
    pub model_allocated: u64,
    pub model_reserved: u64,
    pub model_largest: u64,
}

/// The device and the model driven by the same calls.
struct Lockstep<'a> {
    name: String,
    device: Option<Box<dyn DeviceAllocator + 'a>>,
    model: AllocModel,
    probe: Option<&'a MemoryProbe>,
    /// (device handle, model handle) per block, None once freed or refused.
    blocks: Vec<(Option<u64>, Option<u64>)>,
}

fn outcome_of<T>(r: &Result<T>) -> Result<String> {
    match r {
        Ok(_) => Ok(Outcome::OK.into()),
        Err(LabError::Oom(_)) => Ok(Outcome::OOM.into()),
        Err(e) => Err(LabError::other(e)),
    }
}

impl<'a> Lockstep<'a> {
    /// Allocates on both sides; returns the block's index and the two outcomes.
    fn alloc(&mut self, bytes: u64) -> Result<(usize, String, String)> {
        let (dev, dev_outcome) = match self.device.as_mut() {
            Some(d) => {
                let r = d.alloc(bytes);
                let o = outcome_of(&r)?;
                (r.ok(), o)
            }
            None => (None, String::new()),
        };
        let m = self.model.alloc(bytes).ok();
        let model_outcome = if m.is_some() { Outcome::OK } else { Outcome::OOM };
        self.blocks.push((dev, m));
        Ok((self.blocks.len() - 1, dev_outcome, model_outcome.into()))
    }

    fn free(&mut self, i: usize) {
        let (d, m) = std::mem::take(&mut self.blocks[i]);
        if let (Some(h), Some(dev)) = (d, self.device.as_mut()) {
            dev.free(h);
        }
        if let Some(h) = m {
            self.model.free(h);
        }
    }

    fn synchronize(&mut self) -> Result<()> {
        self.model.synchronize();
        match self.device.as_mut() {
            Some(d) => d.synchronize(),
            None => Ok(()),
        }
    }

    fn trim(&mut self) -> Result<()> {
        self.model.release_idle();
        match self.device.as_mut() {
            Some(d) => d.trim(),
            None => Ok(()),
        }
    }

    /// Bytes the device (or, without one, the model) has free.
    fn free_now(&self) -> u64 {
        self.device.as_ref().map(|d| d.device_free()).unwrap_or_else(|| self.model.unmapped())
    }

    fn largest_on_device(&mut self) -> Result<Option<u64>> {
        let Some(d) = self.device.as_mut() else { return Ok(None) };
        let hi = d.device_free() + d.reserved().saturating_sub(d.allocated()) + GRANULE;
        Ok(Some(bisect(0, hi, GRANULE, |b| d.fits(b))?.0))
    }

    fn read(&mut self, step: &str, outcomes: (String, String), largest: bool) -> Result<Reading> {
        // The process's own usage only where a device runs (on CPU it would be the lab's RSS).
        let snap = self.probe.filter(|_| self.device.is_some()).map(|p| p.snapshot(step));
        let largest_block = if largest { self.largest_on_device()? } else { None };
        Ok(Reading {
            allocator: self.name.clone(),
            step: step.into(),
            outcome: outcomes.0,
            model_outcome: outcomes.1,
            allocated: self.device.as_ref().map(|d| d.allocated()),
            reserved: self.device.as_ref().map(|d| d.reserved()),
            device_free: self.device.as_ref().map(|d| d.device_free()),
            process_used: snap.and_then(|s| s.process_used),
            largest_block,
            model_allocated: self.model.allocated(),
            model_reserved: self.model.reserved(),
            model_largest: if largest { self.model.largest_block() } else { 0 },
        })
    }

    fn free_all(&mut self) {
        for i in 0..self.blocks.len() {
            self.free(i);
        }
    }
}

/// The report's sequence: `blocks` × `block_mib`, the odd ones freed, one request, then all
/// freed and the cache emptied. A reading (with the largest allocatable block) after each step.
fn report_sequence(ls: &mut Lockstep, cfg: &FragConfig) -> Result<Vec<Reading>> {
    let none = || (String::new(), String::new());
    let mut rows = vec![ls.read(step::START, none(), true)?];
    let mut last = none();
    for _ in 0..cfg.blocks {
        let (_, d, m) = ls.alloc(cfg.block_mib << 20)?;
        last = (d, m);
    }
    ls.synchronize()?;
    rows.push(ls.read(step::BLOCKS, last, true)?);
    for i in (1..cfg.blocks).step_by(2) {
        ls.free(i);
    }
    ls.synchronize()?;
    rows.push(ls.read(step::ODD_FREED, none(), true)?);
    let (_, d, m) = ls.alloc(cfg.request_mib << 20)?;
    ls.synchronize()?;
    rows.push(ls.read(step::REQUEST, (d, m), true)?);
    ls.free_all();
    ls.synchronize()?;
    rows.push(ls.read(step::ALL_FREED, none(), true)?);
    ls.trim()?;
    rows.push(ls.read(step::EMPTIED, none(), true)?);
    Ok(rows)
}

/// One false-OOM trial.
#[derive(Debug, Clone, Default)]
pub struct FalseOom {
    pub allocator: String,
    pub layout: String,
    pub blocks: u64,
    pub hole: u64,
    pub freed: u64,
    pub request: u64,
    pub outcome: String,
    pub model_outcome: String,
    pub reserved_before: Option<u64>,
    pub reserved_after: Option<u64>,
    pub model_reserved_after: u64,
    pub free_before: Option<u64>,
    pub free_after: Option<u64>,
    pub largest: Option<u64>,
    pub model_largest: u64,
}

/// Fills the card with `hole` blocks (carved out of one freed allocation for `Reused`), frees
/// every other one, and asks for `request`; then the largest block that still fits.
fn false_oom(ls: &mut Lockstep, layout: Layout, hole: u64, request: u64) -> Result<FalseOom> {
    let n = ls.free_now().saturating_sub(hole / 2) / hole;
    if layout == Layout::Reused {
        let (i, _, _) = ls.alloc(n * hole)?;
        ls.free(i); // no synchronisation: the pool may hand this memory out again at once
    }
    let mut filled = Vec::new();
    for _ in 0..n {
        let (i, d, m) = ls.alloc(hole)?;
        if d == Outcome::OOM || m == Outcome::OOM {
            ls.free(i);
            break;
        }
        filled.push(i);
    }
    let count = filled.len() as u64;
    for &i in filled.iter().skip(1).step_by(2) {
        ls.free(i);
    }
    ls.synchronize()?;
    let before = ls.read("holes", (String::new(), String::new()), false)?;
    let (i, d, m) = ls.alloc(request)?;
    ls.synchronize()?;
    let after = ls.read("request", (d, m), false)?;
    ls.free(i);
    ls.synchronize()?;
    let largest = ls.read("largest", (String::new(), String::new()), true)?;
    ls.free_all();
    ls.trim()?;
    Ok(FalseOom {
        allocator: ls.name.clone(),
        layout: layout.name().into(),
        blocks: count,
        hole,
        freed: count / 2 * hole,
        request,
        outcome: after.outcome,
        model_outcome: after.model_outcome,
        reserved_before: before.reserved,
        reserved_after: after.reserved,
        model_reserved_after: after.model_reserved,
        free_before: before.device_free,
        free_after: after.device_free,
        largest: largest.largest_block,
        model_largest: largest.model_largest,
    })
}

/// A fresh device arena under `policy` (CUDA), or none (CPU: the model runs alone).
fn device_side<'a>(s: &'a Session, policy: Policy) -> Result<Option<Box<dyn DeviceAllocator + 'a>>> {
    match &s.device {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(dev) => Ok(Some(Box::new(crate::memory::device_arena::DeviceArena::new(dev, policy)?))),
        _ => {
            let _ = policy;
            Ok(None)
        }
    }
}

/// The capacity the model is given: what the device has free now, or the card it stands for.
fn model_capacity(s: &Session, cfg: &FragConfig) -> Result<u64> {
    match &s.device {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(dev) => Ok(crate::memory::cuda::mem_info(dev)?.0),
        _ => {
            let card = match s.probe.card() {
                Some(c) => c.clone(),
                None => Card::parse(&cfg.model_card)?,
            };
            Ok(card.total_bytes())
        }
    }
}

fn run_policy(s: &mut Session, cfg: &FragConfig, policy: Policy, steps: &mut Vec<Reading>, ooms: &mut Vec<FalseOom>) -> Result<()> {
    s.check_stop()?;
    s.console.step(format!("{} allocator: the report's sequence", policy.name()));
    let capacity = model_capacity(s, cfg)?;
    let (rows, trials) = {
        let mut ls = Lockstep {
            name: policy.name().into(),
            device: device_side(s, policy)?,
            model: AllocModel::new(policy.behaviour(), capacity),
            probe: Some(&s.probe),
            blocks: Vec::new(),
        };
        let rows = report_sequence(&mut ls, cfg)?;
        let mut trials = Vec::new();
        for &layout in &cfg.layouts {
            s.console.step(format!("{} allocator: false OOM, {} layout", policy.name(), layout.name()));
            // Each trial starts from an empty arena and a model of what is free now.
            ls.model = AllocModel::new(policy.behaviour(), ls.free_now());
            ls.blocks.clear();
            trials.push(false_oom(&mut ls, layout, cfg.hole_mib << 20, cfg.hole_request_mib << 20)?);
        }
        (rows, trials)
    };
    for r in &rows {
        s.say(reading_line(r));
    }
    for t in &trials {
        s.say(false_oom_line(t));
    }
    steps.extend(rows);
    ooms.extend(trials);
    Ok(())
}

fn opt_gib(v: Option<u64>) -> String {
    v.map(|b| format!("{:.3} GiB", gib(b))).unwrap_or_else(|| "—".into())
}

fn reading_line(r: &Reading) -> String {
    format!(
        "{:<18} {:<17} allocated {} (model {:.3}), reserved {} (model {:.3}), largest block {} (model {:.3}){}",
        r.allocator,
        r.step,
        opt_gib(r.allocated),
        gib(r.model_allocated),
        opt_gib(r.reserved),
        gib(r.model_reserved),
        opt_gib(r.largest_block),
        gib(r.model_largest),
        if r.outcome.is_empty() && r.model_outcome.is_empty() { String::new() } else { format!(" — request {} (model {})", dash(&r.outcome), r.model_outcome) }
    )
}

fn dash(s: &str) -> &str {
    if s.is_empty() {
        "—"
    } else {
        s
    }
}

fn false_oom_line(t: &FalseOom) -> String {
    format!(
        "false OOM, {} {}: {} × {} MiB, {} MiB freed in holes, {} MiB asked: {} (model {}); reserved {} → {}, largest block after {}",
        t.allocator,
        t.layout,
        t.blocks,
        t.hole >> 20,
        t.freed >> 20,
        t.request >> 20,
        dash(&t.outcome),
        t.model_outcome,
        opt_gib(t.reserved_before),
        opt_gib(t.reserved_after),
        opt_gib(t.largest),
    )
}

/// PyTorch's readings from the reference script, with the model of its allocator beside them.
fn pytorch_rows(path: &std::path::Path, cfg: &FragConfig) -> Result<(Vec<Reading>, Vec<FalseOom>, Vec<Finding>)> {
    let recs = pytorch_records(path, "frag")?;
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64();
    let mut steps = Vec::new();
    let mut ooms = Vec::new();
    let mut found = Vec::new();
    // The report's own script: its loop variable still holds the last block after the frees.
    for r in recs.iter().filter(|r| r["kind"] == "report_script") {
        let kept = (cfg.blocks as u64).div_ceil(2) + u64::from(cfg.blocks % 2 == 0);
        found.push(
            Finding::new(format!("allocated after freeing the odd blocks, the report's own script ({})", r["allocator"].as_str().unwrap_or("pytorch")), "GiB", u(r, "allocated").map(gib))
                .predicted(gib(kept * (cfg.block_mib << 20)))
                .report((cfg.blocks == 10 && cfg.block_mib == 500).then_some(report::FRAG_ODD_FREED.0))
                .note(format!("{kept} blocks: `for i in range(10): t = torch.empty(...)` leaves `t` holding block {}", cfg.blocks.saturating_sub(1))),
        );
    }
    let allocators: Vec<String> = {
        let mut a: Vec<String> = recs.iter().filter_map(|r| r["allocator"].as_str().map(String::from)).collect();
        a.dedup();
        a
    };
    for name in allocators {
        let behaviour = alloc_model::torch(name.contains("expandable"));
        let mine: Vec<&serde_json::Value> = recs.iter().filter(|r| r["allocator"] == name.as_str()).collect();
        let seq: Vec<&&serde_json::Value> = mine.iter().filter(|r| r["kind"] == "step").collect();
        let Some(start) = seq.first() else { continue };
        // Replay the same sequence on the model of PyTorch's allocator.
        let mut ls = Lockstep { name: name.clone(), device: None, model: AllocModel::new(behaviour, u(start, "device_free").unwrap_or(0)), probe: None, blocks: Vec::new() };
        let model_rows = report_sequence(&mut ls, cfg)?;
        for r in seq {
            let key = r["step"].as_str().unwrap_or_default();
            let m = model_rows.iter().find(|m| m.step == key).cloned().unwrap_or_default();
            steps.push(Reading {
                allocator: name.clone(),
                step: key.into(),
                outcome: r["outcome"].as_str().unwrap_or_default().into(),
                allocated: u(r, "allocated"),
                reserved: u(r, "reserved"),
                device_free: u(r, "device_free"),
                process_used: u(r, "process_used"),
                largest_block: None,
                ..m
            });
        }
        for r in mine.iter().filter(|r| r["kind"] == "false_oom") {
            let layout = if r["layout"] == "reused" { Layout::Reused } else { Layout::Fresh };
            let mut ls = Lockstep { name: name.clone(), device: None, model: AllocModel::new(behaviour, u(r, "device_free_start").unwrap_or(0)), probe: None, blocks: Vec::new() };
            let m = false_oom(&mut ls, layout, u(r, "hole").unwrap_or(cfg.hole_mib << 20), u(r, "request").unwrap_or(cfg.hole_request_mib << 20))?;
            ooms.push(FalseOom {
                outcome: r["outcome"].as_str().unwrap_or_default().into(),
                blocks: u(r, "blocks").unwrap_or(m.blocks),
                freed: u(r, "freed").unwrap_or(m.freed),
                reserved_before: u(r, "reserved_before"),
                reserved_after: u(r, "reserved_after"),
                free_before: u(r, "device_free_before"),
                free_after: u(r, "device_free_after"),
                largest: None,
                ..m
            });
        }
    }
    Ok((steps, ooms, found))
}

/// The report's figures beside the step they belong to (GiB, as it printed them).
fn report_figures(step: &str) -> (Option<f64>, Option<f64>) {
    match step {
        step::BLOCKS => (Some(report::FRAG_TEN_BLOCKS.0), Some(report::FRAG_TEN_BLOCKS.1)),
        step::ODD_FREED => (Some(report::FRAG_ODD_FREED.0), Some(report::FRAG_ODD_FREED.1)),
        step::REQUEST => (None, Some(report::FRAG_AFTER_REQUEST_RESERVED)),
        _ => (None, None),
    }
}

pub fn steps_table(rows: &[Reading], report_sequence: bool) -> Result<DataFrame> {
    let g = |f: &dyn Fn(&Reading) -> Option<u64>| rows.iter().map(|r| f(r).map(gib)).collect::<Vec<Option<f64>>>();
    let rep: Vec<(Option<f64>, Option<f64>)> = rows.iter().map(|r| if report_sequence { report_figures(&r.step) } else { (None, None) }).collect();
    Ok(df!(
        col::ALLOCATOR => rows.iter().map(|r| r.allocator.clone()).collect::<Vec<_>>(),
        col::STEP => rows.iter().map(|r| r.step.clone()).collect::<Vec<_>>(),
        col::OUTCOME => rows.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>(),
        col::MODEL_OUTCOME => rows.iter().map(|r| r.model_outcome.clone()).collect::<Vec<_>>(),
        col::ALLOCATED_GIB => g(&|r| r.allocated),
        col::MODEL_ALLOCATED_GIB => g(&|r| Some(r.model_allocated)),
        col::REPORT_ALLOCATED_GIB => rep.iter().map(|r| r.0).collect::<Vec<_>>(),
        col::RESERVED_GIB => g(&|r| r.reserved),
        col::MODEL_RESERVED_GIB => g(&|r| Some(r.model_reserved)),
        col::REPORT_RESERVED_GIB => rep.iter().map(|r| r.1).collect::<Vec<_>>(),
        col::DEVICE_FREE_GIB => g(&|r| r.device_free),
        col::PROCESS_USED_GIB => g(&|r| r.process_used),
        col::LARGEST_BLOCK_GIB => g(&|r| r.largest_block),
        col::MODEL_LARGEST_BLOCK_GIB => g(&|r| (r.model_largest > 0).then_some(r.model_largest)),
        col::ALLOCATED_BYTES => rows.iter().map(|r| r.allocated).collect::<Vec<_>>(),
        col::RESERVED_BYTES => rows.iter().map(|r| r.reserved).collect::<Vec<_>>(),
        col::LARGEST_BLOCK_BYTES => rows.iter().map(|r| r.largest_block).collect::<Vec<_>>(),
    )?)
}

pub fn false_oom_table(rows: &[FalseOom]) -> Result<DataFrame> {
    let m = |f: &dyn Fn(&FalseOom) -> Option<u64>| rows.iter().map(|r| f(r).map(mib)).collect::<Vec<Option<f64>>>();
    Ok(df!(
        col::ALLOCATOR => rows.iter().map(|r| r.allocator.clone()).collect::<Vec<_>>(),
        col::LAYOUT => rows.iter().map(|r| r.layout.clone()).collect::<Vec<_>>(),
        col::BLOCKS => rows.iter().map(|r| r.blocks).collect::<Vec<_>>(),
        col::HOLE_MIB => rows.iter().map(|r| mib(r.hole)).collect::<Vec<_>>(),
        col::FREED_MIB => rows.iter().map(|r| mib(r.freed)).collect::<Vec<_>>(),
        col::REQUEST_MIB => rows.iter().map(|r| mib(r.request)).collect::<Vec<_>>(),
        col::OUTCOME => rows.iter().map(|r| r.outcome.clone()).collect::<Vec<_>>(),
        col::MODEL_OUTCOME => rows.iter().map(|r| r.model_outcome.clone()).collect::<Vec<_>>(),
        col::RESERVED_BEFORE_MIB => m(&|r| r.reserved_before),
        col::RESERVED_AFTER_MIB => m(&|r| r.reserved_after),
        col::MODEL_RESERVED_AFTER_MIB => m(&|r| Some(r.model_reserved_after)),
        col::DEVICE_FREE_BEFORE_MIB => m(&|r| r.free_before),
        col::DEVICE_FREE_AFTER_MIB => m(&|r| r.free_after),
        col::LARGEST_BLOCK_MIB => m(&|r| r.largest),
        col::MODEL_LARGEST_BLOCK_MIB => m(&|r| Some(r.model_largest)),
    )?)
}

/// The headline figures: what the report's claims come to under each allocator.
fn findings(steps: &[Reading], ooms: &[FalseOom], cfg: &FragConfig) -> Vec<Finding> {
    let at = |alloc: &str, st: &str| steps.iter().find(|r| r.allocator == alloc && r.step == st);
    let mut out = Vec::new();
    let standard = cfg.blocks == 10 && cfg.block_mib == 500 && cfg.request_mib == 2048;
    for (a, why) in [
        ("caching", "the CUDA pool assembles the request from the freed pages behind a fresh virtual range: reserved does not grow, unlike PyTorch"),
        ("pytorch", "no hole holds the request: a new segment is mapped on top and the holes stay reserved (the report's 4.88 → 6.88 GB)"),
        ("pytorch-expandable", "the expandable segment grows at its end, over the last hole: less than a new segment"),
    ] {
        if let (Some(before), Some(after)) = (at(a, step::ODD_FREED), at(a, step::REQUEST)) {
            let grew = |b: &Reading, a: &Reading| a.reserved.zip(b.reserved).map(|(x, y)| mib(x) - mib(y));
            out.push(
                Finding::new(format!("{a} allocator: reserved growth for the {} MiB request", cfg.request_mib), "MiB", grew(before, after))
                    .predicted(mib(after.model_reserved) - mib(before.model_reserved))
                    .report(standard.then_some((report::FRAG_AFTER_REQUEST_RESERVED - report::FRAG_ODD_FREED.1) * 1024.0))
                    .note(why),
            );
        }
    }
    if let Some(r) = at("pool", step::ODD_FREED) {
        out.push(
            Finding::new("pool allocator (candle's): reserved after freeing the odd blocks and synchronising", "GiB", r.reserved.map(gib))
                .predicted(gib(r.model_reserved))
                .report(standard.then_some(report::FRAG_ODD_FREED.1))
                .note(format!(
                    "release threshold 0: freed pages return to the driver at the synchronisation (all but {:.0} MiB); PyTorch (the report) keeps them",
                    r.reserved.zip(r.allocated).map(|(x, y)| mib(x) - mib(y)).unwrap_or(0.0)
                )),
        );
    }
    if let Some(r) = at(cfg.policies.first().map(|p| p.name()).unwrap_or("pool"), step::ODD_FREED) {
        out.push(
            Finding::new("allocated after freeing the odd blocks", "GiB", r.allocated.map(gib))
                .predicted(gib(r.model_allocated))
                .report(standard.then_some(report::FRAG_ODD_FREED.0))
                .note("the report's 2.93 GB is six blocks, not five: its loop variable `t` still holds block 9"),
        );
    }
    for t in ooms {
        out.push(
            Finding::new(format!("false OOM, {} allocator, {} layout: largest block after the holes", t.allocator, t.layout), "MiB", t.largest.map(mib))
                .predicted(mib(t.model_largest))
                .note(format!("{} MiB asked with {} MiB free in holes: {} (model: {})", t.request >> 20, t.freed >> 20, dash(&t.outcome), t.model_outcome)),
        );
    }
    out
}

impl Stage for Frag {
    const NAME: &'static str = "frag";
    const TITLE: &'static str = "Stage 3 — the allocator: fragmentation and false OOM / 显存碎片化与假 OOM";
    const ABOUT: &'static str = "Stage 3: the report's fragmentation sequence and a false OOM under three allocator policies, beside the lab's allocator model and PyTorch";
    const INTRO: &'static str = "报告第三阶段:申请 10 × 500 MB,释放奇数块,再申请 2 GB。PyTorch 的 caching allocator 打印 4.88 / 4.88 → 2.93 / 4.88 → reserved 6.88 GB。<br>The report's stage 3 allocates ten 500 MB blocks, frees the odd ones and asks for 2 GB; PyTorch's caching allocator printed allocated / reserved 4.88 / 4.88 → 2.93 / 4.88 GB, then reserved 6.88 GB. candle allocates from CUDA's stream-ordered pool with release threshold 0, which returns freed memory at the next synchronisation and can remap cached pages: the same sequence tells another story. Each step runs under three policies — the pool as candle uses it, the same pool with its threshold at the maximum (a caching allocator, like PyTorch's), plain cuMemAlloc — and, in step, on the lab's allocator model, whose figures stand beside the measured ones. Then the false OOM: a card full of blocks, every other one freed, one request larger than any hole but smaller than the holes together.";
    type Config = FragConfig;

    fn run(s: &mut Session, cfg: &FragConfig) -> Result<StageOutput> {
        if cfg.hole_request_mib <= cfg.hole_mib {
            return Err(LabError::input(format!("--hole-request-mib ({}) must be larger than --hole-mib ({}): a request that fits in a hole is no false OOM", cfg.hole_request_mib, cfg.hole_mib)));
        }
        if cfg.hole_mib == 0 || cfg.block_mib == 0 {
            return Err(LabError::input("block sizes must be above 0 MiB"));
        }
        if !s.device.is_cuda() {
            s.say(format!("no GPU: the allocator model alone, on {} — run on a GPU for the measured columns", s.probe.card().map(|c| c.label.clone()).unwrap_or_else(|| cfg.model_card.clone())));
        }
        let mut steps = Vec::new();
        let mut ooms = Vec::new();
        let mut pytorch_findings = Vec::new();
        for &p in &cfg.policies {
            run_policy(s, cfg, p, &mut steps, &mut ooms)?;
        }
        if let Some(path) = &cfg.pytorch {
            let (st, oo, found) = pytorch_rows(path, cfg)?;
            s.say(format!("PyTorch: {} readings and {} false-OOM trials from {}", st.len(), oo.len(), path.display()));
            steps.extend(st);
            ooms.extend(oo);
            pytorch_findings = found;
        }
        let standard = cfg.blocks == 10 && cfg.block_mib == 500;
        let mut out = StageOutput::default();
        out.table(STEPS_TABLE, steps_table(&steps, standard)?);
        out.table(FALSE_OOM_TABLE, false_oom_table(&ooms)?);
        out.findings = findings(&steps, &ooms, cfg);
        out.findings.extend(pytorch_findings);
        Ok(out)
    }

    fn views() -> Vec<View> {
        use col::*;
        vec![
            View {
                name: "steps",
                table: STEPS_TABLE,
                caption: "Stage 3 — the report's sequence per allocator (GiB; model = the lab's allocator model)",
                columns: &[STEP, OUTCOME, ALLOCATED_GIB, MODEL_ALLOCATED_GIB, REPORT_ALLOCATED_GIB, RESERVED_GIB, MODEL_RESERVED_GIB, REPORT_RESERVED_GIB, LARGEST_BLOCK_GIB, MODEL_LARGEST_BLOCK_GIB, DEVICE_FREE_GIB, PROCESS_USED_GIB, RESERVED_BYTES],
                group_by: &[ALLOCATOR],
                chart: Some(charts::frag_steps),
                explain: "PyTorch: the freed blocks stay reserved and 2 GiB fits in no 500 MiB hole, so a new segment is mapped on top — reserved grows by exactly 2 GiB, the report's 4.88 → 6.88. CUDA's pool with its threshold at the maximum keeps the holes reserved too, but serves the 2 GiB from their pages behind a fresh virtual range: reserved does not grow. The pool as candle uses it (threshold 0) gives freed pages back at the synchronisation: reserved falls to about allocated. The report's 2.93 GB after the frees is six blocks (its loop variable `t` still holds the last one), not fragmentation. PyTorch 另开新段(+2 GiB);CUDA 内存池把空洞的物理页重新映射给新请求,reserved 不增长。",
            },
            View {
                name: "false_oom",
                table: FALSE_OOM_TABLE,
                caption: "Stage 3 — false OOM: the card filled with blocks, every other one freed, one larger request (MiB)",
                columns: &[ALLOCATOR, LAYOUT, BLOCKS, FREED_MIB, REQUEST_MIB, OUTCOME, MODEL_OUTCOME, RESERVED_BEFORE_MIB, RESERVED_AFTER_MIB, MODEL_RESERVED_AFTER_MIB, DEVICE_FREE_BEFORE_MIB, DEVICE_FREE_AFTER_MIB, LARGEST_BLOCK_MIB, MODEL_LARGEST_BLOCK_MIB],
                group_by: &[],
                chart: None,
                explain: "GPU memory is paged (2 MiB): a request needs free pages, not a free contiguous range. A false OOM needs an allocator that keeps the holes mapped and can neither give them back nor remap them: PyTorch's, when the holes were carved out of one segment that still has live blocks (the reused layout). expandable_segments remaps the pages and the request fits; CUDA's pool, under every threshold, remaps them too, and plain cuMemAlloc never keeps holes. 假 OOM 只在 PyTorch 默认分配器、空洞位于仍有活块的段内时出现。",
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc_model::Behaviour;

    fn model_only(b: Behaviour, cap: u64) -> Lockstep<'static> {
        Lockstep { name: "m".into(), device: None, model: AllocModel::new(b, cap), probe: None, blocks: Vec::new() }
    }

    #[test]
    fn the_sequence_reads_six_steps_and_the_model_predicts_the_report() {
        let cfg = FragConfig::default();
        let rows = report_sequence(&mut model_only(alloc_model::torch(false), 24 << 30), &cfg).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.step.as_str()).collect();
        assert_eq!(names, [step::START, step::BLOCKS, step::ODD_FREED, step::REQUEST, step::ALL_FREED, step::EMPTIED]);
        // PyTorch: 5000 → 2500 / 5000 → 4548 / 7048 MiB; the report's 4.88 → 6.88 GB is the same +2 GiB.
        assert_eq!(rows[2].model_reserved - rows[2].model_allocated, 2500 << 20);
        assert_eq!(rows[3].model_reserved - rows[2].model_reserved, 2048 << 20);
        assert_eq!(rows[4].model_allocated, 0);
        assert_eq!(rows[4].model_reserved, 7048 << 20);
        assert_eq!(rows[5].model_reserved, 0);
        assert_eq!(rows[3].model_outcome, Outcome::OK);
        // The caching pool takes the request from the holes' pages: reserved stays.
        let caching = report_sequence(&mut model_only(Policy::Caching.behaviour(), 24 << 30), &cfg).unwrap();
        assert_eq!(caching[3].model_reserved, caching[2].model_reserved);
        let pool = report_sequence(&mut model_only(Policy::Pool.behaviour(), 24 << 30), &cfg).unwrap();
        assert_eq!(pool[2].model_reserved, 2500 << 20);
    }

    #[test]
    fn false_oom_trial_bookkeeping() {
        let t = false_oom(&mut model_only(alloc_model::torch(false), 24 << 30), Layout::Reused, 512 << 20, 2 << 30).unwrap();
        assert_eq!(t.blocks, 47);
        assert_eq!(t.freed, 23 * (512 << 20));
        assert_eq!(t.model_outcome, Outcome::OOM);
        // The largest block is one hole (or what was never mapped, the same 512 MiB here).
        assert_eq!(t.model_largest, 512 << 20);
        let t = false_oom(&mut model_only(alloc_model::torch(true), 24 << 30), Layout::Reused, 512 << 20, 2 << 30).unwrap();
        assert_eq!(t.model_outcome, Outcome::OK);
        assert!(t.model_largest > 11 << 30);
    }

    #[test]
    fn pytorch_records_join_with_their_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("torch.jsonl");
        let gib = 1u64 << 30;
        let mut lines = vec![];
        for (st, a, r) in [(step::START, 0, 0), (step::BLOCKS, 5000u64 << 20, 5000u64 << 20), (step::ODD_FREED, 3000 << 20, 5000 << 20), (step::REQUEST, 5048 << 20, 7048 << 20)] {
            lines.push(serde_json::json!({"experiment": "frag", "kind": "step", "allocator": "pytorch", "step": st, "allocated": a, "reserved": r, "device_free": 20 * gib}).to_string());
        }
        lines.push(serde_json::json!({"experiment": "frag", "kind": "false_oom", "allocator": "pytorch", "layout": "reused", "outcome": "oom", "device_free_start": 24 * gib, "hole": 512u64 << 20, "request": 2 * gib}).to_string());
        lines.push(serde_json::json!({"experiment": "frag", "kind": "report_script", "allocator": "pytorch", "allocated": 3000u64 << 20}).to_string());
        lines.push(serde_json::json!({"experiment": "kv"}).to_string());
        std::fs::write(&path, lines.join("\n")).unwrap();
        let (steps, ooms, found) = pytorch_rows(&path, &FragConfig::default()).unwrap();
        // Six blocks kept by the report's script: the prediction is its 2.93 GB.
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].predicted, Some(crate::memory::gib(3000 << 20)));
        assert_eq!(found[0].measured, found[0].predicted);
        assert_eq!(steps.len(), 4);
        assert_eq!(steps[2].allocated, Some(3000 << 20));
        assert_eq!(steps[2].model_allocated, 2500 << 20);
        assert_eq!(ooms.len(), 1);
        assert_eq!((ooms[0].outcome.as_str(), ooms[0].model_outcome.as_str()), ("oom", "oom"));
        let df = steps_table(&steps, true).unwrap();
        assert_eq!(df.column(col::REPORT_RESERVED_GIB).unwrap().f64().unwrap().get(3), Some(6.88));
        // A file that is not JSON is an input error.
        std::fs::write(&path, "{oops").unwrap();
        assert!(matches!(pytorch_rows(&path, &FragConfig::default()), Err(LabError::Input(_))));
    }
}
