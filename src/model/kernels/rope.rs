//! Rotary embedding for BF16 on CUDA, rounded the same on every compute capability: each product
//! rounded to BF16, then their sum (`rope.cu` says why candle's kernel does not). Other dtypes and
//! devices take candle's `rope`, whose F32 and CPU results already agree across builds.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("rope.cu");

/// The kernel compiled to PTX by NVRTC (no GPU needed), once per process, for the capability the
/// build names (`target::arch`).
fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "rope", 0, || format!("{}{SOURCE}", super::target::COMMON))
}

/// `x` [b, heads, t, d] rotated by `cos`, `sin` ([tc, d/2] or [b, tc, d/2], tc >= t, the first t
/// rows used), as candle's `rope` takes them; None when this kernel does not take them (not BF16
/// on a GPU, not contiguous): the caller uses candle's.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Option<Tensor>> {
    let candle_core::Device::Cuda(dev) = x.device() else { return Ok(None) };
    let (b, heads, t, d) = x.dims4()?;
    let per_batch = cos.rank() == 3;
    if cos.rank() < 2 {
        return Ok(None);
    }
    let tc = cos.dim(cos.rank() - 2)?;
    let table = if per_batch { vec![b, tc, d / 2] } else { vec![tc, d / 2] };
    let takes = d % 2 == 0
        && tc >= t
        && [x, cos, sin].iter().all(|z| z.dtype() == DType::BF16 && z.is_contiguous())
        && cos.dims() == table.as_slice()
        && sin.dims() == table.as_slice();
    if !takes {
        return Ok(None);
    }
    let stream = dev.cuda_stream();
    let ptr = |z: &Tensor| crate::memory::cuda_copy::start_ptr(z, &stream);
    let out = crate::memory::cuda_copy::uninit(dev, DType::BF16, vec![b, heads, t, d])?;
    let (px, pc, ps, py) = (ptr(x)?, ptr(cos)?, ptr(sin)?, ptr(&out)?);
    // Eight pairs a thread where rows and table rows start on 16 bytes, else one.
    let eight = d % 16 == 0 && [px, pc, ps, py].iter().all(|p| p % 16 == 0);
    let (name, threads) = if eight {
        ("vram_lab_rope8_bf16", b * heads * t * d / 16)
    } else {
        ("vram_lab_rope_bf16", b * heads * t * d / 2)
    };
    let func = dev.get_or_load_custom_func(name, "vram_lab_rope", &ptx()?)?.into_cuda_function();
    super::target::launchable(&func, name, 256)?;
    let cfg =
        LaunchConfig { grid_dim: ((threads as u32).div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let (b_, heads_, t_, d_, tc_, pb) = (b as i32, heads as i32, t as i32, d as i32, tc as i32, per_batch as i32);
    let mut l = stream.launch_builder(&func);
    l.arg(&px).arg(&pc).arg(&ps).arg(&py).arg(&b_).arg(&heads_).arg(&t_).arg(&d_).arg(&tc_).arg(&pb);
    // SAFETY: x and out hold b·heads·t·d elements, cos and sin the table checked above; one
    // thread per pair (or run of eight pairs) reads and writes within them.
    unsafe { l.launch(cfg) }.map_err(|e| LabError::other(format!("rope kernel: {e:?}")))?;
    Ok(Some(out))
}
