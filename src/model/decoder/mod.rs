//! The one decoder the lab runs for every family (Qwen2/2.5, Qwen3, Llama, Mistral, and the
//! mixtures Qwen3-MoE and Mixtral; the config says which parts a layer has), as
//! candle-transformers' model files read: plain structs with `new` and `forward`. It is built of the linear layer
//! (`model::layers::linear`), the token embedding (`model::layers::embedding`), the decoder layer (`layer`) and its mixture of
//! experts (`mixture`), its static decoding step (`static_step`), a CPU layer's decoding step
//! (`host_step`), the model (`model`) and the model as trainable variables (`trainable`), moving a
//! pass's tensors between devices (`crossing`). The config is `model::config`.

pub mod crossing;
pub mod host_step;
pub mod layer;
pub mod mixture;
pub mod model;
pub mod static_step;
pub mod streamer;
pub mod trainable;

pub use model::{last_logits, Decoder, Logits};
