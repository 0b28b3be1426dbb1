//! The step's matrix-vector product over GGUF k-quant blocks (Q4_K and Q6_K: what llama.cpp's
//! Q4_K_M holds), in llama.cpp's arithmetic (`quant_gemv.cu`): one kernel quantizes x to 8-bit
//! blocks (with the RMS norm before it when the product has one), a second multiplies the blocks'
//! 4- and 6-bit values with x's bytes four at a time and adds the bias, the residual or
//! silu(gate)·up. candle's quantized product computes the same way but in more kernels per
//! product (a cast, the quantization, the product, a cast back, the bias add); here the step is
//! two kernels a product, with the norm and the additions inside.

use crate::error::{LabError, Result};
use crate::model::kernels::fused::Fused;
use crate::model::kernels::target::Target;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("quant_gemv.cu");

/// Rows of x one launch takes, as for the dense kernel (`decode::GEMV_MAX_BATCH`).
pub const QGEMV_MAX_BATCH: usize = 2;
/// Warps (rows, a warp each) per block of the product.
const ROWS_PER_BLOCK: u32 = 4;
/// Threads of a quantization block: one per value of a k-quant block.
const QUANTIZE_THREADS: u32 = 256;
/// ggml's type ids, as the kernel names them.
const Q4K: i32 = 12;
const Q6K: i32 = 14;
/// Values per k-quant block.
const QK_K: usize = 256;

/// A quantized weight of a product and its bias.
pub type QPart<'a> = (&'a QTensor, Option<&'a Tensor>);

/// Every product entry point of a dtype: (rows of x, weights per row).
fn variants() -> impl Iterator<Item = (usize, usize)> {
    (1..=QGEMV_MAX_BATCH).flat_map(|b| (1..=2).map(move |g| (b, g)))
}

fn gemv_name(dtype: &str, (b, g): (usize, usize)) -> String {
    format!("vram_lab_qgemv_{dtype}_b{b}_g{g}")
}

fn source() -> String {
    let mut s = format!("{}{SOURCE}", super::target::COMMON);
    for (name, t) in [("bf16", "unsigned short"), ("f32", "float")] {
        s.push_str(&format!("VRAM_LAB_QUANTIZE({name}, {t})\n"));
        for v @ (b, g) in variants() {
            s.push_str(&format!("VRAM_LAB_QGEMV({}, {t}, {b}, {g})\n", gemv_name(name, v)));
        }
    }
    s
}

/// The kernels compiled to PTX by NVRTC (no GPU needed), once per process.
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "quantized gemv", 0, source)
}

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("quantized gemv kernel: {e:?}"))
}

/// The ggml type id the kernel takes for `t`, or None.
fn kernel_type(t: GgmlDType) -> Option<i32> {
    match t {
        GgmlDType::Q4K => Some(Q4K),
        GgmlDType::Q6K => Some(Q6K),
        _ => None,
    }
}

/// The compiled kernels for one activation dtype.
pub struct QuantKernels {
    target: Target,
    quantize: CudaFunction,
    quantize_norm: CudaFunction,
    /// In the order of `variants`.
    gemv: Vec<CudaFunction>,
}

impl QuantKernels {
    /// The kernels for activations in `dtype` (BF16 or F32), or None for another dtype.
    pub fn new(dev: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
        Target::new(dev, dtype).map(Self::for_target).transpose()
    }

    /// The kernels for a target the decoding kernels were already made for.
    pub(super) fn for_target(target: Target) -> Result<Self> {
        let (name, ptx) = (target.name(), ptx()?);
        let load = |f: &str, threads: u32| target.load("vram_lab_quant_gemv", &ptx, f, threads);
        Ok(Self {
            quantize: load(&format!("vram_lab_q8_quantize_{name}"), QUANTIZE_THREADS)?,
            quantize_norm: load(&format!("vram_lab_q8_quantize_norm_{name}"), QUANTIZE_THREADS)?,
            gemv: variants().map(|v| load(&gemv_name(name, v), 32 * ROWS_PER_BLOCK)).collect::<Result<Vec<_>>>()?,
            target,
        })
    }

