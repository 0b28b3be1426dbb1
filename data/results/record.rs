//! What the committed record says, checked beside it (`cargo test --test record`, part of `cargo test`): each
//! test reads a results folder's CSVs and holds the claims its RUN.md makes (ceilings not passed, peaks beside
//! the ledger, one variant faster than another in the same call). The tests of the lab's own code are in tests/;
//! these change only when a results folder does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

type Rows = Vec<HashMap<String, String>>;

fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h200")
}

fn csv(path: &Path) -> (Vec<String>, Rows) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
    let rows = lines.map(|l| header.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect();
    (header, rows)
}

fn num(r: &HashMap<String, String>, col: &str) -> f64 {
    r[col].parse().unwrap_or_else(|_| panic!("{col} = {:?}", r[col]))
}

/// The `seq`-token row of the bench run `run`'s `bench/bench_prefill.csv`, its peak checked beside
/// the ledger's.
fn prefill_row(run: &Path, seq: &str) -> HashMap<String, String> {
    let r = csv(&run.join("bench/bench_prefill.csv")).1.into_iter().find(|r| r["seq"] == seq).unwrap();
    let apart = num(&r, "peak_mib") - num(&r, "ledger_peak_mib");
    assert!(apart.abs() < 0.2, "{} {seq}: peak beside the ledger", run.display());
    r
}

/// The one row of a bench run's `bench/bench_decode.csv` under `dir`.
fn decode_row(dir: &Path, run: &str) -> HashMap<String, String> {
    csv(&dir.join(run).join("bench/bench_decode.csv")).1.remove(0)
}

/// Every old column is still there under its name.
fn keeps_columns(old: &[String], new: &[String], what: &str) {
    let missing: Vec<_> = old.iter().filter(|c| !new.contains(c)).collect();
    assert!(missing.is_empty(), "{what}: columns gone: {missing:?}");
}

#[test]
fn stage1_reproduces_to_the_byte() {
    let (oh, old) = csv(&results().join("2026-11-21-stage1/anatomy-rtx4090/anatomy.csv"));
    let (nh, new) = csv(&results().join("2026-11-22-run/run/anatomy/anatomy.csv"));
    keeps_columns(&oh, &nh, "anatomy.csv");
    assert_eq!(old.len(), new.len());
    for (o, n) in old.iter().zip(&new) {
        assert_eq!(o["precision"], n["precision"]);
        assert_eq!(o["outcome"], n["outcome"]);
        for c in [
            "predicted_weights_gib",
            "loaded_allocated_gib",
            "loaded_reserved_gib",
            "loaded_peak_gib",
            "after_allocated_gib",
            "oom_request_mib",
        ] {
            assert_eq!(o[c], n[c], "{} {c}", o["precision"]);
        }
    }
    let (oh, old) = csv(&results().join("2026-11-21-stage1/anatomy-rtx4090/anatomy_timeline.csv"));
    let (nh, new) = csv(&results().join("2026-11-22-run/run/anatomy/anatomy_timeline.csv"));
    keeps_columns(&oh, &nh, "anatomy_timeline.csv");
    for (o, n) in old.iter().zip(&new) {
        for c in ["label", "allocated_mib", "reserved_mib", "peak_mib", "device_used_mib"] {
            assert_eq!(o[c], n[c], "{} {c}", o["label"]);
        }
    }
}

#[test]
fn stage2_ledger_reproduces_and_the_limit_alone() {
    let old_dir = results().join("2026-11-21-stage2");
    let new_dir = results().join("2026-11-22-run");
    let (oh, old) = csv(&old_dir.join("kv-bf16-all-rtx4090/kv_prefill.csv"));
    let (nh, run) = csv(&new_dir.join("run/kv/kv_prefill.csv"));
    keeps_columns(&oh, &nh, "kv_prefill.csv");
    for c in ["logits", "reserved_peak_mib", "outside_pool_mib"] {
        assert!(nh.iter().any(|h| h == c), "new column {c}");
    }
    // The per-token ledger is the same at every length both swept, in the full run too.
    let bf16_all = |r: &&HashMap<String, String>| {
        r["precision"] == "bf16" && r["logits"] == "all" && r["attention"] == "bounded" && r["outcome"] == "ok"
    };
    let mut compared = 0;
    for o in old.iter().filter(|r| r["outcome"] == "ok") {
        if let Some(n) = run.iter().filter(bf16_all).find(|n| n["seq"] == o["seq"]) {
            for c in ["held_mib", "kv_measured_mib", "logits_mib", "growth_per_1k_tokens_mib"] {
                assert!((num(o, c) - num(n, c)).abs() < 1e-6, "seq {} {c}: {} vs {}", o["seq"], o[c], n[c]);
            }
            compared += 1;
        }
    }
    assert!(compared >= 4, "only {compared} lengths in common");
    // Alone in a fresh process, the longest context is the committed one.
    let (_, old_limit) = csv(&old_dir.join("kv-bf16-all-rtx4090/kv_limit.csv"));
    let (lh, alone) = csv(&new_dir.join("kv-alone/kv/kv_limit.csv"));
    assert!(lh.iter().any(|h| h == "attention"));
    assert_eq!(old_limit[0]["max_context"], alone[0]["max_context"]);
    assert_eq!(old_limit[0]["first_oom"], alone[0]["first_oom"]);
    // Inside the run, after stage 1, the pool had less room (RUN.md): never more than the fresh process.
    let (_, run_limit) = csv(&new_dir.join("run/kv/kv_limit.csv"));
    let in_run = run_limit
        .iter()
        .find(|r| r["precision"] == "bf16" && r["logits"] == "all" && r["attention"] == "bounded")
        .unwrap();
    assert!(num(in_run, "max_context") <= num(&alone[0], "max_context"));
}

/// Stage 3's committed run says what its RUN.md and the README say: PyTorch grows reserved by the
/// 2 GiB request (the report's 4.88 → 6.88), CUDA's caching pool does not, the false OOM happens
/// only under PyTorch's default allocator with reused holes, and the model predicted each outcome.
#[test]
fn stage3_run_shows_what_its_notes_say() {
    let dir = results().join("2026-11-22-stage3");
    let (_, steps) = csv(&dir.join("frag/frag/frag_steps.csv"));
    let reserved = |alloc: &str, step: &str| {
        num(steps.iter().find(|r| r["allocator"] == alloc && r["step"] == step).unwrap(), "reserved_bytes")
    };
    let growth = |alloc: &str| reserved(alloc, "request") - reserved(alloc, "odd_freed");
    assert_eq!(growth("pytorch"), (2048u64 << 20) as f64);
    assert_eq!(growth("caching"), 0.0);
    assert!(reserved("pool", "odd_freed") < reserved("caching", "odd_freed") * 0.6);
    let (_, ooms) = csv(&dir.join("frag/frag/frag_false_oom.csv"));
    assert_eq!(ooms.len(), 10);
    for r in &ooms {
        let expect_oom = r["allocator"] == "pytorch" && r["layout"] == "reused";
        assert_eq!(r["outcome"] == "oom", expect_oom, "{} {}", r["allocator"], r["layout"]);
        assert_eq!(r["outcome"], r["model_outcome"], "{} {}", r["allocator"], r["layout"]);
    }
    // The report's own script keeps six blocks: 2.93 GiB.
    let torch = std::fs::read_to_string(dir.join("torch-frag.jsonl")).unwrap();
    let script: serde_json::Value =
        serde_json::from_str(torch.lines().find(|l| l.contains("report_script")).unwrap()).unwrap();
    assert_eq!(script["allocated"], 6 * 500 * (1u64 << 20));
    // Leaks: every verdict as expected, the kept caches' growth as predicted.
    let text = std::fs::read_to_string(dir.join("leaks/leaks/leaks_summary.csv")).unwrap();
    assert_eq!(text.matches("as expected").count(), 6, "{text}");
    assert!(text.contains("kv_cache_kept,caches kept,4,4,true,112.875,112.875"), "{text}");
}

