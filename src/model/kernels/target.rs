//! What the launchers of the step's kernels (`decode`, `quant_gemv`) share: the source both
//! `.cu` files start with, and the device and activation dtype they are built for, with the
//! checks and pointers of the tensors they are given.

use crate::error::Result;
use candle_core::cuda_backend::cudarc::driver::CudaFunction;
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

/// Put before each kernel source: BF16 and F32 loads and stores, a warp's sum (`common.cuh`).
pub const COMMON: &str = include_str!("common.cuh");

/// The device and activation dtype a family of kernels was compiled and loaded for.
#[derive(Clone)]
pub struct Target {
    pub dev: CudaDevice,
    pub dtype: DType,
}

impl Target {
    /// The target for activations in `dtype`, or None for a dtype the kernels have no variant
    /// for (F16: the step then uses candle's kernels).
    pub fn new(dev: &CudaDevice, dtype: DType) -> Option<Self> {
        matches!(dtype, DType::BF16 | DType::F32).then(|| Self { dev: dev.clone(), dtype })
    }

    /// The dtype as the kernels' names spell it.
    pub fn name(&self) -> &'static str {
        if self.dtype == DType::BF16 {
            "bf16"
        } else {
            "f32"
        }
    }

    /// The entry point `f` of `module` (compiled from `ptx` the first time; candle caches it).
    pub fn load(&self, module: &str, ptx: &str, f: &str) -> Result<CudaFunction> {
        Ok(self.dev.get_or_load_custom_func(f, module, ptx)?.into_cuda_function())
    }

    /// Where `t` starts in device memory.
    pub fn ptr(&self, t: &Tensor) -> Result<u64> {
        crate::memory::cuda_copy::device_ptr(t, &self.dev.cuda_stream()).map(|(p, _)| p)
    }

    /// Whether every tensor is contiguous in the kernels' dtype.
    pub fn ours(&self, ts: &[&Tensor]) -> bool {
        ts.iter().all(|t| t.dtype() == self.dtype && t.is_contiguous())
    }
}
