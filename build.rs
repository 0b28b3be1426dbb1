//! Records the versions Cargo.lock pins for the libraries a run's numbers depend on, so every
//! manifest.json says which candle, cudarc, polars… measured it.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    // The compute capability candle's kernels are built for (its build reads the same variable):
    // the lab's own kernels are then compiled for it too (`model::kernels::target::arch`).
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_default();
    if cap.chars().all(|c| c.is_ascii_digit()) && !cap.is_empty() {
        println!("cargo:rustc-env=VRAM_LAB_COMPUTE_CAP={cap}");
    }
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let wanted = ["candle-core", "candle-nn", "cudarc", "polars", "plotly", "tokenizers", "hf-hub", "nvml-wrapper"];
    let mut found = Vec::new();
    let mut name = "";
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = n.trim_matches('"');
        } else if let Some(v) = line.strip_prefix("version = ") {
            if wanted.contains(&name) && !found.iter().any(|(n, _): &(String, String)| n == name) {
                found.push((name.to_string(), v.trim_matches('"').to_string()));
            }
        }
    }
    let text: Vec<String> = found.iter().map(|(n, v)| format!("{n}={v}")).collect();
    println!("cargo:rustc-env=VRAM_LAB_LOCKED_VERSIONS={}", text.join(","));
}
