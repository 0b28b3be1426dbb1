//! What a model is and how it runs, by concern: the config (`config`), its layers (`layers`:
//! linear, embedding, attention, KV cache), the decoder built of them (`decoder`), where its
//! weights come from (`load`) and a source opened and loaded (`source`), GGUF (`gguf`), the CPU
//! path (`host`), the timers of a step across devices (`profile`), layers kept off the GPU
//! (`offload`), generating (`generate`), training (`train`), several GPUs (`parallel`), the
//! lab's CUDA kernels (`kernels`).

pub mod config;
pub mod decoder;
pub mod generate;
pub mod gguf;
pub mod host;
pub mod kernels;
pub mod layers;
pub mod load;
pub mod offload;
pub mod parallel;
pub mod precision;
pub mod profile;
pub mod quantize;
pub mod source;
pub mod train;

pub use config::{DecoderConfig, Family, TensorSpec};
pub use decoder::{Decoder, Logits};
pub use generate::{generate, GenerateConfig, Generation};
pub use layers::attention::AttentionMode;
pub use layers::kv_cache::{CacheKind, KvCache};
pub use precision::Precision;
pub use source::{LoadedModel, ModelSource, SourceOptions};
