//! One decoder layer, of whichever family the config names: attention and an MLP (or a mixture of
//! experts, `mixture.rs`) over linear layers of dense or quantized weights, the parts its family
//! has (q/k/v biases, q/k norms), its forward pass (prefill and cached decoding), and moving or
//! stacking its weights. Its static decoding step is `static_step.rs`; the model (`model.rs`)
//! holds the layers.

use crate::error::{LabError, Result};
use crate::model::config::DecoderConfig;
use crate::model::decoder::mixture::Mixture;
use crate::model::host::linear::HostLinear;
use crate::model::layers::attention::{self, attend, AttentionMode};
use crate::model::layers::comm::RankComm;
use crate::model::layers::elementwise::{self, add, mul, silu};
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use crate::model::load::weights::{take, take_dense, Weight};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(super) q: Linear,
    pub(super) k: Linear,
    pub(super) v: Linear,
    pub(super) o: Linear,
    pub(super) mlp: Mlp,
    pub(super) ln1: Tensor,
    pub(super) ln2: Tensor,
    /// Qwen3's per-head RMS norms of q and k, before RoPE (one weight of head_dim each).
    pub(super) qk_norm: Option<(Tensor, Tensor)>,
    /// q|k|v and gate|up as one product each (CPU layers: four rayon calls per layer, not seven;
    /// GPU layers: fewer launches per token); q, k, v, gate, up are views into these.
    pub(super) fused: Option<(Linear, Linear)>,
}

/// What every layer of one forward pass shares: the config, the positions' rotary tables on the
/// layer's device, the positions the cache held before the pass, and the attention's kind.
#[derive(Clone, Copy)]
pub(crate) struct Pass<'a> {
    pub cfg: &'a DecoderConfig,
    pub rope: &'a (Tensor, Tensor),
    pub offset: usize,
    pub mode: AttentionMode,
}

/// The feed-forward part: one SwiGLU MLP, or a mixture of experts.
#[derive(Debug, Clone)]
pub(crate) enum Mlp {
    Dense { gate: Linear, up: Linear, down: Linear },
    Mixture(Mixture),
}

impl Layer {
    /// Layer `l` from weights named as in the HF checkpoint, with the parts its family has: q, k,
    /// v biases (Qwen2), q and k norms (Qwen3); vectors in the activation dtype `act`.
    pub(crate) fn new(cfg: &DecoderConfig, l: usize, w: &mut HashMap<String, Weight>, act: DType) -> Result<Self> {
        cfg.computed()?;
        let p = format!("model.layers.{l}");
        let family = cfg.model_type;
        let mut lin = |name: &str, bias: bool| -> Result<Linear> {
            let b = if bias { Some(take_dense(w, &format!("{p}.{name}.bias"), act)?) } else { None };
            Linear::new(take(w, &format!("{p}.{name}.weight"))?, b)
        };
        let (q, k, v) = (
            lin("self_attn.q_proj", family.qkv_bias())?,
            lin("self_attn.k_proj", family.qkv_bias())?,
            lin("self_attn.v_proj", family.qkv_bias())?,
        );
        let o = lin("self_attn.o_proj", false)?;
        let mlp = if family.is_moe() {
            Mlp::Mixture(Mixture::new(cfg, l, w)?)
        } else {
            Mlp::Dense {
                gate: lin("mlp.gate_proj", false)?,
                up: lin("mlp.up_proj", false)?,
                down: lin("mlp.down_proj", false)?,
            }
        };
        let qk_norm = if family.qk_norm() {
            Some((
                take_dense(w, &format!("{p}.self_attn.q_norm.weight"), act)?,
                take_dense(w, &format!("{p}.self_attn.k_norm.weight"), act)?,
            ))
        } else {
            None
        };
        Ok(Self {
            q,
            k,
            v,
            o,
            mlp,
            ln1: take_dense(w, &format!("{p}.input_layernorm.weight"), act)?,
            ln2: take_dense(w, &format!("{p}.post_attention_layernorm.weight"), act)?,
            qk_norm,
            fused: None,
        })
    }

    /// Where its inputs must be: the device of its weights.
    pub(crate) fn device(&self) -> &Device {
        self.ln1.device()
    }

