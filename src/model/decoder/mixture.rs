//! A mixture of experts in place of the MLP (Qwen3-MoE, Mixtral): the router's softmax picks
//! `active` experts per token, each expert is a SwiGLU MLP of its own width run on the tokens
//! routed to it, and its output is added back weighted by the router's probability (renormalised
//! over the picked ones where the family does). One expert at a time, as transformers' and
//! candle-transformers' reference blocks compute it; `estimate::transient` counts what this holds.

use crate::error::{LabError, Result};
use crate::model::config::{DecoderConfig, Family};
use crate::model::layers::elementwise::{mul, silu};
use crate::model::layers::linear::Linear;
use crate::model::load::weights::{take, Weight};
use candle_core::{DType, Tensor};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone)]
pub(crate) struct Expert {
    pub(super) gate: Linear,
    pub(super) up: Linear,
    pub(super) down: Linear,
}

#[derive(Debug, Clone)]
pub(crate) struct Mixture {
    pub(super) router: Linear,
    pub(super) experts: Vec<Expert>,
    active: usize,
    renormalize: bool,
    /// The most tokens one expert took since the last `take_busiest` (the prefill's peak is at
    /// that expert: `estimate::transient::phases_routed`).
    busiest: Busiest,
}

/// A count that starts afresh in a copy.
#[derive(Debug, Default)]
struct Busiest(AtomicUsize);

impl Clone for Busiest {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl Mixture {
    /// The busiest expert's tokens since the last call, and a fresh count.
    pub(super) fn take_busiest(&self) -> usize {
        self.busiest.0.swap(0, Ordering::Relaxed)
    }

    /// Layer `l`'s router and experts, named as the family's checkpoints name them.
    pub(super) fn new(cfg: &DecoderConfig, l: usize, w: &mut HashMap<String, Weight>) -> Result<Self> {
        let e = cfg.experts().ok_or_else(|| LabError::other("a mixture without experts in its config"))?;
        let (block, names) = match cfg.model_type {
            Family::Mixtral => ("block_sparse_moe", ["w1", "w3", "w2"]),
            _ => ("mlp", ["gate_proj", "up_proj", "down_proj"]),
        };
        let p = format!("model.layers.{l}.{block}");
        let mut lin = |name: String| Linear::new(take(w, &format!("{name}.weight"))?, None);
        let router = lin(format!("{p}.gate"))?;
        let experts = (0..e.experts)
            .map(|x| {
                let [g, u, d] = names.map(|n| format!("{p}.experts.{x}.{n}"));
                Ok(Expert { gate: lin(g)?, up: lin(u)?, down: lin(d)? })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { router, experts, active: e.active, renormalize: e.renormalize, busiest: Busiest::default() })
    }

    /// Its products in a fixed order: the router, then each expert's gate, up, down.
    pub(super) fn linears(&self) -> Vec<&Linear> {
        let mut out = vec![&self.router];
        for e in &self.experts {
            out.extend([&e.gate, &e.up, &e.down]);
        }
        out
    }

    /// The same mixture over `lins`, in the order of `linears`.
    pub(super) fn with_linears(&self, lins: &mut impl Iterator<Item = Linear>) -> Result<Self> {
        let mut next = || lins.next().ok_or_else(|| LabError::other("a mixture's tensors are fewer than its parts"));
        let router = next()?;
        let experts = self
            .experts
            .iter()
            .map(|_| Ok(Expert { gate: next()?, up: next()?, down: next()? }))
            .collect::<Result<_>>()?;
        Ok(Self { router, experts, active: self.active, renormalize: self.renormalize, busiest: Busiest::default() })
    }

    /// The mixture over `h` ([b, s, hidden]). Routing is read on the host (a few bytes a token);
    /// each expert's tokens are gathered, run, weighted and added into the output.
    pub(super) fn forward(&self, h: &Tensor) -> Result<Tensor> {
        let (b, s, hidden) = h.dims3()?;
        let x = h.reshape((b * s, hidden))?;
        // transformers takes the softmax in F32 and weights the experts' outputs in the
        // activation dtype.
        let probs = {
            let logits = self.router.forward(&x)?;
            candle_nn::ops::softmax_last_dim(&logits.to_dtype(DType::F32)?)?.to_vec2::<f32>()?
        };
        let (rows, weights) = route(&probs, self.active, self.renormalize);
        drop(probs);
        let busiest = rows.iter().map(Vec::len).max().unwrap_or(0);
        self.busiest.0.fetch_max(busiest, Ordering::Relaxed);
        let mut out = x.zeros_like()?;
        for ((expert, rows), weights) in self.experts.iter().zip(&rows).zip(&weights) {
            if rows.is_empty() {
                continue;
            }
            let idx = Tensor::new(rows.as_slice(), x.device())?;
            let wt = Tensor::new(weights.as_slice(), x.device())?.reshape((rows.len(), 1))?.to_dtype(x.dtype())?;
            let xs = x.index_select(&idx, 0)?;
            // Each statement's temporaries live to its end: gate, silu(gate), up and the product;
            // then the product, the down projection and its weighted copy; then that copy and the
            // new sum beside the old.
            let m = mul(silu(&expert.gate.forward(&xs)?)?, expert.up.forward(&xs)?)?;
            let y = expert.down.forward(&m)?.broadcast_mul(&wt)?;
            drop(m);
            out = out.index_add(&idx, &y, 0)?;
        }
        Ok(out.reshape((b, s, hidden))?)
    }
}

/// Each expert's rows and their weights: per token the `k` most probable experts (the lower
/// index first among equals), weighted by their probability, renormalised over the `k` when
/// `renormalize`.
pub(super) fn route(probs: &[Vec<f32>], k: usize, renormalize: bool) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let n = probs.first().map_or(0, Vec::len);
    let (mut rows, mut weights) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for (r, p) in probs.iter().enumerate() {
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let top = &order[..k.min(order.len())];
        let sum: f32 = top.iter().map(|&e| p[e]).sum();
        for &e in top {
            rows[e].push(r as u32);
            weights[e].push(if renormalize { p[e] / sum } else { p[e] });
        }
    }
    (rows, weights)
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn route_picks_the_k_most_probable_and_renormalises() {
        let probs = vec![vec![0.1, 0.6, 0.3], vec![0.5, 0.2, 0.3]];
        let (rows, w) = route(&probs, 2, true);
        assert_eq!(rows, vec![vec![1], vec![0], vec![0, 1]]);
        assert!((w[1][0] - 0.6 / 0.9).abs() < 1e-6 && (w[2][0] - 0.3 / 0.9).abs() < 1e-6);
        assert!((w[0][0] - 0.5 / 0.8).abs() < 1e-6 && (w[2][1] - 0.3 / 0.8).abs() < 1e-6);
        let (_, raw) = route(&probs, 2, false);
        assert_eq!(raw[1], vec![0.6]);
    }
}
