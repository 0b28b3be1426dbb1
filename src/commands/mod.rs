//! The commands that are not stages: `generate` (the quickest check that a model loaded right),
//! `parity` (each precision's logits on this device beside F32's on the CPU), `quantize` (write a
//! GGUF with one of llama.cpp's recipes), `info` (device, cards, presets) and `watch` (a process's
//! GPU memory over time, as the related article's pynvml monitor).

pub mod generate;
pub mod info;
pub mod parity;
pub mod quantize;
pub mod watch;

pub use generate::{generate, GenerateArgs};
pub use info::info;
pub use parity::{parity, ParityArgs};
pub use quantize::quantize;
pub use watch::{watch, WatchArgs};