/// A committed CSV read with polars (notes hold commas), as (column → values as text) per row.
fn table(path: &Path) -> Rows {
    use polars::prelude::*;
    let df = vram_lab::session::run_folder::read_csv(path).unwrap();
    let cols: Vec<(String, Vec<String>)> = df
        .columns()
        .iter()
        .map(|c| {
            let s = c.as_materialized_series().cast(&DataType::String).unwrap();
            (c.name().to_string(), s.str().unwrap().iter().map(|v| v.unwrap_or("").to_string()).collect())
        })
        .collect();
    (0..df.height()).map(|i| cols.iter().map(|(n, v)| (n.clone(), v[i].clone())).collect()).collect()
}

fn row<'a>(rows: &'a Rows, col: &str, value: &str) -> &'a HashMap<String, String> {
    rows.iter().find(|r| r[col] == value).unwrap_or_else(|| panic!("no row with {col} = {value}"))
}

#[test]
fn stage4_meets_its_targets_and_no_figure_passes_its_ceiling() {
    let dir = results().join("2026-11-22-stage4");
    let modes = table(&dir.join("offload/offload/offload.csv"));
    let streamed = row(&modes, "mode", "streamed");
    let accelerate = row(&modes, "mode", "pytorch accelerate");
    // Streaming: at least 80 % of its pinned-PCIe ceiling and four times accelerate (same call).
    assert!(num(streamed, "pct_of_ceiling") >= 80.0, "{}", streamed["pct_of_ceiling"]);
    assert!(num(streamed, "decode_tok_s") >= 4.0 * num(accelerate, "decode_tok_s"));
    for r in modes.iter().filter(|r| r["run_by"] == "vram-lab") {
        assert_eq!(r["outcome"], "ok", "{}", r["mode"]);
        assert!(num(r, "decode_tok_s") <= num(r, "ceiling_tok_s"), "{} above its ceiling", r["mode"]);
        if !r["gpu_budget_gib"].is_empty() {
            // Within the budget: what the pool held at its peak.
            assert!(num(r, "peak_gib") <= num(r, "gpu_budget_gib"), "{} over its budget", r["mode"]);
        }
    }
    // The unified-memory modes were all measured; preferred-location CPU keeps the weights off the GPU.
    for m in ["managed", "managed-prefer-cpu", "managed-read-mostly", "managed-prefetch"] {
        assert!(num(row(&modes, "mode", m), "decode_tok_s") > 0.0, "{m}");
    }
    assert!(num(row(&modes, "mode", "managed-prefer-cpu"), "device_used_gib") < 1.0);
    assert!(num(row(&modes, "mode", "managed-prefetch"), "device_used_gib") > 14.0);
    // The best mode within the budget beats computing nowhere but on the GPU through PCIe.
    let best =
        ["split", "streamed", "hybrid"].iter().map(|m| num(row(&modes, "mode", m), "decode_tok_s")).fold(0.0, f64::max);
    assert!(best > num(streamed, "ceiling_tok_s"), "computing where the weights live beats streaming them");

    let bw = table(&dir.join("bandwidth/bandwidth/bandwidth.csv"));
    for r in bw.iter().filter(|r| !r["vendor_gb_s"].is_empty()) {
        assert!(num(r, "gb_s") <= num(r, "vendor_gb_s"), "{} above the vendor figure", r["test"]);
    }

    // 14B (27.5 GiB) on the emulated 24 GB card: the whole model does not fit, the offload modes run.
    let big = table(&dir.join("offload14/offload/offload.csv"));
    assert_eq!(row(&big, "mode", "full")["outcome"], "oom");
    for m in ["split", "streamed", "hybrid"] {
        let r = row(&big, "mode", m);
        assert_eq!(r["outcome"], "ok", "{m}");
        assert!(num(r, "decode_tok_s") <= num(r, "ceiling_tok_s"));
    }
    // The prediction for a real RTX 4090 sits beside the article's three figures.
    let predict = table(&dir.join("offload/offload/offload_predict.csv"));
    for (m, article) in [("managed", 1.75), ("managed-prefer-cpu", 0.90), ("managed-read-mostly", 1.77)] {
        let r = row(&predict, "case", m);
        assert_eq!(num(r, "article_tok_s"), article);
        assert!(num(r, "predicted_tok_s") > 0.0);
    }
}

/// Every committed `vram-lab bench`: no decode faster than its bandwidth ceiling, the stacked
/// projections faster than the separate ones, every BF16 prefill's memory peak the ledger's
/// (0.5 %; Q4's at most 1 % above it), and every committed load no faster than
/// reading its file warm.
#[test]
fn speed_and_loading_runs_stay_under_their_ceilings() {
    let mut benches = 0;
    for run in std::fs::read_dir(results()).unwrap().flatten() {
        let dir = run.path().join("bench/bench");
        if dir.join("bench_decode.csv").is_file() {
            benches += 1;
            let decode = table(&dir.join("bench_decode.csv"));
            for r in decode.iter().filter(|r| r["outcome"] == "ok") {
                assert!(num(r, "tok_s") < num(r, "ceiling_tok_s"), "{r:?}");
            }
            let one = |v: &str| {
                num(
                    decode.iter().find(|r| r["precision"] == "bf16" && r["variant"] == v && r["batch"] == "1").unwrap(),
                    "tok_s",
                )
            };
            assert!(one("fused") > one("separate"), "stacked projections did not help");
            for r in table(&dir.join("bench_prefill.csv")).iter().filter(|r| r["outcome"] == "ok") {
                let err = 100.0 * (num(r, "peak_mib") - num(r, "ledger_peak_mib")) / num(r, "ledger_peak_mib");
                if r["precision"] == "q4" {
                    // The first binaries counted the quantized-matmul buffer's growth in every
                    // variant, though a process grows it once: the ledger is an upper bound there.
                    assert!(err <= 1.0, "{r:?}: {err:.2} %");
                } else {
                    assert!(err.abs() <= 0.5, "{r:?}: {err:.2} %");
                }
            }
        }
        let load = run.path().join("load/load/load_time.csv");
        if load.is_file() {
            for r in table(&load).iter().filter(|r| r["outcome"] == "ok" && r["cache"] == "cold") {
                assert!(num(r, "load_s") > num(r, "read_s"), "a cold load faster than reading its file: {r:?}");
            }
        }
    }
    assert!(benches >= 1);
}

