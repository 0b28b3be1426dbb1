//! Seeded synthetic weights with a checkpoint's exact names, shapes and dtypes: memory and speed
//! do not depend on the values, so a model of any size loads without a download.

use super::weights::{Part, Weight, WeightSource};
use crate::error::Result;
use crate::model::config::{DecoderConfig, TensorSpec};
use crate::model::precision::{Held, Precision};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

/// Seeded random weights with the checkpoint's exact names and shapes: matrices and biases of
/// spread 0.02 (`counter_normal`'s nearly normal draw), norms at 1. Memory and speed do not
/// depend on the values; the values do not depend on the device, so a GPU's logits can be read
/// beside the CPU's on the same model (`vram-lab parity`).
pub struct Synthetic {
    pub cfg: DecoderConfig,
    pub seed: u64,
}

const STD: f32 = 0.02;

impl Synthetic {
    pub fn new(cfg: DecoderConfig, seed: u64) -> Self {
        Self { cfg, seed }
    }

    fn tensor_seed(&self, name: &str) -> u64 {
        // FNV-1a: each tensor gets its own stream, independent of load order.
        name.bytes().fold(0xcbf29ce484222325u64 ^ self.seed, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
    }

    fn dense(&self, spec: &TensorSpec, dtype: DType, device: &Device) -> Result<Tensor> {
        if spec.name.ends_with("norm.weight") {
            return Ok(Tensor::ones(spec.shape.as_slice(), dtype, device)?);
        }
        self.drawn(spec, dtype, device, None)
    }

    /// The tensor, or its `part`: drawn on the host by every core and copied up in one
    /// allocation of the part's size, as a checkpoint loads. Drawing on the GPU needs F32 staging
    /// beside the target, and those holes left Llama-2-7B's weights 875 MiB of partly used pool
    /// chunks (`anatomy_timeline.csv` in data/results/h200/2026-11-27-families). A value depends
    /// on its index only, so a rank draws its part alone: drawing whole tensors on every rank of
    /// 72B stalled four GPUs' loading (data/results/h200x4/2026-11-27-tp72-timeout).
    fn drawn(&self, spec: &TensorSpec, dtype: DType, device: &Device, part: Option<Part>) -> Result<Tensor> {
        let seed = self.tensor_seed(&spec.name);
        // Drawn straight into the tensor's dtype: one host copy of the part, not an F32 one beside it.
        let host = match dtype {
            DType::BF16 => {
                let (shape, v) = counter_normal(&spec.shape, part, seed, half::bf16::from_f32);
                Tensor::from_vec(v, shape, &Device::Cpu)?
            }
            DType::F16 => {
                let (shape, v) = counter_normal(&spec.shape, part, seed, half::f16::from_f32);
                Tensor::from_vec(v, shape, &Device::Cpu)?
            }
            _ => {
                let (shape, v) = counter_normal(&spec.shape, part, seed, |x| x);
                Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)?
            }
        };
        Ok(host.to_device(device)?)
    }

    /// Q4 without quantizing billions of values: quantize one seeded block of up to 256 rows on
    /// the host and repeat its bytes down the matrix (blocks never span rows).
    fn quantized(&self, spec: &TensorSpec, q: GgmlDType, device: &Device) -> Result<Weight> {
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        // A tile of 16 rows drawn by every core: a mixture's 18,000 experts (Qwen3-30B-A3B) would
        // spend minutes quantizing 256-row tiles.
        let tile_rows = rows.min(16);
        let values = counter_normal(&[tile_rows, cols], None, self.tensor_seed(&spec.name), |x| x).1;
        let tile = Tensor::from_vec(values, (tile_rows, cols), &Device::Cpu)?;
        let tile = QTensor::quantize(&tile, q)?;
        let bytes = tile.data()?;
        let row_bytes = bytes.len() / tile_rows;
        let mut all = Vec::with_capacity(row_bytes * rows);
        while all.len() < row_bytes * rows {
            let take = (row_bytes * rows - all.len()).min(bytes.len());
            all.extend_from_slice(&bytes[..take]);
        }
        let storage = candle_core::quantized::QStorage::from_data(std::borrow::Cow::Owned(all), device, q)?;
        Ok(Weight::Quant(Arc::new(QTensor::new(storage, (rows, cols))?)))
    }
}

