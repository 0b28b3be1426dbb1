//! Stage 3, the allocator: the report's fragmentation sequence (ten 500 MB blocks, the odd ones
//! freed, 2 GB asked) under three allocator policies, and a false-OOM experiment (a full card of
//! blocks, every other one freed, one request larger than any hole but smaller than the holes
//! together). Every step is run on the device and, in step with it, on the lab's allocator model
//! (`estimate::pool`), so each measured figure stands beside its prediction; PyTorch's figures from
//! the reference script run on the same GPU join the same tables. On CPU the model alone runs.

pub mod config;
pub mod lockstep;
pub mod pytorch;
pub mod sequence;
pub mod tables;

use crate::error::{LabError, Result};
use crate::estimate::pool::{self, AllocModel, Behaviour};
use crate::estimate::scaled::SCALED;
use crate::hw::Card;
use crate::memory::host_arena::HostArena;
use crate::memory::policy::Policy;
use crate::memory::{gib, mib, DeviceAllocator};
use crate::reference::report;
use crate::session::Session;
use crate::stage::{Finding, Stage, StageOutput, View};
use lockstep::{Lockstep, Model, Reading};
use pytorch::pytorch_rows;
use sequence::{false_oom, report_sequence, step, FalseOom};
use tables::{dash, false_oom_line, false_oom_table, reading_line, steps_table, FALSE_OOM_TABLE, STEPS_TABLE};

pub use config::{FragConfig, Layout};

pub struct Frag;

/// The CPU's measured allocator: one range of host addresses (`memory::host_arena`).
pub const HOST_ARENA: &str = "host-arena";

/// A fresh device arena under `policy` (CUDA), or none (CPU: the model runs alone).
fn device_side(s: &Session, policy: Policy) -> Result<Option<Box<dyn DeviceAllocator>>> {
    match &s.device {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(dev) => {
            Ok(Some(Box::new(crate::memory::device_arena::DeviceArena::new(dev, policy)?)))
        }
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
            // An allocator's granules (2 MiB pages, 20 MiB segments) do not scale with a card:
            // a scaled card's story is told at the report's sizes on the card it stands for.
            let card = match s.card().filter(|c| c.name != SCALED) {
                Some(c) => c.clone(),
                None => Card::parse(&cfg.model_card)?,
            };
            Ok(card.total_bytes())
        }
    }
}

/// The readings of the report's sequence and the false-OOM trials under one allocator.
type Readings = (Vec<Reading>, Vec<FalseOom>);

fn run_policy(s: &mut Session, cfg: &FragConfig, policy: Policy) -> Result<Readings> {
    let capacity = model_capacity(s, cfg)?;
    let device = device_side(s, policy)?;
    run_lockstep(s, cfg, policy.name(), device, pool::behaviour(policy), capacity)
}

/// On CPU: the card's capacity as one range of host addresses cut by a heap, in step with the
/// model's `one_range` — the false OOM measured by real allocations, not only predicted.
fn run_host_arena(s: &mut Session, cfg: &FragConfig) -> Result<Readings> {
    let capacity = model_capacity(s, cfg)?;
    let arena = match HostArena::new(capacity) {
        Ok(a) => a,
        Err(e) => {
            s.say(format!("host arena not run: {e}"));
            return Ok(Default::default());
        }
    };
    run_lockstep(s, cfg, HOST_ARENA, Some(Box::new(arena)), pool::one_range(), capacity)
}

fn run_lockstep(
    s: &mut Session,
    cfg: &FragConfig,
    name: &str,
    device: Option<Box<dyn DeviceAllocator>>,
    behaviour: Behaviour,
    capacity: u64,
) -> Result<Readings> {
    s.check_stop()?;
    s.console.step(format!("{name} allocator: the report's sequence"));
    let (rows, trials) = {
        // The process's usage is read only on a GPU (on CPU it would be the lab's RSS).
        let probe = s.device.is_cuda().then_some(&s.probe);
        let mut ls = Lockstep {
            name: name.into(),
            device,
            model: Model::Lab(AllocModel::new(behaviour, capacity)),
            probe,
            blocks: Vec::new(),
        };
        let rows = report_sequence(&mut ls, cfg)?;
        let mut trials = Vec::new();
        for &layout in &cfg.layouts {
            s.console.step(format!("{name} allocator: false OOM, {} layout", layout.name()));
            // Each trial starts from an empty arena and a model of what is free now.
            ls.model = Model::Lab(AllocModel::new(behaviour, ls.free_now()));
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
    Ok((rows, trials))
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
            Finding::new(
                format!("false OOM, {} allocator, {} layout: largest block after the holes", t.allocator, t.layout),
                "MiB",
                t.largest.map(mib),
            )
            .predicted(mib(t.model_largest))
            .note(format!(
                "{} MiB asked with {} MiB free in holes: {} (model: {})",
                t.request >> 20,
                t.freed >> 20,
                dash(&t.outcome),
                t.model_outcome
            )),
        );
    }
    out
}

