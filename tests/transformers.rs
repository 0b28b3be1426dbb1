//! transformers' memory: the replay of the report's KV-cache sweep (`estimate --engine
//! transformers`) against every sweep committed under data/results, and its forward's requests
//! against PyTorch's own allocator history.

mod common;

use std::io::Read;
use std::path::Path;
use vram_lab::estimate::caching::{round_size, Caching};
use vram_lab::estimate::transformers::{forward, sweep, Dtype, Load, Target};
use vram_lab::experiments::check::transformers::sweeps;
use vram_lab::hw::Card;
use vram_lab::model::DecoderConfig;

fn results() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/data/results"))
}

fn pct(p: u64, m: u64) -> f64 {
    100.0 * (p as f64 - m as f64) / m as f64
}

/// Every length of every committed sweep: the same outcome; allocated before and after and the
/// peak within 0.5 %, reserved within 2 %; at an OOM the same refused request, and what Python's
/// frames still hold when it catches the error.
#[test]
fn every_committed_sweep_replayed() {
    let all = sweeps(results()).unwrap();
    assert!(all.len() >= 14, "only {} sweeps found", all.len());
    let mut cells = 0;
    for x in &all {
        let (m, p) = (&x.measured, &x.predicted);
        assert_eq!(m.load_oom.is_some(), p.load_oom.is_some(), "{}: the load's outcome", x.file);
        if x.pretrained && m.load_oom.is_none() {
            assert!(pct(p.loaded_allocated, m.loaded_allocated).abs() < 0.01, "{}: loaded allocated", x.file);
            assert!(pct(p.loaded_reserved, m.loaded_reserved).abs() < 0.01, "{}: loaded reserved", x.file);
        }
        let seqs = |s: &[vram_lab::estimate::transformers::Step]| s.iter().map(|t| t.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&m.steps), seqs(&p.steps), "{}: the lengths run", x.file);
        for (ms, ps) in m.steps.iter().zip(&p.steps) {
            let at = format!("{} at {}", x.file, ms.seq);
            assert_eq!(ms.oom.is_some(), ps.oom.is_some(), "{at}: the outcome");
            assert!(pct(ps.before, ms.before).abs() < 0.5, "{at}: before {} vs {}", ps.before, ms.before);
            assert!(pct(ps.after, ms.after).abs() < 0.5, "{at}: after {} vs {}", ps.after, ms.after);
            assert!(pct(ps.peak, ms.peak).abs() < 0.5, "{at}: peak {} vs {}", ps.peak, ms.peak);
            if let (Some(mo), Some(po)) = (ms.oom, ps.oom) {
                // PyTorch prints the request to two decimals.
                assert!(pct(po.request, mo.request).abs() < 0.5, "{at}: request {} vs {}", po.request, mo.request);
            } else {
                assert!(pct(ps.reserved, ms.reserved).abs() < 2.0, "{at}: reserved {} vs {}", ps.reserved, ms.reserved);
            }
            cells += 1;
        }
    }
    assert!(cells >= 30, "only {cells} lengths");
}

/// The report's case on its card, from the formulas alone: Qwen2.5-7B-Instruct in BF16 loads at
/// 14.19 GiB and the sweep runs out at 16,384 tokens asking for that length's logits.
#[test]
fn the_reports_rtx4090_runs_out_at_16384_tokens() {
    let cfg = DecoderConfig::preset("qwen2.5-7b").unwrap();
    let card = Card::parse("rtx4090").unwrap().total_bytes();
    let s = sweep(&cfg, Dtype { bytes: 2 }, Target::card(card, false), Load::Pretrained, 1024, 1 << 20);
    assert_eq!(format!("{:.2}", s.loaded_allocated as f64 / (1u64 << 30) as f64), "14.19");
    let last = s.steps.last().unwrap();
    assert_eq!(last.seq, 16384);
    let logits = 16384 * cfg.vocab_size as u64 * 2;
    assert_eq!(last.oom.map(|o| o.request), Some(round_size(logits)));
    assert!(s.steps[..s.steps.len() - 1].iter().all(|t| t.oom.is_none()));
}

