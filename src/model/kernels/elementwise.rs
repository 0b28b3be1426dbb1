//! The prefill's element-wise BF16 ops on a GPU, eight values a thread (`elementwise.cu`): the
//! residual adds, a product's bias, silu and the gate × up product, the heads-first copy of q and
//! k, and the RMS norm (a row at a time, read once).
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
    if crate::memory::cuda::compute_capability(dev).is_none_or(|(major, _)| major < 8) {
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
    let runs = shape.iter().product::<usize>() / 8;
    // Enough blocks to fill any card several times over; each thread loops over the rest.
    let blocks = runs.div_ceil(256).clamp(1, 65_536) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    launch_with(inputs, name, shape, cfg, runs as i64, extra)
}

/// `launch` with its own grid: `n` is the kernel's first count (runs of eight, or rows).
fn launch_with(
    inputs: Inputs,
    name: &str,
    shape: Vec<usize>,
    cfg: LaunchConfig,
    n: i64,
    extra: &[i32],
) -> Result<Tensor> {
    let Inputs { dev, mut ptrs } = inputs;
    let func = dev.get_or_load_custom_func(name, "vram_lab_elementwise", &ptx()?)?.into_cuda_function();
    super::target::launchable_with(&func, name, 256, cfg.shared_mem_bytes)?;
    let stream = dev.cuda_stream();
    let out = crate::memory::cuda_copy::uninit(&dev, DType::BF16, shape)?;
    ptrs.push(crate::memory::cuda_copy::start_ptr(&out, &stream)?);
    let mut l = stream.launch_builder(&func);
    for p in &ptrs {
        l.arg(p);
    }
    l.arg(&n);
    for e in extra {
        l.arg(e);
    }
    // SAFETY: every input holds n runs of eight BF16 values (the bias cols8 runs, `extra`), out
    // n runs; each thread reads and writes runs below n (heads_first reads the same n runs of x in
    // another order). For the norm, n is the rows: x and out hold n rows of cols, w one row, and
    // the row fits the shared memory asked for.
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

/// silu(x), as candle's `silu`.
pub fn silu(x: &Tensor) -> Result<Option<Tensor>> {
    let Some(inputs) = takes(&[x])? else { return Ok(None) };
    launch(inputs, "vram_lab_silu_bf16", x.dims().to_vec(), &[]).map(Some)
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

/// RMS norm of x [.., cols] by w [cols], candle's `rms_norm` bit for bit, for rows of 1024 values
/// or more (candle folds a narrower row with one warp, in another order). One block of 256 a row.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Option<Tensor>> {
    let cols = w.elem_count();
    // A row in shared memory without the opt-in above 48 KiB: 24,576 values (hidden sizes run to 16,384).
    if w.rank() != 1 || x.dims().last() != Some(&cols) || !(1024..=24_576).contains(&cols) || !cols.is_multiple_of(8) {
        return Ok(None);
    }
    let Some(inputs) = takes(&[x, w])? else { return Ok(None) };
    let rows = x.elem_count() / cols;
    let cfg = LaunchConfig {
        grid_dim: (rows.clamp(1, 1 << 20) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: (cols * 2) as u32,
    };
    let extra = [cols as i32, eps.to_bits() as i32];
    launch_with(inputs, "vram_lab_rms_norm_bf16", x.dims().to_vec(), cfg, rows as i64, &extra).map(Some)
}
