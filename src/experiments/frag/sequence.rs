//! The report's sequence (ten blocks, the odd ones freed, a request larger than any hole) and the
//! false OOM: a request that fails while enough bytes are free, for want of one block.

use super::config::{FragConfig, Layout};
use super::lockstep::{Lockstep, Reading};
use crate::error::{LabError, Result};
use crate::limits::MAX_REPEATS;
use crate::stage::Outcome;

/// The steps of the report's sequence, as both the lab and the reference script name them.
pub mod step {
    pub const START: &str = "start";
    pub const BLOCKS: &str = "blocks_allocated";
    pub const ODD_FREED: &str = "odd_freed";
    pub const REQUEST: &str = "request";
    pub const ALL_FREED: &str = "all_freed";
    pub const EMPTIED: &str = "cache_emptied";
}

/// The report's sequence: `blocks` × `block_mib`, the odd ones freed, one request, then all
/// freed and the cache emptied. A reading (with the largest allocatable block) after each step.
pub fn report_sequence(ls: &mut Lockstep, cfg: &FragConfig) -> Result<Vec<Reading>> {
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
pub fn false_oom(ls: &mut Lockstep, layout: Layout, hole: u64, request: u64) -> Result<FalseOom> {
    if hole == 0 {
        return Err(LabError::input("the false-OOM trial needs a hole of at least one byte"));
    }
    let n = ls.free_now().saturating_sub(hole / 2) / hole;
    // Each hole costs the allocator model a pass over the blocks before it: a card cut into
    // hundreds of thousands of holes would take minutes (a 64 TiB card in 500 MB holes).
    if n > MAX_REPEATS as u64 {
        return Err(LabError::input(format!(
            "the false-OOM trial would cut {} of free memory into {n} holes of {}, more than {MAX_REPEATS}: pass a larger --hole-mib or a smaller --card",
            crate::units::fmt_bytes(ls.free_now()),
            crate::units::fmt_bytes(hole)
        )));
    }
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