/// The forward's requests, in order, equal those PyTorch's allocator history recorded for every
/// traced forward (BF16 and F32; Qwen2, Qwen3, Llama, Mistral).
#[test]
fn forward_requests_equal_pytorchs_history() {
    let mut traces = Vec::new();
    walk(results(), &mut traces);
    assert!(traces.len() >= 8, "only {} traces", traces.len());
    let mut forwards = 0;
    for t in traces {
        let plain = t.with_file_name(t.file_name().unwrap().to_string_lossy().replace(".trace.jsonl.gz", ".jsonl"));
        let text = std::fs::read_to_string(&plain).unwrap();
        let start: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let first_seq = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["kind"] == "step")
            .unwrap()["seq"]
            .as_u64()
            .unwrap();
        let cfg = DecoderConfig::preset(start["model"].as_str().unwrap()).unwrap();
        let bytes = if start["dtype"] == "float32" { 4 } else { 2 };
        let mut gz = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&t).unwrap()).read_to_string(&mut gz).unwrap();
        let events: Vec<serde_json::Value> = gz.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let mut labels: Vec<&str> =
            events.iter().filter_map(|e| e["trace"].as_str()).filter(|l| l.starts_with("forward-")).collect();
        labels.dedup();
        for label in labels {
            let seq: usize = label["forward-".len()..].parse().unwrap();
            let recorded: Vec<u64> = events
                .iter()
                .filter(|e| e["trace"] == label && e["action"] == "alloc")
                .map(|e| round_size(e["size"].as_u64().unwrap()))
                .collect();
            let mut a = Caching::new(u64::MAX / 4);
            a.record();
            let mut ws = forward::Workspaces::new(forward::CUBLAS_WORKSPACE_HOPPER);
            if seq as u64 != first_seq {
                (ws.cublas, ws.bias) = (Some(0), Some(0));
            }
            assert!(forward::forward(&mut a, &cfg, seq, bytes, &mut ws).is_ok());
            let first = a.requests().iter().zip(&recorded).position(|(x, y)| x != y);
            assert!(
                first.is_none() && a.requests().len() == recorded.len(),
                "{} {label}: {} requests replayed, {} recorded, the first differing at {first:?}",
                t.display(),
                a.requests().len(),
                recorded.len()
            );
            forwards += 1;
        }
    }
    assert!(forwards >= 15, "only {forwards} forwards compared");
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for p in std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()) {
        if p.is_dir() {
            walk(&p, out);
        } else if p.to_string_lossy().ends_with(".trace.jsonl.gz") {
            out.push(p);
        }
    }
}

/// The command a user runs: the report's model on the report's card ends its sweep at 16,384
/// tokens; what the engine does not price is refused by name.
#[test]
fn the_command_prints_the_sweep_and_refuses_what_it_does_not_price() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let args = ["estimate", "--engine", "transformers", "--model", "synthetic:qwen2.5-7b", "--card", "rtx4090"];
    let o = common::lab_quiet(
        &[&args[..], &["--precisions", "bf16", "--seq", "65536", "--out", out.to_str().unwrap()]].concat(),
    );
    assert!(o.status.success(), "{}", common::output_text(&o));
    let df = common::read_csv(&out.join("estimate").join("estimate_transformers.csv"));
    let seq = df.column("seq").unwrap().cast(&polars::prelude::DataType::UInt64).unwrap();
    let outcome = df.column("outcome").unwrap().str().unwrap().clone();
    assert_eq!(seq.u64().unwrap().into_no_null_iter().collect::<Vec<_>>(), [1024, 2048, 4096, 8192, 16384]);
    assert!(outcome.get(4).unwrap().starts_with("OOM: tried to allocate 4.64 GiB"));
    for (extra, needle) in [
        (vec!["--precisions", "q4_k_m"], "q4_k_m is not priced"),
        (vec!["--ngl", "10"], "--ngl is a flag of --engine llama.cpp"),
        (vec!["--tp", "2"], "--tp is not priced for --engine transformers"),
        (vec!["--logits", "all"], "--logits is not priced for --engine transformers"),
    ] {
        let o = common::lab_quiet(&[&args[..], &extra[..]].concat());
        let t = common::output_text(&o);
        assert!(!o.status.success() && t.contains(needle) && !t.contains("panicked"), "{extra:?}:\n{t}");
    }
}
