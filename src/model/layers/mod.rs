//! The decoder's layers: the linear layer (dense, quantized, on the host, a tensor-parallel
//! rank's share, which sums across ranks through `comm`), the embedding, attention, the KV cache,
//! the element-wise ops between them, and a decoding step's inputs and kernels (`step`).

pub mod attention;
pub mod comm;
pub mod elementwise;
pub mod embedding;
pub mod kv_cache;
pub mod linear;
pub mod step;
