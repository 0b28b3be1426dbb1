//! AdamW that updates in place. candle_nn's AdamW computes each update from `Var`s, so every op
//! of the update records its inputs for a backward nobody runs: the new moments, their
//! bias-corrected copies, the step and the new weight hold each other until the weight is done
//! (14 tensors the size of the largest weight, measured on an H200). Here the update reads
//! detached views, so each intermediate is freed when the next is made, and writes the moments
//! and the weight back into their own storage (`Var::set`). Beside the gradients it then holds at
//! most three tensors of one weight's size (`UPDATE_COPIES`): an operator that takes a tensor by
//! value frees it, so each line holds its two operands and its result.

use crate::error::Result;
use candle_core::backprop::GradStore;
use candle_core::{DType, Var};
pub use candle_nn::optim::ParamsAdamW;

/// Tensors of one weight's size alive at the update's busiest line (counted on the CPU by the
/// lab's allocator, `tests/training.rs`): e.g. `v · β2`, `g² · (1 − β2)` and their sum.
pub const UPDATE_COPIES: u64 = 3;

struct Slot {
    theta: Var,
    m: Var,
    v: Var,
}

pub struct AdamW {
    slots: Vec<Slot>,
    params: ParamsAdamW,
    t: i32,
}

impl AdamW {
    /// The two F32 moments of every weight, zero.
    pub fn new(vars: Vec<Var>, params: ParamsAdamW) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|theta| {
                let (m, v) = (Var::zeros(theta.shape(), DType::F32, theta.device())?, Var::zeros(theta.shape(), DType::F32, theta.device())?);
                Ok(Slot { theta, m, v })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { slots, params, t: 0 })
    }

    /// One update of every weight that has a gradient in `grads` (decoupled weight decay, bias
    /// correction: the same arithmetic as candle_nn's AdamW).
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.t += 1;
        let p = &self.params;
        let scale_m = 1.0 / (1.0 - p.beta1.powi(self.t));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(self.t));
        for s in &self.slots {
            let Some(g) = grads.get(s.theta.as_tensor()) else { continue };
            let g = g.detach();
            let next_m = ((s.m.as_tensor().detach() * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
            s.m.set(&next_m)?;
            drop(next_m);
            let next_v = ((s.v.as_tensor().detach() * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            s.v.set(&next_v)?;
            drop(next_v);
            let denom = ((s.v.as_tensor().detach() * scale_v)?.sqrt()? + p.eps)?;
            let step = ((s.m.as_tensor().detach() * (scale_m * p.lr))? / &denom)?;
            drop(denom);
            let next = ((s.theta.as_tensor().detach() * (1.0 - p.lr * p.weight_decay))? - &step)?;
            drop(step);
            s.theta.set(&next)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};
    use candle_nn::optim::Optimizer as _;

    /// Three steps give candle_nn's AdamW's weights (the same arithmetic, another memory).
    #[test]
    fn same_weights_as_candle_nn() {
        let init = Tensor::new(&[[0.5f32, -1.0, 2.0], [0.25, 3.0, -0.75]], &Device::Cpu).unwrap();
        let target = Tensor::new(&[[1.0f32, 0.0, 1.0], [0.0, 1.0, 0.0]], &Device::Cpu).unwrap();
        let params = ParamsAdamW { lr: 0.1, ..Default::default() };
        let (a, b) = (Var::from_tensor(&init).unwrap(), Var::from_tensor(&init).unwrap());
        let mut ours = AdamW::new(vec![a.clone()], params.clone()).unwrap();
        let mut theirs = candle_nn::optim::AdamW::new(vec![b.clone()], params).unwrap();
        for _ in 0..3 {
            let ga = (a.as_tensor() - &target).unwrap().sqr().unwrap().sum_all().unwrap().backward().unwrap();
            let gb = (b.as_tensor() - &target).unwrap().sqr().unwrap().sum_all().unwrap().backward().unwrap();
            ours.step(&ga).unwrap();
            theirs.step(&gb).unwrap();
        }
        let (x, y) = (a.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap());
        assert_ne!(x, init.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        for (x, y) in x.iter().zip(&y) {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
    }
}
