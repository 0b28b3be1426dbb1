//! The lab's decoder forward pass, every dense family and every precision. Dense weights go through
//! candle_nn::Linear, GGUF blocks through candle's QMatMul. The KV cache is preallocated and
//! written in place, attention is bounded (see attention.rs), RoPE angles are computed in F32, and
//! a prompt may be fed in any split of prefix and continuation. The layers are `layer.rs`.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::decoder::crossing::{moved_to, Crossing};
use crate::model::decoder::layer::{norm, Layer, Pass};
use crate::model::decoder::streamer::Streamer;
use crate::model::layers::attention::{check_elems, AttentionMode};
use crate::model::layers::comm::{RankComm, SkippedSums};
use crate::model::layers::embedding::Embedding;
use crate::model::layers::kv_cache::{CacheKind, KvCache};
use crate::model::layers::linear::Linear;
use crate::model::load::weights::{take, take_dense, Weight};
use crate::model::offload::placement::{Home, Placement};
use crate::model::precision::Precision;
use crate::model::profile::{Profiler, StepProfile};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

/// A layer resident on its device, or the index of a streamed one in the model's `Streamer`.
// A model holds one slot per layer (at most a few hundred): boxing the resident layer saves nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(super) enum LayerSlot {
    Resident(Layer),
    Streamed,
}

/// Which logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Logits {
    /// Only the last position's (what generation needs).
    Last,
    /// Every position's, as `model(input_ids)` in transformers keeps them.
    All,
}

impl Logits {
    pub fn name(self) -> &'static str {
        match self {
            Self::Last => "last",
            Self::All => "all",
        }
    }
}

pub struct Decoder {
    pub cfg: DecoderConfig,
    pub precision: Precision,
    pub attention: AttentionMode,
    pub(super) embed: Embedding,
    pub(super) layers: Vec<LayerSlot>,
    pub(super) norm: Tensor,
    pub(super) lm_head: Linear,
    /// The device of the head and of resident GPU layers.
    pub(super) device: Device,
    pub(super) weight_bytes: u64,
    /// The streamed layers' host copies and GPU buffers, when a placement streams any.
    pub(super) streamer: Option<Streamer>,
    /// Where its decoding steps' time goes (`take_profile`).
    pub(super) profile: Profiler,
    /// A tensor-parallel rank's communicator (`into_rank`).
    pub(super) comm: Option<RankComm>,
}

impl Decoder {
    /// Builds the model from weights named as in the HF checkpoint (see `DecoderConfig::tensor_specs`).
    pub fn new(
        cfg: &DecoderConfig,
        precision: Precision,
        mut w: HashMap<String, Weight>,
        device: &Device,
    ) -> Result<Self> {
        let weight_bytes = w.values().map(Weight::bytes).sum();
        let act = precision.act_dtype();
        let embed_w = take(&mut w, "model.embed_tokens.weight")?;
        let lm_head = match w.remove("lm_head.weight") {
            Some(lm) => Linear::new(lm, None)?,
            // Tied: the embedding table is the output layer too, one copy in memory.
            None if cfg.tie_word_embeddings => Linear::new(embed_w.clone(), None)?,
            None => return Err(LabError::input("weight lm_head.weight is missing and embeddings are not tied")),
        };
        let embed = match embed_w {
            Weight::Dense(t) => Embedding::Dense(t),
            q => Embedding::Quant(q),
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            layers.push(LayerSlot::Resident(Layer::new(cfg, l, &mut w, act)?));
        }
        let norm = take_dense(&mut w, "model.norm.weight", act)?;
        Ok(Self {
            cfg: cfg.clone(),
            precision,
            attention: AttentionMode::default(),
            embed,
            layers,
            norm,
            lm_head,
            device: device.clone(),
            weight_bytes,
            streamer: None,
            profile: Profiler::default(),
            comm: None,
        })
    }

