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
use candle_core::{DType, Tensor, Var};
pub use candle_nn::optim::ParamsAdamW;

/// Tensors of one weight's size alive at the update's busiest line (counted on the CPU by the
/// lab's allocator, `tests/training.rs`): e.g. `v · β2`, `g² · (1 − β2)` and their sum.
pub const UPDATE_COPIES: u64 = 3;

/// The two F32 moments of one tensor (or of a rank's part of one, under ZeRO).
pub struct Moments {
    m: Var,
    v: Var,
}

impl Moments {
    pub fn zeros(shape: &candle_core::Shape, device: &candle_core::Device) -> Result<Self> {
        Ok(Self { m: Var::zeros(shape, DType::F32, device)?, v: Var::zeros(shape, DType::F32, device)? })
    }

    pub fn elem_count(&self) -> usize {
        2 * self.m.elem_count()
    }

    /// Step `t` of AdamW (decoupled weight decay, bias correction: candle_nn's arithmetic): the
    /// moments updated in place from the gradient `g`, and the new value of `theta` returned.
    pub fn update(&self, p: &ParamsAdamW, t: i32, theta: &Tensor, g: &Tensor) -> Result<Tensor> {
        let scale_m = 1.0 / (1.0 - p.beta1.powi(t));
        let scale_v = 1.0 / (1.0 - p.beta2.powi(t));
        let g = g.detach();
        let next_m = ((self.m.as_tensor().detach() * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
        self.m.set(&next_m)?;
        drop(next_m);
        let next_v = ((self.v.as_tensor().detach() * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
        self.v.set(&next_v)?;
        drop(next_v);
        let denom = ((self.v.as_tensor().detach() * scale_v)?.sqrt()? + p.eps)?;
        let step = ((self.m.as_tensor().detach() * (scale_m * p.lr))? / &denom)?;
        drop(denom);
        Ok(((theta.detach() * (1.0 - p.lr * p.weight_decay))? - &step)?)
    }
}

pub struct AdamW {
    slots: Vec<(Var, Moments)>,
    params: ParamsAdamW,
    t: i32,
}

impl AdamW {
    /// The two F32 moments of every weight, zero.
    pub fn new(vars: Vec<Var>, params: ParamsAdamW) -> Result<Self> {
        let slots = vars
            .into_iter()
            .map(|theta| {
                let moments = Moments::zeros(theta.shape(), theta.device())?;
                Ok((theta, moments))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { slots, params, t: 0 })
    }

    /// One update of every weight that has a gradient in `grads`.
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.t += 1;
        for (theta, moments) in &self.slots {
            let Some(g) = grads.get(theta.as_tensor()) else { continue };
            let next = moments.update(&self.params, self.t, theta.as_tensor(), g)?;
            theta.set(&next)?;
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
        let (x, y) = (
            a.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_ne!(x, init.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        for (x, y) in x.iter().zip(&y) {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
    }
}
