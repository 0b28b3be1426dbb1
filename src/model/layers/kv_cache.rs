//! The KV cache, in two kinds:
//! - `Preallocated` (the lab's default, the related article's KVCacheManager): 2 × layers tensors
//!   of [batch, kv_heads, max_seq, head_dim], allocated once and written in place, so decoding
//!   never copies the cache;
//! - `Concat` (what stock candle-transformers does): each step concatenates the new K/V onto the
//!   old, allocating a new cache and copying the whole old one every token.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::layers::elementwise::contiguous;
use candle_core::{DType, Device, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CacheKind {
    Preallocated,
    Concat,
}

impl CacheKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Preallocated => "preallocated",
            Self::Concat => "concat",
        }
    }
}

#[derive(Debug, Clone)]
pub struct KvCache {
    kind: CacheKind,
    k: Vec<Option<Tensor>>,
    v: Vec<Option<Tensor>>,
    len: usize,
    max_seq: usize,
}

impl KvCache {
    pub fn new(cfg: &DecoderConfig, batch: usize, max_seq: usize, dtype: DType, device: &Device) -> Result<Self> {
        Self::with_kind(CacheKind::Preallocated, cfg, batch, max_seq, dtype, device)
    }

    pub fn with_kind(
        kind: CacheKind,
        cfg: &DecoderConfig,
        batch: usize,
        max_seq: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        Self::on_devices(kind, cfg, batch, max_seq, dtype, &vec![device.clone(); cfg.num_hidden_layers])
    }

    /// A cache whose layer `l` lives on `devices[l]` (the device its layer runs on).
    pub fn on_devices(
        kind: CacheKind,
        cfg: &DecoderConfig,
        batch: usize,
        max_seq: usize,
        dtype: DType,
        devices: &[Device],
    ) -> Result<Self> {
        // Mistral v0.1 attends to its last `sliding_window` positions; the lab attends to all, so
        // a cache past the window would compute another model. Refused, not approximated.
        if let Some(w) = cfg.sliding_window.filter(|&w| max_seq > w) {
            return Err(LabError::input(format!(
                "{} tokens asked for, past the model's sliding window of {w}: the lab computes full attention, the same as the window's up to {w} tokens",
                max_seq
            )));
        }
        let shape = (batch, cfg.num_key_value_heads, max_seq, cfg.head_dim());
        let mut k = Vec::with_capacity(cfg.num_hidden_layers);
        let mut v = Vec::with_capacity(cfg.num_hidden_layers);
        for device in devices.iter().take(cfg.num_hidden_layers) {
            match kind {
                CacheKind::Preallocated => {
                    k.push(Some(Tensor::zeros(shape, dtype, device)?));
                    v.push(Some(Tensor::zeros(shape, dtype, device)?));
                }
                CacheKind::Concat => {
                    k.push(None);
                    v.push(None);
                }
            }
        }
        Ok(Self { kind, k, v, len: 0, max_seq })
    }

    pub fn kind(&self) -> CacheKind {
        self.kind
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.max_seq
    }

    /// Bytes of the cache tensors held now (all of max_seq when preallocated).
    pub fn bytes(&self) -> u64 {
        self.k.iter().chain(&self.v).flatten().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum()
    }

    /// Writes `k`, `v` ([batch, kv_heads, s, head_dim]) at the current end for `layer`.
    pub fn write(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let s = k.dims()[2];
        if self.len + s > self.max_seq {
            return Err(LabError::input(format!(
                "KV cache full: {} tokens held + {s} new > capacity {}",
                self.len, self.max_seq
            )));
        }
        let (k, v) = (contiguous(k)?, contiguous(v)?);
        match self.kind {
            CacheKind::Preallocated => {
                for (slot, new) in [(&self.k[layer], &k), (&self.v[layer], &v)] {
                    if let Some(t) = slot {
                        t.slice_set(new, 2, self.len)?;
                    }
                }
            }
            CacheKind::Concat => {
                for (slot, new) in [(&mut self.k[layer], k), (&mut self.v[layer], v)] {
                    *slot = Some(match slot.take() {
                        Some(old) => Tensor::cat(&[&old, &new], 2)?,
                        None => new,
                    });
                }
            }
        }
        Ok(())
    }

    /// Views of the first `upto` positions of `layer` (no copy).
    pub fn view(&self, layer: usize, upto: usize) -> Result<(Tensor, Tensor)> {
        match (&self.k[layer], &self.v[layer]) {
            (Some(k), Some(v)) => Ok((k.narrow(2, 0, upto)?, v.narrow(2, 0, upto)?)),
            _ => Err(LabError::other(format!("KV cache layer {layer} read before it was written"))),
        }
    }

    /// The whole preallocated `layer` ([batch, kv_heads, capacity, head_dim]), for writes at a
    /// position held in device memory.
    pub fn full(&self, layer: usize) -> Result<(Tensor, Tensor)> {
        match (&self.k[layer], &self.v[layer]) {
            (Some(k), Some(v)) if self.kind == CacheKind::Preallocated => Ok((k.clone(), v.clone())),
            _ => Err(LabError::Unsupported("graph decoding writes a preallocated cache".into())),
        }
    }

    pub fn advance(&mut self, s: usize) {
        self.len += s;
    }
}
