//! The preallocated KV cache: 2 × layers tensors of [batch, kv_heads, max_seq, head_dim], allocated
//! once and written in place, so decoding never copies the cache (stock candle concatenates,
//! copying the whole cache every token).

use super::config::Qwen2Config;
use crate::error::{LabError, Result};
use candle_core::{DType, Device, Tensor};

#[derive(Debug, Clone)]
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    len: usize,
    max_seq: usize,
}

impl KvCache {
    pub fn new(cfg: &Qwen2Config, batch: usize, max_seq: usize, dtype: DType, device: &Device) -> Result<Self> {
        let shape = (batch, cfg.num_key_value_heads, max_seq, cfg.head_dim());
        let mut k = Vec::with_capacity(cfg.num_hidden_layers);
        let mut v = Vec::with_capacity(cfg.num_hidden_layers);
        for _ in 0..cfg.num_hidden_layers {
            k.push(Tensor::zeros(shape, dtype, device)?);
            v.push(Tensor::zeros(shape, dtype, device)?);
        }
        Ok(Self { k, v, len: 0, max_seq })
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

    pub fn batch(&self) -> usize {
        self.k.first().map(|t| t.dims()[0]).unwrap_or(0)
    }

    /// Bytes of the cache tensors (all of max_seq, since they are preallocated).
    pub fn bytes(&self) -> u64 {
        self.k.iter().chain(&self.v).map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum()
    }

    /// Bytes holding the `len` tokens written so far.
    pub fn used_bytes(&self) -> u64 {
        self.bytes() / self.max_seq.max(1) as u64 * self.len as u64
    }

    /// Writes `k`, `v` ([batch, kv_heads, s, head_dim]) at the current end for `layer`.
    pub fn write(&self, layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let s = k.dims()[2];
        if self.len + s > self.max_seq {
            return Err(LabError::input(format!(
                "KV cache full: {} tokens held + {s} new > capacity {}",
                self.len, self.max_seq
            )));
        }
        self.k[layer].slice_set(&k.contiguous()?, 2, self.len)?;
        self.v[layer].slice_set(&v.contiguous()?, 2, self.len)?;
        Ok(())
    }

    /// Views of the first `upto` positions of `layer` (no copy).
    pub fn view(&self, layer: usize, upto: usize) -> Result<(Tensor, Tensor)> {
        Ok((self.k[layer].narrow(2, 0, upto)?, self.v[layer].narrow(2, 0, upto)?))
    }

    pub fn advance(&mut self, s: usize) {
        self.len += s;
    }

    pub fn reset(&mut self) {
        self.len = 0;
    }
}
