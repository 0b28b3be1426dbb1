//! The leak stage's config: the demos (a KV cache kept alive, batches grown until OOM, autograd
//! holding its graph) and their sizes.

use crate::limits;
use crate::model::Precision;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Demo {
    /// KV caches kept across requests vs dropped
    Kv,
    /// A batch that overflows vs the largest batch the ledger says fits
    Batch,
    /// Trainable weights (autograd graph kept) vs plain tensors
    Autograd,
}

impl Demo {
    pub fn name(self) -> &'static str {
        match self {
            Self::Kv => "kv_cache_kept",
            Self::Batch => "batch_overflow",
            Self::Autograd => "autograd_graph_kept",
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct LeaksConfig {
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = LeaksConfig::default().demos)]
    pub demos: Vec<Demo>,
    #[arg(long, value_enum, default_value_t = LeaksConfig::default().precision)]
    pub precision: Precision,
    /// Requests (kv demo) and forward passes (autograd demo) per run
    #[arg(long, default_value_t = LeaksConfig::default().requests, value_parser = limits::count(limits::MAX_REPEATS))]
    pub requests: usize,
    /// Prompt length of each request / forward pass
    #[arg(long, default_value_t = LeaksConfig::default().prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt: usize,
    /// Tokens generated per request (kv demo)
    #[arg(long, default_value_t = LeaksConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// Tokens of each forward pass of the autograd demo (its trainable run keeps every layer's activations during the pass)
    #[arg(long, default_value_t = LeaksConfig::default().graph_prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub graph_prompt: usize,
    /// Sequence length of the batch demo
    #[arg(long, default_value_t = LeaksConfig::default().seq, value_parser = limits::count(limits::MAX_SEQ))]
    pub seq: usize,
    /// Growth of allocated memory between two marks above this is flagged (the article: 100 MB)
    #[arg(long, default_value_t = LeaksConfig::default().threshold_mib, value_parser = limits::mib_f64)]
    pub threshold_mib: f64,
    /// A slow leak: three consecutive growths each above this are flagged too, MiB
    #[arg(long, default_value_t = LeaksConfig::default().noise_mib, value_parser = limits::mib_f64)]
    pub noise_mib: f64,
    /// Batch demo without an emulated card: the capacity given above the weights, MiB (0: the device's own)
    #[arg(long, default_value_t = LeaksConfig::default().batch_room_mib, value_parser = limits::mib_f64)]
    pub batch_room_mib: f64,
}

impl Default for LeaksConfig {
    fn default() -> Self {
        Self {
            demos: vec![Demo::Kv, Demo::Batch, Demo::Autograd],
            precision: Precision::Bf16,
            requests: 4,
            prompt: 2048,
            new_tokens: 16,
            graph_prompt: 256,
            seq: 1024,
            threshold_mib: 100.0,
            noise_mib: 1.0,
            batch_room_mib: 0.0,
        }
    }
}
