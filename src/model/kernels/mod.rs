//! The lab's own CUDA kernels, each family's source in its `.cu` file (compiled by NVRTC at run
//! time, no GPU needed to build) with its Rust launcher beside it.

#[cfg(feature = "cuda")]
pub mod decode;
#[cfg(feature = "cuda")]
pub mod elementwise;
#[cfg(feature = "cuda")]
pub mod flash_attention;
pub mod fused;
#[cfg(feature = "cuda")]
pub mod peer_sum;
#[cfg(feature = "cuda")]
pub mod quant_gemv;
#[cfg(feature = "cuda")]
pub mod rope;
#[cfg(feature = "cuda")]
pub mod target;

pub use fused::{Fused, Part, Weights};
