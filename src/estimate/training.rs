//! Training memory per GPU: weights, gradients, an F32 master copy under mixed precision, the
//! optimizer's states, and what ZeRO divides across GPUs. Exact byte counts of the tensors a
//! training step holds; activations are a separate, measured matter (not here yet).
//!
//! The related articles' "FP32 training of a 7B model needs 112 GB" is 4 B of weights + 4 B of
//! gradients + 8 B of Adam states per parameter: 16 × 7e9. Qwen2.5-7B has 7,615,616,512
//! parameters, so the same rule gives 121.8 GB (113.5 GiB) for it.

use serde::{Deserialize, Serialize};

/// The optimizer whose states are kept per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Two moments per parameter, in F32
    Adamw,
    /// Two moments per parameter, in BF16
    AdamwBf16,
    /// Two moments per parameter, 8-bit blocks (1 B each plus one F32 scale per 2,048 values)
    Adamw8bit,
    /// Plain SGD without momentum: no state
    Sgd,
}

impl Optimizer {
    /// State bytes for `params` parameters.
    pub fn state_bytes(self, params: u64) -> u64 {
        match self {
            Self::Adamw => 2 * 4 * params,
            Self::AdamwBf16 => 2 * 2 * params,
            Self::Adamw8bit => 2 * (params + 4 * params.div_ceil(2048)),
            Self::Sgd => 0,
        }
    }
}

/// How a model is trained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainSetup {
    /// Bytes per weight as the forward pass reads it (4 in F32, 2 in BF16).
    pub weight_bytes: u64,
    /// An F32 master copy of the weights that the optimizer updates (mixed precision).
    pub master_f32: bool,
    pub optimizer: Optimizer,
    /// ZeRO stage 0–3: 1 splits optimizer states (and master weights) across GPUs, 2 gradients
    /// too, 3 the weights too.
    pub zero: u8,
    pub gpus: u64,
}

impl TrainSetup {
    /// The articles' rule: F32 weights, F32 gradients, F32 Adam, one GPU.
    pub fn fp32_adam() -> Self {
        Self { weight_bytes: 4, master_f32: false, optimizer: Optimizer::Adamw, zero: 0, gpus: 1 }
    }

    /// BF16 weights and gradients, an F32 master copy and F32 Adam states (the usual mixed precision).
    pub fn mixed_bf16() -> Self {
        Self { weight_bytes: 2, master_f32: true, optimizer: Optimizer::Adamw, zero: 0, gpus: 1 }
    }
}

/// Bytes per GPU of what a training step keeps besides activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TrainLedger {
    pub weights: u64,
    pub gradients: u64,
    pub master: u64,
    pub optimizer: u64,
}

impl TrainLedger {
    pub fn total(&self) -> u64 {
        self.weights + self.gradients + self.master + self.optimizer
    }
}

/// The ledger of `params` parameters under `setup`. Gradients have the weights' dtype; ZeRO
/// divides a part by the GPU count (rounded up) from the stage that shards it.
pub fn ledger(params: u64, setup: &TrainSetup) -> TrainLedger {
    let gpus = setup.gpus.max(1);
    let shard = |bytes: u64, from_stage: u8| if setup.zero >= from_stage { bytes.div_ceil(gpus) } else { bytes };
    TrainLedger {
        weights: shard(params * setup.weight_bytes, 3),
        gradients: shard(params * setup.weight_bytes, 2),
        master: shard(if setup.master_f32 { 4 * params } else { 0 }, 1),
        optimizer: shard(setup.optimizer.state_bytes(params), 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P7: u64 = 7_615_616_512;

    #[test]
    fn the_articles_112_gb() {
        // 16 B per parameter: the articles' 7e9 parameters give 112 GB exactly.
        assert_eq!(ledger(7_000_000_000, &TrainSetup::fp32_adam()).total(), 112_000_000_000);
        // Qwen2.5-7B's real count: 121,849,864,192 B.
        assert_eq!(ledger(P7, &TrainSetup::fp32_adam()).total(), 16 * P7);
    }

    #[test]
    fn mixed_precision_saves_nothing_on_states() {
        // BF16 weights and grads (4 B) + F32 master (4 B) + F32 Adam (8 B): 16 B, the same as FP32.
        let mixed = ledger(P7, &TrainSetup::mixed_bf16());
        assert_eq!(mixed.total(), 16 * P7);
        assert_eq!((mixed.weights, mixed.gradients, mixed.master, mixed.optimizer), (2 * P7, 2 * P7, 4 * P7, 8 * P7));
        // BF16 states without a master copy: 8 B per parameter.
        let lean = TrainSetup { master_f32: false, optimizer: Optimizer::AdamwBf16, ..TrainSetup::mixed_bf16() };
        assert_eq!(ledger(P7, &lean).total(), 8 * P7);
        // 8-bit Adam: 2 B of moments plus a scale per 2,048 values each.
        assert_eq!(Optimizer::Adamw8bit.state_bytes(4096), 2 * (4096 + 8));
        assert_eq!(Optimizer::Sgd.state_bytes(P7), 0);
    }

    #[test]
    fn zero_stages_divide_what_they_shard() {
        let base = TrainSetup { gpus: 8, ..TrainSetup::mixed_bf16() };
        let at = |zero| ledger(P7, &TrainSetup { zero, ..base });
        assert_eq!(at(0).total(), 16 * P7);
        // Stage 1: master and states over 8 GPUs: 2 + 2 + 12 / 8 = 5.5 B per parameter.
        assert_eq!(at(1), TrainLedger { weights: 2 * P7, gradients: 2 * P7, master: P7 / 2, optimizer: P7 });
        // Stage 2: gradients too: 2 + (2 + 12) / 8 = 3.75 B.
        assert_eq!(at(2).gradients, (2 * P7).div_ceil(8));
        // Stage 3: everything: 16 / 8 = 2 B.
        assert_eq!(at(3).total(), 2 * P7);
        // One GPU: ZeRO changes nothing.
        assert_eq!(ledger(P7, &TrainSetup { zero: 3, gpus: 1, ..base }).total(), 16 * P7);
    }
}
