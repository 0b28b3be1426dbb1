//! Prefill attention in one kernel (`AttentionMode::Flash`, CUDA, BF16): the scores of a tile of
//! 128 queries against a tile of 64 keys live in registers, are masked, exponentiated and summed
//! there (the online softmax of FlashAttention-2), and only the output reaches memory. The bounded
//! path writes each chunk's scores, reads them back for the softmax and again for the product
//! with V; at 32k tokens that traffic, not arithmetic, set its time. Products use the tensor
//! cores (`mma.sync` m16n8k16, BF16 in, F32 sums), so the PTX targets compute 8.0 (RTX 30xx and
//! newer); on an older card, another dtype or head size, the caller falls back to bounded.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("flash_attention.cu");

/// The head sizes the kernel is built for (Qwen2.5: 64 for 0.5B, 128 from 1.5B).
pub const HEAD_DIMS: [usize; 2] = [64, 128];

/// The kernel compiled to PTX by NVRTC (no GPU needed), once per process: for compute 8.0, or
/// the capability the build names (`target::arch`).
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "flash attention", 80, || SOURCE.to_string())
}

/// Whether `dev` runs the kernel (compute capability 8.0 or newer: the tensor-core instructions).
pub fn supported(dev: &CudaDevice) -> bool {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute;
    dev.cuda_stream()
        .context()
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .is_ok_and(|major| major >= 8)
}

/// Queries a block takes, and keys a tile of K or V holds (`BR`, `BC` in `flash_attention.cu`).
const ROWS: usize = 128;
const KEYS: usize = 64;

/// How a block's 128 queries are shared among its warps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Eight warps of 16 rows, the queries in registers, 34 KiB of static shared memory (two tiles).
    Narrow,
    /// Four warps of 32 rows, the queries in shared memory too: half the reads of K and V from
    /// shared memory per product, 68 KiB (D = 128) of dynamic shared memory.
    Wide,
}

impl Layout {
    /// The layout for this process: `VRAM_LAB_FLASH` (`narrow` or `wide`) names one for a
    /// side-by-side timing in one binary; else `Narrow`.
    pub fn chosen() -> Result<Self> {
        match std::env::var("VRAM_LAB_FLASH").as_deref() {
            Err(_) | Ok("narrow") => Ok(Self::Narrow),
            Ok("wide") => Ok(Self::Wide),
            Ok(other) => Err(LabError::input(format!("VRAM_LAB_FLASH={other}: use narrow or wide"))),
        }
    }

    fn threads(self) -> u32 {
        match self {
            Self::Narrow => ROWS as u32 * 2,
            Self::Wide => ROWS as u32,
        }
    }

    /// Dynamic shared memory a block asks for: the wide layout's Q, K and V tiles (rows padded by 8).
    fn dynamic_shared(self, d: usize) -> u32 {
        match self {
            Self::Narrow => 0,
            Self::Wide => ((ROWS + 2 * KEYS) * (d + 8) * 2) as u32,
        }
    }

    fn kernel(self, d: usize) -> String {
        match self {
            Self::Narrow => format!("vram_lab_flash_bf16_d{d}_r{ROWS}"),
            Self::Wide => format!("vram_lab_flash_bf16_d{d}_wide"),
        }
    }
}

/// Causal attention of `q` [b, heads, s, d] (contiguous) over `k`, `v` [b, kv, offset + s, d]
/// (rows contiguous, heads and batches strided as a cache view is), the queries at positions
/// offset.. : [b, s, heads · d]. None when the kernel does not take them (not BF16 on a CUDA
/// device of compute 8.0+, a head size it is not built for): the caller computes it otherwise.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize) -> Result<Option<Tensor>> {
    attend_in(q, k, v, offset, Layout::chosen()?)
}

/// `attend` with the warps' layout named.
pub fn attend_in(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize, layout: Layout) -> Result<Option<Tensor>> {
    let candle_core::Device::Cuda(dev) = q.device() else { return Ok(None) };
    let (b, heads, s, d) = q.dims4()?;
    let (kb, kv, t, kd) = k.dims4()?;
    let strides_ok =
        |x: &Tensor| x.dims() == k.dims() && x.stride()[3] == 1 && x.stride()[2] == d && x.stride() == k.stride();
    let takes = HEAD_DIMS.contains(&d)
        && kd == d
        && kb == b
        && kv > 0
        && heads % kv == 0
        && t == offset + s
        && [q, k, v].iter().all(|x| x.dtype() == DType::BF16)
        && q.is_contiguous()
        && strides_ok(k)
        && strides_ok(v)
        && supported(dev);
    if !takes {
        return Ok(None);
    }
    let name = layout.kernel(d);
    let func: CudaFunction = dev.get_or_load_custom_func(&name, "vram_lab_flash", &ptx()?)?.into_cuda_function();
    let dynamic = layout.dynamic_shared(d);
    super::target::launchable_with(&func, &name, layout.threads(), dynamic)?;
    if dynamic > 48 * 1024 {
        use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute;
        func.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic as i32)
            .map_err(|e| LabError::other(format!("{name}: {dynamic} B of shared memory: {e:?}")))?;
    }
    let stream = dev.cuda_stream();
    let ptr = |x: &Tensor| crate::memory::cuda_copy::start_ptr(x, &stream);
    let out = crate::memory::cuda_copy::uninit(dev, DType::BF16, vec![b, s, heads * d])?;
    let (pq, pk, pv, po) = (ptr(q)?, ptr(k)?, ptr(v)?, ptr(&out)?);
    let (hs, bs) = (k.stride()[1] as i64, k.stride()[0] as i64);
    let scale_log2 = std::f32::consts::LOG2_E / (d as f32).sqrt();
    let cfg = LaunchConfig {
        grid_dim: (s.div_ceil(ROWS) as u32, heads as u32, b as u32),
        block_dim: (layout.threads(), 1, 1),
        shared_mem_bytes: dynamic,
    };
    let (s_, heads_, kv_, off) = (s as i32, heads as i32, kv as i32, offset as i32);
    let mut l = stream.launch_builder(&func);
    l.arg(&pq).arg(&pk).arg(&pv).arg(&po).arg(&s_).arg(&heads_).arg(&kv_).arg(&hs).arg(&bs).arg(&off).arg(&scale_log2);
    // SAFETY: q holds b·heads·s rows of d, k and v b·kv heads of offset + s rows of d at the
    // strides passed, out b·s·heads·d: the kernel reads and writes within (rows past s and keys
    // past offset + s are neither read nor written).
    unsafe { l.launch(cfg) }.map_err(|e| LabError::other(format!("flash attention kernel: {e:?}")))?;
    Ok(Some(out))
}