    /// Builds the model from weights already on their homes (see `weights::load_placed`): `Gpu`
    /// parts on `gpu`, the rest in host memory. CPU layers compute there; streamed layers go to
    /// a `Streamer` with `placement.slots` buffers on `gpu`. A tied head on the GPU is a copy of
    /// the host embedding table.
    pub fn new_placed(
        cfg: &DecoderConfig,
        precision: Precision,
        mut w: HashMap<String, Weight>,
        gpu: &Device,
        placement: &Placement,
    ) -> Result<Self> {
        if placement.layers.len() != cfg.num_hidden_layers {
            return Err(LabError::input(format!(
                "a placement of {} layers for a model of {}",
                placement.layers.len(),
                cfg.num_hidden_layers
            )));
        }
        if cfg.tie_word_embeddings && placement.head == Home::Gpu && placement.embed != Home::Gpu {
            let table = w
                .get("model.embed_tokens.weight")
                .ok_or_else(|| LabError::input("weight model.embed_tokens.weight is missing"))?;
            let copy = table.clone().dense()?.to_device(gpu)?;
            w.insert("lm_head.weight".into(), Weight::Dense(copy));
        }
        let mut model = Self::new(cfg, precision, w, gpu)?;
        let mut streamed = Vec::new();
        for (l, home) in placement.layers.iter().enumerate() {
            match (*home, &mut model.layers[l]) {
                (Home::Cpu, LayerSlot::Resident(layer)) => *layer = layer.to_host()?,
                (Home::Streamed, slot) => {
                    if let LayerSlot::Resident(layer) = std::mem::replace(slot, LayerSlot::Streamed) {
                        streamed.push((l, layer));
                    }
                }
                _ => {}
            }
        }
        if !streamed.is_empty() {
            model.streamer = Some(Streamer::new(streamed, placement.slots, gpu)?);
        }
        Ok(model)
    }

    /// Bytes the streamer holds in GPU buffers and in (pinned) host memory.
    pub fn stream_buffers(&self) -> Option<(u64, u64)> {
        self.streamer.as_ref().map(|s| (s.gpu_bytes(), s.host_bytes()))
    }

