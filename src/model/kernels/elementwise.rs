//! The prefill's element-wise BF16 ops on a GPU, eight values a thread (`elementwise.cu`): the
//! residual adds, a product's bias, the gate × up product and the heads-first copy of q and k.
//! Each returns None where it does not apply (not BF16 on a GPU, not contiguous, a length not a
//! multiple of 8, a start not 16-byte aligned, a gradient to track), and the caller takes candle's.
//! The output is a new tensor of the input's size, as candle's, so the ledger's moments stay.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("elementwise.cu");

/// The kernels compiled to PTX by NVRTC (no GPU needed), once per process (`target::arch`; the
/// BF16 `fma` needs compute 8.0).
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "element-wise", 80, || SOURCE.to_string())
}

/// The inputs as the kernels take them: their device and start pointers, when every one is BF16,
/// contiguous, on a GPU of compute 8.0+, starts on 16 bytes, holds a multiple of 8 values and
/// carries no gradient's history (training's ops stay candle's, which record it).
struct Inputs {
    dev: CudaDevice,
    ptrs: Vec<u64>,
}

/// `ts` as `Inputs`, or None where the kernels do not take them.
fn takes(ts: &[&Tensor]) -> Result<Option<Inputs>> {
    let candle_core::Device::Cuda(dev) = ts[0].device() else { return Ok(None) };
    if super::target::capability(dev).is_none_or(|(major, _)| major < 8) {
        return Ok(None);
    }
    let stream = dev.cuda_stream();
    let mut ptrs = Vec::with_capacity(ts.len() + 1);
    for t in ts {
        if t.dtype() != DType::BF16 || !t.is_contiguous() || !t.elem_count().is_multiple_of(8) || t.track_op() {
            return Ok(None);
        }
        let p = crate::memory::cuda_copy::start_ptr(t, &stream)?;
        if p % 16 != 0 {
            return Ok(None);
        }
        ptrs.push(p);
    }
    Ok(Some(Inputs { dev: dev.clone(), ptrs }))
}

/// Launches `name` (inputs, out, n8, extra...) over the n8 runs of eight values of a new output
/// of `shape`.
fn launch(inputs: Inputs, name: &str, shape: Vec<usize>, extra: &[i32]) -> Result<Tensor> {
    let Inputs { dev, mut ptrs } = inputs;
    let func = dev.get_or_load_custom_func(name, "vram_lab_elementwise", &ptx()?)?.into_cuda_function();
    super::target::launchable(&func, name, 256)?;
    let stream = dev.cuda_stream();
    let out = crate::memory::cuda_copy::uninit(&dev, DType::BF16, shape)?;
    ptrs.push(crate::memory::cuda_copy::start_ptr(&out, &stream)?);
    let runs = out.elem_count() / 8;
    let n8 = runs as i64;
    // Enough blocks to fill any card several times over; each thread loops over the rest.
    let blocks = runs.div_ceil(256).clamp(1, 65_536) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut l = stream.launch_builder(&func);
    for p in &ptrs {
        l.arg(p);
    }
    l.arg(&n8);
    for e in extra {
        l.arg(e);
    }
    // SAFETY: every input holds n8 runs of eight BF16 values (the bias cols8 runs, `extra`), out
    // n8 runs; each thread reads and writes runs below n8 (heads_first reads the same n8 runs of x
    // in another order).
    unsafe { l.launch(cfg) }.map_err(|e| LabError::other(format!("{name} kernel: {e:?}")))?;
    Ok(out)
}

/// a + b of the same shape.
pub fn add(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    if a.dims() != b.dims() {
        return Ok(None);
    }
    let Some(inputs) = takes(&[a, b])? else { return Ok(None) };
    launch(inputs, "vram_lab_add_bf16", a.dims().to_vec(), &[]).map(Some)
}

/// a · b of the same shape.
pub fn mul(a: &Tensor, b: &Tensor) -> Result<Option<Tensor>> {
    if a.dims() != b.dims() {
        return Ok(None);
    }
    let Some(inputs) = takes(&[a, b])? else { return Ok(None) };
    launch(inputs, "vram_lab_mul_bf16", a.dims().to_vec(), &[]).map(Some)
}

/// x + bias, the bias [cols] added to every row of x [.., cols].
pub fn bias_add(x: &Tensor, bias: &Tensor) -> Result<Option<Tensor>> {
    let cols = bias.elem_count();
    if bias.rank() != 1 || x.dims().last() != Some(&cols) {
        return Ok(None);
    }
    let Some(inputs) = takes(&[x, bias])? else { return Ok(None) };
    launch(inputs, "vram_lab_bias_add_bf16", x.dims().to_vec(), &[(cols / 8) as i32]).map(Some)
}

/// x [b, s, n · d] as [b, n, s, d], contiguous.
pub fn heads_first(x: &Tensor, n: usize, d: usize) -> Result<Option<Tensor>> {
    let (b, s, nd) = x.dims3()?;
    if nd != n * d || !d.is_multiple_of(8) {
        return Ok(None);
    }
    let Some(inputs) = takes(&[x])? else { return Ok(None) };
    launch(inputs, "vram_lab_heads_first_bf16", vec![b, n, s, d], &[s as i32, n as i32, (d / 8) as i32]).map(Some)
}
