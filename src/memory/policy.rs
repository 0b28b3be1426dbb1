//! The allocators' rules the lab measures by: the driver's granule, the stream-ordered pool's chunk
//! and slack, and the allocation policies the allocator stage drives (`device_arena`). The model
//! of what they do with a card's memory is `estimate::pool`.

use serde::{Deserialize, Serialize};

/// The driver's mapping granularity (and PyTorch's rounding of large blocks).
pub const GRANULE: u64 = 2 << 20;

/// What CUDA's stream-ordered pool maps at a time: its reserved bytes are always a multiple of
/// 32 MiB, and after a trim they are exactly the 32 MiB chunks (aligned in the address space)
/// that live allocations touch (`VRAM_LAB_ALLOC_TRACE` on an H200, CUDA 13.0, driver 580:
/// every trim of the prefills at the card's edge, `data/results/h200/2026-11-23-pool`).
pub const POOL_CHUNK: u64 = 32 << 20;

/// What the pool keeps mapped beyond the live bytes, per chunk of live allocations (each
/// counted up to one chunk, `estimate::transient::Chunked`), at the worst moment measured: a
/// tensor whose ends fell anywhere in their chunks would keep one chunk more; neighbours share
/// chunks. The traces' worst layer, BF16 at 33,792 tokens, kept 383 MiB at the MLP, whose 17
/// allocations count 15.26 chunks: 25.1 MiB each (`data/results/h200/2026-11-23-pool`,
/// checked by tests/estimate_check.rs). It is the worst, not the usual: a prefill that retries
/// layer after layer leaves more runs at each trim (Llama-2-7B 112 to 371 MiB over 13), one whose
/// edge is its first retry keeps 104-167 MiB (Qwen3-8B, Llama-3.1-8B, Mistral-7B: the search 3-4
/// steps short), and which one a prefill meets follows the pool's placement, not the live set's
/// shapes (`data/results/h200/2026-11-28-family-edges/RUN.md`). The page allocator bounds it
/// (`PAGE_SLACK`).
pub const POOL_SLACK: u64 = 25_703 << 10;

/// What the lab's page allocator keeps mapped beyond the live bytes, per chunk of live
/// allocations counted as for `POOL_SLACK`: a run of neighbours leaves at most a partly filled
/// 2 MiB page at each end, and small requests live apart (`memory::pages`). With it the ledger's
/// search was within one step of five families' edges (`data/results/h200/2026-11-28-pages`).
pub const PAGE_SLACK: u64 = 2 * GRANULE;

/// Where candle's device tensors are allocated (`--allocator`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Allocator {
    /// CUDA's stream-ordered pool, as candle uses it (32 MiB chunks)
    #[default]
    Pool,
    /// The lab's page allocator: 2 MiB pages mapped where live tensors lie (a GPU, the vram-lab
    /// binary; as PyTorch's expandable segments)
    Pages,
}

impl Allocator {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pool => "pool",
            Self::Pages => "pages",
        }
    }

    /// Bytes kept mapped beyond the live bytes per chunk of live allocations (`POOL_CHUNK`).
    pub fn slack(self) -> u64 {
        match self {
            Self::Pool => POOL_SLACK,
            Self::Pages => PAGE_SLACK,
        }
    }
}

pub fn round_up(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(GRANULE) * GRANULE
}

/// The allocators the lab drives on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// CUDA's stream-ordered pool as candle uses it: release threshold 0
    Pool,
    /// The same pool with the release threshold at its maximum: a caching allocator
    Caching,
    /// Plain synchronous cuMemAlloc / cuMemFree
    Sync,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pool => "pool",
            Self::Caching => "caching",
            Self::Sync => "sync",
        }
    }
}
