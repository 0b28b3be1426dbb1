//! Stage 3 on CPU: the `frag`, `leaks` and `watch` commands as a user runs them.

mod common;

use common::{lab_quiet as lab, output_text as text, read_csv as read};
use polars::prelude::*;

fn strs(df: &DataFrame, col: &str) -> Vec<String> {
    df.column(col)
        .unwrap()
        .cast(&DataType::String)
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(|v| v.unwrap_or("").to_string())
        .collect()
}

fn floats(df: &DataFrame, col: &str) -> Vec<Option<f64>> {
    df.column(col).unwrap().cast(&DataType::Float64).unwrap().f64().unwrap().iter().collect()
}

#[test]
fn frag_on_cpu_runs_the_model_of_each_policy_and_measures_the_host_arena() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("frag");
    let o = lab(&["frag", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let steps = read(&out.join("frag/frag_steps.csv"));
    let alloc = strs(&steps, "allocator");
    let step = strs(&steps, "step");
    let reserved = floats(&steps, "model_reserved_gib");
    let at = |a: &str, s: &str| {
        (0..alloc.len()).find(|&i| alloc[i] == a && step[i] == s).map(|i| reserved[i].unwrap()).unwrap()
    };
    // The caching pool keeps the holes and serves the request from their pages (measured on an
    // H200); the pool with threshold 0 gives them back at the synchronisation.
    assert!((at("caching", "odd_freed") - 4.883).abs() < 1e-3);
    assert!((at("caching", "request") - at("caching", "odd_freed")).abs() < 1e-6);
    assert!((at("pool", "odd_freed") - 2.441).abs() < 1e-3);
    // No GPU: nothing measured for CUDA's policies, nothing invented; the host arena is measured.
    let allocated = floats(&steps, "allocated_gib");
    for i in 0..alloc.len() {
        assert_eq!(allocated[i].is_some(), alloc[i] == "host-arena", "{} {}", alloc[i], step[i]);
    }
    let measured = floats(&steps, "reserved_gib");
    let arena_request = (0..alloc.len()).find(|&i| alloc[i] == "host-arena" && step[i] == "request").unwrap();
    // Block 9's hole joins the free end: the 2 GiB starts at 4,500 MiB and the range ends at 6,548.
    assert!((measured[arena_request].unwrap() - 6548.0 / 1024.0).abs() < 1e-3, "{:?}", measured[arena_request]);
    assert!((reserved[arena_request].unwrap() - 6548.0 / 1024.0).abs() < 1e-3);
    let ooms = read(&out.join("frag/frag_false_oom.csv"));
    assert_eq!(ooms.height(), 8);
    let outcome = strs(&ooms, "outcome");
    let model_outcome = strs(&ooms, "model_outcome");
    let layout = strs(&ooms, "layout");
    let who = strs(&ooms, "allocator");
    let largest = floats(&ooms, "largest_block_mib");
    let model_largest = floats(&ooms, "model_largest_block_mib");
    let freed = floats(&ooms, "freed_mib");
    let reserved_after = floats(&ooms, "reserved_after_mib");
    let model_reserved_after = floats(&ooms, "model_reserved_after_mib");
    for i in 0..who.len() {
        if who[i] == "host-arena" {
            // One range, no remapping: 2 GiB refused with 11.5 GiB free in 512 MiB holes, measured
            // and predicted; the largest block is the last hole joined to the free end (1,044 MiB).
            assert_eq!((outcome[i].as_str(), model_outcome[i].as_str()), ("oom", "oom"), "{}", layout[i]);
            assert_eq!(largest[i], model_largest[i]);
            assert!(largest[i].unwrap() < 2048.0 && freed[i].unwrap() > 11.0 * 1024.0, "{largest:?} {freed:?}");
            assert_eq!(reserved_after[i], model_reserved_after[i]);
        } else {
            // CUDA's allocators remap pages or keep no holes: no false OOM under any of them.
            assert_eq!(model_outcome[i], "ok", "{} {}", who[i], layout[i]);
            assert_eq!(outcome[i], "");
        }
    }
    // A request that fits in a hole is refused as input.
    let o = lab(&[
        "frag",
        "--hole-mib",
        "512",
        "--hole-request-mib",
        "256",
        "--out",
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert!(!o.status.success() && text(&o).contains("must be larger than --hole-mib"), "{}", text(&o));
}

#[test]
fn leaks_on_cpu_flags_each_leaking_run_and_passes_each_clean_one() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("leaks");
    let o = lab(&["leaks", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let summary = read(&out.join("leaks/leaks_summary.csv"));
    let verdicts = strs(&summary, "verdict");
    assert_eq!(verdicts.len(), 6);
    assert!(verdicts.iter().all(|v| v.ends_with("as expected")), "{verdicts:?}");
    // Kept caches and kept graphs: growth per step equals the prediction within 1 %.
    let demo = strs(&summary, "demo");
    let variant = strs(&summary, "variant");
    let growth = floats(&summary, "growth_per_step_mib");
    let predicted = floats(&summary, "predicted_per_step_mib");
    for (d, v) in [("kv_cache_kept", "caches kept"), ("autograd_graph_kept", "trainable weights")] {
        let i = (0..demo.len()).find(|&i| demo[i] == d && variant[i] == v).unwrap();
        let (g, p) = (growth[i].unwrap(), predicted[i].unwrap());
        assert!((g - p).abs() / p < 0.01, "{d}: {g} MiB per step vs {p} predicted");
    }
    // The overflowing batch ran out of memory and was diagnosed.
    let diag = read(&out.join("leaks/leaks_oom.csv"));
    let items = strs(&diag, "item");
    for item in ["weights", "kv_cache", "request", "shorter context", "smaller batch"] {
        assert!(items.iter().any(|i| i == item), "{item} missing from the diagnosis: {items:?}");
    }
}

#[test]
fn watch_follows_a_command_to_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("w.csv");
    let o = lab(&[
        "watch",
        "--interval-ms",
        "40",
        "--threshold-mib",
        "50",
        "--csv",
        csv.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        "import time; time.sleep(0.3); x = bytearray(160 << 20); time.sleep(0.6)",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let df = read(&csv);
    assert!(df.height() >= 5);
    let used: Vec<f64> = floats(&df, "process_used_mib").into_iter().flatten().collect();
    let peak = used.iter().cloned().fold(0.0, f64::max);
    // No GPU here: the process's RSS, which held the 160 MiB buffer.
    assert!(peak >= 160.0, "peak {peak} MiB");
    assert!(text(&o).contains("the command ended: exit status: 0"));
    let o = lab(&["watch"]);
    assert!(!o.status.success() && text(&o).contains("watch what?"));
}

/// `watch --duration-s` ends on time, a long interval or not, and ends what the command started
/// too (its process group): the shell's background child is gone when watch returns.
#[test]
fn watch_ends_the_commands_group_at_its_duration() {
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("child.pid");
    let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
    let o = lab(&["watch", "--duration-s", "1", "--interval-ms", "5000", "--", "sh", "-c", &script]);
    assert!(o.status.success(), "{}", text(&o));
    // The summary's span is the last sample's time: at the duration, not an interval past it.
    let t = text(&o);
    let span: f64 = t
        .split("samples over ")
        .nth(1)
        .and_then(|r| r.split(" s").next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no span in:\n{t}"));
    assert!((0.9..2.0).contains(&span), "samples over {span} s with --duration-s 1:\n{t}");
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let alive = state.as_deref().is_some_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'));
    assert!(!alive, "the command's child {pid} still runs after watch returned");
}