    /// `x · wᵀ` for `x` [.., k] of at most `QGEMV_MAX_BATCH` rows and `w` the `parts` one under
    /// the other (one to three weights [n_i, k] in Q4_K or Q6_K, each with its bias or none; with
    /// `glu`, gate and up), with what `f` fuses, as `decode::DecodeKernels::gemv` does for dense
    /// weights. None when the kernels do not take these tensors (another block type, k not whole
    /// blocks, a batch too large, strided): the caller computes with candle.
    pub fn gemv(&self, parts: &[QPart], x: &Tensor, f: Fused) -> Result<Option<Tensor>> {
        let Some(&(first, _)) = parts.first() else { return Ok(None) };
        if parts.len() > 3 {
            return Ok(None);
        }
        let (_, k) = first.shape().dims2()?;
        let mut rows = Vec::with_capacity(parts.len());
        let mut types = [Q4K; 3];
        for (i, &(w, bias)) in parts.iter().enumerate() {
            let (n, kw) = w.shape().dims2()?;
            let Some(t) = kernel_type(w.dtype()) else { return Ok(None) };
            if kw != k
                || !w.device().is_cuda()
                || bias.is_some_and(|b| f.glu || !self.target.ours(&[b]) || b.elem_count() != n)
            {
                return Ok(None);
            }
            types[i] = t;
            rows.push(n);
        }
        let n = if f.glu { rows[0] } else { rows.iter().sum() };
        let batch = x.elem_count() / k.max(1);
        let takes = x.dims().last() == Some(&k)
            && k % QK_K == 0
            && (1..=QGEMV_MAX_BATCH).contains(&batch)
            && if f.glu { parts.len() == 2 && rows[1] == n } else { parts.len() <= 3 }
            && self.target.ours(&[x])
            && f.norm.is_none_or(|(g, _)| self.target.ours(&[g]) && g.elem_count() == k)
            && f.res.is_none_or(|t| !f.glu && self.target.ours(&[t]) && t.elem_count() == batch * n);
        if !takes {
            return Ok(None);
        }
        let stream = self.target.dev.cuda_stream();
        // x's blocks: batch · k bytes, then (d, d·Σq) per 32 values as two F32.
        let xq = crate::memory::cuda_copy::uninit(&self.target.dev, DType::U8, vec![batch * k + batch * (k / 32) * 8])?;
        let pq = self.target.ptr(&xq)?;
        let pd = pq + (batch * k) as u64;
        let px = self.target.ptr(x)?;
        let (pg, eps) = match f.norm {
            Some((g, e)) => (self.target.ptr(g)?, e),
            None => (0, 0.0f32),
        };
        let kk = k as i32;
        let quantize = if f.norm.is_some() { &self.quantize_norm } else { &self.quantize };
        let cfg = LaunchConfig {
            grid_dim: ((k / QK_K) as u32, batch as u32, 1),
            block_dim: (QUANTIZE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = stream.launch_builder(quantize);
        l.arg(&px).arg(&pg).arg(&eps).arg(&pq).arg(&pd).arg(&kk);
        // SAFETY: x holds batch rows of k (k a multiple of 256), g k values or null, and xq was
        // made for batch · k bytes and batch · k / 32 pairs of F32 after them.
        unsafe { l.launch(cfg) }.map_err(err)?;

        let mut w = [0u64; 3];
        let mut bs = [0u64; 3];
        for (i, &(wi, bi)) in parts.iter().enumerate() {
            let (p, guard) = wi.device_ptr_with_guard(&stream)?;
            drop(guard);
            w[i] = p as u64;
            bs[i] = bi.map(|t| self.target.ptr(t)).transpose()?.unwrap_or(0);
        }
        let mut shape = x.dims().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let y = crate::memory::cuda_copy::uninit(&self.target.dev, self.target.dtype, shape)?;
        let py = self.target.ptr(&y)?;
        let pr = f.res.map(|t| self.target.ptr(t)).transpose()?.unwrap_or(0);
        let Some(at) = variants().position(|v| v == (batch, if f.glu { 2 } else { 1 })) else { return Ok(None) };
        let cfg = LaunchConfig {
            grid_dim: ((n as u32).div_ceil(ROWS_PER_BLOCK), 1, 1),
            block_dim: (32 * ROWS_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (n0, n1) = (rows[0] as i32, rows.get(1).copied().unwrap_or(0) as i32);
        let n = n as i32;
        let mut l = stream.launch_builder(&self.gemv[at]);
        l.arg(&w[0]).arg(&w[1]).arg(&w[2]).arg(&types[0]).arg(&types[1]).arg(&types[2]);
        l.arg(&bs[0]).arg(&bs[1]).arg(&bs[2]).arg(&n0).arg(&n1).arg(&pq).arg(&pd).arg(&pr).arg(&py).arg(&n).arg(&kk);
        // SAFETY: each weight part holds its rows of k / 256 blocks of its type (candle's
        // storage, rows one after the other), each bias its rows or null, xq and xd what the
        // quantization wrote, res batch · n or null, and y (fresh) batch · n.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(y))
    }
}
