//! A CPU layer's decoding step (one sequence, one position) in plain loops over F32 vectors: the
//! norms, rotary, attention and silu·up as loops, the four products by `HostLinear` on all cores.
//! Through candle's CPU ops the same step cost 23 ms a token beyond its products in the offload
//! stage's 14 CPU layers on an H100 host (a new tensor per op, rayon's dispatch for small ones),
//! a quarter of the token; what is left here is the products' reading.

use crate::error::Result;
use crate::model::decoder::layer::{Layer, Mlp, Pass};
use crate::model::layers::attention::AttentionMode;
use crate::model::layers::kv_cache::KvCache;
use crate::model::layers::linear::Linear;
use candle_core::{DType, Device, Tensor};

/// x ⊙ g / rms(x), as candle's `rms_norm` (sums in F32).
fn rms_norm(x: &[f32], g: &[f32], eps: f64) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ms + eps as f32).sqrt();
    x.iter().zip(g).map(|(v, g)| v * r * g).collect()
}

/// Rotates each head of `x` ([n · d]) by the position's `cos`, `sin` ([d / 2]): rotate-half, as
/// candle's `rope`.
fn rotate(x: &mut [f32], d: usize, cos: &[f32], sin: &[f32]) {
    let half = d / 2;
    for head in x.chunks_mut(d) {
        for i in 0..half {
            let (a, b) = (head[i], head[i + half]);
            head[i] = a * cos[i] - b * sin[i];
            head[i + half] = b * cos[i] + a * sin[i];
        }
    }
}

fn vec_f32(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
}

impl Layer {
    /// `host_step` where it applies (not for training), else `forward`.
    pub(crate) fn host_step_or_forward(&self, x: Tensor, l: usize, pass: &Pass, cache: &mut KvCache) -> Result<Tensor> {
        if pass.mode != AttentionMode::Differentiable {
            if let Some(y) = self.host_step(&x, l, pass, cache)? {
                return Ok(y);
            }
        }
        self.forward(x, l, pass, cache)
    }

    /// The decoding step of a CPU layer, or None where it does not apply (not a CPU layer, a batch
    /// or several positions, a tensor-parallel rank, products not stacked): the caller runs
    /// `forward`. `rope`: the position's tables, [1, d / 2].
    pub(crate) fn host_step(&self, x: &Tensor, l: usize, pass: &Pass, cache: &mut KvCache) -> Result<Option<Tensor>> {
        let Pass { cfg, rope, offset, .. } = *pass;
        let (b, s, hidden) = x.dims3()?;
        let Some((Linear::Host(qkv), Linear::Host(gate_up))) = self.fused.as_ref() else { return Ok(None) };
        let (Linear::Host(o), Mlp::Dense { down: Linear::Host(down), .. }) = (&self.o, &self.mlp) else {
            return Ok(None);
        };
        if b != 1 || s != 1 {
            return Ok(None);
        }
        let (heads, kv, d) = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim());
        let (nq, nk) = (heads * d, kv * d);
        let eps = cfg.rms_norm_eps;
        let x0 = vec_f32(x)?;
        let mut y = qkv.rows(&rms_norm(&x0, &vec_f32(&self.ln1)?, eps))?;
        let (cos, sin) = (vec_f32(&rope.0)?, vec_f32(&rope.1)?);
        if let Some((qn, kn)) = &self.qk_norm {
            // Qwen3: each head of q and of k normed before RoPE.
            let (qn, kn) = (vec_f32(qn)?, vec_f32(kn)?);
            for (part, g) in [(0..nq, &qn), (nq..nq + nk, &kn)] {
                for head in y[part].chunks_mut(d) {
                    let normed = rms_norm(head, g, eps);
                    head.copy_from_slice(&normed);
                }
            }
        }
        rotate(&mut y[..nq + nk], d, &cos, &sin);
        // k and v into the cache, in its dtype, as `forward` writes them.
        let act = x.dtype();
        let kt = Tensor::from_slice(&y[nq..nq + nk], (1, kv, 1, d), &Device::Cpu)?.to_dtype(act)?;
        let vt = Tensor::from_slice(&y[nq + nk..], (1, kv, 1, d), &Device::Cpu)?.to_dtype(act)?;
        cache.write(l, &kt, &vt)?;
        let (kc, vc) = cache.view(l, offset + 1)?;
        let Some(a) = crate::model::host::attention::decode(&y[..nq], heads, &kc, &vc, 1.0 / (d as f32).sqrt())? else {
            return Ok(None);
        };
        let x1: Vec<f32> = o.rows(&a)?.iter().zip(&x0).map(|(o, x)| o + x).collect();
        let gu = gate_up.rows(&rms_norm(&x1, &vec_f32(&self.ln2)?, eps))?;
        let i = gu.len() / 2;
        let m: Vec<f32> = gu[..i].iter().zip(&gu[i..]).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
        let out: Vec<f32> = down.rows(&m)?.iter().zip(&x1).map(|(d, x)| d + x).collect();
        Ok(Some(Tensor::from_vec(out, (1, 1, hidden), &Device::Cpu)?.to_dtype(act)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::DecoderConfig;
    use crate::model::load::synthetic::Synthetic;
    use crate::model::load::weights::{Weight, WeightSource};
    use crate::model::Precision;

    /// The step equals the layer's `forward` on the same cache, at the first position and after
    /// some (the cache then holds earlier positions), and it does run (Some) for a CPU layer.
    #[test]
    fn equals_forward_and_runs_for_a_cpu_layer() {
        for preset in ["tiny", "tiny-qwen3", "tiny-llama"] {
            step_equals_forward(&DecoderConfig::preset(preset).unwrap());
        }
    }

    fn step_equals_forward(cfg: &DecoderConfig) {
        let dev = Device::Cpu;
        let mut src = Synthetic::new(cfg.clone(), 3);
        let mut w: std::collections::HashMap<String, Weight> = cfg
            .tensor_specs()
            .into_iter()
            .filter(|s| s.name.starts_with("model.layers.0."))
            .map(|s| (s.name.clone(), src.load(&s, Precision::F32, &dev).unwrap()))
            .collect();
        let layer = Layer::new(cfg, 0, &mut w, DType::F32).unwrap().to_host().unwrap();
        assert!(w.is_empty(), "every tensor of the layer is a part: {:?}", w.keys());
        let d = cfg.head_dim();
        let steps = 5;
        let angles = Tensor::randn(0f32, 1., (steps, d / 2), &dev).unwrap();
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        let mut a = KvCache::new(cfg, 1, steps, DType::F32, &dev).unwrap();
        let mut b = KvCache::new(cfg, 1, steps, DType::F32, &dev).unwrap();
        for pos in 0..steps {
            let x = Tensor::randn(0f32, 1., (1, 1, cfg.hidden_size), &dev).unwrap();
            let rope = (cos.narrow(0, pos, 1).unwrap(), sin.narrow(0, pos, 1).unwrap());
            let pass = Pass { cfg, rope: &rope, offset: pos, mode: AttentionMode::default() };
            let got = layer.host_step(&x, 0, &pass, &mut a).unwrap().expect("a CPU layer's step");
            let want = layer.forward(x, 0, &pass, &mut b).unwrap();
            a.advance(1);
            b.advance(1);
            let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            assert!(diff < 1e-4, "{:?} position {pos}: {diff}", cfg.model_type);
        }
    }
}
