//! PyTorch's figures for the same sequence, from the reference script's CSV in the same call, and
//! the report's RTX 4090 figures per step.

use super::config::{FragConfig, Layout};
use super::lockstep::Model;
use super::lockstep::{Lockstep, Reading};
use super::sequence::{false_oom, report_sequence, step, FalseOom};
use crate::error::{LabError, Result};
use crate::estimate::caching::Caching;
use crate::limits::{MAX_MIB, MAX_REPEATS};
use crate::memory::gib;
use crate::reference::{pytorch_records, report};
use crate::stage::Finding;

/// The largest byte count a record may hold: 1 PiB, as every size the lab takes.
const MAX_BYTES: u64 = MAX_MIB << 20;

/// PyTorch's readings from the reference script, with the model of its allocator beside them.
pub fn pytorch_rows(path: &std::path::Path, cfg: &FragConfig) -> Result<(Vec<Reading>, Vec<FalseOom>, Vec<Finding>)> {
    let recs = pytorch_records(path, "frag")?;
    let u = |v: &serde_json::Value, k: &str| v[k].as_u64();
    // The file is data: every size the model replays is checked first, so a forged record cannot
    // divide by a hole of 0 or cut a card of 2^64 bytes into billions of holes.
    for r in &recs {
        for k in ["device_free", "device_free_start", "hole", "request"] {
            if let Some(v) = r.get(k).filter(|v| !v.is_null()) {
                let ok = v.as_u64().is_some_and(|b| (1..=MAX_BYTES).contains(&b));
                if !ok {
                    return Err(LabError::input(format!(
                        "{}: {k} = {v} is not a byte count from 1 to 1 PiB",
                        path.display()
                    )));
                }
            }
        }
        if let (Some(free), Some(hole)) = (u(r, "device_free_start"), u(r, "hole")) {
            if free / hole > MAX_REPEATS as u64 {
                return Err(LabError::input(format!(
                    "{}: a hole of {hole} B cuts {free} B into more than {MAX_REPEATS} blocks",
                    path.display()
                )));
            }
        }
    }
    let mut steps = Vec::new();
    let mut ooms = Vec::new();
    let mut found = Vec::new();
    // The report's own script: its loop variable still holds the last block after the frees.
    for r in recs.iter().filter(|r| r["kind"] == "report_script") {
        let kept = (cfg.blocks as u64).div_ceil(2) + u64::from(cfg.blocks.is_multiple_of(2));
        found.push(
            Finding::new(
                format!(
                    "allocated after freeing the odd blocks, the report's own script ({})",
                    r["allocator"].as_str().unwrap_or("pytorch")
                ),
                "GiB",
                u(r, "allocated").map(gib),
            )
            .predicted(gib(kept * (cfg.block_mib << 20)))
            .report((cfg.blocks == 10 && cfg.block_mib == 500).then_some(report::FRAG_ODD_FREED.0))
            .note(format!(
                "{kept} blocks: `for i in range(10): t = torch.empty(...)` leaves `t` holding block {}",
                cfg.blocks.saturating_sub(1)
            )),
        );
    }
    let allocators: Vec<String> = {
        let mut a: Vec<String> = recs.iter().filter_map(|r| r["allocator"].as_str().map(String::from)).collect();
        a.dedup();
        a
    };
    for name in allocators {
        let expandable = name.contains("expandable");
        let torch =
            |capacity| Model::Torch(if expandable { Caching::expandable(capacity) } else { Caching::new(capacity) });
        let mine: Vec<&serde_json::Value> = recs.iter().filter(|r| r["allocator"] == name.as_str()).collect();
        let seq: Vec<&&serde_json::Value> = mine.iter().filter(|r| r["kind"] == "step").collect();
        let Some(start) = seq.first() else { continue };
        // Replay the same sequence on the model of PyTorch's allocator.
        let mut ls = Lockstep {
            name: name.clone(),
            device: None,
            model: torch(u(start, "device_free").unwrap_or(0)),
            probe: None,
            blocks: Vec::new(),
        };
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
            let mut ls = Lockstep {
                name: name.clone(),
                device: None,
                model: torch(u(r, "device_free_start").unwrap_or(0)),
                probe: None,
                blocks: Vec::new(),
            };
            let m = false_oom(
                &mut ls,
                layout,
                u(r, "hole").unwrap_or(cfg.hole_mib << 20),
                u(r, "request").unwrap_or(cfg.hole_request_mib << 20),
            )?;
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
pub fn report_figures(step: &str) -> (Option<f64>, Option<f64>) {
    match step {
        step::BLOCKS => (Some(report::FRAG_TEN_BLOCKS.0), Some(report::FRAG_TEN_BLOCKS.1)),
        step::ODD_FREED => (Some(report::FRAG_ODD_FREED.0), Some(report::FRAG_ODD_FREED.1)),
        step::REQUEST => (None, Some(report::FRAG_AFTER_REQUEST_RESERVED)),
        _ => (None, None),
    }
}