    /// The device layer `l` runs on (a streamed layer: the GPU).
    pub fn layer_device(&self, l: usize) -> Device {
        match &self.layers[l] {
            LayerSlot::Resident(layer) => layer.device().clone(),
            LayerSlot::Streamed => self.device.clone(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// This model as one rank of a tensor-parallel group: each layer's o and down become
    /// row-parallel products summed across the group, and a head holding a rank's share of the
    /// vocabulary gathers its logits (the model must be built from the rank's shard,
    /// `model::parallel::shard_weights`). A mixture or a streamed layer is refused.
    pub fn into_rank(mut self, comm: std::sync::Arc<dyn crate::model::parallel::AllReduce>) -> Result<Self> {
        let comm = crate::model::layers::comm::RankComm::new(comm);
        let rows = self.lm_head.out_dim()?;
        if rows != self.cfg.vocab_size {
            if rows * comm.group.ranks() != self.cfg.vocab_size {
                return Err(LabError::input(format!(
                    "a rank's head has {rows} rows: not the vocabulary's {} shared by {} ranks",
                    self.cfg.vocab_size,
                    comm.group.ranks()
                )));
            }
            self.lm_head = self.lm_head.gathered(comm.clone());
        }
        self.comm = Some(comm.clone());
        let layers = std::mem::take(&mut self.layers);
        self.layers = layers
            .into_iter()
            .map(|slot| match slot {
                LayerSlot::Resident(layer) => Ok(LayerSlot::Resident(layer.into_rank(&comm)?)),
                LayerSlot::Streamed => {
                    Err(LabError::Unsupported("a tensor-parallel rank keeps every layer on its GPU".into()))
                }
            })
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// Profiling only: a rank's sums skipped until the guard drops (`RankComm::skip_sums`); None
    /// for a model that is not a rank.
    pub fn skip_sums(&self) -> Option<SkippedSums> {
        self.comm.as_ref().map(RankComm::skip_sums)
    }

    /// Where its decoding steps' time went since the last call, per step (`model::profile`).
    pub fn take_profile(&self) -> StepProfile {
        let head = self.lm_head.take_host_time();
        let kernel = self.resident().map(Layer::take_host_time).fold(head, |a, b| (a.0 + b.0, a.1 + b.1));
        self.profile.take(kernel)
    }

    /// The most tokens one expert took in any layer since the last call (0 without a mixture).
    pub fn take_busiest(&self) -> usize {
        self.resident().map(Layer::take_busiest).max().unwrap_or(0)
    }

    fn resident(&self) -> impl Iterator<Item = &Layer> {
        self.layers.iter().filter_map(|slot| match slot {
            LayerSlot::Resident(layer) => Some(layer),
            LayerSlot::Streamed => None,
        })
    }

    /// Whether a CUDA graph can record every sum across ranks (true without tensor parallelism).
    pub fn sums_capturable(&self) -> bool {
        self.lm_head.capturable()
            && self.layers.iter().all(|l| match l {
                LayerSlot::Resident(layer) => layer.capturable(),
                LayerSlot::Streamed => true,
            })
    }

    /// Whether every layer, the embedding and the head are resident on the GPU: what the static
    /// decoding step (`graph.rs`) needs.
    pub fn all_on_gpu(&self) -> bool {
        // One GPU: a pipeline's stages on several GPUs run the loop, not the one-stream static step.
        let gpu = |d: &Device| d.is_cuda() && d.same_device(&self.device);
        gpu(&self.device)
            && gpu(&self.embed.device())
            && !matches!(self.lm_head, Linear::Host(_))
            && self
                .layers
                .iter()
                .all(|l| matches!(l, LayerSlot::Resident(layer) if gpu(layer.device()) && !layer.on_host()))
    }

    /// Whether `AttentionMode::Flash` runs its fused kernel for this model (every layer on a GPU
    /// of compute 8.0+, BF16 activations, a head size the kernel is built for); elsewhere it
    /// computes as `Bounded`.
    pub fn flash_runs(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = &self.device {
            return self.all_on_gpu()
                && self.act_dtype() == DType::BF16
                && crate::model::kernels::flash_attention::HEAD_DIMS.contains(&self.cfg.head_dim())
                && crate::model::kernels::flash_attention::supported(dev);
        }
        false
    }

    /// Stacks each dense device layer's q|k|v and gate|up into one product (a layer at a time, so
    /// one layer's projections are the most held twice). Returns how many layers it fused:
    /// quantized, CPU and streamed layers keep their products.
    pub fn fuse_projections(&mut self) -> Result<usize> {
        let mut n = 0;
        for slot in &mut self.layers {
            if let LayerSlot::Resident(layer) = slot {
                if layer.fused.is_none() && matches!(layer.q, Linear::Dense(_)) && layer.dense_mlp().is_ok() {
                    *layer = layer.fused_on_device()?;
                    n += 1;
                }
            }
        }
        self.device.synchronize()?;
        Ok(n)
    }

    /// Bytes of all weight tensors as loaded (a tied table counted once).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub fn act_dtype(&self) -> DType {
        self.precision.act_dtype()
    }

    /// A preallocated cache for `batch` sequences of up to `max_seq` tokens, in the activation dtype.
    /// Each layer's part of the cache lives where the layer runs.
    pub fn new_cache(&self, batch: usize, max_seq: usize) -> Result<KvCache> {
        self.new_cache_of(CacheKind::Preallocated, batch, max_seq)
    }

    pub fn new_cache_of(&self, kind: CacheKind, batch: usize, max_seq: usize) -> Result<KvCache> {
        let devices: Vec<Device> = (0..self.layers.len()).map(|l| self.layer_device(l)).collect();
        KvCache::on_devices(kind, &self.cfg, batch, max_seq, self.act_dtype(), &devices)
    }

    /// cos/sin for positions offset..offset+s: angles in F32 (BF16 positions above 256 round),
    /// then cast to the activation dtype as transformers does.
    pub(crate) fn rope(&self, offset: usize, s: usize) -> Result<(Tensor, Tensor)> {
        let d = self.cfg.head_dim();
        let inv: Vec<f32> = self.cfg.inv_freq().into_iter().map(|f| f as f32).collect();
        let inv = Tensor::from_vec(inv, (1, d / 2), &self.device)?;
        let pos =
            Tensor::arange(offset as u32, (offset + s) as u32, &self.device)?.to_dtype(DType::F32)?.reshape((s, 1))?;
        let ang = pos.broadcast_mul(&inv)?;
        let act = self.act_dtype();
        Ok((ang.cos()?.to_dtype(act)?, ang.sin()?.to_dtype(act)?))
    }

    /// Runs `ids` ([batch, s]) after what `cache` holds, appends their K/V, and returns logits:
    /// the last position's, or every position's in pieces of at most 2^31 elements (candle's
    /// kernels index in 32 bits), each [batch, rows, vocab].
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache, logits: Logits) -> Result<Vec<Tensor>> {
        let (b, s) = ids.dims2()?;
        let cfg = &self.cfg;
        check_elems("the MLP activation", b * s * cfg.intermediate_size)?;
        let offset = cache.len();
        let mut crossing = Crossing::new(self.rope(offset, s)?, &self.device, (s == 1).then_some(&self.profile));
        let mut x = self.embed(ids)?;
        if let Some(st) = &self.streamer {
            st.start_pass()?;
        }
        for (l, slot) in self.layers.iter().enumerate() {
            let layer = match slot {
                LayerSlot::Resident(layer) => layer,
                LayerSlot::Streamed => self.streamer()?.acquire(l)?,
            };
            let (input, r) = crossing.enter(x, layer.device())?;
            let t = std::time::Instant::now();
            let pass = Pass { cfg, rope: &r, offset, mode: self.attention };
            x = layer.host_step_or_forward(input, l, &pass, cache)?;
            if s == 1 && layer.on_host() {
                self.profile.cpu_layer(t);
            }
            if let LayerSlot::Streamed = slot {
                self.streamer()?.release()?;
            }
        }
        let x = crossing.leave(x)?;
        if s == 1 {
            self.profile.step();
        }
        cache.advance(s);
        self.head(&x, logits)
    }

    /// The token embedding of `ids` ([batch, s]) in the activation dtype.
    pub(crate) fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.embed.forward(&moved_to(ids, &self.embed.device())?)?.to_dtype(self.act_dtype())?)
    }

