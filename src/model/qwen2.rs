//! The lab's Qwen2 forward pass: one implementation for every precision. Dense weights go through
//! candle_nn::Linear, GGUF blocks through candle's QMatMul. The KV cache is preallocated and
//! written in place, attention is bounded (see attention.rs), RoPE angles are computed in F32, and
//! a prompt may be fed in any split of prefix and continuation.
//!
//! Why one file of ~890 lines: the linear and embedding wrappers, the layer (its forward pass, the
//! static decoding step's fused path, stacking), the model and the logits share private helpers
//! that issue 25 moves into `model/qwen2/{layer,model}.rs` together with the decoding step
//! (`graph.rs`) they now import both ways; split apart from that move, they would move twice.

use super::attention::{attend, check_elems, AttentionMode};
use super::config::Qwen2Config;
use super::graph::{Fused, Part, StepInputs};
use super::host_linear::HostLinear;
use super::kv_cache::{CacheKind, KvCache};
use super::placement::{Home, Placement};
use super::precision::Precision;
use super::streamer::Streamer;
use super::weights::Weight;
use crate::error::{LabError, Result};
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor};
use std::collections::HashMap;

/// A linear layer over dense or quantized weights, with an optional bias.
#[derive(Debug, Clone)]
pub enum Linear {
    Dense(candle_nn::Linear),
    Quant(QMatMul, Option<Tensor>),
    /// Computed on the CPU from host memory (an offloaded layer).
    Host(HostLinear),
}

impl Linear {
    fn new(w: Weight, bias: Option<Tensor>) -> Result<Self> {
        Ok(match w {
            Weight::Dense(t) => Self::Dense(candle_nn::Linear::new(t, bias)),
            Weight::Quant(q) => Self::Quant(QMatMul::from_arc(q)?, bias),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Dense(l) => Ok(l.forward(x)?),
            Self::Host(h) => h.forward(x),
            Self::Quant(q, bias) => {
                // candle's CUDA quantized matmul takes BF16 (over 8 rows it casts to F32 and back
                // itself); its CPU path and a dequantized matrix take F32: cast around them the
                // same way, so both backends hold the same tensors (`estimate::transient`).
                let native = x.dtype() == DType::F32 || (x.device().is_cuda() && matches!(q, QMatMul::QTensor(_)));
                let y = if native { q.forward(x)? } else { q.forward(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype())? };
                Ok(match bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                })
            }
        }
    }

    /// The weight and bias of a dense layer, as a part of the static step's product.
    fn part(&self) -> Option<Part<'_>> {
        match self {
            Self::Dense(l) => Some((l.weight(), l.bias())),
            _ => None,
        }
    }

    /// `forward` (+ `res`) in the static decoding step: through the step's matrix-vector kernel
    /// when it has one, the bias and the residual in the same kernel.
    fn forward_step(&self, x: &Tensor, res: Option<&Tensor>, step: &StepInputs) -> Result<Tensor> {
        if let Some(part) = self.part() {
            if let Some(y) = step.gemv(&[part], x, Fused { res, ..Default::default() })? {
                return Ok(y);
            }
        }
        let y = self.forward(x)?;
        Ok(match res {
            Some(r) => (r + y)?,
            None => y,
        })
    }

    /// The same weights computed on the CPU.
    fn to_host(&self) -> Result<Self> {
        match self {
            Self::Dense(l) => Ok(Self::Host(HostLinear::new(l.weight().clone(), l.bias().cloned())?)),
            Self::Host(h) => Ok(Self::Host(h.clone())),
            Self::Quant(..) => Err(LabError::Unsupported("CPU layers of the offload compute dense weights (BF16, F16 or F32), not GGUF blocks".into())),
        }
    }

    /// The weight and the bias, for a dense layer.
    fn dense_parts(&self) -> Result<(Tensor, Option<Tensor>)> {
        match self {
            Self::Dense(l) => Ok((l.weight().clone(), l.bias().cloned())),
            Self::Host(h) => Ok((h.weight().clone(), h.bias().cloned())),
            Self::Quant(..) => Err(LabError::Unsupported("streaming moves dense weights, not GGUF blocks".into())),
        }
    }
}

