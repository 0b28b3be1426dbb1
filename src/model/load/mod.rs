//! Where a model's weights and text come from: sources (synthetic, safetensors, GGUF, the Hub),
//! the weights they hand out, the Hub's files and headers, checkpoints, the staged upload to a
//! GPU, tokenizers and chat templates.

pub mod chat;
pub mod checkpoint;
pub mod hub;
pub mod source;
pub mod synthetic;
pub mod tokenizer;
pub mod upload;
pub mod weights;
