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

    /// The entry point `f` of `module` (compiled from `ptx` the first time; candle caches it),
    /// checked to launch with `threads` per block on the card the binary is built for.
    pub fn load(&self, module: &str, ptx: &str, f: &str, threads: u32) -> Result<CudaFunction> {
        let func = self.dev.get_or_load_custom_func(f, module, ptx)?.into_cuda_function();
        launchable(&func, f, threads)?;
        Ok(func)
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

/// The compute capability the binary was built for: `CUDA_COMPUTE_CAP` at build time (candle's
/// kernels are PTX for it; 89 for an RTX 4090, 86 for an RTX 3090 or A4000), None when the build
/// left it to candle's detection.
pub fn built_for() -> Option<u32> {
    option_env!("VRAM_LAB_COMPUTE_CAP").and_then(|c| c.parse().ok())
}

/// `source()` compiled to PTX by NVRTC (no GPU needed) once per process into `cell`, for the
/// capability the build names or at least `min` (`arch`); `what` names the kernel in an error.
pub fn compile(
    cell: &'static std::sync::OnceLock<String>,
    what: &str,
    min: u32,
    source: impl FnOnce() -> String,
) -> Result<String> {
    compile_with(cell, what, arch(min), source)
}

/// `compile` for one named virtual architecture (`compute_90a`: instructions of 9.0 alone).
pub fn compile_for(
    cell: &'static std::sync::OnceLock<String>,
    what: &str,
    arch: &'static str,
    source: impl FnOnce() -> String,
) -> Result<String> {
    compile_with(cell, what, Some(arch), source)
}

fn compile_with(
    cell: &'static std::sync::OnceLock<String>,
    what: &str,
    arch: Option<&'static str>,
    source: impl FnOnce() -> String,
) -> Result<String> {
    use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    crate::memory::cuda_copy::ptx_once(cell, || {
        let opts = CompileOptions { arch, ..Default::default() };
        Ok(compile_ptx_with_opts(source(), opts)
            .map_err(|e| crate::error::LabError::other(format!("{what} kernel: {e:?}")))?
            .to_src())
    })
}

/// NVRTC's virtual architecture for a kernel that needs at least `min` (the tensor-core kernel:
/// 80): the build's capability when it names one, so a build for an RTX 4090 runs 8.9 PTX here
/// too (the driver compiles it for a newer card), else `min`.
pub fn arch(min: u32) -> Option<&'static str> {
    let cap = built_for().map_or(min, |c| c.max(min));
    Some(match cap {
        0 => return None,
        1..=80 => "compute_80",
        81..=86 => "compute_86",
        87 => "compute_87",
        88..=89 => "compute_89",
        _ => "compute_90",
    })
}

/// Shared memory one block may use on a card of compute capability `cap` (the opt-in maximum,
/// CUDA Programming Guide's table of technical specifications): 8.6 and 8.9 have 99 KiB, 8.0
/// and 8.7 163 KiB, 9.0 227 KiB.
pub fn shared_per_block(cap: u32) -> u32 {
    match cap {
        86 | 89 => 99 * 1024,
        80 | 87 => 163 * 1024,
        _ if cap >= 90 => 227 * 1024,
        _ => 48 * 1024,
    }
}

/// Refuses a kernel that would not launch with `threads` per block on the card the binary is
/// built for (9.0, the H100's and H200's, when the build names none): more shared memory than
/// that card gives a block, or more threads than its registers allow.
pub fn launchable(f: &CudaFunction, name: &str, threads: u32) -> Result<()> {
    launchable_with(f, name, threads, 0)
}

/// `launchable` for a kernel that also asks for `dynamic` bytes of shared memory at launch.
pub fn launchable_with(f: &CudaFunction, name: &str, threads: u32, dynamic: u32) -> Result<()> {
    let shared = f.shared_size_bytes().map_err(|e| crate::error::LabError::other(format!("{name}: {e:?}")))? as u32;
    let shared = shared + dynamic;
    let most = f.max_threads_per_block().map_err(|e| crate::error::LabError::other(format!("{name}: {e:?}")))? as u32;
    let cap = built_for().unwrap_or(90);
    if shared > shared_per_block(cap) || threads > most {
        return Err(crate::error::LabError::other(format!(
            "kernel {name}: {shared} B of shared memory and {threads} threads a block; compute {}.{} gives a block {} B and this build of it {most} threads",
            cap / 10,
            cap % 10,
            shared_per_block(cap)
        )));
    }
    Ok(())
}
