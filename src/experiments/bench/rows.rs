//! What the bench stage varies and what each measurement gives back: the decoder's variants and
//! the rows of the decode and prefill tables before they become columns.

use crate::model::generate::DecodeTiming;
use crate::model::generate::OwnKernels;
use crate::model::Precision;
use crate::stage::Outcome;
use serde::{Deserialize, Serialize};

/// How the decoder layers compute their projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Variant {
    /// candle's defaults: q, k, v, gate and up as five products, cudarc's event tracking on.
    Separate,
    /// Event tracking off (the lab's default, `hw::set_event_tracking`), five products.
    Untracked,
    /// q|k|v and gate|up stacked at load: two products (dense weights only).
    Fused,
    /// Stacked, and the decoding step captured once as a CUDA graph and replayed (one launch
    /// per token); kernel by kernel on a CPU.
    Graph,
    /// The graph with the lab's kernel rotating q and k and storing k and v (seven of candle's
    /// kernels per layer in one).
    Kernel,
    /// And the lab's matrix-vector kernel for every product of the step (bias, residual and
    /// silu·up applied in it).
    Gemv,
    /// And the norms inside the products, attention in one kernel and the greedy pick: every
    /// kernel of the step the lab's but the embedding lookup (the lab's decoding loop). Its
    /// prefills take the fused attention kernel (`AttentionMode::Flash`) where it runs.
    Own,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Self::Separate => "separate",
            Self::Untracked => "untracked",
            Self::Fused => "fused",
            Self::Graph => "graph",
            Self::Kernel => "kernel",
            Self::Gemv => "gemv",
            Self::Own => "own",
        }
    }

    /// The lab's kernels a graph variant's step takes; None for the loops that are not a graph.
    pub(super) fn own_kernels(self) -> Option<OwnKernels> {
        match self {
            Self::Graph => Some(OwnKernels::None),
            Self::Kernel => Some(OwnKernels::Store),
            Self::Gemv => Some(OwnKernels::Products),
            Self::Own => Some(OwnKernels::All),
            Self::Separate | Self::Untracked | Self::Fused => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct DecodeRow {
    pub(super) precision: Precision,
    pub(super) variant: Variant,
    pub(super) batch: usize,
    pub(super) outcome: Outcome,
    pub(super) timing: DecodeTiming,
    pub(super) read_bytes: u64,
}

#[derive(Debug, Clone)]
pub(super) struct PrefillRow {
    pub(super) precision: Precision,
    pub(super) variant: Variant,
    pub(super) seq: usize,
    pub(super) outcome: Outcome,
    pub(super) seconds: f64,
    pub(super) peak: u64,
    pub(super) ledger_peak: u64,
}

/// How many of the first sequence's greedy ids this row shares, from the start, with the stacked
/// (Q4: the separate) loop of the same precision and batch: "n/m" (the same seeded prompt).
pub(super) fn same_ids(r: &DecodeRow, all: &[DecodeRow]) -> Option<String> {
    let base = if r.precision.is_quantized() { Variant::Separate } else { Variant::Fused };
    let other = all.iter().find(|o| o.precision == r.precision && o.batch == r.batch && o.variant == base)?;
    let n = r.timing.ids.len().min(other.timing.ids.len());
    let same = r.timing.ids.iter().zip(&other.timing.ids).take_while(|(a, b)| a == b).count();
    Some(format!("{same}/{n}"))
}
