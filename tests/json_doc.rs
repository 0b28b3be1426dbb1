//! `estimate --json` and `plan --json`: stdout is one JSON document of `report::json::SCHEMA` and
//! nothing else, for each engine, and docs/json/ holds one per engine as the lab prints it today
//! (`VRAM_LAB_UPDATE_DOCS=1 cargo test --test json_doc` rewrites them).

mod common;

use serde_json::Value;
use std::path::Path;

const CASES: [(&str, &[&str]); 4] = [
    (
        "estimate-lab",
        &["estimate", "--model", "synthetic:qwen2.5-7b", "--card", "rtx4090", "--precisions", "bf16,q4_k_m"],
    ),
    (
        "estimate-llamacpp",
        &["estimate", "--engine", "llama.cpp", "--model", "synthetic:qwen2.5-7b", "--card", "rtx4090"],
    ),
    (
        "estimate-transformers",
        &["estimate", "--engine", "transformers", "--model", "synthetic:qwen2.5-7b", "--card", "rtx4090"],
    ),
    (
        "plan-llamacpp",
        &["plan", "--engine", "llama.cpp", "--model", "synthetic:qwen2.5-7b", "--card", "rtx4090", "--seq", "8192"],
    ),
];

/// What differs from one run to the next: when, and where the run folder went.
fn stable(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in ["started", "run_folder", "command"] {
            o.remove(k);
        }
    }
    v
}

#[test]
fn each_engine_prints_one_document_of_the_schema() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json");
    let mut stale = Vec::new();
    for (name, args) in CASES {
        let out = tmp.path().join(name);
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--json", "--out", out.to_str().unwrap()]);
        let o = common::lab_quiet(&all);
        assert!(o.status.success(), "{name}: {}", common::output_text(&o));
        // The whole of stdout parses: no progress line, no table beside the document.
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(v["schema"], vram_lab::report::json::SCHEMA);
        assert_eq!(v["stage"], args[0]);
        assert_eq!(v["status"], "done", "{name}");
        assert_eq!(v["card"]["name"], "rtx4090", "{name}");
        assert!(v["config"].get("json").is_none(), "--json is how to print, not what was asked");
        let tables = v["tables"].as_object().unwrap();
        assert!(!tables.is_empty(), "{name}");
        for (t, rows) in tables {
            let rows = rows.as_array().unwrap_or_else(|| panic!("{name}: {t} is not rows"));
            let keys: Vec<Vec<&String>> = rows.iter().map(|r| r.as_object().unwrap().keys().collect()).collect();
            assert!(keys.windows(2).all(|w| w[0] == w[1]), "{name}: {t}'s rows have one set of columns");
        }
        assert!(v["findings"].is_array());
        let path = docs.join(format!("{name}.json"));
        let want = stable(v);
        if std::env::var_os("VRAM_LAB_UPDATE_DOCS").is_some() {
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&want).unwrap() + "\n").unwrap();
        } else {
            let committed: Value =
                std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or(Value::Null);
            if committed != want {
                stale.push(name);
            }
        }
    }
    assert!(stale.is_empty(), "docs/json/ is stale for {stale:?}: VRAM_LAB_UPDATE_DOCS=1 cargo test --test json_doc");
}

/// A plan that cannot be made is one line on stderr and a non-zero exit, and no document.
#[test]
fn a_refused_plan_prints_no_document() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p");
    let o = common::lab_quiet(&["plan", "--model", "synthetic:qwen9-1b", "--json", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown preset"), "{}", common::output_text(&o));
}