/// Token embedding: a dense table, or a quantized one looked up block by block on its device.
#[derive(Debug, Clone)]
enum Embedding {
    Dense(Tensor),
    Quant(Weight),
}

impl Embedding {
    fn device(&self) -> Device {
        match self {
            Self::Dense(t) | Self::Quant(Weight::Dense(t)) => t.device().clone(),
            Self::Quant(Weight::Quant(q)) => q.device(),
        }
    }

    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, s) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let rows = match self {
            Self::Dense(t) => t.index_select(&flat, 0)?,
            Self::Quant(Weight::Quant(q)) => q.embedding(&flat)?,
            Self::Quant(Weight::Dense(t)) => t.index_select(&flat, 0)?,
        };
        let h = rows.dim(1)?;
        Ok(rows.reshape((b, s, h))?)
    }
}

#[derive(Debug, Clone)]
pub(super) struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    ln1: Tensor,
    ln2: Tensor,
    /// q|k|v and gate|up as one product each (CPU layers: four rayon calls per layer, not seven;
    /// GPU layers: fewer launches per token); q, k, v, gate, up are views into these.
    fused: Option<(Linear, Linear)>,
}

impl Layer {
    /// Where its inputs must be: the device of its weights.
    pub(super) fn device(&self) -> &Device {
        self.ln1.device()
    }

