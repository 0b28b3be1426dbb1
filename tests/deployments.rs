//! Issue 43's committed deployments on two H200s (`data/results/h200x2/2026-11-27-deployments`,
//! RUN.md there): every pipelined GPU, each emulating a user's card, holds the weights, KV cache
//! and peak above the weights its ledger says; and `plan --cards`' longest context lies between the
//! runs that fit and the runs that ran out, as the planner computes it now.

mod common;

use polars::prelude::*;
use std::path::{Path, PathBuf};
use vram_lab::estimate::fit::Runtime;
use vram_lab::experiments::plan::cards::{cards_and_shares, fit_cards};
use vram_lab::model::{DecoderConfig, Precision};

/// Every committed run folder of the deployments (both calls) with its stage's config.
fn runs() -> Vec<(PathBuf, serde_json::Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h200x2/2026-11-27-deployments");
    let mut out = Vec::new();
    for call in ["call-1", "call-2"] {
        for dir in std::fs::read_dir(root.join(call)).unwrap() {
            let dir = dir.unwrap().path();
            let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else { continue };
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut config = m["stages"][0]["config"].clone();
            config["model"] = m["model"].clone();
            out.push((dir, config));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn column_f64(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    let s = df.column(c).unwrap().cast(&DataType::Float64).unwrap();
    s.f64().unwrap().iter().collect()
}

fn column_str(df: &DataFrame, c: &str) -> Vec<String> {
    df.column(c).unwrap().str().unwrap().iter().map(|s| s.unwrap_or_default().to_string()).collect()
}

/// Every GPU of every pipeline that ran: weights and the peak above them within 0.01 % of the
/// ledger, the KV cache to the byte (MiB to 1e-6).
#[test]
fn every_pipelined_gpu_holds_its_ledger() {
    let mut checked = 0;
    for (dir, _) in runs() {
        let df = common::read_csv(&dir.join("parallel/parallel_ranks.csv"));
        let (layout, outcome) = (column_str(&df, "layout"), column_str(&df, "outcome"));
        let cols = ["weights_mib", "weights_predicted_mib", "kv_cache_mib", "kv_cache_predicted_mib"];
        let [w, wp, kv, kvp] = cols.map(|c| column_f64(&df, c));
        let (pa, pap) =
            (column_f64(&df, "peak_above_weights_mib"), column_f64(&df, "peak_above_weights_predicted_mib"));
        for i in 0..df.height() {
            if !layout[i].starts_with("pipeline") || outcome[i] != "ok" {
                continue;
            }
            let what = format!("{} row {i}", dir.display());
            let rel = |m: Option<f64>, p: Option<f64>| (m.unwrap() - p.unwrap()).abs() / p.unwrap();
            assert!(rel(w[i], wp[i]) <= 1e-4, "{what}: weights {:?} vs {:?}", w[i], wp[i]);
            assert!((kv[i].unwrap() - kvp[i].unwrap()).abs() < 1e-6, "{what}: KV {:?} vs {:?}", kv[i], kvp[i]);
            assert!(rel(pa[i], pap[i]) <= 1e-4, "{what}: peak above {:?} vs {:?}", pa[i], pap[i]);
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} pipelined GPUs found");
}

/// The runs at a planned edge and past it: a context (prompt + decoded tokens) the plan holds
/// ran on both cards, one past the plan's longest ran out. The first call's runs at the plan's
/// earlier edges (which left out the pool's chunks) all ran out and count as the latter.
#[test]
fn plan_cards_longest_context_lies_between_the_fit_and_the_oom() {
    let runtime = Runtime::assumed().bytes();
    let (mut fit, mut oom) = (0, 0);
    for (dir, c) in runs() {
        let cards: Vec<String> = c["cards"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
        if cards.is_empty() || !c["split"].as_array().unwrap().is_empty() {
            continue;
        }
        let preset = c["model"].as_str().unwrap().trim_start_matches("synthetic:");
        let cfg = DecoderConfig::preset(preset).unwrap();
        let precision = Precision::parse(c["precision"].as_str().unwrap()).unwrap();
        let (cards, shares) = cards_and_shares(&cards, &[], runtime).unwrap();
        let longest = fit_cards(&cfg, None, precision, 4096, &cards, &shares, runtime).unwrap().max_context;
        let context = (c["prompt"].as_u64().unwrap() + c["new_tokens"].as_u64().unwrap()) as usize;
        let df = common::read_csv(&dir.join("parallel/parallel_ranks.csv"));
        let outcomes: Vec<String> = column_str(&df, "outcome")
            .into_iter()
            .zip(column_str(&df, "layout"))
            .filter(|(_, l)| l.starts_with("pipeline"))
            .map(|(o, _)| o)
            .collect();
        let what = format!("{}: {context} tokens, the plan's longest {longest}", dir.display());
        if outcomes.iter().all(|o| o == "ok") {
            assert!(context <= longest, "{what}: it ran, the plan says it does not fit");
            fit += 1;
        } else {
            assert!(outcomes.iter().all(|o| o == "oom"), "{what}: {outcomes:?}");
            assert!(context > longest, "{what}: it ran out, the plan says it fits");
            oom += 1;
        }
    }
    assert!(fit >= 5 && oom >= 5, "{fit} runs that fit, {oom} that ran out");
}