/// The run with the lab's decoding loop (2026-11-23-run, RUN.md): stage 1's memory is the
/// loop's run's (allocated and peak within 1 KiB at every snapshot: candle's parameter cache
/// keeps 16 bytes), its decoding faster than the loop's and under its ceiling; in the speed run
/// (2026-11-22-own) the step in the lab's kernels decodes F32's greedy ids as the stacked loop does.
#[test]
fn stage1_with_the_lab_loop_keeps_its_memory_and_decodes_faster() {
    let (_, old) = csv(&results().join("2026-11-22-run/run/anatomy/anatomy_timeline.csv"));
    let (_, new) = csv(&results().join("2026-11-23-run/run/anatomy/anatomy_timeline.csv"));
    assert_eq!(old.len(), new.len());
    for (o, n) in old.iter().zip(&new) {
        assert_eq!(o["label"], n["label"]);
        for c in ["allocated_mib", "peak_mib"] {
            assert!((num(o, c) - num(n, c)).abs() < 1.0 / 1024.0, "{} {c}: {} vs {}", o["label"], o[c], n[c]);
        }
    }
    let (_, old) = csv(&results().join("2026-11-22-run/run/anatomy/anatomy.csv"));
    let (_, new) = csv(&results().join("2026-11-23-run/run/anatomy/anatomy.csv"));
    for (o, n) in old.iter().zip(&new).filter(|(o, _)| o["outcome"] == "ok") {
        assert!(
            num(n, "decode_tok_s") > 1.2 * num(o, "decode_tok_s"),
            "{}: {} vs {}",
            n["precision"],
            n["decode_tok_s"],
            o["decode_tok_s"]
        );
        assert!(num(n, "decode_tok_s") < num(n, "decode_ceiling_tok_s"));
    }
    let ids = table(&results().join("2026-11-22-own/ids-check/bench/bench_decode.csv"));
    let f32_own = ids.iter().find(|r| r["precision"] == "f32" && r["variant"] == "own" && r["batch"] == "1").unwrap();
    let (same, of) = f32_own["ids_as_fused_loop"].split_once('/').unwrap();
    assert_eq!(same, of, "F32 ids of the step in the lab's kernels");
    let decode = table(&results().join("2026-11-22-own/bench/bench/bench_decode.csv"));
    let one = |v: &str| {
        num(
            decode.iter().find(|r| r["precision"] == "bf16" && r["variant"] == v && r["batch"] == "1").unwrap(),
            "tok_s",
        )
    };
    assert!(one("own") > one("gemv") && one("gemv") > one("kernel"));
}

/// The prefill attention in one kernel (2026-11-23-flash, RUN.md): the own variant's prefills of
/// 512 and 32,768 tokens faster than the bounded attention's in the same run (32k at least 2×,
/// and past issue 11's 10k tok/s), its peak at 32k below bounded's and at its ledger's flash row;
/// the GPU tests that put it beside the naive attention passed there.
#[test]
fn fused_attention_prefills_faster_in_less_memory() {
    let run = results().join("2026-11-23-flash");
    let prefill = table(&run.join("bench/bench/bench_prefill.csv"));
    let at = |v: &str, seq: &str| {
        prefill.iter().find(|r| r["precision"] == "bf16" && r["variant"] == v && r["seq"] == seq).unwrap()
    };
    for seq in ["512", "32768"] {
        assert!(num(at("own", seq), "tok_s") > num(at("fused", seq), "tok_s"), "{seq}");
    }
    let (own, bounded) = (at("own", "32768"), at("fused", "32768"));
    assert!(num(own, "tok_s") > 2.0 * num(bounded, "tok_s") && num(own, "tok_s") >= 10_000.0);
    assert!(num(own, "peak_mib") < num(bounded, "peak_mib"));
    assert!((num(own, "peak_mib") - num(own, "ledger_peak_mib")).abs() <= 1.0);
    let tests = std::fs::read_to_string(run.join("kernels.stdout.txt")).unwrap();
    assert!(tests.contains("test flash_attention_equals_naive ... ok") && tests.contains("0 failed"));
}

/// The H100 run of llama.cpp's Q4_K_M mix (data/results/h100/2026-11-24-q4_k_m, RUN.md): computing
/// in BF16 its KV cache is 57,344 B per token of 7B, as BF16's and llama.cpp's F16 cache; with
/// `--compute f32` twice that; stage 1 loads the mix's weights within 0.002 % of their prediction
/// and generates from the report's 160-token prompt.
#[test]
fn q4_k_m_caches_in_16_bits() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h100/2026-11-24-q4_k_m");
    let per_token = |folder: &str, precision: &str| -> Vec<f64> {
        let (_, rows) = csv(&run.join(folder).join("kv/kv_prefill.csv"));
        rows.iter()
            .filter(|r| r["precision"] == precision && r["outcome"] == "ok")
            .map(|r| num(r, "kv_measured_mib") * (1u64 << 20) as f64 / num(r, "seq"))
            .collect()
    };
    for (folder, precision, bytes) in [("stage2", "q4_k_m", 57_344.0), ("stage2-f32", "q4_k_m-f32", 114_688.0)] {
        let seen = per_token(folder, precision);
        assert!(seen.len() >= 8, "{folder}: {} prefills", seen.len());
        // The cache's own tensors, plus at most a few KiB the allocator rounds up over the run.
        for b in seen {
            assert!(b >= bytes && b < bytes * 1.0001, "{folder} {precision}: {b} B per token");
        }
    }
    let (_, anatomy) = csv(&run.join("stage1/anatomy/anatomy.csv"));
    let q = anatomy.iter().find(|r| r["precision"] == "q4_k_m").unwrap();
    assert_eq!(q["outcome"], "ok");
    assert!(num(q, "weights_vs_predicted_pct").abs() < 0.002, "{q:?}");
    assert_eq!(q["prompt_tokens"], "160");
}

