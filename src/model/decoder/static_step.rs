//! The static decoding step, of a layer and of the model: one position whose index lives in
//! device memory, so one captured CUDA graph replays the same kernels at every position
//! (`model::generate::graph`).

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::decoder::layer::{norm, Layer};
use crate::model::decoder::model::{Decoder, LayerSlot};
use crate::model::generate::StepInputs;
use crate::model::kernels::{Fused, Part};
use crate::model::layers::attention::AttentionMode;
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use candle_core::Tensor;

impl Decoder {
    /// The greedy next ids ([batch, 1]) after `ids` ([batch, 1]) at the position `pos` holds
    /// ([1] u32, in device memory), through `Layer::decode_static`: `tables` holds the rotary
    /// table and the mask's inputs for the cache's capacity.
    pub(crate) fn decode_static(
        &self,
        ids: &Tensor,
        pos: &Tensor,
        tables: &crate::model::generate::Tables,
        cache: &KvCache,
    ) -> Result<Tensor> {
        let step = StepInputs::new(tables, pos, ids.dim(0)?, &self.cfg);
        let logits = self.static_logits(ids, &step, cache)?;
        step.argmax(&logits)
    }

    /// `decode_static`'s logits ([batch, vocab]) before the pick: what `generate::parity` compares.
    pub(crate) fn static_logits(&self, ids: &Tensor, step: &StepInputs, cache: &KvCache) -> Result<Tensor> {
        let cfg = &self.cfg;
        let mut x = self.embed(ids)?;
        for (l, slot_) in self.layers.iter().enumerate() {
            let LayerSlot::Resident(layer) = slot_ else {
                return Err(LabError::Unsupported("graph decoding needs every layer resident on the GPU".into()));
            };
            let (kc, vc) = cache.full(l)?;
            x = layer.decode_static(x, cfg, step, &kc, &vc)?;
        }
        // The head of `head(.., Logits::Last)` for one position, through the step's kernels.
        let head = self.lm_head.local();
        Ok(match normed_step(parts([head]).as_deref(), &x, &self.norm, cfg.rms_norm_eps, false, step)? {
            StepOut::Product(y) => self.lm_head.complete(y)?,
            StepOut::Normed(h) => self.lm_head.forward(&h)?,
        })
    }
}

