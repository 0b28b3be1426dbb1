//! GGUF as a format: ggml's types (`types`), the header read by the lab (`header`), the MXFP4 block (`mxfp4`), llama.cpp's
//! quantization recipes (`recipe`), the writer (`writer`), names and shapes (`names`), Llama's q/k row order (`permute`), and a file as a weight source (`reader`).

pub mod header;
pub mod mxfp4;
pub mod names;
pub mod permute;
pub mod reader;
pub mod recipe;
pub mod types;
pub mod writer;

pub use names::{gguf_groups, gguf_name, gguf_tensor, gguf_tensors, Part};
pub use reader::Gguf;
