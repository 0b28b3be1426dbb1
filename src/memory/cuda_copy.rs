//! Host↔device copies beside candle: pinned host buffers, a copy stream of its own, events, and
//! a tensor's device address. The stream is made with the raw driver call so cudarc stays in its
//! one-stream mode (a second cudarc stream turns on event tracking for every kernel argument of
//! candle's, slowing every later kernel launch); the order between the streams is kept with
//! explicit events instead.

use crate::error::{LabError, Result};
use candle_core::cuda_backend::cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaStream, DevicePtr, PinnedHostSlice,
};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Storage, Tensor};
use std::sync::Arc;

fn err(e: impl std::fmt::Debug) -> LabError {
    LabError::other(format!("{e:?}"))
}

/// Page-locked host memory: what the DMA engines copy from at full PCIe speed.
pub struct Pinned {
    slice: PinnedHostSlice<u8>,
}

impl Pinned {
    pub fn new(dev: &CudaDevice, bytes: usize) -> Result<Self> {
        let ctx = super::cuda::context(dev);
        // SAFETY: the bytes are written before any read (`fill` or a device→host copy).
        // Flags 0: cached, not write-combined, so the CPU may read it too.
        let slice = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes.max(1), 0) }.map_err(|e| {
            LabError::other(format!("pinning {} of host memory: {e:?}", super::fmt_bytes(bytes as u64)))
        })?;
        Ok(Self { slice })
    }

    pub fn as_slice(&self) -> Result<&[u8]> {
        self.slice.as_slice().map_err(err)
    }

    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        self.slice.as_mut_slice().map_err(err)
    }
}

/// Calls `f` with the bytes of a CPU tensor, read in place (a copy only if it is not contiguous).
pub fn with_host_bytes<R>(t: &Tensor, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(c) = &*storage else { return Err(LabError::other("host bytes of a tensor not on the CPU")) };
    let size = t.dtype().size_in_bytes();
    let (start, n) = (layout.start_offset() * size, t.elem_count() * size);
    // SAFETY: plain-old-data slices viewed as bytes, within their length.
    let bytes = unsafe {
        match t.dtype() {
            DType::BF16 => as_bytes(c.as_slice::<half::bf16>()?),
            DType::F16 => as_bytes(c.as_slice::<half::f16>()?),
            DType::F32 => as_bytes(c.as_slice::<f32>()?),
            other => return Err(LabError::Unsupported(format!("copying {other:?} tensors"))),
        }
    };
    Ok(f(&bytes[start..start + n]))
}

unsafe fn as_bytes<T>(s: &[T]) -> &[u8] {
    std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s))
}

/// The device address and byte length of a contiguous CUDA tensor.
pub fn device_ptr(t: &Tensor, stream: &CudaStream) -> Result<(sys::CUdeviceptr, usize)> {
    if !t.is_contiguous() {
        return Err(LabError::other("device_ptr of a non-contiguous tensor"));
    }
    Ok((start_ptr(t, stream)?, t.elem_count() * t.dtype().size_in_bytes()))
}

/// The device address of a CUDA tensor's first element, whatever its strides (a kernel that
/// takes the strides reads a view in place).
pub fn start_ptr(t: &Tensor, stream: &CudaStream) -> Result<sys::CUdeviceptr> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(c) = &*storage else { return Err(LabError::other("device_ptr of a tensor not on a GPU")) };
    let size = t.dtype().size_in_bytes();
    let base = match t.dtype() {
        DType::BF16 => c.as_cuda_slice::<half::bf16>()?.device_ptr(stream).0,
        DType::F16 => c.as_cuda_slice::<half::f16>()?.device_ptr(stream).0,
        DType::F32 => c.as_cuda_slice::<f32>()?.device_ptr(stream).0,
        DType::U8 => c.as_cuda_slice::<u8>()?.device_ptr(stream).0,
        DType::U32 => c.as_cuda_slice::<u32>()?.device_ptr(stream).0,
        other => return Err(LabError::Unsupported(format!("device_ptr of {other:?} tensors"))),
    };
    Ok(base + (layout.start_offset() * size) as u64)
}