/// PyTorch's training steps measured beside the lab's (data/results/h100/2026-11-24-train), against
/// `estimate::training::pytorch_step` (what its forward keeps, its backward's peak, its step's peak
/// with the update at 20 B per parameter): F32 within 3 % on every item; the BF16-autocast step of
/// 1.5B (F32 weights, so the same states and update) peaks within 3 % (autocast's smaller
/// activations are not modelled, so its forward is not compared).
#[test]
fn pytorch_steps_peak_where_the_estimator_says() {
    use vram_lab::estimate::training::{ledger, pytorch_step, TrainSetup, TrainShape};
    use vram_lab::model::DecoderConfig;
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h100/2026-11-24-train");
    let mut seen = 0;
    for (f, preset) in [
        ("torch-0.5b.jsonl", "qwen2.5-0.5b"),
        ("torch-1.5b.jsonl", "qwen2.5-1.5b"),
        ("torch-3b.jsonl", "qwen2.5-3b"),
        ("torch-1.5b-bf16.jsonl", "qwen2.5-1.5b"),
    ] {
        let cfg = DecoderConfig::preset(preset).unwrap();
        for line in std::fs::read_to_string(run.join(f)).unwrap().lines() {
            let r: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(r["outcome"], "ok", "{f}: {line}");
            let gib = |k: &str| r[k].as_f64().unwrap() * (1u64 << 30) as f64;
            let params = r["params"].as_u64().unwrap();
            assert_eq!(params, cfg.param_count() as u64, "{f}");
            let sh =
                TrainShape { batch: r["batch"].as_u64().unwrap() as usize, seq: r["seq"].as_u64().unwrap() as usize };
            let p = pytorch_step(&cfg, params, sh, r["checkpointing"].as_bool().unwrap());
            let l = ledger(params, &TrainSetup::fp32_adam());
            let base = (l.weights + l.optimizer) as f64;
            let near = |what: &str, measured: f64, predicted: f64| {
                let err = (predicted - measured) / measured;
                assert!(
                    err.abs() <= 0.03,
                    "{f} {what}: measured {measured} B, predicted {predicted} B ({:+.2} %)\n{line}",
                    100.0 * err
                );
            };
            near("step peak", gib("step_peak_gib"), base + p.above_states() as f64);
            if r["dtype"] == "f32" {
                near("forward keeps", gib("forward_keeps_gib"), p.forward as f64);
                near("backward peak", gib("backward_peak_gib"), base + p.peak as f64);
            }
            seen += 1;
        }
    }
    assert_eq!(seen, 8);
}