    /// Its tensors in a fixed order (what a streamed layer copies): q, k, v weights and biases,
    /// o, gate, up, down, the two norms.
    pub(super) fn tensors(&self) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(12);
        for lin in [&self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down] {
            let (w, b) = lin.dense_parts()?;
            out.push(w);
            out.extend(b);
        }
        out.extend([self.ln1.clone(), self.ln2.clone()]);
        Ok(out)
    }

    /// The inverse of `tensors`.
    pub(super) fn from_tensors(t: Vec<Tensor>) -> Result<Self> {
        let [qw, qb, kw, kb, vw, vb, ow, gw, uw, dw, ln1, ln2]: [Tensor; 12] =
            t.try_into().map_err(|_| LabError::other("a layer has 12 dense tensors"))?;
        let lin = |w, b| Linear::Dense(candle_nn::Linear::new(w, b));
        Ok(Self {
            q: lin(qw, Some(qb)),
            k: lin(kw, Some(kb)),
            v: lin(vw, Some(vb)),
            o: lin(ow, None),
            gate: lin(gw, None),
            up: lin(uw, None),
            down: lin(dw, None),
            ln1,
            ln2,
            fused: None,
        })
    }

    /// The same weights with no backward recorded (views of the same storage): what a
    /// checkpointed training pass runs forward, keeping no graph.
    pub(super) fn detached(&self) -> Result<Self> {
        Self::from_tensors(self.tensors()?.iter().map(Tensor::detach).collect())
    }

    /// The same layer computed on the CPU from host memory, q|k|v and gate|up fused.
    fn to_host(&self) -> Result<Self> {
        let cpu = Device::Cpu;
        let host = |w: Tensor, b: Option<Tensor>| -> Result<Linear> { Ok(Linear::Host(HostLinear::new(w, b)?)) };
        let (qkv, [q, k, v]) = stack([&self.q, &self.k, &self.v], &cpu, host)?;
        let (gate_up, [gate, up]) = stack([&self.gate, &self.up], &cpu, host)?;
        Ok(Self {
            q,
            k,
            v,
            o: self.o.to_host()?,
            gate,
            up,
            down: self.down.to_host()?,
            // In F32, as the layer computes (see `forward`).
            ln1: self.ln1.to_device(&cpu)?.to_dtype(DType::F32)?,
            ln2: self.ln2.to_device(&cpu)?.to_dtype(DType::F32)?,
            fused: Some((qkv, gate_up)),
        })
    }

    /// The same layer with q|k|v and gate|up as one product each on its own device (two matrix
    /// products in place of five per token); q, k, v, gate, up become views of them.
    fn fused_on_device(&self) -> Result<Self> {
        let dev = self.device().clone();
        let dense = |w: Tensor, b: Option<Tensor>| -> Result<Linear> { Ok(Linear::Dense(candle_nn::Linear::new(w, b))) };
        let (qkv, [q, k, v]) = stack([&self.q, &self.k, &self.v], &dev, dense)?;
        let (gate_up, [gate, up]) = stack([&self.gate, &self.up], &dev, dense)?;
        Ok(Self { q, k, v, o: self.o.clone(), gate, up, down: self.down.clone(), ln1: self.ln1.clone(), ln2: self.ln2.clone(), fused: Some((qkv, gate_up)) })
    }

    /// One decoding step whose position lives in device memory (see `graph.rs`): the lab's
    /// kernels read the position themselves; with candle's, k and v are scattered into the cache
    /// at the step's slot ([batch, kv_heads, 1, head_dim] of the position) and attention covers
    /// the cache's whole capacity with the step's mask (0 up to the position, -inf after). Either
    /// way the step's kernels and shapes are the same at every position, so one captured graph
    /// replays them all.
    pub(super) fn decode_static(&self, x: Tensor, cfg: &Qwen2Config, step: &StepInputs, kc: &Tensor, vc: &Tensor) -> Result<Tensor> {
        let b = x.dim(0)?;
        let (heads, kv_heads, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        let eps = cfg.rms_norm_eps;
        let group = heads / kv_heads;
        let scale = 1.0 / (d as f64).sqrt();
        let (nq, nk) = (heads * d, kv_heads * d);
        // q|k|v as one product: the step's kernel over the three weights (stacked or not), else
        // candle's stacked product, else three.
        let (y, h) = match normed_step(parts([&self.q, &self.k, &self.v]).as_deref(), &x, &self.ln1, eps, false, step)? {
            StepOut::Product(y) => (Some(y), None),
            StepOut::Normed(h) => match &self.fused {
                Some((qkv, _)) => (Some(qkv.forward(&h)?), None),
                None => (None, Some(h)),
            },
        };
        // The lab's kernels (CUDA, one product): q rotated and scaled in place, k and v stored,
        // then attention in one kernel; else candle's kernels for what the lab's did not take.
        let stored = match &y {
            Some(y) => step.qkv_store(y, kc, vc, heads, scale as f32)?,
            None => false,
        };
        let a = match (&y, stored) {
            (Some(y), true) => match step.attend(y, kc, vc, heads)? {
                Some(a) => a,
                None => masked_attention(&y.narrow(2, 0, nq)?.contiguous()?.reshape((b, kv_heads, group, d))?, kc, vc, step)?,
            },
            _ => {
                let (q, k, v) = match &y {
                    Some(y) => (y.narrow(2, 0, nq)?, y.narrow(2, nq, nk)?, y.narrow(2, nq + nk, nk)?),
                    None => {
                        let h = h.ok_or_else(|| LabError::other("the step's norm was not computed"))?;
                        (self.q.forward(&h)?, self.k.forward(&h)?, self.v.forward(&h)?)
                    }
                };
                // [b, 1, n·d] is [b, n, 1, d] in memory: with one position, heads first moves nothing.
                let q = q.contiguous()?.reshape((b, heads, 1, d))?;
                let k = k.contiguous()?.reshape((b, kv_heads, 1, d))?;
                let v = v.contiguous()?.reshape((b, kv_heads, 1, d))?;
                let (cos, sin) = step.rope()?;
                let q = candle_nn::rotary_emb::rope(&q, cos, sin)?;
                let k = candle_nn::rotary_emb::rope(&k, cos, sin)?;
                kc.scatter_set(step.slot()?, &k, 2)?;
                vc.scatter_set(step.slot()?, &v, 2)?;
                masked_attention(&(q * scale)?.reshape((b, kv_heads, group, d))?, kc, vc, step)?
            }
        };
        let x = self.o.forward_step(&a, Some(&x), step)?;
        let m = normed_step(parts([&self.gate, &self.up]).as_deref(), &x, &self.ln2, eps, true, step)?;
        let m = match m {
            StepOut::Product(m) => m,
            StepOut::Normed(h) => self.gated(&h, self.fused.is_some(), cfg.intermediate_size)?,
        };
        self.down.forward_step(&m, Some(&x), step)
    }

    /// silu(gate(h)) × up(h), through the stacked gate|up product when `stacked`.
    fn gated(&self, h: &Tensor, stacked: bool, i: usize) -> Result<Tensor> {
        Ok(match self.fused.as_ref().filter(|_| stacked) {
            Some((_, gate_up)) => {
                let y = gate_up.forward(h)?;
                (candle_nn::ops::silu(&y.narrow(2, 0, i)?)? * y.narrow(2, i, i)?)?
            }
            None => (candle_nn::ops::silu(&self.gate.forward(h)?)? * self.up.forward(h)?)?,
        })
    }

    /// Whether the layer computes on the CPU (in F32).
    fn on_host(&self) -> bool {
        matches!(self.q, Linear::Host(_))
    }

    /// One decoder layer. `x` is taken by value so the layer's input is freed once the attention
    /// residual is added: what stays alive through the MLP is what `estimate::transient` counts
    /// (the residual, both norms' outputs, q before and after rotary, k before and after rotary,
    /// v's projection, the attention output and its reshaped copy), as stages 1–2 measured it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forward(&self, x: Tensor, l: usize, cfg: &Qwen2Config, rope: &(Tensor, Tensor), cache: &mut KvCache, offset: usize, mode: AttentionMode) -> Result<Tensor> {
        let (b, s, _) = x.dims3()?;
        let (heads, kv_heads, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        let act = x.dtype();
        // CPU layers compute in F32: candle's CPU kernels are vectorised for F32, not for BF16
        // (a BF16 layer spent more time in its norms, rotary and attention than in its weights).
        let work = if self.on_host() { DType::F32 } else { act };
        let x = into_dtype(x, work)?;
        let (cos, sin) = (rope.0.to_dtype(work)?, rope.1.to_dtype(work)?);
        let h = norm(&x, &self.ln1.to_dtype(work)?, cfg.rms_norm_eps, mode)?;
        // Heads first, [b, s, n·d] → [b, n, s, d]: consumes the projection, so only the copy stays.
        let heads_first = |t: Tensor, n: usize| -> Result<Tensor> { Ok(t.reshape((b, s, n, d))?.transpose(1, 2)?.contiguous()?) };
        // A GPU layer takes its stacked products when decoding (fewer launches per token) and its
        // separate views when prefilling, so every moment of a prefill holds what stages 1-2
        // measured (the stacked product beside its copies would be a new, larger moment).
        let fused = self.fused.as_ref().filter(|_| self.on_host() || s == 1);
        let (q, k, v) = match fused {
            Some((qkv, _)) => {
                let y = qkv.forward(&h)?;
                let (nq, nk) = (heads * d, kv_heads * d);
                (heads_first(y.narrow(2, 0, nq)?, heads)?, heads_first(y.narrow(2, nq, nk)?, kv_heads)?, y.narrow(2, nq + nk, nk)?)
            }
            None => (heads_first(self.q.forward(&h)?, heads)?, heads_first(self.k.forward(&h)?, kv_heads)?, self.v.forward(&h)?),
        };
        let v = v.reshape((b, s, kv_heads, d))?.transpose(1, 2)?;
        let (q, k) = if mode == AttentionMode::Differentiable {
            (candle_nn::rotary_emb::rope_slow(&q, &cos, &sin)?, candle_nn::rotary_emb::rope_slow(&k, &cos, &sin)?)
        } else {
            (candle_nn::rotary_emb::rope(&q, &cos, &sin)?, candle_nn::rotary_emb::rope(&k, &cos, &sin)?)
        };
        cache.write(l, &k.to_dtype(act)?, &v.to_dtype(act)?)?;
        let (kc, vc) = cache.view(l, offset + s)?;
        // The fused kernel writes [b, s, heads·d] itself. The others' [b, heads, s, d] output
        // stays alive beside its reshaped copy through the MLP, as stages 1-2 measured it.
        let (a, _heads_first) = match flash_attend(&q, &kc, &vc, offset, mode)? {
            Some(a) => (a, None),
            None => {
                let a = attend(&q, &kc.to_dtype(work)?, &vc.to_dtype(work)?, offset, mode)?;
                (a.transpose(1, 2)?.reshape((b, s, heads * d))?, Some(a))
            }
        };
        let x = (x + self.o.forward(&a)?)?;
        let h = norm(&x, &self.ln2.to_dtype(work)?, cfg.rms_norm_eps, mode)?;
        let m = self.gated(&h, fused.is_some(), cfg.intermediate_size)?;
        Ok((x + self.down.forward(&m)?)?.to_dtype(act)?)
    }
}

