//! A linear layer computed on the CPU from host memory, for the offload split's CPU layers.
//!
//! Why not candle's CPU matmul: in BF16 it converts and runs at about 1 GB/s of weights (145 ms
//! for one 7B MLP matrix on this project's CI machine), while decoding on the CPU is a
//! matrix-vector product bounded by host-memory bandwidth. This reads each weight row once for
//! all rows of the input, accumulates in F32, and splits the rows over rayon's threads: 35 GB/s
//! on 2 cores, the speed of a plain read of the same bytes.

use crate::error::{LabError, Result};
use candle_core::{DType, Device, Tensor};
use half::bf16;
use rayon::prelude::*;
use std::time::Instant;

/// Weight rows per task: large enough to amortise scheduling, small enough to balance 16 cores.
const ROWS_PER_TASK: usize = 64;

#[derive(Debug, Clone)]
pub struct HostLinear {
    /// [out, in], BF16 or F32, contiguous, on the CPU.
    weight: Tensor,
    bias: Option<Tensor>,
    tuning: Tuning,
    /// Its decoding products' time and the weight bytes they read (`Decoder::take_profile`).
    timer: crate::model::profile::Timer,
}

pub(crate) trait Elem: Copy + Send + Sync {
    fn f32(self) -> f32;
}
impl Elem for bf16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        // BF16 is the top half of an F32: a shift, which vectorises (half's to_f32 does too,
        // but through a NaN check).
        f32::from_bits((self.to_bits() as u32) << 16)
    }
}
impl Elem for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
}

