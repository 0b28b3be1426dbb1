//! Qwen2 as the lab runs it, as candle-transformers' `qwen2.rs` reads: plain structs with `new` and
//! `forward`. The linear layer (`linear`), the token embedding (`embedding`), the decoder layer
//! (`layer`), a CPU layer's decoding step (`host_step`), the model (`model`) and the model as
//! trainable variables (`trainable`), moving a pass's tensors between devices (`crossing`). The
//! config is `model::config`.

pub use super::config;
pub mod crossing;
pub mod embedding;
pub mod host_step;
pub mod layer;
pub mod linear;
pub mod model;
pub mod trainable;

pub use model::{last_logits, Logits, Qwen2};