/// A tensor of `shape` on `dev` whose memory is not initialised: for a kernel's output, which
/// must write every element before anything reads it (candle has no such constructor).
pub fn uninit(dev: &CudaDevice, dtype: DType, shape: Vec<usize>) -> Result<Tensor> {
    use candle_core::cuda_backend::CudaStorage;
    let len = shape.iter().product();
    // SAFETY: the elements are plain numbers; the caller's kernel writes them before any read.
    let storage = match dtype {
        DType::BF16 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<half::bf16>(len) }?, dev.clone()),
        DType::F16 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<half::f16>(len) }?, dev.clone()),
        DType::U32 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<u32>(len) }?, dev.clone()),
        DType::U8 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<u8>(len) }?, dev.clone()),
        DType::F32 => CudaStorage::wrap_cuda_slice(unsafe { dev.alloc::<f32>(len) }?, dev.clone()),
        other => return Err(LabError::Unsupported(format!("a kernel output in {other:?}"))),
    };
    Ok(Tensor::from_storage(Storage::Cuda(storage), shape, candle_core::op::BackpropOp::none(), false))
}

/// PTX compiled once per process into `cell` by `compile` (NVRTC; later callers reuse it).
pub fn ptx_once(
    cell: &'static std::sync::OnceLock<String>,
    compile: impl FnOnce() -> Result<String>,
) -> Result<String> {
    if let Some(p) = cell.get() {
        return Ok(p.clone());
    }
    let p = compile()?;
    Ok(cell.get_or_init(|| p).clone())
}

/// A non-blocking stream of its own, for copies that overlap candle's kernels.
pub struct CopyStream {
    raw: sys::CUstream,
    ctx: Arc<CudaContext>,
}

impl CopyStream {
    pub fn new(dev: &CudaDevice) -> Result<Self> {
        let ctx = super::cuda::context(dev);
        ctx.bind_to_thread().map_err(err)?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err)?;
        Ok(Self { raw, ctx })
    }

    /// host → device, queued on this stream.
    pub fn htod(&self, dst: sys::CUdeviceptr, src: &[u8]) -> Result<()> {
        // SAFETY: the caller keeps `src` alive (pinned buffers live as long as the streamer) and
        // `dst` holds `src.len()` bytes.
        unsafe { result::memcpy_htod_async(dst, src, self.raw) }.map_err(err)
    }

    pub fn record(&self, ev: &CudaEvent) -> Result<()> {
        // SAFETY: both belong to this context and are alive.
        unsafe { result::event::record(ev.cu_event(), self.raw) }.map_err(err)
    }

    pub fn wait(&self, ev: &CudaEvent) -> Result<()> {
        // SAFETY: as above.
        unsafe { result::stream::wait_event(self.raw, ev.cu_event(), sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .map_err(err)
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is alive until drop.
        unsafe { result::stream::synchronize(self.raw) }.map_err(err)
    }

    pub fn event(&self) -> Result<CudaEvent> {
        self.ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(err)
    }
}

impl Drop for CopyStream {
    fn drop(&mut self) {
        // Copies still queued read pinned buffers that are about to be freed: finish them first.
        let _ = self.synchronize();
        // SAFETY: created in `new`, destroyed once.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}

/// Copies `bytes` host → device `reps` times on candle's stream from `src` (pinned or not) and
/// returns the seconds per copy, timed with events.
pub fn time_htod(dev: &CudaDevice, dst: sys::CUdeviceptr, src: &[u8], reps: usize) -> Result<f64> {
    let stream = dev.cuda_stream();
    time_on(&stream, reps, || unsafe { result::memcpy_htod_async(dst, src, stream.cu_stream()) }.map_err(err))
}

/// Copies device → host `reps` times into `dst`; seconds per copy.
pub fn time_dtoh(dev: &CudaDevice, dst: &mut [u8], src: sys::CUdeviceptr, reps: usize) -> Result<f64> {
    let stream = dev.cuda_stream();
    let raw = stream.cu_stream();
    let dst_ptr = dst.as_mut_ptr();
    let len = dst.len();
    // SAFETY: `dst` outlives the timed copies (time_on synchronises before returning).
    time_on(&stream, reps, || {
        unsafe { result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(dst_ptr, len), src, raw) }.map_err(err)
    })
}

/// Copies device → device `reps` times; seconds per copy.
pub fn time_dtod(
    dev: &CudaDevice,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    reps: usize,
) -> Result<f64> {
    let stream = dev.cuda_stream();
    time_on(&stream, reps, || unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }.map_err(err))
}

/// Runs `op` once to warm up, then `reps` times between two timing events; seconds per run.
pub fn time_on(stream: &Arc<CudaStream>, reps: usize, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    op()?;
    let ctx = stream.context();
    // Timing events: cudarc's default flags disable timing.
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = ctx.new_event(timing).map_err(err)?;
    let end = ctx.new_event(timing).map_err(err)?;
    start.record(stream).map_err(err)?;
    for _ in 0..reps.max(1) {
        op()?;
    }
    end.record(stream).map_err(err)?;
    let ms = start.elapsed_ms(&end).map_err(err)?;
    Ok(ms as f64 / 1e3 / reps.max(1) as f64)
}