impl Layer {
    /// One decoding step whose position lives in device memory (see `graph.rs`): the lab's
    /// kernels read the position themselves; with candle's, k and v are scattered into the cache
    /// at the step's slot ([batch, kv_heads, 1, head_dim] of the position) and attention covers
    /// the cache's whole capacity with the step's mask (0 up to the position, -inf after). Either
    /// way the step's kernels and shapes are the same at every position, so one captured graph
    /// replays them all.
    pub(crate) fn decode_static(
        &self,
        x: Tensor,
        cfg: &DecoderConfig,
        step: &StepInputs,
        kc: &Tensor,
        vc: &Tensor,
    ) -> Result<Tensor> {
        let b = x.dim(0)?;
        let (heads, kv_heads, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        let eps = cfg.rms_norm_eps;
        let group = heads / kv_heads;
        let scale = 1.0 / (d as f64).sqrt();
        let (nq, nk) = (heads * d, kv_heads * d);
        // q|k|v as one product: the step's kernel over the three weights (stacked or not), else
        // candle's stacked product, else three.
        let (y, h) = match normed_step(parts([&self.q, &self.k, &self.v]).as_deref(), &x, &self.ln1, eps, false, step)?
        {
            StepOut::Product(y) => (Some(y), None),
            StepOut::Normed(h) => match &self.fused {
                Some((qkv, _)) => (Some(qkv.forward(&h)?), None),
                None => (None, Some(h)),
            },
        };
        // The lab's kernels (CUDA, one product): rotary, store and attention in one kernel, or
        // (the store level) q rotated and scaled in place with k and v stored, then candle's
        // attention; else candle's kernels throughout.
        // Qwen3's q/k norms come before RoPE, which those kernels apply: its layers take candle's.
        let kernels = self.qk_norm.is_none();
        let attended = match &y {
            Some(y) if kernels => step.attend(y, kc, vc, heads, scale as f32)?,
            _ => None,
        };
        let stored = match (&y, &attended) {
            (Some(y), None) if kernels => step.qkv_store(y, kc, vc, heads, scale as f32)?,
            _ => false,
        };
        let a = match (attended, &y, stored) {
            (Some(a), _, _) => a,
            (None, Some(y), true) => {
                masked_attention(&y.narrow(2, 0, nq)?.contiguous()?.reshape((b, kv_heads, group, d))?, kc, vc, step)?
            }
            _ => {
                let (q, k, v) = match &y {
                    Some(y) => (y.narrow(2, 0, nq)?, y.narrow(2, nq, nk)?, y.narrow(2, nq + nk, nk)?),
                    None => {
                        let h = h.ok_or_else(|| LabError::other("the step's norm was not computed"))?;
                        (self.q.forward(&h)?, self.k.forward(&h)?, self.v.forward(&h)?)
                    }
                };
                // [b, 1, n·d] is [b, n, 1, d] in memory: with one position, heads first moves nothing.
                let q =
                    self.head_norm(q.contiguous()?.reshape((b, heads, 1, d))?, false, eps, AttentionMode::default())?;
                let k =
                    self.head_norm(k.contiguous()?.reshape((b, kv_heads, 1, d))?, true, eps, AttentionMode::default())?;
                let v = v.contiguous()?.reshape((b, kv_heads, 1, d))?;
                let (cos, sin) = step.rope()?;
                let q = crate::model::layers::attention::rope(&q, cos, sin)?;
                let k = crate::model::layers::attention::rope(&k, cos, sin)?;
                kc.scatter_set(step.slot()?, &k, 2)?;
                vc.scatter_set(step.slot()?, &v, 2)?;
                masked_attention(&(q * scale)?.reshape((b, kv_heads, group, d))?, kc, vc, step)?
            }
        };
        let x = self.o.forward_step(&a, Some(&x), step)?;
        let (gate, up, down) = self.dense_mlp()?;
        let m = normed_step(parts([gate, up]).as_deref(), &x, &self.ln2, eps, true, step)?;
        let m = match m {
            StepOut::Product(m) => m,
            StepOut::Normed(h) => self.gated(&h, self.fused.is_some(), cfg.intermediate_size)?,
        };
        down.forward_step(&m, Some(&x), step)
    }
}

/// Attention of the static step with candle's kernels: `q` ([b, kv_heads, group, d], rotated and
/// scaled) over the cache's whole capacity with the step's mask; [b, 1, heads · d].
pub(super) fn masked_attention(q: &Tensor, kc: &Tensor, vc: &Tensor, step: &StepInputs) -> Result<Tensor> {
    let (b, kv, group, d) = q.dims4()?;
    let scores = q.matmul(&kc.t()?)?.broadcast_add(step.mask()?)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    Ok(probs.matmul(vc)?.reshape((b, 1, kv * group * d))?)
}

/// What the static step made of norm(x) times a weight: the product (the step's kernel took
/// it), or the normed input for candle's kernels.
pub(super) enum StepOut {
    Product(Tensor),
    Normed(Tensor),
}

/// norm(x) times the weight `parts` one under the other (with `glu`, silu·up of gate and up) in
/// the static step: one kernel for the norm and the product when the step has it, else candle's
/// norm and the step's product if it has one. No parts (weights not dense): candle's norm.
pub(super) fn normed_step(
    parts: Option<&[Part]>,
    x: &Tensor,
    ln: &Tensor,
    eps: f64,
    glu: bool,
    step: &StepInputs,
) -> Result<StepOut> {
    let f = Fused { glu, ..Default::default() };
    if let Some(parts) = parts {
        if let Some(y) = step.gemv(parts, x, Fused { norm: Some((ln, eps as f32)), ..f })? {
            return Ok(StepOut::Product(y));
        }
    }
    let h = norm(x, ln, eps, AttentionMode::default())?;
    if let Some(parts) = parts {
        if let Some(y) = step.gemv(parts, &h, f)? {
            return Ok(StepOut::Product(y));
        }
    }
    Ok(StepOut::Normed(h))
}

/// The parts of `lins` for the step's product, when every one is dense.
pub(super) fn parts<'a, const N: usize>(lins: [&'a Linear; N]) -> Option<Vec<Part<'a>>> {
    lins.iter().map(|l| l.part()).collect()
}
