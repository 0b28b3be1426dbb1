//! Prefill attention in one kernel (`AttentionMode::Flash`, CUDA, BF16): the scores of a tile of
//! 128 queries against a tile of 64 keys live in registers, are masked, exponentiated and summed
//! there (the online softmax of FlashAttention-2), and only the output reaches memory. The bounded
//! path writes each chunk's scores, reads them back for the softmax and again for the product
//! with V; at 32k tokens that traffic, not arithmetic, set its time. Products use the tensor
//! cores (`mma.sync` m16n8k16, BF16 in, F32 sums), so the PTX targets compute 8.0 (RTX 30xx and
//! newer); on an older card, another dtype or head size, the caller falls back to bounded. On an
//! H100 or H200 at head size 128 a second kernel multiplies with Hopper's `wgmma` instead
//! (`Layout::Hopper`, `flash_attention_sm90.cu`).

use crate::error::{LabError, Result};
use crate::memory::cuda::compute_capability as capability;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("flash_attention.cu");
/// The Hopper kernel (`Layout::Hopper`), compiled after `SOURCE`, whose helpers it uses.
const SOURCE_SM90: &str = include_str!("flash_attention_sm90.cu");

/// The head sizes the kernel is built for (Qwen2.5: 64 for 0.5B, 128 from 1.5B).
pub const HEAD_DIMS: [usize; 2] = [64, 128];

/// The kernel compiled to PTX by NVRTC (no GPU needed), once per process: for compute 8.0, or
/// the capability the build names (`target::arch`).
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "flash attention", 80, || SOURCE.to_string())
}

/// Both sources compiled for compute 9.0a, the only target with `wgmma` (PTX for 9.0a runs on 9.0
/// devices alone), once per process.
pub fn ptx_sm90() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile_for(&PTX, "flash attention (9.0a)", "compute_90a", || format!("{SOURCE}\n{SOURCE_SM90}"))
}

/// Whether `dev` runs the kernel (compute capability 8.0 or newer: the tensor-core instructions).
pub fn supported(dev: &CudaDevice) -> bool {
    capability(dev).is_some_and(|(major, _)| major >= 8)
}

/// Whether `dev` runs `Layout::Hopper`: compute 9.0 exactly (an H100 or H200), in a build not made
/// for an older card (a build for 8.9 keeps to what an RTX 4090 runs, `target::built_for`).
pub fn hopper(dev: &CudaDevice) -> bool {
    capability(dev) == Some((9, 0)) && super::target::built_for().is_none_or(|c| c >= 90)
}

/// Queries a block takes, and keys a tile of K or V holds (`BR`, `BC` in `flash_attention.cu`).
const ROWS: usize = 128;
const KEYS: usize = 64;
/// Keys a tile holds in the Hopper kernel (`BC` in `flash_attention_sm90.cu`), three tiles of K and V.
const HOPPER_KEYS: usize = 128;

/// How a block's 128 queries are shared among its warps, and which instructions multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Eight warps of 16 rows, the queries in registers, 34 KiB of static shared memory (two tiles).
    Narrow,
    /// Four warps of 32 rows, the queries in shared memory too: half the reads of K and V from
    /// shared memory per product, 68 KiB (D = 128) of dynamic shared memory.
    Wide,
    /// Compute 9.0 and D = 128 only: two warpgroups of 64 rows multiplying with `wgmma` from
    /// shared memory and a third copying keys 128 at a time into three buffers (225 KiB with the
    /// queries).
    Hopper,
}

impl Layout {
    /// The layout for `dev` and head size `d`: `VRAM_LAB_FLASH` (`narrow`, `wide` or `hopper`)
    /// names one for a side-by-side timing in one binary; else `Hopper` where it runs (32k prefill
    /// on an H200: 19.2 ms a layer against 28.0 for `Wide` and 35.4 for `Narrow`,
    /// data/results/h200/2026-11-28-prefill-hopper), `Narrow` elsewhere (the layout measured on
    /// every card so far; `Wide` is not timed below compute 9.0).
    pub fn chosen(dev: &CudaDevice, d: usize) -> Result<Self> {
        let runs_hopper = d == 128 && hopper(dev);
        match std::env::var("VRAM_LAB_FLASH").as_deref() {
            Err(_) if runs_hopper => Ok(Self::Hopper),
            Err(_) | Ok("narrow") => Ok(Self::Narrow),
            Ok("wide") => Ok(Self::Wide),
            Ok("hopper") if runs_hopper => Ok(Self::Hopper),
            Ok("hopper") => Err(LabError::input(format!(
                "VRAM_LAB_FLASH=hopper: needs compute 9.0 and head size 128 (this device {:?}, head size {d})",
                capability(dev)
            ))),
            Ok(other) => Err(LabError::input(format!("VRAM_LAB_FLASH={other}: use narrow, wide or hopper"))),
        }
    }

    fn threads(self) -> u32 {
        match self {
            Self::Narrow => ROWS as u32 * 2,
            Self::Wide => ROWS as u32,
            // Two warpgroups of 64 rows and the one that copies.
            Self::Hopper => ROWS as u32 * 3,
        }
    }

    /// Dynamic shared memory a block asks for: the wide layout's Q, K and V tiles (rows padded by 8);
    /// the Hopper layout's Q and three K and V tiles of 128 keys, with 1 KiB to start them on the
    /// swizzle's 1024-byte period, and the six mbarriers after them.
    fn dynamic_shared(self, d: usize) -> u32 {
        match self {
            Self::Narrow => 0,
            Self::Wide => ((ROWS + 2 * KEYS) * (d + 8) * 2) as u32,
            Self::Hopper => ((ROWS + 3 * 2 * HOPPER_KEYS) * d * 2 + 1024 + 6 * 8) as u32,
        }
    }

    fn kernel(self, d: usize) -> String {
        match self {
            Self::Narrow => format!("vram_lab_flash_bf16_d{d}_r{ROWS}"),
            Self::Wide => format!("vram_lab_flash_bf16_d{d}_wide"),
            Self::Hopper => format!("vram_lab_flash_bf16_d{d}_hopper"),
        }
    }
}

/// Causal attention of `q` [b, heads, s, d] (contiguous) over `k`, `v` [b, kv, offset + s, d]
/// (rows contiguous, heads and batches strided as a cache view is), the queries at positions
/// offset.. : [b, s, heads · d]. None when the kernel does not take them (not BF16 on a CUDA
/// device of compute 8.0+, a head size it is not built for): the caller computes it otherwise.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, offset: usize) -> Result<Option<Tensor>> {
    let candle_core::Device::Cuda(dev) = q.device() else { return Ok(None) };
    attend_in(q, k, v, offset, Layout::chosen(dev, q.dim(3)?)?)
}

/// `attend` with the warps' layout named (`Hopper` on a device or head size it does not run on is
/// refused).
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
    let func: CudaFunction = if layout == Layout::Hopper {
        if d != 128 || !hopper(dev) {
            return Err(LabError::input(format!("{name}: needs compute 9.0 and head size 128")));
        }
        dev.get_or_load_custom_func(&name, "vram_lab_flash_sm90", &ptx_sm90()?)?
    } else {
        dev.get_or_load_custom_func(&name, "vram_lab_flash", &ptx()?)?
    }
    .into_cuda_function();
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
