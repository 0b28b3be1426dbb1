//! Stage 4 on CPU: `bandwidth` and `offload` as a user runs them without a GPU. The "GPU" of the
//! placements is the CPU too, so what is checked is the bookkeeping: the placement chosen for the
//! budget, the bytes per token, the ceilings, and the clear refusals.

mod common;

use common::{lab_quiet as lab, output_text as text, read_csv as read};
use polars::prelude::*;

fn col<T: std::str::FromStr>(df: &DataFrame, name: &str) -> Vec<Option<T>> {
    df.column(name)
        .unwrap()
        .cast(&DataType::String)
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(|v| v.and_then(|s| s.parse().ok()))
        .collect()
}

#[test]
fn offload_on_cpu_places_the_layers_for_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("offload");
    let o = lab(&["offload", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let df = read(&out.join("offload/offload.csv"));
    let modes: Vec<String> = col(&df, "mode").into_iter().flatten().collect();
    assert_eq!(modes, ["full", "split", "streamed", "hybrid"]);
    let outcome: Vec<String> = col(&df, "outcome").into_iter().flatten().collect();
    assert!(outcome.iter().all(|o| o == "ok"), "{outcome:?}");
    // The tiny model's layers are 1.18 MB; 2.5 MiB less 0.1 reserved and the 0.5 MB head: one
    // layer stays on the "GPU" in split; streaming needs its buffer, so none stays resident.
    let gpu: Vec<Option<u64>> = col(&df, "gpu_layers");
    let cpu: Vec<Option<u64>> = col(&df, "cpu_layers");
    let streamed: Vec<Option<u64>> = col(&df, "streamed_layers");
    assert_eq!((gpu[1], cpu[1], streamed[1]), (Some(1), Some(1), Some(0)));
    assert_eq!((gpu[2], cpu[2], streamed[2]), (Some(0), Some(0), Some(2)));
    // Streamed: both layers' weights cross PCIe every token: 2 × (589,824 matrix + 1,024 bias and
    // norm parameters) × 2 B, and the hidden state once.
    let pcie: Vec<Option<f64>> = col(&df, "pcie_mib_per_token");
    let hidden = 256.0 * 2.0 / 1048576.0;
    assert!((pcie[2].unwrap() - (2.0 * 590_848.0 * 2.0 / 1048576.0 + hidden)).abs() < 1e-9);
    // No measured speed above its ceiling.
    let tok: Vec<Option<f64>> = col(&df, "decode_tok_s");
    let ceiling: Vec<Option<f64>> = col(&df, "ceiling_tok_s");
    for (t, c) in tok.iter().zip(&ceiling) {
        assert!(t.unwrap() > 0.0 && t.unwrap() <= c.unwrap(), "{t:?} vs {c:?}");
    }
    // The oversubscription case on paper, beside the article's figures.
    let p = read(&out.join("offload/offload_predict.csv"));
    let article: Vec<Option<f64>> = col(&p, "article_tok_s");
    assert_eq!(&article[..3], &[Some(1.75), Some(0.9), Some(1.77)]);
}

#[test]
fn unified_memory_and_bad_budgets_fail_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("managed");
    let o = lab(&["offload", "--modes", "split,managed", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let df = read(&out.join("offload/offload.csv"));
    let outcome: Vec<String> = col(&df, "outcome").into_iter().flatten().collect();
    assert_eq!(outcome[0], "ok");
    if !cfg!(feature = "cuda") {
        // A row that says why, and the stage still finished.
        assert!(outcome[1].contains("needs a CUDA build"), "{}", outcome[1]);
    }
    // Not a size, and a budget that holds not even the output layer: clear errors, non-zero exits.
    let out = tmp.path().join("small");
    let o = lab(&["offload", "--modes", "split", "--gpu-budget", "lots", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("`lots` is not a size"), "{}", text(&o));
    let out = tmp.path().join("tiny-budget");
    let o = lab(&["offload", "--modes", "split", "--gpu-budget", "0.5MiB", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("give at least"), "{}", text(&o));
}

#[test]
fn bandwidth_on_cpu_measures_the_host() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bw");
    let o = lab(&["bandwidth", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let df = read(&out.join("bandwidth/bandwidth.csv"));
    let tests: Vec<String> = col(&df, "test").into_iter().flatten().collect();
    assert_eq!(tests[0], "host_read");
    assert!(tests[1..].iter().all(|t| t == "host_gemv"), "{tests:?}");
    let gbs: Vec<Option<f64>> = col(&df, "gb_s");
    assert!(gbs.iter().all(|g| g.unwrap() > 0.1), "{gbs:?}");
}
