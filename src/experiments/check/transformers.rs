//! transformers' memory, length by length: the report's KV-cache sweep as
//! `scripts/reference/transformers_memory.py` ran it (one JSON-lines file per model, dtype and
//! card) beside `estimate --engine transformers`'s replay of the same sweep.

use crate::error::{LabError, Result};
use crate::estimate::caching::Oom;
use crate::estimate::transformers::{self, Dtype, Load, Step, Sweep, Target};
use crate::model::DecoderConfig;
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// The lines the script writes, as far as the check reads them.
#[derive(Debug, Deserialize)]
struct Line {
    kind: String,
    model: String,
    dtype: String,
    card: f64,
    load_path: String,
    #[serde(default)]
    device_total: u64,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    allocated: u64,
    #[serde(default)]
    reserved: u64,
    #[serde(default)]
    segments: Vec<(String, u64, u64)>,
    #[serde(default)]
    seq: usize,
    #[serde(default)]
    before: u64,
    #[serde(default)]
    after: u64,
    #[serde(default)]
    peak: u64,
    #[serde(default)]
    error: Option<String>,
}

/// One file: what was measured and what the replay predicts.
#[derive(Debug, Clone)]
pub struct SweepCheck {
    pub file: String,
    pub model: String,
    pub dtype: String,
    /// The emulated card's MiB, or 0 for the whole GPU.
    pub card_mib: f64,
    pub pretrained: bool,
    pub measured: Sweep,
    pub predicted: Sweep,
}

fn dtype_bytes(name: &str) -> Option<u64> {
    match name {
        "bfloat16" | "float16" => Some(2),
        "float32" => Some(4),
        _ => None,
    }
}

/// "Tried to allocate 4.64 GiB" as bytes (PyTorch prints two decimals).
fn tried(error: &str) -> Option<u64> {
    let rest = error.split("Tried to allocate ").nth(1)?;
    let mut w = rest.split_whitespace();
    let x: f64 = w.next()?.parse().ok()?;
    let unit = match w.next()?.trim_end_matches('.') {
        "GiB" => 1u64 << 30,
        "MiB" => 1 << 20,
        "KiB" => 1 << 10,
        _ => return None,
    };
    Some((x * unit as f64) as u64)
}

fn measured_oom(l: &Line) -> Option<Oom> {
    (l.outcome.as_deref() == Some("oom")).then(|| Oom {
        request: l.error.as_deref().and_then(tried).unwrap_or(0),
        allocated: l.allocated.max(l.after),
        reserved: l.reserved,
    })
}

fn check_file(path: &Path, name: String) -> Result<Option<SweepCheck>> {
    // A sweep's lines are kilobytes; a results folder is not trusted to hold only those.
    let text = crate::paths::read_regular_text(path, 64 << 20)?;
    let bad = |what: String| LabError::input(format!("{name}: {what}"));
    let lines: Vec<Line> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| bad(format!("a line that is not the script's: {e}"))))
        .collect::<Result<_>>()?;
    let Some(start) = lines.iter().find(|l| l.kind == "start") else { return Ok(None) };
    let load = lines.iter().find(|l| l.kind == "load").ok_or_else(|| bad("no load line".into()))?;
    let bytes = dtype_bytes(&start.dtype).ok_or_else(|| bad(format!("dtype {}", start.dtype)))?;
    let cfg = DecoderConfig::preset(&start.model)?;
    let card = if start.card > 0.0 { (start.card * (1u64 << 20) as f64) as u64 } else { start.device_total };
    // Every sweep ran on an H200, emulated card or not: its cuBLAS workspace is Hopper's.
    let target = Target::card(card, true);
    // The lengths come from a file: the replay runs them only within the lab's own bounds.
    if let Some(l) = lines.iter().find(|l| l.kind == "step" && (l.seq == 0 || l.seq > crate::limits::MAX_SEQ)) {
        return Err(bad(format!("a length of {} tokens is outside 1 to {}", l.seq, crate::limits::MAX_SEQ)));
    }
    let measured_steps: Vec<Step> = lines
        .iter()
        .filter(|l| l.kind == "step")
        .map(|l| Step {
            seq: l.seq,
            before: l.before,
            after: l.after,
            peak: l.peak,
            reserved: l.reserved,
            oom: measured_oom(l),
        })
        .collect();
    let measured = Sweep {
        loaded_allocated: load.allocated,
        loaded_reserved: load.reserved,
        load_oom: measured_oom(load),
        steps: measured_steps,
    };
    let pretrained = start.load_path == "pretrained";
    // The synthetic loads (weights drawn in place) are the measurement's own way in, not a user's:
    // the replay starts from the segments they left. A load that ran out is priced as
    // from_pretrained's.
    let segments: Vec<(bool, u64, u64)> =
        load.segments.iter().map(|(pool, size, used)| (pool == "small", *size, *used)).collect();
    let how = if pretrained || measured.load_oom.is_some() { Load::Pretrained } else { Load::Segments(&segments) };
    let (first, last) = match (measured.steps.first(), measured.steps.last()) {
        (Some(f), Some(l)) => (f.seq, l.seq),
        _ => (1024, 1024),
    };
    let predicted = transformers::sweep(&cfg, Dtype { bytes }, target, how, first, last);
    Ok(Some(SweepCheck {
        file: name,
        model: start.model.clone(),
        dtype: start.dtype.clone(),
        card_mib: start.card,
        pretrained,
        measured,
        predicted,
    }))
}

/// Every sweep under `root`, with its replay.
pub fn sweeps(root: &Path) -> Result<Vec<SweepCheck>> {
    let mut files = Vec::new();
    find_jsonl(root, &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let name = f.strip_prefix(root).unwrap_or(&f).display().to_string();
        if let Some(c) = check_file(&f, name)? {
            out.push(c);
        }
    }
    Ok(out)
}

