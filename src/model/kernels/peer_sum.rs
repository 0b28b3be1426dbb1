//! The sum across tensor-parallel ranks as one kernel over the other GPUs' memory (`peer_sum.cu`
//! says how), for the small sums of a decoding step; `model::parallel::peer` sets up the memory
//! it reads. Larger tensors, other dtypes and GPUs that cannot reach each other take NCCL.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

const SOURCE: &str = include_str!("peer_sum.cu");

/// Ranks and blocks the kernel is built for (`PEER_RANKS`, `PEER_BLOCKS` in `peer_sum.cu`).
pub const RANKS: usize = 8;
pub const BLOCKS: usize = 16;
const THREADS: u32 = 512;

/// One rank's block of device memory, in bytes: one allocation of the driver's 2 MiB granule.
pub const BYTES: usize = 2 << 20;
/// Flags, counters, the failure word and the table, at the block's end.
const META: usize = 8 << 10;
/// One half of the staging data: the largest tensor the kernel sums (1,044,480 B: a step's
/// hidden state is 10-16 KB, a BF16 head's logits of 152,064 words 297 KiB).
pub const HALF: usize = (BYTES - META) / 2;
pub const FLAGS_AT: usize = 2 * HALF;
pub const COUNTERS_AT: usize = FLAGS_AT + BLOCKS * RANKS * 4;
pub const FAILED_AT: usize = COUNTERS_AT + BLOCKS * 4;
pub const TABLE_AT: usize = FAILED_AT + 64;
const _: () = assert!(TABLE_AT + 2 * RANKS * 8 <= BYTES && HALF.is_multiple_of(16));

/// How long a block waits for another rank's flag before it gives up (and says so).
const TIMEOUT_NS: u64 = 10_000_000_000;

/// The kernel compiled to PTX by NVRTC (no GPU needed), once per process.
pub fn ptx() -> Result<String> {
    static PTX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    super::target::compile(&PTX, "peer sum", 0, || format!("{}{SOURCE}", super::target::COMMON))
}

/// The kernel's two entry points.
const NAMES: [&str; 2] = ["vram_lab_peer_sum_bf16", "vram_lab_peer_sum_f32"];

/// Loads the kernel on `dev` and checks that it launches there, once, when a rank joins its group
/// (`model::parallel::peer`): `sum` then only looks up the loaded function (in a decoding step it
/// is captured in the graph, but an eager sum would pay the driver's queries each time).
pub fn load(dev: &CudaDevice) -> Result<()> {
    for name in NAMES {
        let func = dev.get_or_load_custom_func(name, "vram_lab_peer_sum", &ptx()?)?.into_cuda_function();
        super::target::launchable(&func, name, THREADS)?;
    }
    Ok(())
}

/// Where a rank's kernel finds the group: its own block (`base`, laid out as above, the table
/// filled with every rank's block as this rank addresses it), its rank and the group's size.
#[derive(Debug, Clone, Copy)]
pub struct PeerSlot {
    pub base: u64,
    pub rank: usize,
    pub ranks: usize,
}

/// Whether the kernel takes `x` (and `res`): BF16 or F32, contiguous, whole 16-byte vectors, at
/// most a half's bytes, on a GPU.
pub fn takes(x: &Tensor, res: Option<&Tensor>) -> bool {
    let bytes = x.elem_count() * x.dtype().size_in_bytes();
    x.device().is_cuda()
        && matches!(x.dtype(), DType::BF16 | DType::F32)
        && x.is_contiguous()
        && bytes.is_multiple_of(16)
        && bytes <= HALF
        && res.is_none_or(|r| r.dtype() == x.dtype() && r.is_contiguous() && r.dims() == x.dims())
}

/// The sum of every rank's `x` (+ `res`) through `slot` (a rank of a group that `load`ed the
/// kernel), or None when `takes` says no. Every rank of the group must make the same calls in the
/// same order, as with NCCL.
pub fn sum(dev: &CudaDevice, slot: PeerSlot, x: &Tensor, res: Option<&Tensor>) -> Result<Option<Tensor>> {
    if !takes(x, res) || slot.ranks > RANKS {
        return Ok(None);
    }
    let name = if x.dtype() == DType::BF16 { NAMES[0] } else { NAMES[1] };
    let func = dev.get_or_load_custom_func(name, "vram_lab_peer_sum", &ptx()?)?.into_cuda_function();
    let stream = dev.cuda_stream();
    let ptr = |t: &Tensor| crate::memory::cuda_copy::start_ptr(t, &stream);
    let out = crate::memory::cuda_copy::uninit(dev, x.dtype(), x.dims().to_vec())?;
    let (px, py) = (ptr(x)?, ptr(&out)?);
    let pr = res.map(ptr).transpose()?.unwrap_or(0);
    if [px, py, pr].iter().any(|p| p % 16 != 0) {
        return Ok(None);
    }
    let (table, counters, failed) =
        (slot.base + TABLE_AT as u64, slot.base + COUNTERS_AT as u64, slot.base + FAILED_AT as u64);
    let (rank, ranks) = (slot.rank as i32, slot.ranks as i32);
    let nvec = (x.elem_count() * x.dtype().size_in_bytes() / 16) as i32;
    let half_vecs = (HALF / 16) as i64;
    let cfg = LaunchConfig { grid_dim: (BLOCKS as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
    let mut l = stream.launch_builder(&func);
    l.arg(&px).arg(&pr).arg(&py).arg(&table).arg(&counters).arg(&failed);
    l.arg(&rank).arg(&ranks).arg(&nvec).arg(&half_vecs).arg(&TIMEOUT_NS);
    // SAFETY: x, res and out hold nvec 16-byte vectors (checked above), each rank's block holds two
    // halves of half_vecs vectors, its flags, counters and table (`PeerSlot`): the kernel reads and
    // writes within them.
    unsafe { l.launch(cfg) }.map_err(|e| LabError::other(format!("peer sum kernel: {e:?}")))?;
    Ok(Some(out))
}
