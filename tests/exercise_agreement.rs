//! An exercise and its lesson tell one story: where an exercise cell says its lab value is a figure
//! the notebook shows, the two are computed here and must be equal, and the cells must still name
//! the same model and layout.

use vram_lab::model::DecoderConfig;

fn cell_sources(notebook: &str) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks").join(notebook);
    let nb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["source"].as_array().unwrap().iter().filter_map(|l| l.as_str()).collect())
        .collect()
}

/// The one cell holding `needle`.
fn cell<'a>(cells: &'a [String], needle: &str) -> &'a str {
    let found: Vec<&String> = cells.iter().filter(|c| c.contains(needle)).collect();
    assert_eq!(found.len(), 1, "cells holding `{needle}`: {}", found.len());
    found[0]
}

fn number(filled: String) -> f64 {
    filled.replace(',', "").trim().parse().unwrap_or_else(|_| panic!("not a number: {filled}"))
}

/// Exercise 7's lab value (`rank_ledger(..).weights()` of 32B over 2 GPUs in BF16) is
/// observation 1's tensor-parallel GPU 0 `weights_mib`, as notebook 06 says.
#[test]
fn exercise_7_is_observation_1s_tensor_parallel_rank() {
    let cells = cell_sources("06_multi_gpu.ipynb");
    let obs = r#"estimate_with("synthetic:qwen2.5-32b", "h100", r#"{"tp": 2, "seq": 8192, "precisions": ["bf16"]}"#;
    cell(&cells, obs);
    let ex = cell(&cells, "exercises::tp_rank_weight_bytes");
    assert!(ex.contains(r#"preset("qwen2.5-32b")"#) && ex.contains("rank_ledger(&cfg, 2, 2, 0, 2)"), "{ex}");
    assert!(cell(&cells, "**练习 7").contains("observation 1's `weights_mib`"));

    let cfg = DecoderConfig::preset("qwen2.5-32b").unwrap();
    let lab = vram_lab::model::parallel::rank_ledger(&cfg, 2, 2, 0, 2).unwrap().weights() as f64 / 1048576.0;
    let tp = vram_lab::notebook::estimate_with(
        "synthetic:qwen2.5-32b",
        "h100",
        r#"{"tp": 2, "seq": 8192, "precisions": ["bf16"]}"#,
    )
    .unwrap();
    let shown = number(tp.fill("{estimate_parallel.weights_mib[layout=tp, gpu=0]:3}").unwrap());
    assert!((shown - lab).abs() < 1e-3, "observation 1 shows {shown} MiB, exercise 7's lab value is {lab} MiB");
}

/// Exercise 8's lab value (`nccl_bytes(4, 0)`) is what the estimator run cell 51 asks for gives GPU 0,
/// less the lab's 2 MiB peer-sum block the notebook says that column adds.
#[test]
fn exercise_8_is_the_estimators_gpu_0_of_four() {
    let cells = cell_sources("06_multi_gpu.ipynb");
    cell(&cells, r#"estimate_with("synthetic:qwen2.5-7b", "h200", r#"{"tp": 4}"#);
    assert!(cell(&cells, "exercises::nccl_bytes").contains("nccl_bytes(4, 0)"));
    assert!(cell(&cells, "**练习 8").contains("so it reads 2 MiB more than this"));
    let lab = (vram_lab::estimate::parallel::nccl_bytes(4, 0) + (2 << 20)) as f64 / 1048576.0;
    let tp4 = vram_lab::notebook::estimate_with("synthetic:qwen2.5-7b", "h200", r#"{"tp": 4}"#).unwrap();
    let shown = number(tp4.fill("{estimate_parallel.nccl_mib[layout=tp, gpu=0]:3}").unwrap());
    assert!(
        (shown - lab).abs() < 1e-3,
        "the estimator gives GPU 0 {shown} MiB, exercise 8's lab value and the 2 MiB block {lab} MiB"
    );
}