    /// The dense embedding table (a quantized one has no gradient).
    pub(crate) fn embed_table(&self) -> Option<Tensor> {
        match &self.embed {
            Embedding::Dense(t) => Some(t.clone()),
            Embedding::Quant(_) => None,
        }
    }

    /// A resident layer.
    pub(crate) fn layer(&self, l: usize) -> Result<&Layer> {
        match self.layers.get(l) {
            Some(LayerSlot::Resident(layer)) => Ok(layer),
            _ => Err(LabError::other(format!("layer {l} is not resident"))),
        }
    }

    /// The final norm and the head over the last layer's output `x` ([batch, s, hidden]): the
    /// last position's logits, or every position's in pieces of at most 2^31 elements (candle's
    /// kernels index in 32 bits), each [batch, rows, vocab].
    pub(crate) fn head(&self, x: &Tensor, logits: Logits) -> Result<Vec<Tensor>> {
        let (b, s, _) = x.dims3()?;
        let x = norm(x, &self.norm, self.cfg.rms_norm_eps, self.attention)?;
        match logits {
            Logits::Last => Ok(vec![self.lm_head.forward(&x.narrow(1, s - 1, 1)?.contiguous()?)?]),
            Logits::All => {
                let rows = (i32::MAX as usize / (b * self.cfg.vocab_size)).max(1);
                let mut out = Vec::with_capacity(s.div_ceil(rows));
                let mut r = 0;
                while r < s {
                    let n = rows.min(s - r);
                    out.push(self.lm_head.forward(&x.narrow(1, r, n)?.contiguous()?)?);
                    r += n;
                }
                Ok(out)
            }
        }
    }
}

impl Decoder {
    fn streamer(&self) -> Result<&Streamer> {
        self.streamer.as_ref().ok_or_else(|| LabError::other("a streamed layer without a streamer"))
    }
}

/// The logits of the last position of a forward's output, as a [batch, vocab] F32 tensor.
pub fn last_logits(pieces: &[Tensor]) -> Result<Tensor> {
    let last = pieces.last().ok_or_else(|| LabError::other("forward returned no logits"))?;
    let rows = last.dim(1)?;
    Ok(last.narrow(1, rows - 1, 1)?.squeeze(1)?.to_dtype(DType::F32)?)
}
