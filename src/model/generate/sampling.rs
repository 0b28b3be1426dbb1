//! The next token's logits checked (`check_finite`) and sampled: softmax at a temperature,
//! optionally cut to the top-p mass, drawn with a seeded generator. The same rule as
//! candle-transformers' `LogitsProcessor`, kept here so the lab does not build candle-transformers
//! (the last 73 s of a cold 2-core build).

use crate::error::{LabError, Result};
use candle_core::{DType, Tensor};
use rand::distr::{weighted::WeightedIndex, Distribution};
use rand::{rngs::StdRng, SeedableRng};

/// `LabError::NonFinite` when `logits` hold a NaN or an infinity (step 0 is the prefill): ids
/// picked from them would look like any others. One sum on the device, one number read back; the
/// values are read whole only when the sum is not finite, to tell an overflowing sum apart.
pub fn check_finite(logits: &Tensor, step: usize) -> Result<()> {
    let sum = logits.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
    if sum.is_finite() {
        return Ok(());
    }
    let values = logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    if values.iter().all(|v| v.is_finite()) {
        return Ok(());
    }
    let step = if step == 0 { "the prefill".to_string() } else { format!("decode step {step}") };
    Err(LabError::NonFinite { step, weight: None })
}

pub struct Sampler {
    rng: StdRng,
    temperature: f64,
    top_p: Option<f64>,
}

impl Sampler {
    pub fn new(seed: u64, temperature: f64, top_p: Option<f64>) -> Self {
        Self { rng: StdRng::seed_from_u64(seed), temperature, top_p }
    }

    /// One id drawn from the logits of one position (a vector over the vocabulary).
    pub fn sample(&mut self, logits: &Tensor) -> Result<u32> {
        let logits: Vec<f32> = logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let t = self.temperature.max(1e-6) as f32;
        let top = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let mut p: Vec<f32> = logits.iter().map(|&l| ((l - top) / t).exp()).collect();
        if let Some(top_p) = self.top_p.filter(|&q| q > 0.0 && q < 1.0) {
            // Keep the most likely ids until their mass reaches top_p; zero the rest.
            let total: f32 = p.iter().sum();
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            let mut mass = 0.0;
            for &i in &order {
                if mass >= top_p as f32 * total {
                    p[i] = 0.0;
                } else {
                    mass += p[i];
                }
            }
        }
        let dist = WeightedIndex::new(&p).map_err(|e| LabError::other(format!("sampling: {e}")))?;
        Ok(dist.sample(&mut self.rng) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn low_temperature_and_a_small_top_p_pick_the_largest() {
        let logits = Tensor::new(&[0.1f32, 3.0, 0.2, 2.9], &Device::Cpu).unwrap();
        let mut s = Sampler::new(7, 1.0, Some(0.01));
        assert!((0..50).all(|_| s.sample(&logits).unwrap() == 1));
        let mut s = Sampler::new(7, 1e-4, None);
        assert!((0..50).all(|_| s.sample(&logits).unwrap() == 1));
        // At temperature 1 both leading ids are drawn, the same ones for the same seed.
        let draws = |seed| {
            let mut s = Sampler::new(seed, 1.0, None);
            (0..200).map(|_| s.sample(&logits).unwrap()).collect::<Vec<_>>()
        };
        let a = draws(3);
        assert!(a.contains(&1) && a.contains(&3));
        assert_eq!(a, draws(3));
    }
}