#[inline(always)]
pub(crate) fn dot<W: Elem>(w: &[W], x: &[f32]) -> f32 {
    // 16 independent sums: enough lanes for the compiler to keep two AVX registers busy.
    let mut acc = [0f32; 16];
    let (wc, xc) = (w.chunks_exact(16), x.chunks_exact(16));
    let (wr, xr) = (wc.remainder(), xc.remainder());
    for (w16, x16) in wc.zip(xc) {
        for j in 0..16 {
            acc[j] += w16[j].f32() * x16[j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (w, x) in wr.iter().zip(xr) {
        s += w.f32() * x;
    }
    s
}

/// Four rows against one input: each 16-wide slice of x is loaded once for four rows, so the
/// loop is bound by the weight bytes, not by loads of x.
#[inline(always)]
fn dot4<W: Elem, const PREFETCH: bool>(w: [&[W]; 4], x: &[f32]) -> [f32; 4] {
    let mut acc = [[0f32; 16]; 4];
    let n = x.len() / 16 * 16;
    for (c, ((((x16, w0), w1), w2), w3)) in x[..n]
        .chunks_exact(16)
        .zip(w[0][..n].chunks_exact(16))
        .zip(w[1][..n].chunks_exact(16))
        .zip(w[2][..n].chunks_exact(16))
        .zip(w[3][..n].chunks_exact(16))
        .enumerate()
    {
        #[cfg(target_arch = "x86_64")]
        if PREFETCH && c % 4 == 0 {
            // 2 KiB ahead in each of the four rows (a prefetch never faults, even past the end).
            for row in &w {
                let ahead = row.as_ptr().wrapping_add(c * 16 + 2048 / std::mem::size_of::<W>()) as *const i8;
                // SAFETY: a prefetch hint reads nothing and cannot fault.
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ahead) };
            }
        }
        for j in 0..16 {
            acc[0][j] += w0[j].f32() * x16[j];
            acc[1][j] += w1[j].f32() * x16[j];
            acc[2][j] += w2[j].f32() * x16[j];
            acc[3][j] += w3[j].f32() * x16[j];
        }
    }
    let mut out = [0f32; 4];
    for r in 0..4 {
        out[r] = acc[r].iter().sum::<f32>() + w[r][n..].iter().zip(&x[n..]).map(|(a, b)| a.f32() * b).sum::<f32>();
    }
    out
}

/// out[r * m + i] = w[r] · x[i] for the rows r of one task.
#[inline(always)]
fn rows<W: Elem, const PREFETCH: bool>(w: &[W], x: &[f32], m: usize, k: usize, out: &mut [f32]) {
    let nr = out.len() / m;
    let mut r = 0;
    if m == 1 {
        // Decoding: four rows at a time.
        while r + 4 <= nr {
            let y = dot4::<W, PREFETCH>(
                [
                    &w[r * k..(r + 1) * k],
                    &w[(r + 1) * k..(r + 2) * k],
                    &w[(r + 2) * k..(r + 3) * k],
                    &w[(r + 3) * k..(r + 4) * k],
                ],
                x,
            );
            out[r..r + 4].copy_from_slice(&y);
            r += 4;
        }
    }
    for (r, o) in out.chunks_mut(m).enumerate().skip(r) {
        let row = &w[r * k..(r + 1) * k];
        for (i, oi) in o.iter_mut().enumerate() {
            *oi = dot(row, &x[i * k..(i + 1) * k]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn rows_avx512<W: Elem, const P: bool>(w: &[W], x: &[f32], m: usize, k: usize, out: &mut [f32]) {
    rows::<W, P>(w, x, m, k, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2<W: Elem, const P: bool>(w: &[W], x: &[f32], m: usize, k: usize, out: &mut [f32]) {
    rows::<W, P>(w, x, m, k, out)
}

fn rows_dispatch<W: Elem, const P: bool>(w: &[W], x: &[f32], m: usize, k: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { rows_avx512::<W, P>(w, x, m, k, out) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            return unsafe { rows_avx2::<W, P>(w, x, m, k, out) };
        }
    }
    rows::<W, P>(w, x, m, k, out)
}

/// How the rows are cut into rayon tasks and whether the kernel prefetches ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    pub task_rows: usize,
    pub prefetch: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        // Prefetching 2 KiB ahead measured 142 vs 138 GB/s on an H200 host's 16 cores.
        Self { task_rows: ROWS_PER_TASK, prefetch: true }
    }
}

/// y [m, n] = x [m, k] · wᵀ for w [n, k] in host memory.
fn matmul_t<W: Elem>(w: &[W], n: usize, k: usize, x: &[f32], m: usize, tuning: Tuning) -> Vec<f32> {
    let mut yt = vec![0f32; n * m];
    // Tasks of about `task_rows`, their count a multiple of the threads so no wave runs half
    // empty (3,584 rows on 16 threads: 64 tasks of 56, not 56 tasks of 64).
    let threads = rayon::current_num_threads().max(1);
    let waves = n.div_ceil(threads * tuning.task_rows.max(4)).max(1);
    let task = n.div_ceil(threads * waves).div_ceil(4) * 4;
    yt.par_chunks_mut(task * m).enumerate().for_each(|(t, out)| {
        let r0 = t * task;
        let nr = out.len() / m;
        let w = &w[r0 * k..(r0 + nr) * k];
        if tuning.prefetch {
            rows_dispatch::<W, true>(w, x, m, k, out)
        } else {
            rows_dispatch::<W, false>(w, x, m, k, out)
        }
    });
    if m == 1 {
        return yt;
    }
    let mut y = vec![0f32; m * n];
    for r in 0..n {
        for i in 0..m {
            y[i * n + r] = yt[r * m + i];
        }
    }
    y
}

impl HostLinear {
    /// `weight` [out, in] and `bias` [out], moved to the CPU (a copy only if they are elsewhere).
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Result<Self> {
        let weight = weight.to_device(&Device::Cpu)?.contiguous()?;
        if !matches!(weight.dtype(), DType::BF16 | DType::F32) {
            return Err(LabError::Unsupported(format!(
                "CPU layers compute BF16 or F32 weights, not {:?}",
                weight.dtype()
            )));
        }
        let bias = bias.map(|b| b.to_device(&Device::Cpu)).transpose()?;
        Ok(Self { weight, bias, tuning: Tuning::default(), timer: Default::default() })
    }

    /// Its decoding products' (nanoseconds, weight bytes) since the last call.
    pub fn take_time(&self) -> (u64, u64) {
        self.timer.take()
    }

    pub fn with_tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// x [.., k] on the CPU → [.., n] in x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.weight.dim(0)?;
        let mut dims = x.dims().to_vec();
        let xs: Vec<f32> = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        let y = self.rows(&xs)?;
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        Ok(Tensor::from_vec(y, dims, &Device::Cpu)?.to_dtype(x.dtype())?)
    }

    /// `xs` (rows of k values, one after the other) times the weight, plus the bias: rows of n.
    pub fn rows(&self, xs: &[f32]) -> Result<Vec<f32>> {
        let (n, k) = self.weight.dims2()?;
        if !xs.len().is_multiple_of(k) {
            return Err(LabError::other(format!("a host linear of {k} inputs given {} values", xs.len())));
        }
        let m = xs.len() / k;
        let (storage, layout) = self.weight.storage_and_layout();
        let cpu = match &*storage {
            candle_core::Storage::Cpu(c) => c,
            _ => return Err(LabError::other("a host linear's weight left the CPU")),
        };
        let start = layout.start_offset();
        let t0 = Instant::now();
        let mut y = match self.weight.dtype() {
            DType::BF16 => matmul_t(&cpu.as_slice::<bf16>()?[start..start + n * k], n, k, xs, m, self.tuning),
            _ => matmul_t(&cpu.as_slice::<f32>()?[start..start + n * k], n, k, xs, m, self.tuning),
        };
        drop(storage);
        // Decoding steps only (m = 1): a prefill's products are compute-bound, not a read.
        if m == 1 {
            self.timer.record(t0, (n * k * self.weight.dtype().size_in_bytes()) as u64);
        }
        if let Some(b) = &self.bias {
            let b: Vec<f32> = b.to_dtype(DType::F32)?.to_vec1()?;
            for row in y.chunks_mut(n) {
                row.iter_mut().zip(&b).for_each(|(y, b)| *y += b);
            }
        }
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_candles_matmul() {
        let dev = Device::Cpu;
        // Odd sizes: rows not a multiple of the task size, columns not of 16.
        let w = Tensor::randn(0f32, 1.0, (131, 37), &dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, 131, &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (2, 3, 37), &dev).unwrap();
        let want = candle_nn::Linear::new(w.clone(), Some(b.clone()));
        let want = candle_core::Module::forward(&want, &x).unwrap();
        let got = HostLinear::new(w.clone(), Some(b)).unwrap().forward(&x).unwrap();
        assert_eq!(got.dims(), &[2, 3, 131]);
        let diff = (got - &want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 1e-4, "max difference {diff}");
        // BF16 weights: the same products of the rounded values, accumulated in F32.
        let wb = w.to_dtype(DType::BF16).unwrap();
        let xb = x.to_dtype(DType::BF16).unwrap();
        let want =
            xb.to_dtype(DType::F32).unwrap().broadcast_matmul(&wb.to_dtype(DType::F32).unwrap().t().unwrap()).unwrap();
        let got = HostLinear::new(wb, None).unwrap().forward(&xb).unwrap().to_dtype(DType::F32).unwrap();
        let diff = (got - &want).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(diff < 0.1, "max difference {diff}");
    }

    #[test]
    fn refuses_other_dtypes() {
        let w = Tensor::zeros((4, 4), DType::U8, &Device::Cpu).unwrap();
        assert!(HostLinear::new(w, None).is_err());
    }
}
