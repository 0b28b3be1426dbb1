//! Data parallelism for training: every rank runs the whole model on its share of the batch and
//! the gradients are averaged across the group before the update (DDP). ZeRO shards what each
//! rank keeps (the ZeRO paper, Rajbhandari et al. 2020): stage 1 gives a rank the AdamW moments of
//! its share of the weights only — it updates that share and the group then exchanges the new
//! values; stage 2 also keeps, after the exchange, only the gradients of its share. A share is a
//! run of whole tensors, split where the running element count crosses k/N of the total.
//! The exchanges are sums (`AllReduce`): a gather is a sum where the other ranks give zeros, the
//! same bytes NCCL's all-gather moves per rank, N times the buffer.

use super::comm::AllReduce;
use crate::error::{LabError, Result};
use crate::model::optim::{AdamW, ParamsAdamW};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use std::sync::Arc;

/// The rank that owns each tensor of `sizes` (elements): contiguous runs, each near 1/`ranks` of
/// the total.
pub fn owners(sizes: &[usize], ranks: usize) -> Vec<usize> {
    let total: usize = sizes.iter().sum();
    let mut seen = 0usize;
    sizes
        .iter()
        .map(|&n| {
            // The owner of a tensor is the share its middle element falls in.
            let mid = seen + n / 2;
            seen += n;
            (mid * ranks / total.max(1)).min(ranks.saturating_sub(1))
        })
        .collect()
}

/// A rank's optimizer under data parallelism, ZeRO stage `zero` (0: plain DDP).
pub struct DataParallel {
    vars: Vec<Var>,
    owner: Vec<usize>,
    zero: u8,
    opt: AdamW,
    comm: Arc<dyn AllReduce>,
}

impl DataParallel {
    pub fn new(vars: Vec<Var>, params: ParamsAdamW, zero: u8, comm: Arc<dyn AllReduce>) -> Result<Self> {
        if zero > 2 {
            return Err(LabError::input(format!("ZeRO stage {zero}: the lab shards optimizer states (1) and gradients (2); stage 3 is not built")));
        }
        let owner = owners(&vars.iter().map(|v| v.elem_count()).collect::<Vec<_>>(), comm.ranks());
        let mine: Vec<Var> = vars.iter().zip(&owner).filter(|(_, &o)| zero == 0 || o == comm.rank()).map(|(v, _)| v.clone()).collect();
        Ok(Self { opt: AdamW::new(mine, params)?, vars, owner, zero, comm })
    }

    /// Weights whose AdamW moments this rank holds, elements.
    pub fn state_elems(&self) -> usize {
        self.vars.iter().zip(&self.owner).filter(|(_, &o)| self.zero == 0 || o == self.comm.rank()).map(|(v, _)| v.elem_count()).sum()
    }

    fn mine(&self, i: usize) -> bool {
        self.owner[i] == self.comm.rank()
    }

    /// Averages `grads` across the group (ZeRO-2: keeping only this rank's share), then updates.
    /// `grads` holds this rank's gradients of its own share of the batch.
    pub fn step(&mut self, grads: &mut GradStore) -> Result<()> {
        let n = self.comm.ranks() as f64;
        for (i, v) in self.vars.iter().enumerate() {
            let Some(g) = grads.remove(v.as_tensor()) else { continue };
            let mean = (self.comm.all_reduce_sum(&g)? / n)?;
            drop(g);
            if self.zero < 2 || self.mine(i) {
                grads.insert(v.as_tensor(), mean);
            }
        }
        self.opt.step(grads)?;
        if self.zero >= 1 {
            // Each tensor's new value from its owner: the others give zeros to the sum.
            for (i, v) in self.vars.iter().enumerate() {
                let part = if self.mine(i) { v.as_tensor().detach() } else { Tensor::zeros_like(v.as_tensor())? };
                let whole = self.comm.all_reduce_sum(&part)?;
                if !self.mine(i) {
                    v.set(&whole)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_by_hand() {
        // 10 + 10 + 40 + 20 + 20 = 100 elements over 2: middles at 5, 15, 40, 70, 90.
        assert_eq!(owners(&[10, 10, 40, 20, 20], 2), vec![0, 0, 0, 1, 1]);
        // Over 4 (25 each): 5 → 0, 15 → 0, 40 → 1, 70 → 2, 90 → 3.
        assert_eq!(owners(&[10, 10, 40, 20, 20], 4), vec![0, 0, 1, 2, 3]);
        assert_eq!(owners(&[7], 3), vec![1]);
        assert_eq!(owners(&[5, 5], 1), vec![0, 0]);
    }
}
