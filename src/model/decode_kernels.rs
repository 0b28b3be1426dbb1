//! The lab's own CUDA kernel for the static decoding step (`graph.rs`), compiled with NVRTC at
//! first use: after the stacked q|k|v product, one kernel rotates q and k, scales q, and writes k
//! and v into the cache at the position held in device memory. It replaces seven of candle's
//! kernels per layer (three heads-first copies, two rotary, two scatters) and the slot tensor.
//! BF16 values are handled as raw 16-bit patterns (no header needed): widened to F32, computed,
//! rounded to nearest even once.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = r#"
__device__ __forceinline__ float ld(const unsigned short* p, long i) { return __uint_as_float(((unsigned)p[i]) << 16); }
__device__ __forceinline__ void st(unsigned short* p, long i, float f) {
    unsigned u = __float_as_uint(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    p[i] = (unsigned short)(u >> 16);
}
__device__ __forceinline__ float ld(const float* p, long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, long i, float f) { p[i] = f; }

// y: [b, (heads + 2 kv) * d] (q | k | v of one position), rotated and scaled in place for q;
// k rotated and v copied into the caches [b, kv, cap, d] at row pos[0]. One thread per pair (i, i + d/2).
template <typename T>
__device__ void qkv_store(T* y, const T* cos_t, const T* sin_t, const unsigned* pos, T* kc, T* vc,
                          int b, int heads, int kv, int d, int cap, float scale) {
    int half = d / 2, total = heads + 2 * kv;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)b * total * half) return;
    int i = idx % half;
    int h = (idx / half) % total;
    int bi = idx / ((long)half * total);
    unsigned p = pos[0];
    long at = (long)bi * total * d + (long)h * d;
    float x1 = ld(y, at + i), x2 = ld(y, at + i + half);
    if (h < heads + kv) {
        float c = ld(cos_t, (long)p * half + i), s = ld(sin_t, (long)p * half + i);
        float r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
        x1 = r1; x2 = r2;
    }
    if (h < heads) {
        st(y, at + i, x1 * scale); st(y, at + i + half, x2 * scale);
    } else {
        int kh = h < heads + kv ? h - heads : h - heads - kv;
        T* cache = h < heads + kv ? kc : vc;
        long row = (((long)bi * kv + kh) * cap + p) * d;
        st(cache, row + i, x1); st(cache, row + i + half, x2);
    }
}

extern "C" __global__ void vram_lab_qkv_store_bf16(unsigned short* y, const unsigned short* cos_t, const unsigned short* sin_t, const unsigned* pos,
        unsigned short* kc, unsigned short* vc, int b, int heads, int kv, int d, int cap, float scale) {
    qkv_store(y, cos_t, sin_t, pos, kc, vc, b, heads, kv, d, cap, scale);
}
extern "C" __global__ void vram_lab_qkv_store_f32(float* y, const float* cos_t, const float* sin_t, const unsigned* pos,
        float* kc, float* vc, int b, int heads, int kv, int d, int cap, float scale) {
    qkv_store(y, cos_t, sin_t, pos, kc, vc, b, heads, kv, d, cap, scale);
}
"#;

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("decode kernel: {e:?}"))
}

/// The compiled kernel for one activation dtype.
pub struct DecodeKernels {
    dev: CudaDevice,
    func: CudaFunction,
}

impl DecodeKernels {
    /// Compiles (once per process; candle caches the module) the kernel for `dtype`, or None for a
    /// dtype it has no variant for (F16): the step then uses candle's kernels.
    pub fn new(dev: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
        let name = match dtype {
            DType::BF16 => "vram_lab_qkv_store_bf16",
            DType::F32 => "vram_lab_qkv_store_f32",
            _ => return Ok(None),
        };
        let ptx = candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(SOURCE).map_err(err)?;
        let func = dev.get_or_load_custom_func(name, "vram_lab_decode", &ptx.to_src())?.into_cuda_function();
        Ok(Some(Self { dev: dev.clone(), func }))
    }

    /// Rotates and scales q in `y` ([b, 1, (heads + 2 kv) · d], contiguous) in place and writes k
    /// and v into `kc`, `vc` ([b, kv, cap, d]) at the position `pos` ([1] u32) holds.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_store(&self, y: &Tensor, cos: &Tensor, sin: &Tensor, pos: &Tensor, kc: &Tensor, vc: &Tensor, heads: usize, scale: f32) -> Result<()> {
        let (b, kv, cap, d) = kc.dims4()?;
        let stream = self.dev.cuda_stream();
        let ptr = |t: &Tensor| crate::memory::cuda_copy::device_ptr(t, &stream).map(|(p, _)| p);
        let (py, pc, ps, pp, pk, pv) = (ptr(y)?, ptr(cos)?, ptr(sin)?, ptr(pos)?, ptr(kc)?, ptr(vc)?);
        let pairs = (b * (heads + 2 * kv) * d / 2) as u32;
        let cfg = LaunchConfig { grid_dim: (pairs.div_ceil(256), 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let (b, heads, kv, d, cap) = (b as i32, heads as i32, kv as i32, d as i32, cap as i32);
        let mut l = stream.launch_builder(&self.func);
        l.arg(&py).arg(&pc).arg(&ps).arg(&pp).arg(&pk).arg(&pv).arg(&b).arg(&heads).arg(&kv).arg(&d).arg(&cap).arg(&scale);
        // SAFETY: every pointer is a live contiguous tensor of the sizes the arguments give; the
        // kernel writes y's q part and one row of each cache, within bounds for pos < cap.
        unsafe { l.launch(cfg) }.map(|_| ()).map_err(err)
    }
}
