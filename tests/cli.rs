//! The `vram-lab` binary as a user runs it: the default job into one run folder (manifest,
//! report.html), the stage commands' folders, OOM as a value on an emulated card, and bad input
//! giving a clear message and a non-zero exit.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vram-lab")).args(args).arg("--quiet").output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Fails and says `needle`, without a panic.
fn fails_with(args: &[&str], needle: &str) {
    let o = lab(args);
    let t = text(&o);
    assert!(!o.status.success(), "{args:?} should fail:\n{t}");
    assert!(t.contains(needle), "{args:?}: expected `{needle}` in:\n{t}");
    assert!(!t.contains("panicked"), "{args:?} panicked:\n{t}");
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn csv(dir: &Path, name: &str) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
    lines.map(|l| header.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect()
}

#[test]
fn anatomy_writes_tables_env_and_matches_predictions() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = lab(&["anatomy", "--max-new-tokens", "12", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for f in ["anatomy/anatomy.csv", "anatomy/anatomy_timeline.csv", "manifest.json", "console.txt", "report.html"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let rows = csv(&out, "anatomy/anatomy.csv");
    let precisions: Vec<_> = rows.iter().map(|r| r["precision"].as_str()).collect();
    assert_eq!(precisions, ["bf16", "q4_k_m", "f32"]);
    for r in &rows {
        assert_eq!(r["outcome"], "ok");
        let err: f64 = r["weights_vs_predicted_pct"].parse().unwrap();
        assert!(err.abs() < 1.0, "{}: weights {err}% off the prediction", r["precision"]);
        assert_eq!(r["new_tokens"], "12");
    }
    let m = manifest(&out);
    assert!(m["command"].as_str().unwrap().contains("anatomy"));
    // Flags not given take the device's defaults (on CPU, the tiny model's): precisions as default.
    assert_eq!(m["stages"][0]["config"]["precisions"], serde_json::json!(["bf16", "q4_k_m", "f32"]));
    assert_eq!(m["model"], "synthetic:tiny");
    assert_eq!(m["stages"][0]["config"]["max_new_tokens"], 12);
    assert_eq!(m["stages"][0]["tables"]["anatomy"], "anatomy/anatomy.csv");
}

/// A model too large to train on the card is a result (as `run` meets with 7B on a 24 GB card):
/// the formula's need and the OOM, exit 0, the scale table still written.
#[test]
fn train_reports_a_model_too_large_for_the_card() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = lab(&["train", "--card", "1MiB", "--out", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "an OOM is a value, the command exits 0:\n{t}");
    assert!(t.contains("does not fit in F32 for training") && t.contains("tried to allocate"), "{t}");
    assert_eq!(csv(&out, "train/train_scale.csv").len(), 4);
}

#[test]
fn oom_on_a_small_card_is_captured_and_every_scenario_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // 1 MiB of heap cannot hold even the tiny model: every scenario must end in a captured OOM.
    let o = lab(&["anatomy", "--card", "1MiB", "--max-new-tokens", "4", "--out", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "an OOM is a value, the command exits 0:\n{t}");
    assert!(
        t.contains("f32: out of memory during loading") && t.contains("tried to allocate") && t.contains("captured"),
        "{t}"
    );
    let rows = csv(&out, "anatomy/anatomy.csv");
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["outcome"], "oom", "{r:?}");
        assert!(r["oom_request_mib"].parse::<f64>().unwrap() > 0.0);
        assert!(r["oom_during"].contains("loading"));
    }
    assert!(std::fs::read_to_string(out.join("anatomy/oom_summary_f32.txt"))
        .unwrap()
        .contains("vram-lab memory summary"));
}

/// A precision that does not load is a row of the speed table with its outcome, and the bench
/// goes on to the next precision.
#[test]
fn bench_records_a_precision_that_does_not_load() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = lab(&[
        "bench",
        "--card",
        "1MiB",
        "--precisions",
        "f32,bf16",
        "--new-tokens",
        "2",
        "--repeats",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let rows = csv(&out, "bench/bench_decode.csv");
    for p in ["f32", "bf16"] {
        let r = rows.iter().find(|r| r["precision"] == p).unwrap_or_else(|| panic!("no {p} row:\n{t}"));
        assert_eq!(r["outcome"], "oom", "{r:?}");
    }
}

/// llama-bench's JSON lines given with `--llama-cpp` are the other stack's figures of the rows of
/// their precision (decode: a test with no prompt; prefill: one of the row's length), each beside
/// the lab's ratio to it; rows of a precision llama-bench did not run have none.
#[test]
fn bench_reads_llama_bench_from_the_same_call() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("llama-bench.jsonl");
    let line = |n_prompt: u32, n_gen: u32, ts: f64| {
        format!(
            r#"{{"build_commit": "abc1234", "model_filename": "/w/bf16.gguf", "n_prompt": {n_prompt}, "n_gen": {n_gen}, "n_gpu_layers": 99, "flash_attn": 1, "avg_ts": {ts}}}"#
        )
    };
    std::fs::write(&jsonl, [line(0, 8, 123.5), line(64, 0, 4567.0)].join("\n")).unwrap();
    let out = tmp.path().join("run");
    let o = lab(&[
        "bench",
        "--precisions",
        "bf16,f32",
        "--variants",
        "fused",
        "--llama-cpp",
        jsonl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let rows = csv(&out, "bench/bench_decode.csv");
    let bf16 = rows
        .iter()
        .find(|r| r["precision"] == "bf16" && r["batch"] == "1")
        .unwrap_or_else(|| panic!("no bf16 row:\n{t}"));
    assert_eq!(bf16["other_stack_tok_s"], "123.5", "{bf16:?}");
    let ratio: f64 = bf16["x_other_stack"].parse().unwrap();
    let tok: f64 = bf16["tok_s"].parse().unwrap();
    assert!((ratio - tok / 123.5).abs() < 1e-6 * ratio.max(1.0), "{bf16:?}");
    assert!(bf16["other_stack"].contains("llama.cpp abc1234"), "{bf16:?}");
    let f32 = rows.iter().find(|r| r["precision"] == "f32").unwrap();
    assert_eq!(f32["other_stack_tok_s"], "", "{f32:?}");
    let pre = csv(&out, "bench/bench_prefill.csv");
    let p64 = pre
        .iter()
        .find(|r| r["precision"] == "bf16" && r["seq"] == "64")
        .unwrap_or_else(|| panic!("no prefill of 64:\n{t}"));
    assert_eq!(p64["other_stack_tok_s"], "4567.0", "{p64:?}");
    fails_with(
        &["bench", "--llama-cpp", tmp.path().join("absent.jsonl").to_str().unwrap()],
        "cannot read llama-bench figures",
    );
}

/// The offload stage's llama.cpp rows come from llama-bench's `-ngl` tests of the stage's
/// precision in the same call: one row per `-ngl` below every layer; all-layer and prefill tests
/// are not offload rows.
#[test]
fn offload_reads_llama_bench_ngl_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let jsonl = tmp.path().join("llama-bench.jsonl");
    let line = |ngl: u32, n_prompt: u32, n_gen: u32, ts: f64| {
        format!(
            r#"{{"build_commit": "abc1234", "model_filename": "/w/bf16.gguf", "n_prompt": {n_prompt}, "n_gen": {n_gen}, "n_gpu_layers": {ngl}, "flash_attn": 1, "avg_ts": {ts}}}"#
        )
    };
    std::fs::write(&jsonl, [line(1, 0, 32, 14.5), line(99, 0, 32, 200.0), line(1, 64, 0, 900.0)].join("\n")).unwrap();
    let out = tmp.path().join("run");
    let o = lab(&[
        "offload",
        "--modes",
        "full,split",
        "--new-tokens",
        "2",
        "--llama-cpp",
        jsonl.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let rows = csv(&out.join("offload"), "offload.csv");
    let llama: Vec<_> = rows.iter().filter(|r| r["mode"].starts_with("llama.cpp")).collect();
    assert_eq!(llama.len(), 1, "{rows:?}");
    assert_eq!(llama[0]["mode"], "llama.cpp -ngl 1");
    assert_eq!(llama[0]["decode_tok_s"], "14.5");
}

#[test]
fn generate_prints_ids_and_is_deterministic() {
    let args = ["generate", "--precision", "f32", "--prompt-ids", "1,2,3,4,5", "--max-new-tokens", "6", "--json"];
    let a = lab(&args);
    assert!(a.status.success(), "{}", text(&a));
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["prompt_ids"], serde_json::json!([1, 2, 3, 4, 5]));
    assert_eq!(v["generated_ids"].as_array().unwrap().len(), 6);
    let b = lab(&args);
    let w: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(v["generated_ids"], w["generated_ids"]);
}

/// The reference's picks are `generate`'s F32 ids; on the CPU, F32 beside itself agrees to the bit
/// and BF16 stands close; a precision named twice is refused.
#[test]
fn parity_forces_the_references_tokens_through_each_precision() {
    let g = lab(&["generate", "--precision", "f32", "--prompt-ids", "1,2,3,4,5", "--max-new-tokens", "6", "--json"]);
    let ids: serde_json::Value = serde_json::from_slice(&g.stdout).unwrap();
    let p = lab(&["parity", "--precisions", "f32,bf16", "--prompt-ids", "1,2,3,4,5", "--steps", "6", "--json"]);
    assert!(p.status.success(), "{}", text(&p));
    let v: serde_json::Value = serde_json::from_slice(&p.stdout).unwrap();
    let rows = v["precisions"].as_array().unwrap();
    let picks: Vec<&serde_json::Value> =
        rows[0]["positions"].as_array().unwrap().iter().map(|p| &p["reference_id"]).collect();
    assert_eq!(serde_json::json!(picks), ids["generated_ids"]);
    assert_eq!((rows[0]["top1_agreement"].as_f64(), rows[0]["largest_diff"].as_f64()), (Some(1.0), Some(0.0)));
    let bf16 = rows[1]["largest_relative"].as_f64().unwrap();
    assert!(bf16 > 0.0 && bf16 < 0.05, "{bf16}");
    fails_with(&["parity", "--precisions", "bf16,f32,bf16"], "--precisions lists bf16 twice");
}

#[test]
fn bad_input_fails_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    fails_with(&["generate", "--model", missing.to_str().unwrap()], "no such model");
    fails_with(&["generate", "--model", "synthetic:qwen9-1b"], "unknown preset `qwen9-1b`");
    fails_with(&["anatomy", "--card", "rtx9090"], "unknown card `rtx9090`");
    fails_with(&["generate", "--precision", "int3"], "invalid value 'int3' for '--precision");
    fails_with(&["generate", "--device", "tpu"], "unknown device");
    if !cfg!(feature = "cuda") {
        fails_with(&["generate", "--device", "cuda"], "this build has no CUDA");
    }
    fails_with(&["generate", "--prompt", "hello"], "no tokenizer");
    // The page allocator maps a GPU's pages through the binary's hook: on the CPU it would change
    // nothing, so it is refused by name, before a run folder is claimed.
    let out = tmp.path().join("pages");
    fails_with(
        &["anatomy", "--device", "cpu", "--allocator", "pages", "--out", out.to_str().unwrap()],
        "--allocator pages maps a GPU's pages",
    );
    assert!(!out.exists());
    fails_with(&["anatomy", "--allocator", "slab"], "invalid value 'slab' for '--allocator");
    // Pricing allocates nothing: estimate prices the pages' slack on the CPU.
    let priced = |allocator: &str| {
        let out = tmp.path().join(format!("estimate-{allocator}"));
        let o = lab(&["estimate", "--device", "cpu", "--allocator", allocator, "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(manifest(&out)["allocator"], allocator);
        let rows = csv(&out, "estimate/estimate_ledger.csv");
        rows.iter().find(|r| r["item"] == "pool").unwrap()["mib"].parse::<f64>().unwrap()
    };
    let (pool, pages) = (priced("pool"), priced("pages"));
    assert!(pages > 0.0 && pages < pool / 4.0, "pages {pages} MiB, pool {pool} MiB");

    // A config.json missing fields.
    let dir = tmp.path().join("badcfg");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), r#"{"vocab_size": 10, "hidden_size": 8}"#).unwrap();
    fails_with(
        &["generate", "--model", dir.to_str().unwrap(), "--prompt-ids", "1"],
        "missing field `intermediate_size`",
    );

    // A directory without weights.
    let cfg = common::tiny();
    let dir = tmp.path().join("noweights");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string(&cfg).unwrap()).unwrap();
    fails_with(&["generate", "--model", dir.to_str().unwrap(), "--prompt-ids", "1"], "no *.safetensors file found");

    // A truncated safetensors file.
    let dir = tmp.path().join("trunc");
    common::write_dir(&dir, &cfg, 1, candle_core::DType::F32, 1);
    let f = dir.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(&["generate", "--model", dir.to_str().unwrap(), "--prompt-ids", "1"], "not a readable safetensors file");
    // A stage fails on it too (an OOM is a result, a broken file is not), after writing its folder.
    let out = tmp.path().join("trunc-run");
    fails_with(
        &["anatomy", "--model", dir.to_str().unwrap(), "--out", out.to_str().unwrap()],
        "not a readable safetensors file",
    );
    assert!(std::fs::read_to_string(out.join("manifest.json")).unwrap().contains("\"status\": \"failed\""));

    // A truncated GGUF file, and a file that is not GGUF at all.
    let gguf = tmp.path().join("t.gguf");
    let o = lab(&["quantize", "--to", gguf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&gguf).unwrap();
    std::fs::write(&gguf, &bytes[..bytes.len() / 2]).unwrap();
    fails_with(
        &["generate", "--model", gguf.to_str().unwrap(), "--precision", "q4", "--prompt-ids", "1"],
        "truncated: ",
    );
    let junk = tmp.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf").unwrap();
    fails_with(&["generate", "--model", junk.to_str().unwrap(), "--prompt-ids", "1"], "not a readable GGUF file");
    fails_with(&["generate", "--model", tmp.path().join("absent.gguf").to_str().unwrap()], "no such GGUF file");
}

#[test]
fn kv_sweeps_ledger_and_limit_on_a_controlled_capacity() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("kv");
    // 24 MiB of heap: the tiny model's prefill with all logits kept stops fitting near 600 tokens.
    let kv = |extra: &[&str]| {
        let mut args = vec!["kv", "--card", "24MiB", "--precisions", "bf16", "--logits", "all", "--max", "4096"];
        args.extend(extra);
        lab(&args)
    };
    let o = kv(&[
        "--sweeps",
        "prefill,decode,batch",
        "--resolution",
        "64",
        "--decode-to",
        "512",
        "--seq",
        "256",
        "--max-batch",
        "64",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = out.join("kv");
    let limit = &csv(&out, "kv_limit.csv")[0];
    let (ok, oom): (usize, usize) = (limit["max_context"].parse().unwrap(), limit["first_oom"].parse().unwrap());
    assert!(ok < oom && oom - ok <= 64, "bracket {ok}..{oom}");
    let prefill = csv(&out, "kv_prefill.csv");
    let outcome = |seq: usize| prefill.iter().find(|r| r["seq"] == seq.to_string()).map(|r| r["outcome"].clone());
    assert_eq!(outcome(ok).as_deref(), Some("ok"));
    assert_eq!(outcome(oom).as_deref(), Some("oom"));
    for r in prefill.iter().filter(|r| r["outcome"] == "ok") {
        // Held = KV + all-position logits: tiny in BF16 holds 1024 + 2048 B per token.
        let per_1k: f64 = r["growth_per_1k_tokens_mib"].parse().unwrap();
        assert!((per_1k - 3.0).abs() / 3.0 < 0.02, "seq {}: {per_1k} MiB per 1k tokens", r["seq"]);
        let kv: f64 = r["kv_measured_mib"].parse().unwrap();
        let formula: f64 = r["kv_gqa_formula_mib"].parse().unwrap();
        assert!((kv - formula).abs() / formula < 0.01);
    }
    let decode = csv(&out, "kv_decode.csv");
    assert_eq!(decode.iter().filter(|r| r["cache"] == "concat").count(), 2);
    for r in &decode {
        let err: f64 = r["ledger_vs_allocated_pct"].parse().unwrap();
        assert!(err.abs() < 2.0, "{} at {}: ledger off by {err}%", r["cache"], r["tokens"]);
    }
    let batch = csv(&out, "kv_batch.csv");
    assert_eq!(batch.last().unwrap()["outcome"], "oom", "the batch sweep runs until it does not fit");
    assert!(batch.len() >= 2);

    // --resolution 0 (its help: no bisection) runs the doubling lengths alone: every prefill's
    // length is one of them, the last an OOM.
    let out0 = tmp.path().join("kv0");
    let o = kv(&["--sweeps", "prefill", "--resolution", "0", "--out", out0.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let prefill = csv(&out0.join("kv"), "kv_prefill.csv");
    assert_eq!(prefill.last().unwrap()["outcome"], "oom");
    assert!(prefill.iter().all(|r| r["seq"].parse::<usize>().unwrap().is_power_of_two()), "a bisection ran");
}

/// The default command on CPU: every stage into one run folder, with its manifest and report.
#[test]
fn run_writes_one_folder_with_manifest_and_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    // A small run of every stage: the same path as `cargo run`, shorter sweeps.
    let o = lab(&["run", "--out", out.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let m = manifest(&out);
    assert_eq!(m["status"], "complete");
    let stages: Vec<&str> = m["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        stages,
        [
            "anatomy",
            "load",
            "kv",
            "frag",
            "leaks",
            "bandwidth",
            "offload",
            "bench",
            "estimate",
            "plan",
            "train",
            "parallel",
            "check"
        ]
    );
    for s in m["stages"].as_array().unwrap() {
        assert_eq!(s["status"], "done", "{s}");
        for (_, rel) in s["tables"].as_object().unwrap() {
            assert!(out.join(rel.as_str().unwrap()).is_file(), "{rel}");
        }
        assert!(!s["findings"].as_array().unwrap().is_empty(), "{} has no findings", s["name"]);
    }
    // On CPU the default card is the RTX 4090 scaled to the tiny model, and the stages run the
    // report's sizes scaled to it (recorded as they ran): the report's story in small.
    assert_eq!(m["card"]["name"], "scaled");
    let card_mib = m["card"]["total_mib"].as_f64().unwrap();
    assert!((5.0..6.0).contains(&card_mib), "{card_mib} MiB");
    let kv_start = m["stages"][2]["config"]["start"].as_u64().unwrap();
    assert!((8..1024).contains(&kv_start), "the report's 1,024 scaled: {kv_start}");
    let outcomes: Vec<(String, String)> = csv(&out.join("anatomy"), "anatomy.csv")
        .iter()
        .map(|r| (r["precision"].clone(), r["outcome"].clone()))
        .collect();
    assert_eq!(
        outcomes,
        [("bf16".into(), "ok".into()), ("q4_k_m".into(), "ok".into()), ("f32".into(), "oom".into())],
        "BF16 fits, F32 does not"
    );
    let limits = csv(&out.join("kv"), "kv_limit.csv");
    assert!(limits.iter().any(|r| r["precision"] == "bf16"), "the BF16 limit was bisected");
    for r in &limits {
        let (ok, oom): (usize, usize) = (r["max_context"].parse().unwrap(), r["first_oom"].parse().unwrap());
        assert!(ok < oom && oom < 4096, "{ok}..{oom}");
    }
    for r in csv(&out.join("offload"), "offload.csv") {
        assert_eq!(r["outcome"], "ok", "{} within the budget", r["mode"]);
    }
    let findings = m["stages"][0]["findings"].as_array().unwrap();
    assert!(t.contains("bf16 weights after loading") && findings.iter().any(|f| f["unit"] == "GiB"));
    assert!(
        t.lines().any(|l| l.contains("bf16 weights after loading") && l.contains("MiB")),
        "the summary shows MiB for a scaled card: {t}"
    );
    assert!(m["env"]["versions"]["candle-core"].as_str().unwrap().starts_with("0.11"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Stage 1 — anatomy") && html.contains("Stage 2 — the KV cache"));
    for caption in [
        "Stage 2 — prefill ledger (MiB) — precision=bf16, logits=all",
        "Stage 2 — a long decode",
        "Stage 2 — batch sweep",
        "Memory timeline",
    ] {
        assert!(html.contains(caption), "report.html lacks `{caption}`");
    }
    assert!(html.contains("Plotly.newPlot"), "charts are in the page");
    assert!(!html.contains("<script src=\"http") && !html.contains("<link"), "the page loads nothing from the network");
    assert!(t.contains("Summary — measured, predicted"), "{t}");

    // A second run into the same folder is refused and leaves the first one as it was.
    let before = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    fails_with(&["run", "--stages", "anatomy", "--out", out.to_str().unwrap()], "already holds a run");
    assert_eq!(std::fs::read_to_string(out.join("manifest.json")).unwrap(), before);

    // `report` re-renders the page from the manifest alone.
    std::fs::remove_file(out.join("report.html")).unwrap();
    let o = lab(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(out.join("report.html")).unwrap().len(), html.len());
    fails_with(&["report", tmp.path().to_str().unwrap()], "is not a vram-lab run folder");
    fails_with(&["run", "--stages", "nope", "--out", tmp.path().join("x").to_str().unwrap()], "unknown stage `nope`");
}

/// Development shells often set RUST_BACKTRACE=1: a bad file still gives one line, not frames.
#[test]
fn errors_are_one_line_with_rust_backtrace_set() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = tmp.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf at all, just some bytes").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .args(["generate", "--quiet", "--model", junk.to_str().unwrap(), "--prompt-ids", "1"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success());
    assert_eq!(t.trim().lines().count(), 1, "one line expected:\n{t}");
    assert!(t.contains("is not a readable GGUF file ("), "{t}");
    assert_eq!(t.matches('(').count(), t.matches(')').count(), "unbalanced: {t}");
    assert!(!t.contains("<unknown>"), "{t}");
}

/// Ctrl-C during the second stage: the first stage's files stay, the manifest says where it
/// stopped, report.html is written for what finished, and the exit code is 130.
#[test]
fn ctrl_c_keeps_the_finished_stages() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .args(["run", "--quiet", "--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    // The manifest lists a stage once it has finished: then the kv stage is running.
    while !std::fs::read_to_string(out.join("manifest.json")).is_ok_and(|t| t.contains("\"name\": \"anatomy\"")) {
        assert!(t0.elapsed().as_secs() < 300, "anatomy did not finish");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: signals our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let m = manifest(&out);
    assert_eq!(m["status"], "interrupted");
    assert_eq!(m["stages"][0]["status"], "done");
    assert_eq!(m["stages"][1]["status"], "interrupted");
    assert!(out.join("anatomy/anatomy.csv").is_file());
    assert!(out.join("report.html").is_file() && out.join("console.txt").is_file());
}

/// `--compute f32` turns Q4_K_M into `q4_k_m-f32` in the stage's config: the same weights, twice
/// the KV cache (F32, not BF16); dense precisions keep their own dtype.
#[test]
fn compute_f32_doubles_the_q4_k_m_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let kv = |compute: Option<&str>| {
        let out = tmp.path().join(format!("est-{}", compute.unwrap_or("default")));
        let mut args = vec![
            "estimate",
            "--model",
            "synthetic:qwen2.5-7b",
            "--precisions",
            "q4_k_m,bf16",
            "--out",
            out.to_str().unwrap(),
        ];
        if let Some(c) = compute {
            args.extend(["--compute", c]);
        }
        let o = lab(&args);
        assert!(o.status.success(), "{}", text(&o));
        let rows = csv(&out, "estimate/estimate_ledger.csv");
        let get = |p: &str, item: &str| -> f64 {
            rows.iter().find(|r| r["precision"] == p && r["item"] == item).unwrap_or_else(|| panic!("{p} {item}"))
                ["mib"]
                .parse()
                .unwrap()
        };
        let q = if compute == Some("f32") { "q4_k_m-f32" } else { "q4_k_m" };
        (
            manifest(&out)["stages"][0]["config"]["precisions"].clone(),
            get(q, "kv_cache"),
            get(q, "weights"),
            get("bf16", "kv_cache"),
        )
    };
    let (config, cache, weights, bf16_cache) = kv(None);
    assert_eq!(config, serde_json::json!(["q4_k_m", "bf16"]));
    let (config_f32, cache_f32, weights_f32, bf16_cache_f32) = kv(Some("f32"));
    assert_eq!(config_f32, serde_json::json!(["q4_k_m-f32", "bf16"]));
    // 4,096 tokens × 57,344 B (BF16) = 224 MiB; F32 twice that.
    assert_eq!(cache, 224.0);
    assert_eq!(cache_f32, 2.0 * cache);
    assert_eq!(bf16_cache, bf16_cache_f32);
    // Only the vectors (333,312 values) change dtype: 0.64 MiB.
    assert!((weights_f32 - weights - 333_312.0 * 2.0 / (1u64 << 20) as f64).abs() < 1e-6, "{weights} {weights_f32}");
}

/// The articles' unequal cards: each its own micro-batch; the same global batch split evenly
/// overflows the smaller card.
#[test]
fn estimate_gives_unequal_cards_their_micro_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cards");
    let o = lab(&[
        "estimate",
        "--model",
        "synthetic:qwen2.5-0.5b",
        "--train",
        "--seq",
        "512",
        "--checkpointing",
        "--cards",
        "24GiB,16GiB",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rows = csv(&out, "estimate/estimate_train_cards.csv");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let num = |r: &std::collections::HashMap<String, String>, c: &str| r[c].parse::<f64>().unwrap();
    let (big, small) = (num(&rows[0], "planned_micro_batch"), num(&rows[1], "planned_micro_batch"));
    assert!(big > small && small >= 1.0, "{big} vs {small}");
    for r in &rows {
        assert!(num(r, "planned_peak_gib") <= num(r, "card_gib"), "{r:?}");
    }
    assert_eq!((rows[0]["equal_fits"].as_str(), rows[1]["equal_fits"].as_str()), ("true", "false"), "{rows:?}");
    // An absurd card at the longest context: bounded, no overflow.
    let o = lab(&[
        "estimate",
        "--model",
        "synthetic:qwen2.5-0.5b",
        "--train",
        "--seq",
        "16777216",
        "--cards",
        "1000000GiB",
        "--out",
        tmp.path().join("huge").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // A card that is no card: one line.
    let o = lab(&[
        "estimate",
        "--model",
        "synthetic:qwen2.5-0.5b",
        "--train",
        "--cards",
        "24GiB,nonsense",
        "--out",
        tmp.path().join("bad").to_str().unwrap(),
    ]);
    assert!(!o.status.success() && text(&o).contains("nonsense"), "{}", text(&o));
}

#[test]
fn estimate_prices_each_gpu_of_a_tensor_parallel_and_a_pipeline_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], name: &str| {
        let out = tmp.path().join(name);
        let mut args = vec![
            "estimate",
            "--model",
            "synthetic:qwen2.5-7b",
            "--precisions",
            "bf16,q4_k_m",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        (lab(&args), out)
    };
    let (o, one) = run(&[], "one");
    assert!(o.status.success(), "{}", text(&o));
    let single: f64 = csv(&one, "estimate/estimate_ledger.csv")
        .iter()
        .find(|r| r["precision"] == "bf16" && r["item"] == "kv_cache")
        .unwrap()["mib"]
        .parse()
        .unwrap();
    let (o, tp) = run(&["--tp", "2"], "tp");
    assert!(o.status.success(), "{}", text(&o));
    let rows = csv(&tp, "estimate/estimate_parallel.csv");
    // Q4_K_M is not split by tensor parallelism: two BF16 GPUs, each with half the K/V heads.
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(text(&o).contains("q4_k_m: tensor parallelism splits dense weights"), "{}", text(&o));
    for r in &rows {
        assert_eq!(r["kv_cache_mib"].parse::<f64>().unwrap() * 2.0, single);
        // The total is its parts, the pool's chunks included: no term hidden from the table.
        let part = |c: &str| r[c].parse::<f64>().unwrap();
        let parts: f64 =
            ["weights_mib", "kv_cache_mib", "transient_mib", "logits_mib", "nccl_mib", "pool_mib", "runtime_mib"]
                .iter()
                .map(|c| part(c))
                .sum();
        assert!((parts - part("total_mib")).abs() < 1e-6, "{r:?}");
    }
    let (o, pp) = run(&["--pp", "2"], "pp");
    assert!(o.status.success(), "{}", text(&o));
    let rows = csv(&pp, "estimate/estimate_parallel.csv");
    assert_eq!(rows.len(), 4, "both precisions, two stages each");
    let layers: Vec<&str> = rows.iter().filter(|r| r["precision"] == "bf16").map(|r| r["layers"].as_str()).collect();
    assert_eq!(layers.len(), 2);
    assert!(layers[0].starts_with("0..") && layers[1].ends_with("..28"), "{layers:?}");
    // 3 GPUs cannot share Qwen2.5-7B's 4 K/V heads: one line, no panic.
    let (o, _) = run(&["--tp", "3"], "tp3");
    assert!(!o.status.success() && text(&o).contains("do not divide the model's 4 key/value heads"), "{}", text(&o));
}

/// A notebook's Live run passes its settings as the stage's config fields (`--settings`, hidden):
/// they reach the run's config, and a name the stage does not have is refused by name.
#[test]
fn stage_settings_reach_the_config_and_unknown_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = lab(&[
        "--device",
        "cpu",
        "--model",
        "synthetic:qwen2.5-7b",
        "--card",
        "rtx4090",
        "--out",
        out.to_str().unwrap(),
        "estimate",
        "--settings",
        r#"{"seq": 2048}"#,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(manifest(&out)["stages"][0]["config"]["seq"], 2048);
    fails_with(
        &[
            "--device",
            "cpu",
            "--out",
            tmp.path().join("bad").to_str().unwrap(),
            "estimate",
            "--settings",
            r#"{"nope": 1}"#,
        ],
        "no setting `nope`",
    );
    fails_with(
        &["--device", "cpu", "--out", tmp.path().join("bad2").to_str().unwrap(), "estimate", "--settings", "[1]"],
        "not a JSON object",
    );
}

/// `--cards` names GPUs, one each: the same card twice is the most common machine of two and is answered, in
/// `estimate` (tensor and pipeline parallelism, data-parallel training) as in `plan`; a list that names a set
/// (`--precisions`) still refuses a repeat.
#[test]
fn the_same_card_twice_is_two_gpus() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, extra) in [["--tp", "2"], ["--pp", "2"]].iter().enumerate() {
        let out = tmp.path().join(format!("parallel-{i}"));
        let o = lab(&[
            "estimate",
            "--model",
            "synthetic:qwen2.5-7b",
            "--cards",
            "rtx4090,rtx4090",
            extra[0],
            extra[1],
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{extra:?}: {}", text(&o));
    }
    let out = tmp.path().join("train");
    let o = lab(&[
        "estimate",
        "--model",
        "synthetic:qwen2.5-0.5b",
        "--train",
        "--cards",
        "24GiB,24GiB",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let rows = csv(&out.join("estimate"), "estimate_train_cards.csv");
    assert_eq!(rows.iter().map(|r| r["card"].as_str()).collect::<Vec<_>>(), ["24gib", "24gib"], "one row per GPU");
    assert_eq!(rows[0], rows[1], "the same card, the same share");
    fails_with(&["estimate", "--model", "synthetic:qwen2.5-7b", "--precisions", "bf16,bf16"], "lists \"bf16\" twice");
}

/// `estimate --card SIZE`: the card asked about has its row in the fit table and its place in the summary.
#[test]
fn estimate_answers_the_card_asked_about() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("e");
    let o = lab(&["estimate", "--model", "synthetic:qwen2.5-7b", "--card", "20GiB", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let rows = csv(&out.join("estimate"), "estimate_fit.csv");
    let own: Vec<_> = rows.iter().filter(|r| r["card"] == "20gib").collect();
    assert_eq!(own.len(), 3, "one row a precision: {:?}", rows.iter().map(|r| &r["card"]).collect::<Vec<_>>());
    assert!(own.iter().all(|r| r["card_mib"].parse::<f64>().unwrap() == 20480.0));
    // Q4_K_M of a 7B model fits 20 GiB at 4,096 tokens, and the summary says so by the card's name.
    let q4 = own.iter().find(|r| r["precision"] == "q4_k_m").unwrap();
    assert_eq!(q4["fits"], "true");
    let findings = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(findings.contains("fits: 20gib"), "the summary names the card asked about");
}

/// A reader that goes away before the first line (`vram-lab info | head -0`) ends the command
/// quietly: killed by SIGPIPE as cat would be, or done, never a panic.
#[test]
fn a_closed_stdout_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("estimate");
    for args in [&["info"][..], &["estimate", "--device", "cpu", "--out", out.to_str().unwrap()]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?} panicked on a closed stdout:\n{err}");
        assert!(
            o.status.success() || o.status.signal() == Some(libc::SIGPIPE),
            "{args:?} ended with {:?}:\n{err}",
            o.status
        );
    }
}

/// A command refused on its flags or settings leaves its --out free: the corrected command runs
/// there, and a user's empty folder stays as it was.
#[test]
fn a_refused_command_does_not_claim_its_out() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let out_s = out.to_str().unwrap();
    let o = lab(&["estimate", "--device", "cpu", "--precisions", "bf16,bf16", "--out", out_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!out.exists(), "the refused command left {}", out.display());
    let o = lab(&["estimate", "--device", "cpu", "--precisions", "bf16", "--out", out_s]);
    assert!(o.status.success(), "the corrected command into the same --out:\n{}", text(&o));
    let mine = tmp.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    let o = lab(&["kv", "--device", "cpu", "--settings", r#"{"nope": 1}"#, "--out", mine.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(mine.is_dir() && std::fs::read_dir(&mine).unwrap().next().is_none(), "the user's folder changed");
}

/// A run whose report cannot be written (a full disk; here a file-size limit of 1 MiB, the report
/// being several) is recorded as failed, exits non-zero, and leaves no temporary file.
#[test]
fn a_report_that_cannot_be_written_fails_the_run() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vram-lab"));
    cmd.args(["anatomy", "--device", "cpu", "--quiet", "--out", out.to_str().unwrap()]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    assert!(!o.status.success(), "the run succeeded without its report:\n{}", text(&o));
    assert_eq!(manifest(&out)["status"], "failed", "{}", text(&o));
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// `check --results DIR` walks a folder it does not trust: links back to `.` (a loop), FIFOs
/// named env.json and *.jsonl, a link to /dev/zero named as a sweep's CSV. None is followed or
/// read, and the check ends (here within 60 s, or the test fails rather than hang).
#[test]
fn check_walks_a_hostile_results_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let res = tmp.path().join("res");
    std::fs::create_dir(&res).unwrap();
    for i in 0..4 {
        std::os::unix::fs::symlink(".", res.join(format!("loop{i}"))).unwrap();
    }
    for fifo in ["env.json", "a.jsonl"] {
        let c = std::ffi::CString::new(res.join(fifo).to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }
    std::os::unix::fs::symlink("/dev/zero", res.join("kv_sweep.csv")).unwrap();
    let out = tmp.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .args(["check", "--quiet", "--results", res.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("check --results did not end on a folder of loops, FIFOs and /dev/zero");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert_eq!(manifest(&out)["status"], "complete");
}
