//! The lab's Qwen2 forward pass: one implementation for every precision. Dense weights go through
//! candle_nn::Linear, GGUF blocks through candle's QMatMul. The KV cache is preallocated and
//! written in place, attention is bounded (see attention.rs), RoPE angles are computed in F32, and
//! a prompt may be fed in any split of prefix and continuation.

use super::attention::{attend, check_elems, AttentionMode};
use super::config::Qwen2Config;
use super::kv_cache::{CacheKind, KvCache};
use super::precision::Precision;
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
            Self::Quant(q, bias) => {
                let y = q.forward(x)?;
                Ok(match bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                })
            }
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
struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
    ln1: Tensor,
    ln2: Tensor,
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
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    device: Device,
    weight_bytes: u64,
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
            layers.push(Layer {
                q: lin("self_attn.q_proj", true)?,
                k: lin("self_attn.k_proj", true)?,
                v: lin("self_attn.v_proj", true)?,
                o: lin("self_attn.o_proj", false)?,
                gate: lin("mlp.gate_proj", false)?,
                up: lin("mlp.up_proj", false)?,
                down: lin("mlp.down_proj", false)?,
                ln1: take_dense(&mut w, &format!("{p}.input_layernorm.weight"), act)?,
                ln2: take_dense(&mut w, &format!("{p}.post_attention_layernorm.weight"), act)?,
            });
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
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
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
        let Qwen2 { cfg, precision, attention, embed, layers, norm, lm_head, device, weight_bytes } = self;
        let embed = match embed {
            Embedding::Dense(t) => Embedding::Dense(var(t)?),
            q => q,
        };
        let lm_head = lin(lm_head)?;
        let mut out = Vec::with_capacity(layers.len());
        for l in layers {
            out.push(Layer {
                q: lin(l.q)?,
                k: lin(l.k)?,
                v: lin(l.v)?,
                o: lin(l.o)?,
                gate: lin(l.gate)?,
                up: lin(l.up)?,
                down: lin(l.down)?,
                ln1: var(l.ln1)?,
                ln2: var(l.ln2)?,
            });
        }
        Ok(Qwen2 { cfg, precision, attention, embed, layers: out, norm: var(norm)?, lm_head, device, weight_bytes })
    }

    /// Bytes of all weight tensors as loaded (a tied table counted once).
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub fn act_dtype(&self) -> DType {
        self.precision.act_dtype()
    }

    /// A preallocated cache for `batch` sequences of up to `max_seq` tokens, in the activation dtype.
    pub fn new_cache(&self, batch: usize, max_seq: usize) -> Result<KvCache> {
        KvCache::new(&self.cfg, batch, max_seq, self.act_dtype(), &self.device)
    }

    pub fn new_cache_of(&self, kind: CacheKind, batch: usize, max_seq: usize) -> Result<KvCache> {
        KvCache::with_kind(kind, &self.cfg, batch, max_seq, self.act_dtype(), &self.device)
    }

    /// cos/sin for positions offset..offset+s: angles in F32 (BF16 positions above 256 round),
    /// then cast to the activation dtype as transformers does.
    fn rope(&self, offset: usize, s: usize) -> Result<(Tensor, Tensor)> {
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
        let (heads, kv_heads, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        check_elems("the MLP activation", b * s * cfg.intermediate_size)?;
        let offset = cache.len();
        let (cos, sin) = self.rope(offset, s)?;
        let mut x = self.embed.forward(&ids.to_device(&self.device)?)?.to_dtype(self.act_dtype())?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.ln1, cfg.rms_norm_eps as f32)?;
            let q = layer.q.forward(&h)?.reshape((b, s, heads, d))?.transpose(1, 2)?.contiguous()?;
            let k = layer.k.forward(&h)?.reshape((b, s, kv_heads, d))?.transpose(1, 2)?.contiguous()?;
            let v = layer.v.forward(&h)?.reshape((b, s, kv_heads, d))?.transpose(1, 2)?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            cache.write(l, &k, &v)?;
            let (kc, vc) = cache.view(l, offset + s)?;
            let a = attend(&q, &kc, &vc, offset, self.attention)?;
            let a = a.transpose(1, 2)?.reshape((b, s, heads * d))?;
            x = (x + layer.o.forward(&a)?)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ln2, cfg.rms_norm_eps as f32)?;
            let m = (candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?;
            x = (x + layer.down.forward(&m)?)?;
        }
        cache.advance(s);
        let x = candle_nn::ops::rms_norm(&x, &self.norm, cfg.rms_norm_eps as f32)?;
        match logits {
            Logits::Last => Ok(vec![self.lm_head.forward(&x.narrow(1, s - 1, 1)?.contiguous()?)?]),
            Logits::All => {
                let rows = (i32::MAX as usize / (b * cfg.vocab_size)).max(1);
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

/// The logits of the last position of a forward's output, as a [batch, vocab] F32 tensor.
pub fn last_logits(pieces: &[Tensor]) -> Result<Tensor> {
    let last = pieces.last().ok_or_else(|| LabError::other("forward returned no logits"))?;
    let rows = last.dim(1)?;
    Ok(last.narrow(1, rows - 1, 1)?.squeeze(1)?.to_dtype(DType::F32)?)
}
