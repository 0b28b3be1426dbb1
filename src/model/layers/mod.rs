//! The decoder's layers: the linear layer (dense, quantized, on the host, a tensor-parallel
//! rank's share), the embedding, attention and the KV cache.

pub mod attention;
pub mod embedding;
pub mod kv_cache;
pub mod linear;
