//! The decoder's layers: the linear layer (dense, quantized, on the host, a tensor-parallel
//! rank's share), the embedding, attention, the KV cache and the element-wise ops between them.

pub mod attention;
pub mod elementwise;
pub mod embedding;
pub mod kv_cache;
pub mod linear;
