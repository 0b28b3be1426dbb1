//! Where a model's weights and text come from (opened and loaded by `model::source`): synthetic
//! weights, safetensors, the weights they hand out, the Hub's files and headers, checkpoints, the
//! staged upload to a GPU, tokenizers (a GGUF file's too: `gguf_tokenizer`) and chat templates.

pub mod chat;
pub mod checkpoint;
pub mod gguf_tokenizer;
pub mod hub;
pub mod synthetic;
pub mod tokenizer;
pub mod upload;
pub mod weights;
