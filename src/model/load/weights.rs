//! Where weights come from: seeded synthetic tensors and safetensors files here, a GGUF file in
//! `gguf`. Each source hands out one tensor at a time, already on the target device in the
//! requested precision, so nothing larger than one tensor is ever staged.

use crate::error::{cause, LabError, Result};
use crate::memory::MemoryProbe;
use crate::model::config::{DecoderConfig, TensorSpec};
use crate::model::precision::{Held, Precision};
use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
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
        Held::Blocks(q) => Ok(Weight::Quant(Arc::new(crate::model::quantize::quantize_rows(&t, q, device)?))),
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
    // Nothing is made or read for a model the lab's decoder does not compute.
    cfg.computed()?;
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
