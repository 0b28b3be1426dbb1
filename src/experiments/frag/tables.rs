//! Stage 3's tables: their columns, the CSVs' names, console lines, the views and charts the
//! report draws.

use super::lockstep::Reading;
use super::pytorch::report_figures;
use super::sequence::FalseOom;
use crate::error::Result;
use crate::memory::{gib, mib};
use crate::stage::{ChartSpec, Series, View};
use polars::prelude::*;

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

fn opt_gib(v: Option<u64>) -> String {
    v.map(|b| format!("{:.3} GiB", gib(b))).unwrap_or_else(|| "—".into())
}

pub fn reading_line(r: &Reading) -> String {
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
        if r.outcome.is_empty() && r.model_outcome.is_empty() {
            String::new()
        } else {
            format!(" — request {} (model {})", dash(&r.outcome), r.model_outcome)
        }
    )
}

pub fn dash(s: &str) -> &str {
    if s.is_empty() {
        "—"
    } else {
        s
    }
}

pub fn false_oom_line(t: &FalseOom) -> String {
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

pub fn steps_table(rows: &[Reading], report_sequence: bool) -> Result<DataFrame> {
    let g = |f: &dyn Fn(&Reading) -> Option<u64>| rows.iter().map(|r| f(r).map(gib)).collect::<Vec<Option<f64>>>();
    let rep: Vec<(Option<f64>, Option<f64>)> =
        rows.iter().map(|r| if report_sequence { report_figures(&r.step) } else { (None, None) }).collect();
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

/// Allocated and reserved at each step of the report's sequence, measured and modelled, with the
/// report's figures (one chart per allocator).
const STEPS_CHART: ChartSpec = ChartSpec {
    title: "碎片化 fragmentation: {allocator}",
    x: col::STEP,
    x_title: "step",
    y_title: "GiB",
    series: &[
        Series::column("allocated (measured)", &[(col::ALLOCATED_GIB, 1.0)]),
        Series::column("reserved (measured)", &[(col::RESERVED_GIB, 1.0)]),
        Series::column("reserved (model)", &[(col::MODEL_RESERVED_GIB, 1.0)]),
        Series::column("reserved, report (PyTorch, RTX 4090)", &[(col::REPORT_RESERVED_GIB, 1.0)]),
        Series::column("largest allocatable block (measured)", &[(col::LARGEST_BLOCK_GIB, 1.0)]),
    ],
    ..ChartSpec::BARS
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "steps",
            table: STEPS_TABLE,
            caption: "Stage 3 — the report's sequence per allocator (GiB; model = the lab's allocator model)",
            columns: &[STEP, OUTCOME, ALLOCATED_GIB, MODEL_ALLOCATED_GIB, REPORT_ALLOCATED_GIB, RESERVED_GIB, MODEL_RESERVED_GIB, REPORT_RESERVED_GIB, LARGEST_BLOCK_GIB, MODEL_LARGEST_BLOCK_GIB, DEVICE_FREE_GIB, PROCESS_USED_GIB, RESERVED_BYTES],
            group_by: &[ALLOCATOR],
            chart: Some(STEPS_CHART),
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
