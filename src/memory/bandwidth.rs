//! Bandwidth measurements: the ceilings every speed of the lab is set beside.
//! - host read: the CPU's threads summing a host buffer (what CPU layers of an offload read at);
//! - host → device and device → host, from pinned and from pageable host memory;
//! - device → device (cuMemcpyDtoD: each byte read and written);
//! - device read: a kernel that only reads a buffer (batch-1 decoding reads every weight once per
//!   token, so this is its ceiling).

use crate::error::Result;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Measured speeds a placement is chosen and judged by, GB/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bandwidths {
    /// Reading device memory (the read kernel).
    pub device: f64,
    /// Host → device from pinned memory.
    pub pcie: f64,
    /// The CPU reading host memory (the CPU layers' matrix-vector products).
    pub host: f64,
}

/// One measured transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// "host_read", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "d2d", "device_read".
    pub test: &'static str,
    pub bytes: u64,
    pub seconds: f64,
    /// Bytes counted as moved: the size, twice the size for a device copy (read + write).
    pub counted_bytes: u64,
}

impl Transfer {
    pub fn gbs(&self) -> f64 {
        self.counted_bytes as f64 / self.seconds / 1e9
    }
}

/// Runs `op` once to warm up, then `reps` times; the fastest run's seconds.
pub fn best_of<T>(reps: usize, mut op: impl FnMut() -> Result<T>) -> Result<f64> {
    std::hint::black_box(op()?);
    let mut best = f64::MAX;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        std::hint::black_box(op()?);
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// The CPU reading `bytes` of host memory on all rayon threads, best of `reps` after a warm-up.
/// Each task reads 4 MiB in one stream (512 KiB before). On the lent GPU hosts the CPU layers' own
/// kernel reads faster still (106.6 against 116-135 GB/s,
/// data/results/h100/2026-11-26-speed/development/4-host-read): a ceiling set by this read is a
/// lower bound there. One wrapping sum: LLVM vectorises it at any opt-level above 0 (eight
/// explicit sums ran ten times slower in the tests' opt-level 1).
pub fn host_read(bytes: usize, reps: usize) -> Transfer {
    let words = vec![1u64; bytes / 8];
    let sum = |w: &[u64]| {
        w.par_chunks(1 << 19).map(|c| c.iter().fold(0u64, |a, &b| a.wrapping_add(b))).reduce(|| 0, u64::wrapping_add)
    };
    let seconds = best_of(reps, || Ok(sum(std::hint::black_box(&words)))).unwrap_or(f64::NAN);
    let bytes = (words.len() * 8) as u64;
    Transfer { test: "host_read", bytes, seconds, counted_bytes: bytes }
}

#[cfg(feature = "cuda")]
pub use gpu::*;

#[cfg(feature = "cuda")]
mod gpu {
    use super::{Bandwidths, Transfer};
    use crate::error::{LabError, Result};
    use crate::memory::cuda_copy::{self, Pinned};
    use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::{DType, Device, Tensor};

    /// Reads 16 bytes per load, four loads in flight per thread, and folds them so the loads
    /// are kept; writes only if the fold hits one value in 2^32 (never, for zeros).
    const READ_KERNEL: &str = include_str!("read.cu");

    fn err(e: impl std::fmt::Debug) -> LabError {
        LabError::other(format!("{e:?}"))
    }

    fn cuda(device: &Device) -> Result<&CudaDevice> {
        match device {
            Device::Cuda(d) => Ok(d),
            _ => Err(LabError::Unsupported("this measurement needs a CUDA GPU".into())),
        }
    }

    /// A device buffer of `bytes` from candle's pool (so it counts as the lab's memory).
    fn buffer(device: &Device, bytes: usize) -> Result<Tensor> {
        Ok(Tensor::zeros(bytes, DType::U8, device)?)
    }

    /// Host → device and device → host of `bytes`, from pinned and from pageable memory.
    pub fn pcie(device: &Device, bytes: usize, reps: usize) -> Result<Vec<Transfer>> {
        let dev = cuda(device)?;
        let buf = buffer(device, bytes)?;
        let stream = dev.cuda_stream();
        let (dst, _) = cuda_copy::device_ptr(&buf, &stream)?;
        let mut pinned = Pinned::new(dev, bytes)?;
        pinned.as_mut_slice()?.fill(1);
        let mut pageable = vec![1u8; bytes];
        let b = bytes as u64;
        let row = |test, seconds| Transfer { test, bytes: b, seconds, counted_bytes: b };
        let mut out = vec![
            row("h2d_pinned", cuda_copy::time_htod(dev, dst, pinned.as_slice()?, reps)?),
            row("h2d_pageable", cuda_copy::time_htod(dev, dst, &pageable, reps)?),
        ];
        out.push(row("d2h_pinned", cuda_copy::time_dtoh(dev, pinned.as_mut_slice()?, dst, reps)?));
        out.push(row("d2h_pageable", cuda_copy::time_dtoh(dev, &mut pageable, dst, reps)?));
        Ok(out)
    }

    /// Device → device copy of `bytes` (two buffers of that size).
    pub fn d2d(device: &Device, bytes: usize, reps: usize) -> Result<Transfer> {
        let dev = cuda(device)?;
        let (a, b) = (buffer(device, bytes)?, buffer(device, bytes)?);
        let stream = dev.cuda_stream();
        let (pa, _) = cuda_copy::device_ptr(&a, &stream)?;
        let (pb, _) = cuda_copy::device_ptr(&b, &stream)?;
        let seconds = cuda_copy::time_dtod(dev, pb, pa, bytes, reps)?;
        Ok(Transfer { test: "d2d", bytes: bytes as u64, seconds, counted_bytes: 2 * bytes as u64 })
    }

    /// The read kernel over a buffer of `bytes` (rounded down to 16 B).
    pub fn device_read(device: &Device, bytes: usize, reps: usize) -> Result<Transfer> {
        let dev = cuda(device)?;
        let bytes = bytes / 16 * 16;
        let buf = buffer(device, bytes)?;
        let sink = buffer(device, 16)?;
        let stream = dev.cuda_stream();
        let (p, _) = cuda_copy::device_ptr(&buf, &stream)?;
        let (out, _) = cuda_copy::device_ptr(&sink, &stream)?;
        let ptx = candle_core::cuda_backend::cudarc::nvrtc::compile_ptx(READ_KERNEL)
            .map_err(|e| LabError::other(format!("compiling the read kernel with NVRTC: {e:?}")))?;
        let func = dev.get_or_load_custom_func("vram_lab_read", "vram_lab_bandwidth", &ptx.to_src())?;
        let n = (bytes / 16) as u64;
        let sms = crate::memory::cuda::sm_count(dev)? as u32;
        let cfg = LaunchConfig { grid_dim: (sms * 8, 1, 1), block_dim: (512, 1, 1), shared_mem_bytes: 0 };
        let seconds = cuda_copy::time_on(&stream, reps, || {
            let mut b = func.builder();
            b.arg(&p).arg(&n).arg(&out);
            // SAFETY: the kernel reads n uint4 from p (the buffer holds them) and may write out[0].
            unsafe { b.launch(cfg) }.map(|_| ()).map_err(err)
        })?;
        Ok(Transfer { test: "device_read", bytes: bytes as u64, seconds, counted_bytes: bytes as u64 })
    }

    /// The quick set on a GPU: pinned host → device, device read, host read.
    pub(super) fn quick_gpu(device: &Device) -> Result<Bandwidths> {
        let pcie = pcie(device, 512 << 20, 5)?
            .into_iter()
            .find(|t| t.test == "h2d_pinned")
            .ok_or_else(|| LabError::other("no pinned copy measured"))?;
        let read = device_read(device, 2 << 30, 10)?;
        let host = super::host_read(1 << 30, 3);
        Ok(Bandwidths { device: read.gbs(), pcie: pcie.gbs(), host: host.gbs() })
    }
}

/// The bandwidths decoding and offload are judged by: the device read, pinned host → device and
/// the host read on a GPU; on the CPU the host read stands in for all three (the "GPU" is the
/// CPU too).
pub fn quick(device: &candle_core::Device) -> Result<Bandwidths> {
    #[cfg(feature = "cuda")]
    if device.is_cuda() {
        return gpu::quick_gpu(device);
    }
    let _ = device;
    let host = host_read(256 << 20, 3).gbs();
    Ok(Bandwidths { device: host, pcie: host, host })
}
