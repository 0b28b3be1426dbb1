//! How far a decoder's logits stand from a reference decoder's on the same tokens. The reference
//! decodes greedily and each of its tokens is fed to the candidate too (teacher forcing), so one
//! early near-tie does not send the two down different texts, as comparing greedy ids does: the
//! synthetic models' logits are flat, and a BF16 build parted from F32 after 29 of 48 ids with
//! nothing wrong (data/results/h200/2026-11-28-compute-89). Each position gives both top-1 ids and
//! the largest logit difference. The candidate takes the path `generate` takes on its device: the
//! static step and the lab's kernels when every layer is on one GPU, else the forward loop.

use crate::error::{LabError, Result};
use crate::model::decoder::{last_logits, Decoder, Logits};
use crate::model::generate::{check_request, GenerateConfig, OwnKernels, StaticDecoder};
use candle_core::{DType, Tensor};

/// One position: the prompt's last, then each forced token's.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Position {
    pub position: usize,
    pub reference_id: u32,
    pub candidate_id: u32,
    /// The largest |candidate − reference| over the vocabulary.
    pub max_abs_diff: f32,
    /// The largest |reference| over the vocabulary: the scale the difference is read against.
    pub reference_max_abs: f32,
}

/// Every position of one comparison.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Parity {
    pub positions: Vec<Position>,
}

impl Parity {
    /// The positions whose top-1 ids agree.
    pub fn agreeing(&self) -> usize {
        self.positions.iter().filter(|p| p.reference_id == p.candidate_id).count()
    }

    /// The share of positions whose top-1 ids agree.
    pub fn top1_agreement(&self) -> f64 {
        self.agreeing() as f64 / self.positions.len().max(1) as f64
    }

    pub fn largest_diff(&self) -> f32 {
        self.positions.iter().map(|p| p.max_abs_diff).fold(0.0, f32::max)
    }

    /// The largest difference over the reference's largest logit at the same position.
    pub fn largest_relative(&self) -> f32 {
        self.positions.iter().map(|p| p.max_abs_diff / p.reference_max_abs.max(f32::MIN_POSITIVE)).fold(0.0, f32::max)
    }
}

/// The candidate's logits at each position of the reference's greedy continuation of `prompt`,
/// `steps` positions in all.
pub fn teacher_forced(reference: &Decoder, candidate: &Decoder, prompt: &[u32], steps: usize) -> Result<Parity> {
    let cfg = GenerateConfig { max_new_tokens: steps, ..Default::default() };
    check_request(reference.cfg.vocab_size, prompt, &cfg)?;
    if candidate.cfg.vocab_size != reference.cfg.vocab_size {
        return Err(LabError::input(format!(
            "the candidate's vocabulary has {} ids, the reference's {}",
            candidate.cfg.vocab_size, reference.cfg.vocab_size
        )));
    }
    let capacity = prompt.len() + steps;
    let mut ref_cache = reference.new_cache(1, capacity)?;
    let mut r = last_logits(&reference.forward(&ids(reference, prompt)?, &mut ref_cache, Logits::Last)?)?;
    let mut cand = Candidate::prefill(candidate, prompt, capacity)?;
    let mut c = cand.logits.clone();
    let mut out = Parity::default();
    for k in 0..steps {
        let position = compare(prompt.len() - 1 + k, &r, &c)?;
        out.positions.push(position);
        if k + 1 == steps {
            break;
        }
        let next = [position.reference_id];
        r = last_logits(&reference.forward(&ids(reference, &next)?, &mut ref_cache, Logits::Last)?)?;
        c = cand.step(&next)?;
    }
    Ok(out)
}

fn ids(model: &Decoder, ids: &[u32]) -> Result<Tensor> {
    Ok(Tensor::new(ids, model.device())?.unsqueeze(0)?)
}

