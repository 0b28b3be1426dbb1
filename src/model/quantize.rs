//! `vram-lab quantize`: a GGUF file from a safetensors model or a synthetic preset, with candle's
//! k-quant quantizer and llama.cpp's tensor names and qwen2.* metadata, so the Q4 path needs only
//! the BF16 checkpoint (and the file also loads in llama.cpp or candle's quantized_qwen2).

use super::config::Qwen2Config;
use super::precision::{ggml_dtype_for, Precision};
use super::weights::{gguf_name, WeightSource};
use crate::error::{LabError, Result};
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::path::Path;

#[derive(Debug, Clone, serde::Serialize)]
pub struct QuantizedTensor {
    pub name: String,
    pub ggml_dtype: String,
    pub elems: usize,
    pub bytes: u64,
}

/// `t` (a CPU matrix, any float dtype) quantized to `q` on `device`, rows in parallel: candle's
/// k-quant quantizer runs on one thread (7.6 B weights took 4.4 minutes on the H200 machine's
/// CPU); blocks never span rows, so quantizing row chunks apart and joining their bytes gives the
/// same blocks.
pub fn quantize_rows(t: &Tensor, q: GgmlDType, device: &Device) -> Result<QTensor> {
    use rayon::prelude::*;
    let t = t.to_device(&Device::Cpu)?.to_dtype(candle_core::DType::F32)?;
    let (rows, cols) = match t.dims() {
        [r, c] => (*r, *c),
        _ => return Ok(QTensor::quantize_onto(&t, q, device)?),
    };
    let chunk = 64.min(rows.max(1));
    let parts: Vec<Vec<u8>> = (0..rows.div_ceil(chunk))
        .into_par_iter()
        .map(|i| {
            let n = chunk.min(rows - i * chunk);
            // A compact copy: candle quantizes a view's whole storage, not its rows.
            Ok(QTensor::quantize(&t.narrow(0, i * chunk, n)?.force_contiguous()?, q)?.data()?.into_owned())
        })
        .collect::<Result<_>>()?;
    let storage = candle_core::quantized::QStorage::from_data(std::borrow::Cow::Owned(parts.concat()), device, q)?;
    Ok(QTensor::new(storage, (rows, cols))?)
}

pub fn write_gguf(
    cfg: &Qwen2Config,
    source: &mut dyn WeightSource,
    out: &Path,
    mut each: impl FnMut(&QuantizedTensor),
) -> Result<Vec<QuantizedTensor>> {
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    let mut report = Vec::new();
    for spec in cfg.tensor_specs() {
        let dense = source.load(&spec, Precision::F32, &Device::Cpu)?.dense()?;
        let q = ggml_dtype_for(&spec, cfg.tie_word_embeddings);
        let qt = quantize_rows(&dense, q, &Device::Cpu)?;
        let row = QuantizedTensor {
            name: gguf_name(&spec.name),
            ggml_dtype: format!("{q:?}"),
            elems: spec.elem_count(),
            bytes: qt.storage_size_in_bytes() as u64,
        };
        each(&row);
        report.push(row);
        tensors.push((gguf_name(&spec.name), qt));
    }
    use gguf_file::Value;
    let u = |v: usize| Value::U32(v as u32);
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("qwen2".into())),
        ("general.name", Value::String("vram-lab quantized qwen2".into())),
        ("qwen2.context_length", u(cfg.max_position_embeddings)),
        ("qwen2.embedding_length", u(cfg.hidden_size)),
        ("qwen2.feed_forward_length", u(cfg.intermediate_size)),
        ("qwen2.block_count", u(cfg.num_hidden_layers)),
        ("qwen2.attention.head_count", u(cfg.num_attention_heads)),
        ("qwen2.attention.head_count_kv", u(cfg.num_key_value_heads)),
        ("qwen2.attention.layer_norm_rms_epsilon", Value::F32(cfg.rms_norm_eps as f32)),
        ("qwen2.rope.freq_base", Value::F32(cfg.rope_theta as f32)),
    ];
    let mut metadata = metadata;
    if let Some(bos) = cfg.bos_token_id {
        metadata.push(("tokenizer.ggml.bos_token_id", u(bos as usize)));
    }
    if let Some(eos) = cfg.eos_ids().first() {
        metadata.push(("tokenizer.ggml.eos_token_id", u(*eos as usize)));
    }
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let tmp = out.with_extension("gguf.tmp");
    let mut file = std::fs::File::create(&tmp)
        .map_err(|e| LabError::input(format!("cannot create {}: {e}", tmp.display())))?;
    gguf_file::write(&mut file, &md, &ts)?;
    drop(file);
    std::fs::rename(&tmp, out)?;
    Ok(report)
}

/// Bytes of a GGUF's tensors by block type, for the anatomy table.
pub fn bytes_by_dtype(rows: &[QuantizedTensor]) -> Vec<(String, u64)> {
    let mut by: Vec<(String, u64)> = Vec::new();
    for r in rows {
        match by.iter_mut().find(|(d, _)| *d == r.ggml_dtype) {
            Some((_, b)) => *b += r.bytes,
            None => by.push((r.ggml_dtype.clone(), r.bytes)),
        }
    }
    by
}


#[cfg(test)]
mod row_tests {
    use super::*;

    /// Row chunks quantized in parallel make the bytes one pass makes, for a row count that
    /// is not a multiple of the chunk.
    #[test]
    fn parallel_rows_give_the_same_blocks() {
        let t = Tensor::randn(0f32, 0.02, (130, 512), &Device::Cpu).unwrap();
        for q in [GgmlDType::Q4K, GgmlDType::Q6K, GgmlDType::Q8_0] {
            let one = QTensor::quantize(&t, q).unwrap();
            let par = quantize_rows(&t, q, &Device::Cpu).unwrap();
            assert_eq!(par.shape().dims(), [130, 512]);
            assert_eq!(par.data().unwrap(), one.data().unwrap(), "{q:?}");
        }
    }
}