/// The committed multi-GPU runs, two H100s and four H200s (with the same layouts over two and
/// three of the four), and the peer sum's call on two H100s: every tensor-parallel rank's weights as the ledger says and its peak above them within
/// 3 %; every GPU's NCCL memory, tensor-parallel and training ranks, within 3 % of
/// `comm_bytes(gpus, rank)` as the lab computes it now; every ZeRO rank's AdamW states and kept
/// gradients equal to `training::ledger` at its N (to 100 bytes: three GPUs split unevenly).
#[test]
fn multi_gpu_runs_hold_what_the_ledger_says_per_rank() {
    use vram_lab::estimate::parallel::comm_bytes;
    use vram_lab::estimate::training::{ledger, TrainSetup};
    use vram_lab::model::DecoderConfig;
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results");
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let near = |what: &str, measured: f64, predicted: f64| {
        let err = (predicted - measured) / measured;
        assert!(
            err.abs() <= 0.03,
            "{what}: measured {measured:.1} MiB, the ledger {predicted:.1} ({:+.2} %)",
            100.0 * err
        );
    };
    let (mut tp, mut nccl, mut zero) = (0, 0, 0);
    for run in [
        "h100x2/2026-11-25-evening-multi-gpu",
        "h200x4/2026-11-26-four-gpus",
        "h200x4/2026-11-26-four-gpus/nccl-check",
        "h100x2/2026-11-28-peer-sum",
        "h100x4/2026-11-28-peer-sum",
    ] {
        for dir in std::fs::read_dir(data.join(run)).unwrap() {
            let dir = dir.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            let ranks = dir.join("parallel/parallel_ranks.csv");
            if ranks.exists() {
                // Only the tensor-parallel rows: the others' quoted layout names hold commas.
                let text = std::fs::read_to_string(&ranks).unwrap();
                let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
                for line in text.lines().filter(|l| l.starts_with("tensor-parallel × ")) {
                    let r: HashMap<String, String> =
                        header.iter().map(|h| h.to_string()).zip(line.split(',').map(str::to_string)).collect();
                    let gpus: usize = r["layout"].trim_start_matches("tensor-parallel × ").parse().unwrap();
                    let what = format!("{run}/{name} rank {} of {gpus}", r["rank"]);
                    assert_eq!(num(&r, "weights_mib"), num(&r, "weights_predicted_mib"), "{what}: weights");
                    near(
                        &format!("{what}: peak above weights"),
                        num(&r, "peak_above_weights_mib"),
                        num(&r, "peak_above_weights_predicted_mib"),
                    );
                    near(
                        &format!("{what}: NCCL"),
                        num(&r, "nccl_mib"),
                        mib(comm_bytes(gpus, r["rank"].parse().unwrap())),
                    );
                    tp += 1;
                    nccl += 1;
                }
            }
            let steps = dir.join("train/train_ranks.csv");
            if steps.exists() && name.starts_with("zero") {
                let (_, rows) = csv(&steps);
                let gpus = rows.iter().filter(|r| r["item"] == "weights").count();
                let z: u8 = name[4..5].parse().unwrap();
                let preset = format!("qwen2.5-{}", name.split('-').nth(1).unwrap());
                let params = DecoderConfig::preset(&preset).unwrap().param_count() as u64;
                let l = ledger(params, &TrainSetup { zero: z, gpus: gpus as u64, ..TrainSetup::fp32_adam() });
                for r in &rows {
                    let what = format!("{run}/{name} rank {} of {gpus}: {}", r["rank"], r["item"]);
                    match r["item"].as_str() {
                        "NCCL's device memory" => {
                            near(&what, num(r, "measured_mib"), mib(comm_bytes(gpus, r["rank"].parse().unwrap())));
                            nccl += 1;
                        }
                        // Equal but for the bytes of a shard that N does not divide (three GPUs).
                        "optimizer states" => assert!(
                            (num(r, "measured_mib") - mib(l.optimizer)).abs() < 1e-4,
                            "{what}: {} MiB, the ledger {}",
                            num(r, "measured_mib"),
                            mib(l.optimizer)
                        ),
                        "gradients kept after the step" => {
                            assert!(
                                (num(r, "measured_mib") - mib(l.gradients)).abs() < 1e-4,
                                "{what}: {} MiB, the ledger {}",
                                num(r, "measured_mib"),
                                mib(l.gradients)
                            );
                            zero += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // Two GPUs: 5 models × 2 ranks, 6 ZeRO runs × 2; four: 5 models × 4 and 3 over two × 2, 6 ZeRO
    // runs × 4 and 3 over two × 2; the check: 7B × 4, ZeRO over three × 2 and over four; the peer
    // sum's calls: 6 runs × 2 on two H100s, 72B × 4, × 2 and × 4 with NCCL on four.
    let (tp_rows, zero_rows) = (5 * 2 + 5 * 4 + 3 * 2 + 4 + 6 * 2 + 10, 6 * 2 + 6 * 4 + 3 * 2 + 3 * 2 + 4);
    assert_eq!((tp, nccl, zero), (tp_rows, tp_rows + zero_rows, zero_rows));
}

/// The rows of a `parallel_ranks.csv` whose layout has no comma (one device, tensor-parallel).
fn rank_rows(path: &Path) -> Vec<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    text.lines()
        .skip(1)
        .filter(|l| !l.starts_with('"'))
        .map(|l| header.iter().map(|h| h.to_string()).zip(l.split(',').map(str::to_string)).collect())
        .collect()
}

/// Issue 43's two-GPU bar with the sums over peer memory (`kernels::peer_sum`), on two H100s and
/// two H200s: 14B BF16 over two ranks at 1.5 × one GPU or more, and faster than with NCCL's sums
/// in the same call; a token's sums cheaper than NCCL's; F32 ranks' tokens equal one GPU's. And
/// the four-GPU bar, not met on four H100s (RUN.md there).
#[test]
fn tensor_parallel_decode_with_the_peer_sum() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results");
    for call in ["h100x2/2026-11-28-peer-sum", "h200x2/2026-11-28-peer-sum"] {
        let rows = |run: &str| rank_rows(&data.join(call).join(run).join("parallel/parallel_ranks.csv"));
        let ranks = |rows: &[HashMap<String, String>], col: &str| -> Vec<f64> {
            rows.iter().filter(|r| r["layout"] == "tensor-parallel × 2").map(|r| num(r, col)).collect()
        };
        let peer = rows("tp14-g2");
        let one = num(peer.iter().find(|r| r["layout"] == "one device").unwrap(), "decode_tok_s");
        let (with_peer, with_nccl) = (ranks(&peer, "decode_tok_s"), ranks(&rows("tp14-g2-nccl"), "decode_tok_s"));
        let slowest = with_peer.iter().cloned().fold(f64::MAX, f64::min);
        assert!(slowest >= 1.5 * one, "{call}: 14B over two {slowest:.1} tok/s, one GPU {one:.1}");
        assert!(
            slowest > with_nccl.iter().cloned().fold(0.0, f64::max),
            "{call}: {with_peer:?} against NCCL's {with_nccl:?}"
        );
        let (sums_peer, sums_nccl) =
            (ranks(&peer, "sums_ms_per_token"), ranks(&rows("tp14-g2-nccl"), "sums_ms_per_token"));
        assert!(
            sums_peer.iter().zip(&sums_nccl).all(|(p, n)| p < n),
            "{call}: sums {sums_peer:?} against {sums_nccl:?}"
        );
        let f32 = rows("tp7f32-g2");
        assert!(ranks(&f32, "tokens_equal_to_one_device").iter().all(|&t| t == 64.0), "{call}: F32 tokens");
    }
    // Four H100s: 72B faster with the peer sum than with NCCL's, and short of twice its rate over
    // two (the bar still open), by the ranks' own step: short even with the sums skipped.
    let four = data.join("h100x4/2026-11-28-peer-sum");
    let col = |run: &str, gpus: usize, c: &str| -> Vec<f64> {
        let layout = format!("tensor-parallel × {gpus}");
        rank_rows(&four.join(run).join("parallel/parallel_ranks.csv"))
            .iter()
            .filter(|r| r["layout"] == layout)
            .map(|r| num(r, c))
            .collect()
    };
    let min = |v: Vec<f64>| v.into_iter().fold(f64::MAX, f64::min);
    let max = |v: Vec<f64>| v.into_iter().fold(0.0, f64::max);
    assert!(min(col("tp72-g4", 4, "decode_tok_s")) > max(col("tp72-g4-nccl", 4, "decode_tok_s")));
    let ratio = min(col("tp72-g4", 4, "decode_tok_s")) / max(col("tp72-g2", 2, "decode_tok_s"));
    let bare =
        max(col("tp72-g4", 4, "decode_without_sums_tok_s")) / min(col("tp72-g2", 2, "decode_without_sums_tok_s"));
    assert!((1.7..2.0).contains(&ratio) && bare < 2.0, "72B four against two: {ratio:.2}, without sums {bare:.2}");
}

/// Why 72B over four GPUs cannot decode at twice its rate over two (`docs/multi-gpu.md`), on four H100s
/// and on four H200s: a token's time split into reading the weights (W, the ceiling's), the sums (S)
/// and the rest (R). The sums cost no less over four than over two, so even with R at zero on both
/// four gives under 1.95 × two, and twice two's rate would leave R over four under half of what it is.
#[test]
fn four_gpus_cannot_double_two() {
    for call in ["h100x4/2026-11-28-peer-sum", "h200x4/2026-11-28-peer-sum"] {
        four_against_two(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results").join(call));
    }
}

fn four_against_two(dir: &Path) {
    // Per rank (W, S, R) in ms a token.
    let parts = |run: &str, gpus: usize| -> Vec<(f64, f64, f64)> {
        let layout = format!("tensor-parallel × {gpus}");
        rank_rows(&dir.join(run).join("parallel/parallel_ranks.csv"))
            .iter()
            .filter(|r| r["layout"] == layout)
            .map(|r| {
                let (t, w) = (1e3 / num(r, "decode_tok_s"), 1e3 / num(r, "decode_ceiling_tok_s"));
                let s = num(r, "sums_ms_per_token");
                (w, s, t - w - s)
            })
            .collect()
    };
    let (two, four) = (parts("tp72-g2", 2), parts("tp72-g4", 4));
    assert_eq!((two.len(), four.len()), (2, 4));
    // The most generous pairing: the slowest two-GPU rank against the fastest four-GPU one.
    let t2 = two.iter().map(|&(w, s, r)| w + s + r).fold(0.0, f64::max);
    let (w2, s2) = two.iter().map(|&(w, s, _)| (w, s)).fold((0.0f64, 0.0f64), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    let (w4, s4, r4) =
        four.iter().fold((f64::MAX, f64::MAX, f64::MAX), |a, b| (a.0.min(b.0), a.1.min(b.1), a.2.min(b.2)));
    assert!((w2 / w4 - 2.0).abs() < 0.01, "the weights read halve: {w2} against {w4}");
    assert!(s4 >= s2, "the sums over four ({s4}) cost no less than over two ({s2})");
    let bound = (w2 + s2) / (w4 + s4);
    assert!((1.85..1.95).contains(&bound), "with no other cost, four against two: {bound:.3}");
    // The rest over four that twice two's rate would allow: under half what it is.
    let allowed = t2 / 2.0 - w4 - s4;
    assert!(allowed < 0.5 * r4, "the rest over four may be {allowed:.2} ms and is {r4:.2}");
}

/// Issue 45 item 2 on an H200 and an H100, each in one call: the attention and argmax kernels in
/// 16-byte loads decode faster than the base binary's in every interleaved run; programmatic
/// dependent launch, tried and taken out, was slower than without it in every run; and the bar,
/// 90 % of the read ceiling, is not met on either GPU (RUN.md there).
#[test]
fn decode_kernels_beside_the_base_binary() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results");
    for (gpu, pdl_runs) in [("h200", &["pdl1-1", "pdl2-1", "pdl3-1"][..]), ("h100", &["pdl-1", "pdl-2"][..])] {
        let dir = data.join(gpu).join("2026-11-28-decode-kernels");
        let row = |run: &str| decode_row(&dir, run);
        let tok = |runs: &[&str]| runs.iter().map(|r| num(&row(r), "tok_s")).collect::<Vec<_>>();
        let (base, new, pdl) = (tok(&["base-1", "base-2"]), tok(&["new-1", "new-2"]), tok(pdl_runs));
        let slowest_new = new.iter().cloned().fold(f64::MAX, f64::min);
        assert!(base.iter().all(|&b| b < slowest_new), "{gpu}: base {base:?} against new {new:?}");
        assert!(pdl.iter().all(|&p| p < slowest_new), "{gpu}: PDL {pdl:?} against new {new:?}");
        for run in ["new-1", "new-2"] {
            let r = row(run);
            let pct = num(&r, "pct_of_ceiling");
            assert!((100.0 * num(&r, "tok_s") / num(&r, "ceiling_tok_s") - pct).abs() < 1e-6);
            assert!(pct < 90.0, "{gpu} {run}: {pct:.2} % of the ceiling: the bar is met, say so");
        }
    }
}

/// Issue 45: Q4_K_M beside llama-bench in one call on an H200 (`h200/2026-12-02-q4-speed/RUN.md`): the
/// ratio is the one llama-bench's JSON of that call gives, at least 1.3 in both runs, and the
/// prefill peaks stand within 0.5 MiB of the ledger's.
#[test]
fn q4_k_m_beside_llama_cpp_same_call() {
    let dir = results().join("2026-12-02-q4-speed");
    let jsonl = std::fs::read_to_string(dir.join("llama-cpp/llama-bench.jsonl")).unwrap();
    let llama = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|j| j["n_gen"] == 128 && j["n_prompt"] == 0)
        .and_then(|j| j["avg_ts"].as_f64())
        .unwrap();
    for run in ["bench-1", "bench-2"] {
        let r = decode_row(&dir, run);
        assert_eq!(r["precision"], "q4_k_m");
        assert!((num(&r, "other_stack_tok_s") - llama).abs() < 1e-3, "{run}: not this call's llama-bench");
        let x = num(&r, "x_other_stack");
        assert!((num(&r, "tok_s") / llama - x).abs() < 1e-9 && x >= 1.3, "{run}: {x:.3} × llama.cpp");
        for p in csv(&dir.join(run).join("bench/bench_prefill.csv")).1 {
            let apart = num(&p, "peak_mib") - num(&p, "ledger_peak_mib");
            assert!(apart.abs() < 0.5, "{run} {}: {apart:.2} MiB from the ledger", p["seq"]);
        }
    }
}

/// The attention over a long cache in runs (`{h200,h100}/2026-11-28-long-cache/RUN.md`): after
/// prompts of 4,096, 16,384 and 32,768 tokens the step is faster than the base binary's, more so
/// the longer the cache; after 32 tokens (no runs) within half a percent of it; F32 greedy ids after
/// a 2,048-token prompt (eight runs a head) the base binary's.
#[test]
fn long_cache_attention_in_runs() {
    for gpu in ["h200", "h100"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results").join(gpu).join("2026-11-28-long-cache");
        let row = |run: &str| decode_row(&dir, run);
        let tok = |run: &str| num(&row(run), "tok_s");
        let mut last = 1.0;
        for len in [4096, 16384, 32768] {
            let gain = tok(&format!("new-long{len}")) / tok(&format!("base-long{len}"));
            assert!(gain > last, "{gpu} after {len}: {gain:.3} × the base, {last:.3} at the length before");
            last = gain;
        }
        assert!(last > 2.0, "{gpu}: {last:.2} × after 32,768 tokens");
        for (new, base) in [("new-1", "base-1"), ("new-2", "base-2")] {
            let r = tok(new) / tok(base);
            assert!((0.995..1.005).contains(&r), "{gpu} {new}: {r:.4} × the base after 32 tokens");
            let r = row(new);
            let pct = num(&r, "pct_of_ceiling");
            assert!((100.0 * num(&r, "tok_s") / num(&r, "ceiling_tok_s") - pct).abs() < 1e-6);
            assert!(pct < 90.0, "{gpu} {new}: {pct:.2} % of the ceiling: the bar is met, say so");
        }
        let ids = |who: &str| {
            let text = std::fs::read_to_string(dir.join(format!("tokens-{who}-f32.txt"))).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["generated_ids"].as_array().unwrap().clone()
        };
        assert_eq!(ids("new").len(), 48);
        assert_eq!(ids("new"), ids("base"), "{gpu}: F32 greedy ids after a 2,048-token prompt");
    }
}

/// Where a step's time went after a 16,384-token prompt (`h200/2026-11-28-long-cache/profile-16k`,
/// the step between the last two argmax launches, as `scripts/gpu/ncu_step.py` takes it): the
/// attention is the largest kernel, over 40 % of the step, reading the cache about once (not once
/// per query head) at under 400 GB/s; the merge is under a fifth of the attention.
#[test]
fn long_cache_profile_puts_the_attention_first() {
    use std::io::Read;
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/results/h200/2026-11-28-long-cache/profile-16k/ncu.csv.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_string(&mut text).unwrap();
    // Every field is quoted ("a","b",...), and no field holds `","`.
    let mut lines =
        text.lines().filter(|l| !l.starts_with("==")).map(|l| l.trim_matches('"').split("\",\"").collect::<Vec<_>>());
    let head = lines.next().unwrap();
    let at = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (id, kernel, metric, value) = (at("ID"), at("Kernel Name"), at("Metric Name"), at("Metric Value"));
    // id → (kernel, time ns, bytes read)
    let mut k = std::collections::BTreeMap::<u64, (String, f64, f64)>::new();
    for row in lines {
        let e = k.entry(row[id].parse().unwrap()).or_insert_with(|| (row[kernel].to_string(), 0.0, 0.0));
        let v: f64 = row[value].replace(',', "").parse().unwrap();
        match row[metric] {
            "gpu__time_duration.sum" => e.1 = v,
            "dram__bytes_read.sum" => e.2 = v,
            _ => {}
        }
    }
    let argmax: Vec<u64> = k.iter().filter(|(_, v)| v.0.contains("argmax")).map(|(i, _)| *i).collect();
    let (from, to) = (argmax[argmax.len() - 2], argmax[argmax.len() - 1]);
    let mut by = HashMap::<String, (f64, f64)>::new();
    for (_, (name, t, b)) in k.range(from + 1..=to) {
        let e = by.entry(name.clone()).or_default();
        (e.0, e.1) = (e.0 + t, e.1 + b);
    }
    let total: f64 = by.values().map(|v| v.0).sum();
    let (attend, merge) = (by["vram_lab_attend_bf16"], by["vram_lab_attend_merge_bf16"]);
    assert!(by.values().all(|v| v.0 <= attend.0), "the attention is the largest kernel");
    assert!(attend.0 / total > 0.40, "attention {:.1} % of the step", 100.0 * attend.0 / total);
    // Qwen2.5-7B's cache after 16,384 positions: 28 layers × 2 × 4 KV heads × 128 × 2 B a position.
    let cache = (16_384 * 28 * 2 * 4 * 128 * 2) as f64;
    assert!((0.9..1.2).contains(&(attend.1 / cache)), "the cache read {:.2} times", attend.1 / cache);
    assert!(attend.1 / attend.0 < 400.0, "attention at {:.0} GB/s", attend.1 / attend.0);
    assert!(merge.0 < attend.0 / 5.0, "the merge {:.0} ns against the attention's {:.0}", merge.0, attend.0);
}

/// The prefill attention with Hopper's `wgmma` (`h200/2026-11-28-prefill-hopper/RUN.md`): in the same
/// call its 16k and 32k prefills are faster than the four-warp kernel's in both rounds, and the
/// four-warp kernel's faster than the eight-warp one's (the morning's call); under ncu the 32k
/// layer's attention runs narrow > wide > hopper in time, hopper above FlashAttention-2's 335
/// TFLOPS; the peak stays the ledger's; PyTorch stays ahead (the bar is not met); the kernel tests
/// and the element-by-element probe pass.
#[test]
fn hopper_prefill_attention() {
    let dir = results().join("2026-11-28-prefill-hopper");
    let tok = |run: &str, seq: &str| num(&prefill_row(&dir.join(run), seq), "tok_s");
    for seq in ["16384", "32768"] {
        for round in ["1", "2"] {
            let (hopper, wide) = (tok(&format!("hopper-{round}"), seq), tok(&format!("wide-{round}"), seq));
            assert!(hopper > 1.05 * wide, "{seq}, round {round}: hopper {hopper:.0} against wide {wide:.0}");
            let (wide, narrow) =
                (tok(&format!("narrow-wide/wide-{round}"), seq), tok(&format!("narrow-wide/narrow-{round}"), seq));
            assert!(wide > narrow, "{seq}, round {round}: wide {wide:.0} against narrow {narrow:.0}");
        }
        let r = prefill_row(&dir.join("hopper-1"), seq);
        let x = num(&r, "x_pytorch");
        assert!((num(&r, "tok_s") / num(&r, "pytorch_tok_s") - x).abs() < 1e-9);
        assert!(x < 1.0, "{seq}: {x:.3} × PyTorch: the bar is met, say so");
    }
    let layer_ms = |file: &str| ncu_duration_ms(&dir.join(file));
    let (hopper, wide, narrow) =
        (layer_ms("ncu-hopper.txt"), layer_ms("ncu-wide.txt"), layer_ms("narrow-wide/ncu-narrow.txt"));
    assert!(hopper < wide && wide < narrow, "ms a layer: hopper {hopper}, wide {wide}, narrow {narrow}");
    let tflops = ATTENTION_32K_FLOPS / (hopper / 1e3) / 1e12;
    assert!(tflops > 335.0, "hopper's 32k attention at {tflops:.1} TFLOPS");
    let kernels = std::fs::read_to_string(dir.join("kernels.txt")).unwrap();
    assert!(kernels.contains("test result: ok. 8 passed; 0 failed"), "the GPU kernel tests");
    let probe = std::fs::read_to_string(dir.join("kernel-probe.txt")).unwrap();
    assert!(probe.contains("all equal") && probe.contains("probe exit 0"), "the kernel probe");
}

/// `compute_89.sh`'s greedy runs in `dir`: the 8.9 build's 48 ids and allocated and peak bytes are
/// the 9.0 build's in F32, BF16 and Q4_K_M.
fn same_greedy_ids_as_9_0(dir: &Path) {
    let json = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    for p in ["f32", "bf16", "q4_k_m"] {
        let (a, b) = (json(&format!("generate-{p}-90.json")), json(&format!("generate-{p}-89.json")));
        assert_eq!(a["generated_ids"].as_array().unwrap().len(), 48, "{p}");
        for key in ["generated_ids", "allocated_bytes", "peak_bytes"] {
            assert_eq!(a[key], b[key], "{p}: {key}");
        }
    }
}

/// The duration (ms) in an ncu `--page details` CSV of one kernel.
fn ncu_duration_ms(path: &Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let line = text.lines().find(|l| l.contains("\"Duration\"")).unwrap();
    let value = line.trim_end_matches(',').rsplit("\",\"").next().unwrap().trim_matches('"').replace(',', "");
    value.parse::<f64>().unwrap() / 1e6
}

/// The Hopper attention with a producer warpgroup and ping-pong (`h200/2026-11-28-pingpong/RUN.md`):
/// in each of two calls every 16k and 32k prefill of the new binary is faster than every one of
/// the base's and ahead of PyTorch's, the peak stays the ledger's, the attention passes 600 TFLOPS under ncu, and
/// the probe gave the base kernel's bits.
#[test]
fn pingpong_prefill_beside_pytorch() {
    let dir = results().join("2026-11-28-pingpong");
    for (run, seq, rounds) in
        [("run-1", "16384", 3), ("run-1", "32768", 3), ("run-2", "16384", 2), ("run-2", "32768", 2)]
    {
        let row = |name: &str| prefill_row(&dir.join(run).join(name), seq);
        let names = |bin: &str| (1..=rounds).map(|i| format!("{bin}-{i}")).collect::<Vec<_>>();
        let tok = |bin: &str| names(bin).iter().map(|n| num(&row(n), "tok_s")).collect::<Vec<_>>();
        let (base, new) = (tok("base"), tok("new"));
        let (slowest_new, fastest_base) =
            (new.iter().cloned().fold(f64::MAX, f64::min), base.iter().cloned().fold(0.0, f64::max));
        assert!(slowest_new > fastest_base, "{run} {seq}: new {new:?} against base {base:?}");
        for n in names("new") {
            let r = row(&n);
            assert!(num(&r, "x_pytorch") > 1.0, "{seq} {n}: {} × PyTorch", num(&r, "x_pytorch"));
            assert!(
                (num(&r, "peak_mib") - num(&r, "ledger_peak_mib")).abs() < 0.2,
                "{seq} {n}: peak beside the ledger"
            );
        }
    }
    let tflops = ATTENTION_32K_FLOPS / (ncu_duration_ms(&dir.join("run-1/ncu-new.txt")) / 1e3) / 1e12;
    assert!(tflops > 600.0, "the Hopper attention at {tflops:.1} TFLOPS");
    let probe = std::fs::read_to_string(dir.join("development/probe-1.txt")).unwrap();
    assert!(probe.contains("all the same bits") && !probe.contains("DIFFERENT"), "the probe's bits");
    let kernels = std::fs::read_to_string(dir.join("run-1/kernels.txt")).unwrap();
    assert!(kernels.contains("test result: ok. 9 passed; 0 failed"));
}

/// A causal 32k prefill's attention on Qwen2.5-7B: 4 · 128 FLOPs per (query, key) pair, 28 heads.
const ATTENTION_32K_FLOPS: f64 = 4.0 * 128.0 * 28.0 * 32768.0 * 32769.0 / 2.0;

/// The prefill's element-wise ops in the lab's kernels (`h200/2026-11-28-prefill-elementwise`): in
/// the same call both rounds of the new binary prefill 16k and 32k faster than both of the base
/// binary's, the peak stays the ledger's, PyTorch stays ahead at 32k (the bar is not met), and the
/// kernel tests (with the bit-for-bit one) pass.
#[test]
fn elementwise_prefill_kernels() {
    let dir = results().join("2026-11-28-prefill-elementwise");
    let tok = |run: &str, seq: &str| {
        let r = prefill_row(&dir.join(run), seq);
        (num(&r, "tok_s"), num(&r, "x_pytorch"))
    };
    for seq in ["16384", "32768"] {
        let slowest_new = tok("new-1", seq).0.min(tok("new-2", seq).0);
        let fastest_base = tok("base-1", seq).0.max(tok("base-2", seq).0);
        assert!(slowest_new > 1.05 * fastest_base, "{seq}: new {slowest_new:.0} against base {fastest_base:.0}");
    }
    let (_, x) = tok("new-1", "32768");
    assert!(x < 1.0, "32k at {x:.3} × PyTorch: the bar is met, say so");
    let kernels = std::fs::read_to_string(dir.join("kernels.txt")).unwrap();
    assert!(kernels.contains("elementwise_equals_candles ... ok"));
    assert!(kernels.contains("test result: ok. 9 passed; 0 failed"));
}

/// The 8.9 build beside the 9.0 build of the same commit (`h200/2026-11-28-compute-89/RUN.md`): the
/// kernel tests of the 8.9 build pass (the element-wise kernels' bit-for-bit test among them), and
/// its greedy ids and memory equal the 9.0 build's in F32, BF16 and Q4_K_M in the same call.
#[test]
fn compute_89_build_gives_the_9_0_builds_tokens() {
    let dir = results().join("2026-11-28-compute-89");
    same_greedy_ids_as_9_0(&dir);
    let kernels = std::fs::read_to_string(dir.join("first-call/gpu_kernels-89.txt")).unwrap();
    assert!(kernels.contains("elementwise_equals_candles ... ok"));
    assert!(kernels.contains("test result: ok. 9 passed; 0 failed"));
}

/// The 32k prefill beside PyTorch's (`h200/2026-11-28-prefill-parity/RUN.md`): in runs 1-3 every
/// round of the new binary prefills 32k faster than every round of its base; run-3 sits just below
/// PyTorch and run-4 at or above it (the bar met in one call of two, as the folder says); every
/// peak is the ledger's; the Hopper attention runs above 500 TFLOPS under ncu and the probe's new
/// kernels beat main's; silu and rope take less than half their time; the 8.9 build's kernel tests
/// pass and its greedy ids and bytes are the 9.0 build's.
#[test]
fn prefill_beside_pytorch() {
    let dir = results().join("2026-11-28-prefill-parity");
    let tok = |run: &str, name: &str| {
        let r = prefill_row(&dir.join(run).join(name), "32768");
        (num(&r, "tok_s"), num(&r, "x_pytorch"))
    };
    for run in ["run-1", "run-2", "run-3"] {
        let slowest_new = (1..=3).map(|i| tok(run, &format!("new-{i}")).0).fold(f64::MAX, f64::min);
        let fastest_base = (1..=3).map(|i| tok(run, &format!("base-{i}")).0).fold(0.0, f64::max);
        assert!(slowest_new > fastest_base, "{run}: new {slowest_new:.0} against base {fastest_base:.0}");
    }
    for i in 1..=3 {
        let x = tok("run-3", &format!("new-{i}")).1;
        assert!((0.99..1.0).contains(&x), "run-3 new-{i}: {x:.4} × PyTorch");
    }
    for name in ["base-1", "base-2", "new-1", "new-2"] {
        let x = tok("run-4", name).1;
        assert!(x >= 1.0, "run-4 {name}: {x:.4} × PyTorch");
    }
    let tflops = ATTENTION_32K_FLOPS / (ncu_duration_ms(&dir.join("run-1/ncu-new.txt")) / 1e3) / 1e12;
    assert!(tflops > 500.0, "the Hopper attention at {tflops:.1} TFLOPS");
    // The probe's 32k rows: each new kernel against main's, both rounds.
    let probe = std::fs::read_to_string(dir.join("development/probe-3-copies-after-products.txt")).unwrap();
    let tf = |name: &str| -> Vec<f64> {
        let rows = probe.lines().filter(|l| l.contains("s 32768 ") && l.split_whitespace().nth(8) == Some(name));
        rows.map(|l| l.split_whitespace().nth(11).unwrap().parse().unwrap()).collect()
    };
    for (old, new, gain) in [("o_hopper", "hopper", 1.3), ("o_narrow", "narrow", 1.1), ("o_wide", "wide", 1.1)] {
        let (o, n) = (tf(old), tf(new));
        assert_eq!((o.len(), n.len()), (2, 2), "{new}: two rounds");
        let worst = n.iter().zip(&o).map(|(n, o)| n / o).fold(f64::MAX, f64::min);
        assert!(worst > gain, "{new}: {worst:.3} × {old}");
    }
    assert!(probe.contains("all within 0.02"), "every variant's output beside main's");
    // Per layer, from the layers files: the lab's silu and eight-pair rope against candle's and one pair.
    let per_layer = |run: &str, kernel: &str| -> f64 {
        let text = std::fs::read_to_string(dir.join(run).join("layers/layers.txt")).unwrap();
        let line = text.lines().find(|l| l.contains(kernel)).unwrap();
        line.split("launches,").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(per_layer("run-2", "vram_lab_silu_bf16") < 0.5 * per_layer("run-1", "usilu_bf16"));
    assert!(per_layer("run-3", "vram_lab_rope8_bf16 (28672") < 0.5 * per_layer("run-1", "vram_lab_rope_bf16 (229376"));
    for file in
        ["run-1/kernels.txt", "run-2/kernels.txt", "compute-89/gpu_kernels-89.txt", "compute-89/call-b-output.txt"]
    {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.contains("test result: ok. 9 passed; 0 failed"), "{file}");
    }
    same_greedy_ids_as_9_0(&dir.join("compute-89"));
}