    /// q, k, v, o, then the MLP's products (the router and each expert's for a mixture).
    fn linears(&self) -> Vec<&Linear> {
        let mut out = vec![&self.q, &self.k, &self.v, &self.o];
        match &self.mlp {
            Mlp::Dense { gate, up, down } => out.extend([gate, up, down]),
            Mlp::Mixture(m) => out.extend(m.linears()),
        }
        out
    }

    /// The dense MLP's gate, up and down, or a line saying a mixture runs only the forward pass.
    pub(super) fn dense_mlp(&self) -> Result<(&Linear, &Linear, &Linear)> {
        match &self.mlp {
            Mlp::Dense { gate, up, down } => Ok((gate, up, down)),
            Mlp::Mixture(_) => Err(LabError::Unsupported(
                "a mixture of experts runs the lab's forward pass only (prefill and the decoding loop on one device: no CPU layers, static step, training or tensor parallelism)".into(),
            )),
        }
    }

    /// Its tensors in a fixed order (what a streamed layer copies): q, k, v weights and biases
    /// where the family has them, o, gate, up, down, the two norms, q and k's norms where set.
    pub(crate) fn tensors(&self) -> Result<Vec<Tensor>> {
        let mut out = Vec::new();
        for lin in self.linears() {
            let (w, b) = lin.dense_parts()?;
            out.push(w);
            out.extend(b);
        }
        out.extend([self.ln1.clone(), self.ln2.clone()]);
        if let Some((qn, kn)) = &self.qk_norm {
            out.extend([qn.clone(), kn.clone()]);
        }
        Ok(out)
    }

    /// A dense layer of this one's parts from `t`, in the order of `tensors` (a rank's row-parallel
    /// products stay row-parallel).
    pub(crate) fn with_tensors(&self, t: Vec<Tensor>) -> Result<Self> {
        let mut t = t.into_iter();
        let mut next = || t.next().ok_or_else(|| LabError::other("a layer's tensors are fewer than its parts"));
        let mut lins = Vec::new();
        for lin in self.linears() {
            let w = next()?;
            let b = if lin.dense_parts()?.1.is_some() { Some(next()?) } else { None };
            let dense = Linear::Dense(candle_nn::Linear::new(w, b));
            lins.push(match lin {
                Linear::RowParallel(_, comm) => dense.row_parallel(comm.clone()),
                _ => dense,
            });
        }
        let (ln1, ln2) = (next()?, next()?);
        let qk_norm = match self.qk_norm {
            Some(_) => Some((next()?, next()?)),
            None => None,
        };
        let mut lins = lins.into_iter();
        let mut lin = || lins.next().ok_or_else(|| LabError::other("a layer's products are fewer than its parts"));
        let (q, k, v, o) = (lin()?, lin()?, lin()?, lin()?);
        let mlp = match &self.mlp {
            Mlp::Dense { .. } => Mlp::Dense { gate: lin()?, up: lin()?, down: lin()? },
            Mlp::Mixture(m) => Mlp::Mixture(m.with_linears(&mut lins)?),
        };
        Ok(Self { q, k, v, o, mlp, ln1, ln2, qk_norm, fused: None })
    }

    /// The same weights with no backward recorded (views of the same storage): what a
    /// checkpointed training pass runs forward, keeping no graph.
    pub(crate) fn detached(&self) -> Result<Self> {
        self.with_tensors(self.tensors()?.iter().map(Tensor::detach).collect())
    }

    /// q (or k, `is_k`) as [.., d] through its per-head norm where the family has one, consuming it.
    pub(super) fn head_norm(&self, t: Tensor, is_k: bool, eps: f64, mode: AttentionMode) -> Result<Tensor> {
        let Some((qn, kn)) = &self.qk_norm else { return Ok(t) };
        let w = if is_k { kn } else { qn };
        norm(&t, &w.to_dtype(t.dtype())?, eps, mode)
    }