fn compare(position: usize, reference: &Tensor, candidate: &Tensor) -> Result<Position> {
    let r = reference.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let c = candidate.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    if r.len() != c.len() || r.is_empty() {
        return Err(LabError::other(format!("logits of {} and {} values", r.len(), c.len())));
    }
    let diff = r.iter().zip(&c).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    Ok(Position {
        position,
        reference_id: first_max(&r),
        candidate_id: first_max(&c),
        // A NaN anywhere is the largest difference there is.
        max_abs_diff: if r.iter().chain(&c).any(|v| !v.is_finite()) { f32::INFINITY } else { diff },
        reference_max_abs: r.iter().map(|v| v.abs()).fold(0.0, f32::max),
    })
}

/// The index of the first largest value: how a tie is broken on both sides.
fn first_max(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// The candidate on `generate`'s path (`generate_with`'s test for the static step).
enum Path<'a> {
    Static(Box<StaticDecoder<'a>>),
    Loop(crate::model::layers::kv_cache::KvCache),
}

struct Candidate<'a> {
    model: &'a Decoder,
    path: Path<'a>,
    logits: Tensor,
}

impl<'a> Candidate<'a> {
    fn prefill(model: &'a Decoder, prompt: &[u32], capacity: usize) -> Result<Self> {
        let t = ids(model, prompt)?;
        if model.all_on_gpu() && model.sums_capturable() && model.cfg.experts().is_none() {
            let (dec, logits) = StaticDecoder::prefill_logits(model, &t, capacity, OwnKernels::All)?;
            return Ok(Self { model, path: Path::Static(Box::new(dec)), logits });
        }
        let mut cache = model.new_cache(1, capacity)?;
        let logits = last_logits(&model.forward(&t, &mut cache, Logits::Last)?)?;
        Ok(Self { model, path: Path::Loop(cache), logits })
    }

    fn step(&mut self, next: &[u32]) -> Result<Tensor> {
        let t = ids(self.model, next)?;
        match &mut self.path {
            Path::Static(dec) => dec.step_forced(&t),
            Path::Loop(cache) => last_logits(&self.model.forward(&t, cache, Logits::Last)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DecoderConfig, Precision};
    use candle_core::Device;

    fn tiny(precision: Precision, seed: u64) -> Decoder {
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let mut src = crate::model::load::synthetic::Synthetic::new(cfg.clone(), seed);
        let w = crate::model::load::weights::load_all(&cfg, &mut src, precision, &Device::Cpu, None, |_, _| Ok(()))
            .unwrap();
        Decoder::new(&cfg, precision, w, &Device::Cpu).unwrap()
    }

    #[test]
    fn a_model_against_itself_agrees_everywhere() {
        let m = tiny(Precision::F32, 3);
        let p = teacher_forced(&m, &m, &[1, 2, 3, 4], 6).unwrap();
        assert_eq!(p.positions.len(), 6);
        assert_eq!(p.positions.iter().map(|p| p.position).collect::<Vec<_>>(), (3..9).collect::<Vec<_>>());
        assert_eq!(p.top1_agreement(), 1.0);
        assert_eq!(p.largest_diff(), 0.0);
    }

    #[test]
    fn bf16_stands_close_and_other_weights_do_not() {
        let f32 = tiny(Precision::F32, 3);
        let bf16 = teacher_forced(&f32, &tiny(Precision::Bf16, 3), &[5, 6, 7], 8).unwrap();
        assert!(bf16.largest_diff() > 0.0, "BF16 rounds something");
        assert!(bf16.largest_relative() < 0.05, "{bf16:?}");
        let other = teacher_forced(&f32, &tiny(Precision::F32, 4), &[5, 6, 7], 8).unwrap();
        assert!(other.largest_relative() > 10.0 * bf16.largest_relative(), "{other:?}");
    }

    #[test]
    fn a_nan_is_the_largest_difference() {
        let r = Tensor::new(&[1f32, 3.0, 2.0], &Device::Cpu).unwrap();
        let c = Tensor::new(&[1f32, f32::NAN, 2.0], &Device::Cpu).unwrap();
        let p = compare(0, &r, &c).unwrap();
        assert_eq!((p.reference_id, p.max_abs_diff, p.reference_max_abs), (1, f32::INFINITY, 3.0));
    }
}
