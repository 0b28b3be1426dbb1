//! PyTorch's two data-parallel layouts per GPU, for a step in F32 with AdamW: what each GPU holds
//! over a step, counted as the articles count it (weights + gradients + states + activations).
//! - DDP: every GPU its own process and a whole copy of everything — weights, gradients, AdamW's
//!   moments — and the activations of its share of the batch. Balanced.
//! - DataParallel: one process; the module, its gradients (each replica's summed into it) and the
//!   optimizer's moments live on the first GPU. Each forward replicates the weights to the other
//!   GPUs (their gradients exist there only until the backward sums them), and gathers every
//!   replica's outputs — the logits of the whole batch — on the first GPU.
//!
//! The activations are PyTorch's own (`training::pytorch_step`, transformers' Qwen2 with SDPA).

use crate::estimate::training::{ledger, pytorch_step, TrainSetup, TrainShape};
use crate::model::DecoderConfig;

/// One GPU's bytes in one layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DpGpu {
    pub weights: u64,
    pub gradients: u64,
    pub states: u64,
    /// What the forward keeps for the backward, for this GPU's share of the batch.
    pub activations: u64,
    /// Every replica's logits gathered on the output GPU.
    pub gathered: u64,
}

impl DpGpu {
    pub fn total(&self) -> u64 {
        self.weights + self.gradients + self.states + self.activations + self.gathered
    }
}

/// (a DDP GPU, DataParallel's first GPU, one of its other GPUs) for `gpus` GPUs each taking
/// `per_gpu` (its batch and sequence length), `params` parameters.
pub fn layouts(
    cfg: &DecoderConfig,
    params: u64,
    per_gpu: TrainShape,
    gpus: u64,
    checkpoint: bool,
) -> (DpGpu, DpGpu, DpGpu) {
    let l = ledger(params, &TrainSetup::fp32_adam());
    let activations = pytorch_step(cfg, params, per_gpu, checkpoint).forward;
    let whole = DpGpu { weights: l.weights, gradients: l.gradients, states: l.optimizer, activations, gathered: 0 };
    // A replica's logits in F32.
    let logits = 4 * (per_gpu.batch * per_gpu.seq) as u64 * cfg.vocab_size as u64;
    let first = DpGpu { gathered: if gpus > 1 { gpus * logits } else { 0 }, ..whole };
    let other = DpGpu { states: 0, ..whole };
    (whole, first, other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_gpu_holds_the_moments_and_every_logit() {
        // tiny: V 1024; 2 GPUs, 1 × 64 tokens each.
        let cfg = DecoderConfig::preset("tiny").unwrap();
        let p = cfg.param_count() as u64;
        let sh = TrainShape { batch: 1, seq: 64 };
        let (ddp, first, other) = layouts(&cfg, p, sh, 2, false);
        assert_eq!(ddp.total(), 16 * p + pytorch_step(&cfg, p, sh, false).forward);
        // The first GPU: AdamW's 8 B a parameter and both GPUs' logits (2 · 64 · 1024 F32) above
        // the others.
        assert_eq!(first.total() - other.total(), 8 * p + 4 * 2 * 64 * 1024);
        assert_eq!(first.total() - ddp.total(), 4 * 2 * 64 * 1024);
        // One GPU: DataParallel is the plain step.
        assert_eq!(layouts(&cfg, p, sh, 1, false).1, ddp);
    }
}