    /// The same layer computed on the CPU from host memory, q|k|v and gate|up fused.
    pub(super) fn to_host(&self) -> Result<Self> {
        let cpu = Device::Cpu;
        let host = |w: Tensor, b: Option<Tensor>| -> Result<Linear> { Ok(Linear::Host(HostLinear::new(w, b)?)) };
        let (gate, up, down) = self.dense_mlp()?;
        let (qkv, [q, k, v]) = stack([&self.q, &self.k, &self.v], &cpu, host)?;
        let (gate_up, [gate, up]) = stack([gate, up], &cpu, host)?;
        Ok(Self {
            q,
            k,
            v,
            o: self.o.to_host()?,
            mlp: Mlp::Dense { gate, up, down: down.to_host()? },
            // In F32, as the layer computes (see `forward`).
            ln1: self.ln1.to_device(&cpu)?.to_dtype(DType::F32)?,
            ln2: self.ln2.to_device(&cpu)?.to_dtype(DType::F32)?,
            qk_norm: match &self.qk_norm {
                Some((qn, kn)) => {
                    Some((qn.to_device(&cpu)?.to_dtype(DType::F32)?, kn.to_device(&cpu)?.to_dtype(DType::F32)?))
                }
                None => None,
            },
            fused: Some((qkv, gate_up)),
        })
    }

    /// The same layer with q|k|v and gate|up as one product each on its own device (two matrix
    /// products in place of five per token); q, k, v, gate, up become views of them.
    pub(super) fn fused_on_device(&self) -> Result<Self> {
        let dev = self.device().clone();
        let dense =
            |w: Tensor, b: Option<Tensor>| -> Result<Linear> { Ok(Linear::Dense(candle_nn::Linear::new(w, b))) };
        let (gate, up, down) = self.dense_mlp()?;
        let (qkv, [q, k, v]) = stack([&self.q, &self.k, &self.v], &dev, dense)?;
        let (gate_up, [gate, up]) = stack([gate, up], &dev, dense)?;
        Ok(Self {
            q,
            k,
            v,
            o: self.o.clone(),
            mlp: Mlp::Dense { gate, up, down: down.clone() },
            ln1: self.ln1.clone(),
            ln2: self.ln2.clone(),
            qk_norm: self.qk_norm.clone(),
            fused: Some((qkv, gate_up)),
        })
    }

    /// silu(gate(h)) × up(h), through the stacked gate|up product when `stacked`.
    pub(super) fn gated(&self, h: &Tensor, stacked: bool, i: usize) -> Result<Tensor> {
        Ok(match self.fused.as_ref().filter(|_| stacked) {
            Some((_, gate_up)) => {
                let y = gate_up.forward(h)?;
                mul(silu(&y.narrow(2, 0, i)?)?, y.narrow(2, i, i)?)?
            }
            None => {
                let (gate, up, _) = self.dense_mlp()?;
                mul(silu(&gate.forward(h)?)?, up.forward(h)?)?
            }
        })
    }

    /// Whether the layer computes on the CPU (in F32).
    pub(super) fn on_host(&self) -> bool {
        matches!(self.q, Linear::Host(_))
    }