/// `AttentionMode::Flash`'s kernel where it runs (CUDA, BF16, its head sizes): [b, s, heads · d].
fn flash_attend(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize, mode: AttentionMode) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if mode == AttentionMode::Flash {
        return super::flash_attention::attend(q, k, v, offset);
    }
    let _ = (q, k, v, offset, mode);
    Ok(None)
}

/// Attention of the static step with candle's kernels: `q` ([b, kv_heads, group, d], rotated and
/// scaled) over the cache's whole capacity with the step's mask; [b, 1, heads · d].
fn masked_attention(q: &Tensor, kc: &Tensor, vc: &Tensor, step: &StepInputs) -> Result<Tensor> {
    let (b, kv, group, d) = q.dims4()?;
    let scores = q.matmul(&kc.t()?)?.broadcast_add(step.mask()?)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    Ok(probs.matmul(vc)?.reshape((b, 1, kv * group * d))?)
}

/// What the static step made of norm(x) times a weight: the product (the step's kernel took
/// it), or the normed input for candle's kernels.
enum StepOut {
    Product(Tensor),
    Normed(Tensor),
}

/// norm(x) times the weight `parts` one under the other (with `glu`, silu·up of gate and up) in
/// the static step: one kernel for the norm and the product when the step has it, else candle's
/// norm and the step's product if it has one. No parts (weights not dense): candle's norm.
fn normed_step(parts: Option<&[Part]>, x: &Tensor, ln: &Tensor, eps: f64, glu: bool, step: &StepInputs) -> Result<StepOut> {
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
fn parts<'a, const N: usize>(lins: [&'a Linear; N]) -> Option<Vec<Part<'a>>> {
    lins.iter().map(|l| l.part()).collect()
}

