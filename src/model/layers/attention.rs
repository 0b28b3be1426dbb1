//! Scaled dot-product attention with a causal mask, in two forms:
//! - `Bounded`: grouped-query attention without copying K/V (the query heads that share a K/V
//!   head are folded into the row dimension), computed in query chunks so the score matrix held
//!   at any time stays under a byte budget; only the causal corner of each chunk is masked.
//! - `Naive`: what stock candle-transformers' Qwen2 does: repeat K/V for every query head and
//!   materialise the full [heads, s, t] score matrix, in the activation dtype.
//! - `Flash`: no score matrix in memory at all, one kernel (`kernels/flash_attention.cu`, CUDA and
//!   BF16); where that kernel does not run, `Bounded`.

use crate::error::{LabError, Result};
use candle_core::Tensor;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum AttentionMode {
    /// Query chunks whose scores (activation dtype) stay under `budget` bytes.
    Bounded {
        budget: usize,
    },
    Naive,
    /// The lab's fused kernel where it runs (`Qwen2::flash_runs`), else `Bounded` (default budget).
    Flash,
    /// `Naive` through ops that record their backward pass (candle's fused softmax, RMS norm
    /// and rotary kernels do not): what a training step runs.
    Differentiable,
}

impl Default for AttentionMode {
    fn default() -> Self {
        Self::Bounded { budget: 256 << 20 }
    }
}

impl AttentionMode {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "bounded" | "chunked" => Ok(Self::default()),
            "naive" | "full" => Ok(Self::Naive),
            "flash" => Ok(Self::Flash),
            _ => Err(LabError::input(format!("unknown attention `{s}`: use bounded, naive or flash"))),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Bounded { .. } => "bounded",
            Self::Naive => "naive",
            Self::Flash => "flash",
            Self::Differentiable => "differentiable",
        }
    }
}

/// candle's kernels count elements in 32 bits: refuse a tensor they would index past.
pub fn check_elems(what: &str, elems: usize) -> Result<()> {
    if elems > i32::MAX as usize {
        return Err(LabError::Unsupported(format!(
            "{what} would have {elems} elements, more than candle's 32-bit kernel indexing allows (2^31 - 1)"
        )));
    }
    Ok(())
}

/// A [rows, t] boolean mask (1 = masked) for query positions `first..first+rows`.
fn causal_mask(first: usize, rows: usize, t: usize, device: &candle_core::Device) -> Result<Tensor> {
    let q = Tensor::arange(first as u32, (first + rows) as u32, device)?.reshape((rows, 1))?;
    let k = Tensor::arange(0u32, t as u32, device)?.reshape((1, t))?;
    Ok(k.broadcast_gt(&q)?)
}

fn masked_fill_neg_inf(scores: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let neg =
        Tensor::new(f32::NEG_INFINITY, scores.device())?.to_dtype(scores.dtype())?.broadcast_as(scores.shape())?;
    Ok(mask.broadcast_as(scores.shape())?.where_cond(&neg, scores)?)
}

/// q: [b, heads, s, d]; k, v: [b, kv_heads, t, d] with t = offset + s (the cache up to now).
/// Returns [b, heads, s, d].
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize, mode: AttentionMode) -> Result<Tensor> {
    match mode {
        AttentionMode::Bounded { budget } => bounded(q, k, v, offset, budget),
        AttentionMode::Flash => attend(q, k, v, offset, AttentionMode::default()),
        AttentionMode::Naive => naive(q, k, v, offset, false),
        AttentionMode::Differentiable => naive(q, k, v, offset, true),
    }
}