    /// One decoder layer. `x` is taken by value so the layer's input is freed once the attention
    /// residual is added: what stays alive through the MLP is what `estimate::transient` counts
    /// (the residual, both norms' outputs, q before and after rotary, k before and after rotary,
    /// v's projection, the attention output and its reshaped copy), as stages 1–2 measured it.
    pub(crate) fn forward(&self, x: Tensor, l: usize, pass: &Pass, cache: &mut KvCache) -> Result<Tensor> {
        let Pass { cfg, rope, offset, mode } = *pass;
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
        let heads_first = |t: Tensor, n: usize| elementwise::heads_first(t, n, d);
        // A GPU layer takes its stacked products when decoding (fewer launches per token) and its
        // separate views when prefilling, so every moment of a prefill holds what stages 1-2
        // measured (the stacked product beside its copies would be a new, larger moment).
        let fused = self.fused.as_ref().filter(|_| self.on_host() || s == 1);
        let (q, k, v) = match fused {
            Some((qkv, _)) => {
                let y = qkv.forward(&h)?;
                let (nq, nk) = (heads * d, kv_heads * d);
                (
                    heads_first(y.narrow(2, 0, nq)?, heads)?,
                    heads_first(y.narrow(2, nq, nk)?, kv_heads)?,
                    y.narrow(2, nq + nk, nk)?,
                )
            }
            None => (
                heads_first(self.q.forward(&h)?, heads)?,
                heads_first(self.k.forward(&h)?, kv_heads)?,
                self.v.forward(&h)?,
            ),
        };
        let v = v.reshape((b, s, kv_heads, d))?.transpose(1, 2)?;
        let (q, k) =
            (self.head_norm(q, false, cfg.rms_norm_eps, mode)?, self.head_norm(k, true, cfg.rms_norm_eps, mode)?);
        let (q, k) = if mode == AttentionMode::Differentiable {
            (candle_nn::rotary_emb::rope_slow(&q, &cos, &sin)?, candle_nn::rotary_emb::rope_slow(&k, &cos, &sin)?)
        } else {
            (attention::rope(&q, &cos, &sin)?, attention::rope(&k, &cos, &sin)?)
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
        let x = add(x, self.o.forward(&a)?)?;
        let h = norm(&x, &self.ln2.to_dtype(work)?, cfg.rms_norm_eps, mode)?;
        match &self.mlp {
            Mlp::Dense { down, .. } => {
                let m = self.gated(&h, fused.is_some(), cfg.intermediate_size)?;
                Ok(add(x, down.forward(&m)?)?.to_dtype(act)?)
            }
            Mlp::Mixture(mix) => Ok(add(x, mix.forward(&h)?)?.to_dtype(act)?),
        }
    }

    /// This layer as a tensor-parallel rank's: o and down become row-parallel products summed
    /// across `comm`'s group (the layer must hold the rank's shard). A mixture is refused.
    pub(super) fn into_rank(self, comm: &RankComm) -> Result<Self> {
        let Mlp::Dense { gate, up, down } = self.mlp else {
            return Err(LabError::Unsupported("tensor parallelism of a mixture of experts is not built".into()));
        };
        Ok(Self {
            o: self.o.row_parallel(comm.clone()),
            mlp: Mlp::Dense { gate, up, down: down.row_parallel(comm.clone()) },
            ..self
        })
    }

    /// Whether a CUDA graph can record its products (a rank's sums included).
    pub(super) fn capturable(&self) -> bool {
        self.linears().iter().all(|l| l.capturable())
    }

    /// Its host products' (nanoseconds, weight bytes) of decoding since the last call.
    pub(super) fn take_host_time(&self) -> (u64, u64) {
        let fused = self.fused.iter().flat_map(|(qkv, gate_up)| [qkv, gate_up]);
        self.linears().into_iter().chain(fused).map(Linear::take_host_time).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// The most tokens one expert took since the last call (0 for a dense layer).
    pub(super) fn take_busiest(&self) -> usize {
        match &self.mlp {
            Mlp::Mixture(m) => m.take_busiest(),
            Mlp::Dense { .. } => 0,
        }
    }
}

/// `AttentionMode::Flash`'s kernel where it runs (CUDA, BF16, its head sizes): [b, s, heads · d].
pub(super) fn flash_attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    offset: usize,
    mode: AttentionMode,
) -> Result<Option<Tensor>> {
    #[cfg(feature = "cuda")]
    if mode == AttentionMode::Flash {
        return crate::model::kernels::flash_attention::attend(q, k, v, offset);
    }
    let _ = (q, k, v, offset, mode);
    Ok(None)
}

/// `parts`' weights stacked by rows on `device` (biases too, zeros for a part without one), made
/// into one linear by `make`, and each part as a view of its rows.
pub(super) fn stack<const N: usize>(
    parts: [&Linear; N],
    device: &Device,
    make: impl Fn(Tensor, Option<Tensor>) -> Result<Linear>,
) -> Result<(Linear, [Linear; N])> {
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
pub(super) fn into_dtype(x: Tensor, dtype: DType) -> Result<Tensor> {
    Ok(if x.dtype() == dtype { x } else { x.to_dtype(dtype)? })
}

/// RMS norm: a fused kernel (the lab's or candle's, the same bits), or (for a training step) the
/// composed ops candle has a backward for.
pub(super) fn norm(x: &Tensor, w: &Tensor, eps: f64, mode: AttentionMode) -> Result<Tensor> {
    Ok(if mode == AttentionMode::Differentiable {
        candle_nn::ops::rms_norm_slow(x, w, eps as f32)?
    } else {
        elementwise::rms_norm(x, w, eps as f32)?
    })
}