/// The values of `part` of a tensor of `shape` (all of it for None) and the part's shape: value
/// `i` (row-major index in the whole tensor) is the sum of four 16-bit uniforms of a hash of
/// (`seed`, `i`), centred and scaled to STD: nearly normal, and any part is drawn alone, by
/// rayon's threads, the same on any number of cores. Each value is stored as `to` makes it.
fn counter_normal<T: Copy + Default + Send>(
    shape: &[usize],
    part: Option<Part>,
    seed: u64,
    to: fn(f32) -> T,
) -> (Vec<usize>, Vec<T>) {
    use rayon::prelude::*;
    // A vector is one row; a matrix's leading dimensions are its rows.
    let cols = shape.last().copied().unwrap_or(1).max(1);
    let rows = shape.iter().product::<usize>() / cols;
    let last = shape.len().saturating_sub(1);
    let (row0, nrows, col0, ncols) = match part {
        Some((d, start, len)) if d == last => (0, rows, start, len),
        Some((0, start, len)) => (start, len, 0, cols),
        _ => (0, rows, 0, cols),
    };
    let mut out_shape = shape.to_vec();
    if let Some((d, _, len)) = part {
        out_shape[d] = len;
    }
    let scale = STD * 3f32.sqrt() / 65536.0;
    let mut v = vec![T::default(); nrows * ncols];
    v.par_chunks_mut(ncols.max(1)).enumerate().for_each(|(r, row)| {
        let base = ((row0 + r) * cols + col0) as u64;
        for (c, x) in row.iter_mut().enumerate() {
            let mut z = seed ^ (base + c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let sum = (z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48);
            // Four uniforms on [0, 65536) sum to a mean of 131,070 and a variance of 4/12 of 65536².
            *x = to((sum as f32 - 131_070.0) * scale);
        }
    });
    (out_shape, v)
}

impl WeightSource for Synthetic {
    fn load(&mut self, spec: &TensorSpec, precision: Precision, device: &Device) -> Result<Weight> {
        match precision.held(&self.cfg, spec) {
            Held::Dense(dtype) => Ok(Weight::Dense(self.dense(spec, dtype, device)?)),
            Held::Blocks(q) => self.quantized(spec, q, device),
        }
    }

    fn load_part(
        &mut self,
        spec: &TensorSpec,
        precision: Precision,
        device: &Device,
        part: Option<Part>,
    ) -> Result<Weight> {
        match precision.held(&self.cfg, spec) {
            Held::Dense(dtype) if part.is_some() && !spec.name.ends_with("norm.weight") => {
                Ok(Weight::Dense(self.drawn(spec, dtype, device, part)?))
            }
            _ => self.load(spec, precision, device)?.part(&spec.name, part),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.cfg.tensor_specs().iter().any(|s| s.name == name)
    }

    fn describe(&self) -> String {
        format!("synthetic weights (seed {})", self.seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_of_a_synthetic_tensor_is_the_slice_of_the_whole() {
        let (shape, whole) = counter_normal(&[6, 10], None, 7, |x| x);
        assert_eq!(shape, [6, 10]);
        let whole = Tensor::from_vec(whole, (6, 10), &Device::Cpu).unwrap();
        for part in [(0, 2, 3), (1, 4, 5), (1, 0, 10)] {
            let (shape, v) = counter_normal(&[6, 10], Some(part), 7, |x| x);
            let want: Vec<f32> =
                whole.narrow(part.0, part.1, part.2).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!((shape[part.0], v), (part.2, want), "{part:?}");
        }
        // A bias: one row, cut along its only dimension.
        let (_, bias) = counter_normal(&[10], None, 3, |x| x);
        assert_eq!(counter_normal(&[10], Some((0, 5, 5)), 3, |x| x).1, bias[5..]);
        // Another seed, other values.
        assert_ne!(counter_normal(&[10], None, 4, |x| x).1, bias);
    }

    #[test]
    fn synthetic_values_have_the_checkpoints_spread() {
        let (_, v) = counter_normal(&[1000, 1000], None, 11, |x| x);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let sd = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((sd - STD as f64).abs() < 1e-4, "sd {sd}");
    }
}
