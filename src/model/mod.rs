//! What a model is and how it runs: config, weights, the forward pass, cache, attention,
//! generation, and GGUF quantization.

pub mod attention;
pub mod chat;
pub mod checkpoint;
pub mod config;

pub mod decode;
pub mod decoder;
pub mod generate;
pub mod gguf;
pub mod host_attention;
pub mod host_linear;
pub mod hub;
pub mod kernels;
pub mod kv_cache;
pub mod optim;
pub mod parallel;
pub mod placement;
pub mod precision;
pub mod profile;
pub mod quantize;
pub mod sampling;
pub mod source;
pub mod streamer;
pub mod tokenizer;
pub mod train;
pub mod upload;
pub mod weights;

pub use attention::AttentionMode;
pub use config::{DecoderConfig, Family, TensorSpec};
pub use decoder::{Decoder, Logits};
pub use generate::{generate, GenerateConfig, Generation};
pub use kv_cache::{CacheKind, KvCache};
pub use precision::Precision;
pub use source::{LoadedModel, ModelSource, SourceOptions};