impl Stage for Frag {
    const NAME: &'static str = "frag";
    const TITLE: &'static str = "Stage 3 — the allocator: fragmentation and false OOM / 显存碎片化与假 OOM";
    const ABOUT: &'static str =
        "Stage 3: the report's fragmentation sequence and a false OOM under three allocator policies, beside the lab's allocator model and PyTorch";
    const INTRO: &'static str = "报告第三阶段:申请 10 × 500 MB,释放奇数块,再申请 2 GB。PyTorch 的 caching allocator 打印 4.88 / 4.88 → 2.93 / 4.88 → reserved 6.88 GB。<br>The report's stage 3 allocates ten 500 MB blocks, frees the odd ones and asks for 2 GB; PyTorch's caching allocator printed allocated / reserved 4.88 / 4.88 → 2.93 / 4.88 GB, then reserved 6.88 GB. candle allocates from CUDA's stream-ordered pool with release threshold 0, which returns freed memory at the next synchronisation and can remap cached pages: the same sequence tells another story. Each step runs under three policies — the pool as candle uses it, the same pool with its threshold at the maximum (a caching allocator, like PyTorch's), plain cuMemAlloc — and, in step, on the lab's allocator model, whose figures stand beside the measured ones. Then the false OOM: a card full of blocks, every other one freed, one request larger than any hole but smaller than the holes together.";
    type Config = FragConfig;

    fn run(s: &mut Session, cfg: &FragConfig) -> Result<StageOutput> {
        if cfg.hole_request_mib <= cfg.hole_mib {
            return Err(LabError::input(format!(
                "--hole-request-mib ({}) must be larger than --hole-mib ({}): a request that fits in a hole is no false OOM",
                cfg.hole_request_mib, cfg.hole_mib
            )));
        }
        if cfg.hole_mib == 0 || cfg.block_mib == 0 {
            return Err(LabError::input("block sizes must be above 0 MiB"));
        }
        if !s.device.is_cuda() {
            let on = s
                .probe
                .card()
                .filter(|c| c.name != SCALED)
                .map(|c| c.label.clone())
                .unwrap_or_else(|| cfg.model_card.clone());
            s.say(format!("no GPU: the CUDA policies as the model alone, on {on} at the report's sizes (run on a GPU for their measured columns); measured: the same capacity as one range of host addresses"));
        }
        let mut steps = Vec::new();
        let mut ooms = Vec::new();
        let mut pytorch_findings = Vec::new();
        for &p in &cfg.policies {
            let (st, oo) = run_policy(s, cfg, p)?;
            steps.extend(st);
            ooms.extend(oo);
        }
        if !s.device.is_cuda() {
            let (st, oo) = run_host_arena(s, cfg)?;
            steps.extend(st);
            ooms.extend(oo);
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
        tables::views()
    }
}

#[cfg(test)]
mod tests {
    use super::lockstep::{Lockstep, Model};
    use super::pytorch::pytorch_rows;
    use super::sequence::{false_oom, report_sequence};
    use super::tables::{col, steps_table};
    use super::*;
    use crate::estimate::caching::Caching;
    use crate::estimate::pool::Behaviour;
    use crate::stage::Outcome;

    fn model_only(model: Model) -> Lockstep<'static> {
        Lockstep { name: "m".into(), device: None, model, probe: None, blocks: Vec::new() }
    }

    fn lab(b: Behaviour, cap: u64) -> Lockstep<'static> {
        model_only(Model::Lab(AllocModel::new(b, cap)))
    }

    #[test]
    fn the_sequence_reads_six_steps_and_the_model_predicts_the_report() {
        let cfg = FragConfig::default();
        let rows = report_sequence(&mut model_only(Model::Torch(Caching::new(24 << 30))), &cfg).unwrap();
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
        let caching = report_sequence(&mut lab(pool::behaviour(Policy::Caching), 24 << 30), &cfg).unwrap();
        assert_eq!(caching[3].model_reserved, caching[2].model_reserved);
        let pool = report_sequence(&mut lab(pool::behaviour(Policy::Pool), 24 << 30), &cfg).unwrap();
        assert_eq!(pool[2].model_reserved, 2500 << 20);
    }

    #[test]
    fn false_oom_trial_bookkeeping() {
        let t = false_oom(&mut model_only(Model::Torch(Caching::new(24 << 30))), Layout::Reused, 512 << 20, 2 << 30)
            .unwrap();
        assert_eq!(t.blocks, 47);
        assert_eq!(t.freed, 23 * (512 << 20));
        assert_eq!(t.model_outcome, Outcome::OOM);
        // The largest block is one hole (or what was never mapped, the same 512 MiB here).
        assert_eq!(t.model_largest, 512 << 20);
        let t =
            false_oom(&mut model_only(Model::Torch(Caching::expandable(24 << 30))), Layout::Reused, 512 << 20, 2 << 30)
                .unwrap();
        assert_eq!(t.model_outcome, Outcome::OK);
        assert!(t.model_largest > 11 << 30);
    }

    #[test]
    fn pytorch_records_join_with_their_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("torch.jsonl");
        let gib = 1u64 << 30;
        let mut lines = vec![];
        for (st, a, r) in [
            (step::START, 0, 0),
            (step::BLOCKS, 5000u64 << 20, 5000u64 << 20),
            (step::ODD_FREED, 3000 << 20, 5000 << 20),
            (step::REQUEST, 5048 << 20, 7048 << 20),
        ] {
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
