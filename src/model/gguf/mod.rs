//! GGUF as a format: ggml's types (`types`), the header read by the lab (`header`), llama.cpp's
//! quantization recipes (`recipe`), the writer (`writer`), the tokenizer a file carries
//! (`tokenizer`), names and shapes (`names`), and a file as a weight source (`reader`).

pub mod header;
pub mod names;
pub mod reader;
pub mod recipe;
pub mod tokenizer;
pub mod types;
pub mod writer;

pub use names::{gguf_name, gguf_tensor, gguf_tensors};
pub use reader::Gguf;
