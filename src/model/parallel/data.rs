//! Data parallelism for training: every rank runs the whole model on its share of the batch and
//! the gradients are averaged across the group before the update (DDP). ZeRO shards what each
//! rank keeps (the ZeRO paper, Rajbhandari et al. 2020), as DeepSpeed does over the weights laid
//! end to end: rank r owns elements [r·P/N, (r+1)·P/N) of the P parameters, so a tensor may be
//! split between ranks. Stage 1 keeps AdamW's moments for the owned part only — a rank updates
//! that part and the group then exchanges the new values; stage 2 also keeps, after the exchange,
//! only the owned part of each gradient.
//! The exchanges are sums (`AllReduce`): a gather is a sum where the other ranks give zeros.

use crate::error::{LabError, Result};
use crate::model::layers::comm::AllReduce;
use crate::model::train::optim::{Moments, ParamsAdamW};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use std::sync::Arc;

/// The part of each tensor (elements `sizes`, laid end to end) that `rank` of `ranks` owns:
/// (start, length) within the tensor, or None.
pub fn owned_parts(sizes: &[usize], rank: usize, ranks: usize) -> Vec<Option<(usize, usize)>> {
    let total: usize = sizes.iter().sum();
    let (lo, hi) = (rank * total / ranks.max(1), (rank + 1) * total / ranks.max(1));
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            let (a, b) = (at.max(lo), (at + n).min(hi));
            at += n;
            (a < b).then(|| (a - (at - n), b - a))
        })
        .collect()
}

/// A rank's optimizer under data parallelism, ZeRO stage `zero` (0: plain DDP).
pub struct DataParallel {
    vars: Vec<Var>,
    parts: Vec<Option<(usize, usize)>>,
    moments: Vec<Option<Moments>>,
    zero: u8,
    params: ParamsAdamW,
    t: i32,
    comm: Arc<dyn AllReduce>,
}

impl DataParallel {
    pub fn new(vars: Vec<Var>, params: ParamsAdamW, zero: u8, comm: Arc<dyn AllReduce>) -> Result<Self> {
        if zero > 2 {
            return Err(LabError::input(format!(
                "ZeRO stage {zero}: the lab shards optimizer states (1) and gradients (2); stage 3 is not built"
            )));
        }
        let sizes: Vec<usize> = vars.iter().map(|v| v.elem_count()).collect();
        let parts = if zero == 0 {
            sizes.iter().map(|&n| Some((0, n))).collect()
        } else {
            owned_parts(&sizes, comm.rank(), comm.ranks())
        };
        let moments = parts
            .iter()
            .zip(&vars)
            .map(|(p, v)| p.map(|(_, len)| Moments::zeros(&len.into(), v.device())).transpose())
            .collect::<Result<_>>()?;
        Ok(Self { vars, parts, moments, zero, params, t: 0, comm })
    }

    /// Elements whose AdamW moments this rank holds (each moment counted once).
    pub fn state_elems(&self) -> usize {
        self.moments.iter().flatten().map(|m| m.elem_count()).sum::<usize>() / 2
    }

    /// Averages this rank's `grads` across the group and updates; returns the gradient bytes
    /// kept for the update (ZeRO-2: the owned parts only).
    pub fn step(&mut self, mut grads: GradStore) -> Result<u64> {
        self.t += 1;
        let n = self.comm.ranks() as f64;
        let mut kept = Vec::with_capacity(self.vars.len());
        for (v, part) in self.vars.iter().zip(&self.parts) {
            let mean = match grads.remove(v.as_tensor()) {
                Some(g) => Some((self.comm.all_reduce_sum(&g)? / n)?),
                None => None,
            };
            kept.push(match (self.zero, mean, part) {
                (2, Some(g), Some((start, len))) => Some(g.flatten_all()?.narrow(0, *start, *len)?.contiguous()?),
                (2, _, _) => None,
                (_, g, _) => g,
            });
        }
        let kept_bytes = kept.iter().flatten().map(|g| g.elem_count() as u64 * g.dtype().size_in_bytes() as u64).sum();
        for (i, v) in self.vars.iter().enumerate() {
            let theta = v.as_tensor();
            let next = match (&self.moments[i], &kept[i], self.parts[i]) {
                (Some(m), Some(g), Some((start, len))) => {
                    let g = if g.elem_count() == len {
                        g.flatten_all()?
                    } else {
                        g.flatten_all()?.narrow(0, start, len)?
                    };
                    Some(m.update(&self.params, self.t, &theta.flatten_all()?.narrow(0, start, len)?, &g)?)
                }
                _ => None,
            };
            if self.zero == 0 {
                if let Some(next) = next {
                    v.set(&next.reshape(theta.shape())?)?;
                }
                continue;
            }
            // The new values from their owners: each rank gives its part, zeros elsewhere.
            let n_el = theta.elem_count();
            let mine = match (next, self.parts[i]) {
                (Some(next), Some((start, len))) => {
                    let zeros = |k: usize| Tensor::zeros(k, theta.dtype(), theta.device());
                    Tensor::cat(&[zeros(start)?, next, zeros(n_el - start - len)?], 0)?
                }
                _ => Tensor::zeros(n_el, theta.dtype(), theta.device())?,
            };
            let whole = self.comm.all_reduce_sum(&mine)?;
            v.set(&whole.reshape(theta.shape())?)?;
        }
        Ok(kept_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_by_hand() {
        // 10 + 10 + 40 + 20 + 20 = 100 elements over 2: rank 0 owns 0..50, rank 1 50..100.
        assert_eq!(
            owned_parts(&[10, 10, 40, 20, 20], 0, 2),
            vec![Some((0, 10)), Some((0, 10)), Some((0, 30)), None, None]
        );
        assert_eq!(
            owned_parts(&[10, 10, 40, 20, 20], 1, 2),
            vec![None, None, Some((30, 10)), Some((0, 20)), Some((0, 20))]
        );
        // Over 3 (33 each, the last 34): rank 1 owns 33..66.
        assert_eq!(owned_parts(&[10, 10, 40, 20, 20], 1, 3), vec![None, None, Some((13, 27)), Some((0, 6)), None]);
        for ranks in 1..5 {
            let owned: usize =
                (0..ranks).flat_map(|r| owned_parts(&[7, 13, 1, 29], r, ranks)).flatten().map(|p| p.1).sum();
            assert_eq!(owned, 50, "{ranks} ranks cover every element once");
        }
    }
}
