//! Decoding a token at a time: the inputs and kernels of one static step (`step`) and the
//! decoder that captures the step as a CUDA graph and replays it (`graph`).

pub mod graph;
pub mod step;

pub use graph::StaticDecoder;
pub use step::{OwnKernels, StepInputs, Tables};
