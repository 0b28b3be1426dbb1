//! The launcher of `peer_sum.cu`: a tensor-parallel group's one-shot sum over peer memory, for
//! the small sums of a decoding step (`model::parallel::peer` owns the buffers it reads).

use super::target::{Target, COMMON};
use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("peer_sum.cu");
/// The largest sum in bytes (one slot of `peer_sum.cu`'s `PEER_CAP`).
pub const CAP: usize = 65536;
/// The most ranks (`PEER_MAX_RANKS`).
pub const MAX_RANKS: usize = 8;
/// Where the slots start and their total size, in bytes of a rank's buffer.
pub const SLOTS: usize = 4096;
pub const BUFFER_BYTES: usize = SLOTS + 2 * MAX_RANKS * CAP;
/// Where the table of every rank's buffer address is in a rank's buffer.
pub const TABLE: usize = 1024;
const THREADS: u32 = 512;

/// The kernels compiled to PTX by NVRTC (no GPU needed), once per process.
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    crate::memory::cuda_copy::ptx_once(&PTX, || {
        use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
        // ld.acquire / st.release at system scope need compute 7.0.
        let opts = CompileOptions { arch: super::target::arch(70), ..Default::default() };
        Ok(compile_ptx_with_opts(format!("{COMMON}\n{SOURCE}"), opts).map_err(err)?.to_src())
    })
}

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("peer sum kernel: {e:?}"))
}

/// The kernel for one activation dtype on one device.
pub struct PeerSumKernel {
    target: Target,
    func: CudaFunction,
}

impl PeerSumKernel {
    /// None for a dtype it has no variant for (F16: the group sums through NCCL).
    pub fn new(dev: &CudaDevice, dtype: DType) -> Result<Option<Self>> {
        let Some(target) = Target::new(dev, dtype) else { return Ok(None) };
        let func =
            target.load("vram_lab_peer_sum", &ptx()?, &format!("vram_lab_peer_sum_{}", target.name()), THREADS)?;
        Ok(Some(Self { target, func }))
    }

    /// `res` + the sum over the group of every rank's `x` (contiguous, in the kernel's dtype, at
    /// most `CAP` bytes, 16-byte aligned), computed by rank `rank` of `ranks` whose buffer holds
    /// the table at `table`; None when `x` is not such a tensor (the caller sums through NCCL).
    pub fn sum(
        &self,
        table: u64,
        rank: usize,
        ranks: usize,
        x: &Tensor,
        res: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        let bytes = x.elem_count() * x.dtype().size_in_bytes();
        let mut ts = vec![x];
        ts.extend(res);
        if bytes > CAP || !self.target.ours(&ts) || res.is_some_and(|r| r.shape() != x.shape()) {
            return Ok(None);
        }
        let px = self.target.ptr(x)?;
        if px % 16 != 0 {
            return Ok(None);
        }
        let pr = res.map(|r| self.target.ptr(r)).transpose()?.unwrap_or(0);
        let out = crate::memory::cuda_copy::uninit(&self.target.dev, self.target.dtype, x.dims().to_vec())?;
        let po = self.target.ptr(&out)?;
        let (rank, ranks, n) = (rank as i32, ranks as i32, x.elem_count() as i32);
        let stream = self.target.dev.cuda_stream();
        let mut l = stream.launch_builder(&self.func);
        l.arg(&table).arg(&rank).arg(&ranks).arg(&px).arg(&pr).arg(&po).arg(&n);
        let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: x, res (or null) and out hold n elements; the table lists every rank's buffer of
        // BUFFER_BYTES, mapped for this device (peer access), and n elements fit a slot.
        unsafe { l.launch(cfg) }.map_err(err)?;
        Ok(Some(out))
    }
}
