//! A CPU layer's decoding attention over its host cache, in plain loops. candle's CPU path (the
//! cache view cast to F32, a strided matmul per KV head, softmax, a second matmul, each a new
//! tensor) took 0.29 ms a layer on 2 cores at 48 positions, more than the layer's norms, rotary
//! and casts together; here one pass per query head reads the cache in place, heads spread over
//! rayon's threads.

use crate::error::{LabError, Result};
use crate::model::host::linear::{dot, Elem};
use candle_core::{DType, Device, Storage, Tensor};
use half::bf16;
use rayon::prelude::*;

/// `q`: the position's query heads, rotated, not scaled ([heads · d]); `k`, `v`: [1, kv_heads, t, d]
/// views of a host cache (rows of d contiguous) holding the position too. Returns the heads'
/// outputs [heads · d], or None where this does not apply (a batch, a device, a dtype other than
/// BF16 / F32, heads not a multiple of the KV heads).
pub fn decode(q: &[f32], heads: usize, k: &Tensor, v: &Tensor, scale: f32) -> Result<Option<Vec<f32>>> {
    let (kb, kv_heads, t, d) = k.dims4()?;
    let on_cpu = matches!(k.device(), Device::Cpu) && matches!(v.device(), Device::Cpu);
    if kb != 1
        || q.len() != heads * d
        || k.dims() != v.dims()
        || kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
        || !on_cpu
        || k.dtype() != v.dtype()
    {
        return Ok(None);
    }
    Ok(Some(match k.dtype() {
        DType::BF16 => heads_out::<bf16>(q, k, v, heads, d, t, scale)?,
        DType::F32 => heads_out::<f32>(q, k, v, heads, d, t, scale)?,
        _ => return Ok(None),
    }))
}

/// The cache's elements as a slice, its start and the strides of heads and positions (rows of d
/// contiguous), for a [1, kv, t, d] view.
fn rows_of<W: candle_core::WithDType, R>(x: &Tensor, f: impl FnOnce(&[W], usize, usize, usize) -> R) -> Result<R> {
    let (storage, layout) = x.storage_and_layout();
    let Storage::Cpu(c) = &*storage else { return Err(LabError::other("host attention over a cache not on the CPU")) };
    let st = layout.stride();
    if st[3] != 1 {
        return Err(LabError::other("host attention needs cache rows of contiguous elements"));
    }
    Ok(f(c.as_slice::<W>()?, layout.start_offset(), st[1], st[2]))
}

fn heads_out<W: Elem + candle_core::WithDType>(
    q: &[f32],
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    d: usize,
    t: usize,
    scale: f32,
) -> Result<Vec<f32>> {
    let group = heads / k.dim(1)?;
    let out = rows_of::<W, _>(k, |ks, k0, kh, kp| {
        rows_of::<W, _>(v, |vs, v0, vh, vp| {
            let mut out = vec![0f32; heads * d];
            out.par_chunks_mut(d).enumerate().for_each(|(h, o)| {
                let g = h / group;
                let qh = &q[h * d..(h + 1) * d];
                let krow = |p: usize| &ks[k0 + g * kh + p * kp..][..d];
                let vrow = |p: usize| &vs[v0 + g * vh + p * vp..][..d];
                let mut w: Vec<f32> = (0..t).map(|p| dot(krow(p), qh) * scale).collect();
                let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for x in &mut w {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                for (p, &wp) in w.iter().enumerate() {
                    let wp = wp / sum;
                    for (oi, vi) in o.iter_mut().zip(vrow(p)) {
                        *oi += wp * vi.f32();
                    }
                }
            });
            out
        })
    })??;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::layers::attention::{attend, AttentionMode};

    /// Equal to the lab's attention on candle's kernels, over a view of a larger cache (strided),
    /// in BF16 and F32, with grouped heads.
    #[test]
    fn equals_candles_attention_over_a_cache_view() {
        let dev = Device::Cpu;
        let (heads, kv, d, cap, t) = (6, 2, 64, 40, 23);
        for dtype in [DType::BF16, DType::F32] {
            let q = Tensor::randn(0f32, 1., (1, heads, 1, d), &dev).unwrap();
            let kc = Tensor::randn(0f32, 1., (1, kv, cap, d), &dev).unwrap().to_dtype(dtype).unwrap();
            let vc = Tensor::randn(0f32, 1., (1, kv, cap, d), &dev).unwrap().to_dtype(dtype).unwrap();
            let (k, v) = (kc.narrow(2, 0, t).unwrap(), vc.narrow(2, 0, t).unwrap());
            let qv: Vec<f32> = q.flatten_all().unwrap().to_vec1().unwrap();
            let got = Tensor::from_vec(
                decode(&qv, heads, &k, &v, 1.0 / (d as f32).sqrt()).unwrap().unwrap(),
                (1, 1, heads * d),
                &dev,
            )
            .unwrap();
            let f32k = k.to_dtype(DType::F32).unwrap();
            let f32v = v.to_dtype(DType::F32).unwrap();
            let want =
                attend(&q, &f32k, &f32v, t - 1, AttentionMode::default()).unwrap().reshape((1, 1, heads * d)).unwrap();
            let diff =
                (got - want).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(diff < 1e-5, "{dtype:?}: {diff}");
        }
        // A batch of two is not this function's.
        let k = Tensor::zeros((2, kv, 3, d), DType::F32, &dev).unwrap();
        assert!(decode(&vec![0.0; heads * d], heads, &k, &k, 1.0).unwrap().is_none());
    }
}