/// The script's files: `*.jsonl` whose first line is its `start` record.
fn find_jsonl(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    out.extend(crate::paths::walk_files(dir, |p| p.extension().is_some_and(|e| e == "jsonl") && first_line_starts(p)));
}

fn first_line_starts(p: &Path) -> bool {
    use std::io::BufRead;
    let Ok((f, _)) = crate::paths::open_regular(p, u64::MAX, false) else { return false };
    let mut line = String::new();
    let mut r = std::io::BufReader::new(f).take(1 << 16);
    r.read_line(&mut line).is_ok() && line.contains("\"kind\": \"start\"")
}

/// The check's rows: the load (seq 0), then every length, measured beside predicted.
pub fn table(all: &[SweepCheck]) -> Result<polars::prelude::DataFrame> {
    use super::tables::col::*;
    use polars::prelude::*;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let pct = |p: u64, m: u64| if m == 0 { f64::NAN } else { 100.0 * (p as f64 - m as f64) / m as f64 };
    let outcome = |o: &Option<Oom>| match o {
        Some(o) => format!("oom {:.2} GiB", o.request as f64 / (1u64 << 30) as f64),
        None => "ok".to_string(),
    };
    // (file, model, dtype, card, seq, outcome, predicted outcome, [allocated, peak, reserved] measured and predicted)
    type Row = (String, String, String, f64, u64, String, String, [u64; 6]);
    let mut rows: Vec<Row> = Vec::new();
    for x in all {
        let (m, p) = (&x.measured, &x.predicted);
        rows.push((
            x.file.clone(),
            x.model.clone(),
            x.dtype.clone(),
            x.card_mib,
            0,
            outcome(&m.load_oom),
            outcome(&p.load_oom),
            [
                m.loaded_allocated,
                p.loaded_allocated,
                m.loaded_allocated,
                p.loaded_allocated,
                m.loaded_reserved,
                p.loaded_reserved,
            ],
        ));
        for (ms, ps) in m.steps.iter().zip(&p.steps) {
            rows.push((
                x.file.clone(),
                x.model.clone(),
                x.dtype.clone(),
                x.card_mib,
                ms.seq as u64,
                outcome(&ms.oom),
                outcome(&ps.oom),
                [ms.after, ps.after, ms.peak, ps.peak, ms.reserved, ps.reserved],
            ));
        }
    }
    let col = |i: usize| rows.iter().map(|r| mib(r.7[i])).collect::<Vec<f64>>();
    let err = |i: usize| rows.iter().map(|r| pct(r.7[i + 1], r.7[i])).collect::<Vec<f64>>();
    Ok(df!(
        FILE => rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        PRESET => rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        DTYPE => rows.iter().map(|r| r.2.clone()).collect::<Vec<_>>(),
        CARD_MIB => rows.iter().map(|r| r.3).collect::<Vec<_>>(),
        SEQ => rows.iter().map(|r| r.4).collect::<Vec<_>>(),
        OUTCOME => rows.iter().map(|r| r.5.clone()).collect::<Vec<_>>(),
        PREDICTED_OUTCOME => rows.iter().map(|r| r.6.clone()).collect::<Vec<_>>(),
        ALLOCATED_MIB => col(0),
        PREDICTED_ALLOCATED_MIB => col(1),
        ALLOCATED_ERR_PCT => err(0),
        PEAK_MIB => col(2),
        PREDICTED_PEAK_MIB => col(3),
        PEAK_ERR_PCT => err(2),
        RESERVED_MIB => col(4),
        PREDICTED_RESERVED_MIB => col(5),
        RESERVED_ERR_PCT => err(4),
    )?)
}

/// The headline: lengths whose outcome matches, and the worst errors of allocated, peak and
/// reserved over the lengths that ran.
pub fn findings(all: &[SweepCheck]) -> Vec<crate::stage::Finding> {
    use crate::stage::Finding;
    let pct = |p: u64, m: u64| 100.0 * (p as f64 - m as f64) / m.max(1) as f64;
    let steps: Vec<_> = all.iter().flat_map(|x| x.measured.steps.iter().zip(&x.predicted.steps)).collect();
    let same = steps.iter().filter(|(m, p)| m.oom.is_some() == p.oom.is_some()).count();
    let ran: Vec<_> = steps.iter().filter(|(m, _)| m.oom.is_none()).collect();
    let worst = |f: &dyn Fn(&Step) -> u64| ran.iter().map(|(m, p)| pct(f(p), f(m)).abs()).fold(0.0, f64::max);
    vec![
        Finding::new(
            "transformers: lengths whose outcome (fits or OOM) the replay matches",
            "count",
            Some(same as f64),
        )
        .note(format!("of {} lengths in {} sweeps", steps.len(), all.len())),
        Finding::new("transformers: the worst |error| of allocated after a forward", "%", Some(worst(&|s| s.after))),
        Finding::new("transformers: the worst |error| of the peak", "%", Some(worst(&|s| s.peak))),
        Finding::new("transformers: the worst |error| of reserved", "%", Some(worst(&|s| s.reserved))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorchs_oom_message_gives_the_request() {
        let e = "CUDA out of memory. Tried to allocate 4.64 GiB. GPU 0 has a total capacity of 139.80 GiB";
        assert_eq!(tried(e), Some((4.64 * (1u64 << 30) as f64) as u64));
        assert_eq!(tried("Tried to allocate 384.00 MiB. GPU"), Some(384 << 20));
        assert_eq!(tried("no such words"), None);
    }
}
