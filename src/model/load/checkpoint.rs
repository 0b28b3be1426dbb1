//! Writing a model directory as transformers saves one (config.json, safetensors shards and
//! their index), one shard at a time, so a 7B checkpoint never sits in host memory whole. The
//! loading stage writes the synthetic model this way to time reading it back.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::load::weights::WeightSource;
use crate::model::precision::Precision;
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Writes `source`'s tensors in `precision` (a dense one) into `dir` in shards of at most
/// `shard_bytes` (one tensor per shard where a tensor is larger), synced to the disk. Returns
/// the shard files and the seconds spent writing and syncing them (making the tensors apart).
pub fn write_safetensors(
    cfg: &DecoderConfig,
    source: &mut dyn WeightSource,
    dir: &Path,
    precision: Precision,
    shard_bytes: u64,
) -> Result<(Vec<PathBuf>, f64)> {
    if precision.dense_dtype().is_none() {
        return Err(LabError::input(format!("a safetensors checkpoint holds dense tensors, not {precision}")));
    }
    std::fs::create_dir_all(dir)?;
    crate::paths::write_new(
        &dir.join("config.json"),
        serde_json::to_string_pretty(cfg).map_err(|e| LabError::Other(e.to_string()))?.as_bytes(),
    )?;
    // Group the tensors into shards first: the files' names carry the count.
    let specs: Vec<_> = cfg.tensor_specs().into_iter().filter(|s| source.contains(&s.name)).collect();
    let bytes = |s: &crate::model::TensorSpec| {
        (s.elem_count() * precision.dense_dtype().map_or(4, |d| d.size_in_bytes())) as u64
    };
    let mut groups: Vec<Vec<crate::model::TensorSpec>> = Vec::new();
    let mut filled = 0u64;
    for s in specs {
        let b = bytes(&s);
        match groups.last_mut() {
            Some(last) if filled + b <= shard_bytes => last.push(s),
            _ => {
                groups.push(vec![s]);
                filled = 0;
            }
        }
        filled += b;
    }
    let n = groups.len();
    let mut files = Vec::new();
    let mut writing = 0.0;
    let mut weight_map = serde_json::Map::new();
    for (i, group) in groups.iter().enumerate() {
        let name =
            if n == 1 { "model.safetensors".to_string() } else { format!("model-{:05}-of-{n:05}.safetensors", i + 1) };
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for spec in group {
            tensors.insert(spec.name.clone(), source.load(spec, precision, &Device::Cpu)?.dense()?);
            weight_map.insert(spec.name.clone(), serde_json::Value::String(name.clone()));
        }
        let path = dir.join(&name);
        let t0 = std::time::Instant::now();
        candle_core::safetensors::save(&tensors, &path)?;
        std::fs::File::open(&path)?.sync_all()?;
        writing += t0.elapsed().as_secs_f64();
        files.push(path);
    }
    if n > 1 {
        let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
        crate::paths::write_new(&dir.join("model.safetensors.index.json"), index.to_string().as_bytes())?;
    }
    Ok((files, writing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::load::synthetic::Synthetic;
    use crate::model::load::weights::Safetensors;

    #[test]
    fn shards_hold_every_tensor_once_and_read_back_equal() {
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let dir = std::env::temp_dir().join(format!("vram-lab-ckpt-{}", std::process::id()));
        let mut src = Synthetic::new(cfg.clone(), 7);
        // A shard budget smaller than the model: several shards and an index.
        let (files, _) = write_safetensors(&cfg, &mut src, &dir, Precision::Bf16, 64 << 10).unwrap();
        assert!(files.len() > 1);
        assert_eq!(Safetensors::files_in(&dir).unwrap(), files);
        let mut back = Safetensors::open(&files, &cfg).unwrap();
        let mut again = Synthetic::new(cfg.clone(), 7);
        let mut total = 0u64;
        let specs: Vec<_> = cfg.tensor_specs().into_iter().filter(|s| again.contains(&s.name)).collect();
        for spec in &specs {
            let a = back.load(spec, Precision::Bf16, &Device::Cpu).unwrap().dense().unwrap();
            let b = again.load(spec, Precision::Bf16, &Device::Cpu).unwrap().dense().unwrap();
            let diff = (a.to_dtype(candle_core::DType::F32).unwrap() - b.to_dtype(candle_core::DType::F32).unwrap())
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert_eq!(diff, 0.0, "{}", spec.name);
            total += (spec.elem_count() * 2) as u64;
        }
        // The files hold the tensors plus small headers.
        let on_disk = crate::memory::disk::size(&files).unwrap();
        assert!(on_disk >= total && on_disk < total + (64 << 10), "{on_disk} vs {total}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
