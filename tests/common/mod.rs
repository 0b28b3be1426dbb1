//! Helpers the integration tests share: the tiny synthetic model's tensors, files written from
//! them, and max-abs-difference of logits.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;
use vram_lab::model::load::synthetic::Synthetic;
use vram_lab::model::load::weights::WeightSource;
use vram_lab::model::{DecoderConfig, Precision};

pub fn tiny() -> DecoderConfig {
    DecoderConfig::preset("tiny").unwrap()
}

/// Every tensor of the synthetic tiny model, dense F32 on CPU, by HF name.
pub fn tensors(cfg: &DecoderConfig, seed: u64) -> HashMap<String, Tensor> {
    let mut src = Synthetic::new(cfg.clone(), seed);
    cfg.tensor_specs()
        .iter()
        .map(|s| (s.name.clone(), src.load(s, Precision::F32, &Device::Cpu).unwrap().dense().unwrap()))
        .collect()
}

/// A model directory as transformers saves one: config.json + safetensors (optionally sharded
/// with an index), in `dtype`.
pub fn write_dir(dir: &Path, cfg: &DecoderConfig, seed: u64, dtype: DType, shards: usize) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(cfg).unwrap()).unwrap();
    let t = tensors(cfg, seed);
    let mut names: Vec<_> = t.keys().cloned().collect();
    names.sort();
    if shards <= 1 {
        let m: HashMap<_, _> = t.iter().map(|(k, v)| (k.clone(), v.to_dtype(dtype).unwrap())).collect();
        candle_core::safetensors::save(&m, dir.join("model.safetensors")).unwrap();
        return;
    }
    let mut weight_map = serde_json::Map::new();
    for (i, chunk) in names.chunks(names.len().div_ceil(shards)).enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards);
        let m: HashMap<_, _> = chunk.iter().map(|k| (k.clone(), t[k].to_dtype(dtype).unwrap())).collect();
        candle_core::safetensors::save(&m, dir.join(&file)).unwrap();
        for k in chunk {
            weight_map.insert(k.clone(), serde_json::Value::String(file.clone()));
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    let b = b.to_dtype(DType::F32).unwrap().flatten_all().unwrap();
    (a - b).unwrap().abs().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

pub fn max_abs(a: &Tensor) -> f32 {
    a.to_dtype(DType::F32).unwrap().flatten_all().unwrap().abs().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// Seeded token ids below `vocab`.
pub fn ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    (0..n as u64).map(|i| ((i * 2654435761 + seed * 40503) % vocab as u64) as u32).collect()
}

/// Runs the vram-lab binary with `args` and `--quiet`.
pub fn lab_quiet(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vram-lab")).args(args).arg("--quiet").output().unwrap()
}

/// stdout and stderr of a run, together.
pub fn output_text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A CSV a run wrote, read with polars.
pub fn read_csv(path: &Path) -> polars::prelude::DataFrame {
    use polars::prelude::*;
    CsvReadOptions::default()
        .with_has_header(true)
        .try_into_reader_with_file_path(Some(path.into()))
        .unwrap()
        .finish()
        .unwrap()
}
