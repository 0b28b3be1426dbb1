//! CUDA unified (managed) memory for the weights: one cuMemAllocManaged block, advice about where
//! its pages should live, prefetching, and candle tensors over parts of it.
//!
//! Safety first: asking for more managed memory than the GPU has free can hang the whole GPU
//! (the driver thrashes pages between host and device), so `alloc` refuses any block larger than
//! what cuMemGetInfo says is free minus a margin, unless the caller passes `oversubscribe` — an
//! option for one's own workstation, never used on shared GPUs, in tests or in CI.
//!
//! Candle frees a tensor's memory with cuMemFreeAsync, which is not for managed memory: the
//! block keeps one reference to every tensor made over it and forgets them when dropped (their
//! storage is never freed by candle), then frees the block itself with cuMemFree.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{result, sys};
use candle_core::cuda_backend::{CudaDevice, CudaStorage};
use candle_core::{DType, Shape, Storage, Tensor};
use std::mem::ManuallyDrop;

/// Where the pages should live (the related article's three modes, and prefetching).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// No advice: pages migrate to the processor that touches them.
    None,
    /// cudaMemAdviseSetPreferredLocation = CPU: pages stay in host memory, the GPU reads them
    /// over PCIe through a mapping.
    PreferCpu,
    /// cudaMemAdviseSetReadMostly: the GPU gets a read-only copy of each page it reads.
    ReadMostly,
}

/// Headroom kept free beside a managed block: the KV cache, activations and workspace.
pub const MARGIN: u64 = 1 << 30;

pub struct Managed {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    dev: CudaDevice,
    /// One reference to every tensor made over the block (see the module note).
    tensors: ManuallyDrop<Vec<Tensor>>,
}

fn err(what: &str) -> impl Fn(candle_core::cuda_backend::cudarc::driver::DriverError) -> LabError + '_ {
    move |e| LabError::other(format!("{what}: {e:?}"))
}

impl Managed {
    /// A managed block of `bytes`, refused when more than the GPU's free memory minus `MARGIN`
    /// unless `oversubscribe`.
    pub fn alloc(dev: &CudaDevice, bytes: usize, oversubscribe: bool) -> Result<Self> {
        let (free, _) = super::cuda::mem_info(dev)?;
        super::check_managed_request(bytes as u64, free, MARGIN, oversubscribe)?;
        super::cuda::context(dev).bind_to_thread().map_err(err("binding the context"))?;
        // SAFETY: a plain allocation; freed in Drop.
        let ptr = unsafe { result::malloc_managed(bytes.max(1), sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .map_err(err("cuMemAllocManaged"))?;
        Ok(Self { ptr, bytes, dev: dev.clone(), tensors: ManuallyDrop::new(Vec::new()) })
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Writes `data` at `offset` from the host (the pages are then in host memory).
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        if offset + data.len() > self.bytes {
            return Err(LabError::other("write past the end of a managed block"));
        }
        // SAFETY: managed memory is host-addressable; the range is inside the block and no
        // kernel uses it yet (tensors over it are made after it is written).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (self.ptr as usize + offset) as *mut u8, data.len()) };
        Ok(())
    }

    /// A tensor of `shape` and `dtype` over the block at `offset` (16-byte aligned).
    pub fn tensor(&mut self, offset: usize, shape: &Shape, dtype: DType) -> Result<Tensor> {
        let n = shape.elem_count();
        if !offset.is_multiple_of(16) || offset + n * dtype.size_in_bytes() > self.bytes {
            return Err(LabError::other("a tensor outside its managed block or misaligned"));
        }
        let stream = self.dev.cuda_stream();
        let at = self.ptr + offset as u64;
        // SAFETY: the range lies inside the block, which outlives every use (see the module note).
        let storage = unsafe {
            match dtype {
                DType::BF16 => {
                    CudaStorage::wrap_cuda_slice(stream.upgrade_device_ptr::<half::bf16>(at, n), self.dev.clone())
                }
                DType::F16 => {
                    CudaStorage::wrap_cuda_slice(stream.upgrade_device_ptr::<half::f16>(at, n), self.dev.clone())
                }
                DType::F32 => CudaStorage::wrap_cuda_slice(stream.upgrade_device_ptr::<f32>(at, n), self.dev.clone()),
                other => return Err(LabError::Unsupported(format!("managed {other:?} tensors"))),
            }
        };
        let t = Tensor::from_storage(Storage::Cuda(storage), shape.clone(), candle_core::op::BackpropOp::none(), false);
        self.tensors.push(t.clone());
        Ok(t)
    }

    fn location(&self, host: bool) -> sys::CUmemLocation {
        if host {
            sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, id: 0 }
        } else {
            sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: self.dev.cuda_stream().context().ordinal() as i32,
            }
        }
    }

    pub fn advise(&self, advice: Advice) -> Result<()> {
        use sys::CUmem_advise::*;
        let (what, host) = match advice {
            Advice::None => return Ok(()),
            Advice::PreferCpu => (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, true),
            Advice::ReadMostly => (CU_MEM_ADVISE_SET_READ_MOSTLY, false),
        };
        // SAFETY: the whole block, a valid location.
        unsafe { result::mem_advise(self.ptr, self.bytes, what, self.location(host)) }.map_err(err("cuMemAdvise"))
    }

    /// Moves every page to the GPU now (cudaMemPrefetchAsync) and waits.
    pub fn prefetch_to_gpu(&self) -> Result<()> {
        let stream = self.dev.cuda_stream();
        // SAFETY: the whole block, on candle's stream.
        unsafe { result::mem_prefetch_async(self.ptr, self.bytes, self.location(false), stream.cu_stream()) }
            .map_err(err("cuMemPrefetchAsync"))?;
        stream.synchronize().map_err(err("synchronising after the prefetch"))
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // Kernels may still read the block: finish them, then free it under candle's tensors.
        let _ = self.dev.cuda_stream().synchronize();
        // SAFETY: taken once; the tensors' storage must never reach candle's cuMemFreeAsync.
        let tensors = unsafe { ManuallyDrop::take(&mut self.tensors) };
        std::mem::forget(tensors);
        // SAFETY: allocated in `alloc`, freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}
