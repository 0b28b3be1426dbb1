//! What a model is and how it runs: config, weights, the forward pass, cache, attention,
//! generation, and GGUF quantization.

pub mod attention;
pub mod chat;
pub mod checkpoint;
pub mod config;
#[cfg(feature = "cuda")]
pub mod decode_kernels;
#[cfg(feature = "cuda")]
pub mod flash_attention;
pub mod generate;
pub mod gguf;
pub mod graph;
pub mod host_linear;
pub mod kv_cache;
pub mod optim;
pub mod placement;
pub mod profile;
pub mod precision;
pub mod quantize;
pub mod qwen2;
pub mod streamer;
pub mod tokenizer;
pub mod train;
pub mod source;
pub mod weights;

pub use attention::AttentionMode;
pub use config::{Qwen2Config, TensorSpec};
pub use generate::{generate, GenerateConfig, Generation};
pub use kv_cache::{CacheKind, KvCache};
pub use precision::Precision;
pub use qwen2::{Logits, Qwen2};
pub use source::{LoadedModel, ModelSource, SourceOptions};
