//! The offload stage's config: the modes (full GPU, placed by layers, streamed, CUDA managed
//! memory), the budget, the prompt and the tokens to decode.

use crate::limits;
use crate::model::offload::placement::Strategy;
use crate::model::Precision;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// everything on the GPU (no budget)
    Full,
    /// the first layers on the GPU, the rest computed on the CPU (llama.cpp's -ngl)
    Split,
    /// the rest copied layer by layer into two GPU buffers, overlapped with compute
    Streamed,
    /// the rest shared between streaming and CPU compute by bandwidth
    Hybrid,
    /// cudaMallocManaged, no advice
    Managed,
    /// managed, preferred location CPU
    ManagedPreferCpu,
    /// managed, read-mostly
    ManagedReadMostly,
    /// managed, prefetched to the GPU before generating
    ManagedPrefetch,
    /// what fits the budget in device memory (split's layers), the rest in managed memory
    /// preferred on the CPU and read by the GPU through the mapping every token
    ManagedSplit,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Managed => "managed",
            Self::ManagedPreferCpu => "managed-prefer-cpu",
            Self::ManagedReadMostly => "managed-read-mostly",
            Self::ManagedPrefetch => "managed-prefetch",
            Self::ManagedSplit => "managed-split",
            placed => placed.strategy().map(Strategy::name).unwrap_or_default(),
        }
    }

    pub fn strategy(self) -> Option<Strategy> {
        match self {
            Self::Full => Some(Strategy::Full),
            Self::Split => Some(Strategy::Split),
            Self::Streamed => Some(Strategy::Streamed),
            Self::Hybrid => Some(Strategy::Hybrid),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
pub struct OffloadConfig {
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = OffloadConfig::default().modes)]
    pub modes: Vec<Mode>,
    /// What the lab may allocate on the GPU for split/streamed/hybrid (the report: 5GiB)
    #[arg(long, default_value_t = OffloadConfig::default().gpu_budget)]
    pub gpu_budget: String,
    /// Part of the budget kept for the KV cache, activations and workspace, MiB
    #[arg(long, default_value_t = OffloadConfig::default().reserve_mib, value_parser = limits::mib_f64)]
    pub reserve_mib: f64,
    #[arg(long, value_enum, default_value_t = OffloadConfig::default().precision)]
    pub precision: Precision,
    #[arg(long, default_value_t = OffloadConfig::default().prompt, value_parser = limits::count(limits::MAX_SEQ))]
    pub prompt: usize,
    /// Tokens decoded per mode (the report: 50)
    #[arg(long, default_value_t = OffloadConfig::default().new_tokens, value_parser = limits::count(limits::MAX_NEW_TOKENS))]
    pub new_tokens: usize,
    /// Allow more managed memory than the GPU has free. Only on your own workstation: on a
    /// shared GPU it can hang the whole device. Never used in tests or CI.
    #[arg(long, default_value_t = false)]
    pub oversubscribe: bool,
    /// JSON lines of `scripts/reference/pytorch_reference.py offload` run on the same GPU
    #[arg(long)]
    pub pytorch: Option<PathBuf>,
    /// JSON lines of llama.cpp's `llama-bench -o jsonl` with an `-ngl` sweep, run on the same GPU
    /// (`LLAMA_NGL=… scripts/reference/llama_bench.sh run`): a row per `-ngl` below every layer
    #[arg(long)]
    pub llama_cpp: Option<PathBuf>,
    /// The oversubscription case predicted on paper: this model …
    #[arg(long, default_value_t = OffloadConfig::default().predict_model)]
    pub predict_model: String,
    /// … on this card
    #[arg(long, default_value_t = OffloadConfig::default().predict_card)]
    pub predict_card: String,
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            modes: vec![
                Mode::Full,
                Mode::Split,
                Mode::Streamed,
                Mode::Hybrid,
                Mode::Managed,
                Mode::ManagedPreferCpu,
                Mode::ManagedReadMostly,
                Mode::ManagedPrefetch,
                Mode::ManagedSplit,
            ],
            gpu_budget: "5GiB".into(),
            reserve_mib: 512.0,
            precision: Precision::Bf16,
            prompt: 32,
            new_tokens: 32,
            oversubscribe: false,
            pytorch: None,
            llama_cpp: None,
            predict_model: "qwen2.5-14b".into(),
            predict_card: "rtx4090".into(),
        }
    }
}
