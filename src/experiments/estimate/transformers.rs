//! `estimate --engine transformers`: the report's own stack. What `from_pretrained` and the
//! report's KV-cache sweep take of the card, length by length, replayed through PyTorch's caching
//! allocator (`crate::estimate::transformers`).

use super::tables::{col, TRANSFORMERS};
use crate::error::{LabError, Result};
use crate::estimate::transformers::{self, Dtype, Load, Target, TORCH_CONTEXT};
use crate::memory::{gib, mib};
use crate::model::{DecoderConfig, Precision};
use crate::reference::{self, report};
use crate::session::Session;
use crate::stage::{Finding, StageOutput};
use polars::prelude::*;

/// The sweep's first length, as the report's script starts.
const FIRST: usize = 1024;

fn dtype(p: Precision) -> Result<Dtype> {
    match p {
        Precision::Bf16 | Precision::F16 => Ok(Dtype { bytes: 2 }),
        Precision::F32 => Ok(Dtype { bytes: 4 }),
        other => Err(LabError::input(format!(
            "--engine transformers prices bf16, f16 and f32; {other} is not priced (bitsandbytes' Int4 is not modelled)"
        ))),
    }
}

/// The sweep from 1,024 tokens doubling up to `max_seq` for each precision, on the session's card
/// (less PyTorch's context) or, with no card, on one with room for everything.
pub fn sweep(s: &mut Session, cfg: &DecoderConfig, precisions: &[Precision], max_seq: usize) -> Result<StageOutput> {
    let dtypes = precisions.iter().map(|&p| dtype(p).map(|d| (p, d))).collect::<Result<Vec<_>>>()?;
    let card = s.card().cloned();
    // Compute 9.0 and later (H100, H200) take the larger cuBLAS workspace.
    let hopper = card.as_ref().is_none_or(|c| c.name.contains("h100") || c.name.contains("h200"));
    let target = Target::card(card.as_ref().map(|c| c.total_bytes()).unwrap_or(u64::MAX / 4), hopper);
    let capacity = target.capacity;
    match &card {
        Some(c) => s.say(format!(
            "transformers on {}: PyTorch may map {:.2} GiB ({:.0} MiB less {:.1} MiB of CUDA context and PyTorch's start, measured on an H200)",
            c.label,
            gib(capacity),
            c.total_mib,
            mib(TORCH_CONTEXT)
        )),
        None => s.say("transformers with no --card: every length fits; give --card rtx4090 (or a size) for the OOM"),
    }
    // The report's figures apply to its model in BF16 on its card.
    let report_case = reference::is_report_model(cfg) && card.as_ref().is_some_and(|c| c.name == "rtx4090");
    let mut out = StageOutput::default();
    let (mut names, mut seqs, mut before, mut after, mut peak, mut reserved, mut outcome) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for (p, d) in dtypes {
        let sw = transformers::sweep(cfg, d, target, Load::Pretrained, FIRST.min(max_seq), max_seq);
        if let Some(oom) = sw.load_oom {
            s.say(format!(
                "{p}: from_pretrained runs out of memory asking for {:.2} GiB with {:.2} GiB allocated",
                gib(oom.request),
                gib(oom.allocated)
            ));
        } else {
            s.say(format!(
                "{p}: loaded {:.2} GiB allocated, {:.2} GiB reserved",
                gib(sw.loaded_allocated),
                gib(sw.loaded_reserved)
            ));
        }
        let report = report_case && p == Precision::Bf16;
        out.findings.push(
            Finding::new(format!("transformers {p}: allocated after from_pretrained"), "GiB", None)
                .predicted(gib(sw.loaded_allocated))
                .report(report.then_some(report::BF16_LOADED.0))
                .note("the weights, each rounded to 512 B; a tied head's copy too"),
        );
        for st in &sw.steps {
            names.push(p.to_string());
            seqs.push(st.seq as u64);
            before.push(gib(st.before));
            after.push(gib(st.after));
            peak.push(gib(st.peak));
            reserved.push(gib(st.reserved));
            outcome.push(match st.oom {
                Some(o) => format!("OOM: tried to allocate {:.2} GiB", gib(o.request)),
                None => "ok".to_string(),
            });
            if let Some(o) = st.oom {
                out.findings.push(
                    Finding::new(format!("transformers {p}: the report's sweep runs out at"), "tokens", None)
                        .predicted(st.seq as f64)
                        .report(report.then_some(report::KV_FIRST_OOM_SEQ))
                        .note(format!("asking for {:.2} GiB with {:.2} GiB allocated", gib(o.request), gib(st.after))),
                );
            }
        }
    }
    out.table(
        TRANSFORMERS,
        df!(
            col::DTYPE => names,
            col::SEQ => seqs,
            col::BEFORE_GIB => before,
            col::AFTER_GIB => after,
            col::PEAK_GIB => peak,
            col::RESERVED_GIB => reserved,
            col::OUTCOME => outcome,
        )?,
    );
    Ok(out)
}
