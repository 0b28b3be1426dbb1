//! Where weights come from: seeded synthetic tensors and safetensors files here, a GGUF file in
//! `gguf`. Each source hands out one tensor at a time, already on the target device in the
//! requested precision, so nothing larger than one tensor is ever staged.

use super::config::{DecoderConfig, TensorSpec};
use super::precision::{Held, Precision};
use crate::error::{cause, LabError, Result};
use crate::memory::MemoryProbe;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use rand::{rngs::StdRng, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest model.safetensors.index.json read (a 405B model's index is about 100 KiB).
pub const MAX_INDEX_BYTES: u64 = 64 << 20;

/// A loaded weight: dense, or GGUF blocks for candle's quantized matmul.
#[derive(Debug, Clone)]
pub enum Weight {
    Dense(Tensor),
    Quant(Arc<QTensor>),
}

impl Weight {
    /// Bytes the weight occupies on its device.
    pub fn bytes(&self) -> u64 {
        match self {
            Self::Dense(t) => (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            Self::Quant(q) => q.storage_size_in_bytes() as u64,
        }
    }

    /// The weight on `device` (itself when it is there already); quantized blocks are copied as
    /// they are.
    pub fn to_device(self, device: &Device) -> Result<Weight> {
        match self {
            Self::Dense(t) if !t.device().same_device(device) => Ok(Self::Dense(t.to_device(device)?)),
            Self::Quant(q) if !q.device().same_device(device) => {
                let storage = candle_core::quantized::QStorage::from_data(q.data()?, device, q.dtype())?;
                Ok(Self::Quant(Arc::new(QTensor::new(storage, q.shape())?)))
            }
            w => Ok(w),
        }
    }

    pub fn dense(self) -> Result<Tensor> {
        match self {
            Self::Dense(t) => Ok(t),
            Self::Quant(q) => Ok(q.dequantize(&q.device())?),
        }
    }
}

/// A part of a tensor: (dimension, start, length), as a tensor-parallel rank holds it.
pub type Part = (usize, usize, usize);

impl Weight {
    /// `part` of the weight, copied out so the whole can be freed (the weight itself for None).
    /// Dense weights only: a quantized block does not split at a head's boundary.
    pub fn part(self, name: &str, part: Option<Part>) -> Result<Weight> {
        let Some((dim, start, len)) = part else { return Ok(self) };
        match self {
            Self::Dense(t) => Ok(Self::Dense(t.narrow(dim, start, len)?.force_contiguous()?)),
            Self::Quant(_) => Err(LabError::input(format!(
                "{name} is quantized: tensor parallelism splits dense weights (BF16, F16, F32)"
            ))),
        }
    }
}

pub trait WeightSource {
    /// One tensor, on `device`, in `precision` (vectors stay F32 under Q4).
    fn load(&mut self, spec: &TensorSpec, precision: Precision, device: &Device) -> Result<Weight>;
    /// `part` of one tensor: the whole loaded and cut, unless the source can read the part alone.
    fn load_part(
        &mut self,
        spec: &TensorSpec,
        precision: Precision,
        device: &Device,
        part: Option<Part>,
    ) -> Result<Weight> {
        self.load(spec, precision, device)?.part(&spec.name, part)
    }
    /// Whether the checkpoint holds this tensor (lm_head is absent when embeddings are tied).
    fn contains(&self, name: &str) -> bool;
    /// The bytes the weights take once loaded in `precision` when the file fixes them (a GGUF's
    /// own block types); None where the precision's plan decides (`estimate::weight_bytes`).
    fn stored_bytes(&self, _cfg: &DecoderConfig, _precision: Precision) -> Option<u64> {
        None
    }
    fn describe(&self) -> String;
}

/// Dense tensor → the requested precision: a dtype cast, or the plan's quantization.
fn convert(t: Tensor, spec: &TensorSpec, precision: Precision, cfg: &DecoderConfig, device: &Device) -> Result<Weight> {
    match precision.held(cfg, spec) {
        Held::Dense(dtype) => Ok(Weight::Dense(t.to_dtype(dtype)?.to_device(device)?)),
        Held::Blocks(q) => Ok(Weight::Quant(Arc::new(super::quantize::quantize_rows(&t, q, device)?))),
    }
}

/// The weight `name`, taken out of `w` (each is used once).
pub(crate) fn take(w: &mut HashMap<String, Weight>, name: &str) -> Result<Weight> {
    w.remove(name).ok_or_else(|| LabError::input(format!("weight {name} is missing")))
}

/// The dense weight `name`, taken out of `w`, in `dtype`.
pub(crate) fn take_dense(w: &mut HashMap<String, Weight>, name: &str, dtype: DType) -> Result<Tensor> {
    Ok(take(w, name)?.dense()?.to_dtype(dtype)?)
}

pub(crate) fn check_shape(name: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(LabError::input(format!("tensor {name} has shape {got:?}, the config implies {want:?}")));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Synthetic

/// Seeded random weights with the checkpoint's exact names and shapes: N(0, 0.02) matrices and
/// biases, norms at 1. Memory and speed do not depend on the values.
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

    fn host_values(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let mut rng = StdRng::seed_from_u64(self.tensor_seed(name));
        let normal = Normal::new(0.0f32, STD).map_err(|e| LabError::other(format!("synthetic weights: {e}")))?;
        Ok((0..n).map(|_| normal.sample(&mut rng)).collect())
    }

    fn dense(&self, spec: &TensorSpec, dtype: DType, device: &Device) -> Result<Tensor> {
        if spec.name.ends_with("norm.weight") {
            return Ok(Tensor::ones(spec.shape.as_slice(), dtype, device)?);
        }
        if !device.is_cuda() {
            let v = self.host_values(&spec.name, spec.elem_count())?;
            return Ok(Tensor::from_vec(v, spec.shape.as_slice(), device)?.to_dtype(dtype)?);
        }
        if dtype == DType::F32 {
            device.set_seed(self.tensor_seed(&spec.name))?;
            return Ok(Tensor::randn(0f32, STD, spec.shape.as_slice(), device)?);
        }
        self.drawn(spec, dtype, device, None)
    }

    /// 16-bit on the GPU, or its `part`: drawn on the host by every core and copied up in one
    /// allocation of the part's size, as a checkpoint loads. Drawing on the GPU needs F32 staging
    /// beside the target, and those holes left Llama-2-7B's weights 875 MiB of partly used pool
    /// chunks (`anatomy_timeline.csv` in data/results/h200/2026-11-27-families). A value depends
    /// on its index only, so a rank draws its part alone: drawing whole tensors on every rank of
    /// 72B stalled four GPUs' loading (data/results/h200x4/2026-11-27-tp72-timeout).
    fn drawn(&self, spec: &TensorSpec, dtype: DType, device: &Device, part: Option<Part>) -> Result<Tensor> {
        let seed = self.tensor_seed(&spec.name);
        let (shape, v) = counter_normal(&spec.shape, part, seed);
        let host = match dtype {
            DType::BF16 => Tensor::from_vec(v.iter().map(|&x| half::bf16::from_f32(x)).collect(), shape, &Device::Cpu)?,
            DType::F16 => Tensor::from_vec(v.iter().map(|&x| half::f16::from_f32(x)).collect(), shape, &Device::Cpu)?,
            _ => Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dtype)?,
        };
        Ok(host.to_device(device)?)
    }

    /// Q4 without quantizing billions of values: quantize one seeded block of up to 256 rows on
    /// the host and repeat its bytes down the matrix (blocks never span rows).
    fn quantized(&self, spec: &TensorSpec, q: GgmlDType, device: &Device) -> Result<Weight> {
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        // On a GPU a tile of 16 rows drawn by every core: a mixture's 18,000 experts (Qwen3-30B-A3B)
        // would spend minutes quantizing 256-row tiles. The CPU lab keeps its values.
        let (tile_rows, values) = if device.is_cuda() {
            let tile_rows = rows.min(16);
            (tile_rows, counter_normal(&[tile_rows, cols], None, self.tensor_seed(&spec.name)).1)
        } else {
            let tile_rows = rows.min(256);
            (tile_rows, self.host_values(&spec.name, tile_rows * cols)?)
        };
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
/// rayon's threads, the same on any number of cores.
fn counter_normal(shape: &[usize], part: Option<Part>, seed: u64) -> (Vec<usize>, Vec<f32>) {
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
    let mut v = vec![0f32; nrows * ncols];
    v.par_chunks_mut(ncols.max(1)).enumerate().for_each(|(r, row)| {
        let base = ((row0 + r) * cols + col0) as u64;
        for (c, x) in row.iter_mut().enumerate() {
            let mut z = seed ^ (base + c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let sum = (z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48);
            // Four uniforms on [0, 65536) sum to a mean of 131,070 and a variance of 4/12 of 65536².
            *x = (sum as f32 - 131_070.0) * scale;
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
            Held::Dense(dtype @ (DType::BF16 | DType::F16)) if part.is_some() && device.is_cuda() => {
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

// ---------------------------------------------------------------------------------------------
// Safetensors

/// config.json + one or more *.safetensors (memory-mapped; on a GPU, tensors kept in their
/// file's dtype are read and copied by `upload` instead).
pub struct Safetensors {
    st: candle_core::safetensors::MmapedSafetensors,
    cfg: DecoderConfig,
    files: Vec<PathBuf>,
    #[cfg(feature = "cuda")]
    index: HashMap<String, super::upload::Entry>,
    #[cfg(feature = "cuda")]
    staged: Option<(Vec<std::fs::File>, super::upload::Uploader)>,
}

impl Safetensors {
    pub fn open(files: &[PathBuf], cfg: &DecoderConfig) -> Result<Self> {
        if files.is_empty() {
            return Err(LabError::input("no *.safetensors file found"));
        }
        for f in files {
            if !f.exists() {
                return Err(LabError::input(format!("missing weight file {}", f.display())));
            }
            // Mapped below: a FIFO or a device is refused before it is opened.
            crate::paths::open_regular(f, u64::MAX, true)?;
        }
        // SAFETY: the files are memory-mapped read-only; the lab never writes them while mapped.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::multi(files) }
            .map_err(|e| LabError::input(format!("not a readable safetensors file ({})", cause(&e))))?;
        Ok(Self {
            st,
            cfg: cfg.clone(),
            files: files.to_vec(),
            #[cfg(feature = "cuda")]
            index: super::upload::index(files)?,
            #[cfg(feature = "cuda")]
            staged: None,
        })
    }

    /// The tensor through the staged reads and copies when it goes to a GPU in its file's dtype.
    #[cfg(feature = "cuda")]
    fn staged(&mut self, spec: &TensorSpec, precision: Precision, device: &Device) -> Result<Option<Weight>> {
        /// Each of the two staging buffers.
        const CHUNK: usize = 64 << 20;
        let (Device::Cuda(dev), Held::Dense(dtype)) = (device, precision.held(&self.cfg, spec)) else {
            return Ok(None);
        };
        let Some(e) = self.index.get(&spec.name).filter(|e| e.dtype == dtype) else { return Ok(None) };
        check_shape(&spec.name, &e.shape, &spec.shape)?;
        if self.staged.is_none() {
            let files = self.files.iter().map(std::fs::File::open).collect::<std::io::Result<Vec<_>>>()?;
            self.staged = Some((files, super::upload::Uploader::new(dev, CHUNK)?));
        }
        let Some((files, up)) = self.staged.as_mut() else { return Ok(None) };
        let t = up.tensor(&files[e.file], e).map_err(|err| match err {
            LabError::Oom(_) => err,
            other => LabError::input(format!("cannot read tensor {} ({other})", spec.name)),
        })?;
        Ok(Some(Weight::Dense(t)))
    }

    /// The shard list: model.safetensors.index.json when present, else every *.safetensors.
    pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
        let index = dir.join("model.safetensors.index.json");
        // Any index there is read (a FIFO or a device is refused, not passed over).
        if index.exists() || index.is_symlink() {
            let text = crate::paths::read_regular_text(&index, MAX_INDEX_BYTES)?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", index.display())))?;
            let map = json["weight_map"]
                .as_object()
                .ok_or_else(|| LabError::input(format!("{} has no weight_map", index.display())))?;
            // The index is data: each shard it names is a plain name inside the model folder.
            let what = format!("{}: the shard", index.display());
            let mut files: Vec<PathBuf> = map
                .values()
                .map(|v| v.as_str().ok_or_else(|| LabError::input(format!("{what} {v} is not a file name"))))
                .map(|f| crate::paths::inside(dir, &what, f?))
                .collect::<Result<_>>()?;
            files.sort();
            files.dedup();
            return Ok(files);
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        Ok(files)
    }
}

impl WeightSource for Safetensors {
    fn load(&mut self, spec: &TensorSpec, precision: Precision, device: &Device) -> Result<Weight> {
        #[cfg(feature = "cuda")]
        if let Some(w) = self.staged(spec, precision, device)? {
            return Ok(w);
        }
        let t = self
            .st
            .load(&spec.name, &Device::Cpu)
            .map_err(|e| LabError::input(format!("cannot read tensor {} ({})", spec.name, cause(&e))))?;
        // Integer or FP8 weights carry scales the lab does not apply: refuse, not reinterpret.
        if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(LabError::input(format!(
                "tensor {} is stored as {:?}; the lab reads F32, F16 and BF16 weights",
                spec.name,
                t.dtype()
            )));
        }
        check_shape(&spec.name, t.dims(), &spec.shape)?;
        convert(t, spec, precision, &self.cfg, device)
    }

    fn contains(&self, name: &str) -> bool {
        self.st.get(name).is_ok()
    }

    fn describe(&self) -> String {
        let names: Vec<_> = self.files.iter().filter_map(|f| f.file_name()).map(|f| f.to_string_lossy()).collect();
        format!("safetensors: {}", names.join(", "))
    }
}

/// The first tensor of `source` (in module order) that holds a NaN or an infinity, read one at a
/// time on the CPU in F32: what names the culprit once a generation's logits are not finite.
pub fn first_non_finite(cfg: &DecoderConfig, source: &mut dyn WeightSource) -> Result<Option<String>> {
    for spec in cfg.tensor_specs() {
        if !source.contains(&spec.name) {
            continue;
        }
        let t = source.load(&spec, Precision::F32, &Device::Cpu)?.dense()?.to_dtype(DType::F32)?;
        if t.flatten_all()?.to_vec1::<f32>()?.iter().any(|v| !v.is_finite()) {
            return Ok(Some(spec.name.clone()));
        }
    }
    Ok(None)
}

/// Loads every tensor the config names, in module order. `each` runs after every tensor (progress
/// and the CPU capacity checkpoint); an error there stops the load. An OOM is captured by `probe`
/// while the tensors loaded so far are still held, so its snapshot shows memory at that moment.
pub fn load_all(
    cfg: &DecoderConfig,
    source: &mut dyn WeightSource,
    precision: Precision,
    device: &Device,
    probe: Option<&MemoryProbe>,
    each: impl FnMut(&TensorSpec, &Weight) -> Result<()>,
) -> Result<HashMap<String, Weight>> {
    load_placed(cfg, source, precision, device, |_| device.clone(), probe, each)
}

/// As `load_all`, each tensor then moved to `home(name)` at once: made or read on `load_on` (on a
/// GPU, synthetic weights are made there, far faster than on the CPU), so at most one tensor is
/// ever off its home. The offload stage loads models larger than the card this way.
pub fn load_placed(
    cfg: &DecoderConfig,
    source: &mut dyn WeightSource,
    precision: Precision,
    load_on: &Device,
    home: impl Fn(&str) -> Device,
    probe: Option<&MemoryProbe>,
    mut each: impl FnMut(&TensorSpec, &Weight) -> Result<()>,
) -> Result<HashMap<String, Weight>> {
    let mut out = HashMap::new();
    for spec in cfg.tensor_specs() {
        let to = home(&spec.name);
        let loaded = source
            .load(&spec, precision, load_on)
            .and_then(|w| match w {
                Weight::Dense(t) if !t.device().same_device(&to) => Ok(Weight::Dense(t.to_device(&to)?)),
                w => Ok(w),
            })
            .and_then(|w| each(&spec, &w).map(|_| w));
        match loaded {
            Ok(w) => {
                out.insert(spec.name.clone(), w);
            }
            Err(e) => {
                return Err(MemoryProbe::capture_in(probe, e, &format!("loading {}", spec.name)));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_of_a_synthetic_tensor_is_the_slice_of_the_whole() {
        let (shape, whole) = counter_normal(&[6, 10], None, 7);
        assert_eq!(shape, [6, 10]);
        let whole = Tensor::from_vec(whole, (6, 10), &Device::Cpu).unwrap();
        for part in [(0, 2, 3), (1, 4, 5), (1, 0, 10)] {
            let (shape, v) = counter_normal(&[6, 10], Some(part), 7);
            let want: Vec<f32> =
                whole.narrow(part.0, part.1, part.2).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!((shape[part.0], v), (part.2, want), "{part:?}");
        }
        // A bias: one row, cut along its only dimension.
        let (_, bias) = counter_normal(&[10], None, 3);
        assert_eq!(counter_normal(&[10], Some((0, 5, 5)), 3).1, bias[5..]);
        // Another seed, other values.
        assert_ne!(counter_normal(&[10], None, 4).1, bias);
    }

    #[test]
    fn synthetic_values_have_the_checkpoints_spread() {
        let (_, v) = counter_normal(&[1000, 1000], None, 11);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let sd = (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 1e-4, "mean {mean}");
        assert!((sd - STD as f64).abs() < 1e-4, "sd {sd}");
    }
}
