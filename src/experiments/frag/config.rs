//! The allocator stage's config: the report's sequence (blocks, sizes, the request), the
//! policies driven, the false-OOM layouts.

use crate::limits;
use crate::memory::policy::Policy;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the false-OOM experiment lays its blocks out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Each block mapped afresh
    Fresh,
    /// The blocks carved out of one large allocation freed just before (a model's activations, say)
    Reused,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
            Self::Reused => "reused",
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct FragConfig {
    /// Allocator policies, each run in turn
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = FragConfig::default().policies)]
    pub policies: Vec<Policy>,
    /// The report's sequence: this many blocks…
    #[arg(long, default_value_t = FragConfig::default().blocks, value_parser = limits::count(limits::MAX_REPEATS))]
    pub blocks: usize,
    /// …of this many MiB each (the report's "500 MB" is 500 × 1024² bytes)
    #[arg(long, default_value_t = FragConfig::default().block_mib, value_parser = limits::mib())]
    pub block_mib: u64,
    /// …then one request of this many MiB
    #[arg(long, default_value_t = FragConfig::default().request_mib, value_parser = limits::mib())]
    pub request_mib: u64,
    /// False OOM: layouts to try
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = FragConfig::default().layouts)]
    pub layouts: Vec<Layout>,
    /// False OOM: the blocks that fill the card, MiB
    #[arg(long, default_value_t = FragConfig::default().hole_mib, value_parser = limits::mib())]
    pub hole_mib: u64,
    /// False OOM: the request, MiB (larger than a hole, smaller than the holes together)
    #[arg(long, default_value_t = FragConfig::default().hole_request_mib, value_parser = limits::mib())]
    pub hole_request_mib: u64,
    /// PyTorch's figures from `scripts/reference/pytorch_reference.py frag` on the same GPU (JSON lines)
    #[arg(long)]
    pub pytorch: Option<PathBuf>,
    /// The card the model stands for when no GPU runs (CPU)
    #[arg(long, default_value_t = FragConfig::default().model_card)]
    pub model_card: String,
}

impl Default for FragConfig {
    fn default() -> Self {
        Self {
            policies: vec![Policy::Pool, Policy::Caching, Policy::Sync],
            blocks: 10,
            block_mib: 500,
            request_mib: 2048,
            layouts: vec![Layout::Fresh, Layout::Reused],
            hole_mib: 512,
            hole_request_mib: 2048,
            pytorch: None,
            model_card: "rtx4090".into(),
        }
    }
}