/// `parts`' weights stacked by rows on `device` (biases too, zeros for a part without one), made
/// into one linear by `make`, and each part as a view of its rows.
fn stack<const N: usize>(parts: [&Linear; N], device: &Device, make: impl Fn(Tensor, Option<Tensor>) -> Result<Linear>) -> Result<(Linear, [Linear; N])> {
    let mut ws = Vec::with_capacity(N);
    let mut bs = Vec::with_capacity(N);
    let mut has_bias = Vec::with_capacity(N);
    for p in parts {
        let (w, b) = p.dense_parts()?;
        has_bias.push(b.is_some());
        bs.push(match b {
            Some(b) => b.to_device(device)?,
            None => Tensor::zeros(w.dim(0)?, w.dtype(), device)?,
        });
        ws.push(w.to_device(device)?);
    }
    let w = Tensor::cat(&ws, 0)?;
    let b = if has_bias.iter().any(|&h| h) { Some(Tensor::cat(&bs, 0)?) } else { None };
    let mut views = Vec::with_capacity(N);
    let mut at = 0;
    for (wi, &hb) in ws.iter().zip(&has_bias) {
        let n = wi.dim(0)?;
        let bias = match (&b, hb) {
            (Some(b), true) => Some(b.narrow(0, at, n)?),
            _ => None,
        };
        views.push(make(w.narrow(0, at, n)?, bias)?);
        at += n;
    }
    let views: [Linear; N] = views.try_into().map_err(|_| LabError::other("stacking a layer's projections"))?;
    Ok((make(w, b)?, views))
}

/// `x` in `dtype`, consuming it (no second reference kept alive when it already is).
fn into_dtype(x: Tensor, dtype: DType) -> Result<Tensor> {
    Ok(if x.dtype() == dtype { x } else { x.to_dtype(dtype)? })
}

/// RMS norm: candle's fused kernel, or (for a training step) the composed ops it has a backward for.
fn norm(x: &Tensor, w: &Tensor, eps: f64, mode: AttentionMode) -> Result<Tensor> {
    Ok(if mode == AttentionMode::Differentiable {
        candle_nn::ops::rms_norm_slow(x, w, eps as f32)?
    } else {
        candle_nn::ops::rms_norm(x, w, eps as f32)?
    })
}