fn bounded(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize, budget: usize) -> Result<Tensor> {
    let (b, heads, s, d) = q.dims4()?;
    let kv_heads = k.dims()[1];
    let group = heads / kv_heads;
    let scale = 1.0 / (d as f64).sqrt();
    let t_all = offset + s;
    let row_bytes = b * heads * t_all * q.dtype().size_in_bytes();
    let chunk = (budget / row_bytes.max(1)).clamp(1, s);
    let mut outs = Vec::with_capacity(s.div_ceil(chunk));
    let mut s0 = 0;
    while s0 < s {
        let c = chunk.min(s - s0);
        // Keys beyond the chunk's last position are all masked: leave them out.
        let t = offset + s0 + c;
        check_elems("an attention score chunk", b * heads * c * t)?;
        // Scale the small query chunk rather than the large score matrix.
        let qc = (q.narrow(2, s0, c)?.contiguous()? * scale)?.reshape((b, kv_heads, group * c, d))?;
        let kc = k.narrow(2, 0, t)?;
        let vc = v.narrow(2, 0, t)?;
        let scores = qc.matmul(&kc.t()?)?;
        if c > 1 {
            // Only the last c keys can lie after a query of this chunk: mask that c × c corner in
            // place instead of the whole row.
            let scores5 = scores.reshape((b, kv_heads, group, c, t))?;
            let corner = scores5.narrow(4, t - c, c)?;
            let mask = causal_mask(0, c, c, q.device())?;
            scores5.slice_set(&masked_fill_neg_inf(&corner, &mask)?, 4, t - c)?;
        }
        // candle's softmax accumulates in F32 for half types, as transformers' eager attention.
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = probs.matmul(&vc.contiguous_if_needed()?)?;
        outs.push(out.reshape((b, heads, c, d))?);
        s0 += c;
    }
    if outs.len() == 1 {
        return Ok(outs.remove(0));
    }
    Ok(Tensor::cat(&outs, 2)?)
}

/// Each KV head repeated for the `group` query heads that share it: (b, kv, t, d) → (b, kv·group, t, d).
fn repeat_kv(x: Tensor, group: usize) -> Result<Tensor> {
    if group == 1 {
        return Ok(x);
    }
    let (b, kv, t, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?.expand((b, kv, group, t, d))?.reshape((b, kv * group, t, d))?)
}

fn naive(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize, differentiable: bool) -> Result<Tensor> {
    let (b, heads, s, d) = q.dims4()?;
    let kv_heads = k.dims()[1];
    let t = offset + s;
    check_elems("the full attention score matrix", b * heads * s * t)?;
    let group = heads / kv_heads;
    let k = repeat_kv(k.contiguous()?, group)?;
    let v = repeat_kv(v.contiguous()?, group)?;
    let scale = 1.0 / (d as f64).sqrt();
    let scores = (q.matmul(&k.t()?)? * scale)?;
    let scores = if s > 1 {
        let mask = causal_mask(offset, s, t, q.device())?;
        masked_fill_neg_inf(&scores, &mask)?
    } else {
        scores
    };
    let probs = if differentiable {
        candle_nn::ops::softmax(&scores, candle_core::D::Minus1)?
    } else {
        candle_nn::ops::softmax_last_dim(&scores)?
    };
    Ok(probs.matmul(&v)?)
}

trait ContiguousIfNeeded {
    fn contiguous_if_needed(&self) -> candle_core::Result<Tensor>;
}

impl ContiguousIfNeeded for Tensor {
    /// A narrowed cache view is a strided batch matmul operand as it is; only copy what is not.
    fn contiguous_if_needed(&self) -> candle_core::Result<Tensor> {
        let dims = self.dims();
        let stride = self.stride();
        let rows_contiguous = stride[stride.len() - 1] == 1 && stride[stride.len() - 2] == dims[dims.len() - 1];
        if rows_contiguous {
            Ok(self.clone())
        } else {
            self.contiguous()
        }
    }
}

/// Rotary embedding: the lab's kernel for BF16 on a GPU (each product rounded, then their sum, on
/// every compute capability: `kernels::rope`), candle's elsewhere.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = crate::model::kernels::rope::rope(x, cos, sin)? {
        return Ok(y);
    }
    Ok(candle_nn::rotary_emb::rope(x, cos, sin)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Bounded (any chunk size, GQA folded) equals naive (K/V repeated, full scores).
    #[test]
    fn bounded_equals_naive() {
        let dev = Device::Cpu;
        let (b, heads, kv, s, d, offset) = (2, 6, 2, 9, 8, 5);
        let q = Tensor::randn(0f32, 1.0, (b, heads, s, d), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (b, kv, offset + s, d), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (b, kv, offset + s, d), &dev).unwrap();
        let reference = naive(&q, &k, &v, offset, false).unwrap();
        // The differentiable form computes the same.
        let diff = (naive(&q, &k, &v, offset, true).unwrap() - &reference)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 1e-5, "differentiable: max diff {diff}");
        for budget in [1, 3 * b * heads * (offset + s) * 4, 1 << 30] {
            let got = bounded(&q, &k, &v, offset, budget).unwrap();
            let diff = (got - &reference).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff < 1e-5, "budget {budget}: max diff {diff}");
        }
    }

    #[test]
    fn element_guard() {
        assert!(check_elems("x", 1 << 20).is_ok());
        assert!(check_elems("x", 28 * 16384 * 16384).is_err());
    }
}