/// A layer resident on its device, or the index of a streamed one in the model's `Streamer`.
#[derive(Debug, Clone)]
enum LayerSlot {
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

pub struct Qwen2 {
    pub cfg: Qwen2Config,
    pub precision: Precision,
    pub attention: AttentionMode,
    embed: Embedding,
    layers: Vec<LayerSlot>,
    norm: Tensor,
    lm_head: Linear,
    /// The device of the head and of resident GPU layers.
    device: Device,
    weight_bytes: u64,
    /// The streamed layers' host copies and GPU buffers, when a placement streams any.
    streamer: Option<Streamer>,
}

fn take(w: &mut HashMap<String, Weight>, name: &str) -> Result<Weight> {
    w.remove(name).ok_or_else(|| LabError::input(format!("weight {name} is missing")))
}

fn take_dense(w: &mut HashMap<String, Weight>, name: &str, dtype: DType) -> Result<Tensor> {
    Ok(take(w, name)?.dense()?.to_dtype(dtype)?)
}

impl Qwen2 {
    /// Builds the model from weights named as in the HF checkpoint (see `Qwen2Config::tensor_specs`).
    pub fn new(cfg: &Qwen2Config, precision: Precision, mut w: HashMap<String, Weight>, device: &Device) -> Result<Self> {
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
            let p = format!("model.layers.{l}");
            let mut lin = |name: &str, bias: bool| -> Result<Linear> {
                let b = if bias { Some(take_dense(&mut w, &format!("{p}.{name}.bias"), act)?) } else { None };
                Linear::new(take(&mut w, &format!("{p}.{name}.weight"))?, b)
            };
            layers.push(LayerSlot::Resident(Layer {
                q: lin("self_attn.q_proj", true)?,
                k: lin("self_attn.k_proj", true)?,
                v: lin("self_attn.v_proj", true)?,
                o: lin("self_attn.o_proj", false)?,
                gate: lin("mlp.gate_proj", false)?,
                up: lin("mlp.up_proj", false)?,
                down: lin("mlp.down_proj", false)?,
                ln1: take_dense(&mut w, &format!("{p}.input_layernorm.weight"), act)?,
                ln2: take_dense(&mut w, &format!("{p}.post_attention_layernorm.weight"), act)?,
                fused: None,
            }));
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
        })
    }

    /// Builds the model from weights already on their homes (see `weights::load_placed`): `Gpu`
    /// parts on `gpu`, the rest in host memory. CPU layers compute there; streamed layers go to
    /// a `Streamer` with `placement.slots` buffers on `gpu`. A tied head on the GPU is a copy of
    /// the host embedding table.
    pub fn new_placed(cfg: &Qwen2Config, precision: Precision, mut w: HashMap<String, Weight>, gpu: &Device, placement: &Placement) -> Result<Self> {
        if placement.layers.len() != cfg.num_hidden_layers {
            return Err(LabError::input(format!("a placement of {} layers for a model of {}", placement.layers.len(), cfg.num_hidden_layers)));
        }
        if cfg.tie_word_embeddings && placement.head == Home::Gpu && placement.embed != Home::Gpu {
            let table = w.get("model.embed_tokens.weight").ok_or_else(|| LabError::input("weight model.embed_tokens.weight is missing"))?;
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

    /// Whether every layer, the embedding and the head are resident on the GPU: what the static
    /// decoding step (`graph.rs`) needs.
    pub fn all_on_gpu(&self) -> bool {
        let gpu = |d: &Device| d.is_cuda();
        gpu(&self.device)
            && gpu(&self.embed.device())
            && !matches!(self.lm_head, Linear::Host(_))
            && self.layers.iter().all(|l| matches!(l, LayerSlot::Resident(layer) if gpu(layer.device()) && !layer.on_host()))
    }

    /// Whether `AttentionMode::Flash` runs its fused kernel for this model (every layer on a GPU
    /// of compute 8.0+, BF16 activations, a head size the kernel is built for); elsewhere it
    /// computes as `Bounded`.
    pub fn flash_runs(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = &self.device {
            return self.all_on_gpu() && self.act_dtype() == DType::BF16 && super::flash_attention::HEAD_DIMS.contains(&self.cfg.head_dim()) && super::flash_attention::supported(dev);
        }
        false
    }

    /// The same model with every dense weight a trainable `Var`, as a model left in training
    /// mode: candle then records each op's inputs, so an output keeps its whole forward graph
    /// alive. Tensors are converted one at a time (the peak is one tensor above the model);
    /// quantized weights stay as they are.
    pub fn into_trainable(self) -> Result<Self> {
        fn var(t: Tensor) -> Result<Tensor> {
            Ok(candle_core::Var::from_tensor(&t)?.as_tensor().clone())
        }
        fn lin(l: Linear) -> Result<Linear> {
            Ok(match l {
                Linear::Dense(d) => {
                    let (w, b) = (d.weight().clone(), d.bias().cloned());
                    drop(d);
                    Linear::Dense(candle_nn::Linear::new(var(w)?, b.map(var).transpose()?))
                }
                q => q,
            })
        }
        let Qwen2 { cfg, precision, attention, embed, layers, norm, lm_head, device, weight_bytes, streamer } = self;
        if streamer.is_some() {
            return Err(LabError::Unsupported("a model with streamed layers cannot be made trainable".into()));
        }
        // A tied head is the embedding table itself: one Var for both (two would be two copies
        // and two half gradients).
        let table_id = match &embed {
            Embedding::Dense(t) => Some(t.id()),
            _ => None,
        };
        let embed = match embed {
            Embedding::Dense(t) => Embedding::Dense(var(t)?),
            q => q,
        };
        let lm_head = match (lm_head, &embed) {
            (Linear::Dense(d), Embedding::Dense(table)) if Some(d.weight().id()) == table_id => {
                drop(d);
                Linear::Dense(candle_nn::Linear::new(table.clone(), None))
            }
            (l, _) => lin(l)?,
        };
        let mut out = Vec::with_capacity(layers.len());
        for slot in layers {
            let LayerSlot::Resident(l) = slot else { continue };
            out.push(LayerSlot::Resident(Layer {
                q: lin(l.q)?,
                k: lin(l.k)?,
                v: lin(l.v)?,
                o: lin(l.o)?,
                gate: lin(l.gate)?,
                up: lin(l.up)?,
                down: lin(l.down)?,
                ln1: var(l.ln1)?,
                ln2: var(l.ln2)?,
                fused: None,
            }));
        }
        Ok(Qwen2 { cfg, precision, attention, embed, layers: out, norm: var(norm)?, lm_head, device, weight_bytes, streamer: None })
    }

    /// Every trainable tensor once (a tied table once), in a fixed order: the embedding, each
    /// layer's (see `Layer::tensors`), the final norm, an untied head.
    pub fn vars(&self) -> Result<Vec<candle_core::Var>> {
        let mut out = Vec::new();
        let mut push = |t: &Tensor| -> Result<()> {
            if t.is_variable() && !out.iter().any(|v: &candle_core::Var| v.as_tensor().id() == t.id()) {
                out.push(candle_core::Var::from_tensor(t)?);
            }
            Ok(())
        };
        if let Embedding::Dense(t) = &self.embed {
            push(t)?;
        }
        for l in 0..self.layers.len() {
            for t in self.layer(l)?.tensors()? {
                push(&t)?;
            }
        }
        push(&self.norm)?;
        if let Linear::Dense(d) = &self.lm_head {
            push(d.weight())?;
        }
        Ok(out)
    }

    /// Stacks each dense device layer's q|k|v and gate|up into one product (a layer at a time, so
    /// one layer's projections are the most held twice). Returns how many layers it fused:
    /// quantized, CPU and streamed layers keep their products.
    pub fn fuse_projections(&mut self) -> Result<usize> {
        let mut n = 0;
        for slot in &mut self.layers {
            if let LayerSlot::Resident(layer) = slot {
                if layer.fused.is_none() && matches!(layer.q, Linear::Dense(_)) {
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
    pub(super) fn rope(&self, offset: usize, s: usize) -> Result<(Tensor, Tensor)> {
        let d = self.cfg.head_dim();
        let inv: Vec<f32> = (0..d / 2).map(|i| (1.0 / self.cfg.rope_theta.powf((2 * i) as f64 / d as f64)) as f32).collect();
        let inv = Tensor::from_vec(inv, (1, d / 2), &self.device)?;
        let pos = Tensor::arange(offset as u32, (offset + s) as u32, &self.device)?.to_dtype(DType::F32)?.reshape((s, 1))?;
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
        let rope = self.rope(offset, s)?;
        // The rotary table on the CPU too, in F32 as CPU layers compute, made once per pass when
        // some layer runs there.
        let mut host_rope = None;
        let mut x = self.embed(ids)?;
        if let Some(st) = &self.streamer {
            st.start_pass()?;
        }
        for (l, slot) in self.layers.iter().enumerate() {
            let layer = match slot {
                LayerSlot::Resident(layer) => layer,
                LayerSlot::Streamed => self.streamer()?.acquire(l)?,
            };
            let dev = layer.device();
            if !x.device().same_device(dev) {
                let t = std::time::Instant::now();
                x = x.to_device(dev)?;
                if s == 1 {
                    super::profile::crossing(t);
                }
            }
            let r = if dev.same_device(&self.device) {
                &rope
            } else {
                if host_rope.is_none() {
                    host_rope = Some((rope.0.to_device(dev)?.to_dtype(DType::F32)?, rope.1.to_device(dev)?.to_dtype(DType::F32)?));
                }
                host_rope.as_ref().unwrap_or(&rope)
            };
            let t = std::time::Instant::now();
            x = layer.forward(x, l, cfg, r, cache, offset, self.attention)?;
            if s == 1 && layer.on_host() {
                super::profile::cpu_layer(t);
            }
            if let LayerSlot::Streamed = slot {
                self.streamer()?.release()?;
            }
        }
        let x = if x.device().same_device(&self.device) {
            x
        } else {
            let t = std::time::Instant::now();
            let x = x.to_device(&self.device)?;
            if s == 1 {
                super::profile::crossing(t);
            }
            x
        };
        if s == 1 {
            super::profile::step();
        }
        cache.advance(s);
        self.head(&x, logits)
    }

    /// The greedy next ids ([batch, 1]) after `ids` ([batch, 1]) at the position `pos` holds
    /// ([1] u32, in device memory), through `Layer::decode_static`: `tables` holds the rotary
    /// table and the mask's inputs for the cache's capacity.
    pub(super) fn decode_static(&self, ids: &Tensor, pos: &Tensor, tables: &super::graph::Tables, cache: &KvCache) -> Result<Tensor> {
        let cfg = &self.cfg;
        let b = ids.dim(0)?;
        let step = StepInputs::new(tables, pos, b, cfg);
        let mut x = self.embed(ids)?;
        for (l, slot_) in self.layers.iter().enumerate() {
            let LayerSlot::Resident(layer) = slot_ else {
                return Err(LabError::Unsupported("graph decoding needs every layer resident on the GPU".into()));
            };
            let (kc, vc) = cache.full(l)?;
            x = layer.decode_static(x, cfg, &step, &kc, &vc)?;
        }
        // The head of `head(.., Logits::Last)` for one position, through the step's kernels.
        let logits = match normed_step(parts([&self.lm_head]).as_deref(), &x, &self.norm, cfg.rms_norm_eps, false, &step)? {
            StepOut::Product(y) => y,
            StepOut::Normed(h) => self.lm_head.forward(&h)?,
        };
        step.argmax(&logits)
    }

    /// The token embedding of `ids` ([batch, s]) in the activation dtype.
    pub(super) fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.embed.forward(&ids.to_device(&self.embed.device())?)?.to_dtype(self.act_dtype())?)
    }

    /// The dense embedding table (a quantized one has no gradient).
    pub(super) fn embed_table(&self) -> Option<Tensor> {
        match &self.embed {
            Embedding::Dense(t) => Some(t.clone()),
            Embedding::Quant(_) => None,
        }
    }

    /// A resident layer.
    pub(super) fn layer(&self, l: usize) -> Result<&Layer> {
        match self.layers.get(l) {
            Some(LayerSlot::Resident(layer)) => Ok(layer),
            _ => Err(LabError::other(format!("layer {l} is not resident"))),
        }
    }

    /// The final norm and the head over the last layer's output `x` ([batch, s, hidden]): the
    /// last position's logits, or every position's in pieces of at most 2^31 elements (candle's
    /// kernels index in 32 bits), each [batch, rows, vocab].
    pub(super) fn head(&self, x: &Tensor, logits: Logits) -> Result<Vec<Tensor>> {
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

impl Qwen2 {
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
